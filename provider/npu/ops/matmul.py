"""MatMulFusion and FullConnection: capability, rules, the numpy kernel (one broadcasting,
batched GEMM plus bias and activation) and the native lowerings: 2-D GEMMs (batched A
times one matrix flattened into one) and batched products (one GEMM per batch index).

A constant B too big for the cache, multiplied by few rows (an RNN's output layer over a
short sequence), is stored in panels of columns (`to_panels`): the C kernel then streams it
once per run instead of repacking it on every call."""

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
from provider.npu.ops.native_builder import StepBuilder, broadcast_strides, f32, merged
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
    if attrs.get("weights") == "panels":
        b = from_panels(b, y.shape[-1])
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


# ---- B in panels --------------------------------------------------------------------------

PANEL = 48  # columns per panel: npu.h's ROW_GEMM_PANEL
# From how many floats of a constant B panels pay, by the most rows of A: the portable and
# AVX-512 panel tiles stream a panel's K rows contiguously; OpenBLAS packs B again at every
# call, which A's few rows do not repay. One MatMul step alone, panels vs B in place (OpenBLAS
# on an AVX2 host), alternating in one process, 1 core: 1 x 1024 x 1000 98 vs 317 us, 4 x 1024
# x 1000 152 vs 313, 8 x 256 x 1024 75 vs 107, 16 x 384 x 1536 259 vs 300, 16 x 384 x 384 94 vs
# 100, 32 x 768 x 768 497 vs 527 (2 cores alike); B in place was ahead from 24 rows on B
# that stay in cache (24 x 256 x 256 48 vs 54 us) and at 64 rows. Narrower than a panel,
# the padding is work: 16 x 512 x 40 17.4 vs 14.0 us, 4 x 1024 x 16 10.3 vs 5.4.
PANEL_MIN_FLOATS = ((8, 0), (32, 1 << 17), (64, 1 << 20))


def panels_pay(rows: int, k: int, n: int) -> bool:
    """Whether a constant (k, n) B times `rows` rows is stored in panels (PANEL_MIN_FLOATS)."""
    if rows <= 0 or k <= 0 or n < PANEL:
        return False
    return any(rows <= most and k * n >= floats for most, floats in PANEL_MIN_FLOATS)


def to_panels(b: np.ndarray) -> np.ndarray:
    """(K, N) as (ceil(N / PANEL), K, PANEL): panel p holds columns [PANEL p, PANEL p + PANEL)
    of every row, contiguous, the last one zero-padded."""
    k, n = b.shape
    padded = np.zeros((k, -(-n // PANEL) * PANEL), b.dtype)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, -1, PANEL).transpose(1, 0, 2))


def from_panels(panels: np.ndarray, n: int) -> np.ndarray:
    """The (K, n) matrix `to_panels` stored (a strided view)."""
    p, k, width = panels.shape
    return panels.transpose(1, 0, 2).reshape(k, p * width)[:, :n]


def _panels(value: np.ndarray, attrs: dict) -> Packed:
    """A constant (K, N) B stored in panels (attrs["weights"] says so to both kernels)."""
    k, n = value.shape
    attrs["weights"] = "panels"
    return Packed((-(-n // PANEL), k, PANEL), value.dtype, lambda: to_panels(value))


# ---- rules -------------------------------------------------------------------------------


def _matmul_shape(node: LiteNode, a: Shape, b: Shape) -> Shape:
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise InvalidModelError(f"{describe(node)}: cannot multiply {a} by {b}")
    return (*broadcast(node, a[:-2], b[:-2]), a[-2], b[-1])


@define("MatMulFusion", dtypes=FLOAT, check=FUSED, rank=(2, 99), ranked=2, kernels=("matmul",))
def matmul_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    a, b = ins[0], ins[1]
    ta, tb = bool(node.attrs.get("transpose_a", False)), bool(node.attrs.get("transpose_b", False))
    a_shape = (*a.shape[:-2], a.shape[-1], a.shape[-2]) if ta else a.shape
    b_shape = (*b.shape[:-2], b.shape[-1], b.shape[-2]) if tb else b.shape
    out = _matmul_shape(node, a_shape, b_shape)
    operands: list[int | np.ndarray | Packed] = [0, 1]
    attrs = {"transpose_a": ta, "transpose_b": False, "activation": activation_of(node)}
    value = b.value
    if (value is not None and value.ndim == 2 and not ta
            and panels_pay(math.prod(a_shape[:-1]), *b_shape)):
        operands[1] = _panels(value.T if tb else value, attrs)
    elif value is not None and tb:  # pack the constant once, pre-transposed
        operands[1] = Packed(b_shape, value.dtype,
                             lambda: np.ascontiguousarray(np.swapaxes(value, -1, -2)))
    else:
        attrs["transpose_b"] = tb
    if len(ins) > 2:
        if tuple(ins[2].shape) != (out[-1],):
            raise InvalidModelError(f"{describe(node)}: bias {tuple(ins[2].shape)}, expected "
                                    f"({out[-1]},)")
        operands.append(2)
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
    rows, k, n = math.prod(x.shape[:axis]), math.prod(x.shape[axis:]), int(w.shape[0])
    if k != w.shape[1]:
        raise InvalidModelError(f"{describe(node)}: input {x.shape} flattens to K={k}, weight {w.shape}")
    attrs = {"transpose_a": False, "transpose_b": False, "activation": activation_of(node),
             "a_shape": [rows, k], "y_shape": [rows, n]}
    weight = (_panels(w.T, attrs) if panels_pay(rows, k, n)
              else Packed((k, n), w.dtype, lambda: np.ascontiguousarray(w.T)))
    operands: list[int | np.ndarray | Packed] = [0, weight]
    if len(ins) > 2:
        operands.append(const(node, ins, 2, "bias").reshape(-1))
    return Lowered("matmul", attrs, operands, [((*x.shape[:axis], int(w.shape[0])), x.dtype)])


# ---- native lowering ---------------------------------------------------------------------


@native("matmul")
def _matmul_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A 2-D GEMM: FullConnection's flattened views, or a MatMul whose A has leading batch
    dims and B is one matrix (a transformer's dense layers: (..., M, K) @ (K, N) is one
    (batch * M, K) GEMM); batched products of two activations go to `bmatmul`."""
    a_shape = attrs.get("a_shape", ins[0].shape)
    y_shape = attrs.get("y_shape", outs[0].shape)
    if not f32(*ins, outs[0]) or attrs["transpose_a"]:
        return False
    panels = attrs.get("weights") == "panels"
    if (len(ins[1].shape) != 2 and not panels) or len(a_shape) < 2:
        return _bmatmul_native(ins, outs, attrs, b)
    if len(a_shape) != len(y_shape) or tuple(a_shape[:-1]) != tuple(y_shape[:-1]):
        return False
    m, k, n = math.prod(a_shape[:-1]), a_shape[-1], y_shape[-1]
    if panels:
        expected = (-(-n // PANEL), k, PANEL)
    else:
        expected = (n, k) if attrs["transpose_b"] else (k, n)
    if ins[1].shape != expected or (len(ins) > 2 and ins[2].nbytes != n * 4):
        return False
    b.params(m, n, k, attrs["transpose_b"])
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2] if len(ins) > 2 else None, b.outputs[0])
    # every path (OpenBLAS, rowgemm.c, packed panels) ends in npu.h's epilogue
    if not b.activation(attrs.get("activation", "NO_ACTIVATION")):
        return False
    b.params(int(panels))
    return True


MAX_BATCH_RANK = 4


def _bmatmul_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Products of two batched operands (attention's Q @ K^T, P @ V): one GEMM per batch
    index of the broadcast batch dims (at most 4 after merging)."""
    a, w, y = ins[0], ins[1], outs[0]
    if len(a.shape) < 2 or len(w.shape) < 2 or "a_shape" in attrs:
        return False
    m, k = a.shape[-2:]
    n = w.shape[-2] if attrs["transpose_b"] else w.shape[-1]
    batch = y.shape[:-2]
    if y.shape[-2:] != (m, n) or (len(ins) > 2 and ins[2].nbytes != n * 4):
        return False
    dims, (sa, sw) = merged(batch, broadcast_strides(a.shape[:-2], batch),
                            broadcast_strides(w.shape[:-2], batch))
    code = b.activation_code(attrs.get("activation", "NO_ACTIVATION"))
    if len(dims) > MAX_BATCH_RANK or code is None:
        return False
    b.set_op("bmatmul")
    r = len(dims)
    b.p[0] = r
    b.p[1:1 + r] = dims
    b.p[5:5 + r] = [s * m * k for s in sa]
    b.p[9:9 + r] = [s * k * n for s in sw]
    b.p[13:18] = [m, n, k, int(attrs["transpose_b"]), code]
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2] if len(ins) > 2 else None, b.outputs[0])
    return True
