"""OrtGraph -> `converters.graph_view.GraphView`: the importer reads onnxruntime's graphs too.

onnxruntime hands GetCapability and Compile an `OrtGraph` (the whole model, or one fused
partition). `read_graph` reads it through the C API into plain Python (`OrtGraphReader`), and
`view` / `node_view_graph` build the GraphViews the importer consumes: the whole graph, or one
node with its constants (to ask the NPU about a single candidate).

Limits: GRAPH attributes (If/Loop/Scan bodies) and attribute kinds the C API cannot read are
left out; such nodes carry an `unreadable` reason and are never claimed. Initializers of types
numpy lacks (strings, float8) are not read either.
"""

from __future__ import annotations

import ctypes as C
from dataclasses import dataclass

import numpy as np

from converters.graph_view import GraphView, NodeView, ValueInfo, normalize_domain
from provider.ort import abi

ONNX_TYPE_TENSOR = 1
PARENT_NODE_RELIABLE_SINCE = 31  # Graph_GetParentNode is NULL for subgraphs on 1.23; right on 1.31


@dataclass(frozen=True)
class OrtNode:
    """One node of an OrtGraph: its address (for AddNodesToFuse) and its view."""

    address: int
    view: NodeView
    unreadable: str | None = None  # why some attribute could not be read (never claimed)


@dataclass(frozen=True)
class OrtGraphContents:
    """Everything read from one OrtGraph."""

    name: str
    nested: bool  # a control-flow body (If/Loop/Scan subgraph), not the main graph
    nodes: tuple[OrtNode, ...]
    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]
    initializers: dict[str, np.ndarray]
    value_info: dict[str, ValueInfo]
    opset: dict[str, int]

    def view(self) -> GraphView:
        """The whole graph as a GraphView."""
        return GraphView(self.name, tuple(n.view for n in self.nodes), self.inputs, self.outputs,
                         self.initializers, self.value_info, self.opset)

    def node_graph(self, node: OrtNode) -> GraphView:
        """A GraphView of `node` alone: its non-constant inputs become graph inputs."""
        consts = {n: self.initializers[n] for n in node.view.inputs if n in self.initializers}
        inputs = tuple(self._info(n) for n in dict.fromkeys(node.view.inputs) if n and n not in consts)
        outputs = tuple(self._info(n) for n in node.view.outputs if n)
        return GraphView(node.view.name, (node.view,), inputs, outputs, consts, {}, self.opset)

    def _info(self, name: str) -> ValueInfo:
        return self.value_info.get(name) or ValueInfo(name)


class OrtGraphReader:
    """Reads OrtGraph / OrtNode / OrtValueInfo objects through the C API."""

    def __init__(self, ort: abi.Ort, copy_initializers: bool, nodes_in_full: bool = True):
        self.ort = ort
        self.copy_initializers = copy_initializers
        self.nodes_in_full = nodes_in_full
        self.value_info: dict[str, ValueInfo] = {}
        self.initializers: dict[str, np.ndarray] = {}

    def read(self, graph: int) -> OrtGraphContents:
        o = self.ort
        inputs = [self.value(v) for v in o.array("Graph_GetNumInputs", "Graph_GetInputs", graph)]
        outputs = [self.value(v) for v in o.array("Graph_GetNumOutputs", "Graph_GetOutputs", graph)]
        initializer_names = {self.value(v).name for v in
                             o.array("Graph_GetNumInitializers", "Graph_GetInitializers", graph)}
        nodes = tuple(self.node(n) for n in o.array("Graph_GetNumNodes", "Graph_GetNodes", graph))
        parent = abi.vp()
        o.api.Graph_GetParentNode(graph, C.byref(parent))
        nested = bool(parent.value)
        if not nested and o.runtime_version < PARENT_NODE_RELIABLE_SINCE:
            # onnxruntime 1.23 reports no parent for If/Loop/Scan bodies: recognise them by
            # reading values from an enclosing graph, or by having no inputs at all.
            defined = {vi.name for vi in inputs} | initializer_names | {""}
            defined |= {name for n in nodes for name in n.view.outputs}
            nested = not inputs or any(name not in defined for n in nodes for name in n.view.inputs)
        return OrtGraphContents(
            name=o.string("Graph_GetName", graph),
            nested=nested,
            nodes=nodes,
            inputs=tuple(v for v in inputs if v.name not in self.initializers),
            outputs=tuple(outputs),
            initializers=dict(self.initializers),
            value_info=dict(self.value_info),
            opset=self.opset(graph),
        )

    def opset(self, graph: int) -> dict[str, int]:
        n = abi.sz()
        self.ort.api.Graph_GetNumOperatorSets(graph, C.byref(n))
        domains = (C.c_char_p * n.value)()
        versions = (C.c_int64 * n.value)()
        if n.value:
            self.ort.api.Graph_GetOperatorSets(graph, domains, versions, n.value)
        return {normalize_domain((d or b"").decode()): int(v) for d, v in zip(domains, versions, strict=True)}

    def value(self, value_info: int) -> ValueInfo:
        """Name, type and shape of an OrtValueInfo; constants are also read into `initializers`."""
        o = self.ort
        name = o.string("GetValueInfoName", value_info)
        if name in self.value_info:
            return self.value_info[name]
        info = ValueInfo(name, *self._type(value_info))
        self.value_info[name] = info
        is_const = C.c_bool()
        o.api.ValueInfo_IsConstantInitializer(value_info, C.byref(is_const))
        if is_const.value and info.elem_type in abi.ELEMENT_TO_NUMPY:
            value = abi.vp()
            o.api.ValueInfo_GetInitializerValue(value_info, C.byref(value))
            array = o.value_array(value.value)
            self.initializers[name] = array.copy() if self.copy_initializers else _readonly(array)
        return info

    def _type(self, value_info: int) -> tuple[int, tuple | None]:
        o = self.ort
        type_info = abi.vp()
        o.api.GetValueInfoTypeInfo(value_info, C.byref(type_info))
        onnx_type = C.c_int()
        o.api.GetOnnxTypeFromTypeInfo(type_info, C.byref(onnx_type))
        if onnx_type.value != ONNX_TYPE_TENSOR:
            return 0, None
        tensor_info = abi.vp()
        o.api.CastTypeInfoToTensorInfo(type_info, C.byref(tensor_info))
        if not tensor_info.value:
            return 0, None
        elem, dims, symbols = o.tensor_info(tensor_info.value)
        if not dims and o.api.available("TensorTypeAndShape_HasShape") and \
                not o.api.TensorTypeAndShape_HasShape(tensor_info.value):
            return elem, None  # rank unknown (before onnxruntime 1.24 this reads as a scalar)
        shape = tuple(d if d >= 0 else (s or None) for d, s in zip(dims, symbols, strict=True))
        return elem, shape

    def node(self, node: int) -> OrtNode:
        """A node; not in full: its inputs and outputs by name only, no attributes."""
        o = self.ort
        names = []
        for getter in (("Node_GetNumInputs", "Node_GetInputs"),
                       ("Node_GetNumOutputs", "Node_GetOutputs"),
                       ("Node_GetNumImplicitInputs", "Node_GetImplicitInputs")):
            values = o.array(*getter, node) if self.nodes_in_full or getter[0] != \
                "Node_GetNumImplicitInputs" else []
            names.append(tuple(("" if not v else self.value(v).name if self.nodes_in_full
                                else o.string("GetValueInfoName", v)) for v in values))
        attrs, unreadable = {}, None
        for attr in o.array("Node_GetNumAttributes", "Node_GetAttributes", node) \
                if self.nodes_in_full else []:
            try:
                kind = C.c_int()
                o.api.OpAttr_GetType(attr, C.byref(kind))
                if kind.value == abi.ATTR_GRAPH:
                    unreadable = "has subgraph attributes (control flow stays on CPU)"
                    continue
                attrs[o.string("OpAttr_GetName", attr)] = self.attribute(attr, kind.value)
            except (abi.OrtCallError, ValueError) as e:
                unreadable = f"an attribute cannot be read through the C API: {e}"
        view = NodeView(
            name=o.string("Node_GetName", node),
            op_type=o.string("Node_GetOperatorType", node),
            domain=normalize_domain(o.string("Node_GetDomain", node)),
            inputs=names[0],
            outputs=names[1],
            attrs=attrs,
            implicit_inputs=tuple(n for n in names[2] if n),  # outer values its bodies read
        )
        return OrtNode(node, view, unreadable)

    def attribute(self, attr: int, kind: int):
        """One attribute as a plain Python value (graph_view's conventions)."""
        if kind == abi.ATTR_TENSOR:
            value = abi.vp()
            self.ort.api.OpAttr_GetTensorAttributeAsOrtValue(attr, C.byref(value))
            try:
                return self.ort.value_array(value.value).copy()
            finally:
                self.ort.api.ReleaseValue(value)
        raw = self._read(attr, kind)
        if kind == abi.ATTR_INT:
            return int(np.frombuffer(raw, np.int64)[0])
        if kind == abi.ATTR_FLOAT:
            return float(np.frombuffer(raw, np.float32)[0])
        if kind == abi.ATTR_INTS:
            return [int(v) for v in np.frombuffer(raw, np.int64)]
        if kind == abi.ATTR_FLOATS:
            return [float(v) for v in np.frombuffer(raw, np.float32)]
        if kind == abi.ATTR_STRING:
            return _text(raw)
        if kind == abi.ATTR_STRINGS:
            return [_text(item) for item in raw.split(b"\0")[:-1]] if raw else []
        raise ValueError(f"attribute type {kind} is not read by the NPU EP")

    def _read(self, attr: int, kind: int) -> bytes:
        """ReadOpAttr twice: once for the size, once into a buffer of that size."""
        needed = abi.sz()
        status = self.ort.api.raw("ReadOpAttr")(attr, kind, None, 0, C.byref(needed))
        if status:
            self.ort.api.ReleaseStatus(status)  # expected: "buffer too small", with the size
        buf = C.create_string_buffer(max(needed.value, 1))
        self.ort.api.ReadOpAttr(attr, kind, buf, needed.value, C.byref(needed))
        return buf.raw[: needed.value]


def _text(raw: bytes) -> str | bytes:
    """STRING attributes as str, like onnx.helper.get_attribute_value (bytes if not UTF-8)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def read_graph(ort: abi.Ort, graph: int, *, copy_initializers: bool,
               nodes_in_full: bool = True) -> OrtGraphContents:
    """Read an OrtGraph; `copy_initializers` when the arrays must outlive the callback;
    without `nodes_in_full`, nodes are read by name, op and the names of their inputs and
    outputs only (what Compile needs to find a partition it was told about: a third of the
    calls)."""
    return OrtGraphReader(ort, copy_initializers, nodes_in_full).read(graph)
