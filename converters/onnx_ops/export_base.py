"""The ONNX export table and the context its op functions write through.

An export function takes `(ctx: ExportContext, node: LiteNode, ins: list[str], outs: list[str])`
and appends ONNX nodes computing `outs` from `ins` (ONNX value names of the node's inputs
and outputs, in Lite order). Layout (NHWC) and fused activations are handled around it by
the driver, so the function sees NCHW tensors and writes the un-activated result.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from converters.errors import UnsupportedError
from converters.lite import dtypes
from converters.lite.ir import LiteModel, LiteNode
from converters.lite.values import as_integers
from converters.naming import unique_name
from converters.onnx_ops.export_quant import weight_quantized
from converters.onnx_ops.registry import OpTable

EXPORTERS: OpTable = OpTable("onnx export")

# Ops whose `format` attribute (or input layout) says NHWC: exported between transposes.
LAYOUT_OPS = {"Conv2DFusion", "Conv2dTransposeFusion", "MaxPoolFusion", "AvgPoolFusion",
              "Resize", "FusedBatchNorm", "BatchNorm", "InstanceNorm", "PReLUFusion",
              "DepthToSpace", "SpaceToDepth", "LRN"}
TO_NCHW = [0, 3, 1, 2]
TO_NHWC = [0, 2, 3, 1]


def is_nhwc(ctx: ExportContext, node: LiteNode) -> bool:
    """Whether a layout op's data is NHWC: its `format` attribute, else its input's."""
    fmt = node.attrs.get("format")
    if fmt is not None:
        return fmt == "NHWC"
    first = ctx.model.tensors[node.inputs[0]]
    return first.format == "NHWC" and len(first.shape) == 4


class ExportContext:
    """State of one export: tensor names, emitted nodes and initializers, target opset."""

    def __init__(self, model: LiteModel, opset: int, skip: set[int]):
        self.model = model
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        # Values, not TensorProtos: the driver writes each one straight into the graph, so
        # weights are copied once.
        self.initializers: dict[str, np.ndarray] = {}
        self.names = _unique_names(model)
        self._taken = set(self.names)
        self._skip = skip
        self._sourced = set(model.inputs) | {o for n in model.nodes for o in n.outputs}
        self._widened = _fp16_weights_read_as_fp32(model)
        self._dequantized = weight_quantized(model)
        self.oihw: set[int] = set()  # quantized conv weights already written in OIHW order
        self.as_float: set[int] = set()  # the QUANT_ALL node's tensors being written (QDQ)

    # ---- names -------------------------------------------------------------------------
    def name(self, index: int) -> str:
        """ONNX name of Lite tensor `index`; a constant becomes an initializer on first use."""
        tensor = self.model.tensors[index]
        name = self.names[index]
        if name in self.initializers or index in self._skip:
            return name
        data = self.value(index)
        if data is None and index not in self._sourced and _empty(tensor):
            # .ms cannot tell an empty constant from an activation: nothing produces it.
            data = np.zeros(tensor.shape, tensor.dtype)
        if data is not None:
            self.initializers[name] = np.asarray(data)
        return name

    def fresh(self, hint: str) -> str:
        """A value name no tensor uses, based on `hint`."""
        return unique_name(hint, self._taken)

    # ---- emitting ----------------------------------------------------------------------
    def add(self, op_type: str, inputs: list[str], outputs: list[str] | None = None,
            name: str = "", domain: str = "", **attrs) -> str:
        """Append an ONNX node; its first output (a fresh name when `outputs` is None)."""
        if outputs is None:
            outputs = [self.fresh(f"{name or op_type}/out")]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, domain=domain,
                                           **attrs))
        return outputs[0]

    def const(self, array, hint: str) -> str:
        """A new initializer holding `array`; its name."""
        name = self.fresh(hint)
        self.initializers[name] = np.asarray(array)
        return name

    # ---- facts about Lite tensors ------------------------------------------------------
    def value(self, index: int) -> np.ndarray | None:
        """The constant data of tensor `index` (float32 for a widened float16 weight or a
        dequantized integer weight)."""
        if index in self._dequantized:
            return self._dequantized[index]
        data = self.model.tensors[index].data
        if data is not None and index in self._widened:
            return np.asarray(data, np.float32)
        return data

    def shape(self, index: int) -> tuple:
        return self.model.tensors[index].shape

    def rank(self, index: int) -> int | None:
        """Rank of a tensor, None when unknown (activations written with an empty shape)."""
        t = self.model.tensors[index]
        if t.data is not None:
            return t.data.ndim
        return len(t.shape) if t.shape else None

    def np_dtype(self, index: int, default=np.float32) -> np.dtype:
        if index in self._widened or index in self._dequantized or index in self.as_float:
            return np.dtype(np.float32)
        t = self.model.tensors[index]
        return dtypes.to_numpy(t.type_id) if dtypes.has_numpy(t.type_id) else np.dtype(default)

    def int64(self, index: int, hint: str) -> str:
        """Tensor `index` as int64 (ONNX shape-like inputs): converted constant or a Cast."""
        data = self.value(index)
        if data is not None:
            if data.dtype == np.int64:
                return self.name(index)
            return self.const(as_integers(data, hint), hint)
        return self.add("Cast", [self.name(index)], to=onnx.TensorProto.INT64)

    def const_ints(self, index: int, what: str, node: LiteNode) -> list[int]:
        data = self.value(index)
        if data is None:
            raise UnsupportedError(f"node {node.name!r} ({node.op}): {what} must be constant "
                                   "to export to ONNX")
        return as_integers(np.asarray(data), f"node {node.name!r} ({node.op}): {what}").tolist()


def _fp16_weights_read_as_fp32(model: LiteModel) -> set[int]:
    """Float16 constants read by a node that also reads a float32 activation: MindSpore Lite
    widens them (weights stored as float16 by `weight_fp16` conversion) before its float32
    kernels use them, so the export writes them as float32."""
    widened = set()
    for node in model.nodes:
        if node.op == "Custom":  # an ONNX node restored as written (e.g. CastLike's target)
            continue
        tensors = [(i, model.tensors[i]) for i in node.inputs]
        if any(t.data is None and t.type_id == dtypes.FLOAT32 for _, t in tensors):
            widened.update(i for i, t in tensors
                           if t.data is not None and t.type_id == dtypes.FLOAT16)
    return widened


def _empty(tensor) -> bool:
    return (tensor.is_static and 0 in tensor.shape and dtypes.has_numpy(tensor.type_id))


def _unique_names(model: LiteModel) -> list[str]:
    """Tensor names made unique and non-empty (MindSpore files may repeat names)."""
    seen: set[str] = set()
    return [unique_name(t.name or f"tensor_{i}", seen) for i, t in enumerate(model.tensors)]


def unsupported(node: LiteNode, why: str) -> UnsupportedError:
    return UnsupportedError(f"node {node.name!r} ({node.op}): {why} has no ONNX export")
