"""Integer convolution and GEMM: Conv2DFusion (grouped and depthwise included),
FullConnection and MatMulFusion in their QUANT_ALL form (8-bit codes in, int32
accumulation, requantized 8-bit codes out): rules, numpy kernels.

The rules store what the kernels need once, in the Program: weights as int8 / uint8 codes
(conv: (G, O/G, C/G*KH*KW); dense: (N, K)), the bias with the input zero point folded in
(`bias - zx * sum(w - zw)`, int32, one per output channel, so the kernels multiply raw
input codes: padding holds the input zero point and contributes nothing), the weight zero
points when any is non-zero, and the float32 requantization multipliers (input scale x
weight scale / output scale, as onnxruntime's QLinearConv / QGemm / QLinearMatMul compute
them). The numpy kernels accumulate exactly in float64 GEMMs (every int8 x uint8 product
sum of any realistic depth is an exact float64 integer) and requantize like onnxruntime:
round half to even, saturate. A fused RELU / RELU6 clamps the output codes at the codes of
0 and 6.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from converters.lite.quant import QUANT_ALL, Quant
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu.ops.buffers import pad_into, scratch
from provider.npu.ops.common import (
    F32,
    Lowered,
    Packed,
    TensorInfo,
    activation_of,
    axis_of,
    broadcast,
    const,
    describe,
)
from provider.npu.ops.conv import conv2d_rule, windows
from provider.npu.ops.quant import CODES, F64, I32, limits, multiplier, quant_of, quantize
from provider.npu.ops.registry import define, register

I64 = np.dtype(np.int64)


def out_range(node: LiteNode, y: Quant, dtype: np.dtype) -> list[int]:
    """[lo, hi] output codes after the node's fused activation (RELU / RELU6 / none)."""
    lo, hi = limits(dtype)
    act = activation_of(node)
    if act == "NO_ACTIVATION":
        return [lo, hi]
    if act not in ("RELU", "RELU6"):
        raise UnsupportedError(f"{describe(node)}: fused {act} on integer codes")
    edges = np.empty(2, dtype)
    quantize(np.array([0.0, 6.0], np.float32), y.scale[0], y.zero_point[0], edges)
    return [max(lo, int(edges[0])), hi if act == "RELU" else min(hi, int(edges[1]))]


def _weights(node: LiteNode, w: TensorInfo, axis: int) -> Quant:
    """The weight's quantization: per tensor, or per output channel along `axis`."""
    return quant_of(node, w, "weight", axis if w.quant is not None and len(w.quant.params) > 1
                    else None)


def _per_channel(v: np.ndarray, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(v).reshape(-1), (channels,)).copy()


def _bias(node: LiteNode, ins: Sequence[TensorInfo], i: int, channels: int) -> np.ndarray:
    """The int32 bias codes (zeros when absent); a float or wrongly shaped bias is refused."""
    if len(ins) <= i:
        return np.zeros(channels, I64)
    b = const(node, ins, i, "bias")
    if b.dtype != I32 or b.size != channels:
        raise InvalidModelError(f"{describe(node)}: bias is {b.dtype}{list(b.shape)}, expected "
                                f"int32 codes, one per output channel ({channels})")
    return b.reshape(-1).astype(I64)


def _folded_bias(bias: np.ndarray, w_centered_sums: np.ndarray, zx: int) -> np.ndarray:
    """bias - zx * sum(w - zw) per output channel, as int32 (InvalidModelError on overflow)."""
    folded = bias - zx * w_centered_sums
    if folded.min(initial=0) < -2**31 or folded.max(initial=0) >= 2**31:
        raise InvalidModelError("a quantized bias with the input zero point folded in "
                                "overflows int32")
    return folded.astype(I32)


def _requant(acc: np.ndarray, mult: np.ndarray, zy: int, lo: int, hi: int, out: np.ndarray) -> None:
    f = acc.astype(np.float32)  # onnxruntime converts the int32 accumulator to float32
    f *= mult.astype(np.float32)
    np.rint(f, out=f)
    f += np.float32(zy)
    np.clip(f, lo, hi, out=f)
    np.copyto(out, f, casting="unsafe")


# ---- convolution -----------------------------------------------------------------------


@register("qconv2d")
def qconv2d(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW integer conv: inputs x (codes), w (G, O/G, K codes), folded bias (O,) int32,
    multipliers (O,), [weight zero points (O,)]; attrs kernel, stride, dilation, pads,
    group, zx (padding code), zy, range [lo, hi], scratch (pad)."""
    x, w, bias, mult = inputs[:4]
    y = outputs[0]
    s = scratch(outputs, attrs)
    n, o, oh, ow = y.shape
    c = x.shape[1]
    g = attrs["group"]
    kh, kw = attrs["kernel"]
    wf = w.astype(F64)
    if len(inputs) > 4:
        wf -= inputs[4].reshape(g, o // g, 1)
    xp = pad_into(x, s["pad"], attrs["pads"], attrs["zx"]) if "pad" in s else x
    xp5 = xp.reshape(n, g, c // g, *xp.shape[2:])
    cols = windows(xp5, [kh, kw], attrs["stride"], attrs["dilation"], (oh, ow))
    cols = cols.reshape(n, g, c // g * kh * kw, oh * ow).astype(F64)
    acc = np.matmul(wf, cols).reshape(n, o, oh * ow)
    acc += bias.reshape(o, 1)
    lo, hi = attrs["range"]
    _requant(acc, mult.reshape(o, 1), attrs["zy"], lo, hi, y.reshape(n, o, oh * ow))


@define("Conv2DFusion", dtypes=CODES, quant=QUANT_ALL, const_inputs=(1, 2), rank=(4, 4),
        kernels=("qconv2d",), note="int8/uint8 codes, per-tensor or per-channel weights, "
        "int32 bias; RELU/RELU6 fused")
def qconv2d_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x, y = ins[0], out_types[0]
    w = const(node, ins, 1, "weight")
    qx = quant_of(node, x, "input")
    qy = quant_of(node, y, "output")
    qw = _weights(node, ins[1], 0)
    if w.dtype.name not in CODES:
        raise UnsupportedError(f"{describe(node)}: weight codes are {w.dtype}")
    # The float rule's geometry (pads, output size); its operands and scratch are not used.
    geometry = conv2d_rule(node, [TensorInfo(x.shape, F32), TensorInfo(w.shape, F32, w)],
                           [F32])
    a = geometry.attrs
    n, c, h, wd = x.shape
    o = w.shape[0]
    g = a["group"]
    zw = _per_channel(qw.zero_point, o)
    k = math.prod(w.shape[1:])
    centered = w.reshape(o, k).astype(I64) - zw.reshape(o, 1)
    zx = int(qx.zero_point[0])
    bias = _folded_bias(_bias(node, ins, 2, o), centered.sum(axis=1), zx)
    mult = _per_channel(multiplier(qx, qw, qy), o)
    operands: list = [0, Packed((g, o // g, k), w.dtype, lambda: np.ascontiguousarray(
        w.reshape(g, o // g, k))), bias, mult]
    if zw.any():
        operands.append(zw.astype(F64))
    top, bottom, left, right = a["pads"]
    planned = []
    if any(a["pads"]):
        planned.append(("pad", (n, c, h + top + bottom, wd + left + right), x.dtype))
    attrs = {"kernel": a["kernel"], "stride": a["stride"], "dilation": a["dilation"],
             "pads": a["pads"], "group": g, "zx": zx, "zy": int(qy.zero_point[0]),
             "range": out_range(node, qy, y.dtype), "scratch": [p[0] for p in planned]}
    return Lowered("qconv2d", attrs, operands, [(geometry.outputs[0][0], y.dtype)], planned)


# ---- dense -----------------------------------------------------------------------------


@register("qdense")
def qdense(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """y (rows, N) = requantize(x (rows, K) @ (w (N, K) - zw).T + folded bias): inputs x,
    w, bias (N,) int32, multipliers (N,), [weight zero points (N,)]; attrs rows, zy, range."""
    x, w, bias, mult = inputs[:4]
    rows = attrs["rows"]
    wf = w.astype(F64)
    if len(inputs) > 4:
        wf -= inputs[4].reshape(-1, 1)
    acc = x.reshape(rows, -1).astype(F64) @ wf.T
    acc += bias
    lo, hi = attrs["range"]
    _requant(acc, mult, attrs["zy"], lo, hi, outputs[0].reshape(rows, -1))


def _dense(node: LiteNode, x: TensorInfo, w: np.ndarray, qw: Quant, bias: np.ndarray,
           y: TensorInfo, out_shape, rows: int) -> Lowered:
    """The qdense step of `x` (rows, K) times codes `w` (N, K) with quantization `qw`."""
    qx = quant_of(node, x, "input")
    qy = quant_of(node, y, "output")
    if w.dtype.name not in CODES:
        raise UnsupportedError(f"{describe(node)}: weight codes are {w.dtype}")
    nout = w.shape[0]
    zw = _per_channel(qw.zero_point, nout)
    centered = w.astype(I64) - zw.reshape(-1, 1)
    folded = _folded_bias(bias, centered.sum(axis=1), int(qx.zero_point[0]))
    operands: list = [0, w, folded, _per_channel(multiplier(qx, qw, qy), nout)]
    if zw.any():
        operands.append(zw.astype(F64))
    attrs = {"rows": rows, "zy": int(qy.zero_point[0]), "range": out_range(node, qy, y.dtype)}
    return Lowered("qdense", attrs, operands, [(out_shape, y.dtype)])


@define("FullConnection", dtypes=CODES, quant=QUANT_ALL, const_inputs=(1, 2),
        kernels=("qdense",), note="weights (out, in) per tensor or per output channel")
def qfull_connection_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    w = const(node, ins, 1, "weight")
    if w.ndim != 2:
        raise InvalidModelError(f"{describe(node)}: weight {w.shape}, expected (out, in)")
    axis = (axis_of(node, int(node.attrs.get("axis", 1)), len(x.shape))
            if node.attrs.get("use_axis", False) else len(x.shape) - 1)
    rows, k = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    if k != w.shape[1]:
        raise InvalidModelError(f"{describe(node)}: input {x.shape} flattens to K={k}, weight {w.shape}")
    qw = _weights(node, ins[1], 0)
    return _dense(node, x, w, qw, _bias(node, ins, 2, w.shape[0]), out_types[0],
                  (*x.shape[:axis], int(w.shape[0])), rows)


@register("qmatmul")
def qmatmul(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """y = requantize((a - za) @ (b - zb)) for two run-time code tensors (numpy broadcasting
    of the batch dims); attrs za, zb, zy, mult, range, transpose_a."""
    a = inputs[0].astype(F64) - attrs["za"]
    b = inputs[1].astype(F64) - attrs["zb"]
    if attrs["transpose_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_b"]:
        b = np.swapaxes(b, -1, -2)
    lo, hi = attrs["range"]
    _requant(np.matmul(a, b), np.float32(attrs["mult"]), attrs["zy"], lo, hi, outputs[0])


@define("MatMulFusion", dtypes=CODES, quant=QUANT_ALL, rank=(2, 99),
        kernels=("qdense", "qmatmul"), note="constant B per tensor or per column")
def qmatmul_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    a, b, y = ins[0], ins[1], out_types[0]
    ta, tb = bool(node.attrs.get("transpose_a", False)), bool(node.attrs.get("transpose_b", False))
    a_shape = (*a.shape[:-2], a.shape[-1], a.shape[-2]) if ta else a.shape
    b_shape = (*b.shape[:-2], b.shape[-1], b.shape[-2]) if tb else b.shape
    if len(a_shape) < 2 or len(b_shape) < 2 or a_shape[-1] != b_shape[-2]:
        raise InvalidModelError(f"{describe(node)}: cannot multiply {a.shape} by {b.shape}")
    if b.value is not None and b.value.ndim == 2 and not ta:
        # a constant B (K, N) is a dense layer's (N, K) weight; per channel along B's columns
        qb = _weights(node, b, 0 if tb else 1)
        w = b.value if tb else np.ascontiguousarray(b.value.T)
        out = (*a.shape[:-1], w.shape[0])
        return _dense(node, a, w, qb, _bias(node, ins, 2, w.shape[0]), y, out,
                      math.prod(a.shape[:-1]))
    if len(ins) > 2:
        raise UnsupportedError(f"{describe(node)}: a bias on an integer MatMul of two "
                               "run-time inputs")
    qa, qb = quant_of(node, a, "input A"), quant_of(node, b, "input B")
    qy = quant_of(node, y, "output")
    out = (*broadcast(node, a_shape[:-2], b_shape[:-2]), a_shape[-2], b_shape[-1])
    mult = float(np.float32(np.float32(qa.scale[0]) * np.float32(qb.scale[0])) / np.float32(qy.scale[0]))
    attrs = {"za": int(qa.zero_point[0]), "zb": int(qb.zero_point[0]), "zy": int(qy.zero_point[0]),
             "mult": mult, "range": out_range(node, qy, y.dtype), "transpose_a": ta,
             "transpose_b": tb}
    return Lowered("qmatmul", attrs, [0, 1], [(out, y.dtype)])
