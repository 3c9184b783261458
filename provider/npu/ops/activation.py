"""Activations: Lite Activation, LeakyRelu, Elu, Clip, Softmax and LogSoftmax, and the fused
activation_type of Conv/MatMul/Add/pooling (which the other families apply through `fused`).

`apply(kind, x, y, ...)` computes y = f(x) elementwise; y may be the same memory as x, which
is how the fused activations of other kernels run in place on their output. Softmax
statistics are accumulated in fp32 even when storage is fp16.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import UnsupportedError
from provider.npu.ops.common import (
    FLOAT,
    Lowered,
    TensorInfo,
    axis_of,
    const_scalar,
    describe,
    enum_check,
    ints,
)
from provider.npu.ops.native_builder import (
    ACT_CLAMP,
    FINISH_ALPHA,
    INF,
    StepBuilder,
    around,
    f32,
    lower_unary,
)
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot

_SQRT1_2 = 0.7071067811865476
_GELU_TANH_C = 0.7978845608028654  # sqrt(2 / pi)

# Numerical Recipes' Chebyshev fit of erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z/2):
# fractional error below 1.2e-7 for every z >= 0 (so |erf error| <= 1.2e-7 everywhere).
_ERFC_COEFFS = (
    0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807,
    -0.18628806, 0.09678418, 0.37409196, 1.00002368, -1.26551223,
)


def erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Vectorised erf (numpy has none), absolute error <= 1.2e-7, computed in float64."""
    z = np.abs(x, dtype=np.float64)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.full_like(t, _ERFC_COEFFS[0])
    for c in _ERFC_COEFFS[1:]:
        poly *= t
        poly += c
    erfc = t * np.exp(poly - z * z)
    res = np.copysign(1.0 - erfc, x)
    if out is None:
        return res.astype(x.dtype, copy=False)
    np.copyto(out, res, casting="same_kind")
    return out


def _relu6(x: np.ndarray, y: np.ndarray) -> None:
    np.clip(x, 0.0, 6.0, out=y)


def _sigmoid(x: np.ndarray, y: np.ndarray) -> None:
    with np.errstate(over="ignore"):
        np.negative(x, out=y)
        np.exp(y, out=y)
        y += 1.0
        np.reciprocal(y, out=y)


def _hsigmoid(x: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> None:
    np.multiply(x, alpha, out=y)
    y += beta
    np.clip(y, 0.0, 1.0, out=y)


def _hswish(x: np.ndarray, y: np.ndarray) -> None:
    tmp = x + 3.0
    _relu6(tmp, tmp)
    tmp *= 1.0 / 6.0
    np.multiply(x, tmp, out=y)


def _gelu(x: np.ndarray, y: np.ndarray, approximate: bool) -> None:
    if approximate:
        inner = x * x
        inner *= 0.044715
        inner += 1.0
        inner *= x
        inner *= _GELU_TANH_C
        np.tanh(inner, out=inner)
    else:
        inner = erf(x * _SQRT1_2)
    inner += 1.0
    inner *= 0.5
    np.multiply(x, inner, out=y)


def _elu(x: np.ndarray, y: np.ndarray, alpha: float) -> None:
    """x where x >= 0, else alpha * (exp(x) - 1): a NaN alpha reaches only those elements."""
    neg = np.minimum(x, 0.0)
    np.expm1(neg, out=neg)
    neg *= alpha
    negative = x < 0
    if y is not x:
        np.copyto(y, x)
    np.copyto(y, neg, where=negative)


def _leaky_relu(x: np.ndarray, y: np.ndarray, alpha: float) -> None:
    scaled = x * alpha
    if alpha <= 1.0:
        np.maximum(x, scaled, out=y)
    else:
        np.minimum(x, scaled, out=y)


def _softplus(x: np.ndarray, y: np.ndarray) -> None:
    np.logaddexp(x, 0.0, out=y)


def _swish(x: np.ndarray, y: np.ndarray) -> None:
    s = np.empty_like(x)
    _sigmoid(x, s)
    np.multiply(x, s, out=y)


def _softsign(x: np.ndarray, y: np.ndarray) -> None:
    den = np.abs(x)
    den += 1.0
    np.divide(x, den, out=y)


def _thresholded_relu(x: np.ndarray, y: np.ndarray, alpha: float) -> None:
    """x where x > alpha, else 0 (a product with the mask made -inf and NaN a NaN)."""
    dropped = ~(x > alpha)
    np.copyto(y, x)
    y[dropped] = 0


# Activation types the NPU runs (capability.py publishes this set).
ACTIVATIONS = (
    "NO_ACTIVATION", "RELU", "RELU6", "SIGMOID", "TANH", "LEAKY_RELU", "HSWISH", "HSIGMOID",
    "GELU", "ELU", "SOFTPLUS", "SWISH", "SOFTSIGN", "ABS", "SIGN", "HARD_TANH",
    "THRESHOLDRELU",
)
# The static check of every node with an activation_type (fused or not).
FUSED = enum_check("activation_type", ACTIVATIONS, "NO_ACTIVATION")


@np.errstate(invalid="ignore", over="ignore", divide="ignore")  # inf / NaN in, inf / NaN out
def apply(
    kind: str,
    x: np.ndarray,
    y: np.ndarray,
    *,
    alpha: float = 0.0,
    beta: float = 0.0,
    min_val: float = 0.0,
    max_val: float = 0.0,
    approximate: bool = False,
) -> None:
    """y = kind(x) elementwise; y may be x. Parameters use the Lite Activation field names.

    HSIGMOID is clip(alpha*x + beta, 0, 1) when alpha is non-zero (ONNX HardSigmoid), and
    MindSpore's fixed relu6(x + 3) / 6 when alpha is 0 (the schema default).
    """
    if x.ndim == 0:  # as one element: numpy's arithmetic on a 0-d array gives a scalar,
        # which the helpers' out= temporaries cannot be (an Elu of a scalar failed)
        in_place = y is x
        x = x.reshape(1)
        y = x if in_place else y.reshape(1)
    if kind == "NO_ACTIVATION":
        if y is not x:
            np.copyto(y, x)
    elif kind == "RELU":
        np.maximum(x, 0.0, out=y)
    elif kind == "RELU6":
        _relu6(x, y)
    elif kind == "SIGMOID":
        _sigmoid(x, y)
    elif kind == "TANH":
        np.tanh(x, out=y)
    elif kind == "LEAKY_RELU":
        _leaky_relu(x, y, alpha)
    elif kind == "HSWISH":
        _hswish(x, y)
    elif kind == "HSIGMOID":
        if alpha == 0.0:
            _hsigmoid(x, y, 1.0 / 6.0, 0.5)
        else:
            _hsigmoid(x, y, alpha, beta)
    elif kind == "GELU":
        _gelu(x, y, approximate)
    elif kind == "ELU":
        _elu(x, y, alpha)
    elif kind == "SOFTPLUS":
        _softplus(x, y)
    elif kind == "SWISH":
        _swish(x, y)
    elif kind == "SOFTSIGN":
        _softsign(x, y)
    elif kind == "ABS":
        np.abs(x, out=y)
    elif kind == "SIGN":
        np.sign(x, out=y)
    elif kind == "HARD_TANH":
        np.clip(x, min_val, max_val, out=y)
    elif kind == "THRESHOLDRELU":
        _thresholded_relu(x, y, alpha)
    else:
        raise UnsupportedError(f"activation_type {kind!r}; supported: {', '.join(ACTIVATIONS)}")


def fused(y: np.ndarray, attrs: dict[str, Any]) -> None:
    """Apply a kernel's fused `activation` attr (absent or NO_ACTIVATION: nothing) to y in place."""
    kind = attrs.get("activation", "NO_ACTIVATION")
    if kind != "NO_ACTIVATION":
        apply(kind, y, y)


@register("activation", inplace=True)
def activation(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """Lite Activation: outputs[0] = activation_type(inputs[0])."""
    apply(
        attrs["activation_type"],
        inputs[0],
        outputs[0],
        alpha=attrs.get("alpha", 0.0),
        beta=attrs.get("beta", 0.0),
        min_val=attrs.get("min_val", 0.0),
        max_val=attrs.get("max_val", 0.0),
        approximate=attrs.get("approximate", False),
    )


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


@register("softmax")
def softmax(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = softmax(x) along attrs["axis"] (log_softmax when attrs["log"])."""
    x, y = inputs[0], outputs[0]
    if not y.size:  # nothing to write (and an empty axis has no max)
        return
    axis = attrs["axis"]
    np.subtract(x, np.max(x, axis=axis, keepdims=True), out=y)
    if attrs["log"]:
        e = np.exp(y, dtype=np.float32)
        y -= np.log(np.sum(e, axis=axis, keepdims=True))
    else:
        np.exp(y, out=y)
        y /= np.sum(y, axis=axis, keepdims=True, dtype=np.float32)


# ---- rules -------------------------------------------------------------------------------


@define("Activation", dtypes=FLOAT, check=FUSED, kernels=("activation",),
        note="activation_type in ops.activation.ACTIVATIONS")
@define("LeakyRelu", "Elu", dtypes=FLOAT, kernels=("activation",))
def activation_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    a = node.attrs
    if node.op == "LeakyRelu":
        attrs = {"activation_type": "LEAKY_RELU", "alpha": float(a.get("negative_slope", 0.01))}
    elif node.op == "Elu":
        attrs = {"activation_type": "ELU", "alpha": float(a.get("alpha", 1.0))}
    else:
        attrs = {"activation_type": str(a.get("activation_type", "NO_ACTIVATION")),
                 "alpha": float(a.get("alpha", 0.0)), "beta": float(a.get("beta", 0.0)),
                 "min_val": float(a.get("min_val", 0.0)), "max_val": float(a.get("max_val", 0.0)),
                 "approximate": bool(a.get("approximate", False))}
    return Lowered("activation", attrs, [0], [(ins[0].shape, ins[0].dtype)])


def _optional_bound(node: LiteNode, ins: Sequence[TensorInfo], i: int, name: str) -> float | None:
    """A Clip bound: None when absent or NaN (onnxruntime ignores a NaN bound); an infinite
    one clips like any other (max=-inf makes everything -inf)."""
    if len(ins) > i:
        v = const_scalar(node, ins, i, name)
    else:
        v = node.attrs.get(name)
    return None if v is None or np.isnan(v) else float(v)


@define("Clip", dtypes=FLOAT, const_inputs=(1, 2), kernels=("clip",), note="bounds constant")
def clip_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    attrs = {"min": _optional_bound(node, ins, 1, "min"), "max": _optional_bound(node, ins, 2, "max")}
    return Lowered("clip", attrs, [0], [(ins[0].shape, ins[0].dtype)])


def _one_axis(node: LiteNode) -> str | None:
    axis = node.attrs.get("axis", -1)
    n = len(axis) if isinstance(axis, (list, tuple)) else 1
    return None if n == 1 else f"softmax over {n} axes"


@define("Softmax", dtypes=FLOAT, check=_one_axis, kernels=("softmax",), note="one axis")
@define("LogSoftmax", dtypes=FLOAT, kernels=("softmax",), note="one axis")
def softmax_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    axes = ints(node.attrs.get("axis", -1))
    if len(axes) != 1:
        raise UnsupportedError(f"{describe(node)}: softmax over axes {axes}, NPU takes one axis")
    axis = axis_of(node, axes[0], len(ins[0].shape))
    attrs = {"axis": axis, "log": node.op == "LogSoftmax"}
    return Lowered("softmax", attrs, [0], [(ins[0].shape, ins[0].dtype)])


# ---- native lowerings --------------------------------------------------------------------


@native("activation")
def _activation_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    if not f32(ins[0], outs[0]):
        return False
    kind = attrs["activation_type"]
    if _unary_activation(ins[0], kind, attrs, b):
        return True
    b.params(math.prod(ins[0].shape))
    b.slots(b.inputs[0], b.outputs[0])
    if kind == "HARD_TANH":
        b.f[0], b.f[1] = attrs.get("min_val", 0.0), attrs.get("max_val", 0.0)
        b.params(ACT_CLAMP)
        return True
    if kind in FINISH_ALPHA:
        b.f[2] = attrs.get("alpha", 0.0)
        b.params(FINISH_ALPHA[kind])
        return True
    return b.activation(kind)


@native("clip", op="activation")
def _clip_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """The activation op's clamp, an absent bound at infinity."""
    if not f32(ins[0], outs[0]):
        return False
    b.params(math.prod(ins[0].shape), ACT_CLAMP)
    b.slots(b.inputs[0], b.outputs[0])
    lo, hi = attrs["min"], attrs["max"]
    b.f[0], b.f[1] = -INF if lo is None else lo, INF if hi is None else hi
    return True


def _unary_activation(x: Slot, kind: str, attrs: dict, b: StepBuilder) -> bool:
    """An activation without a clamp form as the C library's unary op, when it has it."""
    if kind == "GELU":
        return lower_unary(x, "gelu_tanh" if attrs.get("approximate") else "gelu", b)
    if kind == "HSIGMOID":
        alpha, beta = float(attrs.get("alpha", 0.0)), float(attrs.get("beta", 0.0))
        return lower_unary(x, "hsigmoid", b, *((alpha, beta) if alpha else (1 / 6, 0.5)))
    return kind in ("SIGMOID", "TANH", "SWISH", "HSWISH") and lower_unary(x, kind.lower(), b)


@native("softmax")
def _softmax_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Over any one axis: (outer, length, inner) around it."""
    x = ins[0]
    if not f32(x, outs[0]) or not x.shape:
        return False
    axis = attrs["axis"]
    outer, length, inner = around(x.shape, axis)
    b.params(outer, length, attrs["log"], inner)
    b.slots(b.inputs[0], b.outputs[0])
    return True
