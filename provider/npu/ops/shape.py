"""Shape-only ops: the reshape-likes (Reshape, Flatten, Squeeze, Unsqueeze, ExpandDims,
Dropout: aliases, no kernel, the output shares the input's buffer), the ops known from
shapes alone (Shape, ConstantOfShape: folded at compile time) and Cast; the numpy kernels
`cast` and `copy` (which the compiler also inserts for graph outputs)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite import dtypes as lite_dtypes
from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError
from provider.npu.ops.common import (
    ANY,
    DATA,
    Lowered,
    TensorInfo,
    axis_of,
    const,
    const_scalar,
    describe,
    ints,
)
from provider.npu.ops.native_builder import StepBuilder
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


@register("cast")
def cast(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x converted to the output's dtype (unsafe casting, as ONNX Cast). A float
    outside the integer type's range (inf, NaN, too large) gives what onnxruntime's CPU Cast
    gives on x86, the conversion instruction's result (INT_MIN for 32/64-bit integers), with
    no floating-point warning."""
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(outputs[0], inputs[0], casting="unsafe")


@register("copy")
def copy(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x in the output's shape (element order kept; the output is contiguous)."""
    np.copyto(outputs[0].reshape(inputs[0].shape), inputs[0])


# csrc/layout.c's cast types (CT_*)
CAST_TYPES = {np.dtype(t): code for code, t in enumerate(
    (np.float32, np.int32, np.int64, np.uint8, np.int8, np.bool_))}


@native("cast")
def _cast_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A cast in C (layout.c) between the types it knows, unless it is a float to an integer
    (numpy's kernel gives the x86 conversion's result there; C leaves it undefined)."""
    x, y = ins[0], outs[0]
    count = math.prod(x.shape)
    if x.np_dtype not in CAST_TYPES or y.np_dtype not in CAST_TYPES or \
            count != math.prod(y.shape) or (x.np_dtype.kind == "f" and y.np_dtype.kind in "iu"):
        return False
    b.params(count, CAST_TYPES[x.np_dtype], CAST_TYPES[y.np_dtype])
    b.slots(b.inputs[0], b.outputs[0])
    return True


@native("copy", op="transpose")
def _copy_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A copy as one block of the C library's strided copy (layout.c): a memcpy, whatever
    the dtype, where a numpy step cost its callback (~5-12 us a run)."""
    x, y = ins[0], outs[0]
    if x.np_dtype != y.np_dtype or x.nbytes != y.nbytes or not x.nbytes:
        return False
    b.params(1, x.nbytes, 1)  # rank 1, the block's bytes, one block
    b.slots(b.inputs[0], b.outputs[0])
    return True


# ---- reshape-like (aliases: no kernel, the output shares the input's buffer) ----------------


def _alias(x: TensorInfo, shape: Sequence[int]) -> Lowered:
    return Lowered("", {}, [0], [(tuple(int(d) for d in shape), x.dtype)])


@define("Reshape", dtypes=DATA, const_inputs=(1,), note="alias")
def reshape_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    target = ints(const(node, ins, 1, "shape")) if len(ins) > 1 else ints(node.attrs.get("shape", []))
    shape = [x.shape[i] if d == 0 and i < len(x.shape) else d for i, d in enumerate(target)]
    total = math.prod(x.shape)
    if shape.count(-1) > 1:
        raise InvalidModelError(f"{describe(node)}: shape {target} has more than one -1")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = total // known if known else 0
    if math.prod(shape) != total:
        raise InvalidModelError(f"{describe(node)}: cannot reshape {x.shape} to {target}")
    return _alias(x, shape)


@define("Flatten", dtypes=DATA, note="alias")
def flatten_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axis = int(node.attrs.get("axis", 1))
    axis = axis % len(x.shape) if axis < 0 else axis
    return _alias(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@define("Squeeze", dtypes=DATA, const_inputs=(1,), note="alias")
def squeeze_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axes = ints(const(node, ins, 1, "axes")) if len(ins) > 1 else ints(node.attrs.get("axis", []))
    axes = {axis_of(node, a, len(x.shape)) for a in axes} or {i for i, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in axes):
        raise InvalidModelError(f"{describe(node)}: cannot squeeze axes {sorted(axes)} of {x.shape}")
    return _alias(x, [d for i, d in enumerate(x.shape) if i not in axes])


@define("Unsqueeze", "ExpandDims", dtypes=DATA, const_inputs=(1,), note="alias")
def unsqueeze_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axes = ints(const(node, ins, 1, "axis")) if len(ins) > 1 else ints(node.attrs.get("axis", []))
    ndim = len(x.shape) + len(axes)
    axes = sorted(axis_of(node, a, ndim) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return _alias(x, shape)


def _no_mask(node: LiteNode) -> str | None:
    return "Dropout mask output" if len(node.outputs) > 1 else None


@define("Dropout", dtypes=DATA, check=_no_mask, note="alias; no mask output")
def dropout_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    return _alias(ins[0], ins[0].shape)


# ---- nodes whose outputs are known from shapes alone -------------------------------------


@define("Shape", dtypes=ANY, note="evaluated at compile time")
def shape_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    dt = out_types[0] or np.dtype(np.int32)
    value = np.asarray(ins[0].shape, dtype=dt)
    return Lowered("", {}, [], [(value.shape, value.dtype)], values=[value])


@define("ConstantOfShape", dtypes=ANY, const_inputs=(0,), note="evaluated at compile time")
def constant_of_shape_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    shape = ints(const(node, ins, 0, "shape"))
    dt = out_types[0]
    if dt is None:
        dt = lite_dtypes.to_numpy(int(node.attrs.get("data_type", lite_dtypes.FLOAT32)))
    fill = np.asarray(node.attrs.get("value", [0.0])).reshape(-1)[0]
    value = np.full(shape, fill).astype(dt)
    return Lowered("", {}, [], [(value.shape, value.dtype)], values=[value])


@define("Size", dtypes=ANY, note="evaluated at compile time")
def size_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    value = np.asarray(math.prod(ins[0].shape), dtype=out_types[0] or np.dtype(np.int64))
    return Lowered("", {}, [], [(value.shape, value.dtype)], values=[value])


@define("Range", dtypes=ANY, const_inputs=(0, 1, 2), note="evaluated at compile time")
def range_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """ONNX's count max(ceil((limit - start) / delta), 0), from scalar (or 1-element) inputs."""
    start, limit, delta = (const_scalar(node, ins, i, what)
                           for i, what in enumerate(("start", "limit", "delta")))
    dt = out_types[0] or start.dtype
    if delta == 0:
        raise InvalidModelError(f"{describe(node)}: delta is 0")
    count = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    value = (start + np.arange(count, dtype=dt) * delta).astype(dt)
    return Lowered("", {}, [], [(value.shape, value.dtype)], values=[value])


@define("Cast", dtypes=DATA, const_inputs=(1,), kernels=("cast",))
def cast_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Target from input 1 (a MindSpore TypeId, as MindSpore Lite passes it), else the
    declared output dtype."""
    if len(ins) > 1:
        target = lite_dtypes.to_numpy(int(const_scalar(node, ins, 1, "target TypeId")))
    elif out_types[0] is not None:
        target = out_types[0]
    else:
        raise InvalidModelError(f"{describe(node)}: no target type (input 1 or output dtype)")
    return Lowered("cast", {}, [0], [(ins[0].shape, np.dtype(target))])
