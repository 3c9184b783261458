"""ONNX -> Lite for neural-network layers: convolutions, pooling, dense, normalisation."""

from __future__ import annotations

import dataclasses

import numpy as np

from converters.lite.padding import same_total
from converters.onnx_ops.import_base import (
    IMPORTERS,
    emit,
    float_input,
    intermediate,
    present,
    single_output,
    static_ints,
)
from converters.onnx_ops.registry import Unmappable

NO_ACT = "NO_ACTIVATION"


def pad_fields(attrs: dict, spatial: int = 2) -> tuple[str, list[int]]:
    """ONNX auto_pad/pads -> Lite (pad_mode, [top, bottom, left, right])."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad == "SAME_UPPER":
        return "SAME", [0, 0, 0, 0]
    if auto_pad == "VALID":
        return "VALID", [0, 0, 0, 0]
    if auto_pad != "NOTSET":
        raise Unmappable(f"auto_pad={auto_pad} has no Lite pad mode")
    pads = list(attrs.get("pads", [0] * 2 * spatial))
    return "PAD", [pads[0], pads[2], pads[1], pads[3]]


def check_window(kernel, a: dict) -> None:
    """Unmappable for window attributes ONNX forbids (non-positive kernel, stride or
    dilation, negative pads): onnxruntime's kernel refuses the node and says why."""
    for name, values, count, low in (("kernel_shape", kernel, 2, 1),
                                     ("strides", a.get("strides", [1, 1]), 2, 1),
                                     ("dilations", a.get("dilations", [1, 1]), 2, 1),
                                     ("pads", a.get("pads", [0, 0, 0, 0]), 4, 0)):
        if len(values) != count or min(values) < low:
            raise Unmappable(f"{name}={list(values)}: expected {count} values >= {low}")


def _split_pad(total: int, odd_at_end: bool) -> tuple[int, int]:
    """(begin, end) halves of one axis's padding, the odd one at the end or at the start."""
    small, large = total // 2, total - total // 2
    return (small, large) if odd_at_end else (large, small)


def same_as_pads(ctx, node, kernel, dilations=(1, 1)):
    """The node with its auto_pad SAME_LOWER or SAME_UPPER replaced by the pads ONNX derives
    from its input size: ceil(size / stride) outputs, the odd pad at the start for
    SAME_LOWER (Lite's SAME puts it at the end), at the end for SAME_UPPER. Static sizes
    only; a stride past its kernel that would crop the input (onnxruntime's negative pads)
    is Unmappable too."""
    mode = node.attrs["auto_pad"]
    sizes = spatial_sizes(ctx, node.inputs[0])
    if not all(isinstance(d, int) for d in sizes):
        raise Unmappable(f"auto_pad={mode} on an input of unknown size (its pads depend on it)")
    strides = node.attrs.get("strides", [1, 1])
    begin, end = [], []
    for axis, (size, k, st, d) in enumerate(zip(sizes, kernel, strides, dilations, strict=True)):
        total = same_total(size, k, st, d)
        if total < 0:
            raise Unmappable(f"auto_pad={mode} with stride {st} over kernel {k} on size {size} "
                             f"(axis {axis + 2}): onnxruntime crops the input")
        first, last = _split_pad(total, odd_at_end=mode == "SAME_UPPER")
        begin.append(first)
        end.append(last)
    attrs = {**node.attrs, "pads": begin + end, "auto_pad": "NOTSET"}
    return dataclasses.replace(node, attrs=attrs, _proto=None)


def _weight_shape(ctx, node) -> list[int]:
    shape = ctx.shape(node.inputs[1])
    if shape is None or len(shape) != 4:
        raise Unmappable("only 1-D and 2-D convolutions (3-D, 4-D weights) map to Lite")
    return static_ints(shape, "weight shape")


def _window_2d(attrs) -> dict:
    """1-D window attributes as 2-D ones over (1, L): height 1, no padding along it."""
    a = dict(attrs)
    for name in ("kernel_shape", "strides", "dilations"):
        if name in a:
            if len(a[name]) != 1:
                raise Unmappable(f"{name}={list(a[name])} for a 1-D window")
            a[name] = [1, int(a[name][0])]
    if "pads" in a:
        if len(a["pads"]) != 2:
            raise Unmappable(f"pads={list(a['pads'])} for a 1-D window")
        a["pads"] = [0, int(a["pads"][0]), 0, int(a["pads"][1])]
    return a


def as_2d(ctx, node, lower, weight: bool = False) -> list:
    """A 1-D conv or pooling (N, C, L) as its 2-D form over (N, C, 1, L): Unsqueeze, the
    2-D node `lower(ctx, node2d)` makes, Squeeze. A constant weight (O, I, K) becomes
    (O, I, 1, K)."""
    out = node.outputs[0]
    dtype = ctx.dtype(node.inputs[0])
    x4, y4 = (intermediate(ctx, f"{out}/{what}", dtype) for what in ("nc1l", "nc1l_out"))
    inputs = list(node.inputs)
    if weight:
        w = ctx.const_value(node.inputs[1])
        if w is None or w.ndim != 3:
            raise Unmappable("a 1-D convolution's weight is not a 3-D constant")
        inputs[1] = ctx.fresh_name(f"{out}/weight_2d")
        ctx.add_initializer(inputs[1], np.array(w[:, :, None, :]))
    inputs[0] = ctx.model.tensors[x4].name
    node2d = dataclasses.replace(node, inputs=tuple(inputs), attrs=_window_2d(node.attrs),
                                 outputs=(ctx.model.tensors[y4].name, *node.outputs[1:]),
                                 _proto=None)
    middle = lower(ctx, node2d)
    return [emit(ctx, node, "Unsqueeze", {"axis": [2]}, [node.inputs[0]], [x4]),
            *middle,
            emit(ctx, node, "Squeeze", {"axis": [2]}, [y4], [out])]


def spatial_sizes(ctx, name: str) -> tuple:
    """(H, W) of a 4-D value, ints or symbolic names; (None, None) when its shape or rank is
    unknown or not 4."""
    shape = ctx.shape(name)
    return tuple(shape[2:]) if shape is not None and len(shape) == 4 else (None, None)


def spatial_rank(ctx, node) -> int | None:
    """Spatial rank of a conv/pool node: from kernel_shape, else the weight or input rank."""
    kernel = node.attrs.get("kernel_shape")
    if kernel is not None:
        return len(kernel)
    rank = ctx.rank(node.inputs[1] if node.op_type in ("Conv", "ConvTranspose") else node.inputs[0])
    return None if rank is None else rank - 2


def _conv_attrs(ctx, node, w: list[int], weight_format: str) -> dict:
    """The fields Conv and ConvTranspose share; a constant weight is marked `weight_format`."""
    a = node.attrs
    check_window(a.get("kernel_shape", w[2:]), a)
    if list(a.get("kernel_shape", w[2:])) != w[2:]:
        raise Unmappable(f"kernel_shape={list(a['kernel_shape'])} does not match the weight's "
                         f"{w[2:]}")
    group = a.get("group", 1)
    if group < 1 or (node.op_type == "Conv" and w[0] % group):
        raise Unmappable(f"group={group} for {w[0]} output channels")
    pad_mode, pad_list = pad_fields(a)
    if ctx.const_value(node.inputs[1]) is not None:
        ctx.set_format(node.inputs[1], weight_format)
    return {"format": "NCHW", "kernel_size": list(a.get("kernel_shape", w[2:])),
            "stride": list(a.get("strides", [1, 1])),
            "dilation": list(a.get("dilations", [1, 1])),
            "pad_mode": pad_mode, "pad_list": pad_list, "group": a.get("group", 1),
            "activation_type": NO_ACT}


@IMPORTERS.register("Conv")
def conv(ctx, node):
    if spatial_rank(ctx, node) == 1:
        return as_2d(ctx, node, _conv_2d, weight=True)
    return _conv_2d(ctx, node)


def _conv_2d(ctx, node):
    w = _weight_shape(ctx, node)
    if node.attrs.get("auto_pad") == "SAME_LOWER":
        kernel = node.attrs.get("kernel_shape", w[2:])
        check_window(kernel, node.attrs)
        node = same_as_pads(ctx, node, kernel, node.attrs.get("dilations", [1, 1]))
    attrs = _conv_attrs(ctx, node, w, "KCHW")
    attrs.update(in_channel=w[1] * attrs["group"], out_channel=w[0])
    return [emit(ctx, node, "Conv2DFusion", attrs, [i for i in node.inputs if i])]


@IMPORTERS.register("ConvTranspose")
def conv_transpose(ctx, node):
    """An `output_shape` becomes the pads it implies (static input sizes only)."""
    w = _weight_shape(ctx, node)
    if "output_shape" in node.attrs:
        node = dataclasses.replace(node, attrs=_pads_of_output_shape(ctx, node, w), _proto=None)
    a = node.attrs
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise Unmappable(f"auto_pad={a['auto_pad']} has no exact Lite equivalent")
    attrs = _conv_attrs(ctx, node, w, "CKHW")
    output_padding = list(a.get("output_padding", [0, 0]))
    limit = [max(s, d) for s, d in zip(attrs["stride"], attrs["dilation"], strict=True)]
    if len(output_padding) != 2 or not all(0 <= p < m for p, m in zip(output_padding, limit,
                                                                        strict=False)):
        raise Unmappable(f"output_padding={output_padding}: expected 2 values in "
                         f"[0, max(stride, dilation)) = [0, {limit})")
    attrs.update(in_channel=w[0], out_channel=w[1] * attrs["group"],
                 output_paddings=output_padding)
    return [emit(ctx, node, "Conv2dTransposeFusion", attrs, [i for i in node.inputs if i])]


def _pads_of_output_shape(ctx, node, w) -> dict:
    """ConvTranspose's attributes with `output_shape` replaced by the pads ONNX derives from
    it: per axis, total = stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - out,
    the odd one at the end for SAME_UPPER, at the start otherwise (onnxruntime's rule)."""
    a = dict(node.attrs)
    sizes = spatial_sizes(ctx, node.inputs[0])
    wanted = list(a.pop("output_shape"))[-2:]
    if not all(isinstance(d, int) for d in sizes) or len(wanted) != 2 or w is None:
        raise Unmappable("output_shape on an input of unknown size (its pads depend on it)")
    kernel = a.get("kernel_shape", list(w[2:]))
    begin, end = [], []
    for i, (size, out) in enumerate(zip(sizes, wanted, strict=True)):
        total = (a.get("strides", [1, 1])[i] * (size - 1) + a.get("output_padding", [0, 0])[i]
                 + (kernel[i] - 1) * a.get("dilations", [1, 1])[i] + 1 - out)
        if total < 0:
            raise Unmappable(f"output_shape {wanted} beyond the full transposed size")
        first, last = _split_pad(total, odd_at_end=a.get("auto_pad") == "SAME_UPPER")
        begin.append(first)
        end.append(last)
    a["pads"], a["auto_pad"] = begin + end, "NOTSET"
    return a


@IMPORTERS.register("Gemm")
def gemm(ctx, node):
    """alpha * A' B' + beta * C. One dense node when alpha = beta = 1 and C is a bias vector
    (or absent); otherwise a product, then the scale and the sum as their own nodes (a
    constant B or C takes its factor at import, so B stays a constant weight)."""
    a = node.attrs
    trans_a, trans_b = bool(a.get("transA", 0)), bool(a.get("transB", 0))
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    bias = present(node, 2) if beta != 0 else ""  # beta 0: C is never read
    b_shape, c_shape = ctx.shape(node.inputs[1]), ctx.shape(bias) if bias else None
    n = None if b_shape is None else b_shape[0 if trans_b else 1]
    if c_shape is not None:
        a_shape = ctx.shape(node.inputs[0])
        m = a_shape[1 if trans_a else 0] if a_shape is not None and len(a_shape) == 2 else None
        _check_gemm_bias(c_shape, m, n)
    fused_bias = not bias or (beta == 1.0 and c_shape is not None and len(c_shape) == 1
                              and isinstance(n, int) and c_shape[0] == n)
    if alpha == 1.0 and fused_bias:
        inputs = [i for i in node.inputs[:3] if i] if bias else node.inputs[:2]
        if not trans_a and trans_b:
            attrs = {"has_bias": bool(bias), "use_axis": False, "activation_type": NO_ACT}
            return [emit(ctx, node, "FullConnection", attrs, inputs)]
        attrs = {"transpose_a": trans_a, "transpose_b": trans_b, "activation_type": NO_ACT}
        return [emit(ctx, node, "MatMulFusion", attrs, inputs)]
    dtype = float_input(ctx, node, "a Gemm with alpha/beta other than 1 or a C other than a "
                                   "bias vector")
    out, nodes = node.outputs[0], []
    weight, b_value = node.inputs[1], ctx.const_value(node.inputs[1])
    if alpha != 1.0 and b_value is not None:  # B stays a constant weight
        weight, alpha = ctx.const(f"{out}/alpha_B", b_value * dtype.type(alpha)), 1.0
    chain = [("MatMulFusion", {"transpose_a": trans_a, "transpose_b": trans_b,
                               "activation_type": NO_ACT}, [node.inputs[0], weight])]
    if alpha != 1.0:
        chain.append(("MulFusion", {"activation_type": NO_ACT},
                      [ctx.const(f"{out}/alpha", np.array(alpha, dtype))]))
    if bias:
        term, c_value = bias, ctx.const_value(bias)
        if beta != 1.0 and c_value is not None:
            term = ctx.const(f"{out}/beta_C", c_value * dtype.type(beta))
        elif beta != 1.0:
            term = intermediate(ctx, f"{out}/beta_C", dtype)
            factor = ctx.const(f"{out}/beta", np.array(beta, dtype))
            nodes.append(emit(ctx, node, "MulFusion", {"activation_type": NO_ACT},
                              [bias, factor], [term]))
        chain.append(("AddFusion", {"activation_type": NO_ACT}, [term]))
    value: str | int = ""
    for k, (op, attrs, operands) in enumerate(chain):  # each link reads the one before
        target = out if k == len(chain) - 1 else intermediate(ctx, f"{out}/{op}", dtype)
        nodes.append(emit(ctx, node, op, attrs, ([value] if k else []) + operands, [target]))
        value = target
    return nodes


def _check_gemm_bias(c_shape: tuple, m, n) -> None:
    """Gemm's C broadcasts one way, to (M, N): a C the product would have to grow to (a
    numpy sum would) stays with onnxruntime, which refuses it."""
    known = [d if isinstance(d, int) and d >= 0 else None for d in (m, n)]
    if len(c_shape) > 2 or any(isinstance(c, int) and c not in (1, d) and d is not None
                               for c, d in zip(c_shape, known[2 - len(c_shape):],
                                               strict=True)):
        raise Unmappable(f"C of shape {tuple(c_shape)} does not broadcast to the product's "
                         f"(M, N) = ({m}, {n})")


@IMPORTERS.register("MatMul")
def matmul(ctx, node):
    """A 1-D operand becomes a matrix (A a row, B a column) and the product loses that dim
    again, as ONNX (numpy) defines it."""
    attrs = {"transpose_a": False, "transpose_b": False, "activation_type": NO_ACT}
    ranks = [ctx.rank(name) for name in node.inputs[:2]]
    if 1 not in ranks:
        return [emit(ctx, node, "MatMulFusion", attrs, node.inputs)]
    if None in ranks:
        raise Unmappable("a 1-D operand beside one of unknown rank")
    out, dtype = node.outputs[0], ctx.dtype(node.inputs[0])
    nodes, inputs = [], list(node.inputs[:2])
    for i, (axis, what) in enumerate(((0, "row"), (1, "column"))):
        if ranks[i] != 1:
            continue
        value = ctx.const_value(inputs[i])
        if value is not None:
            inputs[i] = ctx.const(f"{out}/{what}", np.expand_dims(value, axis))
            continue
        matrix = intermediate(ctx, f"{out}/{what}", dtype)
        nodes.append(emit(ctx, node, "Unsqueeze", {"axis": [axis]}, [inputs[i]], [matrix]))
        inputs[i] = matrix
    rank = max(2, *ranks)  # the product's
    added = [rank - 2] * (ranks[0] == 1) + [rank - 1] * (ranks[1] == 1)
    product = intermediate(ctx, f"{out}/product", dtype)
    return [*nodes, emit(ctx, node, "MatMulFusion", attrs, inputs, [product]),
            emit(ctx, node, "Squeeze", {"axis": added}, [product], [out])]


@IMPORTERS.register("BatchNormalization")
def batch_norm(ctx, node):
    a = node.attrs
    single_output(ctx, node)
    if a.get("training_mode", 0) or not a.get("spatial", 1):
        raise Unmappable("training mode / non-spatial batch norm")
    attrs = {"epsilon": float(a.get("epsilon", 1e-5)), "momentum": float(a.get("momentum", 0.9)),
             "mode": 0}
    return [emit(ctx, node, "FusedBatchNorm", attrs, node.inputs, node.outputs[:1])]


@IMPORTERS.register("InstanceNormalization")
def instance_norm(ctx, node):
    attrs = {"epsilon": float(node.attrs.get("epsilon", 1e-5))}
    return [emit(ctx, node, "InstanceNorm", attrs, node.inputs)]


@IMPORTERS.register("LayerNormalization", since=17)
def layer_norm(ctx, node):
    single_output(ctx, node)
    if not present(node, 2):
        raise Unmappable("LayerNormalization without bias B")
    if node.attrs.get("stash_type", 1) != 1:
        raise Unmappable("stash_type other than float")
    axis = node.attrs.get("axis", -1)
    attrs = {"begin_norm_axis": axis, "begin_params_axis": axis,
             "epsilon": float(node.attrs.get("epsilon", 1e-5)), "elementwise_affine": True}
    return [emit(ctx, node, "LayerNormFusion", attrs, node.inputs, node.outputs[:1])]


def _softmax(ctx, node, op: str, axis_attr):
    """Softmax / LogSoftmax over `axis`. Before opset 13 the input is coerced to 2-D at
    `axis` (one softmax over all the trailing dims): over the last axis that is the per-axis
    form; otherwise the trailing dims are flattened (Reshape to [0] * axis + [-1], a 0
    keeping its dim), normalised, and the result reshaped back to Shape(x)."""
    default = 1 if ctx.opset < 13 else -1
    axis = node.attrs.get("axis", default)
    rank = ctx.rank(node.inputs[0])
    if ctx.opset >= 13 or axis == -1 or (rank is not None and axis == rank - 1):
        return [emit(ctx, node, op, {"axis": axis_attr(axis)}, node.inputs)]
    if rank is None and axis < 0:
        raise Unmappable(f"pre-13 softmax at axis {axis} of an input of unknown rank")
    if rank is not None and not -rank <= axis < rank:
        raise Unmappable(f"pre-13 softmax at axis {axis} of an input of rank {rank}")
    if rank is not None:
        axis %= rank
    out, dtype = node.outputs[0], ctx.dtype(node.inputs[0])
    shape = intermediate(ctx, f"{out}/shape", np.dtype(np.int64))
    flat, soft = (intermediate(ctx, f"{out}/{what}", dtype) for what in ("flat", "normalised"))
    target = ctx.const(f"{out}/coerced", np.array([0] * axis + [-1], np.int32))
    return [emit(ctx, node, "Shape", {}, node.inputs[:1], [shape]),
            emit(ctx, node, "Reshape", {}, [node.inputs[0], target], [flat]),
            emit(ctx, node, op, {"axis": axis_attr(-1)}, [flat], [soft]),
            emit(ctx, node, "Reshape", {}, [soft, shape], [out])]


@IMPORTERS.register("Softmax")
def softmax(ctx, node):
    return _softmax(ctx, node, "Softmax", lambda axis: [axis])


@IMPORTERS.register("LogSoftmax")
def log_softmax(ctx, node):
    return _softmax(ctx, node, "LogSoftmax", lambda axis: axis)


@IMPORTERS.register("LRN")
def lrn(ctx, node):
    # ONNX divides alpha by `size` and sums over `size` channels; Lite (as TF) takes a radius.
    a = node.attrs
    size = a["size"]
    if size % 2 == 0:
        raise Unmappable("even LRN size has no radius")
    attrs = {"depth_radius": (size - 1) // 2, "bias": float(a.get("bias", 1.0)),
             "alpha": float(a.get("alpha", 1e-4)) / size, "beta": float(a.get("beta", 0.75)),
             "norm_region": "ACROSS_CHANNELS"}
    return [emit(ctx, node, "LRN", attrs, node.inputs)]


@IMPORTERS.register("LpNormalization")
def lp_normalization(ctx, node):
    attrs = {"axis": node.attrs.get("axis", -1), "p": node.attrs.get("p", 2)}
    return [emit(ctx, node, "LpNormalization", attrs, node.inputs)]
