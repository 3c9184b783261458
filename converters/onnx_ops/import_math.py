"""ONNX -> Lite for element-wise math, activations, comparisons, reductions and casts."""

from __future__ import annotations

import numpy as np
from onnx import helper

from converters.errors import UnsupportedError
from converters.lite import dtypes
from converters.onnx_ops.import_base import (
    IMPORTERS,
    attr_or_input,
    const_input,
    emit,
    float_input,
    intermediate,
)
from converters.onnx_ops.import_tensor import copy_of
from converters.onnx_ops.registry import Unmappable

NO_ACT = "NO_ACTIVATION"

# ONNX op -> Lite primitive for ops whose inputs, outputs and semantics agree exactly.
_BINARY_FUSION = {"Add": "AddFusion", "Sub": "SubFusion", "Mul": "MulFusion",
                  "Div": "DivFusion"}
_SAME = {"Sqrt": "Sqrt", "Erf": "Erf", "Neg": "Neg", "Abs": "Abs", "Sin": "Sin",
         "Cos": "Cos", "Log": "Log", "Floor": "Floor", "Ceil": "Ceil", "Round": "Round",
         "Reciprocal": "Reciprocal", "Equal": "Equal", "Less": "Less", "Greater": "Greater",
         "LessOrEqual": "LessEqual", "GreaterOrEqual": "GreaterEqual", "Not": "LogicalNot",
         "And": "LogicalAnd", "Or": "LogicalOr", "Where": "Where"}
_ACTIVATIONS = {"Relu": "RELU", "Sigmoid": "SIGMOID", "Tanh": "TANH", "Softsign": "SOFTSIGN",
                "Softplus": "SOFTPLUS", "Sign": "SIGN"}


def _no_legacy_broadcast(node) -> None:
    if "broadcast" in node.attrs or "axis" in node.attrs:
        raise Unmappable("legacy broadcast attributes")


def _binary_fusion(ctx, node):
    _no_legacy_broadcast(node)
    op = _BINARY_FUSION[node.op_type]
    return [emit(ctx, node, op, {"activation_type": NO_ACT}, node.inputs)]


def _same(ctx, node):
    _no_legacy_broadcast(node)
    return [emit(ctx, node, _SAME[node.op_type], {}, node.inputs)]


def _activation(ctx, node):
    return [emit(ctx, node, "Activation", {"activation_type": _ACTIVATIONS[node.op_type]},
                 node.inputs)]


for _op in _BINARY_FUSION:
    IMPORTERS.register(_op, since=7)(_binary_fusion)
for _op in _SAME:
    IMPORTERS.register(_op)(_same)
for _op in _ACTIVATIONS:
    IMPORTERS.register(_op)(_activation)


@IMPORTERS.register("Pow", since=7)
def pow_(ctx, node):
    return [emit(ctx, node, "PowFusion", {"scale": 1.0, "shift": 0.0}, node.inputs)]


@IMPORTERS.register("Exp")
def exp(ctx, node):
    return [emit(ctx, node, "ExpFusion", {"base": -1.0, "scale": 1.0, "shift": 0.0},
                 node.inputs)]


@IMPORTERS.register("Sum", since=8)
def sum_(ctx, node, outputs: list | None = None):
    if len(node.inputs) == 2:
        return [emit(ctx, node, "AddFusion", {"activation_type": NO_ACT}, node.inputs, outputs)]
    return [emit(ctx, node, "AddN", {}, node.inputs, outputs)]


@IMPORTERS.register("Mod", since=10)
def mod(ctx, node):
    """fmod=1: C fmod (Lite Mod); fmod=0 (integers only): the divisor's sign (FloorMod)."""
    op = "Mod" if node.attrs.get("fmod", 0) else "FloorMod"
    return [emit(ctx, node, op, {}, node.inputs)]


@IMPORTERS.register("Mean", since=8)
def mean(ctx, node):
    """The sum, divided by the count (as onnxruntime computes it)."""
    dtype = float_input(ctx, node, "Mean")
    out = node.outputs[0]
    total = intermediate(ctx, f"{out}/sum", dtype)
    count = ctx.const(f"{out}/count", np.array(len(node.inputs), dtype))
    return [*sum_(ctx, node, [total]),
            emit(ctx, node, "DivFusion", {"activation_type": NO_ACT}, [total, count])]


@IMPORTERS.register("Max", "Min", since=8)
def max_min(ctx, node):
    if len(node.inputs) != 2:
        raise Unmappable("Max/Min of other than two inputs")
    return [emit(ctx, node, "Maximum" if node.op_type == "Max" else "Minimum", {},
                 node.inputs)]


@IMPORTERS.register("LeakyRelu")
def leaky_relu(ctx, node):
    attrs = {"activation_type": "LEAKY_RELU", "alpha": float(node.attrs.get("alpha", 0.01))}
    return [emit(ctx, node, "Activation", attrs, node.inputs)]


@IMPORTERS.register("Elu")
def elu(ctx, node):
    attrs = {"activation_type": "ELU", "alpha": float(node.attrs.get("alpha", 1.0))}
    return [emit(ctx, node, "Activation", attrs, node.inputs)]


@IMPORTERS.register("Selu", since=6)
def selu(ctx, node):
    """gamma * Elu(x, alpha): Lite's SELU has MindSpore's fixed constants."""
    dtype = float_input(ctx, node, "Selu")
    out = node.outputs[0]
    alpha = float(node.attrs.get("alpha", 1.67326319217681884765625))
    gamma = ctx.const(f"{out}/gamma",
                      np.array(node.attrs.get("gamma", 1.05070102214813232421875), dtype))
    elu_out = intermediate(ctx, f"{out}/elu", dtype)
    return [emit(ctx, node, "Activation", {"activation_type": "ELU", "alpha": alpha},
                 node.inputs, [elu_out]),
            emit(ctx, node, "MulFusion", {"activation_type": NO_ACT}, [elu_out, gamma])]


@IMPORTERS.register("Celu", since=12)
def celu(ctx, node):
    """alpha * Elu(x / alpha) (Lite has no CELU): for alpha > 0 only; with alpha < 0 that
    is Celu's negative branch for x > 0, where Celu gives x."""
    dtype = float_input(ctx, node, "Celu")
    out = node.outputs[0]
    if not node.attrs.get("alpha", 1.0) > 0:
        raise Unmappable(f"Celu with alpha={node.attrs['alpha']} (not positive)")
    alpha = ctx.const(f"{out}/alpha", np.array(node.attrs.get("alpha", 1.0), dtype))
    scaled, elu_out = (intermediate(ctx, f"{out}/{part}", dtype) for part in ("scaled", "elu"))
    return [emit(ctx, node, "DivFusion", {"activation_type": NO_ACT}, [node.inputs[0], alpha],
                 [scaled]),
            emit(ctx, node, "Activation", {"activation_type": "ELU", "alpha": 1.0}, [scaled],
                 [elu_out]),
            emit(ctx, node, "MulFusion", {"activation_type": NO_ACT}, [elu_out, alpha])]


@IMPORTERS.register("Mish", since=18)
def mish(ctx, node):
    """x * tanh(softplus(x)) (Lite has no MISH activation)."""
    dtype = float_input(ctx, node, "Mish")
    out = node.outputs[0]
    soft, tanh = (intermediate(ctx, f"{out}/{part}", dtype) for part in ("softplus", "tanh"))
    return [emit(ctx, node, "Activation", {"activation_type": "SOFTPLUS"}, node.inputs, [soft]),
            emit(ctx, node, "Activation", {"activation_type": "TANH"}, [soft], [tanh]),
            emit(ctx, node, "MulFusion", {"activation_type": NO_ACT}, [node.inputs[0], tanh])]


@IMPORTERS.register("ThresholdedRelu", since=10)
def thresholded_relu(ctx, node):
    attrs = {"activation_type": "THRESHOLDRELU", "alpha": float(node.attrs.get("alpha", 1.0))}
    return [emit(ctx, node, "Activation", attrs, node.inputs)]


@IMPORTERS.register("HardSwish", since=14)
def hard_swish(ctx, node):
    return [emit(ctx, node, "Activation", {"activation_type": "HSWISH"}, node.inputs)]


@IMPORTERS.register("HardSigmoid")
def hard_sigmoid(ctx, node):
    # Lite's HSIGMOID is relu6(x + 3) / 6: ONNX's with alpha = 1/6, beta = 1/2 only.
    alpha = np.float32(node.attrs.get("alpha", 0.2))
    beta = np.float32(node.attrs.get("beta", 0.5))
    if alpha == np.float32(1 / 6) and beta == np.float32(0.5):
        return [emit(ctx, node, "Activation", {"activation_type": "HSIGMOID"}, node.inputs)]
    # Lite's Activation has no beta: clip(alpha * x + beta, 0, 1) in three primitives.
    dtype = float_input(ctx, node, "HardSigmoid")
    out = node.outputs[0]
    scaled, shifted = (intermediate(ctx, f"{out}/{what}", dtype) for what in ("scaled", "shifted"))
    a = ctx.const(f"{out}/alpha", np.array(alpha, dtype))
    b = ctx.const(f"{out}/beta", np.array(beta, dtype))
    return [emit(ctx, node, "MulFusion", {"activation_type": NO_ACT}, [node.inputs[0], a],
                 [scaled]),
            emit(ctx, node, "AddFusion", {"activation_type": NO_ACT}, [scaled, b], [shifted]),
            emit(ctx, node, "Clip", {"min": 0.0, "max": 1.0}, [shifted])]


@IMPORTERS.register("IsNaN", since=9)
def is_nan(ctx, node):
    """x != x (true for NaN only)."""
    return [emit(ctx, node, "NotEqual", {}, [node.inputs[0], node.inputs[0]])]


@IMPORTERS.register("IsInf", since=10)
def is_inf(ctx, node):
    """x == +inf, x == -inf, or |x| == inf, as detect_positive / detect_negative say."""
    dtype = float_input(ctx, node, "IsInf")
    positive = node.attrs.get("detect_positive", 1)
    negative = node.attrs.get("detect_negative", 1)
    out = node.outputs[0]
    if not positive and not negative:
        raise Unmappable("IsInf detecting neither sign (a constant false)")
    x = node.inputs[0]
    if positive and negative:
        magnitude = intermediate(ctx, f"{out}/abs", dtype)
        inf = ctx.const(f"{out}/inf", np.array(np.inf, dtype))
        return [emit(ctx, node, "Abs", {}, [x], [magnitude]),
                emit(ctx, node, "Equal", {}, [magnitude, inf])]
    inf = ctx.const(f"{out}/inf", np.array(np.inf if positive else -np.inf, dtype))
    return [emit(ctx, node, "Equal", {}, [x, inf])]


@IMPORTERS.register("Gelu", since=20)
def gelu(ctx, node):
    approximate = node.attrs.get("approximate", "none")
    attrs = {"activation_type": "GELU", "approximate": approximate == "tanh"}
    return [emit(ctx, node, "Activation", attrs, node.inputs)]


@IMPORTERS.register("PRelu", since=7)
def prelu(ctx, node):
    """Lite's PReLU for a constant slope shared or per channel (axis 1); any other slope (a
    run-time input, or one that varies along other axes) as Where(x < 0, x * slope, x)
    (max(x, 0) + slope * min(x, 0) gave NaN for x = +inf, slope = +inf)."""
    slope = ctx.const_value(node.inputs[1])
    rank = ctx.rank(node.inputs[0])
    if slope is not None:
        channel_shared = slope.size == 1
        per_channel = (rank is not None and rank >= 2 and slope.ndim == rank - 1
                       and all(d == 1 for d in slope.shape[1:]))
        if channel_shared or per_channel:
            return [emit(ctx, node, "PReLUFusion", {"channel_shared": channel_shared},
                         node.inputs)]
    dtype = float_input(ctx, node, "PRelu")
    out = node.outputs[0]
    zero = ctx.const(f"{out}/zero", np.zeros((), dtype))
    negative = intermediate(ctx, f"{out}/negative", np.dtype(bool))
    scaled = intermediate(ctx, f"{out}/scaled", dtype)
    x, slope_in = node.inputs[:2]
    return [emit(ctx, node, "Less", {}, [x, zero], [negative]),
            emit(ctx, node, "MulFusion", {"activation_type": NO_ACT}, [x, slope_in], [scaled]),
            emit(ctx, node, "Where", {}, [negative, scaled, x])]


def _clip_bounds(ctx, node, dtype: np.dtype) -> tuple[float, float]:
    """(min, max); an absent bound is the type's finite limit, as ONNX defines it, so that
    an infinity is clipped to it (onnxruntime gives -3.4e38 for -inf; -inf stayed -inf)."""
    limits = np.finfo(dtype)
    if ctx.opset < 11:
        return (float(node.attrs.get("min", limits.min)), float(node.attrs.get("max", limits.max)))
    lo = const_input(ctx, node, 1, "min")
    hi = const_input(ctx, node, 2, "max")
    return (float(limits.min if lo is None else lo), float(limits.max if hi is None else hi))


@IMPORTERS.register("Clip")
def clip(ctx, node):
    dtype = float_input(ctx, node, "Clip")
    lo, hi = _clip_bounds(ctx, node, dtype)
    if (lo, hi) == (0.0, 6.0):
        return [emit(ctx, node, "Activation", {"activation_type": "RELU6"}, node.inputs[:1])]
    return [emit(ctx, node, "Clip", {"min": lo, "max": hi}, node.inputs[:1])]


_REDUCE = {"ReduceMean": ("ReduceMean", 18), "ReduceSum": ("ReduceSum", 13),
           "ReduceMax": ("ReduceMax", 18), "ReduceMin": ("ReduceMin", 18),
           "ReduceProd": ("ReduceProd", 18), "ReduceSumSquare": ("ReduceSumSquare", 18),
           "ReduceL2": ("ReduceL2", 18)}


# With noop_with_empty_axes=1 and no axes nothing is reduced, but the element-wise part of
# the reduction stays (onnxruntime: ReduceSumSquare gives x^2, ReduceL1/L2 |x|, ReduceLogSum
# log x; log(exp(x)) is x).
_NOOP_ELEMENTWISE = {"ReduceSumSquare": "Square", "ReduceL1": "Abs", "ReduceL2": "Abs",
                     "ReduceLogSum": "Log"}


def _noop_reduction(ctx, node) -> list:
    """A reduction over no axes with noop_with_empty_axes=1: its element-wise part or a copy
    (an alias would leave no node to place: the reduction stayed on the CPU)."""
    op = _NOOP_ELEMENTWISE.get(node.op_type)
    if op is None:
        return copy_of(ctx, node, f"{node.op_type} over no axes of a non-numeric (or unknown) "
                       "type")
    return [emit(ctx, node, op, {}, node.inputs[:1])]


def _reduce(ctx, node):
    mode, since = _REDUCE[node.op_type]
    axes = attr_or_input(ctx, node, "axes", 1, since)
    if not axes and node.attrs.get("noop_with_empty_axes", 0):
        return _noop_reduction(ctx, node)
    keep = bool(node.attrs.get("keepdims", 1))
    return [_reduce_node(ctx, node, mode, axes, keep, node.inputs[0], node.outputs[0])]


for _op in _REDUCE:
    IMPORTERS.register(_op)(_reduce)


def _reduce_node(ctx, node, mode: str, axes, keep: bool, x, out) -> object:
    """One ReduceFusion of `x` into `out` (a name or tensor index)."""
    attrs = {"keep_dims": keep, "mode": mode, "reduce_to_end": False, "coeff": 1.0}
    inputs = [x]
    if axes:
        inputs.append(ctx.const(ctx.fresh_name(f"{node.outputs[0]}/axes"),
                                np.array(axes, np.int32)))
    return emit(ctx, node, "ReduceFusion", attrs, inputs, [out])


@IMPORTERS.register("ReduceL1", "ReduceLogSum", "ReduceLogSumExp")
def reduce_composed(ctx, node):
    """Reductions Lite has no mode for, of the ones it has: ReduceL1 = ReduceSum(|x|),
    ReduceLogSum = Log(ReduceSum(x)), ReduceLogSumExp = Log(ReduceSum(Exp(x - m))) + m with
    m = ReduceMax(x), finite (onnxruntime's form: exp never overflows)."""
    dtype = float_input(ctx, node, node.op_type)
    axes = attr_or_input(ctx, node, "axes", 1, 18)
    if not axes and node.attrs.get("noop_with_empty_axes", 0):
        return _noop_reduction(ctx, node)
    keep = bool(node.attrs.get("keepdims", 1))
    x, out = node.inputs[0], node.outputs[0]

    def fresh(part: str) -> int:
        return intermediate(ctx, f"{out}/{part}", dtype)

    if node.op_type == "ReduceL1":
        magnitude = fresh("abs")
        return [emit(ctx, node, "Abs", {}, [x], [magnitude]),
                _reduce_node(ctx, node, "ReduceSum", axes, keep, magnitude, out)]
    if node.op_type == "ReduceLogSum":
        total = fresh("sum")
        return [_reduce_node(ctx, node, "ReduceSum", axes, keep, x, total),
                emit(ctx, node, "Log", {}, [total], [out])]
    finite = {"min": float(np.finfo(dtype).min), "max": float(np.finfo(dtype).max)}

    def finite_max(keep_max: bool, part: str) -> tuple[int, list]:
        # an infinite maximum clipped to the largest finite value: a row of -inf sums
        # exp(-inf) = 0 and gives -inf, one with +inf gives +inf (onnxruntime shifts by 0
        # there), where x - m would be NaN
        raw, peak = fresh(f"{part}_raw"), fresh(part)
        return peak, [_reduce_node(ctx, node, "ReduceMax", axes, keep_max, x, raw),
                      emit(ctx, node, "Clip", finite, [raw], [peak])]

    peak, nodes = finite_max(True, "max")
    shifted, exp, total, log = (fresh(p) for p in ("shifted", "exp", "sum", "log"))
    nodes += [emit(ctx, node, "SubFusion", {"activation_type": NO_ACT}, [x, peak], [shifted]),
              emit(ctx, node, "ExpFusion", {"base": -1.0, "scale": 1.0, "shift": 0.0},
                   [shifted], [exp]),
              _reduce_node(ctx, node, "ReduceSum", axes, keep, exp, total),
              emit(ctx, node, "Log", {}, [total], [log])]
    if not keep:  # the maximum again, of the sum's shape
        peak, more = finite_max(False, "max_out")
        nodes += more
    return [*nodes, emit(ctx, node, "AddFusion", {"activation_type": NO_ACT}, [log, peak])]


def _arg(ctx, node):
    """ArgMax/ArgMin (the first index among ties); select_last_index=1 is the first index of
    the axis reversed, counted back from its end: (size - 1) - that."""
    axis = node.attrs.get("axis", 0)
    attrs = {"axis": axis, "top_k": 1, "keep_dims": bool(node.attrs.get("keepdims", 1)),
             "out_max_value": False}
    if not node.attrs.get("select_last_index", 0):
        return [emit(ctx, node, node.op_type + "Fusion", attrs, node.inputs)]
    shape = ctx.shape(node.inputs[0])
    size = None if shape is None or not -len(shape) <= axis < len(shape) else shape[axis]
    if not isinstance(size, int):
        raise Unmappable("select_last_index=1 along an axis of unknown size")
    out, index = node.outputs[0], np.dtype(np.int64)
    reversed_, first = intermediate(ctx, f"{out}/reversed", ctx.dtype(node.inputs[0])), \
        intermediate(ctx, f"{out}/first", index)
    last = ctx.const(f"{out}/last", np.array(size - 1, index))
    return [emit(ctx, node, "ReverseV2", {"axis": [axis]}, node.inputs[:1], [reversed_]),
            emit(ctx, node, node.op_type + "Fusion", attrs, [reversed_], [first]),
            emit(ctx, node, "SubFusion", {"activation_type": NO_ACT}, [last, first])]


IMPORTERS.register("ArgMax", "ArgMin")(_arg)


@IMPORTERS.register("Cast", since=6)
def cast(ctx, node):
    try:
        type_id = dtypes.from_numpy(helper.tensor_dtype_to_np_dtype(node.attrs["to"]))
    except (UnsupportedError, KeyError, TypeError, ValueError):
        raise Unmappable("target type has no MindSpore TypeId") from None
    source = ctx.dtype(node.inputs[0])
    if source is None or source.kind not in "biuf":
        raise Unmappable("source type is not numeric (or unknown)")
    to = ctx.const(f"{node.outputs[0]}/to", np.array([type_id], np.int32))
    return [emit(ctx, node, "Cast", {}, [node.inputs[0], to])]
