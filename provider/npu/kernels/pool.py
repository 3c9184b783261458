"""MaxPoolFusion / AvgPoolFusion (windowed and global), NCHW.

Windows are visited tap by tap (vectorised ufunc calls over the whole tensor) instead of
reducing a 6-D strided view, which numpy does far faster; a KH x KW window is reduced along
W into the `rows` scratch first, then along H (KH + KW calls instead of KH*KW), split over
the NPU's cores by channel for large tensors. Ceil mode and explicit pads arrive
as pads (the compiler extends bottom/right so the last window fits); average pooling divides by
a per-position reciprocal count the compiler precomputes (count_include_pad or not).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provider.npu.kernels import activation, parallel
from provider.npu.kernels.conv import pad_into, scratch
from provider.npu.kernels.registry import register


def _fold(op: np.ufunc, out: np.ndarray, taps: list[np.ndarray]) -> None:
    """out = op(...op(taps[0], taps[1])..., taps[-1]), accumulated in out."""
    np.copyto(out, taps[0])
    for tap in taps[1:]:
        op(out, tap, out=out)


def _reduce_windows(op: np.ufunc, x: np.ndarray, y: np.ndarray, s: dict[str, np.ndarray],
                    attrs: dict) -> None:
    """y = op-reduction of every window of x (padded NCHW): along W into s["rows"] (when
    planned), then along H; channel blocks go to the NPU's cores."""
    kh, kw = attrs["kernel"]
    sh, sw = attrs["stride"]
    n, c, oh, ow = y.shape
    if not y.size:  # nothing to write (the tap slices below assume OH, OW >= 1)
        return
    rows = s.get("rows")

    def reduce(ch: slice) -> None:
        src, dst = x[:, ch], y[:, ch]
        if rows is None:
            taps = [src[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
                    for i in range(kh) for j in range(kw)]
        else:  # separable: the W taps into rows (N, C, Hp, OW), then the H taps of rows
            mid = rows[:, ch]
            _fold(op, mid, [src[:, :, :, j:j + (ow - 1) * sw + 1:sw] for j in range(kw)])
            taps = [mid[:, :, i:i + (oh - 1) * sh + 1:sh] for i in range(kh)]
        _fold(op, dst, taps)

    work = n * c * (x.shape[2] * ow * kw + oh * ow * kh)
    parallel.run(reduce, parallel.blocks(c, work / parallel.ELEMENTS_PER_US))


def _padded(x: np.ndarray, s: dict[str, np.ndarray], attrs: dict, value: float) -> np.ndarray:
    return pad_into(x, s["pad"], attrs["pads"], value) if "pad" in s else x


@register("max_pool")
def max_pool(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = window max; attrs kernel, stride, pads, activation, scratch (pad, rows)."""
    y = outputs[0]
    s = scratch(outputs, attrs)
    _reduce_windows(np.maximum, _padded(inputs[0], s, attrs, -np.inf), y, s, attrs)
    activation.fused(y, attrs)


@register("avg_pool")
def avg_pool(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = window sum * inputs[1] (reciprocal counts, (OH, OW)); attrs as max_pool."""
    y = outputs[0]
    s = scratch(outputs, attrs)
    _reduce_windows(np.add, _padded(inputs[0], s, attrs, 0.0), y, s, attrs)
    y *= inputs[1]
    activation.fused(y, attrs)


@register("global_pool")
def global_pool(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] (N, C, 1, 1) = max or mean over H, W (attrs mode "max"/"avg", activation)."""
    x, y = inputs[0], outputs[0]
    if not y.size:  # an empty batch: nothing to write (numpy warns of a mean of an empty plane)
        return
    if attrs["mode"] == "max":
        np.max(x, axis=(2, 3), keepdims=True, out=y)
    else:
        np.mean(x, axis=(2, 3), keepdims=True, out=y, dtype=np.float32)
    activation.fused(y, attrs)
