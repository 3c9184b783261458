"""Lite -> ONNX for shape and data-movement ops and constants."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from converters.errors import InvalidModelError
from converters.lite import dtypes
from converters.onnx_ops.export_base import EXPORTERS, unsupported


@EXPORTERS.register("Concat")
def concat(ctx, node, ins, outs):
    ctx.add("Concat", ins, outs, name=node.name, axis=node.attrs.get("axis", 0))


@EXPORTERS.register("Split")
def split(ctx, node, ins, outs):
    a = node.attrs
    sizes = list(a.get("size_splits", []))
    if not sizes and len(ins) > 1:  # MindSpore's converter passes the sizes as an input
        sizes = ctx.const_ints(node.inputs[1], "split sizes", node)
    axis = a.get("axis", 0)
    if not sizes:
        extra = {"num_outputs": len(outs)} if ctx.opset >= 18 else {}
        ctx.add("Split", ins[:1], outs, name=node.name, axis=axis, **extra)
    elif ctx.opset >= 13:
        s = ctx.const(np.array(sizes, np.int64), f"{node.name}/split")
        ctx.add("Split", [ins[0], s], outs, name=node.name, axis=axis)
    else:
        ctx.add("Split", ins[:1], outs, name=node.name, axis=axis, split=sizes)


@EXPORTERS.register("StridedSlice")
def strided_slice(ctx, node, ins, outs):
    a = node.attrs
    if any(a.get(m, 0) for m in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                 "shrink_axis_mask")):
        raise unsupported(node, "a strided slice with masks")
    if len(ins) == 5:  # ONNX form: starts, ends, axes, steps
        parts = ins[1:]
        indices = node.inputs[1:]
    else:  # TF form: begin, end[, strides] over the leading axes
        n = len(ctx.const_ints(node.inputs[1], "begin", node))
        parts = [ins[1], ins[2], ctx.const(np.arange(n, dtype=np.int64), f"{node.name}/axes")]
        indices = [node.inputs[1], node.inputs[2], None]
        if len(ins) > 3:
            parts.append(ins[3])
            indices.append(node.inputs[3])
    if ctx.opset < 10:
        names = ("starts", "ends", "axes")
        attrs = {k: (ctx.const_ints(i, k, node) if i is not None
                     else list(range(len(ctx.const_ints(indices[0], "starts", node)))))
                 for k, i in zip(names, indices[:3], strict=True)}
        if len(indices) > 3 and any(s != 1 for s in ctx.const_ints(indices[3], "steps", node)):
            raise unsupported(node, "a stepped slice before opset 10")
        ctx.add("Slice", ins[:1], outs, name=node.name, **attrs)
        return
    typed = [ctx.int64(i, f"{node.name}/{k}") if i is not None else p
             for k, i, p in zip(("starts", "ends", "axes", "steps"), indices, parts, strict=False)]
    ctx.add("Slice", [ins[0], *typed], outs, name=node.name)


@EXPORTERS.register("Reshape")
def reshape(ctx, node, ins, outs):
    if len(ins) < 2:
        raise unsupported(node, "a reshape without a shape input")
    ctx.add("Reshape", [ins[0], ctx.int64(node.inputs[1], f"{node.name}/shape")], outs,
            name=node.name)


@EXPORTERS.register("Flatten")
def flatten(ctx, node, ins, outs):
    ctx.add("Flatten", ins[:1], outs, name=node.name, axis=node.attrs.get("axis", 1))


def _axes_op(ctx, node, ins, outs, op: str, axes: list[int]):
    if not axes:
        ctx.add(op, ins[:1], outs, name=node.name)
    elif ctx.opset >= 13:
        a = ctx.const(np.array(axes, np.int64), f"{node.name}/axes")
        ctx.add(op, [ins[0], a], outs, name=node.name)
    else:
        ctx.add(op, ins[:1], outs, name=node.name, axes=axes)


@EXPORTERS.register("Squeeze")
def squeeze(ctx, node, ins, outs):
    _axes_op(ctx, node, ins, outs, "Squeeze", list(node.attrs.get("axis", [])))


@EXPORTERS.register("Unsqueeze")
def unsqueeze(ctx, node, ins, outs):
    axes = list(node.attrs.get("axis", []))
    if not axes:
        raise unsupported(node, "an unsqueeze without axes")
    _axes_op(ctx, node, ins, outs, "Unsqueeze", axes)


@EXPORTERS.register("ExpandDims")
def expand_dims(ctx, node, ins, outs):
    _axes_op(ctx, node, ins, outs, "Unsqueeze", ctx.const_ints(node.inputs[1], "axis", node))


@EXPORTERS.register("Transpose")
def transpose(ctx, node, ins, outs):
    perm = ctx.const_ints(node.inputs[1], "perm", node)
    ctx.add("Transpose", ins[:1], outs, name=node.name, perm=perm)


_PAD_MODES = {"CONSTANT": "constant", "REFLECT": "reflect"}


def _check_padded_sizes(ctx, node, pairs: np.ndarray) -> None:
    """InvalidModelError when negative paddings (a crop) leave an axis of known size with
    fewer than 0 elements: onnxruntime aborts the process on such a Pad's consumers."""
    shape = ctx.model.tensors[node.inputs[0]].shape
    if len(shape) != len(pairs):
        return
    for axis, (size, (begin, end)) in enumerate(zip(shape, pairs.tolist(), strict=True)):
        if isinstance(size, int) and size >= 0 and size + begin + end < 0:
            raise InvalidModelError(
                f"node {node.name!r} ({node.op}): paddings {begin}, {end} of axis {axis} "
                f"(size {size}) leave {size + begin + end} elements")


@EXPORTERS.register("PadFusion")
def pad(ctx, node, ins, outs):
    a = node.attrs
    mode = a.get("padding_mode", "CONSTANT")
    if mode not in _PAD_MODES:
        raise unsupported(node, f"padding mode {mode}")
    paddings = (ctx.const_ints(node.inputs[1], "paddings", node) if len(ins) > 1
                else [v for row in a.get("paddings", []) for v in row])
    pairs = np.array(paddings, np.int64).reshape(-1, 2)
    _check_padded_sizes(ctx, node, pairs)
    pads = np.concatenate([pairs[:, 0], pairs[:, 1]])
    value = float(a.get("constant_value", 0.0))
    if ctx.opset < 11:
        ctx.add("Pad", ins[:1], outs, name=node.name, mode=_PAD_MODES[mode],
                pads=pads.tolist(), value=value)
        return
    inputs = [ins[0], ctx.const(pads, f"{node.name}/pads")]
    if mode == "CONSTANT" and value != 0.0:
        inputs.append(ctx.const(np.array(value, ctx.np_dtype(node.inputs[0])),
                                f"{node.name}/value"))
    ctx.add("Pad", inputs, outs, name=node.name, mode=_PAD_MODES[mode])


_COORD = {"ASYMMETRIC": "asymmetric", "ALIGN_CORNERS": "align_corners",
          "HALF_PIXEL": "half_pixel"}
_METHOD = {"NEAREST": "nearest", "LINEAR": "linear", "CUBIC": "cubic"}
_NEAREST = {"NORMAL": "round_prefer_floor", "ROUND_HALF_DOWN": "round_prefer_floor",
            "ROUND_HALF_UP": "round_prefer_ceil", "FLOOR": "floor", "CEIL": "ceil"}


@EXPORTERS.register("Resize")
def resize(ctx, node, ins, outs):
    a = node.attrs
    if ctx.opset < 11:
        raise unsupported(node, "Resize before opset 11")
    shape = ctx.add("Shape", ins[:1], name=f"{node.name}/shape")
    nc = ctx.add("Slice", [shape, ctx.const(np.array([0], np.int64), f"{node.name}/zero"),
                           ctx.const(np.array([2], np.int64), f"{node.name}/two")])
    sizes = ctx.add("Concat", [nc, _resize_hw(ctx, node, ins, shape)], axis=0)
    empty = ctx.const(np.zeros(0, np.float32), f"{node.name}/empty")
    attrs = {"mode": _METHOD[a.get("method", "LINEAR")],
             "coordinate_transformation_mode": _COORD[a.get("coordinate_transform_mode",
                                                            "ASYMMETRIC")]}
    if attrs["mode"] == "nearest":
        attrs["nearest_mode"] = _NEAREST[a.get("nearest_mode", "NORMAL")]
    if attrs["mode"] == "cubic":
        attrs["cubic_coeff_a"] = float(a.get("cubic_coeff", -0.75))
        attrs["exclude_outside"] = int(a.get("exclude_outside", 0))
    if a.get("extrapolation_value", 0.0):
        attrs["extrapolation_value"] = float(a["extrapolation_value"])
    ctx.add("Resize", [ins[0], empty, empty, sizes], outs, name=node.name, **attrs)


def _resize_hw(ctx, node, ins, shape: str) -> str:
    """The output (height, width) as an int64 ONNX value, as MindSpore Lite's Resize infers
    it: from the attributes, or from a second input of 2 (H, W) or 4 (NHWC) values that are
    sizes when int32 and scales when float (output = round(scale * input), half away from 0).
    """
    if len(ins) == 1:
        h, w = node.attrs.get("new_height", 0), node.attrs.get("new_width", 0)
        if h <= 0 or w <= 0:
            raise unsupported(node, "a one-input resize without new_height/new_width")
        return ctx.const(np.array([h, w], np.int64), f"{node.name}/hw")
    data = ctx.value(node.inputs[1])
    count = data.size if data is not None else int(np.prod(ctx.shape(node.inputs[1])))
    if count not in (2, 4):
        raise unsupported(node, f"a resize size/scale input of {count} values")
    where = ctx.const(np.array([0, 1] if count == 2 else [1, 2], np.int64), f"{node.name}/hw_at")
    picked = ctx.add("Gather", [ins[1], where], name=f"{node.name}/hw_pick")
    dtype = ctx.np_dtype(node.inputs[1])
    if np.issubdtype(dtype, np.integer):
        return ctx.add("Cast", [picked], to=TensorProto.INT64, name=f"{node.name}/hw")
    if dtype != np.float32:
        picked = ctx.add("Cast", [picked], to=TensorProto.FLOAT, name=f"{node.name}/scale")
    in_hw = ctx.add("Slice", [shape, ctx.const(np.array([2], np.int64), f"{node.name}/h_at"),
                              ctx.const(np.array([4], np.int64), f"{node.name}/w_end")])
    scaled = ctx.add("Mul", [ctx.add("Cast", [in_hw], to=TensorProto.FLOAT), picked])
    half = ctx.const(np.array(0.5, np.float32), f"{node.name}/half")
    rounded = ctx.add("Floor", [ctx.add("Add", [scaled, half])])
    return ctx.add("Cast", [rounded], to=TensorProto.INT64, name=f"{node.name}/hw")


@EXPORTERS.register("Gather")
def gather(ctx, node, ins, outs):
    axis = ctx.const_ints(node.inputs[2], "axis", node)[0] if len(ins) > 2 else 0
    ctx.add("Gather", ins[:2], outs, name=node.name, axis=axis)


@EXPORTERS.register("Shape")
def shape(ctx, node, ins, outs):
    out_type = ctx.model.tensors[node.outputs[0]].type_id
    if out_type in (dtypes.INT64, dtypes.UNKNOWN):
        ctx.add("Shape", ins, outs, name=node.name)
        return
    dims = ctx.add("Shape", ins, name=node.name)
    elem = helper.np_dtype_to_tensor_dtype(dtypes.to_numpy(out_type))
    ctx.add("Cast", [dims], outs, name=f"{node.name}/cast", to=elem)


@EXPORTERS.register("BroadcastTo")
def broadcast_to(ctx, node, ins, outs):
    if len(ins) > 1:
        target = ctx.int64(node.inputs[1], f"{node.name}/shape")
    else:
        target = ctx.const(np.array(node.attrs["shape"], np.int64), f"{node.name}/shape")
    ctx.add("Expand", [ins[0], target], outs, name=node.name)


@EXPORTERS.register("TileFusion")
def tile(ctx, node, ins, outs):
    dims = list(node.attrs.get("dims", []))
    rank = ctx.rank(node.inputs[0])
    if dims and dims != list(range(rank or 0)):
        raise unsupported(node, "a tile over a subset of the axes")
    ctx.add("Tile", [ins[0], ctx.int64(node.inputs[1], f"{node.name}/repeats")], outs,
            name=node.name)


@EXPORTERS.register("TopKFusion")
def top_k(ctx, node, ins, outs):
    a = node.attrs
    attrs = {"axis": a.get("axis", -1)}
    if ctx.opset < 10:
        if not a.get("largest", 1) or not a.get("sorted", True):
            raise unsupported(node, "smallest / unsorted top-k before opset 11")
        ctx.add("TopK", ins[:1], outs, name=node.name, k=ctx.const_ints(node.inputs[1], "k", node)[0],
                **attrs)
        return
    k = ctx.int64(node.inputs[1], f"{node.name}/k")
    if ctx.rank(node.inputs[1]) == 0:
        k = ctx.add("Reshape", [k, ctx.const(np.array([1], np.int64), f"{node.name}/one")])
    if ctx.opset >= 11:
        attrs.update(largest=int(a.get("largest", 1)), sorted=int(a.get("sorted", True)))
    index_type = ctx.model.tensors[node.outputs[1]].type_id if len(outs) > 1 else dtypes.INT64
    if index_type in (dtypes.INT64, dtypes.UNKNOWN):
        ctx.add("TopK", [ins[0], k], outs, name=node.name, **attrs)
        return
    # MindSpore Lite's indices are int32; ONNX's are int64.
    values, indices = outs[0], ctx.fresh(f"{outs[1]}/int64")
    ctx.add("TopK", [ins[0], k], [values, indices], name=node.name, **attrs)
    elem = helper.np_dtype_to_tensor_dtype(dtypes.to_numpy(index_type))
    ctx.add("Cast", [indices], [outs[1]], name=f"{node.name}/cast", to=elem)


@EXPORTERS.register("Dropout")
def dropout(ctx, node, ins, outs):
    ratio = 1.0 - float(node.attrs.get("keep_prob", 0.5))
    if ctx.opset >= 12:
        r = ctx.const(np.array(ratio, np.float32), f"{node.name}/ratio")
        ctx.add("Dropout", [ins[0], r], outs[:1], name=node.name)
    else:
        ctx.add("Dropout", ins[:1], outs[:1], name=node.name, ratio=ratio)


@EXPORTERS.register("ConstantOfShape")
def constant_of_shape(ctx, node, ins, outs):
    a = node.attrs
    dtype = dtypes.to_numpy(a.get("data_type", dtypes.FLOAT32) or dtypes.FLOAT32)
    values = list(a.get("value", [0.0])) or [0.0]
    value = numpy_helper.from_array(np.array(values[:1], dtype))
    ctx.add("ConstantOfShape", [ctx.int64(node.inputs[0], f"{node.name}/shape")], outs,
            name=node.name, value=value)


@EXPORTERS.register("Stack")
def stack(ctx, node, ins, outs):
    axis = node.attrs.get("axis", 0)
    axes = ctx.const(np.array([axis], np.int64), f"{node.name}/axis") if ctx.opset >= 13 else None
    parts = [ctx.add("Unsqueeze", [name, axes] if axes else [name], name=f"{node.name}/{i}",
                     axes=None if axes else [axis])
             for i, name in enumerate(ins)]
    ctx.add("Concat", parts, outs, name=node.name, axis=axis)


@EXPORTERS.register("DepthToSpace")
def depth_to_space(ctx, node, ins, outs):
    mode = node.attrs.get("mode", "") or "DCR"
    ctx.add("DepthToSpace", ins[:1], outs, name=node.name,
            blocksize=node.attrs["block_size"], mode=mode if ctx.opset >= 11 else None)


@EXPORTERS.register("SpaceToDepth")
def space_to_depth(ctx, node, ins, outs):
    ctx.add("SpaceToDepth", ins[:1], outs, name=node.name, blocksize=node.attrs["block_size"])


@EXPORTERS.register("ScatterElements")
def scatter_elements(ctx, node, ins, outs):
    """x with x[... index[i] ...] = updates[i] along the axis (inputs: x, indices, updates)."""
    ctx.add("ScatterElements", ins[:3], outs, name=node.name, axis=int(node.attrs.get("axis", 0)))


@EXPORTERS.register("GatherD")
def gather_d(ctx, node, ins, outs):
    axis = ctx.const_ints(node.inputs[1], "dim", node)[0]
    ctx.add("GatherElements", [ins[0], ins[2]], outs, name=node.name, axis=axis)
