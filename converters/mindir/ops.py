"""MindSpore primitive -> MindSpore Lite primitive: one small function per primitive.

Each converter reads its arguments with `Builder.arg` (constant input in 2.x files, attribute
in 1.x files) and returns the value the node produces. Lite attribute names and enum members
are spelled as ops.fbs spells them; layouts stay NCHW, as MindSpore 2.x exports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from converters.errors import InvalidModelError, UnsupportedError
from converters.mindir.builder import Builder, TupleValue
from converters.mindir.graph import MsNode

Converter = Callable[[Builder, MsNode], Any]
OPS: dict[str, Converter] = {}


def register(*prims: str) -> Callable[[Converter], Converter]:
    """Register a converter for MindSpore primitives; a second registration is a bug."""

    def deco(fn: Converter) -> Converter:
        for prim in prims:
            if prim in OPS:
                raise RuntimeError(f"MindSpore primitive {prim!r} registered twice")
            OPS[prim] = fn
        return fn

    return deco


# -- argument normalisation ---------------------------------------------------------------
_PAD_MODES = {"pad": "PAD", "same": "SAME", "valid": "VALID", 0: "PAD", 1: "SAME", 2: "VALID"}
_FORMATS = {"NCHW": "NCHW", "NHWC": "NHWC", 0: "NCHW", 1: "NHWC"}


def _ints(v: Any) -> list[int]:
    if isinstance(v, np.ndarray):
        return [int(x) for x in v.reshape(-1)]
    if isinstance(v, (tuple, list)):
        return [int(x) for x in v]
    return [int(v)]


def _hw(node: MsNode, name: str, v: Any) -> list[int]:
    """(h, w) from an int, an (h, w) pair or MindSpore's (1, 1, h, w)."""
    vals = _ints(v)
    if len(vals) == 1:
        return vals * 2
    if len(vals) in (2, 4):
        return vals[-2:]
    raise InvalidModelError(f"node {node.name!r} ({node.prim}): {name} {vals} is not 1, 2 or 4 values")


def _pad_mode(node: MsNode, v: Any) -> str:
    key = v.lower() if isinstance(v, str) else v
    if key not in _PAD_MODES:
        raise InvalidModelError(f"node {node.name!r} ({node.prim}): pad_mode {v!r} is not one of pad/same/valid")
    return _PAD_MODES[key]


def _nchw(node: MsNode, v: Any) -> str:
    fmt = _FORMATS.get(v.upper() if isinstance(v, str) else v)
    if fmt != "NCHW":
        raise UnsupportedError(f"node {node.name!r} ({node.prim}): data format {v!r}; only NCHW is supported")
    return fmt


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 and rank > 0 else axis


# -- convolution, pooling, normalisation ----------------------------------------------------
@register("Conv2D")
def conv2d(b: Builder, n: MsNode) -> Any:
    x, w = b.input(n, 0), b.input(n, 1)
    group = int(b.arg(n, None, ("group", "groups"), 1))
    wshape = b.shape_of(w)
    if len(wshape) != 4:
        raise InvalidModelError(f"node {n.name!r} (Conv2D): weight has shape {wshape}, expected 4-D OIHW")
    pad_list = b.arg(n, None, ("pad_list", "pad"), (0, 0, 0, 0))
    pads = _ints(pad_list) * (4 if len(_ints(pad_list)) == 1 else 1)
    attrs = {
        "format": _nchw(n, b.arg(n, None, ("format", "data_format"), "NCHW")),
        "kernel_size": _hw(n, "kernel_size", b.arg(n, None, "kernel_size", wshape[2:])),
        "stride": _hw(n, "stride", b.arg(n, None, ("stride", "strides"), 1)),
        "dilation": _hw(n, "dilation", b.arg(n, None, ("dilation", "dilations"), 1)),
        "pad_mode": _pad_mode(n, b.arg(n, None, "pad_mode", "valid")),
        "pad_list": pads,
        "group": group,
        "in_channel": int(wshape[1]) * group,
        "out_channel": int(b.arg(n, None, "out_channel", wshape[0])),
        "activation_type": "NO_ACTIVATION",
    }
    return b.emit(n, "Conv2DFusion", attrs, [x, w])[0]


def _pool(op: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        attrs = {
            "kernel_size": _hw(n, "kernel_size", b.arg(n, 1, ("kernel_size", "ksize"), 1)),
            "strides": _hw(n, "strides", b.arg(n, 2, ("strides", "stride"), 1)),
            "pad": [0, 0, 0, 0],
            "pad_mode": _pad_mode(n, b.arg(n, 3, "pad_mode", "valid")),
            "round_mode": "FLOOR",
            "format": _nchw(n, b.arg(n, 4, ("format", "data_format"), "NCHW")),
            "global": False,
            "activation_type": "NO_ACTIVATION",
        }
        return b.emit(n, op, attrs, [b.input(n, 0)])[0]

    return convert


register("MaxPool")(_pool("MaxPoolFusion"))
register("AvgPool")(_pool("AvgPoolFusion"))


@register("BatchNorm")
def batch_norm(b: Builder, n: MsNode) -> Any:
    if b.arg(n, 5, "is_training", False):
        raise UnsupportedError(f"node {n.name!r} (BatchNorm): training mode; export the net with set_train(False)")
    _nchw(n, b.arg(n, 8, ("data_format", "format"), "NCHW"))
    attrs = {
        "epsilon": float(b.arg(n, 6, "epsilon", 1e-5)),
        "momentum": float(b.arg(n, 7, "momentum", 0.1)),
        "mode": 0,
    }
    y = b.emit(n, "FusedBatchNorm", attrs, [b.input(n, i) for i in range(5)])[0]
    return TupleValue((y,), 5, n.name)  # batch statistics are training outputs


@register("LayerNorm")
def layer_norm(b: Builder, n: MsNode) -> Any:
    x = b.input(n, 0)
    rank = len(b.shape_of(x))
    attrs = {
        "begin_norm_axis": _axis(int(b.arg(n, 3, "begin_norm_axis", -1)), rank),
        "epsilon": float(b.arg(n, 5, "epsilon", 1e-7)),
        "elementwise_affine": True,
        "begin_params_axis": _axis(int(b.arg(n, 4, "begin_params_axis", -1)), rank),
    }
    y = b.emit(n, "LayerNormFusion", attrs, [x, b.input(n, 1), b.input(n, 2)])[0]
    return TupleValue((y,), 3, n.name)  # mean and variance outputs serve training only


# -- matrix products ----------------------------------------------------------------------
@register("MatMul", "BatchMatMul")
def matmul(b: Builder, n: MsNode) -> Any:
    attrs = {
        "transpose_a": bool(b.arg(n, 2, ("transpose_a", "transpose_x1"), False)),
        "transpose_b": bool(b.arg(n, 3, ("transpose_b", "transpose_x2"), False)),
        "activation_type": "NO_ACTIVATION",
    }
    return b.emit(n, "MatMulFusion", attrs, [b.input(n, 0), b.input(n, 1)])[0]


@register("Dense")
def dense(b: Builder, n: MsNode) -> Any:
    inputs = [b.input(n, 0), b.input(n, 1)]
    if len(n.inputs) > 2 and not _is_none(b, n, 2):
        inputs.append(b.input(n, 2))
    attrs = {"transpose_a": False, "transpose_b": True, "activation_type": "NO_ACTIVATION"}
    return b.emit(n, "MatMulFusion", attrs, inputs)[0]


def _is_none(b: Builder, n: MsNode, pos: int) -> bool:
    try:
        return b.const(n, pos) is None
    except UnsupportedError:
        return False


@register("BiasAdd")
def bias_add(b: Builder, n: MsNode) -> Any:
    fmt = _nchw(n, b.arg(n, 2, ("data_format", "format"), "NCHW"))
    x, bias = b.input(n, 0), b.input(n, 1)
    if _fuse_bias(b, n, x, bias):
        return x
    return b.emit(n, "BiasAdd", {"format": fmt}, [x, bias])[0]


def _fuse_bias(b: Builder, n: MsNode, x: int, bias: int) -> bool:
    """Conv2D + BiasAdd and 2-D MatMul + BiasAdd (nn.Conv2d / nn.Dense) become one node with a
    bias input, as MindSpore Lite fuses them; only when nothing else reads the product."""
    producer = b.producer.get(x)
    if producer is None or len(producer.inputs) != 2 or not b.model.tensors[bias].is_const:
        return False
    fusable = producer.op == "Conv2DFusion" or producer.op == "MatMulFusion" and len(b.shape_of(x)) == 2
    if not fusable or not b.single_use(n.inputs[0]):
        return False
    producer.inputs.append(bias)
    return True


# -- activations ---------------------------------------------------------------------------
_ACTIVATIONS = {
    "ReLU": {"activation_type": "RELU"},
    "ReLU6": {"activation_type": "RELU6", "min_val": 0.0, "max_val": 6.0},
    "Sigmoid": {"activation_type": "SIGMOID"},
    "Tanh": {"activation_type": "TANH"},
    "HSwish": {"activation_type": "HSWISH"},
    "HSigmoid": {"activation_type": "HSIGMOID"},
    # MindSpore's GeLU kernel is the tanh approximation.
    "GeLU": {"activation_type": "GELU", "approximate": True},
}


def _activation(attrs: dict[str, Any]) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        return b.emit(n, "Activation", dict(attrs), [b.input(n, 0)])[0]

    return convert


for _prim, _attrs in _ACTIVATIONS.items():
    register(_prim)(_activation(_attrs))


@register("FastGeLU")
def fast_gelu(b: Builder, n: MsNode) -> Any:
    """FastGeLU(x) = x * sigmoid(1.702 x): no Lite primitive, so three of them."""
    x = b.input(n, 0)
    k = b.constant(np.array(1.702, dtype=b.model.tensors[x].dtype), f"{n.name}/k")
    scaled = b.emit_like(f"{n.name}/scaled", "MulFusion", {"activation_type": "NO_ACTIVATION"}, [x, k], like=x)
    gate = b.emit_like(f"{n.name}/gate", "Activation", {"activation_type": "SIGMOID"}, [scaled], like=x)
    return b.emit(n, "MulFusion", {"activation_type": "NO_ACTIVATION"}, [x, gate])[0]


@register("Softmax")
def softmax(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "Softmax", {"axis": _ints(b.arg(n, 1, "axis", -1))}, [b.input(n, 0)])[0]


@register("LogSoftmax")
def log_softmax(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "LogSoftmax", {"axis": int(b.arg(n, 1, "axis", -1))}, [b.input(n, 0)])[0]


# -- element-wise ----------------------------------------------------------------------------
_BINARY = {
    "Add": "AddFusion", "Sub": "SubFusion", "Mul": "MulFusion", "Muls": "MulFusion",
    "Div": "DivFusion", "RealDiv": "DivFusion", "Maximum": "Maximum", "Minimum": "Minimum",
}
_FUSED_BINARY = {"AddFusion", "SubFusion", "MulFusion", "DivFusion"}


def _binary(op: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        attrs = {"activation_type": "NO_ACTIVATION"} if op in _FUSED_BINARY else {}
        return b.emit(n, op, attrs, [b.input(n, 0), b.input(n, 1)])[0]

    return convert


for _prim, _op in _BINARY.items():
    register(_prim)(_binary(_op))


@register("Pow")
def power(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "PowFusion", {"scale": 1.0, "shift": 0.0}, [b.input(n, 0), b.input(n, 1)])[0]


@register("Exp")
def exp(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "ExpFusion", {"base": -1.0, "scale": 1.0, "shift": 0.0}, [b.input(n, 0)])[0]


def _unary(op: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        return b.emit(n, op, {}, [b.input(n, 0)])[0]

    return convert


for _prim in ("Sqrt", "Rsqrt", "Erf", "Abs", "Neg", "Log", "Floor", "Square",
              "OnesLike", "ZerosLike", "Shape"):
    register(_prim)(_unary(_prim))


# -- reductions -------------------------------------------------------------------------------
_REDUCE = {"ReduceMean": "ReduceMean", "ReduceSum": "ReduceSum", "ReduceMax": "ReduceMax",
           "ReduceMin": "ReduceMin", "ReduceProd": "ReduceProd"}


def _reduce(mode: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        x = b.input(n, 0)
        axes = _ints(b.arg(n, 1, "axis", ()))
        if not axes:
            if b.arg(n, 3, "skip_mode", False):
                return x
            axes = list(range(len(b.shape_of(x))))
        attrs = {"keep_dims": bool(b.arg(n, 2, "keep_dims", False)), "mode": mode,
                 "reduce_to_end": False, "coeff": 1.0}
        axes_t = b.constant(np.array(axes, dtype=np.int32), f"{n.name}/axes")
        return b.emit(n, "ReduceFusion", attrs, [x, axes_t])[0]

    return convert


for _prim, _mode in _REDUCE.items():
    register(_prim)(_reduce(_mode))


# -- shape and data movement --------------------------------------------------------------------
def _with_int_input(op: str, pos: int, name: str) -> Converter:
    """Ops whose argument travels as an int32 tensor input in Lite (Reshape shape, Transpose perm)."""

    def convert(b: Builder, n: MsNode) -> Any:
        if pos < len(n.inputs):
            arg = b.input(n, pos, dtype=np.int32)
        else:
            arg = b.constant(np.array(_ints(b.arg(n, None, name)), dtype=np.int32), f"{n.name}/{name}")
        return b.emit(n, op, {}, [b.input(n, 0), arg])[0]

    return convert


register("Reshape")(_with_int_input("Reshape", 1, "shape"))
register("Transpose")(_with_int_input("Transpose", 1, "perm"))


@register("ExpandDims")
def expand_dims(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "Unsqueeze", {"axis": _ints(b.arg(n, 1, "axis"))}, [b.input(n, 0)])[0]


@register("Squeeze")
def squeeze(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "Squeeze", {"axis": _ints(b.arg(n, 1, "axis", ()))}, [b.input(n, 0)])[0]


@register("Flatten")
def flatten(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "Flatten", {"axis": 1}, [b.input(n, 0)])[0]


@register("Concat")
def concat(b: Builder, n: MsNode) -> Any:
    inputs = b.tuple_inputs(n, 0)
    axis = _axis(int(b.arg(n, 1, "axis", 0)), len(b.shape_of(inputs[0])))
    return b.emit(n, "Concat", {"axis": axis}, inputs)[0]


@register("Split")
def split(b: Builder, n: MsNode) -> Any:
    x = b.input(n, 0)
    shape = b.shape_of(x)
    axis = _axis(int(b.arg(n, 1, "axis", 0)), len(shape))
    count = int(b.arg(n, 2, "output_num", 1))
    if count < 1 or not 0 <= axis < len(shape):
        raise InvalidModelError(f"node {n.name!r} (Split): axis {axis} / output_num {count} invalid for {shape}")
    dim = shape[axis]
    sizes = [dim // count] * count if isinstance(dim, int) and dim >= 0 else []
    attrs = {"output_num": count, "size_splits": sizes, "axis": axis}
    outs = b.emit(n, "Split", attrs, [x], outputs=count)
    return TupleValue(tuple(outs), count, n.name)


_INT64_MAX = int(np.iinfo(np.int64).max)
_INT64_MIN = int(np.iinfo(np.int64).min)


@register("StridedSlice")
def strided_slice(b: Builder, n: MsNode) -> Any:
    """TF-style slice with masks -> Lite StridedSlice in its ONNX form (x, starts, ends, axes, steps)."""
    x = b.input(n, 0)
    begin, end, strides = (_ints(b.arg(n, i, name)) for i, name in ((1, "begin"), (2, "end"), (3, "strides")))
    masks = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
    m = {name: int(b.arg(n, 4 + i, name, 0)) for i, name in enumerate(masks)}
    if m["ellipsis_mask"] or m["new_axis_mask"]:
        raise UnsupportedError(f"node {n.name!r} (StridedSlice): ellipsis_mask / new_axis_mask are not supported")
    if not len(begin) == len(end) == len(strides) or 0 in strides:
        raise InvalidModelError(f"node {n.name!r} (StridedSlice): begin {begin}, end {end}, strides {strides} disagree")
    shrink = [i for i in range(len(begin)) if m["shrink_axis_mask"] >> i & 1]
    for i, step in enumerate(strides):
        if m["begin_mask"] >> i & 1:
            begin[i] = 0 if step > 0 else _INT64_MAX
        if m["end_mask"] >> i & 1:
            end[i] = _INT64_MAX if step > 0 else _INT64_MIN
        if i in shrink:
            end[i], strides[i] = (begin[i] + 1 or _INT64_MAX), 1
    consts = [b.constant(np.array(v, dtype=np.int64), f"{n.name}/{what}")
              for what, v in (("starts", begin), ("ends", end), ("axes", list(range(len(begin)))),
                               ("steps", strides))]
    if not shrink:
        return b.emit(n, "StridedSlice", {k: 0 for k in masks}, [x, *consts])[0]
    sliced = b.emit(n, "StridedSlice", {k: 0 for k in masks}, [x, *consts], suffix="/slice")[0]
    if n.abstract:  # the slice keeps the shrunk axes as 1s
        kept = list(n.abstract[0].shape)
        for axis in shrink:
            kept.insert(axis, 1)
        b.model.tensors[sliced].shape = tuple(kept)
    return b.emit(n, "Squeeze", {"axis": shrink}, [sliced])[0]


@register("Gather", "GatherV2")
def gather(b: Builder, n: MsNode) -> Any:
    if int(b.arg(n, 3, "batch_dims", 0)) != 0:
        raise UnsupportedError(f"node {n.name!r} (Gather): batch_dims != 0 is not supported")
    axis = np.array(_ints(b.arg(n, 2, "axis", 0)), dtype=np.int32)
    inputs = [b.input(n, 0), b.input(n, 1), b.constant(axis, f"{n.name}/axis")]
    return b.emit(n, "Gather", {}, inputs)[0]


@register("Cast")
def cast(b: Builder, n: MsNode) -> Any:
    dst = b.arg(n, 1, ("dst_type", "to"))
    if not isinstance(dst, (int, np.integer)):
        raise UnsupportedError(f"node {n.name!r} (Cast): destination type {dst!r} is not a TypeId")
    type_id = b.constant(np.array([int(dst)], dtype=np.int32), f"{n.name}/to")
    return b.emit(n, "Cast", {}, [b.input(n, 0), type_id])[0]


@register("Pad")
def pad(b: Builder, n: MsNode) -> Any:
    paddings = np.array(b.arg(n, 1, "paddings"), dtype=np.int32)
    if paddings.ndim != 2 or paddings.shape[1] != 2:
        raise InvalidModelError(f"node {n.name!r} (Pad): paddings {paddings.tolist()} are not (before, after) pairs")
    attrs = {"padding_mode": "CONSTANT", "constant_value": 0.0}
    return b.emit(n, "PadFusion", attrs, [b.input(n, 0), b.constant(paddings, f"{n.name}/paddings")])[0]


def _resize(method: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        size = _ints(b.arg(n, 1, "size"))
        if len(size) != 2:
            raise InvalidModelError(f"node {n.name!r} ({n.prim}): size {size} is not (height, width)")
        align = bool(b.arg(n, 2, "align_corners", False))
        half = bool(b.arg(n, 3, "half_pixel_centers", False))
        mode = "ALIGN_CORNERS" if align else "HALF_PIXEL" if half else "ASYMMETRIC"
        attrs = {
            "format": "NCHW", "method": method, "new_height": size[0], "new_width": size[1],
            "preserve_aspect_ratio": False, "coordinate_transform_mode": mode,
            "cubic_coeff": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
            # MindSpore floors the source coordinate, except with align_corners / half-pixel
            # centers, where it rounds (= ONNX round_prefer_ceil on the ONNX coordinate).
            "nearest_mode": "FLOOR" if mode == "ASYMMETRIC" else "ROUND_HALF_UP",
        }
        return b.emit(n, "Resize", attrs, [b.input(n, 0)])[0]

    return convert


register("ResizeBilinear", "ResizeBilinearV2")(_resize("LINEAR"))
register("ResizeNearestNeighbor", "ResizeNearestNeighborV2")(_resize("NEAREST"))
