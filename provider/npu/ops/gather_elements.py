"""GatherD (ONNX GatherElements): out[i][j][k] = x[index[i][j][k]][j][k] along one axis
(capability, rule, numpy kernel and native lowering: csrc/layout.c). Index values come at
run time and are checked there."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import UnsupportedError
from provider.npu.ops.common import (
    DATA,
    Lowered,
    TensorInfo,
    axis_of,
    check_indices,
    const_scalar,
    describe,
)
from provider.npu.ops.native_builder import INDEX_TYPES, MAX_RANK, StepBuilder
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


@register("gather_elements")
def gather_elements(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x taken along attrs["axis"] at `index` (negatives wrap), x cut to the
    index's extent on the other axes (ONNX lets the index be smaller there)."""
    x, idx = inputs[0], inputs[1]
    axis = attrs["axis"]
    check_indices(idx, x.shape[axis], "GatherElements")
    x = x[tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(idx.shape))]
    np.copyto(outputs[0], np.take_along_axis(x, np.where(idx < 0, idx + x.shape[axis], idx),
                                             axis=axis))


@define("GatherD", dtypes=DATA, const_inputs=(1,), kernels=("gather_elements",),
        note="int32/int64 index of the data's rank, checked per run")
def gather_d_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x, idx = ins[0], ins[2]
    axis = axis_of(node, int(const_scalar(node, ins, 1, "dim")), len(x.shape))
    if idx.dtype.kind not in "iu" or len(idx.shape) != len(x.shape) or any(
            n > d for a, (n, d) in enumerate(zip(idx.shape, x.shape, strict=True)) if a != axis):
        raise UnsupportedError(f"{describe(node)}: index {idx.dtype}{list(idx.shape)} for data "
                               f"{list(x.shape)} along axis {axis}")
    return Lowered("gather_elements", {"axis": axis}, [0, 2], [(tuple(idx.shape), x.dtype)])


@native("gather_elements")
def _gather_elements_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict,
                            b: StepBuilder) -> bool:
    """Elements copied by index (layout.c) through x's strides, up to MAX_RANK, run-time
    indices checked in C with the numpy kernel's words."""
    x, idx, y = ins[0], ins[1], outs[0]
    rank, axis = len(x.shape), attrs["axis"]
    if idx.np_dtype not in INDEX_TYPES or not 1 <= rank <= MAX_RANK or y.shape != idx.shape \
            or y.np_dtype != x.np_dtype:
        return False
    b.params(*elements_params(x, idx, axis))
    b.slots(b.inputs[0], b.inputs[1], b.outputs[0])
    return True


def elements_params(x: Slot, idx: Slot, axis: int) -> list[int]:
    """layout.c's parameters of an elements-along-an-axis step (gather_elements,
    scatter_elements): rank, element and index bytes, the axis's length and byte stride in
    x, the index's dims and x's byte strides with the axis's 0 (each padded to MAX_RANK)."""
    rank, size = len(x.shape), x.np_dtype.itemsize
    strides = [size * math.prod(x.shape[d + 1:]) for d in range(rank)]
    along, strides[axis] = strides[axis], 0  # the axis's coordinate is the index's
    pad = [0] * (MAX_RANK - rank)
    return [rank, size, idx.np_dtype.itemsize, x.shape[axis], along, *idx.shape, *pad,
            *strides, *pad]
