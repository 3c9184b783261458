"""Per-primitive rules: shape inference from concrete shapes plus attribute normalisation.

One rule per Lite primitive turns a node and the facts about its inputs (concrete shape,
dtype, and the value when the input is a constant) into a `Lowered`: the kernel key, the
kernel's normalised attrs (explicit pads, non-negative axes, ...), its operands (node input
positions, or constants the rule derives such as GEMM-packed weights or resize index maps),
the output shapes/dtypes and any scratch buffers. Shape inference and normalisation live
together because both need the same geometry (a conv's pads decide its output size).

Attribute names and enum members are MindSpore Lite's (ops.fbs), as converters/lite/ir.py
prescribes; tensor-valued parameters (Reshape shape, Transpose perm, Gather axis, ...) come
as extra constant inputs, as in MindSpore Lite. Weight layouts are ONNX's (the importer keeps
them): Conv2DFusion OIHW, Conv2dTransposeFusion IOHW, FullConnection (out, in).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from converters.lite import dtypes as lite_dtypes
from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu.conv_weights import direct_blocks, direct_conv

Shape = tuple[int, ...]
F32 = np.dtype(np.float32)
BOOL = np.dtype(np.bool_)


@dataclass
class TensorInfo:
    """What the compiler knows about a tensor: concrete shape, dtype, value if constant."""

    shape: Shape
    dtype: np.dtype
    value: np.ndarray | None = None


@dataclass
class Lowered:
    """A node lowered to one kernel step (kernel "" = alias: output 0 shares operand 0's buffer).

    `values` is set when the outputs are known at compile time from shapes alone (Shape,
    ConstantOfShape); such nodes never become steps.
    """

    kernel: str
    attrs: dict[str, Any]
    operands: list[int | np.ndarray]
    outputs: list[tuple[Shape, np.dtype]]
    scratch: list[tuple[str, Shape, np.dtype]] = field(default_factory=list)
    values: list[np.ndarray] | None = None


Rule = Callable[[LiteNode, Sequence[TensorInfo], Sequence[np.dtype | None]], Lowered]
RULES: dict[str, Rule] = {}


def rule(*ops: str) -> Callable[[Rule], Rule]:
    """Register `fn` as the rule of each Lite primitive in `ops` (duplicates are an error)."""

    def deco(fn: Rule) -> Rule:
        for op in ops:
            if op in RULES:
                raise ValueError(f"shape rule for {op!r} registered twice")
            RULES[op] = fn
        return fn

    return deco


def lower(node: LiteNode, ins: Sequence[TensorInfo], out_types: Sequence[np.dtype | None]) -> Lowered:
    """Apply the rule of node.op; UnsupportedError if the NPU has none."""
    fn = RULES.get(node.op)
    if fn is None:
        raise UnsupportedError(f"node {node.name!r}: no NPU rule for primitive {node.op!r}")
    return fn(node, ins, out_types)


# ---- small shared helpers -------------------------------------------------------------


def _where(node: LiteNode) -> str:
    return f"{node.op} node {node.name!r}"


def const(node: LiteNode, ins: Sequence[TensorInfo], i: int, what: str) -> np.ndarray:
    """The value of constant input i; UnsupportedError naming it when it is computed at run time."""
    if i >= len(ins) or ins[i].value is None:
        raise UnsupportedError(f"{_where(node)}: input {i} ({what}) must be a constant on the NPU")
    return ins[i].value


def axis_of(node: LiteNode, axis: int, ndim: int) -> int:
    """Normalise a possibly negative axis; InvalidModelError when out of range."""
    if not -ndim <= axis < max(ndim, 1):
        raise InvalidModelError(f"{_where(node)}: axis {axis} out of range for rank {ndim}")
    return axis % max(ndim, 1)


def ints(value: Any) -> list[int]:
    """A list of Python ints from an attr list or a constant array."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def broadcast(node: LiteNode, *shapes: Shape) -> Shape:
    """numpy broadcasting of shapes; InvalidModelError naming the node when impossible."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise InvalidModelError(f"{_where(node)}: shapes {list(shapes)} do not broadcast") from None


def _pair(node: LiteNode, name: str, default: int) -> list[int]:
    """A 2-element spatial attr (kernel/stride/dilation); missing or zeros take `default`."""
    v = ints(node.attrs.get(name, [default, default]))
    if len(v) == 1:
        v = v * 2
    if len(v) != 2:
        raise UnsupportedError(f"{_where(node)}: {name}={v}, the NPU runs 2-D windows only")
    return [d if d > 0 else default for d in v]


def _activation(node: LiteNode) -> str:
    return str(node.attrs.get("activation_type", "NO_ACTIVATION"))


def _check_nchw(node: LiteNode, x: TensorInfo) -> None:
    if node.attrs.get("format", "NCHW") != "NCHW":
        raise UnsupportedError(f"{_where(node)}: format {node.attrs['format']!r}, NPU runs NCHW")
    if len(x.shape) != 4:
        raise UnsupportedError(f"{_where(node)}: input rank {len(x.shape)}, expected 4 (NCHW)")


def same_pads(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    """SAME (ONNX SAME_UPPER) padding of one axis: output ceil(size / stride), extra at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def window_pads(node: LiteNode, hw: Sequence[int], kernel, stride, dilation, pads_attr: str) -> list[int]:
    """[top, bottom, left, right] for pad_mode PAD (the pads_attr list), SAME or VALID."""
    mode = node.attrs.get("pad_mode", "PAD")
    if mode == "SAME":
        return [*same_pads(hw[0], kernel[0], stride[0], dilation[0]),
                *same_pads(hw[1], kernel[1], stride[1], dilation[1])]
    if mode == "VALID":
        return [0, 0, 0, 0]
    if mode != "PAD":
        raise UnsupportedError(f"{_where(node)}: pad_mode {mode!r}")
    pads = ints(node.attrs.get(pads_attr) or [0, 0, 0, 0])
    if len(pads) != 4 or min(pads) < 0:
        raise UnsupportedError(f"{_where(node)}: {pads_attr}={pads}, expected 4 values >= 0")
    return pads


# ---- convolution and GEMM ---------------------------------------------------------------


@rule("Conv2DFusion")
def conv2d(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    _check_nchw(node, x)
    w = const(node, ins, 1, "weight")
    if w.ndim != 4:
        raise UnsupportedError(f"{_where(node)}: weight rank {w.ndim}, expected OIHW")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = int(node.attrs.get("group", 1)) or 1
    if c != cg * g or o % g:
        raise InvalidModelError(f"{_where(node)}: {c} input channels, weight {w.shape}, group {g}")
    kernel = [kh, kw]
    stride = _pair(node, "stride", 1)
    dilation = _pair(node, "dilation", 1)
    pads = window_pads(node, (h, wd), kernel, stride, dilation, "pad_list")
    oh = (h + pads[0] + pads[1] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (wd + pads[2] + pads[3] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    if oh <= 0 or ow <= 0:  # onnxruntime refuses a conv without output positions too
        raise InvalidModelError(f"{_where(node)}: the {kh}x{kw} kernel (stride {stride}, "
                                f"dilation {dilation}, pads {pads}) fits no position of input "
                                f"{x.shape}: output {oh}x{ow}")
    gemm = np.ascontiguousarray(w.reshape(g, o // g, cg * kh * kw))
    direct = x.dtype == F32 and direct_conv(cg, kh, kw, stride[1], dilation[1], oh, ow)
    operands: list[int | np.ndarray] = [0, direct_blocks(gemm) if direct else gemm]
    if len(ins) > 2:
        operands.append(const(node, ins, 2, "bias").reshape(o, 1))
    hp, wp = h + pads[0] + pads[1], wd + pads[2] + pads[3]
    scratch = []
    # The shifted stride-1 form (kernels.conv._shifted_cols) copies long contiguous taps but
    # makes the GEMM compute Wp - OW wasted columns per row: worth it unless that waste is
    # over 1/8 of a big GEMM (ResNet's 7x7 maps: im2col is ~25% faster there).
    wasted = (wp - ow) * 8 > ow and o * cg * kh * kw * oh * wp >= 1 << 21
    if stride == [1, 1] and kh * kw > 1 and not wasted:
        scratch = [("pad", (n, c, hp + 1, wp), x.dtype), ("cols", (n, g, cg * kh * kw, oh * wp), F32),
                   ("wide", (n, o, oh * wp), F32)]
    elif any(pads) or kernel != [1, 1] or stride != [1, 1] or x.dtype != F32:
        if any(pads):
            scratch.append(("pad", (n, c, hp, wp), x.dtype))
        scratch.append(("cols", (n, g, cg * kh * kw, oh * ow), F32))
    attrs = {"kernel": kernel, "stride": stride, "dilation": dilation, "pads": pads, "group": g,
             "activation": _activation(node), "scratch": [s[0] for s in scratch]}
    if direct:  # stored for the NPU's direct convolution (conv_weights)
        attrs["weights"] = "direct"
    return Lowered("conv2d", attrs, operands, [((n, o, oh, ow), x.dtype)], scratch)


@rule("Conv2dTransposeFusion")
def deconv2d(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    _check_nchw(node, x)
    w = const(node, ins, 1, "weight")
    n, c, h, wd = x.shape
    if w.ndim != 4 or w.shape[0] != c:
        raise InvalidModelError(f"{_where(node)}: weight {w.shape} for {c} input channels (IOHW)")
    _, og, kh, kw = w.shape
    g = int(node.attrs.get("group", 1)) or 1
    stride = _pair(node, "stride", 1)
    dilation = _pair(node, "dilation", 1)
    if node.attrs.get("pad_mode", "PAD") == "SAME":
        raise UnsupportedError(f"{_where(node)}: pad_mode SAME on a transposed conv")
    pads = window_pads(node, (h, wd), [kh, kw], stride, dilation, "pad_list")
    extra = ints(node.attrs.get("output_paddings") or [0, 0])
    full_h = (h - 1) * stride[0] + (kh - 1) * dilation[0] + 1 + extra[0]
    full_w = (wd - 1) * stride[1] + (kw - 1) * dilation[1] + 1 + extra[1]
    oh, ow = full_h - pads[0] - pads[1], full_w - pads[2] - pads[3]
    if oh <= 0 or ow <= 0:  # as onnxruntime, which refuses them too
        raise InvalidModelError(f"{_where(node)}: pads {pads} leave output {oh}x{ow} of input "
                                f"{x.shape}")
    o = og * g
    packed = w.reshape(g, c // g, og * kh * kw).transpose(0, 2, 1)
    operands: list[int | np.ndarray] = [0, np.ascontiguousarray(packed)]
    if len(ins) > 2:
        operands.append(const(node, ins, 2, "bias").reshape(o, 1))
    scratch = [("cols", (n, g, og * kh * kw, h * wd), F32), ("full", (n, o, full_h, full_w), F32)]
    attrs = {"kernel": [kh, kw], "stride": stride, "dilation": dilation, "pads": pads, "group": g,
             "activation": _activation(node), "scratch": ["cols", "full"]}
    return Lowered("deconv2d", attrs, operands, [((n, o, oh, ow), x.dtype)], scratch)


def _matmul_shape(node: LiteNode, a: Shape, b: Shape) -> Shape:
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        raise InvalidModelError(f"{_where(node)}: cannot multiply {a} by {b}")
    return (*broadcast(node, a[:-2], b[:-2]), a[-2], b[-1])


@rule("MatMulFusion")
def matmul(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    a, b = ins[0], ins[1]
    ta, tb = bool(node.attrs.get("transpose_a", False)), bool(node.attrs.get("transpose_b", False))
    a_shape = (*a.shape[:-2], a.shape[-1], a.shape[-2]) if ta else a.shape
    b_shape = (*b.shape[:-2], b.shape[-1], b.shape[-2]) if tb else b.shape
    out = _matmul_shape(node, a_shape, b_shape)
    operands: list[int | np.ndarray] = [0, 1]
    if b.value is not None and tb:  # pack the constant once, pre-transposed
        operands[1] = np.ascontiguousarray(np.swapaxes(b.value, -1, -2))
        tb = False
    if len(ins) > 2:
        operands.append(2)
    attrs = {"transpose_a": ta, "transpose_b": tb, "activation": _activation(node)}
    return Lowered("matmul", attrs, operands, [(out, a.dtype)])


@rule("FullConnection")
def full_connection(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    w = const(node, ins, 1, "weight")
    if w.ndim != 2:
        raise InvalidModelError(f"{_where(node)}: weight {w.shape}, expected (out, in)")
    if node.attrs.get("use_axis", False):
        axis = axis_of(node, int(node.attrs.get("axis", 1)), len(x.shape))
    else:
        axis = len(x.shape) - 1
    rows, k = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    if k != w.shape[1]:
        raise InvalidModelError(f"{_where(node)}: input {x.shape} flattens to K={k}, weight {w.shape}")
    operands: list[int | np.ndarray] = [0, np.ascontiguousarray(w.T)]
    if len(ins) > 2:
        operands.append(const(node, ins, 2, "bias").reshape(-1))
    attrs = {"transpose_a": False, "transpose_b": False, "activation": _activation(node),
             "a_shape": [rows, k], "y_shape": [rows, int(w.shape[0])]}
    return Lowered("matmul", attrs, operands, [((*x.shape[:axis], int(w.shape[0])), x.dtype)])


# ---- elementwise ------------------------------------------------------------------------

_BINARY = {"AddFusion": "add", "SubFusion": "sub", "MulFusion": "mul", "DivFusion": "div",
           "RealDiv": "div", "Maximum": "maximum", "Minimum": "minimum", "PowFusion": "pow"}
_UNARY = {"Sqrt": "sqrt", "Erf": "erf", "Neg": "neg", "Abs": "abs", "Log": "log",
          "Reciprocal": "reciprocal", "Floor": "floor", "Ceil": "ceil", "Square": "square",
          "Sin": "sin", "Cos": "cos", "LogicalNot": "logical_not"}
_COMPARE = {"Equal": "equal", "Less": "less", "Greater": "greater", "LessEqual": "less_equal",
            "GreaterEqual": "greater_equal", "NotEqual": "not_equal",
            "LogicalAnd": "logical_and", "LogicalOr": "logical_or"}


def _data_dtype(ins: Sequence[TensorInfo]) -> np.dtype:
    """The dtype of the first run-time input (constants follow the activations' dtype)."""
    for t in ins:
        if t.value is None:
            return t.dtype
    return np.result_type(*(t.dtype for t in ins))


@rule(*_BINARY)
def binary(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    if node.op == "PowFusion" and (node.attrs.get("scale", 1.0) != 1.0 or node.attrs.get("shift", 0.0) != 0.0):
        raise UnsupportedError(f"{_where(node)}: PowFusion with scale/shift")
    out = broadcast(node, ins[0].shape, ins[1].shape)
    dtype = _data_dtype(ins)
    op = _BINARY[node.op]
    if op == "div" and dtype.kind in "iu":  # integer Div truncates toward zero
        op = "trunc_div"
    attrs = {"op": op, "activation": _activation(node)}
    return Lowered("binary", attrs, [0, 1], [(out, dtype)])


@rule("AddN")
def add_n(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    if len(ins) == 1:
        return Lowered("", {}, [0], [(ins[0].shape, ins[0].dtype)])
    out = broadcast(node, *(t.shape for t in ins))
    return Lowered("add_n", {}, list(range(len(ins))), [(out, _data_dtype(ins))])


@rule(*_UNARY)
def unary(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    return Lowered("unary", {"op": _UNARY[node.op]}, [0], [(ins[0].shape, ins[0].dtype)])


@rule("ExpFusion")
def exp(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    base = float(node.attrs.get("base", -1.0))
    scale = float(node.attrs.get("scale", 1.0))
    shift = float(node.attrs.get("shift", 0.0))
    out = [(ins[0].shape, ins[0].dtype)]
    if (base, scale, shift) == (-1.0, 1.0, 0.0):
        return Lowered("unary", {"op": "exp"}, [0], out)
    return Lowered("exp_affine", {"base": base, "scale": scale, "shift": shift}, [0], out)


@rule(*_COMPARE)
def compare(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    out = broadcast(node, ins[0].shape, ins[1].shape)
    return Lowered("compare", {"op": _COMPARE[node.op]}, [0, 1], [(out, BOOL)])


@rule("Where", "Select")
def where(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    if len(ins) != 3:
        raise UnsupportedError(f"{_where(node)}: {len(ins)} inputs, the NPU runs the 3-input form")
    out = broadcast(node, *(t.shape for t in ins))
    return Lowered("where", {}, [0, 1, 2], [(out, _data_dtype(ins[1:]))])


@rule("Activation", "LeakyRelu", "Elu")
def activation(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    a = node.attrs
    if node.op == "LeakyRelu":
        attrs = {"activation_type": "LEAKY_RELU", "alpha": float(a.get("negative_slope", 0.01))}
    elif node.op == "Elu":
        attrs = {"activation_type": "ELU", "alpha": float(a.get("alpha", 1.0))}
    else:
        attrs = {"activation_type": str(a.get("activation_type", "NO_ACTIVATION")),
                 "alpha": float(a.get("alpha", 0.0)), "beta": float(a.get("beta", 0.0)),
                 "min_val": float(a.get("min_val", 0.0)), "max_val": float(a.get("max_val", 0.0)),
                 "approximate": bool(a.get("approximate", False))}
    return Lowered("activation", attrs, [0], [(ins[0].shape, ins[0].dtype)])


@rule("PReLUFusion")
def prelu(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Slope shared (one value) or per channel (axis 1, broadcast over the rest)."""
    x = ins[0]
    slope = const(node, ins, 1, "slope")
    if slope.size == 1:
        slope = slope.reshape(())
    elif len(x.shape) >= 2 and slope.size == x.shape[1]:
        slope = _per_channel(slope, len(x.shape))
    else:
        broadcast(node, x.shape, slope.shape)
    return Lowered("prelu", {}, [0, slope.astype(x.dtype)], [(x.shape, x.dtype)])


@rule("BroadcastTo")
def broadcast_to(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Target shape from input 1 (ONNX Expand: bidirectional) or the `shape` attr."""
    x = ins[0]
    target = ints(const(node, ins, 1, "shape")) if len(ins) > 1 else ints(node.attrs.get("shape", []))
    out = broadcast(node, x.shape, tuple(target))
    return Lowered("broadcast", {}, [0], [(out, x.dtype)])


@rule("TileFusion")
def tile(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    reps = ints(const(node, ins, 1, "multiples")) if len(ins) > 1 else ints(node.attrs.get("dims", []))
    if len(reps) != len(x.shape) or min(reps, default=1) < 0:
        raise InvalidModelError(f"{_where(node)}: multiples {reps} for shape {x.shape}")
    out = tuple(m * d for m, d in zip(reps, x.shape, strict=True))
    return Lowered("tile", {"multiples": reps}, [0], [(out, x.dtype)])


def _optional_bound(node: LiteNode, ins: Sequence[TensorInfo], i: int, name: str) -> float | None:
    if len(ins) > i:
        v = const(node, ins, i, name).reshape(-1)[0]
    else:
        v = node.attrs.get(name)
    return None if v is None or not np.isfinite(v) else float(v)


@rule("Clip")
def clip(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    attrs = {"min": _optional_bound(node, ins, 1, "min"), "max": _optional_bound(node, ins, 2, "max")}
    return Lowered("clip", attrs, [0], [(ins[0].shape, ins[0].dtype)])


@rule("Cast")
def cast(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Target from input 1 (a MindSpore TypeId, as MindSpore Lite passes it), else the
    declared output dtype."""
    if len(ins) > 1:
        target = lite_dtypes.to_numpy(int(const(node, ins, 1, "target TypeId").reshape(-1)[0]))
    elif out_types[0] is not None:
        target = out_types[0]
    else:
        raise InvalidModelError(f"{_where(node)}: no target type (input 1 or output dtype)")
    return Lowered("cast", {}, [0], [(ins[0].shape, np.dtype(target))])


# ---- normalisation and softmax ----------------------------------------------------------


@rule("Softmax", "LogSoftmax")
def softmax(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    axes = ints(node.attrs.get("axis", -1))
    if len(axes) != 1:
        raise UnsupportedError(f"{_where(node)}: softmax over axes {axes}, NPU takes one axis")
    axis = axis_of(node, axes[0], len(ins[0].shape))
    attrs = {"axis": axis, "log": node.op == "LogSoftmax"}
    return Lowered("softmax", attrs, [0], [(ins[0].shape, ins[0].dtype)])


@rule("LayerNormFusion")
def layer_norm(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    ndim = len(ins[0].shape)
    axis = axis_of(node, int(node.attrs.get("begin_norm_axis", -1)), ndim)
    attrs = {"begin_norm_axis": axis, "epsilon": float(node.attrs.get("epsilon", 1e-5))}
    return Lowered("layer_norm", attrs, list(range(min(len(ins), 3))), [(ins[0].shape, ins[0].dtype)])


def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    """A (C,) vector shaped (C, 1, ...) to broadcast over an N C ... tensor."""
    return np.ascontiguousarray(v.reshape((-1,) + (1,) * (ndim - 2)))


@rule("InstanceNorm")
def instance_norm(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    nd = len(ins[0].shape)
    operands: list[int | np.ndarray] = [0, _per_channel(const(node, ins, 1, "scale"), nd),
                                        _per_channel(const(node, ins, 2, "bias"), nd)]
    attrs = {"epsilon": float(node.attrs.get("epsilon", 1e-5))}
    return Lowered("instance_norm", attrs, operands, [(ins[0].shape, ins[0].dtype)])


def batchnorm_affine(node: LiteNode, ins: Sequence[TensorInfo]) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (scale, shift) of an inference BatchNorm / FusedBatchNorm, in float64.

    Inputs are (x, scale, bias, mean, var) or, for the 3-input BatchNorm, (x, mean, var).
    """
    eps = float(node.attrs.get("epsilon", 1e-5))
    if len(ins) >= 5:
        gamma, beta = (const(node, ins, i, n).astype(np.float64) for i, n in ((1, "scale"), (2, "bias")))
        mean, var = (const(node, ins, i, n).astype(np.float64) for i, n in ((3, "mean"), (4, "var")))
    elif len(ins) == 3:
        mean, var = (const(node, ins, i, n).astype(np.float64) for i, n in ((1, "mean"), (2, "var")))
        gamma, beta = np.ones_like(mean), np.zeros_like(mean)
    else:
        raise InvalidModelError(f"{_where(node)}: {len(ins)} inputs, expected 3 or 5")
    scale = gamma / np.sqrt(var + eps)
    return scale, beta - mean * scale


@rule("FusedBatchNorm", "BatchNorm")
def batch_norm(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    scale, shift = batchnorm_affine(node, ins)
    nd = len(ins[0].shape)
    dt = ins[0].dtype
    operands: list[int | np.ndarray] = [0, _per_channel(scale.astype(dt), nd), _per_channel(shift.astype(dt), nd)]
    return Lowered("scale_shift", {"activation": "NO_ACTIVATION"}, operands, [(ins[0].shape, dt)])


# ---- pooling -----------------------------------------------------------------------------


def _pool_axis(size: int, k: int, s: int, lo: int, hi: int, ceil: bool) -> tuple[int, int]:
    """Output length and the extra end padding its last window needs on one axis, as
    onnxruntime computes them: floor mode rounds span / stride toward zero, so a window
    less than a stride longer than the padded input still makes one output (over the part
    that exists), one up to two strides longer makes none (an empty output) and a longer
    one a negative length, which the caller refuses."""
    span = size + lo + hi - k
    if ceil:
        out = -(-span // s) + 1
        if (out - 1) * s >= size + lo:  # the last window must start inside the input or left pad
            out -= 1
    else:
        out = (span // s if span >= 0 else -(-span // s)) + 1
    return out, max((out - 1) * s + k - (size + lo + hi), 0)


def _pool_counts(size: int, out: int, k: int, s: int, lo: int, hi: int, include_pad: bool) -> np.ndarray:
    """How many elements each output position's window averages over, on one axis."""
    start = np.arange(out) * s - lo
    if include_pad:
        return np.minimum(start + k, size + hi) - start
    return np.minimum(start + k, size) - np.maximum(start, 0)


@rule("MaxPoolFusion", "AvgPoolFusion")
def pool(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    _check_nchw(node, x)
    n, c, h, w = x.shape
    if n and not c * h * w:  # onnxruntime's pools refuse it too
        raise InvalidModelError(f"{_where(node)}: input {x.shape} is empty: only the batch of "
                                "a pool's input may be 0")
    is_max = node.op == "MaxPoolFusion"
    act = _activation(node)
    if node.attrs.get("global", False):
        return Lowered("global_pool", {"mode": "max" if is_max else "avg", "activation": act},
                       [0], [((n, c, 1, 1), x.dtype)])
    kernel = _pair(node, "kernel_size", 1)
    stride = _pair(node, "strides", 1)
    pads = window_pads(node, (h, w), kernel, stride, [1, 1], "pad")
    ceil = node.attrs.get("round_mode", "FLOOR") == "CEIL"
    oh, extra_h = _pool_axis(h, kernel[0], stride[0], pads[0], pads[1], ceil)
    ow, extra_w = _pool_axis(w, kernel[1], stride[1], pads[2], pads[3], ceil)
    if oh < 0 or ow < 0:
        raise InvalidModelError(f"{_where(node)}: the {kernel[0]}x{kernel[1]} window (stride "
                                f"{stride[0]}x{stride[1]}, pads {pads}) overhangs input {x.shape} "
                                f"by two strides or more: output {oh}x{ow} (onnxruntime refuses "
                                "it too)")
    eff = [pads[0], pads[1] + extra_h, pads[2], pads[3] + extra_w]
    scratch = []
    hp = h + eff[0] + eff[1]
    if any(eff):
        scratch.append(("pad", (n, c, hp, w + eff[2] + eff[3]), x.dtype))
    if kernel[0] > 1 and kernel[1] > 1:  # separable window reduction (kernels.pool)
        scratch.append(("rows", (n, c, hp, ow), x.dtype))
    attrs = {"kernel": kernel, "stride": stride, "pads": eff, "activation": act,
             "scratch": [s[0] for s in scratch]}
    operands: list[int | np.ndarray] = [0]
    if not is_max:
        inc = bool(node.attrs.get("count_include_pad", False))
        ch = _pool_counts(h, oh, kernel[0], stride[0], pads[0], pads[1], inc)
        cw = _pool_counts(w, ow, kernel[1], stride[1], pads[2], pads[3], inc)
        operands.append((1.0 / np.outer(ch, cw)).astype(x.dtype))
    return Lowered("max_pool" if is_max else "avg_pool", attrs, operands, [((n, c, oh, ow), x.dtype)], scratch)


# ---- data movement ----------------------------------------------------------------------


@rule("Concat")
def concat(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    ndim = len(ins[0].shape)
    axis = axis_of(node, int(node.attrs.get("axis", 0)), ndim)
    for t in ins[1:]:
        if len(t.shape) != ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ins[0].shape, strict=True)) if i != axis):
            raise InvalidModelError(f"{_where(node)}: cannot concatenate {[t.shape for t in ins]} on axis {axis}")
    out = list(ins[0].shape)
    out[axis] = sum(t.shape[axis] for t in ins)
    return Lowered("concat", {"axis": axis}, list(range(len(ins))), [(tuple(out), _data_dtype(ins))])


@rule("Split")
def split(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axis = axis_of(node, int(node.attrs.get("axis", 0)), len(x.shape))
    count = len(node.outputs)
    sizes = ints(node.attrs.get("size_splits") or [])
    if len(ins) > 1:
        sizes = ints(const(node, ins, 1, "split sizes"))
    if not sizes:
        if x.shape[axis] % count:
            raise InvalidModelError(f"{_where(node)}: axis of {x.shape[axis]} not divisible in {count}")
        sizes = [x.shape[axis] // count] * count
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    if len(sizes) != count or sum(sizes) != x.shape[axis] or min(sizes) < 0:
        raise InvalidModelError(f"{_where(node)}: sizes {sizes} do not split {x.shape[axis]} into {count}")
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


def _slice_lowered(x: TensorInfo, specs: list[list[int | None]], out: Shape) -> Lowered:
    return Lowered("slice", {"slices": specs}, [0], [(out, x.dtype)])


@rule("SliceFusion")
def slice_fusion(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
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


@rule("StridedSlice")
def strided_slice(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
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
        for ax, b, e, s in zip(axes, begin, end, steps, strict=True):
            ax = axis_of(node, ax, ndim)
            specs[ax], out[ax] = _slice_spec(x.shape[ax], b, e, s)
        return _slice_lowered(x, specs, tuple(out))
    if a.get("ellipsis_mask", 0) or a.get("new_axis_mask", 0):
        raise UnsupportedError(f"{_where(node)}: ellipsis/new-axis masks")
    strides = ints(const(node, ins, 3, "strides")) if len(ins) > 3 else [1] * len(begin)
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


@rule("Transpose")
def transpose(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    ndim = len(x.shape)
    perm = ints(const(node, ins, 1, "perm")) if len(ins) > 1 else ints(node.attrs.get("perm", list(range(ndim))[::-1]))
    if sorted(perm) != list(range(ndim)):
        raise InvalidModelError(f"{_where(node)}: perm {perm} for rank {ndim}")
    return Lowered("transpose", {"perm": perm}, [0], [(tuple(x.shape[p] for p in perm), x.dtype)])


_PAD_MODES = {"CONSTANT": "constant", "REFLECT": "reflect", "SYMMETRIC": "symmetric", "EDGE": "edge"}


@rule("PadFusion")
def pad(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
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
        raise InvalidModelError(f"{_where(node)}: paddings of shape {raw.shape} for rank {ndim}")
    if min(min(p) for p in pads) < 0:
        raise UnsupportedError(f"{_where(node)}: negative paddings {pads}")
    mode = str(node.attrs.get("padding_mode", "CONSTANT"))
    if mode not in _PAD_MODES:
        raise UnsupportedError(f"{_where(node)}: padding_mode {mode!r}")
    out = tuple(d + b + e for d, (b, e) in zip(x.shape, pads, strict=True))
    attrs = {"pads": pads, "mode": _PAD_MODES[mode], "value": float(node.attrs.get("constant_value", 0.0))}
    return Lowered("pad", attrs, [0], [(out, x.dtype)])


@rule("Gather")
def gather(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    idx = const(node, ins, 1, "indices").astype(np.int64)
    axis = int(const(node, ins, 2, "axis").reshape(-1)[0]) if len(ins) > 2 else int(node.attrs.get("axis", 0))
    axis = axis_of(node, axis, len(x.shape))
    dim = x.shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise InvalidModelError(f"{_where(node)}: indices outside [-{dim}, {dim})")
    idx = np.where(idx < 0, idx + dim, idx).astype(np.int64)
    out = (*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])
    return Lowered("gather", {"axis": axis}, [0, idx], [(out, x.dtype)])


@rule("ReduceFusion")
def reduce(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    ndim = len(x.shape)
    axes = ints(const(node, ins, 1, "axes")) if len(ins) > 1 else ints(node.attrs.get("axes", []))
    axes = sorted({axis_of(node, a, ndim) for a in axes}) if axes else list(range(ndim))
    if node.attrs.get("reduce_to_end", False):
        axes = list(range(axes[0], ndim))
    mode = str(node.attrs.get("mode", "ReduceMean"))
    coeff = float(node.attrs.get("coeff", 1.0))
    if coeff not in (0.0, 1.0):
        raise UnsupportedError(f"{_where(node)}: coeff {coeff}")
    keep = bool(node.attrs.get("keep_dims", False))
    out = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
    return Lowered("reduce", {"axes": axes, "mode": mode}, [0], [(out, x.dtype)])


# ---- resize ------------------------------------------------------------------------------

_NEAREST_ROUNDING = {
    "ROUND_HALF_DOWN": lambda v: np.ceil(v - 0.5),
    "ROUND_HALF_UP": lambda v: np.floor(v + 0.5),
    "NORMAL": lambda v: np.floor(v + 0.5),
    "FLOOR": np.floor,
    "CEIL": np.ceil,
}


def _source_coords(out: int, size: int, scale: float, mode: str) -> np.ndarray:
    """Source coordinate of each output index for a coordinate_transform_mode (float64)."""
    i = np.arange(out, dtype=np.float64)
    if mode == "ALIGN_CORNERS":
        return i * ((size - 1) / (out - 1)) if out > 1 else np.zeros(out)
    if mode == "HALF_PIXEL":
        return (i + 0.5) / scale - 0.5
    return i / scale  # ASYMMETRIC


def _resize_axis(node: LiteNode, size: int, out: int, scale: float, method: str):
    mode = str(node.attrs.get("coordinate_transform_mode", "ASYMMETRIC"))
    x = _source_coords(out, size, scale, mode)
    if method == "NEAREST":
        rounding = _NEAREST_ROUNDING.get(str(node.attrs.get("nearest_mode", "NORMAL")))
        if rounding is None:
            raise UnsupportedError(f"{_where(node)}: nearest_mode {node.attrs['nearest_mode']!r}")
        return (np.clip(rounding(x), 0, size - 1).astype(np.int64),)
    x = np.clip(x, 0, size - 1)
    lo = np.floor(x).astype(np.int64)
    hi = np.minimum(lo + 1, size - 1)
    return lo, hi, x - lo


@rule("Resize")
def resize(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    """Output size from new_height/new_width, else the last constant input: integer sizes
    (N, C, H, W or H, W) or float scales (likewise)."""
    x = ins[0]
    _check_nchw(node, x)
    n, c, h, w = x.shape
    method = str(node.attrs.get("method", "LINEAR"))
    if method not in ("LINEAR", "NEAREST"):
        raise UnsupportedError(f"{_where(node)}: resize method {method!r}")
    oh, ow = int(node.attrs.get("new_height", 0)), int(node.attrs.get("new_width", 0))
    sh, sw = (oh / h, ow / w) if oh > 0 and ow > 0 else (0.0, 0.0)
    if not (oh > 0 and ow > 0):
        extra = [t for t in ins[1:] if t.value is not None and t.value.size]
        if not extra:
            raise UnsupportedError(f"{_where(node)}: output size is not a constant")
        v = extra[-1].value.reshape(-1)
        if v.size not in (2, 4):
            raise InvalidModelError(f"{_where(node)}: sizes/scales {v.tolist()}")
        if v.dtype.kind in "iu":
            oh, ow = int(v[-2]), int(v[-1])
            sh, sw = oh / h, ow / w
        else:
            sh, sw = float(v[-2]), float(v[-1])
            oh, ow = int(math.floor(h * sh)), int(math.floor(w * sw))
    hm = _resize_axis(node, h, oh, sh, method)
    wm = _resize_axis(node, w, ow, sw, method)
    operands: list[int | np.ndarray] = [0]
    if method == "NEAREST":
        operands += [hm[0], wm[0]]
    else:
        operands += [hm[0], hm[1], hm[2].astype(x.dtype).reshape(oh, 1), wm[0], wm[1], wm[2].astype(x.dtype)]
    scratch = [("rows", (n, c, oh, w), x.dtype)]
    if method == "LINEAR":
        scratch += [("top", (n, c, oh, w), x.dtype), ("left", (n, c, oh, ow), x.dtype)]
    attrs = {"method": method.lower(), "scratch": [s[0] for s in scratch]}
    return Lowered("resize", attrs, operands, [((n, c, oh, ow), x.dtype)], scratch)


# ---- reshape-like (aliases: no kernel, the output shares the input's buffer) ----------------


def _alias(x: TensorInfo, shape: Sequence[int]) -> Lowered:
    return Lowered("", {}, [0], [(tuple(int(d) for d in shape), x.dtype)])


@rule("Reshape")
def reshape(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    target = ints(const(node, ins, 1, "shape")) if len(ins) > 1 else ints(node.attrs.get("shape", []))
    shape = [x.shape[i] if d == 0 and i < len(x.shape) else d for i, d in enumerate(target)]
    total = math.prod(x.shape)
    if shape.count(-1) > 1:
        raise InvalidModelError(f"{_where(node)}: shape {target} has more than one -1")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = total // known if known else 0
    if math.prod(shape) != total:
        raise InvalidModelError(f"{_where(node)}: cannot reshape {x.shape} to {target}")
    return _alias(x, shape)


@rule("Flatten")
def flatten(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axis = int(node.attrs.get("axis", 1))
    axis = axis % len(x.shape) if axis < 0 else axis
    return _alias(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@rule("Squeeze")
def squeeze(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axes = ints(const(node, ins, 1, "axes")) if len(ins) > 1 else ints(node.attrs.get("axis", []))
    axes = {axis_of(node, a, len(x.shape)) for a in axes} or {i for i, d in enumerate(x.shape) if d == 1}
    if any(x.shape[a] != 1 for a in axes):
        raise InvalidModelError(f"{_where(node)}: cannot squeeze axes {sorted(axes)} of {x.shape}")
    return _alias(x, [d for i, d in enumerate(x.shape) if i not in axes])


@rule("Unsqueeze", "ExpandDims")
def unsqueeze(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    axes = ints(const(node, ins, 1, "axis")) if len(ins) > 1 else ints(node.attrs.get("axis", []))
    ndim = len(x.shape) + len(axes)
    axes = sorted(axis_of(node, a, ndim) for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return _alias(x, shape)


@rule("Dropout")
def dropout(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    if len(node.outputs) > 1:
        raise UnsupportedError(f"{_where(node)}: Dropout mask output")
    return _alias(ins[0], ins[0].shape)


# ---- nodes whose outputs are known from shapes alone -------------------------------------


@rule("Shape")
def shape_of(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    dt = out_types[0] or np.dtype(np.int32)
    value = np.asarray(ins[0].shape, dtype=dt)
    return Lowered("", {}, [], [(value.shape, value.dtype)], values=[value])


@rule("ConstantOfShape")
def constant_of_shape(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    shape = ints(const(node, ins, 0, "shape"))
    dt = out_types[0]
    if dt is None:
        dt = lite_dtypes.to_numpy(int(node.attrs.get("data_type", lite_dtypes.FLOAT32)))
    fill = np.asarray(node.attrs.get("value", [0.0])).reshape(-1)[0]
    value = np.full(shape, fill).astype(dt)
    return Lowered("", {}, [], [(value.shape, value.dtype)], values=[value])
