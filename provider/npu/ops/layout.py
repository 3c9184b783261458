"""Data movement: Concat, Split, slices (SliceFusion / StridedSlice), Transpose, PadFusion,
Gather, GatherNd, TileFusion, BroadcastTo, SpaceToDepth / DepthToSpace: capability, rules,
numpy kernels, and the native lowerings of Concat, Transpose and slices. Index arithmetic
is resolved by the rules; the kernels only copy.

Index arrays are validated at compile time, so np.take runs with mode="clip": with the
default mode="raise" numpy buffers the whole output on every call.

Long by design: one family (ops that only move data share the index arithmetic and the
native strided copy), as every op family is one module."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu.ops.common import (
    DATA,
    Lowered,
    Shape,
    TensorInfo,
    axis_of,
    broadcast,
    check_indices,
    const,
    const_scalar,
    data_dtype,
    describe,
    enum_check,
    ints,
)
from provider.npu.ops.native_builder import (
    INDEX_TYPES,
    MAX_SLOTS,
    StepBuilder,
    around,
    broadcast_strides,
    merged,
)
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


def slices(spec: Sequence[Sequence[int | None]]) -> tuple[slice, ...]:
    """Turn the compiler's [[start, stop, step], ...] (stop may be None) into a slice tuple."""
    return tuple(slice(*s) for s in spec)


@register("concat")
def concat(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = inputs joined along attrs["axis"] (non-negative)."""
    np.concatenate(inputs, axis=attrs["axis"], out=outputs[0])


@register("split")
def split(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[i] = consecutive pieces of x along attrs["axis"], sized as the outputs."""
    x, axis = inputs[0], attrs["axis"]
    start = 0
    for y in outputs:
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(start, start + y.shape[axis])
        np.copyto(y, x[tuple(idx)])
        start += y.shape[axis]


@register("slice")
def strided_slice(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x[slices] (attrs["slices"] per axis), reshaped to the output (shrink axes)."""
    part = inputs[0][slices(attrs["slices"])]
    np.copyto(outputs[0].reshape(part.shape), part)


@register("transpose")
def transpose(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x.transpose(attrs["perm"]); with attrs["view"], x is first seen in that
    shape (SpaceToDepth / DepthToSpace: a 6-D transpose of a 4-D tensor)."""
    x = inputs[0] if "view" not in attrs else inputs[0].reshape(attrs["view"])
    y = x.transpose(attrs["perm"])
    np.copyto(outputs[0].reshape(y.shape), y)


@register("pad")
def pad(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x padded by attrs["pads"] ([[before, after], ...], non-negative);
    attrs mode "constant" (value) / "reflect" / "edge" / "symmetric"."""
    x, y = inputs[0], outputs[0]
    pads = attrs["pads"]
    if attrs["mode"] == "constant":
        y.fill(attrs["value"])
        y[tuple(slice(b, b + d) for (b, _), d in zip(pads, x.shape, strict=True))] = x
    else:
        np.copyto(y, np.pad(x, pads, mode=attrs["mode"]))


@register("gather")
def gather(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = take(x, indices, axis): constant indices were made non-negative at
    compile time; run-time ones (attrs["checked"] false: an embedding lookup) are checked
    against [-dim, dim) here, and wrap."""
    x, idx = inputs[0], inputs[1]
    if attrs.get("checked", True):
        np.take(x, idx, axis=attrs["axis"], out=outputs[0], mode="clip")
        return
    check_indices(idx, x.shape[attrs["axis"]], "Gather")
    np.take(x, idx, axis=attrs["axis"], out=outputs[0], mode="wrap")


@register("gather_nd")
def gather_nd(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0][i...] = x[indices[i..., :]] (ONNX GatherND, batch_dims 0); each index
    column checked against its axis, negatives wrap."""
    x, idx = inputs[0], inputs[1]
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    for axis in range(k):
        check_indices(flat[:, axis], x.shape[axis], "GatherND")
    linear = np.ravel_multi_index(tuple(flat[:, a] for a in range(k)), x.shape[:k], mode="wrap")
    np.take(x.reshape(-1, *x.shape[k:]), linear, axis=0,
            out=outputs[0].reshape(-1, *x.shape[k:]), mode="clip")


@register("broadcast")
def broadcast_kernel(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x broadcast to the output's shape (BroadcastTo, ONNX Expand)."""
    np.copyto(outputs[0], inputs[0])


@register("tile")
def tile(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x repeated attrs["multiples"] times per axis, without temporaries: the
    output is viewed as (m0, d0, m1, d1, ...) and x broadcast into it as (1, d0, 1, d1, ...)."""
    x, y = inputs[0], outputs[0]
    reps = attrs["multiples"]
    inter = [v for m, d in zip(reps, x.shape, strict=True) for v in (m, d)]
    np.copyto(y.reshape(inter), x.reshape([v for d in x.shape for v in (1, d)]))


# ---- rules -------------------------------------------------------------------------------


@define("Concat", dtypes=DATA, kernels=("concat",))
def concat_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    ndim = len(ins[0].shape)
    axis = axis_of(node, int(node.attrs.get("axis", 0)), ndim)
    for t in ins[1:]:
        if len(t.shape) != ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ins[0].shape, strict=True)) if i != axis):
            raise InvalidModelError(f"{describe(node)}: cannot concatenate {[t.shape for t in ins]} on axis {axis}")
    out = list(ins[0].shape)
    out[axis] = sum(t.shape[axis] for t in ins)
    return Lowered("concat", {"axis": axis}, list(range(len(ins))), [(tuple(out), data_dtype(ins))])


@define("Split", dtypes=DATA, const_inputs=(1,), kernels=("split",))
def split_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axis = axis_of(node, int(node.attrs.get("axis", 0)), len(x.shape))
    count = len(node.outputs)
    sizes = ints(node.attrs.get("size_splits") or [])
    if len(ins) > 1:
        sizes = ints(const(node, ins, 1, "split sizes"))
    if not sizes:
        if x.shape[axis] % count:
            raise InvalidModelError(f"{describe(node)}: axis of {x.shape[axis]} not divisible in {count}")
        sizes = [x.shape[axis] // count] * count
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    if len(sizes) != count or sum(sizes) != x.shape[axis] or min(sizes) < 0:
        raise InvalidModelError(f"{describe(node)}: sizes {sizes} do not split {x.shape[axis]} into {count}")
    outs = []
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        outs.append((tuple(shape), x.dtype))
    return Lowered("split", {"axis": axis}, [0], outs)


def _slice_spec(dim: int, start: int, stop: int, step: int) -> tuple[list[int | None], int]:
    """Clamp one axis' [start, stop, step) as ONNX Slice does; returns the spec and length."""
    if step == 0:
        raise InvalidModelError("slice step 0")
    begin, end, step = slice(start, stop, step).indices(dim)
    length = len(range(begin, end, step))
    return [begin, None if end < 0 else end, step], length


def _onnx_slice_spec(dim: int, start: int, stop: int, step: int) -> tuple[list[int | None], int]:
    """One axis of an ONNX Slice: negative start/end count from the end, then (step > 0)
    both clamp to [0, dim], or (step < 0) start to [0, dim - 1] and end to [-1, dim - 1].
    Python's slices differ for a negative step: a start before the axis means nothing
    there, where ONNX starts at element 0 (x[-9::-1] of 2 elements: [] vs [x[0]])."""
    if step == 0:
        raise InvalidModelError("slice step 0")
    if dim == 0:
        return [0, 0, step], 0
    start, stop = start + dim if start < 0 else start, stop + dim if stop < 0 else stop
    if step > 0:
        start, stop = min(max(start, 0), dim), min(max(stop, 0), dim)
    else:
        start, stop = min(max(start, 0), dim - 1), min(max(stop, -1), dim - 1)
    length = len(range(start, stop, step))
    return [start, None if stop < 0 else stop, step], length


def _slice_lowered(x: TensorInfo, specs: list[list[int | None]], out: Shape) -> Lowered:
    return Lowered("slice", {"slices": specs}, [0], [(out, x.dtype)])


@define("SliceFusion", dtypes=DATA, const_inputs=(1, 2), kernels=("slice",))
def slice_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    ndim = len(x.shape)
    begin = ints(const(node, ins, 1, "begin"))
    size = ints(const(node, ins, 2, "size"))
    axes = ints(node.attrs.get("axes") or list(range(len(begin))))
    specs: list[list[int | None]] = [[0, d, 1] for d in x.shape]
    out = list(x.shape)
    for a, b, s in zip(axes, begin, size, strict=True):
        a = axis_of(node, a, ndim)
        stop = x.shape[a] if s == -1 else b + s
        specs[a], out[a] = _slice_spec(x.shape[a], b, stop, 1)
    return _slice_lowered(x, specs, tuple(out))


def _clamp_end(v: int) -> int:
    """ONNX uses huge sentinels (INT64_MAX) for "to the end"; Python slices clamp them too."""
    return max(min(v, 2**62), -(2**62))


def _same_lengths(node: LiteNode, **operands: list[int]) -> None:
    """A slice's per-axis operands must agree in length (onnxruntime refuses the model
    otherwise: "Starts and steps shape mismatch")."""
    if len({len(v) for v in operands.values()}) > 1:
        lengths = ", ".join(f"{k} {len(v)}" for k, v in operands.items())
        raise InvalidModelError(f"{describe(node)}: per-axis operands of different lengths "
                                f"({lengths})")


def _strided_masks(node: LiteNode) -> str | None:
    if node.attrs.get("ellipsis_mask", 0) or node.attrs.get("new_axis_mask", 0):
        return "StridedSlice with ellipsis/new-axis masks"
    return None


@define("StridedSlice", dtypes=DATA, check=_strided_masks, const_inputs=(1, 2, 3, 4),
        kernels=("slice",), note="no ellipsis/new-axis masks")
def strided_slice_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Five inputs: ONNX Slice's (x, starts, ends, axes, steps); otherwise TF-style
    (x, begin, end[, strides]) with begin/end/shrink masks over the leading axes."""
    x = ins[0]
    ndim = len(x.shape)
    a = node.attrs
    begin = ints(const(node, ins, 1, "begin"))
    end = [_clamp_end(v) for v in ints(const(node, ins, 2, "end"))]
    specs: list[list[int | None]] = [[0, d, 1] for d in x.shape]
    out = list(x.shape)
    if len(ins) == 5:
        axes = ints(const(node, ins, 3, "axes"))
        steps = ints(const(node, ins, 4, "steps"))
        _same_lengths(node, begin=begin, end=end, axes=axes, steps=steps)
        for ax, b, e, s in zip(axes, begin, end, steps, strict=True):
            ax = axis_of(node, ax, ndim)
            specs[ax], out[ax] = _onnx_slice_spec(x.shape[ax], b, e, s)
        return _slice_lowered(x, specs, tuple(out))
    strides = ints(const(node, ins, 3, "strides")) if len(ins) > 3 else [1] * len(begin)
    _same_lengths(node, begin=begin, end=end, strides=strides)
    if len(begin) > ndim:
        raise InvalidModelError(f"{describe(node)}: {len(begin)} begin values for rank {ndim}")
    bm, em, sm = int(a.get("begin_mask", 0)), int(a.get("end_mask", 0)), int(a.get("shrink_axis_mask", 0))
    keep = []
    for ax in range(ndim):
        if ax >= len(begin):
            keep.append(out[ax])
            continue
        s = strides[ax]
        b = (0 if s > 0 else x.shape[ax] - 1) if bm >> ax & 1 else begin[ax]
        e = (x.shape[ax] if s > 0 else -(2**62)) if em >> ax & 1 else end[ax]
        if sm >> ax & 1:
            b = b % x.shape[ax]
            e, s = b + 1, 1
        specs[ax], out[ax] = _slice_spec(x.shape[ax], b, e, s)
        if not sm >> ax & 1:
            keep.append(out[ax])
    return _slice_lowered(x, specs, tuple(keep))


@define("Transpose", dtypes=DATA, const_inputs=(1,), kernels=("transpose",))
def transpose_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    ndim = len(x.shape)
    perm = ints(const(node, ins, 1, "perm")) if len(ins) > 1 else ints(node.attrs.get("perm", list(range(ndim))[::-1]))
    if sorted(perm) != list(range(ndim)):
        raise InvalidModelError(f"{describe(node)}: perm {perm} for rank {ndim}")
    return Lowered("transpose", {"perm": perm}, [0], [(tuple(x.shape[p] for p in perm), x.dtype)])


def _block(node: LiteNode, x: TensorInfo) -> int:
    block = int(node.attrs.get("block_size", 0))
    if node.attrs.get("format", "NCHW") != "NCHW" or len(x.shape) != 4 or block < 1:
        raise UnsupportedError(f"{describe(node)}: block_size {block}, format "
                               f"{node.attrs.get('format', 'NCHW')}, input rank {len(x.shape)} "
                               "(the NPU runs NCHW, rank 4)")
    return block


@define("SpaceToDepth", dtypes=DATA, kernels=("transpose",), note="NCHW")
def space_to_depth_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """(N, C, H, W) -> (N, C*b*b, H/b, W/b), channel (bh*b + bw)*C + c: a 6-D transpose."""
    x = ins[0]
    b = _block(node, x)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise InvalidModelError(f"{describe(node)}: {h}x{w} is not a multiple of block {b}")
    attrs = {"view": [n, c, h // b, b, w // b, b], "perm": [0, 3, 5, 1, 2, 4]}
    return Lowered("transpose", attrs, [0], [((n, c * b * b, h // b, w // b), x.dtype)])


@define("DepthToSpace", dtypes=DATA, check=enum_check("mode", ("DCR", "CRD"), "DCR"),
        kernels=("transpose",), note="NCHW; DCR or CRD")
def depth_to_space_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    b = _block(node, x)
    n, c, h, w = x.shape
    if c % (b * b):
        raise InvalidModelError(f"{describe(node)}: {c} channels for block {b}")
    if str(node.attrs.get("mode", "DCR")) == "DCR":
        attrs = {"view": [n, b, b, c // (b * b), h, w], "perm": [0, 3, 4, 1, 5, 2]}
    else:
        attrs = {"view": [n, c // (b * b), b, b, h, w], "perm": [0, 1, 4, 2, 5, 3]}
    return Lowered("transpose", attrs, [0], [((n, c // (b * b), h * b, w * b), x.dtype)])


_PAD_MODES = {"CONSTANT": "constant", "REFLECT": "reflect", "SYMMETRIC": "symmetric", "EDGE": "edge"}


@define("PadFusion", dtypes=DATA, check=enum_check("padding_mode", tuple(_PAD_MODES), "CONSTANT"),
        const_inputs=(1,), kernels=("pad",), note="CONSTANT/REFLECT/SYMMETRIC/EDGE")
def pad_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Paddings from input 1 ((ndim, 2) pairs, or ONNX's flat [begins..., ends...]) or the
    `paddings` attr; padding_mode CONSTANT / REFLECT / SYMMETRIC (and EDGE for ONNX edge)."""
    x = ins[0]
    ndim = len(x.shape)
    raw = const(node, ins, 1, "paddings") if len(ins) > 1 else np.asarray(node.attrs.get("paddings", []))
    raw = np.asarray(raw, dtype=np.int64)
    if raw.shape == (ndim, 2):
        pads = raw.tolist()
    elif raw.size == 2 * ndim:
        flat = raw.reshape(-1).tolist()
        pads = [[flat[i], flat[i + ndim]] for i in range(ndim)]
    else:
        raise InvalidModelError(f"{describe(node)}: paddings of shape {raw.shape} for rank {ndim}")
    if min(min(p) for p in pads) < 0:
        raise UnsupportedError(f"{describe(node)}: negative paddings {pads}")
    mode = _PAD_MODES[str(node.attrs.get("padding_mode", "CONSTANT"))]
    out = tuple(d + b + e for d, (b, e) in zip(x.shape, pads, strict=True))
    attrs = {"pads": pads, "mode": mode, "value": float(node.attrs.get("constant_value", 0.0))}
    return Lowered("pad", attrs, [0], [(out, x.dtype)])


@define("Gather", dtypes=DATA, const_inputs=(2,), kernels=("gather",),
        note="run-time indices int32/int64, checked per run")
def gather_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axis = int(const_scalar(node, ins, 2, "axis")) if len(ins) > 2 else int(node.attrs.get("axis", 0))
    axis = axis_of(node, axis, len(x.shape))
    dim = x.shape[axis]
    if ins[1].value is None:
        if ins[1].dtype.kind not in "iu":
            raise UnsupportedError(f"{describe(node)}: indices of dtype {ins[1].dtype}")
        out = (*x.shape[:axis], *ins[1].shape, *x.shape[axis + 1:])
        return Lowered("gather", {"axis": axis, "checked": False}, [0, 1], [(out, x.dtype)])
    idx = ins[1].value.astype(np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise InvalidModelError(f"{describe(node)}: indices outside [-{dim}, {dim})")
    idx = np.where(idx < 0, idx + dim, idx).astype(np.int64)
    out = (*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])
    return Lowered("gather", {"axis": axis}, [0, idx], [(out, x.dtype)])


@define("GatherNd", dtypes=DATA, kernels=("gather_nd",), note="batch_dims 0")
def gather_nd_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x, idx = ins[0], ins[1]
    if idx.dtype.kind not in "iu" or not idx.shape or not 1 <= idx.shape[-1] <= len(x.shape):
        raise InvalidModelError(f"{describe(node)}: indices {idx.dtype}{list(idx.shape)} for "
                                f"data of rank {len(x.shape)}")
    out = (*idx.shape[:-1], *x.shape[idx.shape[-1]:])
    return Lowered("gather_nd", {}, [0, 1], [(out, x.dtype)])


@define("BroadcastTo", dtypes=DATA, const_inputs=(1,), kernels=("broadcast",))
def broadcast_to_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Target shape from input 1 (ONNX Expand: bidirectional) or the `shape` attr."""
    x = ins[0]
    target = ints(const(node, ins, 1, "shape")) if len(ins) > 1 else ints(node.attrs.get("shape", []))
    out = broadcast(node, x.shape, tuple(target))
    return Lowered("broadcast", {}, [0], [(out, x.dtype)])


@define("TileFusion", dtypes=DATA, const_inputs=(1,), kernels=("tile",))
def tile_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    reps = ints(const(node, ins, 1, "multiples")) if len(ins) > 1 else ints(node.attrs.get("dims", []))
    if len(reps) != len(x.shape) or min(reps, default=1) < 0:
        raise InvalidModelError(f"{describe(node)}: multiples {reps} for shape {x.shape}")
    out = tuple(m * d for m, d in zip(reps, x.shape, strict=True))
    return Lowered("tile", {"multiples": reps}, [0], [(out, x.dtype)])


# ---- native lowerings --------------------------------------------------------------------


def _pieces(whole: Slot, pieces: Sequence[Slot], axis: int, whole_index: int,
            piece_indices: Sequence[int], b: StepBuilder) -> bool:
    """Concat's and split's C copy (layout.c `pieces`): the outer count and each piece's
    bytes per outer index; the pieces in slots 0..k-1, the whole tensor in the last."""
    if len(pieces) >= MAX_SLOTS or any(s.np_dtype != whole.np_dtype for s in pieces):
        return False
    b.params(math.prod(whole.shape[:axis]), len(pieces))
    b.params(*(math.prod(s.shape[axis:]) * s.np_dtype.itemsize for s in pieces))
    for position, index in enumerate(piece_indices):
        b.slot_at(position, index)
    b.slot_at(MAX_SLOTS - 1, whole_index)
    return True


@native("concat")
def _concat_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    return _pieces(outs[0], ins, attrs["axis"], b.outputs[0], b.inputs, b)


@native("split")
def _split_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Consecutive pieces along the axis, per outer index: concat's copy backwards."""
    return _pieces(ins[0], outs, attrs["axis"], b.inputs[0], b.outputs, b)


def _merged_transpose(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """The same transpose with size-1 axes dropped and input axes that stay adjacent merged:
    (input shape, perm) of at most as many axes."""
    keep = [a for a in perm if shape[a] != 1]
    groups: list[list[int]] = []
    for a in keep:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda i: groups[i][0])
    merged = [math.prod(shape[a] for a in groups[i]) for i in order]
    return merged, [order.index(i) for i in range(len(groups))]


@native("transpose")
def _transpose_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    x = ins[0]
    shape, perm = _merged_transpose(attrs.get("view", x.shape), attrs["perm"])
    walk = [math.prod(shape[a + 1:]) for a in range(len(shape))]
    return strided_copy(x, [shape[a] for a in perm], [walk[a] for a in perm], b, empty=True)


_PAD_CODES = {"constant": 0, "reflect": 1, "edge": 2, "symmetric": 3}  # layout.c's PAD_*


def _merged_pads(shape: Sequence[int], pads: Sequence[Sequence[int]], size: int
                 ) -> tuple[list[int], list[list[int]], int]:
    """The same pad on fewer axes: adjacent unpadded axes merged, trailing unpadded axes
    folded into the element; (shape, pads, element bytes)."""
    dims: list[int] = []
    merged: list[list[int]] = []
    for d, (b, e) in zip(shape, pads, strict=True):
        if dims and not (b or e) and not any(merged[-1]):
            dims[-1] *= d
        else:
            dims.append(d)
            merged.append([b, e])
    while len(dims) > 1 and not any(merged[-1]):
        size *= dims.pop()
        merged.pop()
    return dims, merged, size


@native("pad")
def _pad_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A pad as the C library's row copy (layout.c), the constant as the dtype's bytes."""
    x = ins[0]
    shape, pads, size = _merged_pads(x.shape or (1,), attrs["pads"] or [[0, 0]], x.np_dtype.itemsize)
    if len(shape) > 6 or (attrs["mode"] != "constant" and 0 in x.shape):
        return False  # numpy's kernel says why an empty axis cannot be mirrored
    if x.np_dtype.kind != "f" and not math.isfinite(attrs["value"]):
        return False  # no integer to stand for it: numpy's kernel decides
    value = np.zeros(8, np.uint8)
    value[:x.np_dtype.itemsize] = np.frombuffer(
        np.asarray(attrs["value"]).astype(x.np_dtype).tobytes(), np.uint8)
    b.params(len(shape), size, _PAD_CODES[attrs["mode"]], int(value.view("<i8")[0]),
             x.np_dtype.itemsize)
    b.p[6:6 + len(shape)] = shape
    b.p[12:12 + len(shape)] = [before for before, _ in pads]
    b.p[18:18 + len(shape)] = [d + before + after for d, (before, after) in zip(shape, pads, strict=True)]
    b.slots(b.inputs[0], b.outputs[0])
    return True


@native("gather")
def _gather_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Rows copied by index (layout.c), run-time indices checked in C with numpy's words."""
    x, idx, y = ins[0], ins[1], outs[0]
    axis = attrs["axis"]
    if idx.np_dtype not in INDEX_TYPES or not x.shape \
            or y.shape != (*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]):
        return False
    outer, length, inner = around(x.shape, axis)
    b.params(outer, length, inner * x.np_dtype.itemsize, math.prod(idx.shape),
             idx.np_dtype.itemsize, attrs.get("checked", True))
    b.slots(b.inputs[0], b.inputs[1], b.outputs[0])
    return True


@native("gather_nd")
def _gather_nd_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Index tuples into x's first axes (layout.c), checked in C with numpy's words."""
    x, idx, y = ins[0], ins[1], outs[0]
    if idx.np_dtype not in INDEX_TYPES or not idx.shape:
        return False
    k = idx.shape[-1]
    if not 1 <= k <= min(6, len(x.shape)) or y.shape != (*idx.shape[:-1], *x.shape[k:]):
        return False
    b.params(k, math.prod(x.shape[k:]) * x.np_dtype.itemsize, math.prod(idx.shape[:-1]),
             idx.np_dtype.itemsize, *x.shape[:k])
    b.slots(b.inputs[0], b.inputs[1], b.outputs[0])
    return True


@native("broadcast", op="transpose")
def _broadcast_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A broadcast as the C library's strided copy, stride 0 along the repeated axes."""
    x, y = ins[0], outs[0]
    return strided_copy(x, y.shape, broadcast_strides(x.shape, y.shape), b)


@native("tile", op="transpose")
def _tile_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """Tile as the strided copy of the numpy kernel's view: the output as (m0, d0, m1, d1,
    ...), x walked with stride 0 along each repeat (any dtype: bytes are copied)."""
    x = ins[0]
    inner = [math.prod(x.shape[a + 1:]) for a in range(len(x.shape))]
    view = [v for m, d in zip(attrs["multiples"], x.shape, strict=True) for v in (m, d)]
    return strided_copy(x, view, [v for step in inner for v in (0, step)], b)


def strided_copy(x: Slot, shape: Sequence[int], walk: Sequence[int], b: StepBuilder,
                 offset: int = 0, empty: bool = False) -> bool:
    """The C library's strided copy (layout.c `transpose`) of x into an output of `shape`
    (C order), reading x's elements `walk` apart per dim (0: the dim repeats x; negative:
    backwards) from byte `offset`: transposes, broadcasts, tiles, slices and reverses.
    False past its 6 merged dims, and for an empty output unless `empty`."""
    size = x.np_dtype.itemsize
    dims, (walk,) = merged(tuple(shape), list(walk))
    if len(dims) > 6 or (0 in shape and not empty):
        return False
    b.params(len(dims), dims[-1] * size if walk[-1] == 1 else 0)
    b.p[2:2 + len(dims)] = dims
    b.p[8:8 + len(dims)] = [w * size for w in walk]
    b.p[14] = offset
    b.p[15] = size
    b.slots(b.inputs[0], b.outputs[0])
    return True


@native("slice", op="transpose")
def _slice_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A slice (steps of any sign) as the C library's strided copy: the walk of its output
    over x, from the byte offset of its first element."""
    x = ins[0]
    contiguous = [math.prod(x.shape[a + 1:]) for a in range(len(x.shape))]
    offset, shape, walk = 0, [], []
    for a, (start, stop, step) in enumerate(attrs["slices"]):
        length = len(range(start, -1 if stop is None else stop, step))  # _slice_spec's
        offset += start * contiguous[a] if length else 0
        shape.append(length)
        walk.append(step * contiguous[a])
    return strided_copy(x, shape, walk, b, offset * x.np_dtype.itemsize)
