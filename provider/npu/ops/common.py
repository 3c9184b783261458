"""What the op families share: the facts a rule sees (`TensorInfo`), what it returns
(`Lowered`, with lazily `Packed` constants), the helpers of rules, and those of static checks.

A rule turns a node and the facts about its inputs (concrete shape, dtype, and the value when
the input is a constant) into a `Lowered`: the kernel key, the kernel's normalised attrs
(explicit pads, non-negative axes, ...), its operands (node input positions, or constants the
rule derives), the output shapes/dtypes and any scratch buffers. Shape inference and
normalisation live together because both need the same geometry (a conv's pads decide its
output size).

Attribute names and enum members are MindSpore Lite's (ops.fbs), as converters/lite/ir.py
prescribes; tensor-valued parameters (Reshape shape, Transpose perm, Gather axis, ...) come
as extra constant inputs, as in MindSpore Lite. Weight layouts are ONNX's (the importer keeps
them): Conv2DFusion OIHW, Conv2dTransposeFusion IOHW, FullConnection (out, in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from converters.lite.ir import LiteNode
from converters.lite.padding import same_pads
from converters.lite.values import as_integers
from provider.errors import (
    InputValueError,
    InvalidModelError,
    LitenpuError,
    UnsupportedError,
)

Shape = tuple[int, ...]
F32 = np.dtype(np.float32)
BOOL = np.dtype(np.bool_)

# Run-time dtype sets of the static rows (capability's table prints them in this order).
DTYPE_ORDER = ("float32", "float16", "int8", "uint8", "int32", "int64", "bool")
FLOAT = frozenset({"float32", "float16"})
NUMERIC = FLOAT | {"int32", "int64"}  # int64: index arithmetic (masks, positions)
DATA = NUMERIC | {"bool", "int8", "uint8"}  # moved, not computed: 8-bit codes too
ANY: frozenset[str] = frozenset()  # no dtype restriction


@dataclass
class TensorInfo:
    """What the compiler knows about a tensor: concrete shape, dtype, value if constant."""

    shape: Shape
    dtype: np.dtype
    value: np.ndarray | None = None
    quant: Any = None  # converters.lite.quant.TensorQuant of a quantized node's tensor


@dataclass(frozen=True)
class Packed:
    """A constant operand a rule derives from constant inputs (weights in a kernel's order,
    pooling divisors, resize index maps), made only when the compiler builds the Program, so
    that lowering a graph to judge it (capability.assess) never pays for it."""

    shape: Shape
    dtype: np.dtype
    make: Callable[[], np.ndarray]

    def value(self) -> np.ndarray:
        """The array, checked against the declared shape and dtype."""
        v = self.make()
        if v.shape != self.shape or v.dtype != self.dtype:
            raise LitenpuError(f"a packed operand is {v.dtype}{list(v.shape)}, its rule "
                               f"declared {self.dtype}{list(self.shape)}")
        return v


@dataclass
class Lowered:
    """A node lowered to one kernel step (kernel "" = alias: output 0 shares operand 0's buffer).

    `values` is set when the outputs are known at compile time from shapes alone (Shape,
    ConstantOfShape); such nodes never become steps.
    """

    kernel: str
    attrs: dict[str, Any]
    operands: list[int | np.ndarray | Packed]
    outputs: list[tuple[Shape, np.dtype]]
    scratch: list[tuple[str, Shape, np.dtype]] = field(default_factory=list)
    values: list[np.ndarray] | None = None


def check_indices(idx: np.ndarray, dim: int, what: str) -> None:
    """InputValueError unless every run-time index is in [-dim, dim)."""
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        bad = idx[(idx < -dim) | (idx >= dim)].reshape(-1)[0]
        raise InputValueError(f"{what}: index {int(bad)} is outside [-{dim}, {dim})")


# ---- helpers of rules ------------------------------------------------------------------


def describe(node: LiteNode) -> str:
    """How errors name a node."""
    return f"{node.op} node {node.name!r}"


def const(node: LiteNode, ins: Sequence[TensorInfo], i: int, what: str) -> np.ndarray:
    """The value of constant input i; UnsupportedError naming it when it is computed at run time."""
    if i >= len(ins) or ins[i].value is None:
        raise UnsupportedError(f"{describe(node)}: input {i} ({what}) must be a constant on the NPU")
    return ins[i].value


def const_scalar(node: LiteNode, ins: Sequence[TensorInfo], i: int, what: str) -> np.generic:
    """The one value of constant input i (0-D or one element): a parameter such as an axis or
    a bound. InvalidModelError naming its shape otherwise, so the node stays with onnxruntime,
    which refuses it, instead of running with an arbitrary element."""
    value = const(node, ins, i, what)
    if value.size != 1:
        raise InvalidModelError(f"{describe(node)}: {what} of shape {list(value.shape)}; "
                                "one value expected (a 0-D or 1-element tensor)")
    return value.reshape(-1)[0]


def axis_of(node: LiteNode, axis: int, ndim: int) -> int:
    """Normalise a possibly negative axis; InvalidModelError when out of range."""
    if not -ndim <= axis < max(ndim, 1):
        raise InvalidModelError(f"{describe(node)}: axis {axis} out of range for rank {ndim}")
    return axis % max(ndim, 1)


def ints(value: Any) -> list[int]:
    """A list of Python ints from an attr list or a constant array (InvalidModelError for a
    float constant's inf, NaN or fractions: a cast would run with numbers nobody wrote)."""
    array = np.asarray(value)
    if array.dtype.kind in "fc":
        array = as_integers(array, "a constant of integers (axes, sizes, a perm)")
    return [int(v) for v in array.reshape(-1)]


def broadcast(node: LiteNode, *shapes: Shape) -> Shape:
    """numpy broadcasting of shapes; InvalidModelError naming the node when impossible."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise InvalidModelError(f"{describe(node)}: shapes {list(shapes)} do not broadcast") from None


def pair(node: LiteNode, name: str, default: int) -> list[int]:
    """A 2-element spatial attr (kernel/stride/dilation); missing or zeros take `default`."""
    v = ints(node.attrs.get(name, [default, default]))
    if len(v) == 1:
        v = v * 2
    if len(v) != 2:
        raise UnsupportedError(f"{describe(node)}: {name}={v}, the NPU runs 2-D windows only")
    return [d if d > 0 else default for d in v]


def activation_of(node: LiteNode) -> str:
    """The node's fused activation_type (NO_ACTIVATION when absent)."""
    return str(node.attrs.get("activation_type", "NO_ACTIVATION"))


def check_nchw(node: LiteNode, x: TensorInfo) -> None:
    """UnsupportedError unless the node is NCHW and x has rank 4."""
    if node.attrs.get("format", "NCHW") != "NCHW":
        raise UnsupportedError(f"{describe(node)}: format {node.attrs['format']!r}, NPU runs NCHW")
    if len(x.shape) != 4:
        raise UnsupportedError(f"{describe(node)}: input rank {len(x.shape)}, expected 4 (NCHW)")


def clamp_strides(stride: Sequence[int], out_hw: Sequence[int], padded_hw: Sequence[int]) -> list[int]:
    """A window's strides, each at most its padded input extent along an axis of one output
    position: only window 0 exists there, so the output is the same, and a stride far past
    the input (a fuzzed 2**62) overflowed both the numpy kernel's strided views and the C
    kernels' phase arithmetic (a segfault)."""
    return [min(int(s), max(1, int(p))) if extent == 1 else int(s)
            for s, extent, p in zip(stride, out_hw, padded_hw, strict=True)]


def window_pads(node: LiteNode, hw: Sequence[int], kernel, stride, dilation, pads_attr: str) -> list[int]:
    """[top, bottom, left, right] for pad_mode PAD (the pads_attr list), SAME or VALID."""
    mode = node.attrs.get("pad_mode", "PAD")
    if mode == "SAME":
        return [*same_pads(hw[0], kernel[0], stride[0], dilation[0]),
                *same_pads(hw[1], kernel[1], stride[1], dilation[1])]
    if mode == "VALID":
        return [0, 0, 0, 0]
    if mode != "PAD":
        raise UnsupportedError(f"{describe(node)}: pad_mode {mode!r}")
    pads = ints(node.attrs.get(pads_attr) or [0, 0, 0, 0])
    if len(pads) != 4 or min(pads) < 0:
        raise UnsupportedError(f"{describe(node)}: {pads_attr}={pads}, expected 4 values >= 0")
    return pads


def data_dtype(ins: Sequence[TensorInfo]) -> np.dtype:
    """The dtype of the first run-time input (constants follow the activations' dtype)."""
    for t in ins:
        if t.value is None:
            return t.dtype
    return np.result_type(*(t.dtype for t in ins))


def per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    """A (C,) vector shaped (C, 1, ...) to broadcast over an N C ... tensor."""
    return np.ascontiguousarray(v.reshape((-1,) + (1,) * (ndim - 2)))


# ---- helpers of static checks (attributes only, no shapes) ------------------------------


def enum_check(name: str, allowed: tuple[str, ...], default: str) -> Callable[[LiteNode], str | None]:
    """A check that attr `name` (default `default`) is one of `allowed`."""
    def check(node: LiteNode) -> str | None:
        value = str(node.attrs.get(name, default))
        return None if value in allowed else f"{name}={value} (NPU takes {', '.join(allowed)})"
    return check


def all_checks(*checks: Callable[[LiteNode], str | None]) -> Callable[[LiteNode], str | None]:
    """A check failing with the first of `checks` that fails."""
    def check(node: LiteNode) -> str | None:
        return next((r for c in checks if (r := c(node)) is not None), None)
    return check


def two_d(name: str) -> Callable[[LiteNode], str | None]:
    """A check that window attr `name`, when given, has 1 or 2 values."""
    def check(node: LiteNode) -> str | None:
        v = node.attrs.get(name)
        return None if v is None or len(v) in (1, 2) else f"{name}={list(v)}: 2-D windows only"
    return check


NCHW = enum_check("format", ("NCHW",), "NCHW")
PAD_MODE = enum_check("pad_mode", ("PAD", "SAME", "VALID"), "PAD")
