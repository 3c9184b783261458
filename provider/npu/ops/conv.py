"""Conv2DFusion and Conv2dTransposeFusion (depthwise convs included): capability, rules,
numpy kernels (im2col / col2im plus one batched GEMM) and the native lowering.

The rules pack the weights (as Packed operands, made when the Program is built): conv as
(G, O/G, C/G*KH*KW), in the direct kernel's order when the NPU computes it with its direct
convolution (conv_weights), transposed conv as (G, C/G, O/G*KH*KW) -> used transposed.
Scratch buffers are planned by the compiler and passed after the real outputs, named by
attrs["scratch"].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu.ops import gemm, parallel
from provider.npu.ops.activation import FUSED, fused
from provider.npu.ops.buffers import pad_into, scratch
from provider.npu.ops.common import (
    F32,
    FLOAT,
    NCHW,
    PAD_MODE,
    Lowered,
    Packed,
    TensorInfo,
    activation_of,
    all_checks,
    check_nchw,
    clamp_strides,
    const,
    describe,
    enum_check,
    ints,
    pair,
    two_d,
    window_pads,
)
from provider.npu.ops.conv_weights import (
    DIRECT_MAX_TAPS,
    KERNEL_CODES,
    blocked_conv,
    blocked_fits,
    blocked_weights,
    direct_blocks,
    direct_conv,
    gemm_weights,
)
from provider.npu.ops.native_builder import StepBuilder, f32, fits_int32
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot


def windows(xp: np.ndarray, kernel, stride, dilation, out_hw) -> np.ndarray:
    """Read-only (N, G, C/G, KH, KW, OH, OW) view of every conv window of padded xp laid
    out (N, G, C/G, H, W)."""
    n, g, cg = xp.shape[:3]
    sn, sg, sc, sh, sw = xp.strides
    shape = (n, g, cg, kernel[0], kernel[1], out_hw[0], out_hw[1])
    strides = (sn, sg, sc, sh * dilation[0], sw * dilation[1], sh * stride[0], sw * stride[1])
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def _shifted_cols(x: np.ndarray, pad: np.ndarray, cols: np.ndarray, attrs: dict, oh: int) -> None:
    """Stride-1 im2col over the padded image flattened per channel (x, pad and cols may be
    a channel block of the whole): every tap is one contiguous shifted slice of length
    OH*Wp (long copies instead of OH short rows); the GEMM then computes Wp - OW extra
    "wrap-around" columns per row, which the epilogue drops. The pad buffer has one spare
    row so the last tap's slice fits. cols is (N, C, KH*KW, OH*Wp)."""
    kh, kw = attrs["kernel"]
    dh, dw = attrs["dilation"]
    n, c, hp, wp = pad.shape
    flat = pad_into(x, pad, attrs["pads"], 0.0).reshape(n, c, hp * wp)  # -1: ambiguous if empty
    span = oh * wp
    for i in range(kh):
        for j in range(kw):
            off = i * dh * wp + j * dw
            np.copyto(cols[:, :, i * kw + j], flat[:, :, off:off + span])


def _window_cols(x: np.ndarray, pad: np.ndarray | None, cols: np.ndarray, attrs: dict,
                 out_hw) -> None:
    """General im2col: x (N, G, C/G, H, W), pad its padded buffer or None, cols (N, G,
    C/G, KH, KW, OH, OW); all three may be a block of groups or of channels per group."""
    xp = x if pad is None else pad_into(x, pad, attrs["pads"], 0.0)
    np.copyto(cols, windows(xp, attrs["kernel"], attrs["stride"], attrs["dilation"], out_hw))


def _axis(axis: int, part: slice) -> tuple:
    """Index picking `part` along `axis` (1 = groups, 2 = channels in each group) of arrays
    laid out (N, G, channels, ...)."""
    return (slice(None),) * axis + (part,)


def _epilogue(w: np.ndarray, operand: np.ndarray, target: np.ndarray, out: np.ndarray,
              bias: np.ndarray | None, residual: np.ndarray | None, attrs: dict,
              crop: tuple[int, int] | None) -> None:
    """out = activation(w @ operand [+ bias] [+ residual]) on (N, G, rows, OH*OW) blocks;
    the GEMM goes to `target`: out itself, or (shifted form, crop = (OH, OW)) a buffer
    OH x Wp wide whose first OW columns of each row are copied into out."""
    gemm.matmul(w, operand, target)
    if crop is not None:
        oh, ow = crop
        lead = out.shape[:3]
        wp = target.shape[-1] // oh  # not -1 in the reshape: ambiguous for an empty block
        np.copyto(out.reshape(*lead, oh, ow), target.reshape(*lead, oh, wp)[..., :ow],
                  casting="same_kind")
    if bias is not None:
        out += bias
    if residual is not None:
        out += residual
    fused(out, attrs)


@register("conv2d")
def conv2d(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW conv: inputs x, packed weight (G, O/G, K; in the direct kernel's order when
    attrs["weights"] == "direct", see conv_weights) [, bias (O, 1)] [, residual (the
    output's shape, added before the activation when attrs["residual"])]; attrs kernel,
    stride, dilation, pads [top, bottom, left, right], group, activation, scratch: (pad,
    cols, wide) for the shifted stride-1 form, else (pad, cols) for im2col, or none for a
    pointwise conv.

    Large convs are split over the NPU's cores (ops.parallel): im2col by input channel
    (or group), then GEMM + bias + residual + activation by block of output channels, or of
    groups when each group has few (each block's epilogue runs while its rows are in cache).
    A conv that is not split takes the direct calls, with no per-block views.
    """
    x, w = inputs[0], gemm_weights(inputs[1], attrs)
    y = outputs[0]
    s = scratch(outputs, attrs)
    n, o, oh, ow = y.shape
    c, h, wd = x.shape[1:]
    g = attrs["group"]
    og, k = o // g, w.shape[-1]
    kh, kw = attrs["kernel"]
    wide = s.get("wide")
    if "cols" in s:
        hw = oh * (wide.shape[-1] // oh if wide is not None else ow)
        cost = n * c * kh * kw * hw / parallel.ELEMENTS_PER_US
        if wide is not None:
            pad, cols = s["pad"], s["cols"].reshape(n, c, kh * kw, hw)
            parts = parallel.blocks(c, cost)
            if len(parts) == 1:
                _shifted_cols(x, pad, cols, attrs, oh)
            else:
                parallel.run(lambda ch: _shifted_cols(x[:, ch], pad[:, ch], cols[:, ch], attrs, oh),
                             parts)
        else:  # by whole groups, or by channel when there is one group
            x5 = x.reshape(n, g, c // g, h, wd)
            pad = s.get("pad")
            pad5 = None if pad is None else pad.reshape(n, g, c // g, *pad.shape[2:])
            cols = s["cols"].reshape(n, g, c // g, kh, kw, oh, ow)
            parts = parallel.blocks(g if g > 1 else c, cost)
            if len(parts) == 1:
                _window_cols(x5, pad5, cols, attrs, (oh, ow))
            else:
                def block(part: slice) -> None:
                    at = _axis(1 if g > 1 else 2, part)
                    _window_cols(x5[at], None if pad5 is None else pad5[at], cols[at], attrs, (oh, ow))
                parallel.run(block, parts)
        operand = s["cols"].reshape(n, g, k, hw)
    else:  # 1x1, stride 1, no padding, fp32: the input already is the GEMM operand
        hw = oh * ow
        operand = x.reshape(n, g, k, hw)
    y3 = y.reshape(n, g, og, oh * ow)
    target = y3 if wide is None else wide.reshape(n, g, og, hw)
    extra = inputs[2:]
    residual = extra[-1].reshape(n, g, og, oh * ow) if attrs.get("residual") else None
    bias = extra[0].reshape(g, og, 1) if len(extra) > (residual is not None) else None
    crop = None if wide is None else (oh, ow)
    by_group = g > 1 and og < 16  # depthwise-like: too few rows per group to split
    cost = n * o * k * hw / parallel.MACS_PER_US
    parts = parallel.blocks(g, cost) if by_group else parallel.blocks(og, cost, align=8)
    if len(parts) == 1:
        _epilogue(w, operand, target, y3, bias, residual, attrs, crop)
        return

    def block(part: slice) -> None:
        at = _axis(1 if by_group else 2, part)
        _epilogue(w[at[1:]], operand[at] if by_group else operand, target[at], y3[at],
                  None if bias is None else bias[at[1:]],
                  None if residual is None else residual[at], attrs, crop)

    parallel.run(block, parts)


@register("deconv2d")
def deconv2d(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW transposed conv: inputs x, packed weight (G, O/G*KH*KW, C/G) [, bias (O, 1)];
    attrs kernel, stride, dilation, pads, group, activation, scratch (cols, full).

    cols = W^T x per group, then each of the KH*KW taps is added into the full-size output
    (col2im), which is cropped by the pads.
    """
    x, w = inputs[0], inputs[1]
    y = outputs[0]
    s = scratch(outputs, attrs)
    n, c, h, wd = x.shape
    _, o, oh, ow = y.shape
    g = attrs["group"]
    kh, kw = attrs["kernel"]
    sh, sw = attrs["stride"]
    dh, dw = attrs["dilation"]
    top, _, left, _ = attrs["pads"]
    cols = s["cols"].reshape(n, g, o // g * kh * kw, h * wd)
    gemm.matmul(w, x.reshape(n, g, c // g, h * wd), cols)
    taps = cols.reshape(n, o, kh, kw, h, wd)
    full = s["full"]
    full.fill(0.0)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dh, j * dw
            full[:, :, r0:r0 + (h - 1) * sh + 1:sh, c0:c0 + (wd - 1) * sw + 1:sw] += taps[:, :, i, j]
    np.copyto(y, full[:, :, top:top + oh, left:left + ow], casting="same_kind")
    if len(inputs) > 2:
        y.reshape(n, o, oh * ow)[...] += inputs[2]
    fused(y, attrs)


# ---- rules -------------------------------------------------------------------------------

_CONV = all_checks(FUSED, NCHW, PAD_MODE, two_d("stride"), two_d("dilation"))


@define("Conv2DFusion", dtypes=FLOAT, check=_CONV, const_inputs=(1, 2), rank=(4, 4),
        kernels=("conv2d",), note="NCHW, 2-D, pad_mode PAD/SAME/VALID")
def conv2d_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    check_nchw(node, x)
    w = const(node, ins, 1, "weight")
    if w.ndim != 4:
        raise UnsupportedError(f"{describe(node)}: weight rank {w.ndim}, expected OIHW")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = int(node.attrs.get("group", 1)) or 1
    if c != cg * g or o % g:
        raise InvalidModelError(f"{describe(node)}: {c} input channels, weight {w.shape}, group {g}")
    kernel = [kh, kw]
    stride = pair(node, "stride", 1)
    dilation = pair(node, "dilation", 1)
    pads = window_pads(node, (h, wd), kernel, stride, dilation, "pad_list")
    oh = (h + pads[0] + pads[1] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (wd + pads[2] + pads[3] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    if oh <= 0 or ow <= 0:  # onnxruntime refuses a conv without output positions too
        raise InvalidModelError(f"{describe(node)}: the {kh}x{kw} kernel (stride {stride}, "
                                f"dilation {dilation}, pads {pads}) fits no position of input "
                                f"{x.shape}: output {oh}x{ow}")
    hp, wp = h + pads[0] + pads[1], wd + pads[2] + pads[3]
    stride = clamp_strides(stride, (oh, ow), (hp, wp))
    order = None  # the stored weights' order for a kernel of the NPU's own (conv_weights)
    if x.dtype == F32 and blocked_conv(c, o, g, kh, kw, h, wd, stride):
        order = "blocked"
    elif x.dtype == F32 and direct_conv(cg, g, kh, kw, stride[1], dilation[1], oh, ow):
        order = "direct"
    operands: list[int | np.ndarray | Packed] = [0, Packed(
        (g, o // g, cg * kh * kw), w.dtype, lambda: _conv_weights(w, g, order))]
    if len(ins) > 2:
        operands.append(const(node, ins, 2, "bias").reshape(o, 1))
    planned = []
    # The shifted stride-1 form (_shifted_cols) copies long contiguous taps but makes the
    # GEMM compute Wp - OW wasted columns per row: worth it unless that waste is over 1/8 of
    # a big GEMM (ResNet's 7x7 maps: im2col is ~25% faster there).
    wasted = (wp - ow) * 8 > ow and o * cg * kh * kw * oh * wp >= 1 << 21
    if stride == [1, 1] and kh * kw > 1 and not wasted:
        planned = [("pad", (n, c, hp + 1, wp), x.dtype), ("cols", (n, g, cg * kh * kw, oh * wp), F32),
                   ("wide", (n, o, oh * wp), F32)]
    elif any(pads) or kernel != [1, 1] or stride != [1, 1] or x.dtype != F32:
        if any(pads):
            planned.append(("pad", (n, c, hp, wp), x.dtype))
        planned.append(("cols", (n, g, cg * kh * kw, oh * ow), F32))
    attrs = {"kernel": kernel, "stride": stride, "dilation": dilation, "pads": pads, "group": g,
             "activation": activation_of(node), "scratch": [s[0] for s in planned]}
    if order:
        attrs["weights"] = order
    return Lowered("conv2d", attrs, operands, [((n, o, oh, ow), x.dtype)], planned)


def _conv_weights(w: np.ndarray, g: int, order: str | None) -> np.ndarray:
    """OIHW weights as the conv step stores them: GEMM matrices (G, O/G, K), or in the
    direct or the blocked kernel's order."""
    o, cg, kh, kw = w.shape
    gemm = np.ascontiguousarray(w.reshape(g, o // g, cg * kh * kw))
    if order == "blocked":
        return blocked_weights(gemm, (kh, kw))
    return direct_blocks(gemm) if order == "direct" else gemm


@define("Conv2dTransposeFusion", dtypes=FLOAT,
        check=all_checks(_CONV, enum_check("pad_mode", ("PAD", "VALID"), "PAD")),
        const_inputs=(1, 2), rank=(4, 4), kernels=("deconv2d",), note="NCHW, 2-D, pad_mode PAD/VALID")
def deconv2d_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    check_nchw(node, x)
    w = const(node, ins, 1, "weight")
    n, c, h, wd = x.shape
    if w.ndim != 4 or w.shape[0] != c:
        raise InvalidModelError(f"{describe(node)}: weight {w.shape} for {c} input channels (IOHW)")
    _, og, kh, kw = w.shape
    g = int(node.attrs.get("group", 1)) or 1
    stride = pair(node, "stride", 1)
    dilation = pair(node, "dilation", 1)
    pads = window_pads(node, (h, wd), [kh, kw], stride, dilation, "pad_list")
    extra = ints(node.attrs.get("output_paddings") or [0, 0])
    full_h = (h - 1) * stride[0] + (kh - 1) * dilation[0] + 1 + extra[0]
    full_w = (wd - 1) * stride[1] + (kw - 1) * dilation[1] + 1 + extra[1]
    oh, ow = full_h - pads[0] - pads[1], full_w - pads[2] - pads[3]
    if oh <= 0 or ow <= 0:  # as onnxruntime, which refuses them too
        raise InvalidModelError(f"{describe(node)}: pads {pads} leave output {oh}x{ow} of input "
                                f"{x.shape}")
    o = og * g

    def packed() -> np.ndarray:
        return np.ascontiguousarray(w.reshape(g, c // g, og * kh * kw).transpose(0, 2, 1))

    operands: list[int | np.ndarray | Packed] = [0, Packed((g, og * kh * kw, c // g), w.dtype, packed)]
    if len(ins) > 2:
        operands.append(const(node, ins, 2, "bias").reshape(o, 1))
    planned = [("cols", (n, g, og * kh * kw, h * wd), F32), ("full", (n, o, full_h, full_w), F32)]
    attrs = {"kernel": [kh, kw], "stride": stride, "dilation": dilation, "pads": pads, "group": g,
             "activation": activation_of(node), "scratch": ["cols", "full"]}
    return Lowered("deconv2d", attrs, operands, [((n, o, oh, ow), x.dtype)], planned)


# ---- native lowering ---------------------------------------------------------------------


@native("conv2d", op="conv")
def _conv2d_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A conv (or, one channel per group, a depthwise conv) on the C library's kernels."""
    x, w, y = ins[0], ins[1], outs[0]
    residual = attrs.get("residual", False)
    bias = ins[2] if len(ins) > 2 + residual else None
    res = ins[-1] if residual else None
    if not f32(x, w, y, *(s for s in (bias, res) if s is not None)):
        return False
    n, c, h, wd = x.shape
    _, o, oh, ow = y.shape
    g = attrs["group"]
    kh, kw = attrs["kernel"]
    (dh, dw) = attrs["dilation"]
    top, _, left, _ = attrs["pads"]
    if w.shape != (g, o // g, c // g * kh * kw) or (bias is not None and bias.shape != (o, 1)):
        return False
    sh, sw = attrs["stride"]
    if not fits_int32(h, wd, kh, kw, sh, sw, dh, dw, *attrs["pads"]):
        return False
    # one input channel is depthwise too (a plane per output channel), unless the direct
    # kernel takes it (conv_weights.direct_conv) or the kernel is long: a window of hundreds
    # of taps over few positions (an STFT's 1x256/128 frames: 435 us as planes, 49 us as one
    # GEMM per image, batch 4) is a GEMM's work
    order = attrs.get("weights")  # stored for the direct or blocked kernel (conv_weights)
    depthwise = c == g and not (c == 1 and (kh * kw > DIRECT_MAX_TAPS or order))
    im2col = not depthwise and ([kh, kw] != [1, 1] or [sh, sw] != [1, 1] or any(attrs["pads"]))
    cols = None
    if im2col:  # the planned cols scratch holds one image's (C*KH*KW, OH*OW) matrix (an
        # empty batch plans an empty one, which the kernel, with no image to do, never touches)
        names = list(attrs.get("scratch", []))
        need = c * kh * kw * oh * ow * 4 if n else 0
        if "cols" not in names or outs[1 + names.index("cols")].nbytes < need:
            return False
        cols = b.outputs[1 + names.index("cols")]
    act = b.activation_code(attrs.get("activation", "NO_ACTIVATION"))
    if act is None:
        return False
    if depthwise:
        b.set_op("dwconv")
    if order == "direct" and (depthwise or kh * kw > DIRECT_MAX_TAPS):
        return False  # a Program the compiler did not write: the kernel holds at most this many taps
    if order == "blocked" and not blocked_fits(c, o, g, kh, kw):
        return False  # nor here: the kernel takes whole blocks of channels only
    b.params(n, c, h, wd, o, oh, ow, g, kh, kw, sh, sw, dh, dw, top, left, act, im2col, 0, 0,
             KERNEL_CODES[order])
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2] if bias is not None else None,
            b.inputs[-1] if residual else None, b.outputs[0], cols)
    return True


@native("deconv2d", op="deconv")
def _deconv2d_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A transposed conv on the C library's GEMM and col2im (csrc/deconv.c)."""
    x, w, y = ins[0], ins[1], outs[0]
    bias = ins[2] if len(ins) > 2 else None
    if not f32(x, w, y, *(() if bias is None else (bias,))) or attrs["scratch"] != ["cols", "full"]:
        return False
    n, c, h, wd = x.shape
    _, o, oh, ow = y.shape
    g = attrs["group"]
    kh, kw = attrs["kernel"]
    cols, full = outs[1], outs[2]
    fh, fw = full.shape[2:]
    if (w.shape != (g, o // g * kh * kw, c // g) or (bias is not None and bias.shape != (o, 1))
            or not n * h * wd or cols.nbytes < o * kh * kw * h * wd * 4 or full.nbytes < o * fh * fw * 4):
        return False
    act = b.activation_code(attrs.get("activation", "NO_ACTIVATION"))
    if act is None:
        return False
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    top, _, left, _ = attrs["pads"]
    b.params(n, c, h, wd, o, oh, ow, g, kh, kw, sh, sw, dh, dw, top, left, act, fh, fw)
    b.slots(b.inputs[0], b.inputs[1], None if bias is None else b.inputs[2], None, b.outputs[0],
            b.outputs[1], b.outputs[2])
    return True
