"""ReverseV2: the elements along some axes in reverse order (capability, rule, numpy kernel
and native lowering: the C library's strided copy, walking those axes backwards). The
importer runs a reverse-direction LSTM/GRU as the forward one between two of these on the
time axis, and ArgMax/ArgMin's last-index form reads its input through one."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.npu.ops.common import DATA, Lowered, TensorInfo, axis_of
from provider.npu.ops.layout import strided_copy
from provider.npu.ops.native_builder import StepBuilder
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


@register("reverse")
def reverse(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = inputs[0] read backwards along attrs["axes"]."""
    np.copyto(outputs[0], np.flip(inputs[0], attrs["axes"]))


@define("ReverseV2", dtypes=DATA, kernels=("reverse",))
def reverse_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axes = tuple(sorted({axis_of(node, int(a), len(x.shape)) for a in node.attrs.get("axis", [])}))
    return Lowered("reverse", {"axes": axes}, [0], [(x.shape, x.dtype)])


@native("reverse", op="transpose")
def _reverse_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """The strided copy starting at the last element of each reversed axis and walking it
    with a negative stride (any dtype: bytes are copied)."""
    x = ins[0]
    walk = [math.prod(x.shape[a + 1:]) for a in range(len(x.shape))]
    offset = sum((x.shape[a] - 1) * walk[a] for a in attrs["axes"] if x.shape[a])
    for a in attrs["axes"]:
        walk[a] = -walk[a]
    return strided_copy(x, x.shape, walk, b, offset * x.np_dtype.itemsize)
