"""The state an op converter works against: MindIR values -> Lite IR tensors and nodes.

A MindIR value is a Lite tensor index, a `Const` (compile-time value), a `TupleValue`
(MakeTuple, or a primitive with several outputs) or the side-effect `MONAD`. Op converters
(converters.mindir.ops) read arguments through `arg` / `input` and add nodes through `emit`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from converters.errors import InvalidModelError, UnsupportedError
from converters.lite import dtypes
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from converters.mindir.args import as_array, as_bool, as_float, as_int, as_ints
from converters.mindir.external import ExternalDataReader
from converters.mindir.graph import Const, MsGraph, MsNode
from converters.mindir.values import Monad, TensorInfo, from_bytes, inline_tensor, tensor_info

REQUIRED = object()


@dataclass(frozen=True)
class TupleValue:
    """A tuple of values; `arity` > len(items) when some outputs have no Lite counterpart."""

    items: tuple[Any, ...]
    arity: int
    source: str


# What a MindIR name is bound to: a Lite tensor index, a constant, a tuple or the monad.
Value = int | Const | TupleValue | Monad


class Builder:
    """Accumulates the LiteModel while the importer walks the MindIR graph in order."""

    def __init__(self, graph: MsGraph, external: ExternalDataReader) -> None:
        self.graph = graph
        self.external = external
        self.model = LiteModel(name=graph.name)
        self.values: dict[str, Value] = dict(graph.constants)
        self.producer: dict[int, LiteNode] = {}
        self.uses: Counter[str] = Counter(name for n in graph.nodes for name in n.inputs)
        self.uses.update(graph.outputs)
        self._prefix = graph.name + ":" if graph.name else ""

    # -- names ------------------------------------------------------------------------
    def short(self, name: str) -> str:
        """MindIR names are "<graph>:<name>"; Lite tensors keep the part after the graph name."""
        return name[len(self._prefix):] if self._prefix and name.startswith(self._prefix) else name

    # -- values -----------------------------------------------------------------------
    def value(self, name: str) -> Value:
        """The value bound to a MindIR name; parameters load (and become weights) on first use."""
        if name not in self.values:
            if name not in self.graph.parameters:
                raise InvalidModelError(f"value {name!r} is used before it is defined")
            self.values[name] = self._weight(name, self.graph.parameters[name])
        return self.values[name]

    def _weight(self, name: str, t) -> int:
        what = f"parameter {self.short(name)!r}"
        info = tensor_info(t, what)
        if t.HasField("external_data"):
            nbytes = math.prod(info.shape) * info.dtype.itemsize
            data = from_bytes(self.external.read(self.short(name), t.external_data, nbytes), info, what)
        else:
            data = inline_tensor(t, what)
        if data is None:
            raise UnsupportedError(f"{what} has no data (a parameter left to be fed at run time)")
        return self.model.add_tensor(LiteTensor.of(self.short(name), data.dtype, data.shape, data))

    def add_input(self, name: str, info: TensorInfo) -> int:
        """Declare a graph input tensor."""
        idx = self.model.add_tensor(LiteTensor.of(self.short(name), info.dtype, info.shape))
        self.values[name] = idx
        self.model.inputs.append(idx)
        return idx

    def operand(self, node: MsNode, pos: int) -> Value:
        """The value of input `pos`; InvalidModelError if the node has fewer inputs."""
        if pos >= len(node.inputs):
            raise InvalidModelError(
                f"node {node.name!r} ({node.prim}): has {len(node.inputs)} inputs, needs input {pos}")
        return self.value(node.inputs[pos])

    def const(self, node: MsNode, pos: int) -> Any:
        """The compile-time value of input `pos`; UnsupportedError if it is computed at run time."""
        v = self.operand(node, pos)
        if isinstance(v, Const):
            return _checked(v)
        if isinstance(v, int) and self.model.tensors[v].is_const:
            return self.model.tensors[v].data
        raise UnsupportedError(
            f"node {node.name!r} ({node.prim}): input {pos} must be a constant, it is computed at run time")

    def arg(self, node: MsNode, pos: int | None, names: str | tuple[str, ...], default: Any = REQUIRED) -> Any:
        """A primitive argument: constant input `pos` (2.x) or attribute `names` (1.x)."""
        if pos is not None and pos < len(node.inputs):
            return self.const(node, pos)
        for name in (names,) if isinstance(names, str) else names:
            if name in node.attrs:
                return node.attrs[name]
        if default is REQUIRED:
            raise InvalidModelError(f"node {node.name!r} ({node.prim}): missing argument {names!r}")
        return default

    def input(self, node: MsNode, pos: int, dtype: Any = None) -> int:
        """Input `pos` as a tensor index; constants become weights (of `dtype` when given)."""
        v = self.operand(node, pos)
        if isinstance(v, int):
            return v
        if isinstance(v, Const):
            return self.constant(self._const_array(node, pos, _checked(v), dtype), f"{node.name}/in{pos}")
        raise InvalidModelError(
            f"node {node.name!r} ({node.prim}): input {pos} ({self.short(node.inputs[pos])!r}) is "
            f"{'a tuple' if isinstance(v, TupleValue) else 'a side-effect token'}, a tensor is expected")

    def _const_array(self, node: MsNode, pos: int, value: Any, dtype: Any) -> np.ndarray:
        if dtype is None:  # a tensor keeps its type; a Python scalar takes its partner's (Muls(x, 0.1))
            dtype = value.dtype if isinstance(value, np.ndarray) else self._operand_dtype(node)
        return as_array(value, dtype, f"node {node.name!r} ({node.prim}): constant input {pos}")

    def _operand_dtype(self, node: MsNode) -> np.dtype:
        for name in node.inputs:
            v = self.values.get(name)
            if isinstance(v, int) and dtypes.has_numpy(self.model.tensors[v].type_id):
                return self.model.tensors[v].dtype
        return node.abstract[0].dtype if node.abstract else np.dtype(np.float32)

    # -- typed arguments: `arg`, checked (InvalidModelError naming node and argument) ------------
    def int_arg(self, node: MsNode, pos: int | None, names: str | tuple[str, ...], default: Any = REQUIRED) -> int:
        """`arg` as an int."""
        return as_int(self.arg(node, pos, names, default), _what(node, names))

    def float_arg(self, node: MsNode, pos: int | None, names: str | tuple[str, ...], default: Any = REQUIRED) -> float:
        """`arg` as a float."""
        return as_float(self.arg(node, pos, names, default), _what(node, names))

    def bool_arg(self, node: MsNode, pos: int | None, names: str | tuple[str, ...], default: Any = REQUIRED) -> bool:
        """`arg` as a bool."""
        return as_bool(self.arg(node, pos, names, default), _what(node, names))

    def ints_arg(self, node: MsNode, pos: int | None, names: str | tuple[str, ...], default: Any = REQUIRED) -> list[int]:
        """`arg` as a list of ints (an int, a tuple or an integer tensor)."""
        return as_ints(self.arg(node, pos, names, default), _what(node, names))

    def is_none(self, node: MsNode, pos: int) -> bool:
        """Whether input `pos` is the constant None (an omitted optional input)."""
        v = self.operand(node, pos)
        return isinstance(v, Const) and v.error is None and v.value is None

    def int32_constant(self, node: MsNode, values: Any, what: str) -> int:
        """Add an int32 weight (shape, perm, axes, ...) named after the node; values must fit."""
        return self.constant(as_array(values, np.int32, f"node {node.name!r} ({node.prim}): {what}"),
                             f"{node.name}/{what}")

    def tuple_inputs(self, node: MsNode, pos: int) -> list[int]:
        """Input `pos` as a list of tensors (a MakeTuple feeding Concat)."""
        v = self.operand(node, pos)
        if not isinstance(v, TupleValue):
            return [self.input(node, pos)]
        out = []
        for item in v.items:
            if not isinstance(item, int):
                raise UnsupportedError(f"node {node.name!r} ({node.prim}): tuple input {pos} holds a non-tensor")
            out.append(item)
        return out

    def constant(self, data: np.ndarray, name: str) -> int:
        """Add a weight tensor."""
        return self.model.add_tensor(LiteTensor.of(self.short(name), data.dtype, data.shape, data))

    def shape_of(self, idx: int) -> tuple:
        """Shape of Lite tensor `idx` (dims may be -1 or symbolic)."""
        return self.model.tensors[idx].shape

    def single_use(self, name: str) -> bool:
        """Whether exactly one node (or graph output) reads MindIR value `name` (fusion is safe)."""
        return self.uses[name] == 1

    # -- nodes ------------------------------------------------------------------------
    def emit(self, node: MsNode, op: str, attrs: dict[str, Any], inputs: list[int],
             outputs: int = 1, suffix: str = "") -> list[int]:
        """Add a Lite node for `node` with `outputs` tensors typed from the node's abstract."""
        infos = node.abstract or []
        outs = []
        for i in range(outputs):
            info = infos[i] if i < len(infos) else None
            name = self.short(node.output) + suffix + (f":{i}" if outputs > 1 else "")
            outs.append(self._activation(name, info, inputs))
        return self.emit_raw(node.name + suffix, op, attrs, inputs, outs)

    def emit_like(self, name: str, op: str, attrs: dict[str, Any], inputs: list[int], like: int) -> int:
        """Add an internal node whose one output has the type and shape of tensor `like`."""
        ref = self.model.tensors[like]
        out = self.model.add_tensor(LiteTensor(self.short(name), ref.type_id, ref.shape))
        return self.emit_raw(name, op, attrs, inputs, [out])[0]

    def emit_raw(self, name: str, op: str, attrs: dict[str, Any], inputs: list[int], outs: list[int]) -> list[int]:
        """Add a Lite node over existing tensors and remember it as their producer."""
        lite = LiteNode(self.short(name), op, attrs, list(inputs), outs)
        self.model.add_node(lite)
        for o in outs:
            self.producer[o] = lite
        return outs

    def _activation(self, name: str, info: TensorInfo | None, inputs: list[int]) -> int:
        # No "shape" attribute: the type follows the first input; the unknown shape is left as ().
        if info is not None:
            return self.model.add_tensor(LiteTensor.of(name, info.dtype, info.shape))
        first = self.model.tensors[inputs[0]] if inputs else None
        type_id = first.type_id if first is not None else dtypes.FLOAT32
        return self.model.add_tensor(LiteTensor(name, type_id, ()))


def _what(node: MsNode, names: str | tuple[str, ...]) -> str:
    return f"node {node.name!r} ({node.prim}): argument {names if isinstance(names, str) else names[0]!r}"


def _checked(c: Const) -> Any:
    if c.error is not None:
        raise UnsupportedError(c.error)
    return c.value
