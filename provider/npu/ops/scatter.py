"""ScatterNdUpdate (ONNX ScatterND without a reduction): data with whole slices replaced at
index tuples; in-place slice assignments of detector heads (YOLOv5's `y[..., 0:2] = ...`)
and transformer caches export as it. ScatterElements (torch's `scatter_`, no reduction):
data with single elements replaced along one axis. Capability, rules, numpy kernels and
native lowerings (csrc/layout.c). Index values come at run time and are checked there;
where two indices name one place the later one wins, as onnxruntime writes them in order."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import UnsupportedError
from provider.npu.ops.common import DATA, Lowered, TensorInfo, axis_of, check_indices, describe
from provider.npu.ops.gather_elements import elements_params
from provider.npu.ops.native_builder import INDEX_TYPES, MAX_RANK, StepBuilder
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


@register("scatter_nd", inplace=True)
def scatter_nd(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = data, then the slice at each index tuple (the index's last axis, k deep;
    negatives wrap) replaced by its update, in order; every index is checked first."""
    data, idx, updates = inputs
    k = idx.shape[-1]
    tuples = idx.reshape(-1, k).astype(np.int64)
    dims = np.array(data.shape[:k], np.int64)
    for a in range(k):
        check_indices(tuples[:, a], int(dims[a]), "ScatterND")
    out = outputs[0]
    if not np.shares_memory(out, data):
        np.copyto(out, data)
    flat = np.ravel_multi_index(tuple(np.where(tuples < 0, tuples + dims, tuples).T), data.shape[:k])
    inner = math.prod(data.shape[k:])  # (explicit: -1 cannot stand for it with no tuples)
    rows, slices = out.reshape(math.prod(data.shape[:k]), inner), updates.reshape(len(flat), inner)
    for j, row in enumerate(flat):  # in order: a repeated tuple keeps the last update
        rows[row] = slices[j]


@define("ScatterNdUpdate", dtypes=DATA, kernels=("scatter_nd",),
        note="int32/int64 index tuples, checked per run; no reduction")
def scatter_nd_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    data, idx, updates = ins[0], ins[1], ins[2]
    k = idx.shape[-1] if idx.shape else 0
    if idx.dtype.kind not in "iu" or not 1 <= k <= len(data.shape) \
            or tuple(updates.shape) != (*idx.shape[:-1], *data.shape[k:]) \
            or updates.dtype != data.dtype:
        raise UnsupportedError(f"{describe(node)}: indices {idx.dtype}{list(idx.shape)} and "
                               f"updates {updates.dtype}{list(updates.shape)} for data "
                               f"{data.dtype}{list(data.shape)}")
    return Lowered("scatter_nd", {}, [0, 1, 2], [(tuple(data.shape), data.dtype)])


@native("scatter_nd")
def _scatter_nd_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict,
                       b: StepBuilder) -> bool:
    """Slices copied by index tuple (layout.c), up to MAX_RANK index depth, run-time indices
    checked in C with the numpy kernel's words."""
    data, idx = ins[0], ins[1]
    k = idx.shape[-1]
    if idx.np_dtype not in INDEX_TYPES or k > MAX_RANK:
        return False
    inner = data.np_dtype.itemsize * math.prod(data.shape[k:])
    b.params(k, inner, math.prod(idx.shape[:-1]), idx.np_dtype.itemsize, data.nbytes,
             *data.shape[:k])
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2], b.outputs[0])
    return True


@register("scatter_elements", inplace=True)
def scatter_elements(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                     attrs: dict) -> None:
    """outputs[0] = data, then each update written at its own position with the axis's
    coordinate replaced by its index (negatives wrap), in order; every index checked first."""
    data, idx, updates = inputs
    axis = attrs["axis"]
    check_indices(idx, data.shape[axis], "ScatterElements")
    out = outputs[0]
    if not np.shares_memory(out, data):
        np.copyto(out, data)
    coords = list(np.indices(idx.shape, sparse=True))
    coords[axis] = np.where(idx < 0, idx + data.shape[axis], idx)
    flat = np.ravel_multi_index(tuple(np.broadcast_arrays(*coords)), data.shape).reshape(-1)
    values = updates.reshape(-1)
    if len(np.unique(flat)) == len(flat):
        out.reshape(-1)[flat] = values
    else:  # in order: a repeated place keeps the last update
        for j, place in enumerate(flat):
            out.reshape(-1)[place] = values[j]


@define("ScatterElements", dtypes=DATA, kernels=("scatter_elements",),
        note="int32/int64 index of the data's rank, checked per run; no reduction")
def scatter_elements_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    data, idx, updates = ins[0], ins[1], ins[2]
    axis = axis_of(node, int(node.attrs.get("axis", 0)), len(data.shape))
    if idx.dtype.kind not in "iu" or len(idx.shape) != len(data.shape) \
            or tuple(updates.shape) != tuple(idx.shape) or updates.dtype != data.dtype or any(
                n > d for a, (n, d) in enumerate(zip(idx.shape, data.shape, strict=True))
                if a != axis):
        raise UnsupportedError(f"{describe(node)}: index {idx.dtype}{list(idx.shape)} and "
                               f"updates {updates.dtype}{list(updates.shape)} for data "
                               f"{data.dtype}{list(data.shape)} along axis {axis}")
    return Lowered("scatter_elements", {"axis": axis}, [0, 1, 2],
                   [(tuple(data.shape), data.dtype)])


@native("scatter_elements")
def _scatter_elements_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict,
                             b: StepBuilder) -> bool:
    """Elements written by index (layout.c) through data's strides, up to MAX_RANK, run-time
    indices checked in C with the numpy kernel's words."""
    data, idx = ins[0], ins[1]
    if idx.np_dtype not in INDEX_TYPES or not 1 <= len(data.shape) <= MAX_RANK:
        return False
    b.params(*elements_params(data, idx, attrs["axis"]), data.nbytes)
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2], b.outputs[0])
    return True
