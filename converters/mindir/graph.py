"""A MindIR graph as plain Python: primitives resolved, constants decoded, nodes in order.

Handles both spellings MindSpore has used: 2.x nodes say `op_type = "REF::<Prim>:<id>"` and
the primitive (with its attributes) lives in `ModelProto.primitives`; 1.x nodes say the
primitive name and carry its attributes themselves. Either way a node becomes an `MsNode`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from converters.errors import InvalidModelError, UnsupportedError
from converters.mindir._generated import mind_ir_pb2 as pb
from converters.mindir.values import TensorInfo, decode_abstract, decode_attr, tensor_info

REF_PREFIX = "REF::"
# Bookkeeping attributes MindSpore attaches to primitives; they carry no semantics.
_IGNORED_ATTRS = {"input_names", "output_names"}


@dataclass(frozen=True)
class Const:
    """A compile-time value feeding a node (a `Constant` node), with its serialized proto.

    `error` is set instead of `value` for a constant litenpu cannot decode; it is raised only
    if a converter needs the value (a Custom node carries `raw` regardless).
    """

    value: Any
    raw: bytes
    error: str | None = None


@dataclass
class MsNode:
    """One computing node: primitive name, its attributes, input value names, one output."""

    name: str
    prim: str
    attrs: dict[str, Any]
    inputs: list[str]
    output: str
    abstract: list[TensorInfo] | None = None
    raw_attrs: dict[str, bytes] = field(default_factory=dict)


@dataclass
class MsGraph:
    """The main graph: inputs, parameters (weights), constants, nodes in dependency order."""

    name: str
    inputs: list[tuple[str, TensorInfo]]
    parameters: dict[str, pb.TensorProto]
    constants: dict[str, Const]
    nodes: list[MsNode]
    outputs: list[str]


def parse_graph(model: pb.ModelProto) -> MsGraph:
    """Resolve primitives and order the nodes; InvalidModelError names any broken reference."""
    if not model.HasField("graph"):
        raise InvalidModelError("MindIR model has no graph")
    g = model.graph
    prims = {p.name: p for p in model.primitives}
    functions = {f.name for f in model.functions}
    inputs = [(v.name, _input_info(v)) for v in g.input]
    parameters = {t.name: t for t in g.parameter}
    constants: dict[str, Const] = {}
    nodes: list[MsNode] = []
    for n in g.node:
        what = f"node {n.name or (n.output[0] if n.output else '?')!r}"
        if len(n.output) != 1:
            raise InvalidModelError(f"{what}: has {len(n.output)} outputs, MindIR nodes have one")
        if n.op_type == "Constant":
            if n.output[0] in constants:
                raise InvalidModelError(f"{what}: constant {n.output[0]!r} is defined twice")
            constants[n.output[0]] = _constant(n, what)
        else:
            nodes.append(_node(n, prims, functions, what))
    defined = {name for name, _ in inputs} | set(parameters) | set(constants)
    ordered = _topological(nodes, defined)
    outputs = [v.name for v in g.output]
    produced = defined | {m.output for m in nodes}
    for name in outputs:
        if name not in produced:
            raise InvalidModelError(f"graph output {name!r} is not produced by any node")
    return MsGraph(g.name, inputs, parameters, constants, ordered, outputs)


def _constant(n: pb.NodeProto, what: str) -> Const:
    value = n.attribute[0] if n.attribute else pb.AttributeProto(type=pb.AttributeProto.NONE)
    try:
        return Const(decode_attr(value, what), value.SerializeToString())
    except UnsupportedError as e:
        return Const(None, value.SerializeToString(), str(e))


def _input_info(v: pb.ValueInfoProto) -> TensorInfo:
    if len(v.tensor) != 1:
        raise UnsupportedError(f"graph input {v.name!r}: only tensor inputs are supported")
    return tensor_info(v.tensor[0], f"graph input {v.name!r}")


def _node(n: pb.NodeProto, prims: dict[str, pb.PrimitiveProto], functions: set[str], what: str) -> MsNode:
    abstract = None
    own_attrs = []  # 1.x: the node carries the primitive's attributes next to its "shape"
    for a in n.attribute:
        info = decode_abstract(a, what) if a.name == "shape" else None
        if info is not None:
            abstract = info
        else:
            own_attrs.append(a)
    if n.op_type.startswith(REF_PREFIX):
        ref = n.op_type[len(REF_PREFIX):]
        if ref in functions:
            raise UnsupportedError(f"{what}: calls sub-graph {ref!r}; sub-graph calls are not supported")
        if ref not in prims:
            raise InvalidModelError(
                f"{what}: op_type {n.op_type!r} refers to primitive {ref!r}, which is not in ModelProto.primitives")
        prim, attrs = prims[ref].op_type, list(prims[ref].attribute)
    elif n.op_type in functions:
        raise UnsupportedError(f"{what}: calls sub-graph {n.op_type!r}; sub-graph calls are not supported")
    elif not n.op_type:
        raise InvalidModelError(f"{what}: has no op_type")
    else:
        prim, attrs = n.op_type, own_attrs
    if not prim:
        raise InvalidModelError(f"{what}: primitive {n.op_type!r} has no op_type")
    values: dict[str, Any] = {}
    raw: dict[str, bytes] = {}
    for a in attrs:
        if a.name in _IGNORED_ATTRS:
            continue
        raw[a.name] = a.SerializeToString()
        try:
            values[a.name] = decode_attr(a, f"{what} ({prim})")
        except UnsupportedError:
            pass  # kept raw (a Custom node carries it); converters that need it report it missing
    return MsNode(n.name or n.output[0], prim, values, list(n.input), n.output[0], abstract, raw)


def _topological(nodes: list[MsNode], defined: set[str]) -> list[MsNode]:
    """Kahn's algorithm over value names, stable in file order; a cycle is an error."""
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        if n.output in producer or n.output in defined:
            raise InvalidModelError(f"node {n.name!r}: output {n.output!r} is defined twice")
        producer[n.output] = i
    waiting = [0] * len(nodes)
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for name in n.inputs:
            if name in producer:
                waiting[i] += 1
                users[producer[name]].append(i)
            elif name not in defined:
                raise InvalidModelError(f"node {n.name!r}: input {name!r} is not defined in the graph")
    ready = deque(i for i, w in enumerate(waiting) if w == 0)
    order: list[MsNode] = []
    while ready:
        i = ready.popleft()
        order.append(nodes[i])
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    if len(order) != len(nodes):
        stuck = [n.name for n, w in zip(nodes, waiting, strict=True) if w > 0]
        raise InvalidModelError(f"graph has a cycle through node(s) {', '.join(map(repr, stuck[:5]))}")
    return order
