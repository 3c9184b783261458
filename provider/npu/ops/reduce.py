"""ReduceFusion: mean, sum, max, min, prod, sum of squares, L2 over resolved axes:
capability, rule, numpy kernel, and the native lowering of float32 reductions over one block
of consecutive axes (csrc/reduce.c; prod stays on numpy). ArgMaxFusion / ArgMinFusion: the
index of the largest / smallest value along one axis (numpy kernel)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError
from provider.npu.ops.common import (
    FLOAT,
    NUMERIC,
    Lowered,
    TensorInfo,
    axis_of,
    const,
    describe,
    enum_check,
    ints,
)
from provider.npu.ops.native_builder import ELEMENT_TYPES, INDEX_TYPES, StepBuilder, around, f32
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot

_REDUCERS = {
    "ReduceMean": np.mean,
    "ReduceSum": np.sum,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceProd": np.prod,
}
MODES = (*_REDUCERS, "ReduceSumSquare", "ReduceL2")
# What onnxruntime gives for a reduction over no elements (numpy's max and min have no
# value for it and its mean is NaN); every other mode gives 0.
_OF_NOTHING = {"ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceProd": 1.0}


@register("reduce")
def reduce(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = mode(x) over attrs["axes"] (non-negative); the output may drop them."""
    x, y = inputs[0], outputs[0]
    axes = tuple(attrs["axes"])
    keep = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    yk = y.reshape(keep)
    mode = attrs["mode"]
    if not x.size:
        yk.fill(_OF_NOTHING.get(mode, 0.0))
        return
    if mode in ("ReduceSumSquare", "ReduceL2"):
        np.sum(np.square(x), axis=axes, keepdims=True, out=yk)
        if mode == "ReduceL2":
            np.sqrt(yk, out=yk)
    elif mode in ("ReduceMax", "ReduceMin"):
        _REDUCERS[mode](x, axis=axes, keepdims=True, out=yk)
    else:
        _REDUCERS[mode](x, axis=axes, keepdims=True, out=yk, dtype=np.float32
                        if x.dtype == np.float16 else None)


def _check(node: LiteNode) -> str | None:
    if float(node.attrs.get("coeff", 1.0)) not in (0.0, 1.0):
        return f"ReduceFusion coeff={node.attrs['coeff']}"
    return _MODE(node)


_MODE = enum_check("mode", MODES, "ReduceMean")


@define("ReduceFusion", dtypes=FLOAT, check=_check, const_inputs=(1,), kernels=("reduce",),
        note="modes in ops.reduce.MODES; coeff 0 or 1")
def reduce_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    ndim = len(x.shape)
    axes = ints(const(node, ins, 1, "axes")) if len(ins) > 1 else ints(node.attrs.get("axes", []))
    axes = sorted({axis_of(node, a, ndim) for a in axes}) if axes else list(range(ndim))
    if node.attrs.get("reduce_to_end", False):
        axes = list(range(axes[0], ndim))
    mode = str(node.attrs.get("mode", "ReduceMean"))
    keep = bool(node.attrs.get("keep_dims", False))
    out = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    return Lowered("reduce", {"axes": axes, "mode": mode}, [0], [(out, x.dtype)])


# csrc/reduce.c's mode codes (R_*)
NATIVE_MODES = {"ReduceMean": 0, "ReduceSum": 1, "ReduceMax": 2, "ReduceMin": 3,
                "ReduceSumSquare": 4, "ReduceL2": 5}


@native("reduce")
def _reduce_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    x, axes = ins[0], attrs["axes"]
    if (not f32(x, outs[0]) or attrs["mode"] not in NATIVE_MODES or not axes or not x.nbytes
            or axes != list(range(axes[0], axes[-1] + 1))):
        return False
    b.params(math.prod(x.shape[:axes[0]]), math.prod(x.shape[axes[0]:axes[-1] + 1]),
             math.prod(x.shape[axes[-1] + 1:]), NATIVE_MODES[attrs["mode"]])
    b.slots(b.inputs[0], b.outputs[0])
    return True


@register("arg")
def arg(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = the index of x's largest (smallest: attrs["min"]) value along
    attrs["axis"], the first one on a tie; the output may keep the axis as 1. As onnxruntime
    scans: a NaN wins only as the first value (nothing compares greater), elsewhere it
    loses (numpy's argmax would pick the first NaN anywhere)."""
    x, axis = inputs[0], attrs["axis"]
    pick = np.argmin if attrs["min"] else np.argmax
    if x.dtype.kind == "f":
        later = np.isnan(x)
        later[(slice(None),) * axis + (0,)] = False
        if later.any():
            x = np.where(later, np.inf if attrs["min"] else -np.inf, x)
    found = pick(x, axis=axis)
    np.copyto(outputs[0], found.reshape(outputs[0].shape), casting="same_kind")


@native("arg")
def _arg_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """ArgMax/ArgMin of float32, int32 or int64 into int32 or int64 indices (a segmentation
    head's per-pixel class, a classifier's label)."""
    x, y, axis = ins[0], outs[0], attrs["axis"]
    xt, yt = ELEMENT_TYPES.get(x.np_dtype), INDEX_TYPES.get(y.np_dtype)
    if xt is None or yt is None or not x.nbytes or not x.shape[axis]:
        return False
    b.params(*around(x.shape, axis), bool(attrs["min"]), xt, yt)
    b.slots(b.inputs[0], b.outputs[0])
    return True


def _arg_check(node: LiteNode) -> str | None:
    if int(node.attrs.get("top_k", 1)) != 1 or node.attrs.get("out_max_value", False):
        return f"{node.op} with top_k {node.attrs.get('top_k')} or out_max_value"
    return None


@define("ArgMaxFusion", "ArgMinFusion", dtypes=NUMERIC, check=_arg_check, rank=(1, 99),
        kernels=("arg",), note="top_k 1, indices only (the first on a tie)")
def arg_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    ndim = len(x.shape)
    axis = axis_of(node, int(node.attrs.get("axis", 0)), ndim)
    if x.shape[axis] == 0:
        raise InvalidModelError(f"{describe(node)}: no values along axis {axis} to pick from")
    keep = bool(node.attrs.get("keep_dims", False))
    out = tuple(1 if i == axis else d for i, d in enumerate(x.shape) if keep or i != axis)
    dtype = out_types[0] if out_types and out_types[0] is not None else np.dtype(np.int32)
    return Lowered("arg", {"axis": axis, "min": node.op == "ArgMinFusion"}, [0], [(out, dtype)])
