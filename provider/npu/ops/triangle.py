"""Triu / Tril (ONNX Trilu): the upper or lower triangle of the last two axes, from the k-th
diagonal on, the rest zero (capability, rule, numpy kernel and native lowering: csrc/layout.c).
A decoder's causal mask is one, built per sequence length."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.npu.ops.common import DATA, Lowered, TensorInfo, const_scalar
from provider.npu.ops.native_builder import StepBuilder
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


@register("triangle")
def triangle(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = triu(x, k) or tril(x, k) over the last two axes."""
    pick = np.triu if attrs["upper"] else np.tril
    np.copyto(outputs[0], pick(inputs[0], attrs["k"]))


@define("Triu", "Tril", dtypes=DATA, const_inputs=(1,), rank=(2, 99), kernels=("triangle",))
def triangle_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    k = 0
    if len(ins) > 1:
        k = int(const_scalar(node, ins, 1, "k"))
    rows, cols = ins[0].shape[-2:]
    # a diagonal past a corner keeps all or nothing, as the corner's does (and a k near
    # int64's ends would overflow the C step's column arithmetic)
    attrs = {"upper": node.op == "Triu", "k": max(-rows, min(k, cols))}
    return Lowered("triangle", attrs, [0], [(ins[0].shape, ins[0].dtype)])


@native("triangle")
def _triangle_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Row by row (layout.c): the kept columns copied, the rest zero, any element type."""
    x = ins[0]
    *batch, rows, cols = x.shape
    b.params(math.prod(batch), rows, cols, attrs["k"], attrs["upper"], x.np_dtype.itemsize)
    b.slots(b.inputs[0], b.outputs[0])
    return True
