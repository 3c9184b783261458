"""Quantization on export: weight-quantized constants (MindSpore Lite's `QUANT_WEIGHT`
nodes) turned back to float, and fully quantized nodes (`QUANT_ALL`) and QuantDTypeCast
steps written as ONNX QDQ.

A QUANT_ALL node becomes `DequantizeLinear` of each quantized input (per channel along the
op's channel axis, `channel_axis`), the float op, and `QuantizeLinear` of each output: the
QDQ form onnxruntime's quantizer writes, which the importer folds back into the same node.

MindSpore's converter with `quant_type=WEIGHT_QUANT` stores a node's float weights as
integers plus one QuantParam per tensor or per channel; MindSpore Lite's runtime rebuilds
float32 weights before running the node: per tensor `(q - zero_point) * scale`, per channel
`(q - zero_point) * scale * var_corr + mean_corr` along the op's preferred channel axis
(MatMul: the output axis of each operand; transposed conv with one group: the last axis;
Gather: its axis; otherwise axis 0). The export writes those float32 weights.
"""

from __future__ import annotations

import numpy as np

from converters.errors import InvalidModelError, UnsupportedError
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from converters.lite.quant import QUANT_ALL, check, is_quantized

QUANT_WEIGHT = "QUANT_WEIGHT"
__all__ = ["QUANT_ALL", "QUANT_WEIGHT", "weight_quantized", "dequantize", "channel_axis",
           "is_quantized", "moves_codes", "dequantize_linear", "quantize_linear"]


def weight_quantized(model: LiteModel) -> dict[int, np.ndarray]:
    """Tensor index -> float32 weights, for the integer constants of QUANT_WEIGHT nodes."""
    out: dict[int, np.ndarray] = {}
    for node in model.nodes:
        if node.quant_type != QUANT_WEIGHT:
            continue
        for position, index in enumerate(node.inputs):
            t = model.tensors[index]
            if (index in out or t.data is None or not t.quant_params
                    or not np.issubdtype(np.asarray(t.data).dtype, np.integer)):
                continue
            out[index] = dequantize(t, _preferred_axis(model, node, position, t))
    return out


def dequantize(tensor: LiteTensor, axis: int) -> np.ndarray:
    """`tensor`'s float32 weights as MindSpore Lite's weight decoder computes them."""
    if tensor.quant_clusters:
        raise UnsupportedError(f"tensor {tensor.name!r}: k-means (clustered) weight "
                               "quantization has no ONNX export")
    q = np.asarray(tensor.data).astype(np.float64)
    params = tensor.quant_params
    if len(params) == 1:
        p = params[0]
        return ((q - p.zero_point) * np.float32(p.scale)).astype(np.float32)
    if q.ndim == 0 or not 0 <= axis < q.ndim or q.shape[axis] != len(params):
        raise InvalidModelError(f"tensor {tensor.name!r}: {len(params)} quant params do not "
                                f"match axis {axis} of shape {q.shape}")
    shape = [1] * q.ndim
    shape[axis] = len(params)

    def column(values) -> np.ndarray:
        return np.array(values, np.float64).reshape(shape)

    var_corr = [p.var_corr if 0 <= p.var_corr <= 10 else 1.0 for p in params]
    scale = column([np.float32(p.scale) for p in params])
    value = (q - column([p.zero_point for p in params])) * scale
    return (value * column(var_corr) + column([p.mean_corr for p in params])).astype(np.float32)


def _preferred_axis(model: LiteModel, node: LiteNode, position: int, t: LiteTensor) -> int:
    rank = np.asarray(t.data).ndim
    a = node.attrs
    if node.op == "MatMulFusion" and rank >= 2 and position in (0, 1):
        transposed = a.get("transpose_a" if position == 0 else "transpose_b", False)
        # A's rows and B's columns are the output channels
        return rank - 1 if transposed == (position == 0) else rank - 2
    if node.op == "Conv2dTransposeFusion" and a.get("group", 1) == 1:
        return rank - 1
    if node.op == "Gather" and len(node.inputs) > 2:
        axis = model.tensors[node.inputs[2]].data
        if axis is not None:
            return int(np.asarray(axis).reshape(-1)[0]) % max(rank, 1)
    return 0


# ---- full quantization (QUANT_ALL) and QuantDTypeCast -> QDQ ------------------------------

def channel_axis(node: LiteNode, position: int, rank: int) -> int | None:
    """The per-channel axis of input `position` of a quantized node (None: per tensor only)."""
    a = node.attrs
    if node.op in ("Conv2DFusion", "FullConnection") and position in (1, 2):
        return 0
    if node.op == "Conv2dTransposeFusion" and position in (1, 2):
        return 1 if position == 1 else 0
    if node.op == "MatMulFusion" and position == 1 and rank >= 2:
        return rank - 2 if a.get("transpose_b", False) else rank - 1
    if node.op == "MatMulFusion" and position == 2:
        return 0
    return None


# Ops that only move elements: a quantized one whose input and output share a quantization
# is written as the plain op on the codes (MindSpore's full quantization marks its Transposes
# QUANT_ALL).
MOVES_CODES = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "ExpandDims"}


def moves_codes(model: LiteModel, node: LiteNode) -> bool:
    """Whether a QUANT_ALL node only moves codes of one quantization (no QDQ needed)."""
    if node.op not in MOVES_CODES or not node.inputs or len(node.outputs) != 1:
        return False
    x, y = model.tensors[node.inputs[0]], model.tensors[node.outputs[0]]
    return x.type_id == y.type_id and [(p.scale, p.zero_point) for p in x.quant_params] == \
        [(p.scale, p.zero_point) for p in y.quant_params]


def dequantize_linear(ctx, index: int, name: str, axis: int | None, hint: str,
                      out: str | None = None) -> str:
    """A DequantizeLinear of tensor `index` (ONNX value `name`) by its quantParams, into
    `out` (a fresh value when None); the float value's name."""
    t = ctx.model.tensors[index]
    scale, zp = _params(t)
    kw = {} if len(t.quant_params) == 1 or axis is None else {"axis": axis}
    if len(t.quant_params) > 1 and axis is None:
        raise InvalidModelError(f"tensor {t.name!r}: {len(t.quant_params)} quantization "
                                "parameters where one per tensor is expected")
    return ctx.add("DequantizeLinear", [name, ctx.const(scale, f"{t.name}/scale"),
                                        ctx.const(zp.astype(t.dtype), f"{t.name}/zero_point")],
                   None if out is None else [out], name=hint, **kw)


def quantize_linear(ctx, index: int, value: str, out: str, hint: str) -> None:
    """QuantizeLinear of float `value` into ONNX value `out` (tensor `index`'s codes)."""
    t = ctx.model.tensors[index]
    if len(t.quant_params) != 1:
        raise InvalidModelError(f"tensor {t.name!r}: an output quantized per channel")
    scale, zp = _params(t)
    ctx.add("QuantizeLinear", [value, ctx.const(scale.reshape(()), f"{t.name}/scale"),
                               ctx.const(zp.astype(t.dtype).reshape(()), f"{t.name}/zero_point")],
            [out], name=hint)


def _params(t: LiteTensor) -> tuple[np.ndarray, np.ndarray]:
    axis = 0 if len(t.quant_params) > 1 else None
    q = check(t.name, [p.scale for p in t.quant_params], [p.zero_point for p in t.quant_params],
              t.dtype, axis=axis)
    scale = q.scale if axis is not None else q.scale.reshape(())
    zp = q.zero_point if axis is not None else q.zero_point.reshape(())
    return scale.astype(np.float32), zp
