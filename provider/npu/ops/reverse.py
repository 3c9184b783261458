"""ReverseV2: the elements along some axes in reverse order (capability, rule and numpy
kernel). The importer runs a reverse-direction LSTM/GRU as the forward one between two of
these on the time axis."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.npu.ops.common import DATA, Lowered, TensorInfo, axis_of
from provider.npu.ops.registry import define, register


@register("reverse")
def reverse(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = inputs[0] read backwards along attrs["axes"]."""
    np.copyto(outputs[0], np.flip(inputs[0], attrs["axes"]))


@define("ReverseV2", dtypes=DATA, kernels=("reverse",))
def reverse_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axes = tuple(sorted({axis_of(node, int(a), len(x.shape)) for a in node.attrs.get("axis", [])}))
    return Lowered("reverse", {"axes": axes}, [0], [(x.shape, x.dtype)])
