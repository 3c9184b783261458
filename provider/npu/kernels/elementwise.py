"""Elementwise kernels with numpy broadcasting: binary arithmetic, unary math, comparisons,
Where, Clip, Cast, AddN and the plain copy the compiler inserts for aliased graph outputs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provider.npu.kernels import activation
from provider.npu.kernels.registry import register


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
    "square": np.square,
    "sin": np.sin,
    "cos": np.cos,
    "erf": activation.erf,
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
    activation.fused(y, attrs)


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


@register("clip", inplace=True)
def clip(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = clip(x, min, max) (attrs: min, max; None = unbounded)."""
    x, y = inputs[0], outputs[0]
    lo, hi = attrs["min"], attrs["max"]
    if lo is None and hi is None:
        if y is not x:
            np.copyto(y, x)
        return
    np.clip(x, lo, hi, out=y)


@register("cast")
def cast(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x converted to the output's dtype (unsafe casting, as ONNX Cast)."""
    np.copyto(outputs[0], inputs[0], casting="unsafe")


@register("copy")
def copy(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x in the output's shape (element order kept; the output is contiguous)."""
    np.copyto(outputs[0].reshape(inputs[0].shape), inputs[0])


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


@register("broadcast")
def broadcast(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x broadcast to the output's shape (BroadcastTo, ONNX Expand)."""
    np.copyto(outputs[0], inputs[0])


@register("tile")
def tile(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x repeated attrs["multiples"] times per axis, without temporaries: the
    output is viewed as (m0, d0, m1, d1, ...) and x broadcast into it as (1, d0, 1, d1, ...)."""
    x, y = inputs[0], outputs[0]
    reps = attrs["multiples"]
    inter = [v for m, d in zip(reps, x.shape, strict=True) for v in (m, d)]
    np.copyto(y.reshape(inter), x.reshape([v for d in x.shape for v in (1, d)]))


@register("scale_shift", inplace=True)
def scale_shift(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x * scale + shift, per channel on axis 1 (a BatchNorm not foldable into a
    conv; inputs: x, scale, shift with shapes broadcastable over NC...)."""
    y = outputs[0]
    np.multiply(inputs[0], inputs[1], out=y)
    y += inputs[2]
    activation.fused(y, attrs)
