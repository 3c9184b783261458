"""Resize (NCHW, LINEAR or NEAREST along H and W): capability, rule and numpy kernel.

The rule precomputes each output index's source indices (and linear weights) per axis as
Packed operands, made when the Program is built; the kernel only gathers and blends.
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


@register("resize")
def resize(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW resize along H and W from precomputed source indices and weights.

    inputs: x, h_lo, h_hi, h_frac (OH, 1), w_lo, w_hi, w_frac (OW,); nearest uses h_lo/w_lo only
    (attrs method "nearest" / "linear"). Linear is separable: rows first, then columns.
    Scratch after the output: rows (N, C, OH, W) [, top (N, C, OH, W), left (N, C, OH, OW)].
    """
    x, y = inputs[0], outputs[0]
    rows = outputs[1]
    if attrs["method"] == "nearest":
        np.take(x, inputs[1], axis=2, out=rows, mode="clip")
        np.take(rows, inputs[2], axis=3, out=y, mode="clip")
        return
    top, left = outputs[2], outputs[3]
    h_lo, h_hi, h_frac, w_lo, w_hi, w_frac = inputs[1:7]
    np.take(x, h_lo, axis=2, out=top, mode="clip")
    np.take(x, h_hi, axis=2, out=rows, mode="clip")
    rows -= top
    rows *= h_frac
    rows += top
    np.take(rows, w_lo, axis=3, out=left, mode="clip")
    np.take(rows, w_hi, axis=3, out=y, mode="clip")
    y -= left
    y *= w_frac
    y += left


# ---- rule --------------------------------------------------------------------------------

_NEAREST_ROUNDING = {
    "ROUND_HALF_DOWN": lambda v: np.ceil(v - 0.5),
    "ROUND_HALF_UP": lambda v: np.floor(v + 0.5),
    "NORMAL": lambda v: np.floor(v + 0.5),
    "FLOOR": np.floor,
    "CEIL": np.ceil,
}
_CHECK = all_checks(NCHW, enum_check("method", ("LINEAR", "NEAREST"), "LINEAR"),
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


def _resize_axis(node: LiteNode, size: int, out: int, method: str):
    """(source index,) for NEAREST, (low index, high index, high weight) for LINEAR."""
    mode = str(node.attrs.get("coordinate_transform_mode", "ASYMMETRIC"))
    x = _source_coords(out, size, mode)
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
    return [part(0, 0, (oh,), i64), part(0, 1, (oh,), i64), part(0, 2, (oh, 1), dtype),
            part(1, 0, (ow,), i64), part(1, 1, (ow,), i64), part(1, 2, (ow,), dtype)]


@define("Resize", dtypes=FLOAT, check=_CHECK, const_inputs=(1, 2, 3), rank=(4, 4),
        kernels=("resize",), note="NCHW; LINEAR or NEAREST; ASYMMETRIC/ALIGN_CORNERS/HALF_PIXEL; "
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
    planned = [("rows", (n, c, oh, w), x.dtype)]
    if method == "LINEAR":
        planned += [("top", (n, c, oh, w), x.dtype), ("left", (n, c, oh, ow), x.dtype)]
    attrs = {"method": method.lower(), "scratch": [s[0] for s in planned]}
    return Lowered("resize", attrs, operands, [((n, c, oh, ow), x.dtype)], planned)


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


@native("resize", op="qresize")
def _resize_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Nearest resize of float32 on the nearest copy (4-byte elements): the numpy kernel's
    two takes with clipped indices, in one pass."""
    return attrs["method"] == "nearest" and len(ins) == 3 and f32(ins[0], outs[0]) and \
        nearest_copy(ins, outs, b, signed=False, element_bytes=4, table=None)
