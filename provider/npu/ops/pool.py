"""MaxPoolFusion / AvgPoolFusion (windowed and global), NCHW: capability, rule, numpy kernels
and native lowerings.

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

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError
from provider.npu.ops import parallel
from provider.npu.ops.activation import FUSED, fused
from provider.npu.ops.buffers import pad_into, scratch
from provider.npu.ops.common import (
    FLOAT,
    NCHW,
    PAD_MODE,
    Lowered,
    Packed,
    TensorInfo,
    activation_of,
    all_checks,
    check_nchw,
    clamp_strides,
    describe,
    enum_check,
    pair,
    two_d,
    window_pads,
)
from provider.npu.ops.native_builder import StepBuilder, f32, fits_int32
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


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
    fused(y, attrs)


@register("avg_pool")
def avg_pool(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = window sum * inputs[1] (reciprocal counts, (OH, OW)); attrs as max_pool."""
    y = outputs[0]
    s = scratch(outputs, attrs)
    _reduce_windows(np.add, _padded(inputs[0], s, attrs, 0.0), y, s, attrs)
    y *= inputs[1]
    fused(y, attrs)


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
    fused(y, attrs)


# ---- rule --------------------------------------------------------------------------------


def _pool_axis(size: int, k: int, s: int, lo: int, hi: int, ceil: bool) -> tuple[int, int]:
    """Output length and the extra end padding its last window needs on one axis, as
    onnxruntime computes them: floor mode rounds span / stride toward zero, so a window
    less than a stride longer than the padded input still makes one output (over the part
    that exists), one up to two strides longer makes none (an empty output) and a longer
    one a negative length, which the caller refuses."""
    span = size + lo + hi - k
    if ceil:
        out = -(-span // s) + 1
        if (out - 1) * s >= size + lo:  # the last window must start inside the input or left pad
            out -= 1
    else:
        out = (span // s if span >= 0 else -(-span // s)) + 1
    return out, max((out - 1) * s + k - (size + lo + hi), 0)


def _pool_counts(size: int, out: int, k: int, s: int, lo: int, hi: int, include_pad: bool) -> np.ndarray:
    """How many elements each output position's window averages over, on one axis."""
    start = np.arange(out) * s - lo
    if include_pad:
        return np.minimum(start + k, size + hi) - start
    return np.minimum(start + k, size) - np.maximum(start, 0)


def _divisors(h: int, w: int, oh: int, ow: int, kernel, stride, pads, include_pad: bool,
              dtype: np.dtype) -> np.ndarray:
    """The (OH, OW) reciprocal counts an average pool multiplies its window sums by."""
    ch = _pool_counts(h, oh, kernel[0], stride[0], pads[0], pads[1], include_pad)
    cw = _pool_counts(w, ow, kernel[1], stride[1], pads[2], pads[3], include_pad)
    return (1.0 / np.outer(ch, cw)).astype(dtype)


@define("MaxPoolFusion", "AvgPoolFusion", dtypes=FLOAT, rank=(4, 4),
        check=all_checks(FUSED, NCHW, PAD_MODE, two_d("kernel_size"), two_d("strides"),
                         enum_check("round_mode", ("FLOOR", "CEIL"), "FLOOR")),
        kernels=("max_pool", "avg_pool", "global_pool"),
        note="NCHW, 2-D windows, pad_mode PAD/SAME/VALID, round_mode FLOOR/CEIL, global; "
             "AvgPool count_include_pad (extra attr) honoured")
def pool_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    check_nchw(node, x)
    n, c, h, w = x.shape
    if n and not c * h * w:  # onnxruntime's pools refuse it too
        raise InvalidModelError(f"{describe(node)}: input {x.shape} is empty: only the batch of "
                                "a pool's input may be 0")
    is_max = node.op == "MaxPoolFusion"
    act = activation_of(node)
    if node.attrs.get("global", False):
        return Lowered("global_pool", {"mode": "max" if is_max else "avg", "activation": act},
                       [0], [((n, c, 1, 1), x.dtype)])
    kernel = pair(node, "kernel_size", 1)
    stride = pair(node, "strides", 1)
    pads = window_pads(node, (h, w), kernel, stride, [1, 1], "pad")
    ceil = node.attrs.get("round_mode", "FLOOR") == "CEIL"
    oh, extra_h = _pool_axis(h, kernel[0], stride[0], pads[0], pads[1], ceil)
    ow, extra_w = _pool_axis(w, kernel[1], stride[1], pads[2], pads[3], ceil)
    if oh < 0 or ow < 0:
        raise InvalidModelError(f"{describe(node)}: the {kernel[0]}x{kernel[1]} window (stride "
                                f"{stride[0]}x{stride[1]}, pads {pads}) overhangs input {x.shape} "
                                f"by two strides or more: output {oh}x{ow} (onnxruntime refuses "
                                "it too)")
    eff = [pads[0], pads[1] + extra_h, pads[2], pads[3] + extra_w]
    hp, wp = h + eff[0] + eff[1], w + eff[2] + eff[3]
    stride = clamp_strides(stride, (oh, ow), (hp, wp))
    planned = []
    if any(eff):
        planned.append(("pad", (n, c, hp, wp), x.dtype))
    if kernel[0] > 1 and kernel[1] > 1:  # separable window reduction (_reduce_windows)
        planned.append(("rows", (n, c, hp, ow), x.dtype))
    attrs = {"kernel": kernel, "stride": stride, "pads": eff, "activation": act,
             "scratch": [s[0] for s in planned]}
    operands: list[int | np.ndarray | Packed] = [0]
    if not is_max:
        inc = bool(node.attrs.get("count_include_pad", False))
        operands.append(Packed((oh, ow), x.dtype, lambda: _divisors(
            h, w, oh, ow, kernel, stride, pads, inc, x.dtype)))
    return Lowered("max_pool" if is_max else "avg_pool", attrs, operands, [((n, c, oh, ow), x.dtype)], planned)


# ---- native lowerings --------------------------------------------------------------------


@native("max_pool", "avg_pool")
def _pool_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    x, y = ins[0], outs[0]
    if not f32(*ins, y) or len(x.shape) != 4:
        return False
    n, c, h, wd = x.shape
    _, _, oh, ow = y.shape
    if len(ins) > 1 and ins[1].shape != (oh, ow):
        return False
    top, _, left, _ = attrs["pads"]
    if (oh, ow) == (1, 1) and list(attrs["kernel"]) == [h, wd] and not any(attrs["pads"]):
        # one window over the whole plane (a classifier's final pool): a global pool; with
        # no padding an average's reciprocal count is 1 / (H * W), the global mean's
        is_max = b.op == "max_pool"
        b.set_op("global_pool")
        b.params(n * c, h * wd, is_max)
        b.slots(b.inputs[0], b.outputs[0])
        return b.activation(attrs.get("activation", "NO_ACTIVATION"))
    if not fits_int32(h, wd, *attrs["kernel"], *attrs["stride"], *attrs["pads"]):
        return False
    b.params(n * c, h, wd, oh, ow, *attrs["kernel"], *attrs["stride"], top, left)
    b.slots(b.inputs[0], b.inputs[1] if len(ins) > 1 else None, b.outputs[0])
    return b.activation(attrs.get("activation", "NO_ACTIVATION"))


@native("global_pool")
def _global_pool_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    x = ins[0]
    if not f32(x, outs[0]) or len(x.shape) != 4:
        return False
    b.params(x.shape[0] * x.shape[1], x.shape[2] * x.shape[3], attrs["mode"] == "max")
    b.slots(b.inputs[0], b.outputs[0])
    return b.activation(attrs.get("activation", "NO_ACTIVATION"))
