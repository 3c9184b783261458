"""MindSpore primitive -> MindSpore Lite primitive: one small function per primitive.

Each converter reads its arguments through the Builder's typed accessors (a constant input
in 2.x files, an attribute in 1.x files) and returns the value the node produces. Lite
attribute names and enum members are spelled as ops.fbs spells them; layouts stay NCHW, as
MindSpore 2.x exports. Conventions shared with converters.onnx_import: parameters that Lite
takes as inputs (shape, perm, axes, paddings, Gather axis, Cast type) are int32 weights.
Long by design: a table of ~70 small converters, each a few lines; splitting it would
scatter one lookup over several files without separating any concern.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from converters.errors import InvalidModelError, UnsupportedError
from converters.mindir.args import as_array, as_int
from converters.mindir.builder import Builder, TupleValue
from converters.mindir.graph import MsNode

Converter = Callable[[Builder, MsNode], Any]
OPS: dict[str, Converter] = {}
NO_ACT = "NO_ACTIVATION"


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


def _where(n: MsNode) -> str:
    return f"node {n.name!r} ({n.prim})"


def _hw(b: Builder, n: MsNode, pos: int | None, names, default: Any) -> list[int]:
    """(h, w) from an int, an (h, w) pair or MindSpore's (1, 1, h, w)."""
    vals = b.ints_arg(n, pos, names, default)
    if len(vals) == 1:
        return vals * 2
    if len(vals) in (2, 4):
        return vals[-2:]
    raise InvalidModelError(f"{_where(n)}: {names} {vals} is not 1, 2 or 4 values")


def _enum(n: MsNode, table: dict, value: Any, what: str, fold: Callable[[str], str]) -> str:
    """Look up `value` (a name, compared after `fold`, or MindSpore's enum number) in `table`."""
    key = fold(value) if isinstance(value, str) else value
    if isinstance(key, bool) or not isinstance(key, (str, int)) or key not in table:
        raise InvalidModelError(f"{_where(n)}: {what} {value!r} is not one of {sorted(map(str, table))}")
    return table[key]


def _pad_mode(b: Builder, n: MsNode, pos: int | None) -> str:
    return _enum(n, _PAD_MODES, b.arg(n, pos, "pad_mode", "valid"), "pad_mode", str.lower)


def _nchw(b: Builder, n: MsNode, pos: int | None) -> str:
    fmt = _enum(n, _FORMATS, b.arg(n, pos, ("format", "data_format"), "NCHW"), "format", str.upper)
    if fmt != "NCHW":
        raise UnsupportedError(f"{_where(n)}: data format {fmt}; only NCHW is supported")
    return fmt


def _axis(n: MsNode, axis: int, rank: int) -> int:
    """`axis` made non-negative against `rank`; InvalidModelError when out of range."""
    if not -rank <= axis < max(rank, 1):  # rank 0: shape unknown, only axis 0 is plausible
        raise InvalidModelError(f"{_where(n)}: axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _rank(b: Builder, idx: int) -> int:
    return len(b.shape_of(idx))


# -- convolution, pooling, normalisation ----------------------------------------------------
@register("Conv2D")
def conv2d(b: Builder, n: MsNode) -> Any:
    x, w = b.input(n, 0), b.input(n, 1)
    wshape = b.shape_of(w)
    if len(wshape) != 4 or not all(isinstance(d, int) and d > 0 for d in wshape):
        raise InvalidModelError(f"{_where(n)}: weight has shape {wshape}, expected 4-D OIHW")
    group = b.int_arg(n, None, ("group", "groups"), 1)
    pads = b.ints_arg(n, None, ("pad_list", "pad"), 0)
    if len(pads) not in (1, 4):
        raise InvalidModelError(f"{_where(n)}: pad_list {pads} is not 1 or 4 values")
    attrs = {
        "format": _nchw(b, n, None),
        "kernel_size": _hw(b, n, None, "kernel_size", list(wshape[2:])),
        "stride": _hw(b, n, None, ("stride", "strides"), 1),
        "dilation": _hw(b, n, None, ("dilation", "dilations"), 1),
        "pad_mode": _pad_mode(b, n, None),
        "pad_list": pads * 4 if len(pads) == 1 else pads,
        "group": group,
        "in_channel": wshape[1] * group,
        "out_channel": b.int_arg(n, None, "out_channel", wshape[0]),
        "activation_type": NO_ACT,
    }
    return b.emit(n, "Conv2DFusion", attrs, [x, w])[0]


def _pool(op: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        attrs = {
            "kernel_size": _hw(b, n, 1, ("kernel_size", "ksize"), 1),
            "strides": _hw(b, n, 2, ("strides", "stride"), 1),
            "pad": [0, 0, 0, 0],
            "pad_mode": _pad_mode(b, n, 3),
            "round_mode": "FLOOR",
            "format": _nchw(b, n, 4),
            "global": False,
            "activation_type": NO_ACT,
        }
        return b.emit(n, op, attrs, [b.input(n, 0)])[0]

    return convert


register("MaxPool")(_pool("MaxPoolFusion"))
register("AvgPool")(_pool("AvgPoolFusion"))


def _adaptive_pool(op: str) -> Converter:
    """Adaptive pooling whose output size divides the input: global, or fixed windows."""

    def convert(b: Builder, n: MsNode) -> Any:
        x = b.input(n, 0)
        shape = b.shape_of(x)
        out = [None if v is None else as_int(v, f"{_where(n)}: output_size")
               for v in _pair_or_none(n, b.arg(n, 1, "output_size"))]
        attrs = {"format": "NCHW", "global": False, "activation_type": NO_ACT, "pad_mode": "VALID",
                 "pad": [0, 0, 0, 0], "round_mode": "FLOOR"}
        if out == [1, 1]:
            return b.emit(n, op, {**attrs, "global": True}, [x])[0]
        hw = list(shape[2:]) if len(shape) == 4 else []
        if len(hw) != 2 or not all(isinstance(d, int) and d > 0 for d in hw):
            raise UnsupportedError(f"{_where(n)}: adaptive pooling of an input of unknown spatial size")
        out = [d if o is None else o for o, d in zip(out, hw, strict=True)]
        if any(o <= 0 or d % o for o, d in zip(out, hw, strict=True)):
            raise UnsupportedError(f"{_where(n)}: output size {out} does not divide input size {hw}")
        window = [d // o for o, d in zip(out, hw, strict=True)]
        return b.emit(n, op, {**attrs, "kernel_size": window, "strides": window}, [x])[0]

    return convert


def _pair_or_none(n: MsNode, v: Any) -> list[Any]:
    """(h, w) from an int or a pair whose items may be None (= keep the input size)."""
    items = list(v) if isinstance(v, (tuple, list)) else [v, v]
    if len(items) != 2:
        raise InvalidModelError(f"{_where(n)}: output_size {v!r} is not (height, width)")
    return items


register("AdaptiveAvgPool2D")(_adaptive_pool("AvgPoolFusion"))
register("AdaptiveMaxPool2D")(_adaptive_pool("MaxPoolFusion"))


@register("BatchNorm")
def batch_norm(b: Builder, n: MsNode) -> Any:
    if b.bool_arg(n, 5, "is_training", False):
        raise UnsupportedError(f"{_where(n)}: training mode; export the net with set_train(False)")
    _nchw(b, n, 8)
    attrs = {"epsilon": b.float_arg(n, 6, "epsilon", 1e-5), "momentum": b.float_arg(n, 7, "momentum", 0.1),
             "mode": 0}
    y = b.emit(n, "FusedBatchNorm", attrs, [b.input(n, i) for i in range(5)])[0]
    return TupleValue((y,), 5, n.name)  # batch statistics are training outputs


@register("LayerNorm")
def layer_norm(b: Builder, n: MsNode) -> Any:
    x = b.input(n, 0)
    rank = _rank(b, x)
    attrs = {
        "begin_norm_axis": _axis(n, b.int_arg(n, 3, "begin_norm_axis", -1), rank),
        "epsilon": b.float_arg(n, 5, "epsilon", 1e-7),
        "elementwise_affine": True,
        "begin_params_axis": _axis(n, b.int_arg(n, 4, "begin_params_axis", -1), rank),
    }
    y = b.emit(n, "LayerNormFusion", attrs, [x, b.input(n, 1), b.input(n, 2)])[0]
    return TupleValue((y,), 3, n.name)  # mean and variance outputs serve training only


# -- matrix products ----------------------------------------------------------------------
@register("MatMul", "BatchMatMul")
def matmul(b: Builder, n: MsNode) -> Any:
    attrs = {
        "transpose_a": b.bool_arg(n, 2, ("transpose_a", "transpose_x1"), False),
        "transpose_b": b.bool_arg(n, 3, ("transpose_b", "transpose_x2"), False),
        "activation_type": NO_ACT,
    }
    return b.emit(n, "MatMulFusion", attrs, [b.input(n, 0), b.input(n, 1)])[0]


@register("MatMulExt", "BatchMatMulExt")
def matmul_ext(b: Builder, n: MsNode) -> Any:
    """The `@` operator / mint.matmul: numpy-style broadcasting product, no transposes."""
    attrs = {"transpose_a": False, "transpose_b": False, "activation_type": NO_ACT}
    return b.emit(n, "MatMulFusion", attrs, [b.input(n, 0), b.input(n, 1)])[0]


@register("Dense")
def dense(b: Builder, n: MsNode) -> Any:
    """ops.Dense(x, w, b): x @ w.T + b, the bias optional (None)."""
    inputs = [b.input(n, 0), b.input(n, 1)]
    if len(n.inputs) > 2 and not b.is_none(n, 2):
        inputs.append(b.input(n, 2))
    attrs = {"transpose_a": False, "transpose_b": True, "activation_type": NO_ACT}
    return b.emit(n, "MatMulFusion", attrs, inputs)[0]


@register("BiasAdd")
def bias_add(b: Builder, n: MsNode) -> Any:
    fmt = _nchw(b, n, 2)
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
    fusable = producer.op == "Conv2DFusion" or producer.op == "MatMulFusion" and _rank(b, x) == 2
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
    "Softplus": {"activation_type": "SOFTPLUS"},
    "Softsign": {"activation_type": "SOFTSIGN"},
    "SiLU": {"activation_type": "SWISH"},
    # MindSpore's GeLU kernel is the tanh approximation.
    "GeLU": {"activation_type": "GELU", "approximate": True},
}


def _activation(attrs: dict[str, Any]) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        return b.emit(n, "Activation", dict(attrs), [b.input(n, 0)])[0]

    return convert


for _prim, _attrs in _ACTIVATIONS.items():
    register(_prim)(_activation(_attrs))


@register("Elu")
def elu(b: Builder, n: MsNode) -> Any:
    attrs = {"activation_type": "ELU", "alpha": b.float_arg(n, 1, "alpha", 1.0)}
    return b.emit(n, "Activation", attrs, [b.input(n, 0)])[0]


@register("FastGeLU")
def fast_gelu(b: Builder, n: MsNode) -> Any:
    """FastGeLU(x) = x * sigmoid(1.702 x), written with primitives every backend has."""
    x = b.input(n, 0)
    k = b.constant(np.array(1.702, dtype=b.model.tensors[x].dtype), f"{n.name}/k")
    scaled = b.emit_like(f"{n.name}/scaled", "MulFusion", {"activation_type": NO_ACT}, [x, k], like=x)
    gate = b.emit_like(f"{n.name}/gate", "Activation", {"activation_type": "SIGMOID"}, [scaled], like=x)
    return b.emit(n, "MulFusion", {"activation_type": NO_ACT}, [x, gate])[0]


@register("Softmax")
def softmax(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "Softmax", {"axis": b.ints_arg(n, 1, "axis", -1)}, [b.input(n, 0)])[0]


@register("LogSoftmax")
def log_softmax(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "LogSoftmax", {"axis": b.int_arg(n, 1, "axis", -1)}, [b.input(n, 0)])[0]


# -- element-wise ----------------------------------------------------------------------------
_BINARY = {
    "Add": "AddFusion", "Sub": "SubFusion", "Mul": "MulFusion", "Muls": "MulFusion",
    "Div": "DivFusion", "RealDiv": "DivFusion", "Maximum": "Maximum", "Minimum": "Minimum",
    "Equal": "Equal", "NotEqual": "NotEqual", "Less": "Less", "LessEqual": "LessEqual",
    "Greater": "Greater", "GreaterEqual": "GreaterEqual", "LogicalAnd": "LogicalAnd",
    "LogicalOr": "LogicalOr",
}
_FUSED_BINARY = {"AddFusion", "SubFusion", "MulFusion", "DivFusion"}


def _binary(op: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        attrs = {"activation_type": NO_ACT} if op in _FUSED_BINARY else {}
        return b.emit(n, op, attrs, [b.input(n, 0), b.input(n, 1)])[0]

    return convert


for _prim, _op in _BINARY.items():
    register(_prim)(_binary(_op))


@register("Pow")
def power(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "PowFusion", {"scale": 1.0, "shift": 0.0}, [b.input(n, 0), b.input(n, 1)])[0]


@register("Select")
def select(b: Builder, n: MsNode) -> Any:
    """Select(cond, x, y): Lite's three-input Where."""
    return b.emit(n, "Where", {}, [b.input(n, i) for i in range(3)])[0]


@register("Log")
def log(b: Builder, n: MsNode) -> Any:
    base, scale, shift = (b.float_arg(n, None, k, d) for k, d in (("base", -1.0), ("scale", 1.0), ("shift", 0.0)))
    if (base, scale, shift) != (-1.0, 1.0, 0.0):
        raise UnsupportedError(f"{_where(n)}: log with base/scale/shift {base}/{scale}/{shift}")
    return b.emit(n, "Log", {}, [b.input(n, 0)])[0]


@register("Exp")
def exp(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "ExpFusion", {"base": -1.0, "scale": 1.0, "shift": 0.0}, [b.input(n, 0)])[0]


def _unary(op: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        return b.emit(n, op, {}, [b.input(n, 0)])[0]

    return convert


for _prim in ("Sqrt", "Rsqrt", "Erf", "Abs", "Neg", "Floor", "Ceil", "Square", "Reciprocal",
              "Sin", "Cos", "LogicalNot", "OnesLike", "ZerosLike", "Shape"):
    register(_prim)(_unary(_prim))


# -- reductions -------------------------------------------------------------------------------
_REDUCE = {"ReduceMean": "ReduceMean", "ReduceSum": "ReduceSum", "ReduceMax": "ReduceMax",
           "ReduceMin": "ReduceMin", "ReduceProd": "ReduceProd"}


def _reduce(mode: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        x = b.input(n, 0)
        rank = _rank(b, x)
        axes = [_axis(n, a, rank) for a in b.ints_arg(n, 1, "axis", ())]
        if not axes:
            if b.bool_arg(n, 3, "skip_mode", False):
                return x
            axes = list(range(rank))  # MindSpore: no axes = every axis
        attrs = {"keep_dims": b.bool_arg(n, 2, "keep_dims", False), "mode": mode,
                 "reduce_to_end": False, "coeff": 1.0}
        return b.emit(n, "ReduceFusion", attrs, [x, b.int32_constant(n, axes, "axes")])[0]

    return convert


for _prim, _mode in _REDUCE.items():
    register(_prim)(_reduce(_mode))


def _reduce_ext(mode: str) -> Converter:
    """The 2.x `mint` forms SumExt / MeanExt(x, dim | None, keepdim, dtype | None)."""

    def convert(b: Builder, n: MsNode) -> Any:
        x = b.input(n, 0)
        rank = _rank(b, x)
        if len(n.inputs) > 3 and not b.is_none(n, 3):
            raise UnsupportedError(f"{_where(n)}: a dtype argument is not supported")
        dims = () if b.is_none(n, 1) else b.ints_arg(n, 1, "dim")
        axes = [_axis(n, a, rank) for a in dims] or list(range(rank))
        attrs = {"keep_dims": b.bool_arg(n, 2, "keepdim", False), "mode": mode,
                 "reduce_to_end": False, "coeff": 1.0}
        return b.emit(n, "ReduceFusion", attrs, [x, b.int32_constant(n, axes, "axes")])[0]

    return convert


register("SumExt")(_reduce_ext("ReduceSum"))
register("MeanExt")(_reduce_ext("ReduceMean"))


def _arg_index(op: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        x = b.input(n, 0)
        attrs = {"axis": _axis(n, b.int_arg(n, 1, "axis", -1), _rank(b, x)), "top_k": 1,
                 "keep_dims": False, "out_max_value": False}
        return b.emit(n, op, attrs, [x])[0]

    return convert


register("Argmax")(_arg_index("ArgMaxFusion"))
register("Argmin")(_arg_index("ArgMinFusion"))


# -- shape and data movement --------------------------------------------------------------------
def _with_int_input(op: str, name: str) -> Converter:
    """Ops whose argument is Lite's second (int32) input: Reshape's shape, Tile's multiples,
    Transpose's perm."""

    def convert(b: Builder, n: MsNode) -> Any:
        if len(n.inputs) > 1:
            arg = b.input(n, 1, dtype=np.int32)
        else:
            arg = b.int32_constant(n, b.ints_arg(n, None, name), name)
        return b.emit(n, op, {}, [b.input(n, 0), arg])[0]

    return convert


register("Reshape")(_with_int_input("Reshape", "shape"))
register("Tile")(_with_int_input("TileFusion", "multiples"))
register("Transpose")(_with_int_input("Transpose", "perm"))


@register("ExpandDims")
def expand_dims(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "Unsqueeze", {"axis": b.ints_arg(n, 1, "axis")}, [b.input(n, 0)])[0]


@register("Squeeze")
def squeeze(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "Squeeze", {"axis": b.ints_arg(n, 1, "axis", ())}, [b.input(n, 0)])[0]


@register("Flatten")
def flatten(b: Builder, n: MsNode) -> Any:
    return b.emit(n, "Flatten", {"axis": 1}, [b.input(n, 0)])[0]


@register("Concat")
def concat(b: Builder, n: MsNode) -> Any:
    inputs = b.tuple_inputs(n, 0)
    if not inputs:
        raise InvalidModelError(f"{_where(n)}: concatenates nothing")
    axis = _axis(n, b.int_arg(n, 1, "axis", 0), _rank(b, inputs[0]))
    return b.emit(n, "Concat", {"axis": axis}, inputs)[0]


@register("Split")
def split(b: Builder, n: MsNode) -> Any:
    x = b.input(n, 0)
    shape = b.shape_of(x)
    axis = _axis(n, b.int_arg(n, 1, "axis", 0), len(shape))
    count = b.int_arg(n, 2, "output_num", 1)
    dim = shape[axis] if axis < len(shape) else None  # None: rank unknown
    if not isinstance(dim, int) or dim < 0:
        raise UnsupportedError(f"{_where(n)}: split of a dimension of unknown size")
    if count < 1 or dim % count:
        raise InvalidModelError(f"{_where(n)}: output_num {count} does not divide dimension {dim}")
    attrs = {"output_num": count, "size_splits": [dim // count] * count, "axis": axis}
    outs = b.emit(n, "Split", attrs, [x], outputs=count)
    return TupleValue(tuple(outs), count, n.name)


_INT64_MAX = int(np.iinfo(np.int64).max)
_INT64_MIN = int(np.iinfo(np.int64).min)
_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


@register("StridedSlice")
def strided_slice(b: Builder, n: MsNode) -> Any:
    """TF-style slice with masks -> Lite StridedSlice in its ONNX form (x, starts, ends, axes, steps)."""
    x = b.input(n, 0)
    begin, end, strides = (b.ints_arg(n, i, name) for i, name in ((1, "begin"), (2, "end"), (3, "strides")))
    m = {name: b.int_arg(n, 4 + i, name, 0) for i, name in enumerate(_MASKS)}
    if m["ellipsis_mask"] or m["new_axis_mask"]:
        raise UnsupportedError(f"{_where(n)}: ellipsis_mask / new_axis_mask are not supported")
    if not len(begin) == len(end) == len(strides) or 0 in strides:
        raise InvalidModelError(f"{_where(n)}: begin {begin}, end {end}, strides {strides} disagree")
    shrink = [i for i in range(len(begin)) if m["shrink_axis_mask"] >> i & 1]
    for i, step in enumerate(strides):
        if m["begin_mask"] >> i & 1:
            begin[i] = 0 if step > 0 else _INT64_MAX
        if m["end_mask"] >> i & 1:
            end[i] = _INT64_MAX if step > 0 else _INT64_MIN
        if i in shrink:  # keep one element; begin -1 needs an open end
            end[i], strides[i] = (begin[i] + 1 or _INT64_MAX), 1
    consts = [b.constant(np.array(v, dtype=np.int64), f"{n.name}/{what}")
              for what, v in (("starts", begin), ("ends", end), ("axes", list(range(len(begin)))),
                               ("steps", strides))]
    attrs = dict.fromkeys(_MASKS, 0)
    if not shrink:
        return b.emit(n, "StridedSlice", attrs, [x, *consts])[0]
    sliced = b.emit(n, "StridedSlice", attrs, [x, *consts], suffix="/slice")[0]
    if n.abstract:  # the slice still has the shrunk axes, as 1s
        kept = list(n.abstract[0].shape)
        for axis in shrink:
            kept.insert(axis, 1)
        b.model.tensors[sliced].shape = tuple(kept)
    return b.emit(n, "Squeeze", {"axis": shrink}, [sliced])[0]


@register("Gather", "GatherV2")
def gather(b: Builder, n: MsNode) -> Any:
    if b.int_arg(n, 3, "batch_dims", 0) != 0:
        raise UnsupportedError(f"{_where(n)}: batch_dims != 0 is not supported")
    axis = b.int32_constant(n, [b.int_arg(n, 2, "axis", 0)], "axis")
    return b.emit(n, "Gather", {}, [b.input(n, 0), b.input(n, 1), axis])[0]


@register("Cast")
def cast(b: Builder, n: MsNode) -> Any:
    """The destination is a MindSpore TypeId (what 2.x exports), Lite's second input."""
    to = b.int32_constant(n, [b.int_arg(n, 1, ("dst_type", "to"))], "to")
    return b.emit(n, "Cast", {}, [b.input(n, 0), to])[0]


@register("Pad")
def pad(b: Builder, n: MsNode) -> Any:
    paddings = as_array(b.arg(n, 1, "paddings"), np.int32, f"{_where(n)}: paddings")
    if paddings.ndim != 2 or paddings.shape[1] != 2:
        raise InvalidModelError(f"{_where(n)}: paddings {paddings.tolist()} are not (before, after) pairs")
    attrs = {"padding_mode": "CONSTANT", "constant_value": 0.0}
    return b.emit(n, "PadFusion", attrs, [b.input(n, 0), b.constant(paddings, f"{n.name}/paddings")])[0]


def _resize(method: str) -> Converter:
    def convert(b: Builder, n: MsNode) -> Any:
        size = b.ints_arg(n, 1, "size")
        if len(size) != 2 or min(size) <= 0:
            raise InvalidModelError(f"{_where(n)}: size {size} is not a positive (height, width)")
        align = b.bool_arg(n, 2, "align_corners", False)
        half = b.bool_arg(n, 3, "half_pixel_centers", False)
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
