"""Resize (NCHW, LINEAR, NEAREST or CUBIC along H and W): capability, rule, numpy kernels
and the native lowerings (nearest: csrc/qeltwise.c's copy; linear and cubic: csrc/resize.c).

The rule precomputes each output index's source indices (and linear or cubic weights) per
axis as Packed operands, made when the Program is built; the kernels only gather and blend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu.ops.common import (
    FLOAT,
    NCHW,
    Lowered,
    Packed,
    TensorInfo,
    all_checks,
    check_nchw,
    describe,
    enum_check,
)
from provider.npu.ops.native_builder import StepBuilder, f32
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


@register("resize_linear")
@register("resize")
def resize(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW resize along H and W from precomputed source indices and weights.

    inputs: x, h_lo, h_hi, h_frac (OH, 1), w_lo, w_hi, w_frac (OW,); nearest uses h_lo/w_lo only
    (attrs method "nearest" / "linear"). Linear is separable: rows first, then columns, or
    with attrs columns_first the other way. Scratch after the output: the first pass's
    result (rows: (N, C, OH, W), or (N, C, H, OW) columns first) [, its low operand, the
    second pass's low operand (the output's shape)].
    """
    x, y = inputs[0], outputs[0]
    rows = outputs[1]
    if attrs["method"] == "nearest":
        np.take(x, inputs[1], axis=2, out=rows, mode="clip")
        np.take(rows, inputs[2], axis=3, out=y, mode="clip")
        return
    h_lo, h_hi, h_frac, w_lo, w_hi, w_frac = inputs[1:7]
    if attrs.get("columns_first"):  # an upsampling along H: fewer columns to gather
        _blend(x, w_lo, w_hi, w_frac, 3, rows, outputs[2])
        _blend(rows, h_lo, h_hi, h_frac, 2, y, outputs[3])
    else:
        _blend(x, h_lo, h_hi, h_frac, 2, rows, outputs[2])
        _blend(rows, w_lo, w_hi, w_frac, 3, y, outputs[3])


@register("resize_cubic")
def resize_cubic(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW bicubic resize, columns first (as onnxruntime sums it): inputs x, h_index,
    h_weight, w_index, w_weight ((OH, 4) and (OW, 4): each output's four source indices,
    clamped, and weights); scratch after the output: the columns pass (N, C, H, OW)."""
    x, h_index, h_weight, w_index, w_weight = inputs
    y, cols = outputs
    _taps(x, w_index, w_weight, 3, cols)
    _taps(cols, h_index, h_weight, 2, y)


def _taps(x: np.ndarray, index: np.ndarray, weight: np.ndarray, axis: int, out: np.ndarray) -> None:
    """out = ((x[i0] * w0 + x[i1] * w1) + x[i2] * w2) + x[i3] * w3 along `axis`, in float32
    in that order, as csrc/resize.c computes it."""
    shape = [1] * x.ndim
    shape[axis] = -1
    np.multiply(np.take(x, index[:, 0], axis=axis), weight[:, 0].reshape(shape), out=out)
    for j in range(1, index.shape[1]):
        out += np.take(x, index[:, j], axis=axis) * weight[:, j].reshape(shape)


def _blend(x: np.ndarray, lo: np.ndarray, hi: np.ndarray, frac: np.ndarray, axis: int,
           out: np.ndarray, low: np.ndarray) -> None:
    """out = (x[hi] - x[lo]) * frac + x[lo] along `axis` (`low`: scratch for x[lo]), in
    float32 in that order, as csrc/resize.c computes it."""
    np.take(x, lo, axis=axis, out=low, mode="clip")
    np.take(x, hi, axis=axis, out=out, mode="clip")
    out -= low
    out *= frac
    out += low


# ---- rule --------------------------------------------------------------------------------

_NEAREST_ROUNDING = {
    "ROUND_HALF_DOWN": lambda v: np.ceil(v - 0.5),
    "ROUND_HALF_UP": lambda v: np.floor(v + 0.5),
    "NORMAL": lambda v: np.floor(v + 0.5),
    "FLOOR": np.floor,
    "CEIL": np.ceil,
}
_CHECK = all_checks(NCHW, enum_check("method", ("LINEAR", "NEAREST", "CUBIC"), "LINEAR"),
                    enum_check("coordinate_transform_mode",
                               ("ASYMMETRIC", "ALIGN_CORNERS", "HALF_PIXEL"), "ASYMMETRIC"),
                    enum_check("nearest_mode", tuple(_NEAREST_ROUNDING), "NORMAL"))


def _source_coords(out: int, size: int, mode: str) -> np.ndarray:
    """Source coordinate of each output index for a coordinate_transform_mode, by the ONNX
    formulas in float32 with scale = out / size, as onnxruntime evaluates them: a nearest
    resize picks the same row at an exact tie (9 -> 21 rows, half pixel: row 17 reads row
    7.0 exactly; float64 made it 6.999..., and floor took row 6)."""
    i = np.arange(out, dtype=np.float32)
    if mode == "ALIGN_CORNERS":
        if out == 1:
            return np.zeros(out, np.float32)
        return i * np.float32(size - 1) / np.float32(out - 1)
    scale = np.float32(out) / np.float32(size) if size else np.float32(1)
    if mode == "HALF_PIXEL":
        return (i + np.float32(0.5)) / scale - np.float32(0.5)
    return i / scale  # ASYMMETRIC


def _cubic_axis(node: LiteNode, x: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Each output's four source indices (floor(x) - 1 .. floor(x) + 2, clamped to the axis)
    and weights, ONNX's cubic convolution with coefficient A (`cubic_coeff`) in float32, as
    onnxruntime computes them; with `exclude_outside`, taps outside the axis weigh 0 and the
    rest are scaled to sum to 1."""
    a, one, two = np.float32(node.attrs.get("cubic_coeff", -0.75)), np.float32(1), np.float32(2)
    floor = np.floor(x)
    s = (x - floor).astype(np.float32)
    s1, t, t2 = s + one, one - s, two - s
    weight = np.stack([((a * s1 - 5 * a) * s1 + 8 * a) * s1 - 4 * a,
                       ((a + 2) * s - (a + 3)) * s * s + one,
                       ((a + 2) * t - (a + 3)) * t * t + one,
                       ((a * t2 - 5 * a) * t2 + 8 * a) * t2 - 4 * a], axis=1).astype(np.float32)
    index = floor.astype(np.int64)[:, None] - 1 + np.arange(4)
    if node.attrs.get("exclude_outside"):
        weight[(index < 0) | (index >= size)] = 0
        weight = (weight / weight.sum(axis=1, keepdims=True)).astype(np.float32)
    return np.clip(index, 0, size - 1), weight


def _resize_axis(node: LiteNode, size: int, out: int, method: str):
    """(source index,) for NEAREST, (low index, high index, high weight) for LINEAR, (four
    indices, four weights) for CUBIC."""
    mode = str(node.attrs.get("coordinate_transform_mode", "ASYMMETRIC"))
    x = _source_coords(out, size, mode)
    if method == "CUBIC":
        return _cubic_axis(node, x, size)
    if method == "NEAREST":
        rounding = _NEAREST_ROUNDING[str(node.attrs.get("nearest_mode", "NORMAL"))]
        return (np.clip(rounding(x), 0, size - 1).astype(np.int64),)
    x = np.clip(x, 0, size - 1)
    lo = np.floor(x).astype(np.int64)
    hi = np.minimum(lo + 1, size - 1)
    return lo, hi, x - lo


def _index_maps(node: LiteNode, h: int, w: int, oh: int, ow: int, method: str,
                dtype: np.dtype) -> list[Packed]:
    """The resize kernel's operands after x, each made when the Program is built."""
    def part(axis: int, i: int, shape: tuple[int, ...], dt: np.dtype) -> Packed:
        def make() -> np.ndarray:
            maps = _resize_axis(node, h, oh, method) if axis == 0 else _resize_axis(node, w, ow, method)
            return maps[i].astype(dt, copy=False).reshape(shape)
        return Packed(shape, np.dtype(dt), make)

    i64 = np.dtype(np.int64)
    if method == "NEAREST":
        return [part(0, 0, (oh,), i64), part(1, 0, (ow,), i64)]
    if method == "CUBIC":
        return [part(0, 0, (oh, 4), i64), part(0, 1, (oh, 4), dtype),
                part(1, 0, (ow, 4), i64), part(1, 1, (ow, 4), dtype)]
    return [part(0, 0, (oh,), i64), part(0, 1, (oh,), i64), part(0, 2, (oh, 1), dtype),
            part(1, 0, (ow,), i64), part(1, 1, (ow,), i64), part(1, 2, (ow,), dtype)]


@define("Resize", dtypes=FLOAT, check=_CHECK, const_inputs=(1, 2, 3), rank=(4, 4),
        kernels=("resize", "resize_linear", "resize_cubic"),
        note="NCHW; LINEAR, NEAREST or CUBIC; ASYMMETRIC/ALIGN_CORNERS/HALF_PIXEL; "
        "nearest_mode NORMAL/ROUND_HALF_DOWN/ROUND_HALF_UP/FLOOR/CEIL")
def resize_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Output size from new_height/new_width, else the last constant input, as MindSpore
    Lite reads it: 2 values (H, W) or 4 (N, H, W, C), integer sizes or float scales (output
    = scale * input rounded half away from zero)."""
    x = ins[0]
    check_nchw(node, x)
    n, c, h, w = x.shape
    method = str(node.attrs.get("method", "LINEAR"))
    oh, ow = int(node.attrs.get("new_height", 0)), int(node.attrs.get("new_width", 0))
    if not (oh > 0 and ow > 0):
        extra = [t for t in ins[1:] if t.value is not None and t.value.size]
        if not extra:
            raise UnsupportedError(f"{describe(node)}: output size is not a constant")
        v = extra[-1].value.reshape(-1)
        if v.size not in (2, 4):
            raise InvalidModelError(f"{describe(node)}: sizes/scales {v.tolist()}")
        vh, vw = (v[0], v[1]) if v.size == 2 else (v[1], v[2])
        if v.dtype.kind in "iu":
            oh, ow = int(vh), int(vw)
        else:
            oh, ow = int(math.floor(h * float(vh) + 0.5)), int(math.floor(w * float(vw) + 0.5))
        if oh <= 0 or ow <= 0:
            raise InvalidModelError(f"{describe(node)}: output size {oh}x{ow} from {v.tolist()}")
    operands: list[int | np.ndarray | Packed] = [0, *_index_maps(node, h, w, oh, ow, method, x.dtype)]
    if method == "CUBIC":
        return Lowered("resize_cubic", {"scratch": ["cols"]}, operands,
                       [((n, c, oh, ow), x.dtype)], [("cols", (n, c, h, ow), x.dtype)])
    # linear: an upsampling along H blends columns first (H x OW gathered values, not OH x OW)
    columns_first = method == "LINEAR" and oh > h
    first = (n, c, h, ow) if columns_first else (n, c, oh, w)
    planned = [("rows", first, x.dtype)]
    if method == "LINEAR":
        planned += [("top", first, x.dtype), ("left", (n, c, oh, ow), x.dtype)]
    attrs = {"method": method.lower(), "scratch": [s[0] for s in planned]}
    if columns_first:
        attrs["columns_first"] = True
    kernel = "resize_linear" if method == "LINEAR" else "resize"  # one C op per method
    return Lowered(kernel, attrs, operands, [((n, c, oh, ow), x.dtype)], planned)


# ---- native lowering ---------------------------------------------------------------------


def nearest_copy(ins: Sequence[Slot], outs: Sequence[Slot], b: StepBuilder, *, signed: bool,
                 element_bytes: int, table: int | None) -> bool:
    """The C library's nearest copy (csrc/qeltwise.c qresize) of x (NCHW) by its source row
    and column per output (int64), for codes [through a table] or float32."""
    x, rows, cols, y = ins[0], ins[1], ins[2], outs[0]
    if len(x.shape) != 4 or len(y.shape) != 4:
        return False
    n, c, h, w = x.shape
    _, _, oh, ow = y.shape
    if rows.shape != (oh,) or cols.shape != (ow,) or rows.dtype != "int64" or cols.dtype != "int64":
        return False
    b.params(n * c, h, w, oh, ow, signed, element_bytes)
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2], table, b.outputs[0])
    return True


@native("resize_linear")
def _resize_linear_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict,
                          b: StepBuilder) -> bool:
    """Bilinear resize of float32 (csrc/resize.c) from the rule's row and column tables:
    the numpy kernel's blends, without its three scratch planes."""
    if len(ins) != 7 or not f32(ins[0], ins[3], ins[6], outs[0]) or len(ins[0].shape) != 4:
        return False
    n, c, h, w = ins[0].shape
    oh, ow = outs[0].shape[2:]
    tables = ((ins[1], (oh,)), (ins[2], (oh,)), (ins[4], (ow,)), (ins[5], (ow,)))
    if any(t.dtype != "int64" or t.shape != shape for t, shape in tables) or \
            ins[3].shape != (oh, 1) or ins[6].shape != (ow,):
        return False
    b.params(n * c, h, w, oh, ow, bool(attrs.get("columns_first")))
    b.slots(*b.inputs[:7], b.outputs[0])
    return True


@native("resize_cubic")
def _resize_cubic_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict,
                         b: StepBuilder) -> bool:
    """Bicubic resize of float32 (csrc/resize.c) from the rule's four-tap tables: the numpy
    kernel's sums, without its columns plane."""
    if len(ins) != 5 or not f32(ins[0], ins[2], ins[4], outs[0]) or len(ins[0].shape) != 4:
        return False
    n, c, h, w = ins[0].shape
    oh, ow = outs[0].shape[2:]
    tables = ((ins[1], (oh, 4), "int64"), (ins[2], (oh, 4), "float32"),
              (ins[3], (ow, 4), "int64"), (ins[4], (ow, 4), "float32"))
    if any(t.dtype != dtype or t.shape != shape for t, shape, dtype in tables):
        return False
    b.params(n * c, h, w, oh, ow)
    b.slots(*b.inputs[:5], b.outputs[0])
    return True


@native("resize", op="qresize")
def _resize_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Nearest resize of float32 on the nearest copy (4-byte elements): the numpy kernel's
    two takes with clipped indices, in one pass."""
    return attrs["method"] == "nearest" and len(ins) == 3 and f32(ins[0], outs[0]) and \
        nearest_copy(ins, outs, b, signed=False, element_bytes=4, table=None)
