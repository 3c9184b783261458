"""How close a quantized tensor is to its float reference: cosine similarity, SNR (dB), max
abs error, accumulated over samples without keeping them, and top-1 agreement of class scores.

SNR is 10 log10(sum ref^2 / sum (ref - got)^2) over every element of every sample: +inf
when the values are identical.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Metrics:
    """The comparison of one tensor with its reference over all samples."""

    cosine: float
    snr_db: float
    max_abs: float
    top1: float | None = None  # fraction of samples whose argmax agrees (class-like outputs)

    def to_dict(self) -> dict:
        """JSON-ready (a non-finite SNR becomes null: identical values, or a zero reference)."""
        return {"cosine": self.cosine, "snr_db": self.snr_db if math.isfinite(self.snr_db) else None,
                "max_abs": self.max_abs, "top1": self.top1}


class Accumulator:
    """Running sums of (reference, value) pairs: `add` them sample by sample, then `metrics`."""

    def __init__(self, classes: bool = False):
        self.classes = classes
        self.ref2 = self.got2 = self.dot = self.err2 = self.max_abs = 0.0
        self.agree = self.samples = 0

    def add(self, reference: np.ndarray, value: np.ndarray) -> None:
        ref = np.asarray(reference, dtype=np.float64)
        got = np.asarray(value, dtype=np.float64)
        if ref.shape != got.shape:
            raise ValueError(f"shape {got.shape} compared with reference shape {ref.shape}")
        if self.classes:
            batch = ref.shape[0]
            self.agree += int((ref.reshape(batch, -1).argmax(1) == got.reshape(batch, -1).argmax(1)).sum())
            self.samples += batch
        ref, got = ref.ravel(), got.ravel()
        diff = ref - got
        self.ref2 += _dot(ref, ref)
        self.got2 += _dot(got, got)
        self.dot += _dot(ref, got)
        self.err2 += _dot(diff, diff)
        if diff.size:
            self.max_abs = max(self.max_abs, float(np.abs(diff).max()))

    def metrics(self) -> Metrics:
        return Metrics(cosine(self.dot, self.ref2, self.got2), snr_db(self.ref2, self.err2),
                       self.max_abs, self.agree / self.samples if self.classes and self.samples else None)


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    # einsum's own loop, not BLAS: numpy's threaded BLAS stalls next to the NPU's busy cores
    # (20 ms instead of 0.05 ms per call on a 2-core machine).
    return float(np.einsum("i,i->", a, b))


def cosine(dot: float, ref2: float, got2: float) -> float:
    """Cosine similarity from sums: 1.0 for two zero tensors, 0.0 when only one is zero."""
    if ref2 == 0.0 or got2 == 0.0:
        return 1.0 if ref2 == got2 else 0.0
    return dot / math.sqrt(ref2 * got2)


def snr_db(ref2: float, err2: float) -> float:
    """Signal-to-noise ratio in dB from the sums of squares of reference and error."""
    if err2 == 0.0:
        return math.inf
    if ref2 == 0.0:
        return -math.inf
    return 10.0 * math.log10(ref2 / err2)


def looks_like_classes(shape: tuple) -> bool:
    """Whether an output of this shape holds class scores: (batch, classes) once axes of
    size 1 after the batch are dropped, with at least 2 classes."""
    rest = [d for d in shape[1:] if d != 1]
    return len(shape) >= 2 and len(rest) == 1 and rest[0] >= 2
