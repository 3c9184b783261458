"""MaxPoolFusion / AvgPoolFusion (windowed and global), NCHW.

Windows are visited tap by tap (KH*KW vectorised ufunc calls over the whole tensor) instead of
reducing a 6-D strided view, which numpy does far faster. Ceil mode and explicit pads arrive
as pads (the compiler extends bottom/right so the last window fits); average pooling divides by
a per-position reciprocal count the compiler precomputes (count_include_pad or not).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provider.npu.kernels import activation
from provider.npu.kernels.conv import pad_into, scratch
from provider.npu.kernels.registry import register


def _taps(x: np.ndarray, y: np.ndarray, attrs: dict):
    """Yield the (N, C, OH, OW) strided view of x for every kernel tap."""
    kh, kw = attrs["kernel"]
    sh, sw = attrs["stride"]
    oh, ow = y.shape[2], y.shape[3]
    for i in range(kh):
        for j in range(kw):
            yield x[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]


def _padded(x: np.ndarray, outputs: Sequence[np.ndarray], attrs: dict, value: float):
    s = scratch(outputs, attrs)
    return pad_into(x, s["pad"], attrs["pads"], value) if "pad" in s else x


@register("max_pool")
def max_pool(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = window max; attrs kernel, stride, pads, activation, scratch (pad)."""
    y = outputs[0]
    xp = _padded(inputs[0], outputs, attrs, -np.inf)
    taps = _taps(xp, y, attrs)
    np.copyto(y, next(taps))
    for tap in taps:
        np.maximum(y, tap, out=y)
    activation.fused(y, attrs)


@register("avg_pool")
def avg_pool(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = window sum * inputs[1] (reciprocal counts, (OH, OW)); attrs as max_pool."""
    y = outputs[0]
    xp = _padded(inputs[0], outputs, attrs, 0.0)
    taps = _taps(xp, y, attrs)
    np.copyto(y, next(taps))
    for tap in taps:
        y += tap
    y *= inputs[1]
    activation.fused(y, attrs)


@register("global_pool")
def global_pool(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] (N, C, 1, 1) = max or mean over H, W (attrs mode "max"/"avg", activation)."""
    x, y = inputs[0], outputs[0]
    if attrs["mode"] == "max":
        np.max(x, axis=(2, 3), keepdims=True, out=y)
    else:
        np.mean(x, axis=(2, 3), keepdims=True, out=y, dtype=np.float32)
    activation.fused(y, attrs)
