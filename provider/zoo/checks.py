"""Judging a model run on the NPU EP against onnxruntime CPU on the same feeds: the tolerance
float outputs are held to, the agreement asked of int8 (QDQ) models, and where the session
placed the nodes (partitions, NPU nodes, CPU nodes grouped by reason). Shared by the family
tests and the real-model benchmark so both judge alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from provider.placement import PlacementSummary

RTOL = 1e-3
INT8_LEVELS = 255  # an 8-bit grid over an output's range: one step is its "LSB"
# int8 (QDQ) runs: onnxruntime's CPU EP fuses QDQ groups into int8 kernels whose rounding
# differs from the graph as written (DequantizeLinear -> float op -> QuantizeLinear); a
# one-step flip early on moves later values by a few steps. On the int8 family detector,
# onnxruntime's fused run and its own unoptimized run agree within one step on 89.6 % of the
# outputs (cosine 0.99997); a wrong scale or kernel drops the cosine far below the bar.
INT8_MIN_WITHIN = 0.85
INT8_MIN_COSINE = 0.999


def atol(reference: np.ndarray) -> float:
    """The absolute tolerance for `reference`: max(1e-4, 1e-5 * max |reference|)."""
    return max(1e-4, 1e-5 * float(np.max(np.abs(reference)))) if reference.size else 1e-4


@dataclass(frozen=True)
class Accuracy:
    """How close every output came to onnxruntime's (worst output for each number)."""

    max_abs: float  # largest |got - want| over the float outputs
    scale: float  # largest |want| over the float outputs
    within: float  # fraction of elements within tolerance (int8: within one LSB)
    cosine: float  # lowest cosine similarity of an output with onnxruntime's
    int8: bool
    ok: bool  # float: every element within tolerance; int8: the INT8_MIN_* thresholds

    def describe(self) -> str:
        if self.int8:
            return (f"{self.within:.1%} within 1 LSB, cosine {self.cosine:.5f}, "
                    f"max |err| {self.max_abs:.2g} of {self.scale:.3g}")
        return f"max |err| {self.max_abs:.1e} of {self.scale:.3g}"


def compare(got: Sequence[np.ndarray], want: Sequence[np.ndarray], int8: bool = False
            ) -> Accuracy:
    """Compare outputs `got` with onnxruntime's `want` (same order); outputs that are not
    float (ids, lengths, masks) must be equal."""
    max_abs = scale = 0.0
    within, cosine, ok = 1.0, 1.0, True
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            raise ValueError(f"output shape {g.shape} != onnxruntime's {w.shape}")
        if w.dtype.kind != "f":
            ok = ok and bool(np.array_equal(g, w))
            continue
        g64, w64 = g.astype(np.float64).ravel(), w.astype(np.float64).ravel()
        err = np.abs(g64 - w64)
        max_abs = max(max_abs, float(err.max(initial=0.0)))
        scale = max(scale, float(np.abs(w64).max(initial=0.0)))
        norms = float(np.linalg.norm(g64) * np.linalg.norm(w64))
        if norms:
            cosine = min(cosine, float(g64 @ w64) / norms)
        elif err.any():  # one side all zeros, the other not
            cosine = 0.0
        if int8:
            lsb = (w64.max(initial=0.0) - w64.min(initial=0.0)) / INT8_LEVELS
            close = err <= lsb
        else:
            close = err <= atol(w) + RTOL * np.abs(w64)
            ok = ok and bool(close.all())
        within = min(within, float(close.mean()) if close.size else 1.0)
    if int8:
        ok = ok and within >= INT8_MIN_WITHIN and cosine >= INT8_MIN_COSINE
    return Accuracy(max_abs, scale, within, cosine, int8, ok)


def placement(session) -> PlacementSummary:
    """The placement of a `provider.InferenceSession` (from its `partition()`)."""
    return PlacementSummary.of(session.partition())
