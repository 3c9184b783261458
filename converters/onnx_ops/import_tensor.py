"""ONNX -> Lite for shape and data-movement ops, constants and identities.

Long by design: one short importer per ONNX op of the family, registered in IMPORTERS.
"""

from __future__ import annotations

import numpy as np

from converters.errors import UnsupportedError
from converters.lite import dtypes
from converters.onnx_ops.import_base import (
    IMPORTERS,
    INT32_MAX,
    INT32_MIN,
    attr_or_input,
    const_input,
    emit,
    int32_operand,
    intermediate,
    present,
    single_output,
)
from converters.onnx_ops.registry import Unmappable

# StridedSlice in its ONNX form (x, starts, ends, axes, steps) sets none of TF's masks
_NO_MASKS = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0,
             "shrink_axis_mask": 0}


@IMPORTERS.register("Concat")
def concat(ctx, node):
    return [emit(ctx, node, "Concat", {"axis": node.attrs.get("axis", 1)}, node.inputs)]


@IMPORTERS.register("Split", since=2)
def split(ctx, node):
    sizes = attr_or_input(ctx, node, "split", 1, 13)
    axis = node.attrs.get("axis", 0)
    n = len(node.outputs)
    if sizes is None and "num_outputs" in node.attrs:
        # Opset 18 allows an uneven last chunk (chunks of ceil(dim / n), the last smaller):
        # stated as sizes where the dimension is known; Lite's output_num splits evenly
        dim = (ctx.shape(node.inputs[0]) or [None] * (abs(axis) + 1))[axis]
        if isinstance(dim, int) and dim % n:
            chunk = -(-dim // n)
            sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
            if sizes[-1] <= 0:  # onnxruntime 1.23 refuses an empty chunk, 1.32 makes one
                raise Unmappable(f"num_outputs={n} of a dimension of {dim} (a chunk would "
                                 "be empty)")
        elif not isinstance(dim, int):
            raise Unmappable("num_outputs split of a dimension not known to divide evenly")
    attrs = {"output_num": n, "size_splits": sizes or [], "axis": axis}
    return [emit(ctx, node, "Split", attrs, node.inputs[:1])]


@IMPORTERS.register("Slice", since=1)
def slice_v1(ctx, node):
    a = node.attrs
    starts, ends = a["starts"], a["ends"]
    axes = a.get("axes", list(range(len(starts))))
    return _strided_slice(ctx, node, starts, ends, axes, [1] * len(starts))


@IMPORTERS.register("Slice", since=10)
def slice_v10(ctx, node):
    """Constant operands become int32 constants; run-time ones (a shape chain the NPU folds
    per concrete shape) are passed as they are, axes and steps then defaulting by the
    operand's static length."""
    values = [ctx.const_value(present(node, i)) if present(node, i) else None for i in range(1, 5)]
    for i, what in ((3, "axes"), (4, "steps")):  # (given but computed: not the default)
        if present(node, i) and values[i - 1] is None:
            raise Unmappable(f"{what} ({node.inputs[i]!r}) is not a constant")
    _check_slice_operands(values)
    if all(v is not None for v in values[:2]):
        starts, ends, axes, steps = values
        n = len(starts)
        return _strided_slice(ctx, node, starts, ends,
                              list(range(n)) if axes is None else axes,
                              [1] * n if steps is None else steps)
    length = ctx.shape(node.inputs[1] if values[0] is None else node.inputs[2])
    if length is None or len(length) != 1 or not isinstance(length[0], int):
        raise Unmappable("starts/ends of unknown length")
    n = length[0]
    if any(v is not None and len(v) != n for v in values):
        raise Unmappable(f"constant operands of another length than the run-time ones' {n}")
    out = node.outputs[0]
    operands = [node.inputs[0]]
    for k, (what, default) in enumerate((("starts", None), ("ends", None),
                                         ("axes", list(range(n))), ("steps", [1] * n))):
        value = values[k] if values[k] is not None else default
        operands.append(node.inputs[k + 1] if value is None else ctx.const(f"{out}/{what}", _int32(value)))
    return [emit(ctx, node, "StridedSlice", _NO_MASKS, operands)]


def _check_slice_operands(values: list[np.ndarray | None]) -> None:
    """Constant starts, ends, axes and steps as ONNX (and onnxruntime) take them: 1-D, of one
    length; other forms (e.g. a 0-d steps beside 1-D starts) stay with onnxruntime, which
    refuses them at run time (a mutated .ms file's StridedSlice ran on the NPU where
    onnxruntime raised)."""
    given = [(what, v) for what, v in zip(("starts", "ends", "axes", "steps"), values,
                                          strict=True) if v is not None]
    for what, v in given:
        if v.ndim != 1:
            raise Unmappable(f"{what} of shape {list(v.shape)} (ONNX takes 1-D operands)")
    if len({len(v) for _, v in given}) > 1:
        raise Unmappable("operands of different lengths: " + ", ".join(
            f"{what} {len(v)}" for what, v in given))


def _strided_slice(ctx, node, starts, ends, axes, steps, source=None, target=None):
    """Lite StridedSlice in its ONNX form: inputs (x, starts, ends, axes, steps), no masks;
    x and the output are the node's unless `source` / `target` say otherwise."""
    out = node.outputs[0]
    inputs = [node.inputs[0] if source is None else source]
    inputs += [ctx.const(f"{out}/{what}", _int32(v))
               for what, v in (("starts", starts), ("ends", ends), ("axes", axes),
                               ("steps", steps))]
    return [emit(ctx, node, "StridedSlice", _NO_MASKS, inputs,
                 None if target is None else [target])]


def _int32(values) -> np.ndarray:
    """Index values as MindSpore Lite reads them (int32; INT64 extremes clamped)."""
    return np.clip(np.asarray(values, np.int64), INT32_MIN, INT32_MAX).astype(np.int32)


@IMPORTERS.register("Reshape", since=5)
def reshape(ctx, node):
    if node.attrs.get("allowzero", 0):
        # Lite's Reshape copies the input dim for a 0; allowzero=1 means an empty dim. They
        # agree when the target has no 0: a constant without one, or one built from dims
        # of tensors (Shape -> Gather/Slice -> Concat with constants without a 0).
        shape = ctx.const_value(node.inputs[1])
        if shape is not None and (np.asarray(shape) == 0).any():
            raise Unmappable("allowzero=1 with a 0 in the shape (an empty dim)")
        if shape is None and not _nonzero_dims(ctx, node.inputs[1]):
            raise Unmappable("allowzero=1 with a shape that may hold a 0")
    return [emit(ctx, node, "Reshape", {}, [node.inputs[0], int32_operand(ctx, node, 1, "shape")])]


_DIM_SOURCES = {"Shape", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Cast",
                "Identity"}


def _nonzero_dims(ctx, name: str, depth: int = 8) -> bool:
    """Whether value `name` is built only from tensor dims (Shape, then indexing and
    concatenation) and constants without a 0, as exporters build reshape targets: it holds
    a 0 only where a tensor is empty (no element to compute either way)."""
    value = ctx.const_value(name)
    if value is not None:
        return not (np.asarray(value) == 0).any()
    producer = ctx.producer(name)
    if producer is None or depth == 0 or producer.op_type not in _DIM_SOURCES:
        return False
    if producer.op_type == "Shape":
        return True
    data = producer.inputs[:1] if producer.op_type != "Concat" else producer.inputs
    return all(_nonzero_dims(ctx, i, depth - 1) for i in data if i)


@IMPORTERS.register("Flatten")
def flatten(ctx, node):
    return [emit(ctx, node, "Flatten", {"axis": node.attrs.get("axis", 1)}, node.inputs)]


@IMPORTERS.register("Squeeze")
def squeeze(ctx, node):
    axes = attr_or_input(ctx, node, "axes", 1, 13)
    return [emit(ctx, node, "Squeeze", {"axis": axes or []}, node.inputs[:1])]


@IMPORTERS.register("Unsqueeze")
def unsqueeze(ctx, node):
    axes = attr_or_input(ctx, node, "axes", 1, 13)
    return [emit(ctx, node, "Unsqueeze", {"axis": axes}, node.inputs[:1])]


@IMPORTERS.register("Transpose")
def transpose(ctx, node):
    perm = node.attrs.get("perm")
    if perm is None:
        rank = ctx.rank(node.inputs[0])
        if rank is None:
            raise Unmappable("default perm of an input of unknown rank")
        perm = list(range(rank))[::-1]
    perm_index = ctx.const(f"{node.outputs[0]}/perm", np.array(perm, np.int32))
    return [emit(ctx, node, "Transpose", {}, [node.inputs[0], perm_index])]


_PAD_MODES = {"constant": "CONSTANT", "reflect": "REFLECT"}


@IMPORTERS.register("Pad", since=2)
def pad(ctx, node):
    mode = node.attrs.get("mode", "constant")
    if mode not in _PAD_MODES and mode != "edge":
        raise Unmappable(f"mode={mode} has no Lite padding mode")
    if present(node, 3):
        raise Unmappable("axes input")
    if ctx.opset >= 11:
        pads = const_input(ctx, node, 1, "pads")
        value = const_input(ctx, node, 2, "constant_value")
    else:
        pads, value = node.attrs["pads"], node.attrs.get("value", 0.0)
    pads = np.asarray(pads, np.int64).reshape(-1)
    crop = np.maximum(-pads, 0)
    if crop.any() and mode != "constant":
        raise Unmappable(f"negative pads (cropping) with mode={mode}")
    if (np.abs(pads) > INT32_MAX).any():
        raise Unmappable("pads beyond int32")
    if mode == "edge":
        if pads.any():
            return _edge_pad(ctx, node, pads)
        mode = "constant"  # no pads: a copy in any mode
    value = 0.0 if value is None else float(np.asarray(value).reshape(-1)[0])
    out, nodes, padded = node.outputs[0], [], node.inputs[0]
    if (pads > 0).any() or not crop.any():
        padded = out if not crop.any() else intermediate(ctx, f"{out}/padded",
                                                         ctx.dtype(node.inputs[0]))
        paddings = np.maximum(pads, 0).reshape(2, -1).T.astype(np.int32)
        attrs = {"padding_mode": _PAD_MODES[mode], "constant_value": value}
        index = ctx.const(f"{out}/paddings", paddings)
        nodes.append(emit(ctx, node, "PadFusion", attrs, [node.inputs[0], index], [padded]))
    if crop.any():  # negative pads crop what the padding made (a crop may eat a pad)
        begin, end = crop.reshape(2, -1)
        axes = [d for d in range(len(begin)) if begin[d] or end[d]]
        nodes += _strided_slice(ctx, node, [begin[d] for d in axes],
                                [-end[d] if end[d] else INT32_MAX for d in axes], axes,
                                [1] * len(axes), padded, out)
    return nodes


EDGE_REPEATS = 64  # an edge pad wider than this stays on the CPU (a Concat per copied slice)


def _edge_pad(ctx, node, pads: np.ndarray) -> list:
    """mode=edge, which Lite's PadFusion has not: per padded axis, a Concat of the first
    slice `begin` times, the tensor, and the last slice `end` times."""
    rank = len(pads) // 2
    axes = [d for d in range(rank) if pads[d] or pads[d + rank]]
    if pads.max(initial=0) > EDGE_REPEATS:
        raise Unmappable(f"an edge pad wider than {EDGE_REPEATS}")
    out, dtype = node.outputs[0], ctx.dtype(node.inputs[0])
    nodes, current = [], node.inputs[0]
    for k, d in enumerate(axes):
        target = out if k == len(axes) - 1 else intermediate(ctx, f"{out}/edge{d}", dtype)
        operands: list[str | int] = [current]
        for count, (start, end), where in ((int(pads[d]), (0, 1), "first"),
                                           (int(pads[d + rank]), (-1, INT32_MAX), "last")):
            if not count:
                continue
            edge = intermediate(ctx, f"{out}/{where}{d}", dtype)
            nodes += _strided_slice(ctx, node, [start], [end], [d], [1], current, edge)
            operands = [edge] * count + operands if where == "first" else operands + [edge] * count
        nodes.append(emit(ctx, node, "Concat", {"axis": d}, operands, [target]))
        current = target
    return nodes


_COORD = {"asymmetric": "ASYMMETRIC", "align_corners": "ALIGN_CORNERS",
          "half_pixel": "HALF_PIXEL"}
_METHOD = {"nearest": "NEAREST", "linear": "LINEAR", "cubic": "CUBIC"}
_NEAREST = {"round_prefer_floor": "ROUND_HALF_DOWN", "round_prefer_ceil": "ROUND_HALF_UP",
            "floor": "FLOOR", "ceil": "CEIL"}


@IMPORTERS.register("Resize", since=11)
def resize(ctx, node):
    """pytorch_half_pixel (PyTorch's export of align_corners=False) is half_pixel but on an
    output axis of size 1, which it samples at 0: it maps where no such axis can appear."""
    a = node.attrs
    coord = a.get("coordinate_transformation_mode", "half_pixel")
    if coord not in _COORD and coord != "pytorch_half_pixel":
        raise Unmappable(f"coordinate_transformation_mode={coord}")
    if a.get("antialias", 0) or a.get("keep_aspect_ratio_policy", "stretch") != "stretch" \
            or "axes" in a:
        raise Unmappable("antialias / aspect-ratio policy / axes")
    new_hw, extra = _resize_output_hw(ctx, node)
    if coord == "pytorch_half_pixel":
        # with run-time whole-number scales an output axis of 1 is an input axis of 1 at
        # scale 1, where both modes sample 0; a static one must not shrink an axis to 1
        shape = ctx.shape(node.inputs[0])
        if not extra and any(size == 1 and shape[2 + i] != 1 for i, size in enumerate(new_hw)):
            raise Unmappable("coordinate_transformation_mode=pytorch_half_pixel to a size "
                             "of 1 (it samples 0, half_pixel the middle)")
        coord = "half_pixel"
    attrs = {"format": "NCHW", "method": _METHOD[a.get("mode", "nearest")],
             "new_height": new_hw[0], "new_width": new_hw[1],
             "preserve_aspect_ratio": False, "coordinate_transform_mode": _COORD[coord],
             "cubic_coeff": float(a.get("cubic_coeff_a", -0.75)),
             "exclude_outside": int(a.get("exclude_outside", 0)),
             "extrapolation_value": float(a.get("extrapolation_value", 0.0)),
             "nearest_mode": _NEAREST[a.get("nearest_mode", "round_prefer_floor")]}
    return [emit(ctx, node, "Resize", attrs, [node.inputs[0], *extra])]


def _resize_output_hw(ctx, node) -> tuple[tuple[int, int], list[int]]:
    """Output (H, W) of a 4-D resize that keeps N and C, and the extra input that gives it
    instead when H and W are only known at run time: whole-number scales as MindSpore Lite's
    second input, (H, W) float32 (output = scale * input exactly, as ONNX's floor gives it).
    Unmappable otherwise."""
    sizes = const_input(ctx, node, 3, "sizes")
    if sizes is not None and sizes.size:
        shape = ctx.shape(node.inputs[0])
        if sizes.size != 4 or shape is None or list(sizes[:2]) != list(shape[:2]):
            raise Unmappable("sizes change N or C, or the input is not 4-D")
        return (int(sizes[2]), int(sizes[3])), []
    scales = const_input(ctx, node, 2, "scales")
    shape = ctx.shape(node.inputs[0])
    if scales is None or scales.size != 4 or list(scales[:2]) != [1, 1] or shape is None:
        raise Unmappable("scales that do not keep N and C of a 4-D input")
    if not all(isinstance(d, int) for d in shape[2:]):
        if any(float(s) != int(s) or s < 1 for s in scales[2:]):
            raise Unmappable("fractional scales of a size known only at run time")
        hw = np.array(scales[2:], np.float32)  # a copy: scales may view onnxruntime memory
        return (0, 0), [ctx.const(f"{node.outputs[0]}/scales", hw)]
    hw = [float(s) * d for s, d in zip(scales[2:], shape[2:], strict=True)]
    if any(v != int(v) for v in hw):
        raise Unmappable("scales giving a fractional output size")
    return (int(hw[0]), int(hw[1])), []


@IMPORTERS.register("Range", since=11)
def range_(ctx, node):
    """Lite Range takes (start, limit, delta) as inputs; d_type is the output's TypeId."""
    dtype = ctx.dtype(node.inputs[0])
    attrs = {"d_type": dtypes.from_numpy(dtype) if dtype is not None else 0}
    return [emit(ctx, node, "Range", attrs, node.inputs[:3])]


@IMPORTERS.register("CumSum", since=11)
def cum_sum(ctx, node):
    """Lite CumSum takes the axis as an int32 input; exclusive and reverse as flags."""
    attrs = {"exclusive": bool(node.attrs.get("exclusive", 0)),
             "reverse": bool(node.attrs.get("reverse", 0))}
    return [emit(ctx, node, "CumSum", attrs, [node.inputs[0], int32_operand(ctx, node, 1, "axis")])]


@IMPORTERS.register("Trilu", since=14)
def trilu(ctx, node):
    """Lite's Triu / Tril take k as a second input (int32, as MindSpore Lite reads it); an
    absent k is 0."""
    op = "Triu" if node.attrs.get("upper", 1) else "Tril"
    if present(node, 1):
        k = int32_operand(ctx, node, 1, "k")
    else:
        k = ctx.const(f"{node.outputs[0]}/k", np.array(0, np.int32))
    return [emit(ctx, node, op, {}, [node.inputs[0], k])]


@IMPORTERS.register("Size")
def size(ctx, node):
    return [emit(ctx, node, "Size", {}, node.inputs[:1])]


@IMPORTERS.register("GatherND", since=11)
def gather_nd(ctx, node):
    if node.attrs.get("batch_dims", 0):
        raise Unmappable("batch_dims other than 0")
    return [emit(ctx, node, "GatherNd", {}, node.inputs[:2])]


@IMPORTERS.register("ScatterND", since=11)
def scatter_nd(ctx, node):
    """ScatterND without a reduction is Lite's ScatterNdUpdate (data, indices, updates)."""
    if node.attrs.get("reduction", "none") != "none":
        raise Unmappable(f"reduction={node.attrs['reduction']}")
    return [emit(ctx, node, "ScatterNdUpdate", {}, node.inputs[:3])]


@IMPORTERS.register("Gather")
def gather(ctx, node):
    axis = ctx.const(f"{node.outputs[0]}/axis", np.array([node.attrs.get("axis", 0)], np.int32))
    return [emit(ctx, node, "Gather", {}, [node.inputs[0], node.inputs[1], axis])]


@IMPORTERS.register("Shape")
def shape(ctx, node):
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    if start == 0 and end is None:
        return [emit(ctx, node, "Shape", {}, node.inputs)]
    # opset 15's start/end: the whole shape, then a slice of it (clamped as ONNX clamps)
    out = node.outputs[0]
    whole = intermediate(ctx, f"{out}/whole", np.dtype(np.int64))
    bounds = [ctx.const(f"{out}/{what}", np.array([v], np.int32)) for what, v in
              (("starts", _int32(start)[()]), ("ends", INT32_MAX if end is None else _int32(end)[()]),
               ("axes", 0), ("steps", 1))]
    return [emit(ctx, node, "Shape", {}, node.inputs, [whole]),
            emit(ctx, node, "StridedSlice", _NO_MASKS, [whole, *bounds])]


@IMPORTERS.register("Expand", since=8)
def expand(ctx, node):
    return [emit(ctx, node, "BroadcastTo", {}, [node.inputs[0], int32_operand(ctx, node, 1, "shape")])]


@IMPORTERS.register("Tile", since=6)
def tile(ctx, node):
    # MindSpore Lite needs `dims` (the axes `repeats` applies to): all of them, for ONNX.
    repeats = ctx.shape(node.inputs[1])
    if repeats is None or len(repeats) != 1 or not isinstance(repeats[0], int):
        raise Unmappable("repeats of unknown length")
    multiples = int32_operand(ctx, node, 1, "multiples")
    return [emit(ctx, node, "TileFusion", {"dims": list(range(repeats[0]))},
                 [node.inputs[0], multiples])]


@IMPORTERS.register("TopK")
def top_k(ctx, node):
    a = node.attrs
    if ctx.opset < 10:
        k = ctx.const(f"{node.outputs[0]}/k", np.array([a["k"]], np.int32))
    else:
        k = int32_operand(ctx, node, 1, "k")
    attrs = {"sorted": bool(a.get("sorted", 1)), "axis": a.get("axis", -1),
             "largest": a.get("largest", 1)}
    return [emit(ctx, node, "TopKFusion", attrs, [node.inputs[0], k])]


def _aliasable(ctx, name: str) -> bool:
    """Whether value `name` may vanish into its source (no graph output or subgraph reads it
    by name)."""
    return name not in ctx.graph_outputs and name not in ctx.read_by_subgraphs


def copy_of(ctx, node, refusal: str) -> list:
    """Input 0 copied to output 0 (a Cast to its own type is Lite's copy); Unmappable with
    `refusal` for a non-numeric or unknown type."""
    dtype = ctx.dtype(node.inputs[0])
    if dtype is None or dtype.kind not in "biuf":
        raise Unmappable(refusal)
    to = ctx.const(f"{node.outputs[0]}/to", np.array([dtypes.from_numpy(dtype)], np.int32))
    return [emit(ctx, node, "Cast", {}, [node.inputs[0], to])]


@IMPORTERS.register("Identity")
def identity(ctx, node):
    # Lite has no identity primitive: alias the value, unless its name must survive.
    if not _aliasable(ctx, node.outputs[0]):
        return copy_of(ctx, node, "Identity of a non-numeric (or unknown) type producing a "
                       "graph output (or a subgraph's outer value), whose name must survive")
    ctx.alias(node.outputs[0], node.inputs[0])
    return []


@IMPORTERS.register("Dropout")
def dropout(ctx, node):
    single_output(ctx, node)
    ratio = node.attrs.get("ratio", 0.5)
    if ctx.opset >= 12:
        value = const_input(ctx, node, 1, "ratio")
        ratio = 0.5 if value is None else float(value)
        training = const_input(ctx, node, 2, "training_mode")
        if training is not None and bool(training):
            raise Unmappable("training_mode=true")
    if _aliasable(ctx, node.outputs[0]):
        # An inference no-op, and MindSpore Lite's runtime has no Dropout kernel (its own
        # converter removes them too).
        ctx.alias(node.outputs[0], node.inputs[0])
        return []
    return [emit(ctx, node, "Dropout", {"keep_prob": 1.0 - ratio}, node.inputs[:1],
                 node.outputs[:1])]


@IMPORTERS.register("DepthToSpace")
def depth_to_space(ctx, node):
    attrs = {"block_size": node.attrs["blocksize"], "format": "NCHW",
             "mode": node.attrs.get("mode", "DCR")}
    return [emit(ctx, node, "DepthToSpace", attrs, node.inputs)]


@IMPORTERS.register("SpaceToDepth")
def space_to_depth(ctx, node):
    if node.attrs.get("mode", "DCR") != "DCR":
        raise Unmappable("SpaceToDepth other than DCR order")
    attrs = {"block_size": node.attrs["blocksize"], "format": "NCHW"}
    return [emit(ctx, node, "SpaceToDepth", attrs, node.inputs)]


@IMPORTERS.register("GatherElements", since=11)
def gather_elements(ctx, node):
    # Lite's GatherD takes (input, dim, index).
    dim = ctx.const(f"{node.outputs[0]}/dim", np.array([node.attrs.get("axis", 0)], np.int32))
    return [emit(ctx, node, "GatherD", {}, [node.inputs[0], dim, node.inputs[1]])]


@IMPORTERS.register("ScatterElements", since=11)
def scatter_elements(ctx, node):
    """ScatterElements without a reduction is Lite's ScatterElements (data, indices,
    updates; the axis an attribute)."""
    if node.attrs.get("reduction", "none") != "none":
        raise Unmappable(f"reduction={node.attrs['reduction']}")
    return [emit(ctx, node, "ScatterElements", {"axis": int(node.attrs.get("axis", 0))},
                 node.inputs[:3])]


_VALUE_ATTRS = {"value_float": np.float32, "value_floats": np.float32,
                "value_int": np.int64, "value_ints": np.int64}


@IMPORTERS.register("Constant")
def constant(ctx, node):
    if node.outputs[0] in ctx.graph_outputs:
        raise Unmappable("Constant producing a graph output")
    (name, value), = node.attrs.items()
    if name in _VALUE_ATTRS:
        value = np.array(value, _VALUE_ATTRS[name])
    elif name != "value":
        raise Unmappable(f"{name} constants")
    _check_typeid(value.dtype)
    ctx.add_initializer(node.outputs[0], value)
    return []


@IMPORTERS.register("ConstantOfShape", since=9)
def constant_of_shape(ctx, node):
    value = node.attrs.get("value", np.zeros(1, np.float32))
    type_id = _check_typeid(value.dtype)
    as_float = np.float32(value.reshape(-1)[0])
    if as_float.astype(value.dtype) != value.reshape(-1)[0]:
        raise Unmappable("value not exactly representable as float32")
    attrs = {"data_type": type_id, "value": [float(as_float)]}
    return [emit(ctx, node, "ConstantOfShape", attrs, node.inputs)]


def _check_typeid(dtype) -> int:
    try:
        return dtypes.from_numpy(dtype)
    except (UnsupportedError, TypeError):
        raise Unmappable(f"dtype {dtype} has no MindSpore TypeId") from None


