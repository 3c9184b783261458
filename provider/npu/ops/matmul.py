"""MatMulFusion and FullConnection: capability, rules, the numpy kernel (one broadcasting,
batched GEMM plus bias and activation) and the native lowering of 2-D GEMMs."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError
from provider.npu.ops import gemm
from provider.npu.ops.activation import FUSED, fused
from provider.npu.ops.common import (
    FLOAT,
    Lowered,
    Packed,
    Shape,
    TensorInfo,
    activation_of,
    axis_of,
    broadcast,
    const,
    describe,
)
from provider.npu.ops.native_builder import StepBuilder, f32
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


@register("matmul")
def matmul(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = op(a) @ op(b) [+ bias]; attrs transpose_a, transpose_b, activation.

    The compiler stores constant B already transposed as needed (transpose_b False then).
    FullConnection passes a_shape / y_shape: the (rows, K) and (rows, N) views of its
    flattened input and output, so this one kernel serves both primitives.
    """
    a, b = inputs[0], inputs[1]
    y = outputs[0]
    if "a_shape" in attrs:
        a = a.reshape(attrs["a_shape"])
        y = y.reshape(attrs["y_shape"])
    if attrs["transpose_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_b"]:
        b = np.swapaxes(b, -1, -2)
    gemm.matmul(a, b, y)
    if len(inputs) > 2:
        y += inputs[2]
    fused(y, attrs)


# ---- rules -------------------------------------------------------------------------------


def _matmul_shape(node: LiteNode, a: Shape, b: Shape) -> Shape:
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise InvalidModelError(f"{describe(node)}: cannot multiply {a} by {b}")
    return (*broadcast(node, a[:-2], b[:-2]), a[-2], b[-1])


@define("MatMulFusion", dtypes=FLOAT, check=FUSED, rank=(2, 99), kernels=("matmul",))
def matmul_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    a, b = ins[0], ins[1]
    ta, tb = bool(node.attrs.get("transpose_a", False)), bool(node.attrs.get("transpose_b", False))
    a_shape = (*a.shape[:-2], a.shape[-1], a.shape[-2]) if ta else a.shape
    b_shape = (*b.shape[:-2], b.shape[-1], b.shape[-2]) if tb else b.shape
    out = _matmul_shape(node, a_shape, b_shape)
    operands: list[int | np.ndarray | Packed] = [0, 1]
    if b.value is not None and tb:  # pack the constant once, pre-transposed
        value = b.value
        operands[1] = Packed(b_shape, value.dtype,
                             lambda: np.ascontiguousarray(np.swapaxes(value, -1, -2)))
        tb = False
    if len(ins) > 2:
        operands.append(2)
    attrs = {"transpose_a": ta, "transpose_b": tb, "activation": activation_of(node)}
    return Lowered("matmul", attrs, operands, [(out, a.dtype)])


@define("FullConnection", dtypes=FLOAT, check=FUSED, const_inputs=(1, 2), kernels=("matmul",))
def full_connection_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    w = const(node, ins, 1, "weight")
    if w.ndim != 2:
        raise InvalidModelError(f"{describe(node)}: weight {w.shape}, expected (out, in)")
    if node.attrs.get("use_axis", False):
        axis = axis_of(node, int(node.attrs.get("axis", 1)), len(x.shape))
    else:
        axis = len(x.shape) - 1
    rows, k = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    if k != w.shape[1]:
        raise InvalidModelError(f"{describe(node)}: input {x.shape} flattens to K={k}, weight {w.shape}")
    operands: list[int | np.ndarray | Packed] = [
        0, Packed((int(w.shape[1]), int(w.shape[0])), w.dtype, lambda: np.ascontiguousarray(w.T))]
    if len(ins) > 2:
        operands.append(const(node, ins, 2, "bias").reshape(-1))
    attrs = {"transpose_a": False, "transpose_b": False, "activation": activation_of(node),
             "a_shape": [rows, k], "y_shape": [rows, int(w.shape[0])]}
    return Lowered("matmul", attrs, operands, [((*x.shape[:axis], int(w.shape[0])), x.dtype)])


# ---- native lowering ---------------------------------------------------------------------


@native("matmul")
def _matmul_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    a_shape = attrs.get("a_shape", ins[0].shape)
    y_shape = attrs.get("y_shape", outs[0].shape)
    if (not f32(*ins, outs[0]) or attrs["transpose_a"] or len(a_shape) != 2
            or len(y_shape) != 2 or len(ins[1].shape) != 2):
        return False
    (m, k), n = a_shape, y_shape[1]
    if ins[1].shape != ((n, k) if attrs["transpose_b"] else (k, n)):
        return False
    if len(ins) > 2 and ins[2].nbytes != n * 4:
        return False
    b.params(m, n, k, attrs["transpose_b"])
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2] if len(ins) > 2 else None, b.outputs[0])
    return b.activation(attrs.get("activation", "NO_ACTIVATION"))
