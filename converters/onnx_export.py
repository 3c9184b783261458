"""Lite IR -> ONNX.

`export_onnx` writes each Lite node with the function registered for its primitive in
`onnx_ops.exporters.EXPORTERS`, reproducing MindSpore Lite's semantics: NHWC layers (as
MindSpore Lite's own converter writes them) are wrapped in Transposes, OHWI conv weights
are transposed to OIHW, fused activations become a following activation node. `Custom`
nodes of type "onnx:<domain>:<op>" are restored from the NodeProto they carry. When the
model came from ONNX, the header tensor (see `onnx_import`) restores opset imports,
producer, metadata, graph inputs/outputs and initializers MindSpore cannot type.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from converters.errors import InvalidModelError, UnsupportedError
from converters.graph_view import weightless
from converters.lite import dtypes
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from converters.lite.quant import QUANT_DYNAMIC
from converters.naming import unique_name
from converters.onnx_import import HEADER_TENSOR, PROGRESS_EVERY, carried_node
from converters.onnx_ops.export_base import (
    LAYOUT_OPS,
    TO_NCHW,
    TO_NHWC,
    ExportContext,
    is_nhwc,
)
from converters.onnx_ops.export_math import activation
from converters.onnx_ops.export_nn import TO_OIHW, integer_product
from converters.onnx_ops.export_quant import (
    QUANT_ALL,
    channel_axis,
    dequantize_linear,
    is_quantized,
    moves_codes,
    quantize_linear,
)
from converters.onnx_ops.exporters import EXPORTERS

DEFAULT_OPSET = 17
DEFAULT_IR_VERSION = 8  # what opset 17 needs; loadable by every onnxruntime we support
NO_ACT = "NO_ACTIVATION"


def export_onnx(model: LiteModel, *,
                progress: Callable[[int, int], None] | None = None) -> onnx.ModelProto:
    """The ONNX model computing what `model` computes (passes onnx.checker).

    `progress(done, total)` is called every few nodes (for long exports).
    """
    _check_indices(model)
    header, header_index = _header(model)
    opset = _default_opset(header)
    ctx = ExportContext(model, opset, skip={header_index} if header_index is not None else set())
    total = len(model.nodes)
    for done, node in enumerate(model.nodes, 1):
        try:
            _export_node(ctx, node)
        except (IndexError, KeyError, TypeError, ValueError) as e:
            if isinstance(e, InvalidModelError):
                raise
            raise InvalidModelError(f"node {node.name!r} ({node.op}) is malformed: "
                                    f"{type(e).__name__}: {e}") from e
        if progress is not None and (done % PROGRESS_EVERY == 0 or done == total):
            progress(done, total)
    out = helper.make_model(onnx.GraphProto(), opset_imports=_opsets(header, opset))
    _fill_graph(out.graph, ctx, model, header)
    if header is not None:
        _restore_model_fields(out, header)
    else:
        out.ir_version = DEFAULT_IR_VERSION
        out.producer_name = "litenpu"
    try:
        onnx.checker.check_model(weightless(out))
    except onnx.checker.ValidationError as e:
        raise InvalidModelError(f"exported ONNX model of {model.name!r} is invalid: {e}") from e
    return out


def _check_indices(model: LiteModel) -> None:
    """InvalidModelError for a node or graph I/O naming a tensor that does not exist."""
    n = len(model.tensors)
    for node in model.nodes:
        bad = [i for i in (*node.inputs, *node.outputs) if not 0 <= i < n]
        if bad:
            raise InvalidModelError(f"node {node.name!r} ({node.op}) refers to tensor(s) {bad}; "
                                    f"the model has {n}")
    bad = [i for i in (*model.inputs, *model.outputs) if not 0 <= i < n]
    if bad:
        raise InvalidModelError(f"graph inputs/outputs refer to tensor(s) {bad}; the model has {n}")


def _header(model: LiteModel) -> tuple[onnx.ModelProto | None, int | None]:
    for i, t in enumerate(model.tensors):
        if t.name == HEADER_TENSOR and t.data is not None:
            try:
                return onnx.ModelProto.FromString(np.asarray(t.data).tobytes()), i
            except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
                raise InvalidModelError(f"tensor {HEADER_TENSOR!r} is not an ONNX header: {e}"
                                        ) from e
    return None, None


def _default_opset(header: onnx.ModelProto | None) -> int:
    if header is not None:
        for o in header.opset_import:
            if o.domain in ("", "ai.onnx"):
                return o.version
    return DEFAULT_OPSET


def _opsets(header: onnx.ModelProto | None, opset: int) -> list[onnx.OperatorSetIdProto]:
    if header is not None and len(header.opset_import):
        return list(header.opset_import)
    return [helper.make_opsetid("", opset)]


def _restore_model_fields(out: onnx.ModelProto, header: onnx.ModelProto) -> None:
    for f in ("ir_version", "producer_name", "producer_version", "domain", "model_version",
              "doc_string"):
        setattr(out, f, getattr(header, f))
    out.metadata_props.extend(header.metadata_props)
    out.functions.extend(header.functions)
    out.graph.name = header.graph.name
    out.graph.doc_string = header.graph.doc_string


def _export_node(ctx: ExportContext, node: LiteNode) -> None:
    if node.op == "Custom":
        _export_custom(ctx, node)
        return
    fn = integer_product if node.quant_type == QUANT_DYNAMIC else EXPORTERS.lookup(node.op)
    if fn is None:
        raise UnsupportedError(f"node {node.name!r}: Lite op {node.op} has no ONNX export "
                               f"(exportable: {', '.join(EXPORTERS.ops())})")
    ins = [ctx.name(i) for i in node.inputs]
    outs = [ctx.name(i) for i in node.outputs]
    final = list(outs)
    nhwc = node.op in LAYOUT_OPS and is_nhwc(ctx, node)
    if nhwc:  # (a quantized node's transposes move its codes: the QDQ unit stays whole)
        ins[0] = ctx.add("Transpose", [ins[0]], perm=TO_NCHW, name=f"{node.name}/to_nchw")
        outs = [ctx.fresh(f"{o}/nchw") for o in outs]
    quantized = node.quant_type == QUANT_ALL and not moves_codes(ctx.model, node)
    if quantized:  # QDQ: dequantize the integer inputs, quantize the float results
        ctx.as_float = {i for i in (*node.inputs, *node.outputs)
                        if is_quantized(ctx.model.tensors[i])}
        ins = _dequantized_inputs(ctx, node, ins)
        codes, outs = outs, [ctx.fresh(f"{o}/float") for o in outs]
    act = node.attrs.get("activation_type", NO_ACT) if node.op != "Activation" else NO_ACT
    pre_act = [ctx.fresh(f"{outs[0]}/pre_act")] + outs[1:] if act != NO_ACT else outs
    fn(ctx, node, ins, pre_act)
    if act != NO_ACT:
        activation(ctx, act, {}, pre_act[0], outs[0], ctx.np_dtype(node.outputs[0]),
                   f"{node.name}/act")
    if quantized:
        ctx.as_float = set()
        for index, value, out in zip(node.outputs, outs, codes, strict=True):
            if is_quantized(ctx.model.tensors[index]):
                quantize_linear(ctx, index, value, out, f"{node.name}/quantize")
            else:
                ctx.add("Identity", [value], [out], name=f"{node.name}/identity")
        outs = codes
    if nhwc:
        for tmp, out in zip(outs, final, strict=True):
            ctx.add("Transpose", [tmp], [out], perm=TO_NHWC, name=f"{node.name}/to_nhwc")


def _dequantized_inputs(ctx: ExportContext, node: LiteNode, ins: list[str]) -> list[str]:
    """The float ONNX values a QUANT_ALL node's op reads: its quantized inputs dequantized
    (a conv weight MindSpore lays out OHWI is transposed to OIHW first, as int8 codes, so
    the DequantizeLinear reads a constant, the form the importer folds)."""
    out = []
    for position, (index, name) in enumerate(zip(node.inputs, ins, strict=True)):
        t = ctx.model.tensors[index]
        if not is_quantized(t):
            out.append(name)
            continue
        data = ctx.value(index)
        rank = data.ndim if data is not None else len(t.shape)
        axis = channel_axis(node, position, rank)
        perm = TO_OIHW.get(t.format) if position == 1 and node.op == "Conv2DFusion" else None
        if perm is not None and data is not None:
            name = ctx.const(np.ascontiguousarray(np.asarray(data).transpose(perm)), f"{name}/oihw")
            ctx.oihw.add(index)
        out.append(dequantize_linear(ctx, index, name, axis, f"{node.name}/dequantize{position}"))
    return out


def _export_custom(ctx: ExportContext, node: LiteNode) -> None:
    proto = carried_node(node)
    if proto is None:
        raise UnsupportedError(f"node {node.name!r}: Custom op {node.attrs.get('type', '')!r} "
                               "did not come from ONNX and has no ONNX export")
    # Naming every input also emits the constants that subgraphs read from outer scope.
    ins = iter([ctx.name(i) for i in node.inputs])
    outs = iter([ctx.name(i) for i in node.outputs])
    # Lite inputs are the NodeProto's non-empty inputs (then outer-scope values): re-link them.
    proto.input[:] = [next(ins, n) if n else "" for n in proto.input]
    proto.output[:] = [next(outs, n) if n else "" for n in proto.output]
    ctx.nodes.append(proto)


def _fill_graph(graph: onnx.GraphProto, ctx: ExportContext, model: LiteModel,
                header: onnx.ModelProto | None) -> None:
    """Write nodes, I/O and initializers into `graph` (in place: weights are copied once)."""
    _unique_node_names(ctx.nodes)
    out_names = [ctx.names[i] for i in model.outputs]
    _materialise_const_outputs(ctx, model)
    if header is not None and _io_matches(header, ctx, model):
        inputs, outputs = list(header.graph.input), list(header.graph.output)
    else:
        inputs = [_value_info(ctx.names[i], model.tensors[i]) for i in model.inputs]
        outputs = [_value_info(n, model.tensors[i]) for n, i in zip(out_names, model.outputs,
                                                                       strict=True)]
    listed = {vi.name for vi in inputs}
    for i, t in enumerate(model.tensors):
        if t.data is not None and ctx.names[i] in listed:
            ctx.name(i)  # initializers the source lists as graph inputs, used or not
    used = _referenced_names(ctx.nodes) | listed
    for name, value in ctx.initializers.items():
        if name in used:
            _write_tensor(graph.initializer.add(), name, value)
    if header is not None:
        graph.initializer.extend(header.graph.initializer)
        # A listed input that is neither a model input nor a constant any more was a weight
        # the IR replaced (e.g. re-laid out by converters.nhwc).
        live = {ctx.names[i] for i in model.inputs} | {t.name for t in graph.initializer}
        inputs = [vi for vi in inputs if vi.name in live]
        if header.ir_version < 4:  # before IR 4 every initializer is also a graph input
            inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                       for t in graph.initializer if t.name not in listed]
    graph.name = model.name or "litenpu"
    graph.node.extend(ctx.nodes)
    graph.input.extend(inputs)
    graph.output.extend(outputs)


def _write_tensor(tensor: onnx.TensorProto, name: str, value: np.ndarray) -> None:
    """Fill `tensor` from a numeric array: one copy of the bytes (little-endian raw_data)."""
    tensor.name = name
    tensor.data_type = helper.np_dtype_to_tensor_dtype(value.dtype)
    tensor.dims.extend(value.shape)
    tensor.raw_data = np.ascontiguousarray(value, value.dtype.newbyteorder("<")).tobytes()


def _unique_node_names(nodes: list[onnx.NodeProto]) -> None:
    """onnxruntime refuses repeated node names (MindSpore files and helper nodes have them)."""
    seen: set[str] = set()
    for node in nodes:
        if node.name:
            node.name = unique_name(node.name, seen)


def _referenced_names(nodes) -> set[str]:
    """Every value name read by `nodes` or by nodes of their subgraphs (any depth)."""
    names: set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        names.update(node.input)
        for attr in node.attribute:
            for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs):
                stack.extend(g.node)
                names.update(vi.name for vi in g.output)
    return names


def _materialise_const_outputs(ctx: ExportContext, model: LiteModel) -> None:
    """A graph output that is a constant is produced by a Constant node, not an initializer."""
    for i in model.outputs:
        t = model.tensors[i]
        if t.data is not None:
            name = ctx.names[i]
            ctx.initializers.pop(name, None)
            value = onnx.TensorProto()
            _write_tensor(value, name, np.asarray(t.data))
            ctx.nodes.insert(0, helper.make_node("Constant", [], [name], value=value))


def _io_matches(header: onnx.ModelProto, ctx: ExportContext, model: LiteModel) -> bool:
    graph_inputs = {vi.name for vi in header.graph.input}
    return ({ctx.names[i] for i in model.inputs} <= graph_inputs
            and [vi.name for vi in header.graph.output] == [ctx.names[i] for i in model.outputs])


def _value_info(name: str, tensor: LiteTensor) -> onnx.ValueInfoProto:
    if not dtypes.has_numpy(tensor.type_id):
        raise UnsupportedError(f"graph input/output {name!r}: MindSpore TypeId "
                               f"{tensor.type_id} has no ONNX type")
    elem = helper.np_dtype_to_tensor_dtype(dtypes.to_numpy(tensor.type_id))
    dims = [d if isinstance(d, str) else (d if d >= 0 else None) for d in tensor.shape]
    return helper.make_tensor_value_info(name, elem, dims)
