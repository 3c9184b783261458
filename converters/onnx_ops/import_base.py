"""The ONNX import table and the helpers its op functions share.

An import function takes `(ctx: ImportContext, node: NodeView)` and returns the list of
`LiteNode`s that compute the node's outputs (possibly empty, e.g. for Constant). It raises
`Unmappable(reason)` *before* adding any tensor when the node has no exact Lite mapping;
the importer then carries it as Custom.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from converters.lite import dtypes
from converters.lite.ir import LiteNode
from converters.onnx_ops.registry import OpTable, Unmappable

IMPORTERS: OpTable = OpTable("onnx import")


def emit(ctx, node, op: str, attrs: dict[str, Any], inputs: Sequence[str | int],
         outputs: Sequence[str] | None = None) -> LiteNode:
    """A LiteNode named after `node`; inputs and outputs are ONNX value names or tensor
    indices (an empty name, an absent output, is left out)."""
    ins = [i if isinstance(i, int) else ctx.tensor(i) for i in inputs]
    outs = [o if isinstance(o, int) else ctx.tensor(o)
            for o in (node.outputs if outputs is None else outputs) if o != ""]
    return LiteNode(node.name, op, dict(attrs), ins, outs)


def intermediate(ctx, hint: str, dtype: np.dtype | None) -> int:
    """A new activation tensor (an op imported as several Lite nodes) of `dtype`, its shape
    unknown (the consumers infer it); its index."""
    index = ctx.tensor(ctx.fresh_name(hint))
    if dtype is not None:
        ctx.model.tensors[index].type_id = dtypes.from_numpy(dtype)
    return index


def present(node, i: int) -> str:
    """Name of optional input `i`, "" when absent."""
    return node.inputs[i] if len(node.inputs) > i else ""


def const_input(ctx, node, i: int, what: str) -> np.ndarray | None:
    """The constant value of optional input `i` (None when absent); Unmappable if not const."""
    name = present(node, i)
    if not name:
        return None
    value = ctx.const_value(name)
    if value is None:
        raise Unmappable(f"{what} ({name!r}) is not a constant")
    return value


def attr_or_input(ctx, node, attr: str, i: int, since: int) -> list[int] | None:
    """Ints given as attribute before opset `since` and as constant input from it on."""
    if ctx.opset >= since:
        value = const_input(ctx, node, i, attr)
        return None if value is None else [int(v) for v in value.reshape(-1)]
    value = node.attrs.get(attr)
    return None if value is None else [int(v) for v in value]


def float_input(ctx, node, what: str) -> np.dtype:
    """The dtype of input 0; Unmappable ("{what} of a non-float (or unknown) type") unless
    it is a float type (the forms built of float constants and arithmetic)."""
    dtype = ctx.dtype(node.inputs[0])
    if dtype is None or dtype.kind != "f":
        raise Unmappable(f"{what} of a non-float (or unknown) type")
    return dtype


def single_output(ctx, node) -> None:
    """Unmappable unless only the first output is used (named extras nobody reads are fine)."""
    if any(ctx.is_read(o) for o in node.outputs[1:] if o):
        raise Unmappable("optional extra outputs are used")


def static_ints(values, what: str) -> list[int]:
    """`values` as ints; Unmappable when any is symbolic or unknown."""
    if values is None or any(not isinstance(v, (int, np.integer)) for v in values):
        raise Unmappable(f"{what} is not static")
    return [int(v) for v in values]



INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def int32_operand(ctx, node, i: int, what: str) -> str | int:
    """Input `i` for a Lite op that reads index data as int32 (as MindSpore Lite's kernels
    do): a constant int64 operand gets an int32 copy (clamped: ONNX uses INT64 extremes
    for "to the end"); anything else is passed through."""
    name = node.inputs[i]
    value = ctx.const_value(name)
    if value is None or value.dtype != np.int64:
        return name
    clamped = np.clip(value, INT32_MIN, INT32_MAX).astype(np.int32)
    return ctx.const(f"{node.outputs[0]}/{what}", clamped)
