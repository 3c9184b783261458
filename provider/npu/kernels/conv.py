"""Conv2DFusion and Conv2dTransposeFusion as im2col / col2im plus one batched GEMM.

Weights arrive packed by the compiler (compiler.pack_conv_weight): conv as (G, O/G, C/G*KH*KW),
transposed conv as (G, C/G, O/G*KH*KW) -> used transposed. Scratch buffers are planned by the
compiler and passed after the real outputs, named by attrs["scratch"].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provider.npu.conv_weights import gemm_weights
from provider.npu.kernels import activation, gemm, parallel
from provider.npu.kernels.registry import register


def scratch(outputs: Sequence[np.ndarray], attrs: dict) -> dict[str, np.ndarray]:
    """Map the scratch names in attrs["scratch"] to the views after outputs[0]."""
    return dict(zip(attrs.get("scratch", []), outputs[1:], strict=True))


def pad_into(x: np.ndarray, buf: np.ndarray, pads: Sequence[int], value: float) -> np.ndarray:
    """Copy x (..., H, W) into the centre of buf, fill the border with value; returns buf.

    The border is rewritten every run because the arena memory is shared with other tensors.
    """
    top, left = pads[0], pads[2]
    h, w = x.shape[-2:]
    buf[..., :top, :] = value
    buf[..., top + h:, :] = value
    rows = buf[..., top:top + h, :]
    rows[..., :left] = value
    rows[..., left + w:] = value
    rows[..., left:left + w] = x
    return buf


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
    activation.fused(out, attrs)


@register("conv2d")
def conv2d(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW conv: inputs x, packed weight (G, O/G, K; in the direct kernel's order when
    attrs["weights"] == "direct", see conv_weights) [, bias (O, 1)] [, residual (the
    output's shape, added before the activation when attrs["residual"])]; attrs kernel,
    stride, dilation, pads [top, bottom, left, right], group, activation, scratch: (pad,
    cols, wide) for the shifted stride-1 form, else (pad, cols) for im2col, or none for a
    pointwise conv.

    Large convs are split over the NPU's cores (kernels.parallel): im2col by input channel
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
    activation.fused(y, attrs)
