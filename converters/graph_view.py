"""The minimal read-only view of an ONNX graph that the ONNX importer depends on.

Two sources adapt to it: an `onnx.ModelProto` (`from_onnx`, here) and onnxruntime's
`OrtGraph` (written in `provider.ort`), so the importer never sees either directly.

Contract a second adapter must meet (nothing else is read):

- `GraphView.name`: graph name (str, may be "").
- `GraphView.nodes`: tuple of `NodeView` in topological order (every input of a node is a
  graph input, an initializer, an outer-scope value, or an output of an earlier node).
- `NodeView`: `name`, `op_type`, `domain` ("" for the default ONNX domain; "ai.onnx" is
  normalised to ""), `inputs` / `outputs` as tuples of value names with "" for a missing
  optional input/output, `implicit_inputs` (outer-scope values read by subgraph attributes,
  () when none), `attrs` as a dict of plain Python values (int, float, str (bytes when a STRING attribute is not
  UTF-8), lists of those, numpy arrays for TENSOR attributes, `onnx.GraphProto` / other protos for GRAPH,
  SPARSE_TENSOR and TYPE_PROTO attributes), and `proto()` returning the node as an
  `onnx.NodeProto` (used to carry unmapped nodes losslessly).
- `GraphView.inputs` / `outputs`: tuples of `ValueInfo` for the graph's inputs (initializers
  excluded unless the source lists them as inputs too) and outputs.
- `ValueInfo`: `name`, `elem_type` (ONNX TensorProto data type number, 0 when unknown),
  `dtype` (numpy dtype, None when unknown or not tensor-typed), `shape` (tuple of dims, each
  an int, a str for a symbolic dim, or None for unknown; the whole shape None when the rank
  is unknown), and `proto` (the `onnx.ValueInfoProto` when the source has one, else None).
- `GraphView.initializers`: dict name -> numpy array (read-only views over the source bytes
  where possible; external data already resolved). Dtypes numpy lacks (bfloat16, float8,
  int4) come as `ml_dtypes` arrays, strings as object arrays.
- `GraphView.value_info`: dict name -> `ValueInfo` for intermediate values whose type is
  known (from the source or shape inference). Absent names are simply unknown.
- `GraphView.opset`: dict domain -> version ("" for the default domain).
- `GraphView.header`: an `onnx.ModelProto` holding everything about the model except the
  graph's nodes, initializers and value_info (ir_version, producer, opset_import,
  metadata_props, local functions, graph name / doc / inputs / outputs), or None when the
  source is not a ModelProto. The importer stores it so the exporter can restore it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

from converters.errors import InvalidModelError
from converters.proto_text import check_text

log = logging.getLogger("litenpu.converters")

Dim = int | str | None

@dataclass(frozen=True)
class ValueInfo:
    """Name, element type and (possibly symbolic) shape of one graph value."""

    name: str
    elem_type: int = 0
    shape: tuple[Dim, ...] | None = None
    proto: onnx.ValueInfoProto | None = field(default=None, compare=False, repr=False)

    @property
    def dtype(self) -> np.dtype | None:
        """numpy dtype of the element type, None when unknown or not representable."""
        if not self.elem_type:
            return None
        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(self.elem_type))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class NodeView:
    """One ONNX node: op, names of its inputs/outputs, attributes as Python values."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    implicit_inputs: tuple[str, ...] = ()
    _proto: onnx.NodeProto | None = field(default=None, compare=False, repr=False)

    def proto(self) -> onnx.NodeProto:
        """The node as an `onnx.NodeProto` (built from the fields when the source has none)."""
        if self._proto is not None:
            return self._proto
        node = helper.make_node(self.op_type, list(self.inputs), list(self.outputs),
                                name=self.name, domain=self.domain)
        for key, value in self.attrs.items():
            if isinstance(value, np.ndarray):
                value = numpy_helper.from_array(value)
            elif isinstance(value, list) and value and isinstance(value[0], np.ndarray):
                value = [numpy_helper.from_array(v) for v in value]
            node.attribute.append(helper.make_attribute(key, value))
        return node


@dataclass(frozen=True)
class GraphView:
    """A whole graph as the importer reads it (see the module docstring for the contract)."""

    name: str
    nodes: tuple[NodeView, ...]
    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]
    initializers: Mapping[str, np.ndarray]
    value_info: Mapping[str, ValueInfo]
    opset: Mapping[str, int]
    header: onnx.ModelProto | None = None


def normalize_domain(domain: str) -> str:
    """"" and "ai.onnx" both name the default ONNX domain."""
    return "" if domain in ("", "ai.onnx") else domain


def value_info(proto: onnx.ValueInfoProto) -> ValueInfo:
    """A `ValueInfo` from a ValueInfoProto (non-tensor types keep elem_type 0)."""
    tt = proto.type.tensor_type if proto.type.HasField("tensor_type") else None
    if tt is None:
        return ValueInfo(proto.name, 0, None, proto)
    shape = None
    if tt.HasField("shape"):
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tt.shape.dim
        )
    return ValueInfo(proto.name, tt.elem_type, shape, proto)


def attribute_value(attr: onnx.AttributeProto) -> Any:
    """One attribute as a plain Python value (TENSOR -> numpy array; graphs stay protos)."""
    kind = attr.type
    A = onnx.AttributeProto
    if kind == A.TENSOR:
        return tensor_array(attr.t)
    if kind == A.TENSORS:
        return [tensor_array(t) for t in attr.tensors]
    if kind == A.STRING:
        return _text(attr.s)
    if kind == A.STRINGS:
        return [_text(s) for s in attr.strings]
    if kind in (A.FLOATS, A.INTS):
        return list(helper.get_attribute_value(attr))
    return helper.get_attribute_value(attr)


def _text(raw: bytes) -> str | bytes:
    """ONNX string attributes are text; bytes that are not UTF-8 stay bytes."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def tensor_array(tensor: onnx.TensorProto, base_dir: str = "") -> np.ndarray:
    """A TensorProto's values; a zero-copy view over raw_data for plain numeric types."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return numpy_helper.to_array(tensor, base_dir)
    dims = tuple(tensor.dims)
    if tensor.raw_data and tensor.data_type in _FLAT_RAW:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).newbyteorder("<")
        arr = np.frombuffer(tensor.raw_data, dtype=dtype)
        if arr.size == int(np.prod(dims, dtype=np.int64)):
            return arr.reshape(dims)
    return numpy_helper.to_array(tensor, base_dir)


_T = onnx.TensorProto
_FLAT_RAW = {_T.FLOAT, _T.DOUBLE, _T.FLOAT16, _T.INT8, _T.INT16, _T.INT32, _T.INT64,
             _T.UINT8, _T.UINT16, _T.UINT32, _T.UINT64, _T.BOOL}


def from_onnx(model: onnx.ModelProto | str | os.PathLike, *, check: bool = True,
              infer_shapes: bool = True) -> GraphView:
    """Adapt an ONNX model (proto or path) to a `GraphView`.

    With `check`, the model must pass `onnx.checker`; with `infer_shapes`, value types and
    shapes are annotated by `onnx.shape_inference` where it can (unknown stays unknown).
    Malformed models raise InvalidModelError naming the offending node or value.
    """
    source = "<model>"
    base_dir = ""
    if not isinstance(model, onnx.ModelProto):
        source = os.fspath(model)
        base_dir = os.path.dirname(os.path.abspath(source))
        model = load_onnx(source)
    check_text(model, source)
    # The checker and shape inference serialise what they are given: give them the graph
    # without its big weights, so a model's bytes are not copied twice more.
    skeleton = weightless(model)
    if check:
        _check(skeleton, source)
    known = {vi.name: value_info(vi) for vi in model.graph.value_info}
    if infer_shapes:
        try:
            inferred = onnx.shape_inference.infer_shapes(skeleton, check_type=False,
                                                         strict_mode=False)
            known.update((vi.name, value_info(vi)) for vi in inferred.graph.value_info)
        except Exception as e:  # noqa: BLE001 - inference is best effort
            log.info("%s: shape inference failed, shapes stay as given: %s", source, e)
    graph = model.graph
    initializers = _initializers(graph, base_dir, source)
    nodes = topological_nodes(graph, set(initializers), source)
    opset = {normalize_domain(o.domain): o.version for o in model.opset_import}
    return GraphView(
        name=graph.name,
        nodes=tuple(nodes),
        inputs=tuple(value_info(vi) for vi in graph.input),
        outputs=tuple(value_info(vi) for vi in graph.output),
        initializers=initializers,
        value_info=known,
        opset=opset,
        header=_header(model),
    )


def load_onnx(path: str | os.PathLike, *, load_external_data: bool = True) -> onnx.ModelProto:
    """An ONNX file as a ModelProto; InvalidModelError naming the file when it is not one
    (FileNotFoundError when it does not exist)."""
    try:
        return onnx.load(path, load_external_data=load_external_data)
    except FileNotFoundError:
        if not os.path.exists(path):
            raise
        raise InvalidModelError(f"{os.fspath(path)}: an external data file is missing") from None
    except (DecodeError, OSError, ValueError, RuntimeError, onnx.checker.ValidationError) as e:
        raise InvalidModelError(f"{os.fspath(path)}: not a readable ONNX model: "
                                f"{type(e).__name__}: {e}") from e


def _initializers(graph: onnx.GraphProto, base_dir: str, source: str) -> dict[str, np.ndarray]:
    """Initializer values; InvalidModelError names an undecodable one and a node reading it."""
    out = {}
    for t in graph.initializer:
        try:
            out[t.name] = tensor_array(t, base_dir)
        except (KeyError, ValueError, TypeError, OSError) as e:
            reader = next((n.name or n.op_type for n in graph.node if t.name in n.input), "-")
            raise InvalidModelError(
                f"{source}: initializer {t.name!r} (read by node {reader!r}) cannot be decoded "
                f"(data_type {t.data_type}): {type(e).__name__}: {e}") from e
    return out


def weightless(model: onnx.ModelProto, limit: int = 4096) -> onnx.ModelProto:
    """A copy of `model` whose initializers over `limit` bytes are typed graph inputs instead
    (small ones, such as shape constants, stay for shape inference to read)."""
    out = onnx.ModelProto()
    _copy_fields(model, out, skip={"graph"})
    _copy_fields(model.graph, out.graph, skip={"initializer"})
    listed = {vi.name for vi in model.graph.input}
    for t in model.graph.initializer:
        if t.ByteSize() <= limit:
            out.graph.initializer.append(t)
        elif t.name not in listed:
            out.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, t.dims))
    return out


def _check(model: onnx.ModelProto, source: str) -> None:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise InvalidModelError(f"{source}: fails onnx.checker: {e}") from e


def topological_nodes(graph: onnx.GraphProto, initializers: set[str],
                      source: str = "<model>") -> list[NodeView]:
    """The graph's nodes as NodeViews, topologically sorted (stable for sorted graphs).

    InvalidModelError names the node whose input nothing produces, or a node on a cycle.
    """
    views = [_node_view(n, i) for i, n in enumerate(graph.node)]
    available = {vi.name for vi in graph.input} | initializers | {""}
    producer: dict[str, int] = {}
    for i, v in enumerate(views):
        for out in v.outputs:
            if out:
                producer[out] = i
    for v in views:
        for name in (*v.inputs, *v.implicit_inputs):
            if name not in available and name not in producer:
                raise InvalidModelError(
                    f"{source}: node {v.name or v.op_type!r} ({v.op_type}) reads {name!r}, "
                    "which is not a graph input, an initializer or any node's output")
    order: list[NodeView] = []
    state = [0] * len(views)  # 0 new, 1 on the stack, 2 done
    for start in range(len(views)):
        if state[start]:
            continue
        stack = [(start, iter(_deps(views[start], producer, available)))]
        state[start] = 1
        while stack:
            i, deps = stack[-1]
            j = next(deps, None)
            if j is None:
                state[i] = 2
                order.append(views[i])
                stack.pop()
            elif state[j] == 1:
                raise InvalidModelError(
                    f"{source}: node {views[j].name or views[j].op_type!r} ({views[j].op_type}) "
                    "is on a cycle")
            elif state[j] == 0:
                state[j] = 1
                stack.append((j, iter(_deps(views[j], producer, available))))
    return order


def _deps(view: NodeView, producer: dict[str, int], available: set[str]) -> list[int]:
    return [producer[n] for n in (*view.inputs, *view.implicit_inputs)
            if n not in available and n in producer]


def _node_view(node: onnx.NodeProto, index: int) -> NodeView:
    attrs = {a.name: attribute_value(a) for a in node.attribute}
    return NodeView(
        name=node.name,
        op_type=node.op_type,
        domain=normalize_domain(node.domain),
        inputs=tuple(node.input),
        outputs=tuple(node.output),
        attrs=attrs,
        implicit_inputs=tuple(_outer_scope_names(node)),
        _proto=node,
    )


def _outer_scope_names(node: onnx.NodeProto) -> list[str]:
    """Values a node's subgraph attributes read from enclosing scopes (in first-use order)."""
    found: dict[str, None] = {}
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            for name in _free_names(g):
                found.setdefault(name)
    return [n for n in found if n not in node.input]


def _free_names(graph: onnx.GraphProto) -> list[str]:
    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer} | {""}
    defined |= {t.values.name for t in graph.sparse_initializer}
    free: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name not in defined:
                free.setdefault(name)
        for name in _outer_scope_names(node):
            if name not in defined:
                free.setdefault(name)
        defined.update(node.output)
    for vi in graph.output:
        if vi.name not in defined:
            free.setdefault(vi.name)
    return list(free)


def _header(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its graph's nodes, initializers and value_info (weights not copied)."""
    header = onnx.ModelProto()
    _copy_fields(model, header, skip={"graph"})
    _copy_fields(model.graph, header.graph, skip={"node", "initializer", "value_info"})
    return header


def _copy_fields(src, dst, skip: set[str]) -> None:
    for desc, value in src.ListFields():
        if desc.name in skip:
            continue
        if hasattr(value, "extend"):
            getattr(dst, desc.name).extend(value)
        elif hasattr(value, "CopyFrom"):
            getattr(dst, desc.name).CopyFrom(value)
        else:
            setattr(dst, desc.name, value)
