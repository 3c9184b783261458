"""Lite -> ONNX for element-wise math, activations, comparisons, reductions and casts."""

from __future__ import annotations

import math

import numpy as np
from onnx import helper

from converters.errors import UnsupportedError
from converters.lite import dtypes
from converters.onnx_ops.export_base import EXPORTERS, unsupported

_PLAIN = {"AddFusion": "Add", "SubFusion": "Sub", "MulFusion": "Mul", "DivFusion": "Div",
          "RealDiv": "Div", "Sqrt": "Sqrt", "Erf": "Erf", "Neg": "Neg", "Abs": "Abs",
          "Sin": "Sin", "Cos": "Cos", "Log": "Log", "Floor": "Floor", "Ceil": "Ceil",
          "Reciprocal": "Reciprocal", "Equal": "Equal", "Less": "Less", "Greater": "Greater",
          "LessEqual": "LessOrEqual", "GreaterEqual": "GreaterOrEqual", "LogicalNot": "Not",
          "LogicalAnd": "And", "LogicalOr": "Or", "Where": "Where", "Select": "Where",
          "Maximum": "Max", "Minimum": "Min", "Round": "Round", "AddN": "Sum"}


def _plain(ctx, node, ins, outs):
    ctx.add(_PLAIN[node.op], ins, outs, name=node.name)


for _op in _PLAIN:
    EXPORTERS.register(_op)(_plain)


def activation(ctx, kind: str, a: dict, x: str, y: str, dtype: np.dtype, name: str) -> None:
    """Write `y = kind(x)` (a Lite ActivationType) with ONNX ops of the target opset."""
    simple = {"RELU": "Relu", "SIGMOID": "Sigmoid", "TANH": "Tanh", "SOFTSIGN": "Softsign",
              "SOFTPLUS": "Softplus", "ABS": "Abs", "SIGN": "Sign"}
    if kind in simple:
        ctx.add(simple[kind], [x], [y], name=name)
    elif kind == "NO_ACTIVATION":
        ctx.add("Identity", [x], [y], name=name)
    elif kind == "LEAKY_RELU":
        ctx.add("LeakyRelu", [x], [y], name=name, alpha=float(a.get("alpha", 0.01)))
    elif kind == "ELU":
        ctx.add("Elu", [x], [y], name=name, alpha=float(a.get("alpha", 1.0)))
    elif kind == "THRESHOLDRELU":
        ctx.add("ThresholdedRelu", [x], [y], name=name, alpha=float(a.get("alpha", 0.0)))
    elif kind in ("RELU6", "RELU1", "HARD_TANH"):
        bounds = {"RELU6": (0.0, 6.0), "RELU1": (0.0, 1.0),
                  "HARD_TANH": (a.get("min_val", -1.0), a.get("max_val", 1.0))}[kind]
        clip(ctx, x, y, bounds, dtype, name)
    elif kind == "HSIGMOID":
        ctx.add("HardSigmoid", [x], [y], name=name, alpha=1 / 6, beta=0.5)
    elif kind == "HSWISH":
        if ctx.opset >= 14:
            ctx.add("HardSwish", [x], [y], name=name)
        else:
            gate = ctx.add("HardSigmoid", [x], name=f"{name}/gate", alpha=1 / 6, beta=0.5)
            ctx.add("Mul", [x, gate], [y], name=name)
    elif kind == "SWISH":
        gate = ctx.add("Sigmoid", [x], name=f"{name}/gate")
        ctx.add("Mul", [x, gate], [y], name=name)
    elif kind == "GELU":
        gelu(ctx, x, y, bool(a.get("approximate", False)), dtype, name)
    elif kind == "FAST_GELU":  # x * sigmoid(1.702 x), MindSpore's FastGeLU
        k = ctx.const(np.array(1.702, dtype), f"{name}/k")
        gate = ctx.add("Sigmoid", [ctx.add("Mul", [x, k], name=f"{name}/scaled")],
                       name=f"{name}/gate")
        ctx.add("Mul", [x, gate], [y], name=name)
    else:
        raise unsupported_activation(kind)


def unsupported_activation(kind: str) -> UnsupportedError:
    return UnsupportedError(f"activation {kind} has no ONNX export")


def clip(ctx, x: str, y: str, bounds, dtype: np.dtype, name: str) -> None:
    lo, hi = bounds
    if ctx.opset >= 11:
        inputs = [x,
                  "" if lo == -math.inf else ctx.const(np.array(lo, dtype), f"{name}/min"),
                  "" if hi == math.inf else ctx.const(np.array(hi, dtype), f"{name}/max")]
        while inputs[-1] == "":
            inputs.pop()
        ctx.add("Clip", inputs, [y], name=name)
    else:
        ctx.add("Clip", [x], [y], name=name, min=float(lo), max=float(hi))


def gelu(ctx, x: str, y: str, approximate: bool, dtype: np.dtype, name: str) -> None:
    if ctx.opset >= 20:
        ctx.add("Gelu", [x], [y], name=name, approximate="tanh" if approximate else None)
        return

    def c(v, what):
        return ctx.const(np.array(v, dtype), f"{name}/{what}")

    if approximate:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = ctx.add("Mul", [x, ctx.add("Mul", [x, x])])
        inner = ctx.add("Add", [x, ctx.add("Mul", [cube, c(0.044715, "k")])])
        t = ctx.add("Tanh", [ctx.add("Mul", [inner, c(math.sqrt(2 / math.pi), "s")])])
    else:  # 0.5 x (1 + erf(x / sqrt 2))
        t = ctx.add("Erf", [ctx.add("Div", [x, c(math.sqrt(2), "sqrt2")])])
    half_x = ctx.add("Mul", [x, c(0.5, "half")])
    ctx.add("Mul", [half_x, ctx.add("Add", [t, c(1.0, "one")])], [y], name=name)


@EXPORTERS.register("Activation")
def activation_node(ctx, node, ins, outs):
    activation(ctx, node.attrs.get("activation_type", "NO_ACTIVATION"), node.attrs, ins[0],
               outs[0], ctx.np_dtype(node.inputs[0]), node.name)


@EXPORTERS.register("Mod")
def mod(ctx, node, ins, outs):
    """MindSpore Lite's Mod is C fmod for floats and ints alike."""
    ctx.add("Mod", ins[:2], outs, name=node.name, fmod=1)


def _floor_mod(ctx, node, ins, name: str, out: list[str] | None = None) -> str:
    """x - floor(x / y) * y (the remainder takes y's sign)."""
    if np.issubdtype(ctx.np_dtype(node.inputs[0]), np.integer):
        return ctx.add("Mod", ins[:2], out, name=name, fmod=0)
    quotient = ctx.add("Floor", [ctx.add("Div", ins[:2], name=f"{name}/div")])
    return ctx.add("Sub", [ins[0], ctx.add("Mul", [quotient, ins[1]])], out, name=name)


@EXPORTERS.register("FloorMod")
def floor_mod(ctx, node, ins, outs):
    _floor_mod(ctx, node, ins, node.name, outs)


@EXPORTERS.register("FloorDiv")
def floor_div(ctx, node, ins, outs):
    """floor(x / y); for integers (x - floor_mod(x, y)) / y, which divides exactly."""
    if np.issubdtype(ctx.np_dtype(node.inputs[0]), np.integer):
        rest = _floor_mod(ctx, node, ins, f"{node.name}/mod")
        ctx.add("Div", [ctx.add("Sub", [ins[0], rest]), ins[1]], outs, name=node.name)
    else:
        ctx.add("Floor", [ctx.add("Div", ins[:2], name=f"{node.name}/div")], outs,
                name=node.name)


@EXPORTERS.register("Log1p")
def log1p(ctx, node, ins, outs):
    """log(1 + x) accurate for tiny x (Kahan): u = 1 + x; x where u == 1, else
    log(u) * x / (u - 1), which cancels the rounding of 1 + x."""
    x = ins[0]
    one = ctx.const(np.array(1, ctx.np_dtype(node.inputs[0])), f"{node.name}/one")
    u = ctx.add("Add", [x, one], name=f"{node.name}/u")
    d = ctx.add("Sub", [u, one], name=f"{node.name}/u_minus_1")
    scaled = ctx.add("Div", [ctx.add("Mul", [ctx.add("Log", [u]), x]), d])
    exact = ctx.add("Equal", [d, ctx.const(np.array(0, ctx.np_dtype(node.inputs[0])),
                                           f"{node.name}/zero")])
    ctx.add("Where", [exact, x, scaled], outs, name=node.name)


@EXPORTERS.register("IsFinite")
def is_finite(ctx, node, ins, outs):
    bad = ctx.add("Or", [ctx.add("IsInf", ins[:1], name=f"{node.name}/inf"),
                         ctx.add("IsNaN", ins[:1], name=f"{node.name}/nan")])
    ctx.add("Not", [bad], outs, name=node.name)


@EXPORTERS.register("Elu")
def elu(ctx, node, ins, outs):
    ctx.add("Elu", ins[:1], outs, name=node.name, alpha=float(node.attrs.get("alpha", 0.0)))


@EXPORTERS.register("LeakyRelu")
def leaky_relu(ctx, node, ins, outs):
    ctx.add("LeakyRelu", ins[:1], outs, name=node.name,
            alpha=float(node.attrs.get("negative_slope", 0.0)))


@EXPORTERS.register("NotEqual")
def not_equal(ctx, node, ins, outs):
    ctx.add("Not", [ctx.add("Equal", ins[:2], name=f"{node.name}/equal")], outs, name=node.name)


@EXPORTERS.register("OnesLike", "ZerosLike")
def fill_like(ctx, node, ins, outs):
    """A tensor of x's shape and dtype filled with 1 or 0 (x's values are not read)."""
    value = 1 if node.op == "OnesLike" else 0
    fill = ctx.const(np.array(value, ctx.np_dtype(node.inputs[0])), f"{node.name}/value")
    ctx.add("Expand", [fill, ctx.add("Shape", ins[:1], name=f"{node.name}/shape")], outs,
            name=node.name)


@EXPORTERS.register("Clip")
def clip_node(ctx, node, ins, outs):
    a = node.attrs
    clip(ctx, ins[0], outs[0], (a.get("min", -math.inf), a.get("max", math.inf)),
         ctx.np_dtype(node.inputs[0]), node.name)


@EXPORTERS.register("PowFusion")
def pow_(ctx, node, ins, outs):
    base = _scale_shift(ctx, node, ins[0])
    ctx.add("Pow", [base, ins[1]], outs, name=node.name)


@EXPORTERS.register("ExpFusion")
def exp(ctx, node, ins, outs):
    x = _scale_shift(ctx, node, ins[0])
    base = node.attrs.get("base", -1.0)
    if base == -1.0:
        ctx.add("Exp", [x], outs, name=node.name)
    else:
        b = ctx.const(np.array(base, ctx.np_dtype(node.inputs[0])), f"{node.name}/base")
        ctx.add("Pow", [b, x], outs, name=node.name)


def _scale_shift(ctx, node, x: str) -> str:
    """x * scale + shift, skipping the identity parts."""
    dtype = ctx.np_dtype(node.inputs[0])
    scale, shift = node.attrs.get("scale", 1.0), node.attrs.get("shift", 0.0)
    if scale != 1.0:
        x = ctx.add("Mul", [x, ctx.const(np.array(scale, dtype), f"{node.name}/scale")])
    if shift != 0.0:
        x = ctx.add("Add", [x, ctx.const(np.array(shift, dtype), f"{node.name}/shift")])
    return x


# ReduceSum takes axes as an input from opset 13, the others from 18.
_REDUCE_INPUT_SINCE = {"ReduceSum": 13}


@EXPORTERS.register("ReduceFusion")
def reduce(ctx, node, ins, outs):
    """MindSpore Lite's reduce: `reduce_to_end` reduces from the (single) given axis to the
    last one and then scales by `coeff` (unless |coeff| <= 1e-5); without it, `coeff` is
    ignored (MindSpore's converter writes 0 there)."""
    a = node.attrs
    op = a.get("mode", "ReduceMean")
    if op not in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSum",
                  "ReduceSumSquare", "ReduceL2"):
        raise unsupported(node, f"reduce mode {op}")
    attrs = {"keepdims": int(a.get("keep_dims", False))}
    inputs = [ins[0]]
    to_end = a.get("reduce_to_end", False)
    if to_end:
        rank = ctx.rank(node.inputs[0])
        if rank is None or len(ins) < 2:
            raise unsupported(node, "reduce_to_end without a known rank and begin axis")
        begin = ctx.const_ints(node.inputs[1], "axes", node)[0] % rank
        axes = np.arange(begin, rank, dtype=np.int64)
    if ctx.opset >= _REDUCE_INPUT_SINCE.get(op, 18):
        if to_end:
            inputs.append(ctx.const(axes, f"{node.name}/axes"))
        elif len(ins) > 1:
            inputs.append(ctx.int64(node.inputs[1], f"{node.name}/axes"))
    elif to_end:
        attrs["axes"] = axes.tolist()
    elif len(ins) > 1:
        attrs["axes"] = ctx.const_ints(node.inputs[1], "axes", node)
    coeff = float(a.get("coeff", 1.0))
    if not to_end or abs(coeff) <= 1e-5 or coeff == 1.0:
        ctx.add(op, inputs, outs, name=node.name, **attrs)
        return
    reduced = ctx.add(op, inputs, name=node.name, **attrs)
    k = ctx.const(np.array(coeff, ctx.np_dtype(node.inputs[0])), f"{node.name}/coeff")
    ctx.add("Mul", [reduced, k], outs, name=f"{node.name}/coeff")


def _arg(ctx, node, ins, outs):
    a = node.attrs
    if a.get("top_k", 1) != 1 or a.get("out_max_value", False):
        raise unsupported(node, "top_k > 1 / out_max_value")
    op = node.op.removesuffix("Fusion")
    out_type = ctx.model.tensors[node.outputs[0]].type_id
    attrs = {"axis": a.get("axis", 0), "keepdims": int(a.get("keep_dims", False))}
    if out_type in (dtypes.INT64, dtypes.UNKNOWN):
        ctx.add(op, ins[:1], outs, name=node.name, **attrs)
        return
    index = ctx.add(op, ins[:1], name=node.name, **attrs)
    elem = helper.np_dtype_to_tensor_dtype(dtypes.to_numpy(out_type))
    ctx.add("Cast", [index], outs, name=f"{node.name}/cast", to=elem)


EXPORTERS.register("ArgMaxFusion", "ArgMinFusion")(_arg)


@EXPORTERS.register("Cast")
def cast(ctx, node, ins, outs):
    if len(node.inputs) > 1:
        type_id = ctx.const_ints(node.inputs[1], "target type", node)[0]
    else:
        type_id = ctx.model.tensors[node.outputs[0]].type_id
    elem = helper.np_dtype_to_tensor_dtype(dtypes.to_numpy(type_id))
    ctx.add("Cast", ins[:1], outs, name=node.name, to=elem)


@EXPORTERS.register("Rsqrt")
def rsqrt(ctx, node, ins, outs):
    ctx.add("Reciprocal", [ctx.add("Sqrt", ins[:1], name=f"{node.name}/sqrt")], outs,
            name=node.name)


@EXPORTERS.register("Square")
def square(ctx, node, ins, outs):
    ctx.add("Mul", [ins[0], ins[0]], outs, name=node.name)


@EXPORTERS.register("SquaredDifference")
def squared_difference(ctx, node, ins, outs):
    diff = ctx.add("Sub", ins[:2], name=f"{node.name}/sub")
    ctx.add("Mul", [diff, diff], outs, name=node.name)


_ELTWISE = {"PROD": "Mul", "SUM": "Sum", "MAXIMUM": "Max"}


@EXPORTERS.register("Eltwise")
def eltwise(ctx, node, ins, outs):
    mode = node.attrs.get("mode", "PROD")
    if mode not in _ELTWISE:
        raise unsupported(node, f"eltwise mode {mode}")
    if mode != "PROD" or len(ins) == 2:
        ctx.add(_ELTWISE[mode], ins, outs, name=node.name)
        return
    acc = ins[0]
    for i, name in enumerate(ins[1:-1]):
        acc = ctx.add("Mul", [acc, name], name=f"{node.name}/{i}")
    ctx.add("Mul", [acc, ins[-1]], outs, name=node.name)
