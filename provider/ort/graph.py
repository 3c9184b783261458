"""OrtGraph -> `converters.graph_view.GraphView`: the importer reads onnxruntime's graphs too.

onnxruntime hands GetCapability and Compile an `OrtGraph` (the whole model, or one fused
partition). `read_graph` reads it through the C API in one call to the EP library, which
writes it as one JSON document (csrc/graph_reader.c), into plain Python, and `view` /
`node_graph` build the GraphViews the importer consumes: the whole graph, or one node with
its constants (to ask the NPU about a single candidate).

Limits: GRAPH attributes (If/Loop/Scan bodies) and attribute kinds the C API cannot read are
left out; such nodes carry an `unreadable` reason and are never claimed. Initializers of types
numpy lacks (strings, float8) are not read either.
"""

from __future__ import annotations

import ctypes as C
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from converters.graph_view import GraphView, NodeView, ValueInfo, normalize_domain
from provider.ort import abi, clib

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


def _value(doc: dict | str | None, value_info: dict[str, ValueInfo],
           initializers: dict[str, np.ndarray], copy: bool) -> str:
    """Register one value of the reader's document (the first reading of a name wins, and
    constants go into `initializers`); returns its name ("" for a missing input)."""
    if doc is None:
        return ""
    if isinstance(doc, str):
        return doc
    name = doc["name"]
    if name in value_info:
        return name
    dims = doc["dims"]
    shape = None if dims is None else tuple(
        d if d >= 0 else (s or None) for d, s in zip(dims, doc["symbols"], strict=True))
    value_info[name] = ValueInfo(name, doc["elem"], shape)
    constant = doc["constant"]
    if constant is not None and constant[1] in abi.ELEMENT_TO_NUMPY:
        address, elem, tensor_dims = constant
        array = abi.array_at(address, abi.ELEMENT_TO_NUMPY[elem], tuple(tensor_dims),
                             readonly=True)
        initializers[name] = array.copy() if copy else array
    return name


def _attribute(ort: abi.Ort, kind: int, value):
    """One attribute of the document as a plain Python value (graph_view's conventions)."""
    if kind == abi.ATTR_TENSOR:
        try:
            return ort.value_array(value).copy()
        finally:
            ort.api.ReleaseValue(value)
    if kind == abi.ATTR_STRING:
        return _text(bytes.fromhex(value))
    if kind == abi.ATTR_STRINGS:
        raw = bytes.fromhex(value)
        return [_text(item) for item in raw.split(b"\0")[:-1]] if raw else []
    return value


def _node(ort: abi.Ort, doc: dict, value_info, initializers, copy: bool) -> OrtNode:
    names = [tuple(_value(v, value_info, initializers, copy) for v in doc[key])
             for key in ("inputs", "outputs", "implicit")]
    view = NodeView(
        name=doc["name"],
        op_type=doc["op"],
        domain=normalize_domain(doc["domain"]),
        inputs=names[0],
        outputs=names[1],
        attrs={name: _attribute(ort, kind, value) for name, kind, value in doc["attrs"]},
        implicit_inputs=tuple(n for n in names[2] if n),  # outer values its bodies read
    )
    return OrtNode(doc["address"], view, doc["unreadable"])


def static_inputs(ort: abi.Ort, inputs: Sequence[ValueInfo]) -> bool:
    """Every input shape fully known (before onnxruntime 1.24 a 0-d shape may mean unknown)."""
    exact_rank = ort.api.available("TensorTypeAndShape_HasShape")
    return all(vi.shape is not None and (exact_rank or len(vi.shape) > 0)
               and all(isinstance(d, int) and d >= 0 for d in vi.shape) for vi in inputs)


def string_attribute(ort: abi.Ort, attr: int) -> str | bytes:
    """One STRING attribute read on its own (an EPContext node's `source`, without reading
    its other attributes, one of which may be a whole Program)."""
    needed = abi.sz()
    status = ort.api.raw("ReadOpAttr")(attr, abi.ATTR_STRING, None, 0, C.byref(needed))
    if status:
        ort.api.ReleaseStatus(status)  # expected: "buffer too small", with the size
    buf = C.create_string_buffer(max(needed.value, 1))
    ort.api.ReadOpAttr(attr, abi.ATTR_STRING, buf, needed.value, C.byref(needed))
    return _text(buf.raw[: needed.value])


def _text(raw: bytes) -> str | bytes:
    """STRING attributes as str, like onnx.helper.get_attribute_value (bytes if not UTF-8)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def read_graph(ort: abi.Ort, graph: int, *, copy_initializers: bool,
               nodes_in_full: bool = True) -> OrtGraphContents:
    """Read an OrtGraph in one call to the EP library (csrc/graph_reader.c);
    `copy_initializers` when the arrays must outlive the callback; without `nodes_in_full`,
    nodes are read by name, op and the names of their inputs and outputs only (what Compile
    needs to find a partition it was told about)."""
    lib = clib.library()
    text = C.c_void_p()
    if lib.litenpu_read_graph(graph, int(nodes_in_full), C.byref(text)) < 0:
        raise MemoryError("no host memory to read the onnxruntime graph")
    try:
        # strict: a name that is not UTF-8 fails the read as the C API's strings did before
        doc = json.loads(C.string_at(text).decode("utf-8"))
    finally:
        lib.litenpu_free(text)
    if "error" in doc:
        function, code, message = doc["error"]
        raise abi.OrtCallError(function, code, bytes.fromhex(message).decode(errors="replace"))
    value_info: dict[str, ValueInfo] = {}
    initializers: dict[str, np.ndarray] = {}

    def values(key: str) -> list[ValueInfo]:
        return [value_info[_value(v, value_info, initializers, copy_initializers)] for v in doc[key]]

    inputs, outputs = values("inputs"), values("outputs")
    initializer_names = {v.name for v in values("initializers")}
    nodes = tuple(_node(ort, n, value_info, initializers, copy_initializers) for n in doc["nodes"])
    nested = bool(doc["parent"])
    if not nested and ort.runtime_version < PARENT_NODE_RELIABLE_SINCE:
        # onnxruntime 1.23 reports no parent for If/Loop/Scan bodies: recognise them by
        # reading values from an enclosing graph, or by having no inputs at all.
        defined = {vi.name for vi in inputs} | initializer_names | {""}
        defined |= {name for n in nodes for name in n.view.outputs}
        nested = not inputs or any(name not in defined for n in nodes for name in n.view.inputs)
    return OrtGraphContents(
        name=doc["name"],
        nested=nested,
        nodes=nodes,
        inputs=tuple(v for v in inputs if v.name not in initializers),
        outputs=tuple(outputs),
        initializers=initializers,
        value_info=value_info,
        opset={normalize_domain(d): int(v) for d, v in doc["opset"]},
    )
