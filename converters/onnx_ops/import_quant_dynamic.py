"""Dynamically quantized ONNX -> Lite, node for node: DynamicQuantizeLinear becomes
DynamicQuant with ONNX's three outputs (codes, scale, zero point, computed from the data at
run time); MatMulInteger / ConvInteger become MatMulFusion / Conv2DFusion with quant_type
QUANT_DYNAMIC: integer codes and their zero points (inputs 2 and 3, zeros when absent) in,
exact int32 sums out."""

from __future__ import annotations

import dataclasses

import numpy as np

from converters.lite import dtypes
from converters.lite.quant import QUANT_DYNAMIC
from converters.onnx_ops.import_base import IMPORTERS, emit
from converters.onnx_ops.registry import Unmappable

F32 = np.dtype(np.float32)


@IMPORTERS.register("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx, node):
    if ctx.dtype(node.inputs[0]) not in (None, F32):
        raise Unmappable("DynamicQuantizeLinear of a non-float32 input")
    attrs = {"symmetric": False, "dst_type": dtypes.UINT8}
    return [emit(ctx, node, "DynamicQuant", attrs, node.inputs[:1], node.outputs)]


def _zero_points(ctx, node, codes: tuple[str, str]) -> list:
    """Inputs 2 and 3 (the zero points), a zero of the codes' type where absent."""
    out = []
    for i, code in zip((2, 3), codes, strict=True):
        name = node.inputs[i] if len(node.inputs) > i else ""
        if name:
            out.append(name)
            continue
        dtype = ctx.dtype(code)
        if dtype is None:
            raise Unmappable(f"the element type of {code!r} is unknown")
        out.append(ctx.const(f"{node.outputs[0]}/zero_point{i}", np.zeros((), dtype)))
    return out


@IMPORTERS.register("MatMulInteger", since=10)
def matmul_integer(ctx, node):
    zps = _zero_points(ctx, node, (node.inputs[0], node.inputs[1]))
    attrs = {"transpose_a": False, "transpose_b": False, "activation_type": "NO_ACTIVATION"}
    lite = emit(ctx, node, "MatMulFusion", attrs, [*node.inputs[:2], *zps])
    lite.quant_type = QUANT_DYNAMIC
    return [lite]


@IMPORTERS.register("ConvInteger", since=10)
def conv_integer(ctx, node):
    zps = _zero_points(ctx, node, (node.inputs[0], node.inputs[1]))
    view = dataclasses.replace(node, inputs=tuple(node.inputs[:2]))
    produced = IMPORTERS.lookup("Conv", ctx.opset)(ctx, view)
    lite = produced[0]
    lite.inputs += [ctx.tensor(z) if isinstance(z, str) else z for z in zps]
    lite.quant_type = QUANT_DYNAMIC
    return produced
