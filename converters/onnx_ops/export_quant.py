"""Weight-quantized constants (MindSpore Lite's `QUANT_WEIGHT` nodes) turned back to float.

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

QUANT_WEIGHT = "QUANT_WEIGHT"


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
