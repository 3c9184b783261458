"""Elementwise ops with numpy broadcasting: binary arithmetic (Add/Sub/Mul/Div/RealDiv/
Maximum/Minimum/Pow), AddN, unary math, ExpFusion, comparisons and logical ops, Where and
PReLU: capability, rules, numpy kernels, and the native lowerings of float32 binary
arithmetic (any broadcast of up to 6 merged dims) and unary math (csrc/elementwise.c); a
residual Add folds into the conv before it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import UnsupportedError
from provider.npu.native import MAX_SLOTS
from provider.npu.ops.activation import FUSED, erf, fused
from provider.npu.ops.common import (
    BOOL,
    FLOAT,
    NUMERIC,
    Lowered,
    Packed,
    TensorInfo,
    activation_of,
    broadcast,
    const,
    data_dtype,
    describe,
    per_channel,
)
from provider.npu.ops.native_builder import (
    ELEMENT_TYPES,
    MAX_RANK,
    StepBuilder,
    broadcast_strides,
    f32,
    lower_unary,
    merged,
)
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


def trunc_divide(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Integer a / b rounded toward zero (ONNX and onnxruntime integer Div, C semantics).

    numpy's floor_divide rounds toward -inf, so a signed quotient of an inexact division
    with operands of opposite signs is moved up by one. Division by zero gives 0.
    """
    if out.dtype.kind != "i":
        return np.floor_divide(a, b, out=out)
    fix = np.remainder(a, b) != 0  # computed before out is written: out may be a's memory
    fix &= (a < 0) != (b < 0)
    np.floor_divide(a, b, out=out)
    out += fix
    return out


BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "trunc_div": trunc_divide,
    "floor_mod": np.mod,  # the divisor's sign (ONNX Mod, fmod=0)
    "fmod": np.fmod,  # the dividend's sign (C fmod; ONNX Mod, fmod=1)
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
UNARY = {
    "sqrt": np.sqrt,
    "exp": np.exp,
    "neg": np.negative,
    "abs": np.abs,
    "log": np.log,
    "reciprocal": np.reciprocal,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.rint,  # half to even, as ONNX Round
    "square": np.square,
    "sin": np.sin,
    "cos": np.cos,
    "erf": erf,
    "logical_not": np.logical_not,
}
COMPARE = {
    "equal": np.equal,
    "less": np.less,
    "greater": np.greater,
    "less_equal": np.less_equal,
    "greater_equal": np.greater_equal,
    "not_equal": np.not_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


@register("binary", inplace=True)
def binary(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = op(a, b) with broadcasting, then the fused activation (attrs: op, activation)."""
    y = outputs[0]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        BINARY[attrs["op"]](inputs[0], inputs[1], out=y)
    fused(y, attrs)


@register("unary", inplace=True)
def unary(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = op(x) (attrs: op), e.g. Sqrt, ExpFusion, Neg, Abs, Erf."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        UNARY[attrs["op"]](inputs[0], out=outputs[0])


@register("exp_affine", inplace=True)
def exp_affine(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """ExpFusion with non-default fields: base ** (shift + scale * x) (base -1 means e)."""
    y = outputs[0]
    np.multiply(inputs[0], attrs["scale"], out=y)
    y += attrs["shift"]
    if attrs["base"] != -1.0:
        y *= np.log(attrs["base"])
    np.exp(y, out=y)


@register("compare")
def compare(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] (bool) = op(a, b) with broadcasting (attrs: op)."""
    COMPARE[attrs["op"]](inputs[0], inputs[1], out=outputs[0])


@register("where")
def where(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = cond ? a : b with broadcasting of all three."""
    y = outputs[0]
    np.copyto(y, inputs[2])
    np.copyto(y, inputs[1], where=inputs[0])


@register("add_n", inplace=True)
def add_n(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = sum of all inputs, with broadcasting (AddN, ONNX Sum)."""
    y = outputs[0]
    np.add(inputs[0], inputs[1], out=y)
    for x in inputs[2:]:
        y += x


@register("prelu", inplace=True)
def prelu(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x where x > 0, else slope * x (slope broadcast, e.g. (C, 1, 1)).

    Correct in place (y may be x): positives are copied first (a no-op then), and only the
    other elements, still unchanged in x, are scaled."""
    x, y = inputs[0], outputs[0]
    positive = x > 0
    np.copyto(y, x, where=positive)
    np.multiply(x, inputs[1], out=y, where=~positive)


# ---- rules -------------------------------------------------------------------------------

_BINARY = {"AddFusion": "add", "SubFusion": "sub", "MulFusion": "mul", "DivFusion": "div",
           "RealDiv": "div", "Maximum": "maximum", "Minimum": "minimum", "PowFusion": "pow",
           "FloorMod": "floor_mod", "Mod": "fmod"}
_UNARY = {"Sqrt": "sqrt", "Erf": "erf", "Neg": "neg", "Abs": "abs", "Log": "log",
          "Reciprocal": "reciprocal", "Floor": "floor", "Ceil": "ceil", "Square": "square",
          "Round": "round", "Sin": "sin", "Cos": "cos", "LogicalNot": "logical_not"}
_COMPARE = {"Equal": "equal", "Less": "less", "Greater": "greater", "LessEqual": "less_equal",
            "GreaterEqual": "greater_equal", "NotEqual": "not_equal",
            "LogicalAnd": "logical_and", "LogicalOr": "logical_or"}


def _squares(ins: Sequence[TensorInfo], out: tuple[int, ...]) -> bool:
    """Whether a Pow's exponent is the constant 2 and does not broadcast its base."""
    exponent = ins[1].value
    return exponent is not None and bool(np.all(exponent == 2)) and tuple(ins[0].shape) == out


def _pow(node: LiteNode) -> str | None:
    if node.attrs.get("scale", 1.0) != 1.0 or node.attrs.get("shift", 0.0) != 0.0:
        return "PowFusion with scale/shift"
    return None


@define("AddFusion", "SubFusion", "MulFusion", "DivFusion", dtypes=NUMERIC, check=FUSED,
        kernels=("binary",), note="numpy broadcasting")
@define("RealDiv", "Maximum", "Minimum", "FloorMod", "Mod", dtypes=NUMERIC, kernels=("binary",),
        note="numpy broadcasting")
@define("PowFusion", dtypes=FLOAT, check=_pow, kernels=("binary", "unary"),
        note="scale 1, shift 0")
def binary_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    out = broadcast(node, ins[0].shape, ins[1].shape)
    dtype = data_dtype(ins)
    op = _BINARY[node.op]
    if op == "pow" and _squares(ins, out) and activation_of(node) == "NO_ACTIVATION":
        # x ** 2 is x * x (as numpy's power computes it): a product, not a powf per element
        return Lowered("unary", {"op": "square"}, [0], [(out, dtype)])
    if op == "div" and dtype.kind in "iu":  # integer Div truncates toward zero
        op = "trunc_div"
    attrs = {"op": op, "activation": activation_of(node)}
    return Lowered("binary", attrs, [0, 1], [(out, dtype)])


@define("AddN", dtypes=NUMERIC, kernels=("add_n",), note="numpy broadcasting")
def add_n_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    if len(ins) == 1:
        return Lowered("", {}, [0], [(ins[0].shape, ins[0].dtype)])
    out = broadcast(node, *(t.shape for t in ins))
    return Lowered("add_n", {}, list(range(len(ins))), [(out, data_dtype(ins))])


@define("Sqrt", "Erf", "Log", "Reciprocal", "Floor", "Ceil", "Round", "Square", "Sin", "Cos",
        dtypes=FLOAT, kernels=("unary",))
@define("Neg", "Abs", dtypes=NUMERIC, kernels=("unary",))
@define("LogicalNot", dtypes=frozenset({"bool"}), kernels=("unary",))
def unary_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    return Lowered("unary", {"op": _UNARY[node.op]}, [0], [(ins[0].shape, ins[0].dtype)])


@define("ExpFusion", dtypes=FLOAT, kernels=("unary", "exp_affine"))
def exp_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    base = float(node.attrs.get("base", -1.0))
    scale = float(node.attrs.get("scale", 1.0))
    shift = float(node.attrs.get("shift", 0.0))
    out = [(ins[0].shape, ins[0].dtype)]
    if (base, scale, shift) == (-1.0, 1.0, 0.0):
        return Lowered("unary", {"op": "exp"}, [0], out)
    return Lowered("exp_affine", {"base": base, "scale": scale, "shift": shift}, [0], out)


@define("Equal", "Less", "Greater", "LessEqual", "GreaterEqual", "NotEqual",
        dtypes=NUMERIC | {"bool"}, kernels=("compare",), note="bool output")
@define("LogicalAnd", "LogicalOr", dtypes=frozenset({"bool"}), kernels=("compare",))
def compare_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    out = broadcast(node, ins[0].shape, ins[1].shape)
    return Lowered("compare", {"op": _COMPARE[node.op]}, [0, 1], [(out, BOOL)])


@define("Where", dtypes=NUMERIC | {"bool"}, kernels=("where",), note="bool condition, 3 inputs")
def where_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    if len(ins) != 3:
        raise UnsupportedError(f"{describe(node)}: {len(ins)} inputs, the NPU runs the 3-input form")
    out = broadcast(node, *(t.shape for t in ins))
    return Lowered("where", {}, [0, 1, 2], [(out, data_dtype(ins[1:]))])


@define("PReLUFusion", dtypes=FLOAT, const_inputs=(1,), kernels=("prelu",),
        note="slope shared or per channel")
def prelu_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Slope shared (one value) or per channel (axis 1, broadcast over the rest)."""
    x = ins[0]
    slope = const(node, ins, 1, "slope")
    if slope.size == 1 and slope.ndim <= len(x.shape):
        slope = slope.reshape(())
    elif len(x.shape) >= 2 and slope.size == x.shape[1]:
        slope = per_channel(slope, len(x.shape))
    elif tuple(broadcast(node, x.shape, slope.shape)) != tuple(x.shape):
        # onnxruntime runs it, with a broadcast output; ONNX's slope broadcasts to x only
        raise UnsupportedError(f"{describe(node)}: slope {list(slope.shape)} widens input "
                               f"{list(x.shape)}")
    return Lowered("prelu", {}, [0, Packed(slope.shape, x.dtype, lambda: slope.astype(x.dtype))],
                   [(x.shape, x.dtype)])


# ---- native lowerings --------------------------------------------------------------------

# csrc/elementwise.c's binary op codes (B_*)
BINARY_CODES = {"add": 0, "sub": 1, "mul": 2, "div": 3, "maximum": 4, "minimum": 5, "pow": 6}
PRELU_CODE = 7  # csrc/elementwise.c B_PRELU: x > 0 ? x : x * slope, the slope broadcast


# integers take the ops that wrap or compare
INTEGER_OPS = ("add", "sub", "mul", "maximum", "minimum")


@native("binary")
def _binary_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    y = outs[0]
    kind = ELEMENT_TYPES.get(y.np_dtype)
    if kind is None or attrs["op"] not in (BINARY_CODES if kind == 0 else INTEGER_OPS):
        return False
    return _lower_binary(ins, y, kind, BINARY_CODES[attrs["op"]],
                         attrs.get("activation", "NO_ACTIVATION"), b)


@native("prelu", op="binary")
def _prelu_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """PReLU of float32 as a binary step with the slope (shared or per channel) broadcast:
    face-recognition ResNets have one after most convs."""
    return f32(*ins, outs[0]) and _lower_binary(ins, outs[0], 0, PRELU_CODE, "NO_ACTIVATION", b)


def _lower_binary(ins: Sequence[Slot], y: Slot, kind: int, op: int, activation: str,
                  b: StepBuilder) -> bool:
    """csrc/elementwise.c's binary step of op code `op` over elements of type `kind`."""
    if any(s.np_dtype != y.np_dtype for s in ins):
        return False
    dims, (sa, sb) = merged(y.shape, broadcast_strides(ins[0].shape, y.shape),
                            broadcast_strides(ins[1].shape, y.shape))
    code = b.activation_code(activation)
    if len(dims) > MAX_RANK or code is None or (kind and activation != "NO_ACTIVATION"):
        return False
    r = len(dims)
    b.p[0], b.p[1] = op, r
    b.p[2:2 + r], b.p[8:8 + r], b.p[14:14 + r] = dims, sa, sb
    b.p[20], b.p[21] = code, kind
    b.slots(b.inputs[0], b.inputs[1], b.outputs[0])
    return True


@native("add_n")
def _add_n_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """ONNX Sum / AddN of inputs that all have the output's shape and dtype (float32, int32,
    int64), at most 15 of them; broadcasting ones stay numpy."""
    y = outs[0]
    kind = ELEMENT_TYPES.get(y.np_dtype)
    if kind is None or not 2 <= len(ins) < MAX_SLOTS or \
            any(s.shape != y.shape or s.np_dtype != y.np_dtype for s in ins):
        return False
    b.params(len(ins), math.prod(y.shape), kind)
    b.slots(*b.inputs[:len(ins)])
    b.slot_at(MAX_SLOTS - 1, b.outputs[0])
    return True


@native("unary")
def _unary_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    return f32(ins[0], outs[0]) and lower_unary(ins[0], attrs["op"], b)


# csrc/logic.c's compare codes and input types
COMPARE_CODES = {name: code for code, name in enumerate(
    ("equal", "less", "greater", "less_equal", "greater_equal", "not_equal", "logical_and",
     "logical_or"))}
LOGIC_TYPES = {np.dtype(np.float32): 0, np.dtype(np.int32): 1, np.dtype(np.int64): 2,
               np.dtype(np.bool_): 3}


def _walk(b: StepBuilder, out: tuple[int, ...], *operands: Slot) -> bool:
    """p[1] rank, p[2..8) the output's merged dims, then 6 strides per operand (logic.c)."""
    dims, walks = merged(out, *(broadcast_strides(o.shape, out) for o in operands))
    if len(dims) > MAX_RANK:
        return False
    b.p[1] = len(dims)
    b.p[2:2 + len(dims)] = dims
    for i, walk in enumerate(walks):
        b.p[8 + 6 * i:8 + 6 * i + len(dims)] = walk
    return True


@native("compare")
def _compare_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A comparison or logical op into a bool mask (csrc/logic.c)."""
    a, c, y = ins[0], ins[1], outs[0]
    kind = LOGIC_TYPES.get(a.np_dtype)
    if kind is None or c.np_dtype != a.np_dtype or y.np_dtype != np.bool_ \
            or not _walk(b, y.shape, a, c):
        return False
    b.p[0], b.p[20] = COMPARE_CODES[attrs["op"]], kind
    b.slots(b.inputs[0], b.inputs[1], b.outputs[0])
    return True


@native("where")
def _where_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """cond ? x : y, any element size (csrc/logic.c)."""
    cond, x, y, out = ins[0], ins[1], ins[2], outs[0]
    if cond.np_dtype != np.bool_ or x.np_dtype != out.np_dtype or y.np_dtype != out.np_dtype \
            or not _walk(b, out.shape, cond, x, y):
        return False
    b.p[26] = out.np_dtype.itemsize
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2], b.outputs[0])
    return True
