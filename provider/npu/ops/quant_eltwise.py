"""Integer elementwise, joining, pooling and resizing ops (QUANT_ALL): AddFusion, MulFusion,
Concat, MaxPoolFusion / AvgPoolFusion (windows and global) and Resize: rules and numpy
kernels, onnxruntime's arithmetic (QLinearAdd / QLinearMul / QLinearConcat /
QLinearGlobalAveragePool; MaxPool on codes).

- Add: `saturate(rint(float32(a - za) * (sa/sy) + float32(b - zb) * (sb/sy)) + zy)`; Mul:
  `saturate(rint(float32((a - za) * (b - zb)) * (sa*sb/sy)) + zy)` (ratios in float32).
- Concat and max pooling move codes: an input whose quantization differs from the output's
  goes through a 256-entry table (dequantize, quantize), as QLinearConcat does; the max
  of codes is the code of the max (dequantization is increasing).
- Global average pooling sums codes in integers and requantizes with
  `sx / (sy * H*W)` (float32); windowed average pooling and linear Resize run their float
  kernels between a dequantize and a quantize (`quant.wrapped`, onnxruntime's float path).
- Nearest Resize copies codes (each output is one input value), through the table when
  the output's quantization differs: the codes the float path gives, without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from converters.lite.quant import QUANT_ALL, Quant
from provider.errors import UnsupportedError
from provider.npu.native import MAX_PARAMS, MAX_SLOTS
from provider.npu.ops.buffers import pad_into, scratch
from provider.npu.ops.common import Lowered, TensorInfo, broadcast, describe
from provider.npu.ops.layout import concat_rule
from provider.npu.ops.native_builder import StepBuilder
from provider.npu.ops.pool import _reduce_windows, pool_rule
from provider.npu.ops.quant import CODES, QDATA, limits, lut, quant_of, wrapped
from provider.npu.ops.quant_conv import _requant, out_range
from provider.npu.ops.registry import define, native, register
from provider.npu.ops.resize import nearest_copy, resize, resize_rule
from provider.npu.program import Slot


def _identity(x, y) -> None:
    np.copyto(y, x)


def requant_table(qx: Quant, x_dtype: np.dtype, qy: Quant, y_dtype: np.dtype) -> np.ndarray | None:
    """The 256-entry table taking codes of qx to codes of qy (None when they are the same)."""
    if qx.same(qy) and x_dtype == y_dtype:
        return None
    return lut(_identity, qx, x_dtype, qy, y_dtype)


def _lookup(x: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:
    np.take(table, x.astype(np.int16) - limits(x.dtype)[0], out=out)


# ---- add / mul -------------------------------------------------------------------------


@register("qadd")
def qadd(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """y = saturate(rint(float32(a - za) * ra + float32(b - zb) * rb) + zy) clamped to
    attrs range (broadcasting a and b); attrs za, zb, ra, rb, zy, range."""
    a = (inputs[0].astype(np.int32) - attrs["za"]).astype(np.float32)
    b = (inputs[1].astype(np.int32) - attrs["zb"]).astype(np.float32)
    a *= np.float32(attrs["ra"])
    b *= np.float32(attrs["rb"])
    f = np.add(a, b, dtype=np.float32)
    _round_out(f, attrs, outputs[0])


@register("qmul")
def qmul(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """y = saturate(rint(float32((a - za) * (b - zb)) * m) + zy); attrs za, zb, m, zy, range."""
    a = inputs[0].astype(np.int32) - attrs["za"]
    b = inputs[1].astype(np.int32) - attrs["zb"]
    f = np.multiply(a, b).astype(np.float32)
    f *= np.float32(attrs["m"])
    _round_out(f, attrs, outputs[0])


def _round_out(f: np.ndarray, attrs: dict, out: np.ndarray) -> None:
    lo, hi = attrs["range"]
    np.rint(f, out=f)
    f += np.float32(attrs["zy"])
    np.clip(f, lo, hi, out=f)
    np.copyto(out, np.broadcast_to(f, out.shape), casting="unsafe")


@define("AddFusion", "MulFusion", dtypes=CODES, quant=QUANT_ALL, kernels=("qadd", "qmul"),
        note="per-tensor codes, numpy broadcasting; RELU/RELU6 fused")
def qbinary_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    a, b, y = ins[0], ins[1], out_types[0]
    qa, qb, qy = (quant_of(node, a, "input A"), quant_of(node, b, "input B"),
                  quant_of(node, y, "output"))
    out = broadcast(node, a.shape, b.shape)
    sa, sb, sy = (np.float32(q.scale[0]) for q in (qa, qb, qy))
    attrs = {"za": int(qa.zero_point[0]), "zb": int(qb.zero_point[0]),
             "zy": int(qy.zero_point[0]), "range": out_range(node, qy, y.dtype)}
    if node.op == "AddFusion":
        attrs.update(ra=float(np.float32(sa / sy)), rb=float(np.float32(sb / sy)))
        return Lowered("qadd", attrs, [0, 1], [(out, y.dtype)])
    attrs["m"] = float(np.float32(np.float32(sa * sb) / sy))
    return Lowered("qmul", attrs, [0, 1], [(out, y.dtype)])


# ---- concat ----------------------------------------------------------------------------


@register("qconcat")
def qconcat(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = the inputs joined along attrs axis, input i through table
    inputs[count + t] when attrs tables[i] = t (else copied)."""
    y = outputs[0]
    axis = attrs["axis"]
    count = len(attrs["tables"])
    start = 0
    for i, t in enumerate(attrs["tables"]):
        x = inputs[i]
        part = y[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)]
        if t is None:
            np.copyto(part, x)
        else:
            _lookup(x, inputs[count + t], part)
        start += x.shape[axis]


@define("Concat", dtypes=CODES, quant=QUANT_ALL, kernels=("qconcat",),
        note="inputs of other quantizations requantized by table")
def qconcat_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    y = out_types[0]
    qy = quant_of(node, y, "output")
    geometry = concat_rule(node, ins, [y.dtype])
    tables: list[int | None] = []
    operands: list = list(range(len(ins)))
    for k, x in enumerate(ins):
        qx = quant_of(node, x, f"input {k}")
        table = requant_table(qx, x.dtype, qy, y.dtype)
        if table is None:
            tables.append(None)
        else:
            tables.append(len(operands) - len(ins))
            operands.append(table)
    return Lowered("qconcat", {"axis": geometry.attrs["axis"], "tables": tables}, operands,
                   [(geometry.outputs[0][0], y.dtype)])


# ---- pooling -----------------------------------------------------------------------------


@register("qmax_pool")
def qmax_pool(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """Window max of codes (padding: the lowest code), then the table inputs[1] if any;
    attrs as max_pool (kernel, stride, pads, scratch)."""
    x, y = inputs[0], outputs[0]
    s = scratch(outputs, attrs)
    xp = pad_into(x, s["pad"], attrs["pads"], limits(x.dtype)[0]) if "pad" in s else x
    _reduce_windows(np.maximum, xp, y, s, attrs)
    if len(inputs) > 1:
        _lookup(y, inputs[1], y)


@register("qglobal_pool")
def qglobal_pool(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """Global pooling of codes: "avg" sums in integers, subtracts H*W*zx and requantizes by
    attrs mult; "max" takes the max code (then the table inputs[1] if any)."""
    x, y = inputs[0], outputs[0]
    if not y.size:
        return
    if attrs["mode"] == "max":
        np.max(x, axis=(2, 3), keepdims=True, out=y)
        if len(inputs) > 1:
            _lookup(y, inputs[1], y)
        return
    acc = x.sum(axis=(2, 3), dtype=np.int64, keepdims=True) - attrs["hw"] * attrs["zx"]
    lo, hi = attrs["range"]
    _requant(acc, np.float32(attrs["mult"]), attrs["zy"], lo, hi, y)


@define("MaxPoolFusion", "AvgPoolFusion", dtypes=CODES, quant=QUANT_ALL, rank=(4, 4),
        kernels=("qmax_pool", "qglobal_pool", "qwrap"),
        note="max on codes; global average in integers; windowed average as float")
def qpool_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x, y = ins[0], out_types[0]
    qx, qy = quant_of(node, x, "input"), quant_of(node, y, "output")
    is_max = node.op == "MaxPoolFusion"
    if node.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION":
        raise UnsupportedError(f"{describe(node)}: a fused activation on integer pooling")
    low = pool_rule(node, [TensorInfo(x.shape, x.dtype)], [x.dtype])
    shape = low.outputs[0][0]
    # an average over the whole plane (no padding: e.g. ResNet's final 7x7 pool) is global
    whole = not is_max and low.kernel == "avg_pool" and shape[2:] == (1, 1) \
        and low.attrs["kernel"] == list(x.shape[2:]) and not any(low.attrs["pads"])
    if not is_max and not node.attrs.get("global", False) and not whole:
        return wrapped(node, ins, out_types)
    table = requant_table(qx, x.dtype, qy, y.dtype)
    if node.attrs.get("global", False) or whole:
        n, c, h, w = x.shape
        attrs = {"mode": "max" if is_max else "avg", "hw": h * w, "zx": int(qx.zero_point[0]),
                 "zy": int(qy.zero_point[0]), "range": list(limits(y.dtype))}
        if not is_max:
            sx, sy = np.float32(qx.scale[0]), np.float32(qy.scale[0])
            attrs["mult"] = float(np.float32(sx / np.float32(sy * np.float32(max(h * w, 1)))))
            return Lowered("qglobal_pool", attrs, [0], [(shape, y.dtype)])
        return Lowered("qglobal_pool", attrs, [0] if table is None else [0, table],
                       [(shape, y.dtype)])
    if x.dtype != y.dtype:
        raise UnsupportedError(f"{describe(node)}: {x.dtype} in, {y.dtype} out")
    operands = low.operands if table is None else [*low.operands, table]
    return Lowered("qmax_pool", low.attrs, operands, [(shape, y.dtype)], low.scratch)


@register("qresize_nearest")
def qresize_nearest(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """Nearest resize of codes: the float kernel's nearest form (inputs x, the source row
    (OH,) and column (OW,) of each output; scratch rows), then [the table]."""
    resize(inputs[:3], outputs, attrs)
    if len(inputs) > 3:
        _lookup(outputs[0], inputs[3], outputs[0])


@define("Resize", dtypes=QDATA, quant=QUANT_ALL, const_inputs=(1, 2, 3), rank=(4, 4),
        kernels=("qresize_nearest", "qwrap"),
        note="nearest: codes copied [through a table]; linear, cubic: dequantize, the float kernel, "
        "quantize")
def qresize_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x, y = ins[0], out_types[0]
    if str(node.attrs.get("method", "LINEAR")) != "NEAREST" or x.dtype.name not in CODES \
            or y.dtype.name not in CODES:
        return wrapped(node, ins, out_types)
    table = requant_table(quant_of(node, x, "input"), x.dtype, quant_of(node, y, "output"),
                          y.dtype)
    low = resize_rule(node, [TensorInfo(x.shape, x.dtype), *ins[1:]], [x.dtype])
    operands = low.operands if table is None else [*low.operands, table]
    return Lowered("qresize_nearest", low.attrs, operands, [(low.outputs[0][0], y.dtype)],
                   low.scratch)



# ---- native lowerings ------------------------------------------------------------------


def _period(x: Sequence[int], y: Sequence[int]) -> int | None:
    """The elements after which x repeats in y: all of y's when x has y's shape, x's when
    x (leading 1s aside) is y's trailing dims; None for other broadcasts."""
    dims = list(x)
    while dims and dims[0] == 1:
        dims.pop(0)
    if tuple(dims) != tuple(y[len(y) - len(dims):]) or not math.prod(y):
        return None
    return max(1, math.prod(dims))


@native("qadd", "qmul")
def _qbinary_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A quantized Add / Mul (csrc/qeltwise.c) where each input has the output's shape or
    repeats along its leading dims (a detector's per-anchor scale: (4, N) times (N,))."""
    a, c, y = ins[0], ins[1], outs[0]
    pa, pc = _period(a.shape, y.shape), _period(c.shape, y.shape)
    if pa is None or pc is None or {a.dtype, c.dtype, y.dtype} - CODES:
        return False
    lo, hi = attrs["range"]
    b.params(math.prod(y.shape), attrs["za"], attrs["zb"], attrs["zy"], lo, hi,
             a.dtype == "int8", c.dtype == "int8", pa, pc)
    if b.op == "qadd":
        b.f[0], b.f[1] = attrs["ra"], attrs["rb"]
    else:
        b.f[0] = attrs["m"]
    b.slots(b.inputs[0], b.inputs[1], b.outputs[0])
    return True


@native("qconcat")
def _qconcat_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Codes joined along an axis, inputs of other quantizations through their tables."""
    tables, axis, y = attrs["tables"], attrs["axis"], outs[0]
    count = len(tables)
    if count > (MAX_SLOTS - 1) // 2 or 3 + 2 * count > MAX_PARAMS or y.dtype not in CODES:
        return False
    outer = math.prod(y.shape[:axis])
    params, slots = [outer, math.prod(y.shape[axis:]), count], [b.outputs[0]]
    for i, t in enumerate(tables):
        x = ins[i]
        if x.dtype not in CODES or math.prod(x.shape[:axis]) != outer:
            return False
        params += [math.prod(x.shape[axis:]), x.dtype == "int8"]
        slots += [b.inputs[i], None if t is None else b.inputs[count + t]]
    b.params(*params)
    b.slots(*slots)
    return True


@native("qglobal_pool", op="qglobalpool")
def _qglobal_pool_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Global average of 8-bit codes, requantized (csrc/qeltwise.c); the max mode stays on
    numpy."""
    x, y = ins[0], outs[0]
    if attrs["mode"] != "avg" or len(ins) != 1 or x.dtype not in CODES or y.dtype not in CODES \
            or len(x.shape) != 4 or y.shape != (*x.shape[:2], 1, 1):
        return False
    lo, hi = attrs["range"]
    n, c, h, w = x.shape
    b.params(n * c, h * w, attrs["zx"], attrs["zy"], lo, hi, x.dtype == "int8")
    b.f[0] = attrs["mult"]
    b.slots(b.inputs[0], b.outputs[0])
    return True


@native("qresize_nearest", op="qresize")
def _qresize_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Nearest resize of 8-bit codes [through a table] (csrc/qeltwise.c)."""
    x, y = ins[0], outs[0]
    if x.dtype not in CODES or y.dtype not in CODES or (len(ins) > 3 and ins[3].shape != (256,)):
        return False
    if len(ins) == 3 and x.dtype != y.dtype:
        return False
    return nearest_copy(ins, outs, b, signed=x.dtype == "int8", element_bytes=1,
                        table=b.inputs[3] if len(ins) > 3 else None)


@native("qmax_pool", op="qmaxpool")
def _qmax_pool_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Window max of 8-bit codes [through a table] (csrc/qeltwise.c)."""
    x, y = ins[0], outs[0]
    if x.dtype not in CODES or y.dtype != x.dtype or len(x.shape) != 4 or len(y.shape) != 4:
        return False
    n, c, h, w = x.shape
    _, _, oh, ow = y.shape
    (kh, kw), (sh, sw) = attrs["kernel"], attrs["stride"]
    top, _, left, _ = attrs["pads"]
    if len(ins) > 1 and ins[1].shape != (256,):
        return False
    b.params(n, c, h, w, oh, ow, kh, kw, sh, sw, top, left, x.dtype == "int8")
    b.slots(b.inputs[0], b.inputs[1] if len(ins) > 1 else None, b.outputs[0])
    return True
