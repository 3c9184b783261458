"""CumSum: running sums along one axis, inclusive or exclusive, forward or reversed
(capability, rule, numpy kernel and native lowering: csrc/cumsum.c). Sums in the input's
dtype, one element after the other, as onnxruntime's kernel adds them (RoBERTa-style
position ids are a cumsum of the attention mask, every run)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError
from provider.npu.ops.common import NUMERIC, Lowered, TensorInfo, axis_of, const, describe, ints
from provider.npu.ops.native_builder import ELEMENT_TYPES, StepBuilder, around
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


@register("cumsum")
def cumsum(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = the running sum of x along attrs["axis"]: without the element itself
    when attrs["exclusive"], from the end when attrs["reverse"]."""
    x, y, axis = inputs[0], outputs[0], attrs["axis"]
    if attrs["reverse"]:
        x, y = np.flip(x, axis), np.flip(y, axis)
    if attrs["exclusive"]:
        lead = (slice(None),) * axis
        y[lead + (slice(0, 1),)] = 0
        np.cumsum(x[lead + (slice(0, -1),)], axis=axis, dtype=y.dtype,
                  out=y[lead + (slice(1, None),)])
    else:
        np.cumsum(x, axis=axis, dtype=y.dtype, out=y)


@define("CumSum", dtypes=NUMERIC, const_inputs=(1,), rank=(1, 99), kernels=("cumsum",))
def cumsum_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axis = ints(np.reshape(const(node, ins, 1, "axis"), -1))
    if len(axis) != 1:
        raise InvalidModelError(f"{describe(node)}: axis {axis}, expected one axis")
    attrs = {"axis": axis_of(node, axis[0], len(x.shape)),
             "exclusive": bool(node.attrs.get("exclusive", False)),
             "reverse": bool(node.attrs.get("reverse", False))}
    return Lowered("cumsum", attrs, [0], [(x.shape, x.dtype)])


@native("cumsum")
def _cumsum_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """float32, int32 or int64, the output in the input's dtype."""
    x, axis = ins[0], attrs["axis"]
    kind = ELEMENT_TYPES.get(x.np_dtype)
    if kind is None or outs[0].np_dtype != x.np_dtype:
        return False
    b.params(*around(x.shape, axis), attrs["exclusive"], attrs["reverse"], kind)
    b.slots(b.inputs[0], b.outputs[0])
    return True
