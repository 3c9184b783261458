"""TopKFusion: the k largest or smallest values along one axis, sorted, and their indices
(capability, rule, numpy kernel and native lowering: csrc/topk.c). Ties go to the lower
index, as onnxruntime orders them; an unsorted TopK stays on the CPU (its order is the
runtime's own)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError
from provider.npu.ops.common import NUMERIC, Lowered, TensorInfo, axis_of, const, describe, ints
from provider.npu.ops.native_builder import ELEMENT_TYPES, INDEX_TYPES, StepBuilder, around
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot

# float32/int32 lines at least this long stay on the numpy kernel: csrc/topk.c's keys hold a
# value's index in their low 32 bits
KEYED_LINE_LIMIT = 2**32 - 1


def _order(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Indices that sort x along axis (descending when `largest`), equal values by index.
    Descending: a stable ascending sort of the reversed axis, reversed (no negation, which
    an integer's minimum would overflow)."""
    if not largest:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    reversed_order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return np.flip(n - 1 - reversed_order, axis)


@register("topk")
def topk(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs = (values, indices) of the attrs["k"] first of x sorted along attrs["axis"]."""
    x, axis, k = inputs[0], attrs["axis"], attrs["k"]
    picked = np.take(_order(x, axis, attrs["largest"]), np.arange(k), axis=axis)
    np.copyto(outputs[0], np.take_along_axis(x, picked, axis=axis))
    if len(outputs) > 1:  # a Lite TopKFusion may leave its indices out
        np.copyto(outputs[1], picked, casting="same_kind")


def _check(node: LiteNode) -> str | None:
    if not node.attrs.get("sorted", True):
        return "TopKFusion sorted=False (the order is the runtime's own)"
    return None


@define("TopKFusion", dtypes=NUMERIC, check=_check, const_inputs=(1,), rank=(1, 99),
        kernels=("topk",), note="sorted; ties by index")
def topk_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    ndim = len(x.shape)
    axis = axis_of(node, int(node.attrs.get("axis", -1)), ndim)
    k = ints(const(node, ins, 1, "k"))
    if len(k) != 1 or not 0 <= k[0] <= x.shape[axis]:
        raise InvalidModelError(f"{describe(node)}: k {k} for {x.shape[axis]} values on axis "
                                f"{axis}")
    out = tuple(k[0] if i == axis else d for i, d in enumerate(x.shape))
    index = out_types[1] if len(out_types) > 1 and out_types[1] is not None else np.dtype(np.int32)
    attrs = {"axis": axis, "k": k[0], "largest": bool(int(node.attrs.get("largest", 1)))}
    return Lowered("topk", attrs, [0], [(out, x.dtype), (out, index)])


@native("topk")
def _topk_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """float32, int32 or int64 values, int32 or int64 indices (or none): a detector's top
    scores inside the model. float32 and int32 lines go by keys holding the index in 32 bits
    (csrc/topk.c): a line of 2^32 - 1 values or more stays on the numpy kernel."""
    x, axis, k = ins[0], attrs["axis"], attrs["k"]
    kind = ELEMENT_TYPES.get(x.np_dtype)
    index = INDEX_TYPES.get(outs[1].np_dtype) if len(outs) > 1 else 0
    if kind is None or index is None or outs[0].np_dtype != x.np_dtype or not k:
        return False
    if x.np_dtype != np.int64 and x.shape[axis] >= KEYED_LINE_LIMIT:
        return False
    b.params(*around(x.shape, axis), k, attrs["largest"], kind, index)
    b.slots(b.inputs[0], b.outputs[0], b.outputs[1] if len(outs) > 1 else None)
    return True
