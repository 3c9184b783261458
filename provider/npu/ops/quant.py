"""Integer arithmetic the quantized families share, and the quantization steps themselves:
QuantDTypeCast (quantize / dequantize), 256-entry table activations, and the generic
integer form of a float op (dequantize, the float kernel, quantize).

Semantics are onnxruntime's CPU kernels', to the bit where they are exact:
- quantize (QuantizeLinear): `saturate(round_half_even(x / scale) + zero_point)`, in float32;
- dequantize (DequantizeLinear): `float32(q - zero_point) * scale`;
- requantize an int32 accumulator (QLinearConv, QLinearMatMul, QGemm, the global average
  pool): `saturate(round_half_even(float32(acc) * multiplier) + zero_point)` with the
  multiplier computed in float32 (input scale x weight scale / output scale).
An 8-bit elementwise op is a table over the 256 input codes (dequantize, the float function,
quantize), built when the Program is made: QLinearSigmoid's, and the unfused
DequantizeLinear -> op -> QuantizeLinear path, value for value. Per-channel multipliers and
tables are constant operands; scalars are step attributes. Quantization parameters come
from each tensor's quantParams (`TensorInfo.quant`), checked (`converters.lite.quant`):
malformed ones are an InvalidModelError naming the tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite import dtypes as lite_dtypes
from converters.lite.ir import LiteNode
from converters.lite.quant import QUANT_ALL, Quant
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu.ops import activation
from provider.npu.ops.common import ANY, F32, Lowered, Packed, TensorInfo, describe
from provider.npu.ops.native_builder import StepBuilder, around
from provider.npu.ops.registry import KERNELS, OPS, define, native, register
from provider.npu.program import Slot

F64 = np.dtype(np.float64)
I32 = np.dtype(np.int32)
CODES = frozenset({"int8", "uint8"})
QDATA = CODES | {"int32"}
# The integer forms' run-time dtypes (capability's table lists them with the float ones).

__all__ = ["quant_of", "requantize", "quantize", "dequantize", "multiplier", "lut"]


def quant_of(node: LiteNode, info: TensorInfo, what: str, axis: int | None = None) -> Quant:
    """The checked quantization of a quantized node's tensor (per channel along `axis`)."""
    if info.quant is None:
        raise InvalidModelError(f"{describe(node)}: {what} has no quantization parameters")
    if info.dtype.name not in QDATA:
        raise UnsupportedError(f"{describe(node)}: {what} is {info.dtype}, the NPU's integer "
                               "kernels take int8 / uint8 codes")
    shape = info.value.shape if info.value is not None else info.shape
    return info.quant.get(info.dtype, axis, shape or None)


def scalar(q: Quant) -> tuple[float, int]:
    """(scale, zero point) of a per-tensor quantization, as JSON-able step attributes."""
    return float(q.scale[0]), int(q.zero_point[0])


def limits(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def multiplier(x: Quant, w: Quant, y: Quant) -> np.ndarray:
    """x.scale * w.scale / y.scale in float32 (one per weight channel), held as float64 so
    that fp16 storage never touches it."""
    m = (np.float32(x.scale[0]) * w.scale.astype(np.float32)) / np.float32(y.scale[0])
    return m.astype(np.float32).astype(F64)


def requantize(acc: np.ndarray, mult: np.ndarray | float, zero_point: int, out: np.ndarray) -> None:
    """out = saturate(rint(float32(acc) * mult) + zero_point), mult float32 values
    broadcasting against acc (per channel: shaped to the channel axis)."""
    lo, hi = limits(out.dtype)
    f = np.asarray(acc, dtype=np.float32) * np.asarray(mult, dtype=np.float32)
    np.rint(f, out=f)
    f += np.float32(zero_point)
    np.clip(f, lo, hi, out=f)
    np.copyto(out, f, casting="unsafe")


def quantize(x: np.ndarray, scale, zero_point, out: np.ndarray) -> None:
    """QuantizeLinear: out = saturate(rint(x / scale) + zero_point) in float32 (scale and
    zero point broadcasting against x)."""
    lo, hi = limits(out.dtype)
    f = np.divide(np.asarray(x, np.float32), np.asarray(scale, np.float32), dtype=np.float32)
    np.rint(f, out=f)
    f += np.asarray(zero_point, np.float32)
    np.clip(f, lo, hi, out=f)
    np.copyto(out, f, casting="unsafe")


def dequantize(q: np.ndarray, scale, zero_point, out: np.ndarray) -> None:
    """DequantizeLinear: out = float32(q - zero_point) * scale."""
    d = (q.astype(np.int64) - np.asarray(zero_point, np.int64)).astype(np.float32)
    np.multiply(d, np.asarray(scale, np.float32), out=out, casting="same_kind")


def codes(dtype: np.dtype) -> np.ndarray:
    """Every code of an 8-bit type, in order (the index of a 256-entry table is code - min)."""
    lo, hi = limits(dtype)
    return np.arange(lo, hi + 1).astype(dtype)


def lut(fn, x: Quant, x_dtype: np.dtype, y: Quant, y_dtype: np.dtype) -> np.ndarray:
    """The table y_code[x_code - min] of `fn` (float32 -> float32, elementwise) between two
    per-tensor quantizations."""
    xs = codes(x_dtype)
    f = np.empty(xs.shape, np.float32)
    dequantize(xs, x.scale[0], x.zero_point[0], f)
    g = np.empty_like(f)
    fn(f, g)
    table = np.empty(xs.shape, y_dtype)
    quantize(g, y.scale[0], y.zero_point[0], table)
    return table


@register("qlut")
def qlut(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = table[x - min]: inputs x (8-bit codes) and the 256-entry table."""
    x, table = inputs
    lo = limits(x.dtype)[0]
    np.take(table, x.astype(np.int16) - lo, out=outputs[0])


# ---- QuantDTypeCast -------------------------------------------------------------------------


def _cast_axis(node: LiteNode, rank: int, params: int) -> int | None:
    if params <= 1:
        return None
    axis = int(node.attrs.get("axis", 0))
    if not -rank <= axis < max(rank, 1):
        raise InvalidModelError(f"{describe(node)}: per-channel axis {axis} out of range for "
                                f"rank {rank}")
    return axis % max(rank, 1)


def _channel_shaped(v: np.ndarray, rank: int, axis: int | None) -> np.ndarray:
    if axis is None:
        return v.reshape(())
    shape = [1] * rank
    shape[axis] = v.size
    return v.reshape(shape)


def _cast_operands(node: LiteNode, info: TensorInfo, q: Quant, rank: int):
    return (_channel_shaped(q.scale.astype(F64), rank, q.axis),
            _channel_shaped(q.zero_point.astype(F64), rank, q.axis))


@define("QuantDTypeCast", dtypes=ANY, kernels=("quantize", "dequantize"),
        note="float32 <-> int8 / uint8 / int32; per tensor or per channel (axis)")
def quant_cast_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Quantize (float32 -> codes) or dequantize (codes -> float32) with the code tensor's
    quantParams (the model's tensors carry them; `lowering` hands them over as for QUANT_ALL
    nodes)."""
    src = lite_dtypes.to_numpy(int(node.attrs.get("src_t", lite_dtypes.FLOAT32)))
    dst = lite_dtypes.to_numpy(int(node.attrs.get("dst_t", lite_dtypes.FLOAT32)))
    x = ins[0]
    if x.dtype != src:
        raise InvalidModelError(f"{describe(node)}: input is {x.dtype}, src_t says {src}")
    if (src == F32) == (dst == F32) or (src if dst == F32 else dst).name not in QDATA:
        raise UnsupportedError(f"{describe(node)}: cast {src} -> {dst} (the NPU quantizes "
                               "float32 to int8/uint8/int32 codes and back)")
    code = ins[0] if dst == F32 else out_types[0]
    what = "input" if dst == F32 else "output"
    rank = len(x.shape)
    params = 0 if code.quant is None else len(code.quant.params)
    q = quant_of(node, TensorInfo(x.shape, src if dst == F32 else dst, None, code.quant), what,
                 _cast_axis(node, rank, params))
    scale, zp = _cast_operands(node, x, q, rank)
    kernel = "dequantize" if dst == F32 else "quantize"
    attrs = {} if q.per_channel else {"scale": float(q.scale[0]), "zero_point": int(q.zero_point[0])}
    return Lowered(kernel, attrs, [0, scale, zp], [(x.shape, dst)])


@register("quantize")
def quantize_kernel(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] (codes) = QuantizeLinear(inputs[0], scale, zero point)."""
    quantize(inputs[0], inputs[1], inputs[2], outputs[0])


@register("dequantize")
def dequantize_kernel(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] (float32) = DequantizeLinear(inputs[0], scale, zero point)."""
    dequantize(inputs[0], inputs[1], inputs[2], outputs[0])


@native("quantize", "dequantize")
def _cast_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A per-tensor quantize / dequantize between float32 and 8-bit codes (csrc/qeltwise.c)."""
    x, y = ins[0], outs[0]
    codes, floats = (y, x) if b.op == "quantize" else (x, y)
    if "scale" not in attrs or codes.dtype not in CODES or floats.dtype != "float32" \
            or x.shape != y.shape:
        return False
    lo, hi = limits(np.dtype(codes.dtype))
    b.params(math.prod(x.shape), attrs["zero_point"], lo, hi, codes.dtype == "int8")
    b.f[0] = attrs["scale"]
    b.slots(b.inputs[0], b.outputs[0])
    return True


@native("qlut")
def _qlut_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A 256-entry table over 8-bit codes (csrc/qeltwise.c)."""
    x, table, y = ins[0], ins[1], outs[0]
    if x.dtype not in CODES or y.dtype not in CODES or table.shape != (256,) \
            or table.dtype != y.dtype or x.shape != y.shape:
        return False
    b.params(math.prod(x.shape), x.dtype == "int8")
    b.slots(b.inputs[0], b.inputs[1], b.outputs[0])
    return True


# ---- table activations ----------------------------------------------------------------------


def _float_fn(node: LiteNode):
    """The float function of an elementwise activation node (y = f(x) into y)."""
    a = node.attrs
    if node.op == "Activation":
        kind = str(a.get("activation_type", "NO_ACTIVATION"))
        if kind not in activation.ACTIVATIONS:
            raise UnsupportedError(f"{describe(node)}: activation_type {kind}")
        params = {k: float(a[k]) for k in ("alpha", "min_val", "max_val") if k in a}
        return lambda x, y: activation.apply(kind, x, y, **params,
                                             approximate=bool(a.get("approximate", False)))
    if node.op == "LeakyRelu":
        slope = float(a.get("negative_slope", 0.01))
        return lambda x, y: activation.apply("LEAKY_RELU", x, y, alpha=slope)
    lo, hi = float(a.get("min", -np.inf)), float(a.get("max", np.inf))
    return lambda x, y: np.clip(x, np.float32(lo), np.float32(hi), out=y)


@define("Activation", "LeakyRelu", "Clip", dtypes=CODES, quant=QUANT_ALL, kernels=("qlut",),
        note="a 256-entry table per node (dequantize, f, quantize)")
def qtable_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x, y = ins[0], out_types[0]
    qx = quant_of(node, x, "input")
    qy = quant_of(node, y, "output")
    fn = _float_fn(node)
    if x.dtype.name not in CODES or y.dtype.name not in CODES:
        raise UnsupportedError(f"{describe(node)}: table activations map 8-bit codes")
    table = Packed((256,), y.dtype, lambda: lut(fn, qx, x.dtype, qy, y.dtype))
    return Lowered("qlut", {}, [0, table], [(x.shape, y.dtype)])


# ---- the generic integer form of a float op -------------------------------------------------

# The per-channel axis of a constant input of a wrapped op: (Lite op, input position) -> axis.
CHANNEL_AXIS = {("Conv2dTransposeFusion", 1): 1, ("Conv2dTransposeFusion", 2): 0}


def wrapped(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """A quantized node as its float rule over dequantized inputs, its output quantized:
    onnxruntime's unfused DequantizeLinear -> op -> QuantizeLinear path, step for step."""
    infos: list[TensorInfo] = []
    qin: dict[int, tuple[float, int]] = {}
    consts: dict[int, np.ndarray] = {}
    for k, info in enumerate(ins):
        if info.quant is None:
            infos.append(info)
            continue
        axis = CHANNEL_AXIS.get((node.op, k)) if info.value is not None else None
        q = quant_of(node, info, f"input {k}", axis)
        if info.value is not None:
            f = np.empty(info.value.shape, np.float32)
            rank = info.value.ndim
            dequantize(info.value, _channel_shaped(q.scale, rank, q.axis),
                       _channel_shaped(q.zero_point, rank, q.axis), f)
            consts[k] = f
            infos.append(TensorInfo(f.shape, F32, f))
        else:
            if q.per_channel:
                raise UnsupportedError(f"{describe(node)}: per-channel activations")
            qin[k] = scalar(q)
            infos.append(TensorInfo(info.shape, F32))
    outs = [quant_of(node, t, f"output {j}") for j, t in enumerate(out_types)]
    low = OPS[node.op].rule(node, infos, [F32] * len(out_types))
    if not low.kernel or low.values is not None:
        raise UnsupportedError(f"{describe(node)}: no integer form")
    operands: list = []
    wrap_in: list = []
    for o in low.operands:
        if isinstance(o, int) and o in consts:
            operands.append(consts[o])
            wrap_in.append(None)
        else:
            operands.append(o)
            wrap_in.append(list(qin[o]) if isinstance(o, int) and o in qin else None)
    buffers = [(f"q_in{i}", ins[o].shape, F32) for i, o in enumerate(low.operands)
               if wrap_in[i] is not None]
    buffers += [(f"q_out{j}", shape, F32) for j, (shape, _) in enumerate(low.outputs)]
    attrs = {"inner": low.kernel, "attrs": low.attrs, "in": wrap_in,
             "out": [list(scalar(q)) for q in outs], "inner_scratch": len(low.scratch)}
    return Lowered("qwrap", attrs, operands,
                   [(shape, t.dtype) for (shape, _), t in zip(low.outputs, out_types, strict=True)],
                   [*low.scratch, *buffers])


@register("qwrap")
def qwrap(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """The float kernel attrs["inner"] between a dequantize of each quantized operand
    (attrs["in"][i] = [scale, zero point] or None) and a quantize of each output."""
    n_out = len(attrs["out"])
    inner_scratch = list(outputs[n_out:n_out + attrs["inner_scratch"]])
    buffers = iter(outputs[n_out + attrs["inner_scratch"]:])
    operands = []
    for x, q in zip(inputs, attrs["in"], strict=True):
        if q is None:
            operands.append(x)
            continue
        f = next(buffers)
        dequantize(x, q[0], q[1], f)
        operands.append(f)
    floats = [next(buffers) for _ in range(n_out)]
    KERNELS[attrs["inner"]].run(operands, [*floats, *inner_scratch], attrs["attrs"])
    for f, y, (scale, zp) in zip(floats, outputs[:n_out], attrs["out"], strict=True):
        quantize(f, scale, zp, y)


@native("qwrap", op="qsoftmax")
def _qwrap_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A wrapped softmax of 8-bit codes in one pass (csrc/qsoftmax.c); other wrapped kernels
    stay on numpy."""
    x, y = ins[0], outs[0]
    if attrs["inner"] != "softmax" or attrs["attrs"]["log"] or attrs["in"][0] is None \
            or len(ins) != 1 or x.dtype not in CODES or y.dtype not in CODES \
            or x.shape != y.shape or not x.shape:
        return False
    (sx, zx), (sy, zy) = attrs["in"][0], attrs["out"][0]
    axis = attrs["attrs"]["axis"]
    b.params(*around(x.shape, axis), zx,
             x.dtype == "int8", zy, *limits(np.dtype(y.dtype)))
    b.f[0], b.f[1] = sx, sy
    b.slots(b.inputs[0], b.outputs[0])
    return True


@define("Softmax", "Conv2dTransposeFusion", dtypes=QDATA, quant=QUANT_ALL, kernels=("qwrap",),
        note="dequantize, the float kernel, quantize")
def qwrap_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    return wrapped(node, ins, out_types)
