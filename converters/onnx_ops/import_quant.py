"""Quantized ONNX -> quantized Lite ops: QDQ units folded, QOperator nodes mapped.

Before the nodes are walked, `QuantPlan` reads every QuantizeLinear / DequantizeLinear and
QOperator node (QLinearConv, QLinearMatMul, and com.microsoft's QLinearAdd / QLinearMul /
QLinearConcat / QLinearGlobalAveragePool / QLinearAveragePool / QLinearSigmoid /
QLinearLeakyRelu / QLinearSoftmax / QGemm) and gives each 8-bit (or int32 bias) value its quantization, checked
(`converters.lite.quant.check`: a zero, negative or NaN scale, a zero point outside the
type, a bad per-channel axis or count is an InvalidModelError naming the tensor). A value
two nodes quantize differently keeps no quantization and its nodes stay as they are.

A *unit* is `DequantizeLinear(s) -> op [-> Relu / Clip(0, 6)] -> QuantizeLinear` where op is
in `FOLDABLE`, every data input comes from a DequantizeLinear of an 8-bit value (weights
per channel on the op's output-channel axis), a bias from a DequantizeLinear of int32 codes
at scale input scale x weight scale, and the op's output is read by that one Quantize
only. It becomes ONE Lite node, the op's own primitive with `quant_type = QUANT_ALL`,
reading the integer codes and writing the Quantize's output (MindSpore Lite's full
quantization). A Dequantize whose every reader is a unit disappears into them; any other
Quantize / Dequantize with a known quantization becomes an explicit `QuantDTypeCast` step,
so nothing is lost. The ONNX nodes of a unit all report the unit's Lite node as their
origin (GetCapability places them together). Dynamic quantization (DynamicQuantizeLinear,
MatMulInteger, ConvInteger) maps node for node, in `import_quant_dynamic`.

Long by design: the plan (which values are quantized how, which nodes form a unit) is one
pass over the graph whose parts only make sense together.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from converters.errors import InvalidModelError
from converters.lite import dtypes
from converters.lite.quant import QUANT_ALL, Quant, check
from converters.onnx_ops.import_base import IMPORTERS, emit
from converters.onnx_ops.registry import Unmappable

MS_DOMAIN = "com.microsoft"
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
CODES = (np.dtype(np.int8), np.dtype(np.uint8))

# op type -> (positions of its quantized data inputs (None: all), position of a weight whose
# per-channel axis must be the output channels, that axis for a rank-r weight, bias position)
FOLDABLE: dict[str, tuple] = {
    "Conv": ((0, 1), 1, lambda node, r: 0, 2),
    "ConvTranspose": ((0, 1), 1, lambda node, r: 1, 2),
    "MatMul": ((0, 1), 1, lambda node, r: r - 1, None),
    "Gemm": ((0, 1), 1, lambda node, r: 0 if node.attrs.get("transB", 0) else 1, 2),
    "Add": ((0, 1), None, None, None),
    "Mul": ((0, 1), None, None, None),
    "Concat": (None, None, None, None),
    "MaxPool": ((0,), None, None, None),
    "AveragePool": ((0,), None, None, None),
    "GlobalAveragePool": ((0,), None, None, None),
    "GlobalMaxPool": ((0,), None, None, None),
    "Resize": ((0,), None, None, None),
    "Relu": ((0,), None, None, None),
    "Clip": ((0,), None, None, None),
    "Sigmoid": ((0,), None, None, None),
    "Tanh": ((0,), None, None, None),
    "HardSwish": ((0,), None, None, None),
    "HardSigmoid": ((0,), None, None, None),
    "LeakyRelu": ((0,), None, None, None),
    "Softmax": ((0,), None, None, None),
}
# Ops whose fused activation a following Relu / Clip(0, 6) becomes.
FUSES_ACTIVATION = {"Conv", "MatMul", "Gemm", "Add", "Mul"}
# Not folded: Sum (onnxruntime has no integer Sum: it adds in float between the Dequantize
# and Quantize nodes, and so does the NPU, to the bit).


@dataclass
class Unit:
    """One foldable op with its Dequantize producers and Quantize consumer (node indices)."""

    op: int
    inputs: dict[int, str]  # input position -> integer value read instead of the float one
    dequantize: list[int]
    after: list[int]  # the Relu/Clip (if fused) and the Quantize
    output: str
    activation: str = "NO_ACTIVATION"


@dataclass
class QuantPlan:
    """What the quantized nodes of one graph become (see the module docstring)."""

    quant: dict[str, Quant] = field(default_factory=dict)
    dtype: dict[str, np.dtype] = field(default_factory=dict)
    conflicted: set[str] = field(default_factory=set)
    units: dict[int, Unit] = field(default_factory=dict)  # op node index -> unit
    folded_dq: dict[int, list[int]] = field(default_factory=dict)  # DQ index -> its units
    done: dict[int, list[int]] = field(default_factory=dict)  # unit op -> its Lite nodes
    failed: set[int] = field(default_factory=set)
    absorbed: set[int] = field(default_factory=set)  # DQs read by units only
    emitted: dict[int, list[int]] = field(default_factory=dict)  # DQ -> its explicit Lite step

    def known(self, name: str) -> Quant | None:
        """The quantization of integer value `name` (None: none, or two that disagree)."""
        return None if name in self.conflicted else self.quant.get(name)


class _Consts:
    """Constant values of a view: initializers and Constant node outputs."""

    def __init__(self, view):
        self.values = dict(view.initializers)
        for node in view.nodes:
            if node.op_type == "Constant" and not node.domain and "value" in node.attrs:
                value = node.attrs["value"]
                if isinstance(value, np.ndarray):
                    self.values[node.outputs[0]] = value

    def get(self, name: str) -> np.ndarray | None:
        return self.values.get(name) if name else None


def _arg(node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i else ""


def plan(view) -> QuantPlan:
    """The QuantPlan of a GraphView (InvalidModelError for malformed quantization)."""
    consts = _Consts(view)
    p = QuantPlan()
    info = dict(view.value_info)
    info.update({vi.name: vi for vi in (*view.inputs, *view.outputs)})

    def rank(name: str) -> int | None:
        v = consts.get(name)
        if v is not None:
            return v.ndim
        vi = info.get(name)
        return None if vi is None or vi.shape is None else len(vi.shape)

    def shape(name: str):
        v = consts.get(name)
        if v is not None:
            return v.shape
        vi = info.get(name)
        return None if vi is None else vi.shape

    def record(name: str, scale_name: str, zp_name: str, dtype, axis) -> None:
        """Record value `name`'s quantization; a node whose parameters are not numbers of the
        expected kinds (a float zero point, a string scale, blocked quantization) leaves the
        value unquantized: it is carried as it is (onnxruntime judges it)."""
        scale, zp = consts.get(scale_name), consts.get(zp_name)
        if not name or scale is None or (zp_name and zp is None) or np.dtype(dtype) not in (*CODES, I32):
            return
        numeric = (scale.dtype.kind == "f" and (zp is None or zp.dtype.kind in "iu")
                   and (axis is None or isinstance(axis, (int, np.integer))))
        if not numeric or np.asarray(scale).ndim > 1:  # (ndim > 1: opset 21's blocks)
            p.conflicted.add(name)
            return
        per_channel = np.asarray(scale).size > 1
        r = rank(name)
        if per_channel and r is not None:
            if not -r <= axis < r:
                raise InvalidModelError(f"tensor {name!r}: per-channel axis {axis} out of "
                                        f"range for rank {r}")
            axis %= r
        q = check(name, scale, zp, dtype, axis=axis if per_channel else None, shape=shape(name))
        old = p.quant.get(name)
        if old is not None and not old.same(q):
            p.conflicted.add(name)
        p.quant.setdefault(name, q)
        p.dtype.setdefault(name, np.dtype(dtype))

    def code_dtype(name: str, zp_name: str, default=np.uint8) -> np.dtype:
        zp = consts.get(zp_name)
        if zp is not None:
            return zp.dtype
        v = consts.get(name)
        if v is not None:
            return v.dtype
        vi = info.get(name)
        return vi.dtype if vi is not None and vi.dtype is not None else np.dtype(default)

    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(view.nodes):
        for o in node.outputs:
            producer[o] = i
        for n in (*node.inputs, *node.implicit_inputs):
            readers.setdefault(n, []).append(i)
        op, dom = node.op_type, node.domain
        if dom == "" and op == "QuantizeLinear":
            if node.attrs.get("block_size", 0):
                continue
            dt = node.attrs.get("output_dtype")
            dtype = code_dtype(node.outputs[0], _arg(node, 2)) if not dt else \
                np.dtype(_onnx_np(dt))
            record(node.outputs[0], _arg(node, 1), _arg(node, 2), dtype, node.attrs.get("axis", 1))
        elif dom == "" and op == "DequantizeLinear":
            if node.attrs.get("block_size", 0):
                continue
            dtype = code_dtype(node.inputs[0], _arg(node, 2))
            record(node.inputs[0], _arg(node, 1), _arg(node, 2), dtype, node.attrs.get("axis", 1))
        else:
            for name, s, z, axis in _qoperator_params(node):
                dtype = code_dtype(name, z, np.int32 if axis == "bias" else np.uint8)
                if axis == "bias":
                    continue  # QLinearConv's bias: its scale is derived when it is mapped
                record(name, s, z, dtype, axis)
    graph_outputs = {vi.name for vi in view.outputs}
    for i, node in enumerate(view.nodes):
        unit = _unit(view, p, consts, i, node, producer, readers, graph_outputs, rank)
        if unit is not None:
            p.units[i] = unit
    for i, unit in p.units.items():
        for d in unit.dequantize:
            p.folded_dq.setdefault(d, []).append(i)
    for d, units in p.folded_dq.items():
        out = view.nodes[d].outputs[0]
        if out not in graph_outputs and all(r in units for r in readers.get(out, [])):
            p.absorbed.add(d)
    return p


def _onnx_np(elem_type: int) -> np.dtype:
    from onnx import helper
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _qoperator_params(node) -> list[tuple[str, str, str, object]]:
    """(value, scale input, zero point input, axis) of each quantized value a QOperator node
    reads or writes; axis "bias" for QLinearConv's int32 bias."""
    a = lambda i: _arg(node, i)  # noqa: E731
    op, dom = node.op_type, node.domain
    if dom == "" and op == "QLinearConv":
        return [(a(0), a(1), a(2), None), (a(3), a(4), a(5), 0), (node.outputs[0], a(6), a(7), None)]
    if dom == "" and op == "QLinearMatMul":
        return [(a(0), a(1), a(2), None), (a(3), a(4), a(5), -1), (node.outputs[0], a(6), a(7), None)]
    if dom == MS_DOMAIN and op == "QGemm":
        out = [(a(0), a(1), a(2), None), (node.outputs[0], a(7), a(8), None)]
        axis = 0 if node.attrs.get("transB", 0) else 1
        return [*out, (a(3), a(4), a(5), axis)]
    if dom == MS_DOMAIN and op in ("QLinearAdd", "QLinearMul"):
        return [(a(0), a(1), a(2), None), (a(3), a(4), a(5), None),
                (node.outputs[0], a(6), a(7), None)]
    if dom == MS_DOMAIN and op in ("QLinearGlobalAveragePool", "QLinearAveragePool",
                                   "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax"):
        return [(a(0), a(1), a(2), None), (node.outputs[0], a(3), a(4), None)]
    if dom == MS_DOMAIN and op == "QLinearConcat":
        out = [(node.outputs[0], a(0), a(1), None)]
        for k in range(2, len(node.inputs) - 2, 3):
            out.append((a(k), a(k + 1), a(k + 2), None))
        return out
    return []


def _unit(view, p: QuantPlan, consts: _Consts, i: int, node, producer, readers,
          graph_outputs, rank) -> Unit | None:
    """The unit `node` heads, or None when it does not fold (see the module docstring)."""
    spec = FOLDABLE.get(node.op_type)
    if spec is None or node.domain or not node.outputs:
        return None
    data, weight, axis_of, bias = spec
    positions = range(len(node.inputs)) if data is None else [k for k in data if k < len(node.inputs)]
    inputs: dict[int, str] = {}
    dequantize: list[int] = []
    act_scale = None
    for k in positions:
        name = node.inputs[k]
        d = producer.get(name)
        if not name or d is None:
            return None
        dq = view.nodes[d]
        if dq.op_type != "DequantizeLinear" or dq.domain:
            return None
        src = dq.inputs[0]
        q = p.known(src)
        if q is None or p.dtype.get(src) not in CODES or not _same_params(consts, dq, q):
            return None
        if q.per_channel:
            r = rank(src)
            if k != weight or consts.get(src) is None or r is None or q.axis != axis_of(node, r):
                return None
        elif k == 0:
            act_scale = q
        inputs[k] = src
        dequantize.append(d)
    if bias is not None and _arg(node, bias):
        name = node.inputs[bias]
        d = producer.get(name)
        dq = view.nodes[d] if d is not None else None
        q = p.known(dq.inputs[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        if q is None or p.dtype.get(dq.inputs[0]) != I32 or consts.get(dq.inputs[0]) is None \
                or not _same_params(consts, dq, q) or np.any(q.zero_point != 0):
            return None
        if act_scale is None or weight not in inputs:
            return None
        w = p.quant[inputs[weight]]
        expect = act_scale.scale.astype(np.float64) * w.scale.astype(np.float64)
        sizes = {q.scale.size, expect.size}
        if (len(sizes) > 1 and 1 not in sizes) or not np.allclose(q.scale, expect, rtol=1e-4,
                                                                   atol=0):
            return None
        inputs[bias] = dq.inputs[0]
        dequantize.append(d)
    out = node.outputs[0]
    after: list[int] = []
    activation = "NO_ACTIVATION"
    nxt = readers.get(out, [])
    if out in graph_outputs or len(nxt) != 1 or any(o for o in node.outputs[1:] if readers.get(o)):
        return None
    follower = view.nodes[nxt[0]]
    if node.op_type in FUSES_ACTIVATION and follower.op_type in ("Relu", "Clip") and not follower.domain:
        activation = _fused_activation(consts, follower)
        if activation is None:
            return None
        after.append(nxt[0])
        out = follower.outputs[0]
        nxt = readers.get(out, [])
        if out in graph_outputs or len(nxt) != 1:
            return None
        follower = view.nodes[nxt[0]]
    if follower.op_type != "QuantizeLinear" or follower.domain or follower.inputs[0] != out:
        return None
    q_out = follower.outputs[0]
    q = p.known(q_out)
    if q is None or q.per_channel or p.dtype.get(q_out) not in CODES:
        return None
    after.append(nxt[0])
    return Unit(i, inputs, dequantize, after, q_out, activation)


def _same_params(consts: _Consts, node, q: Quant) -> bool:
    """Whether a Q/DQ node's own scale / zero point are those recorded for its value."""
    scale = consts.get(_arg(node, 1))
    zp = consts.get(_arg(node, 2))
    zp = np.zeros(np.asarray(scale).shape, np.int64) if zp is None else zp
    return (scale is not None and np.array_equal(np.asarray(scale, np.float32).reshape(-1), q.scale)
            and np.array_equal(np.asarray(zp, np.int64).reshape(-1), q.zero_point))


def _fused_activation(consts: _Consts, node) -> str | None:
    if node.op_type == "Relu":
        return "RELU"
    lo = consts.get(_arg(node, 1)) if len(node.inputs) > 1 else node.attrs.get("min")
    hi = consts.get(_arg(node, 2)) if len(node.inputs) > 2 else node.attrs.get("max")
    bounds = (None if lo is None else float(np.asarray(lo)), None if hi is None else float(np.asarray(hi)))
    return {(0.0, 6.0): "RELU6", (0.0, None): "RELU"}.get(bounds)


# ---- import ---------------------------------------------------------------------------------


def import_unit(ctx, unit: Unit, node) -> list:
    """The quantized Lite node of `unit` (Unmappable when its op has no Lite mapping)."""
    inputs = tuple(unit.inputs.get(k, name) for k, name in enumerate(node.inputs))
    view = dataclasses.replace(node, inputs=inputs, outputs=(unit.output, *node.outputs[1:]))
    if node.op_type == "Clip":
        produced = [_clip(ctx, view)]
    else:
        fn = IMPORTERS.lookup(node.op_type, ctx.opset)
        if fn is None:
            raise Unmappable(f"no Lite mapping for {node.op_type}")
        produced = fn(ctx, view)
    if len(produced) != 1:
        raise Unmappable(f"{node.op_type} maps to {len(produced)} Lite nodes")
    lite = produced[0]
    lite.quant_type = QUANT_ALL
    if unit.activation != "NO_ACTIVATION":
        lite.attrs["activation_type"] = unit.activation
    return produced


def _clip(ctx, view):
    lo = ctx.const_value(_arg(view, 1)) if len(view.inputs) > 1 else view.attrs.get("min")
    hi = ctx.const_value(_arg(view, 2)) if len(view.inputs) > 2 else view.attrs.get("max")
    if (_arg(view, 1) and lo is None) or (_arg(view, 2) and hi is None):
        raise Unmappable("Clip bounds are not constants")
    lo = -np.inf if lo is None else float(np.asarray(lo))
    hi = np.inf if hi is None else float(np.asarray(hi))
    return emit(ctx, view, "Clip", {"min": lo, "max": hi}, view.inputs[:1])


def cast_node(ctx, node, p: QuantPlan):
    """The explicit QuantDTypeCast of a Quantize / Dequantize whose value has a known
    quantization (None when it has none: the node is then carried as it is)."""
    quantize = node.op_type == "QuantizeLinear"
    code = node.outputs[0] if quantize else node.inputs[0]
    q = p.known(code)
    if q is None or node.domain or node.attrs.get("block_size", 0):
        return None
    consts_ok = ctx.const_value(_arg(node, 1)) is not None and (
        not _arg(node, 2) or ctx.const_value(_arg(node, 2)) is not None)
    if not consts_ok:
        return None
    scale = np.asarray(ctx.const_value(_arg(node, 1)), np.float32).reshape(-1)
    zp = ctx.const_value(_arg(node, 2))
    zp = np.zeros(scale.shape, np.int64) if zp is None else np.asarray(zp, np.int64).reshape(-1)
    if not (np.array_equal(scale, q.scale) and np.array_equal(zp, q.zero_point)):
        return None
    code_type = dtypes.from_numpy(p.dtype[code])
    float_name = node.inputs[0] if quantize else node.outputs[0]
    float_dtype = ctx.dtype(float_name) or F32
    if float_dtype != F32:
        return None
    attrs = {"src_t": dtypes.FLOAT32 if quantize else code_type,
             "dst_t": code_type if quantize else dtypes.FLOAT32,
             "axis": int(q.axis) if q.axis is not None else 0}
    return emit(ctx, node, "QuantDTypeCast", attrs, [node.inputs[0]], node.outputs[:1])


def apply(ctx, p: QuantPlan) -> None:
    """Give every integer Lite tensor whose value has a known quantization its dtype and
    quantParams."""
    for name, q in p.quant.items():
        if name in p.conflicted or not ctx.is_known(name):
            continue
        t = ctx.model.tensors[ctx.tensor(name)]
        t.type_id = dtypes.from_numpy(p.dtype[name])
        t.quant_params = q.params(p.dtype[name].itemsize * 8)


# ---- the walk ---------------------------------------------------------------------------


def import_node(ctx, p: QuantPlan, i: int, node) -> list | None:
    """The Lite nodes of ONNX node `i` when the plan decides them (a unit, a node a unit
    absorbed: [], an explicit cast, a QOperator node); None to import it the usual way (a
    unit that does not map adds the Dequantize steps it absorbed first)."""
    unit = p.units.get(i)
    if unit is not None:
        try:
            produced = import_unit(ctx, unit, node)
        except Unmappable:
            p.failed.add(i)
            out = []
            for d in unit.dequantize:  # its Dequantize steps are needed after all
                if d in p.absorbed and d not in p.emitted:
                    cast = cast_node(ctx, ctx.view.nodes[d], p)
                    if cast is None:
                        raise InvalidModelError(f"node {ctx.view.nodes[d].name!r}: a folded "
                                                "Dequantize has no explicit form") from None
                    p.emitted[d] = [len(ctx.model.nodes) + len(out)]
                    out.append(cast)
            for lite in out:
                ctx.model.add_node(lite)
            return None
        p.done[i] = produced
        return produced
    if i in p.absorbed:
        return []
    owner = next((u for u, unit in p.units.items() if i in unit.after), None)
    if owner is not None and owner not in p.failed:
        return []
    if node.op_type in ("QuantizeLinear", "DequantizeLinear") and not node.domain:
        cast = cast_node(ctx, node, p)
        return None if cast is None else [cast]
    mapper = QOPERATORS.get((node.domain, node.op_type))
    if mapper is None:
        return None
    try:
        return mapper(ctx, p, node)
    except Unmappable:
        return None


def origins(p: QuantPlan, lite_nodes: list, origin: list[list[int]]) -> None:
    """Point the ONNX nodes of every folded unit at the unit's Lite node (in place)."""
    index = {id(n): k for k, n in enumerate(lite_nodes)}
    for d, steps in p.emitted.items():  # Dequantize steps a unit that did not map needed
        origin[d] = sorted({*origin[d], *steps})
    for u, produced in p.done.items():
        unit = p.units[u]
        mine = [index[id(n)] for n in produced]
        for j in (*unit.dequantize, *unit.after):
            origin[j] = sorted({*origin[j], *mine, *p.emitted.get(j, [])})


# ---- QOperator nodes ------------------------------------------------------------------------


def _qop(op_type: str, data: tuple[int, ...]):
    """A mapper of a QOperator node: its float twin `op_type` over inputs `data`, the
    quantization read from the plan (Unmappable where it is unknown or disagrees)."""

    def mapper(ctx, p: QuantPlan, node):
        names = [_arg(node, k) for k in data]
        for name in (*names, node.outputs[0]):
            if name and p.known(name) is None:
                raise_unmappable(f"value {name!r} has no single known quantization")
        attrs = {k: v for k, v in node.attrs.items() if k != "channels_last"}
        if node.attrs.get("channels_last", 0):
            raise_unmappable("channels_last=1")
        view = dataclasses.replace(node, op_type=op_type, domain="", inputs=tuple(names),
                                   outputs=node.outputs[:1], attrs=attrs)
        fn = IMPORTERS.lookup(op_type, ctx.opset)
        produced = fn(ctx, view)
        if len(produced) != 1:
            raise_unmappable(f"{op_type} maps to {len(produced)} Lite nodes")
        produced[0].quant_type = QUANT_ALL
        return produced

    return mapper


def raise_unmappable(why: str):
    raise Unmappable(why)


def _qlinear_conv(ctx, p: QuantPlan, node):
    produced = _qop("Conv", (0, 3))(ctx, p, node)
    bias = _arg(node, 8)
    if bias:
        _bias_quant(ctx, p, bias, node.inputs[0], node.inputs[3], axis=0)
        produced[0].inputs.append(ctx.tensor(bias))
    return produced


def _qgemm(ctx, p: QuantPlan, node):
    """QGemm with an 8-bit output (y_scale given); its int32 bias C at scale a x b."""
    if not _arg(node, 7):
        raise Unmappable("QGemm with a float output")
    produced = _qop("Gemm", (0, 3))(ctx, p, dataclasses.replace(node, inputs=node.inputs))
    bias = _arg(node, 6)
    if bias:
        _bias_quant(ctx, p, bias, node.inputs[0], node.inputs[3], axis=0)
        produced[0].inputs.append(ctx.tensor(bias))
    return produced


def _bias_quant(ctx, p: QuantPlan, bias: str, x: str, w: str, axis: int) -> None:
    """Record the quantization of an int32 bias: scale x scale * w scale, zero point 0."""
    qx, qw = p.known(x), p.known(w)
    value = ctx.const_value(bias)
    if value is None or value.dtype != I32:
        raise_unmappable("the bias is not constant int32")
    scale = (qx.scale * qw.scale).astype(np.float32)
    p.quant[bias] = Quant(scale, np.zeros(scale.shape, np.int64), axis if qw.per_channel else None)
    p.dtype[bias] = I32


def _qlinear_softmax(ctx, p: QuantPlan, node):
    """QLinearSoftmax: its own `opset` attribute picks the semantics (before 13: softmax
    over the input flattened from `axis`, default 1, on); mapped to a per-axis Softmax when
    that is one axis (the others from `axis` on have size 1)."""
    x, y = node.inputs[0], node.outputs[0]
    if p.known(x) is None or p.known(y) is None:
        raise Unmappable("input or output without a single known quantization")
    shape = ctx.shape(x)
    if shape is None:
        raise Unmappable("QLinearSoftmax of unknown rank")
    rank = len(shape)
    legacy = int(node.attrs.get("opset", 13)) < 13
    axis = int(node.attrs.get("axis", 1 if legacy else -1)) % max(rank, 1)
    if legacy:
        wide = [a for a in range(axis, rank) if shape[a] != 1]
        if len(wide) > 1 or any(not isinstance(shape[a], int) for a in range(axis, rank)):
            raise Unmappable("pre-13 QLinearSoftmax over more than one axis")
        axis = wide[0] if wide else rank - 1
    lite = emit(ctx, node, "Softmax", {"axis": [axis]}, [x], [y])
    lite.quant_type = QUANT_ALL
    return [lite]


def _qlinear_concat(ctx, p: QuantPlan, node):
    data = tuple(range(2, len(node.inputs), 3))
    return _qop("Concat", data)(ctx, p, node)


QOPERATORS = {
    ("", "QLinearConv"): _qlinear_conv,
    ("", "QLinearMatMul"): _qop("MatMul", (0, 3)),
    (MS_DOMAIN, "QLinearAdd"): _qop("Add", (0, 3)),
    (MS_DOMAIN, "QLinearMul"): _qop("Mul", (0, 3)),
    (MS_DOMAIN, "QLinearConcat"): _qlinear_concat,
    (MS_DOMAIN, "QLinearGlobalAveragePool"): _qop("GlobalAveragePool", (0,)),
    (MS_DOMAIN, "QLinearAveragePool"): _qop("AveragePool", (0,)),
    (MS_DOMAIN, "QLinearSigmoid"): _qop("Sigmoid", (0,)),
    (MS_DOMAIN, "QLinearLeakyRelu"): _qop("LeakyRelu", (0,)),
    (MS_DOMAIN, "QLinearSoftmax"): _qlinear_softmax,
    (MS_DOMAIN, "QGemm"): _qgemm,
}
