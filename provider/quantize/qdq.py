"""Reading a QDQ model: which nodes form int8 units (DequantizeLinear -> op -> QuantizeLinear
of an op with NPU int8 kernels) and which activation tensors are quantized, with the scale and
zero point to dequantize them.

A runtime that folds QDQ units (onnxruntime's CPU, the NPU importer) runs such a node in int8
whatever the quantizer was told, so this structure, not the quantizer's options, says what
runs in int8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from provider.quantize.config import NPU_INT8_OPS

# Ops all of whose inputs must be dequantized for an int8 unit (weights and bias included);
# the others need their data input (input 0) only: Resize's scales, Clip's bounds, ... stay.
_ALL_INPUTS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Mul", "Concat"})


@dataclass(frozen=True)
class QuantizedTensor:
    """An activation quantized by a QuantizeLinear node: `name` (the float tensor it
    quantizes), `quantized` (the integer tensor), its scale / zero point, the node and op
    type that produce it ("" for a graph input), and the quantized tensors that feed that node."""

    name: str
    quantized: str
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int
    producer: str
    op_type: str
    upstream: tuple[str, ...]

    def dequantize(self, value: np.ndarray) -> np.ndarray:
        """The float value DequantizeLinear gives for the integer `value`."""
        scale, zero = self.scale.astype(np.float64), self.zero_point.astype(np.float64)
        if scale.ndim == 1 and scale.size > 1:  # per axis
            shape = [1] * value.ndim
            shape[self.axis % value.ndim] = scale.size
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return (value.astype(np.float64) - zero) * scale


def int8_nodes(model: onnx.ModelProto) -> set[str]:
    """Names of the nodes that form int8 units in QDQ model `model`."""
    graph = model.graph
    made_by = {out: node for node in graph.node for out in node.output}
    read_by: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            read_by.setdefault(name, []).append(node)
    graph_outputs = {o.name for o in graph.output}

    def dequantized(name: str) -> bool:
        return name in made_by and made_by[name].op_type == "DequantizeLinear"

    units = set()
    for node in graph.node:
        if node.op_type not in NPU_INT8_OPS or not node.input:
            continue
        inputs = [i for i in node.input if i] if node.op_type in _ALL_INPUTS else node.input[:1]
        outputs_quantized = all(
            out not in graph_outputs and read_by.get(out)
            and all(r.op_type == "QuantizeLinear" for r in read_by[out])
            for out in node.output)
        if outputs_quantized and all(dequantized(i) for i in inputs):
            units.add(node.name)
    return units


def quantized_tensors(model: onnx.ModelProto) -> tuple[list[QuantizedTensor], list[str]]:
    """The activations QuantizeLinear nodes quantize, in graph order, and the names of those
    it cannot dequantize (scale or zero point not a constant)."""
    graph = model.graph
    constants = {i.name: i for i in graph.initializer}
    made_by = {out: node for node in graph.node for out in node.output}
    q_source = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    dq_source = {n.output[0]: q_source[n.input[0]] for n in graph.node
                 if n.op_type == "DequantizeLinear" and n.input[0] in q_source}
    tensors: list[QuantizedTensor] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for node in graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in constants or node.input[0] in seen:
            continue
        name = node.input[0]
        seen.add(name)
        scale = constants.get(node.input[1])
        zero = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if scale is None or (len(node.input) > 2 and node.input[2] and zero is None):
            skipped.append(name)
            continue
        scale_value = numpy_helper.to_array(scale)
        zero_value = (numpy_helper.to_array(zero) if zero is not None
                      else np.zeros_like(scale_value, dtype=np.uint8))
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        producer = made_by.get(name)
        upstream = tuple(dq_source[i] for i in producer.input if i in dq_source) if producer else ()
        tensors.append(QuantizedTensor(
            name, node.output[0], scale_value, zero_value, axis,
            producer.name if producer else "", producer.op_type if producer else "", upstream))
    return tensors, skipped
