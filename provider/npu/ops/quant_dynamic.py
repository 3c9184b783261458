"""Dynamic quantization (onnxruntime's `quantize_dynamic`): DynamicQuant (ONNX
DynamicQuantizeLinear: codes, scale and zero point computed from the data at run time) and
the QUANT_DYNAMIC forms of MatMulFusion and Conv2DFusion (MatMulInteger / ConvInteger:
codes and zero points in, exact int32 sums out): rules and numpy kernels.

DynamicQuantizeLinear as onnxruntime computes it: the data's range widened to hold 0,
scale = (max - min) / 255 (1 when the range is empty), zero point = round half to even of
clamp(0 - min / scale, 0, 255), then QuantizeLinear; all in float32. The integer products
are exact (float64 sums of int8 x uint8 products).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from converters.lite import dtypes as lite_dtypes
from converters.lite.ir import LiteNode
from converters.lite.quant import QUANT_DYNAMIC
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu.ops.common import F32, Lowered, TensorInfo, broadcast, describe
from provider.npu.ops.conv import conv2d_rule, windows
from provider.npu.ops.quant import CODES, F64, I32, quantize
from provider.npu.ops.registry import define, register

U8 = np.dtype(np.uint8)


@register("dynamic_quantize")
def dynamic_quantize(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs: codes (uint8, the input's shape), scale (float32, ()), zero point (uint8, ())."""
    x = inputs[0]
    y, scale_out, zp_out = outputs
    lo = np.float32(min(np.float32(x.min(initial=0.0)), np.float32(0.0)))
    hi = np.float32(max(np.float32(x.max(initial=0.0)), np.float32(0.0)))
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255.0))
    zp = np.float32(np.rint(np.clip(np.float32(0.0) - lo / scale, 0.0, 255.0)))
    scale_out[...] = scale
    zp_out[...] = zp
    quantize(x, scale, zp, y)


@define("DynamicQuant", dtypes=frozenset({"float32", "uint8"}), kernels=("dynamic_quantize",),
        note="ONNX DynamicQuantizeLinear: uint8 codes, scale, zero point")
def dynamic_quant_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    if x.dtype != F32 or int(node.attrs.get("dst_type", lite_dtypes.UINT8)) != lite_dtypes.UINT8 \
            or node.attrs.get("symmetric", False) or len(node.outputs) != 3:
        raise UnsupportedError(f"{describe(node)}: the NPU runs ONNX's DynamicQuantizeLinear "
                               "(float32 to asymmetric uint8, three outputs)")
    return Lowered("dynamic_quantize", {}, [0], [(x.shape, U8), ((), F32), ((), U8)])


def _centered(x: np.ndarray, zp: np.ndarray, axis: int | None = None) -> np.ndarray:
    """x - zero point in float64 (a per-column zero point along `axis`)."""
    z = np.asarray(zp, F64)
    if z.ndim and axis is not None:
        shape = [1] * x.ndim
        shape[axis] = z.size
        z = z.reshape(shape)
    return x.astype(F64) - z


@register("qmatmul_int32")
def qmatmul_int32(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """y (int32) = (a - a_zp) @ (b - b_zp); b's zero point per tensor or per column."""
    a, b, za, zb = inputs
    np.copyto(outputs[0], np.matmul(_centered(a, za), _centered(b, zb, b.ndim - 1)),
              casting="unsafe")


def _zero_point(node: LiteNode, ins: Sequence[TensorInfo], i: int, of: TensorInfo,
                count: int) -> None:
    zp = ins[i]
    if zp.dtype != of.dtype:
        raise InvalidModelError(f"{describe(node)}: zero point {i} is {zp.dtype}, its codes {of.dtype}")
    size = int(np.prod(zp.shape))
    if size not in (1, count):
        raise InvalidModelError(f"{describe(node)}: zero point {i} has {size} values for "
                                f"{count} channels")


@define("MatMulFusion", dtypes=CODES | {"int32"}, quant=QUANT_DYNAMIC, rank=(2, 99), ranked=2,
        kernels=("qmatmul_int32",), note="ONNX MatMulInteger: int32 sums")
def qmatmul_int32_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    if len(ins) != 4:
        raise InvalidModelError(f"{describe(node)}: expected codes A, B and their zero points")
    a, b = ins[0], ins[1]
    if a.dtype.name not in CODES or b.dtype.name not in CODES:
        raise UnsupportedError(f"{describe(node)}: {a.dtype} x {b.dtype} (8-bit codes)")
    if len(a.shape) < 2 or len(b.shape) < 2 or a.shape[-1] != b.shape[-2]:
        raise InvalidModelError(f"{describe(node)}: cannot multiply {a.shape} by {b.shape}")
    _zero_point(node, ins, 2, a, a.shape[-2])
    _zero_point(node, ins, 3, b, b.shape[-1])
    out = (*broadcast(node, a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    return Lowered("qmatmul_int32", {}, [0, 1, 2, 3], [(out, I32)])


@register("qconv_int32")
def qconv_int32(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """y (int32) = conv(x - x_zp, w - w_zp) (padding holds x_zp); w's zero point per tensor
    or per output channel; attrs kernel, stride, dilation, pads, group."""
    x, w, zx, zw = inputs
    y = outputs[0]
    n, o, oh, ow = y.shape
    c = x.shape[1]
    g = attrs["group"]
    top, bottom, left, right = attrs["pads"]
    xc = np.pad(_centered(x, zx), ((0, 0), (0, 0), (top, bottom), (left, right)))
    cols = windows(xc.reshape(n, g, c // g, *xc.shape[2:]), attrs["kernel"], attrs["stride"],
                   attrs["dilation"], (oh, ow)).reshape(n, g, -1, oh * ow)
    wc = _centered(w, zw, 0).reshape(g, o // g, -1)
    np.copyto(y, np.matmul(wc, cols).reshape(y.shape), casting="unsafe")


@define("Conv2DFusion", dtypes=CODES | {"int32"}, quant=QUANT_DYNAMIC, const_inputs=(1,),
        rank=(4, 4), kernels=("qconv_int32",), note="ONNX ConvInteger: int32 sums")
def qconv_int32_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    if len(ins) != 4:
        raise InvalidModelError(f"{describe(node)}: expected codes x, w and their zero points")
    x, w = ins[0], ins[1]
    if x.dtype.name not in CODES or w.dtype.name not in CODES:
        raise UnsupportedError(f"{describe(node)}: {x.dtype} x {w.dtype} (8-bit codes)")
    _zero_point(node, ins, 2, x, 1)
    _zero_point(node, ins, 3, w, w.shape[0])
    geometry = conv2d_rule(node, [TensorInfo(x.shape, F32), TensorInfo(w.shape, F32, w.value)],
                           [F32])
    a = geometry.attrs
    attrs = {k: a[k] for k in ("kernel", "stride", "dilation", "pads", "group")}
    return Lowered("qconv_int32", attrs, [0, 1, 2, 3], [(geometry.outputs[0][0], I32)])
