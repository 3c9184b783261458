"""ONNX -> Lite IR.

`import_onnx` walks a `GraphView` (see `converters.graph_view`) in topological order and
converts each node with the function registered for its op in `onnx_ops.importers.IMPORTERS`.
A node with no exact Lite mapping (unknown op, unsupported attribute value, non-default
domain) becomes `Custom` with `type = "onnx:<domain>:<op>"` ("ai.onnx" for the default
domain) and `attr = {"onnx_node": <serialized NodeProto>}`; the report says why.

What ONNX needs to come back that the Lite format has no field for is kept in one constant
uint8 tensor named `HEADER_TENSOR`, used by no node: a serialized `onnx.ModelProto` holding
the model without its nodes, initializers and value_info (opset imports, ir_version,
producer, metadata, local functions, graph name, graph inputs/outputs with their symbolic
dims), plus any initializer whose dtype MindSpore has no TypeId for.
Layout stays NCHW, as in ONNX.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import numpy as np
import onnx

from converters.errors import InvalidModelError, UnsupportedError
from converters.graph_view import GraphView, ValueInfo, from_onnx
from converters.lite import dtypes
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from converters.naming import unique_name
from converters.onnx_ops import import_quant
from converters.onnx_ops.importers import IMPORTERS
from converters.onnx_ops.registry import Unmappable
from converters.report import ConversionReport, CustomNode

log = logging.getLogger("litenpu.converters")

HEADER_TENSOR = "litenpu.onnx_header"
CNODE = 2  # schema NodeType of values computed at run time (constants are ValueNode, 0)
FMK_ONNX = 2  # MindSpore's converter::FmkType::kFmkTypeOnnx
DEFAULT_DOMAIN = "ai.onnx"
PROGRESS_EVERY = 64


def custom_type(domain: str, op_type: str) -> str:
    """The Custom `type` string for an ONNX node carried losslessly."""
    return f"onnx:{domain or DEFAULT_DOMAIN}:{op_type}"


def carried_node(node: LiteNode) -> onnx.NodeProto | None:
    """The ONNX node a Custom node carries (see the module docstring), or None when it
    carries none. Its non-empty inputs are the Lite node's inputs, in order (then the
    outer-scope values of its subgraphs); likewise its non-empty outputs."""
    blob = node.attrs.get("attr", {}).get("onnx_node") if node.op == "Custom" else None
    if not str(node.attrs.get("type", "")).startswith("onnx:") or blob is None:
        return None
    return onnx.NodeProto.FromString(blob)


class ImportContext:
    """State of one import: the Lite model under construction and ONNX value lookups.

    Op functions call `tensor`, `const`, `const_value`, `shape`, `rank` and `alias`; they
    never touch the model's lists directly.
    """

    def __init__(self, view: GraphView, model: LiteModel):
        self.view = view
        self.model = model
        self.quant = import_quant.plan(view)  # quantized values, QDQ units to fold
        self.opset = view.opset.get("", 1)
        self.graph_outputs = {vi.name for vi in view.outputs}
        self._index: dict[str, int] = {}
        self._info: dict[str, ValueInfo] = dict(view.value_info)
        self._info.update({vi.name: vi for vi in (*view.inputs, *view.outputs)})
        self._consts: dict[str, np.ndarray] = {}
        self._read = {n for node in view.nodes for n in (*node.inputs, *node.implicit_inputs)}
        self._read |= self.graph_outputs
        self.read_by_subgraphs = {n for node in view.nodes for n in node.implicit_inputs}
        self._used_names = {n for node in view.nodes for n in (*node.inputs, *node.outputs)}
        self._used_names.update(view.initializers)
        self._producers = {o: node for node in view.nodes for o in node.outputs if o}

    # ---- tensors ------------------------------------------------------------------------
    def tensor(self, name: str) -> int:
        """Index of the Lite tensor for ONNX value `name` (created on first use)."""
        if name in self._index:
            return self._index[name]
        info = self._info.get(name)
        type_id = _type_id(info.dtype if info else None)
        # The IR has no "unknown rank": such values get an empty shape (consumers infer).
        shape = () if info is None or info.shape is None else tuple(
            -1 if d is None else d for d in info.shape)
        index = self.model.add_tensor(LiteTensor(name, type_id, shape, node_type=CNODE))
        self._index[name] = index
        return index

    def add_initializer(self, name: str, array: np.ndarray) -> int:
        """Register a constant under its ONNX name; its tensor index."""
        self._consts[name] = array
        index = self.model.add_tensor(LiteTensor.of(name, array.dtype, array.shape, array))
        self._index[name] = index
        return index

    def const(self, hint: str, array: np.ndarray, fmt: str = "NCHW") -> int:
        """Add a new constant tensor (an attribute turned into an input, a reshaped or scaled
        initializer); its index. A view is copied: an initializer's values may be memory that
        is onnxruntime's only while it partitions (a view of one read garbage at run time)."""
        name = self.fresh_name(hint)
        array = np.asarray(array)
        index = self.add_initializer(name, array if array.flags.owndata else array.copy())
        self.model.tensors[index].format = fmt
        return index

    def fresh_name(self, hint: str) -> str:
        """A tensor name based on `hint` that no ONNX value uses."""
        return unique_name(hint, self._used_names)

    def alias(self, output: str, source: str) -> None:
        """Make ONNX value `output` the same Lite tensor as `source` (Identity-like ops)."""
        self._index[output] = self.tensor(source)
        if source in self._consts:
            self._consts[output] = self._consts[source]

    def set_format(self, name: str, fmt: str) -> None:
        """Record the layout of a constant (e.g. conv weights "KCHW")."""
        self.model.tensors[self.tensor(name)].format = fmt

    # ---- facts about ONNX values --------------------------------------------------------
    def const_value(self, name: str) -> np.ndarray | None:
        """The value of `name` when it is a constant (initializer or Constant output)."""
        if not name:
            return None
        return self._consts.get(name)

    def shape(self, name: str) -> tuple | None:
        """Shape of `name` (ints, str symbolic dims, None unknown); None if rank unknown."""
        value = self._consts.get(name)
        if value is not None:
            return tuple(value.shape)
        info = self._info.get(name)
        return info.shape if info else None

    def rank(self, name: str) -> int | None:
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def dtype(self, name: str) -> np.dtype | None:
        value = self._consts.get(name)
        if value is not None:
            return value.dtype
        info = self._info.get(name)
        return info.dtype if info else None

    def producer(self, name: str):
        """The node (NodeView) that computes value `name`; None for inputs and constants."""
        return self._producers.get(name)

    def is_read(self, name: str) -> bool:
        """Whether any node or the graph's outputs read value `name`."""
        return name in self._read

    def is_known(self, name: str) -> bool:
        return name in self._index

    def values(self) -> dict[str, int]:
        """Every ONNX value seen so far -> its Lite tensor index (aliases share one)."""
        return dict(self._index)


def _type_id(dtype: np.dtype | None) -> int:
    if dtype is None:
        return dtypes.UNKNOWN
    try:
        return dtypes.from_numpy(dtype)
    except UnsupportedError:
        return dtypes.UNKNOWN


def import_onnx(model: onnx.ModelProto | GraphView | str | os.PathLike, *,
                progress: Callable[[int, int], None] | None = None
                ) -> tuple[LiteModel, ConversionReport]:
    """Convert an ONNX model (proto, path or GraphView) to Lite IR and say what was carried.

    `progress(done, total)` is called every few nodes (for long imports).
    """
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "<model>"
    view = model if isinstance(model, GraphView) else from_onnx(model)
    _check_element_types(view, source)
    _check_single_assignment(view, source)
    lite = LiteModel(name=view.name, fmk_type=FMK_ONNX)
    report = ConversionReport(source=source)
    ctx = ImportContext(view, lite)
    header = _header_of(view)
    _add_initializers(ctx, view, header)
    lite.inputs = [ctx.tensor(vi.name) for vi in view.inputs if vi.name not in view.initializers]
    total = len(view.nodes)
    for done, node in enumerate(view.nodes, 1):
        first = len(lite.nodes)
        produced = import_quant.import_node(ctx, ctx.quant, done - 1, node)
        if produced is None:
            _import_node(ctx, node, report)
        else:
            for lite_node in produced:
                lite.add_node(lite_node)
            report.mapped[node.op_type] += 1
        report.origins.append(list(range(first, len(lite.nodes))))
        if progress is not None and (done % PROGRESS_EVERY == 0 or done == total):
            progress(done, total)
    for vi in view.outputs:
        if not ctx.is_known(vi.name):
            raise InvalidModelError(f"{source}: graph output {vi.name!r} is produced by no node")
    lite.outputs = [ctx.tensor(vi.name) for vi in view.outputs]
    import_quant.apply(ctx, ctx.quant)
    import_quant.origins(ctx.quant, lite.nodes, report.origins)
    report.values = ctx.values()
    report.initializers = {n: report.values[n] for n in view.initializers if n in report.values}
    data = np.frombuffer(header.SerializeToString(), dtype=np.uint8)
    lite.add_tensor(LiteTensor.of(HEADER_TENSOR, np.uint8, data.shape, data))
    report.weight_bytes = weight_bytes(lite)
    lite.finalize_subgraph()
    return lite, report


def weight_bytes(model: LiteModel) -> int:
    """Bytes of `model`'s constants, the ONNX header tensor not counted."""
    return sum(t.data.nbytes for t in model.tensors
               if t.data is not None and t.name != HEADER_TENSOR)


def _header_of(view: GraphView) -> onnx.ModelProto:
    """The view's header, or one rebuilt from its opsets and I/O when the source has none."""
    header = onnx.ModelProto()
    if view.header is not None:
        header.CopyFrom(view.header)
        return header
    header.opset_import.extend(onnx.helper.make_opsetid(domain, version)
                               for domain, version in view.opset.items())
    header.ir_version = onnx.helper.find_min_ir_version_for(list(header.opset_import), True)
    header.graph.name = view.name
    header.graph.input.extend(_value_info_proto(vi) for vi in view.inputs)
    header.graph.output.extend(_value_info_proto(vi) for vi in view.outputs)
    return header


def _value_info_proto(info: ValueInfo) -> onnx.ValueInfoProto:
    if info.proto is not None:
        return info.proto
    return onnx.helper.make_tensor_value_info(info.name, info.elem_type, info.shape)


_KNOWN_ELEM_TYPES = set(onnx.TensorProto.DataType.values())


def _check_element_types(view: GraphView, source: str) -> None:
    """InvalidModelError for a value typed with a number ONNX does not define."""
    readers: dict[str, str] = {}
    for node in view.nodes:
        for name in (*node.inputs, *node.implicit_inputs):
            readers.setdefault(name, node.name or node.op_type)
    for info in (*view.inputs, *view.outputs, *view.value_info.values()):
        if info.elem_type not in _KNOWN_ELEM_TYPES:
            raise InvalidModelError(
                f"{source}: value {info.name!r} (read by node {readers.get(info.name, '-')!r}) "
                f"has unknown element type {info.elem_type}")


def _check_single_assignment(view: GraphView, source: str) -> None:
    """InvalidModelError for a value written twice: by two nodes, or by a node while also a
    graph input or initializer (ONNX graphs assign each name once; a second writer would
    silently rewire the readers)."""
    defined = {vi.name for vi in view.inputs} | set(view.initializers)
    produced: set[str] = set()
    for node in view.nodes:
        for name in node.outputs:
            if not name:
                continue
            if name in produced or name in defined:
                other = "another node" if name in produced else "a graph input or initializer"
                raise InvalidModelError(
                    f"{source}: value {name!r} is written by node {node.name or node.op_type!r} "
                    f"({node.op_type}) and by {other}")
            produced.add(name)


def _add_initializers(ctx: ImportContext, view: GraphView, header: onnx.ModelProto) -> None:
    for name, array in view.initializers.items():
        if _has_typeid(array.dtype):
            ctx.add_initializer(name, array)
        else:
            # No MindSpore TypeId: keep the ONNX tensor in the header, losslessly.
            header.graph.initializer.append(onnx.numpy_helper.from_array(array, name))
            ctx.tensor(name)


def _has_typeid(dtype: np.dtype) -> bool:
    """Whether a numpy dtype has a MindSpore TypeId."""
    try:
        dtypes.from_numpy(dtype)
    except (UnsupportedError, TypeError):
        return False
    return True


def _import_node(ctx: ImportContext, node, report: ConversionReport) -> None:
    fn = IMPORTERS.lookup(node.op_type, ctx.opset) if node.domain == "" else None
    if fn is None:
        reason = (f"domain {node.domain!r} is not ONNX's default" if node.domain
                  else f"no Lite mapping for {node.op_type} at opset {ctx.opset}")
        _custom(ctx, node, report, reason)
        return
    try:
        produced = fn(ctx, node)
    except Unmappable as e:
        _custom(ctx, node, report, str(e))
        return
    except (KeyError, IndexError, TypeError, ValueError, ArithmeticError) as e:
        # A node this mapping did not expect (missing attribute, odd operand, a value out
        # of range): carrying it is always correct, so do that and say so loudly.
        log.warning("node %r (%s): mapping failed (%s: %s); carried as Custom",
                    node.name, node.op_type, type(e).__name__, e)
        _custom(ctx, node, report, "its Lite mapping failed unexpectedly (a litenpu bug; the "
                                   "log says how)")
        return
    for lite_node in produced:
        ctx.model.add_node(lite_node)
    report.mapped[node.op_type] += 1


def _custom(ctx: ImportContext, node, report: ConversionReport, reason: str) -> None:
    inputs = [ctx.tensor(n) for n in (*node.inputs, *node.implicit_inputs) if n]
    outputs = [ctx.tensor(n) for n in node.outputs if n]
    attrs = {"type": custom_type(node.domain, node.op_type),
             "attr": {"onnx_node": node.proto().SerializeToString()}}
    ctx.model.add_node(LiteNode(node.name, "Custom", attrs, inputs, outputs))
    report.custom.append(CustomNode(node.name, node.op_type, reason))
    log.debug("node %r (%s) carried as Custom: %s", node.name, node.op_type, reason)
