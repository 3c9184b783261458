"""Lite -> ONNX for neural-network layers: convolutions, pooling, dense, normalisation."""

from __future__ import annotations

import numpy as np

from converters.lite.padding import same_pads, same_total
from converters.onnx_ops.export_base import EXPORTERS, TO_NCHW, is_nhwc, unsupported

# Conv weight layouts MindSpore writes -> the permutation giving ONNX's OIHW (K = out channels).
TO_OIHW = {"NHWC": TO_NCHW, "KHWC": TO_NCHW, "CHWK": [3, 0, 1, 2], "HWCK": [3, 2, 0, 1],
           "HWKC": [2, 3, 0, 1], "CKHW": [1, 0, 2, 3]}
WEIGHTS_OHWI = ("NHWC", "KHWC")


def conv_attrs(a: dict) -> dict:
    """Lite kernel/stride/dilation/pad fields -> ONNX Conv-style attributes."""
    attrs = {"kernel_shape": list(a["kernel_size"]) or None,
             "strides": list(a.get("stride", [1, 1])) or None,
             "dilations": list(a.get("dilation", [1, 1])) or None,
             "group": a.get("group", 1)}
    attrs.update(pad_attrs(a.get("pad_mode", "PAD"), a.get("pad_list", [])))
    return attrs


def pad_attrs(pad_mode: str, pad_list: list[int]) -> dict:
    """Lite pad mode and [top, bottom, left, right] -> ONNX auto_pad / pads."""
    if pad_mode == "SAME":
        return {"auto_pad": "SAME_UPPER"}
    if pad_mode == "VALID":
        return {"auto_pad": "VALID"}
    if not pad_list:
        return {}
    top, bottom, left, right = pad_list
    return {"pads": [top, left, bottom, right]}


def _weight(ctx, node, name: str) -> str:
    """The conv weight in OIHW: other layouts MindSpore writes (OHWI, ...) are transposed."""
    index = node.inputs[1]
    perm = TO_OIHW.get(ctx.model.tensors[index].format)
    if perm is None or index in ctx.oihw:
        return name
    data = ctx.value(index)
    if data is None:
        return ctx.add("Transpose", [name], perm=perm, name=f"{node.name}/weight_oihw")
    return ctx.const(np.ascontiguousarray(data.transpose(perm)), f"{name}/oihw")


@EXPORTERS.register("Conv2DFusion")
def conv(ctx, node, ins, outs):
    if len(node.attrs.get("kernel_size", [])) != 2:
        raise unsupported(node, "a convolution that is not 2-D")
    w = _weight(ctx, node, ins[1])
    attrs = conv_attrs(node.attrs)
    dilation = list(node.attrs.get("dilation", [])) or [1, 1]
    if attrs.get("auto_pad") == "SAME_UPPER" and dilation != [1, 1]:
        # onnxruntime refuses SAME with dilation; explicit pads are the same windows
        pads = _explicit_same_pads(ctx, node, node.attrs["kernel_size"],
                                   node.attrs.get("stride", []), dilation)
        if pads is not None:
            del attrs["auto_pad"]
            attrs.update(pad_attrs("PAD", pads))
    ctx.add("Conv", [ins[0], w, *ins[2:]], outs, name=node.name, **attrs)


@EXPORTERS.register("Conv2dTransposeFusion")
def conv_transpose(ctx, node, ins, outs):
    weight = ins[1]
    if ctx.model.tensors[node.inputs[1]].format in WEIGHTS_OHWI:
        # MindSpore Lite's NHWC deconvolution weights are (C_in, H, W, C_out); ONNX wants
        # (C_in, C_out, H, W).
        data = ctx.value(node.inputs[1])
        weight = (ctx.add("Transpose", [weight], perm=TO_NCHW, name=f"{node.name}/weight")
                  if data is None else
                  ctx.const(np.ascontiguousarray(data.transpose(TO_NCHW)), f"{weight}/iohw"))
    attrs = conv_attrs(node.attrs)
    if any(node.attrs.get("output_paddings", [])):
        attrs["output_padding"] = list(node.attrs["output_paddings"])
    ctx.add("ConvTranspose", [ins[0], weight, *ins[2:]], outs, name=node.name, **attrs)


@EXPORTERS.register("FullConnection")
def full_connection(ctx, node, ins, outs):
    a = node.attrs
    axis = a.get("axis", 1) if a.get("use_axis", False) else 1
    x = ins[0]
    rank = ctx.rank(node.inputs[0])
    if axis != 1:
        raise unsupported(node, f"use_axis with axis={axis}")
    if rank != 2:
        x = ctx.add("Flatten", [x], axis=1, name=f"{node.name}/flatten")
    bias = ins[2:3] if a.get("has_bias", len(ins) > 2) else []
    ctx.add("Gemm", [x, ins[1], *bias], outs, name=node.name, transB=1)


@EXPORTERS.register("MatMulFusion")
def matmul(ctx, node, ins, outs):
    a = node.attrs
    ta, tb = a.get("transpose_a", False), a.get("transpose_b", False)
    ra, rb = ctx.rank(node.inputs[0]), ctx.rank(node.inputs[1])
    bias = ins[2:3]
    bias_rank = ctx.rank(node.inputs[2]) if bias else 1
    if ra == 2 and rb == 2 and bias_rank == 1:
        ctx.add("Gemm", [*ins[:2], *bias], outs, name=node.name,
                transA=int(ta) or None, transB=int(tb) or None)
        return
    a_name = _swap_last(ctx, node, ins[0], ra) if ta else ins[0]
    b_name = _swap_last(ctx, node, ins[1], rb) if tb else ins[1]
    if not bias:
        ctx.add("MatMul", [a_name, b_name], outs, name=node.name)
        return
    product = ctx.add("MatMul", [a_name, b_name], name=node.name)
    ctx.add("Add", [product, bias[0]], outs, name=f"{node.name}/bias")


def _swap_last(ctx, node, name: str, rank: int | None) -> str:
    if rank is None or rank < 2:
        raise unsupported(node, "a transposed operand of unknown rank")
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return ctx.add("Transpose", [name], perm=perm, name=f"{node.name}/transpose")


def _explicit_same_pads(ctx, node, kernel, strides, dilation=(1, 1), *,
                        only_where_cropped: bool = False) -> list[int] | None:
    """[top, bottom, left, right] of SAME padding as MindSpore Lite pads it, for the places
    where onnxruntime's SAME_UPPER would not do the same: a pool whose stride is past its
    kernel (`only_where_cropped`: it can need less than the input, and Lite pads 0 and starts
    at row 0 while onnxruntime crops the input), a dilated conv (which onnxruntime refuses).
    None when the input's spatial size is not known (or nothing is cropped)."""
    shape = ctx.model.tensors[node.inputs[0]].shape
    if len(shape) != 4:
        return None
    hw = shape[1:3] if is_nhwc(ctx, node) else shape[2:4]
    if any(not isinstance(d, int) or d < 1 for d in hw):
        return None
    axes = list(zip(hw, list(kernel), list(strides) or [1, 1], list(dilation), strict=True))
    if only_where_cropped and all(same_total(*axis) >= 0 for axis in axes):
        return None
    return [pad for axis in axes for pad in same_pads(*axis)]


def _pool(ctx, node, ins, outs, onnx_op: str, global_op: str, extra: dict):
    a = node.attrs
    if a.get("global", False):
        ctx.add(global_op, ins[:1], outs, name=node.name)
        return
    attrs = {"kernel_shape": list(a["kernel_size"]), "strides": list(a.get("strides", [])) or None}
    pad_mode, pads, ceil = a.get("pad_mode", "PAD"), a.get("pad", []), a.get("round_mode") == "CEIL"
    clamped = _explicit_same_pads(ctx, node, a["kernel_size"], a.get("strides", []),
                                  only_where_cropped=True) if pad_mode == "SAME" else None
    if clamped is not None:  # explicit pads give SAME's ceil(size / stride) with floor rounding
        pad_mode, pads, ceil = "PAD", clamped, False
    attrs.update(pad_attrs(pad_mode, pads))
    if ceil:
        if ctx.opset < 10:
            raise unsupported(node, "ceil rounding before opset 10")
        attrs["ceil_mode"] = 1
    ctx.add(onnx_op, ins[:1], outs, name=node.name, **attrs, **extra)


@EXPORTERS.register("MaxPoolFusion")
def max_pool(ctx, node, ins, outs):
    _pool(ctx, node, ins, outs, "MaxPool", "GlobalMaxPool", {})


@EXPORTERS.register("AvgPoolFusion")
def avg_pool(ctx, node, ins, outs):
    _pool(ctx, node, ins, outs, "AveragePool", "GlobalAveragePool", {})


@EXPORTERS.register("FusedBatchNorm")
def fused_batch_norm(ctx, node, ins, outs):
    a = node.attrs
    ctx.add("BatchNormalization", ins[:5], outs[:1], name=node.name,
            epsilon=float(a.get("epsilon", 1e-4)), momentum=float(a.get("momentum", 0.9)))


@EXPORTERS.register("InstanceNorm")
def instance_norm(ctx, node, ins, outs):
    ctx.add("InstanceNormalization", ins, outs, name=node.name,
            epsilon=float(node.attrs.get("epsilon", 0.0)))


@EXPORTERS.register("LayerNormFusion")
def layer_norm(ctx, node, ins, outs):
    """MindSpore Lite normalises over the axes from `begin_norm_axis` and applies gamma/beta
    whenever they are inputs (whatever `elementwise_affine` says: its converter writes False
    with both present), broadcast over the axes from `begin_params_axis`."""
    a = node.attrs
    rank = ctx.rank(node.inputs[0])
    axis, params_axis = a.get("begin_norm_axis", 0), a.get("begin_params_axis", 0)
    if rank is not None:
        axis, params_axis = axis % rank, params_axis % rank
    eps = float(a.get("epsilon", 1e-5))
    if len(ins) not in (1, 3):
        raise unsupported(node, f"layer norm with {len(ins)} inputs")
    if len(ins) == 3 and axis == params_axis and ctx.opset >= 17:
        ctx.add("LayerNormalization", ins, outs[:1], name=node.name, axis=axis, epsilon=eps)
        return
    if rank is None:
        raise unsupported(node, "layer norm of unknown rank without matching gamma/beta")
    dtype = ctx.np_dtype(node.inputs[0])
    axes = ctx.const(np.arange(axis, rank, dtype=np.int64), f"{node.name}/axes")
    mean = ctx.add("ReduceMean", [ins[0], axes], name=f"{node.name}/mean", keepdims=1) \
        if ctx.opset >= 18 else ctx.add("ReduceMean", ins[:1], name=f"{node.name}/mean",
                                         axes=list(range(axis, rank)), keepdims=1)
    centred = ctx.add("Sub", [ins[0], mean], name=f"{node.name}/centred")
    square = ctx.add("Mul", [centred, centred], name=f"{node.name}/square")
    var = ctx.add("ReduceMean", [square, axes], name=f"{node.name}/var", keepdims=1) \
        if ctx.opset >= 18 else ctx.add("ReduceMean", [square], name=f"{node.name}/var",
                                        axes=list(range(axis, rank)), keepdims=1)
    std = ctx.add("Sqrt", [ctx.add("Add", [var, ctx.const(np.array(eps, dtype),
                                                           f"{node.name}/eps")])])
    if len(ins) == 1:
        ctx.add("Div", [centred, std], outs[:1], name=node.name)
        return
    normed = ctx.add("Div", [centred, std], name=node.name)
    scaled = ctx.add("Mul", [normed, ins[1]], name=f"{node.name}/gamma")
    ctx.add("Add", [scaled, ins[2]], outs[:1], name=f"{node.name}/beta")


def _softmax_axis(ctx, node, axis: int) -> int:
    rank = ctx.rank(node.inputs[0])
    if ctx.opset < 13 and axis != -1 and (rank is None or axis != rank - 1):
        raise unsupported(node, "softmax over a non-last axis before opset 13")
    return axis


@EXPORTERS.register("Softmax")
def softmax(ctx, node, ins, outs):
    axes = node.attrs.get("axis", [-1]) or [-1]
    if len(axes) != 1:
        raise unsupported(node, "softmax over several axes")
    ctx.add("Softmax", ins, outs, name=node.name, axis=_softmax_axis(ctx, node, axes[0]))


@EXPORTERS.register("LogSoftmax")
def log_softmax(ctx, node, ins, outs):
    axis = _softmax_axis(ctx, node, node.attrs.get("axis", -1))
    ctx.add("LogSoftmax", ins, outs, name=node.name, axis=axis)


@EXPORTERS.register("PReLUFusion")
def prelu(ctx, node, ins, outs):
    slope = ctx.value(node.inputs[1])
    rank = ctx.rank(node.inputs[0])
    name = ins[1]
    if slope is not None and slope.ndim == 1 and slope.size > 1 and rank and rank > 2:
        # Lite's per-channel slope is a vector; ONNX broadcasts from the right.
        name = ctx.const(slope.reshape((-1,) + (1,) * (rank - 2)), f"{name}/per_channel")
    ctx.add("PRelu", [ins[0], name], outs, name=node.name)


@EXPORTERS.register("LRN")
def lrn(ctx, node, ins, outs):
    a = node.attrs
    # MindSpore's converter leaves norm_region empty; its runtime normalises across channels
    if a.get("norm_region", "") not in ("", "ACROSS_CHANNELS"):
        raise unsupported(node, f"LRN norm_region {a['norm_region']}")
    size = 2 * a.get("depth_radius", 0) + 1
    ctx.add("LRN", ins, outs, name=node.name, size=size, alpha=float(a.get("alpha", 0.0)) * size,
            beta=float(a.get("beta", 0.0)), bias=float(a.get("bias", 0.0)))


@EXPORTERS.register("ScaleFusion")
def scale(ctx, node, ins, outs):
    """y = x * scale (+ bias), scale/bias laid along x's axes from `axis` on."""
    rank = ctx.rank(node.inputs[0])
    scale_rank = ctx.rank(node.inputs[1])
    if rank is None or scale_rank is None:
        raise unsupported(node, "a scale of unknown rank")
    axis = node.attrs.get("axis", 0) % rank
    trailing = rank - axis - scale_rank
    factors = [_trailing_ones(ctx, node, i, name, trailing)
               for i, name in zip(node.inputs[1:], ins[1:], strict=True)]
    if len(factors) == 1:
        ctx.add("Mul", [ins[0], factors[0]], outs, name=node.name)
        return
    scaled = ctx.add("Mul", [ins[0], factors[0]], name=node.name)
    ctx.add("Add", [scaled, factors[1]], outs, name=f"{node.name}/bias")


@EXPORTERS.register("BiasAdd")
def bias_add(ctx, node, ins, outs):
    """Bias along the channel axis: last for NHWC (numpy broadcasting), axis 1 for NCHW."""
    rank = ctx.rank(node.inputs[0])
    bias = ins[1]
    if node.attrs.get("format", "NHWC") == "NCHW" and rank and rank > 2:
        bias = _trailing_ones(ctx, node, node.inputs[1], bias, rank - 2)
    ctx.add("Add", [ins[0], bias], outs, name=node.name)


def _trailing_ones(ctx, node, index: int, name: str, count: int) -> str:
    """Tensor `index` with `count` size-1 dims appended (to broadcast along leading axes)."""
    if count <= 0:
        return name
    data = ctx.value(index)
    if data is not None:
        return ctx.const(data.reshape(data.shape + (1,) * count), f"{name}/expanded")
    axes = ctx.const(np.arange(-count, 0, dtype=np.int64), f"{node.name}/axes")
    return ctx.add("Unsqueeze", [name, axes], name=f"{node.name}/expand")


@EXPORTERS.register("LpNormalization")
def lp_normalization(ctx, node, ins, outs):
    ctx.add("LpNormalization", ins, outs, name=node.name, axis=node.attrs.get("axis", -1),
            p=node.attrs.get("p", 2))


def integer_product(ctx, node, ins, outs):
    """A QUANT_DYNAMIC MatMulFusion / Conv2DFusion (codes and zero points in, int32 out) as
    ONNX MatMulInteger / ConvInteger."""
    if node.op == "MatMulFusion" and not (node.attrs.get("transpose_a") or node.attrs.get("transpose_b")):
        ctx.add("MatMulInteger", ins, outs, name=node.name)
    elif node.op == "Conv2DFusion" and len(node.attrs.get("kernel_size", [])) == 2 \
            and ctx.model.tensors[node.inputs[1]].format not in WEIGHTS_OHWI:
        ctx.add("ConvInteger", ins, outs, name=node.name, **conv_attrs(node.attrs))
    else:
        raise unsupported(node, "a dynamically quantized op other than MatMulInteger / ConvInteger")


@EXPORTERS.register("DynamicQuant")
def dynamic_quant(ctx, node, ins, outs):
    if len(outs) != 3 or node.attrs.get("symmetric", False):
        raise unsupported(node, "a DynamicQuant other than ONNX's DynamicQuantizeLinear")
    ctx.add("DynamicQuantizeLinear", ins, outs, name=node.name)
