"""Conv2DFusion and Conv2dTransposeFusion as im2col / col2im plus one batched GEMM.

Weights arrive packed by the compiler (compiler.pack_conv_weight): conv as (G, O/G, C/G*KH*KW),
transposed conv as (G, C/G, O/G*KH*KW) -> used transposed. Scratch buffers are planned by the
compiler and passed after the real outputs, named by attrs["scratch"].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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


def windows(xp: np.ndarray, groups: int, kernel, stride, dilation, out_hw) -> np.ndarray:
    """Read-only (N, G, C/G, KH, KW, OH, OW) view of every conv window of padded NCHW xp."""
    n, c = xp.shape[:2]
    sn, sc, sh, sw = xp.strides
    shape = (n, groups, c // groups, kernel[0], kernel[1], out_hw[0], out_hw[1])
    strides = (sn, sc * (c // groups), sc, sh * dilation[0], sw * dilation[1],
               sh * stride[0], sw * stride[1])
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def _shifted_cols(x: np.ndarray, s: dict[str, np.ndarray], attrs: dict, oh: int,
                  ch: slice) -> None:
    """Stride-1 im2col over the padded image flattened per channel, for channels `ch`:
    every tap is one contiguous shifted slice of length OH*Wp (long copies instead of OH
    short rows); the GEMM then computes Wp - OW extra "wrap-around" columns per row, which
    the epilogue drops. The pad buffer has one spare row so the last tap's slice fits."""
    kh, kw = attrs["kernel"]
    dh, dw = attrs["dilation"]
    pad = s["pad"]
    n, c, _, wp = pad.shape
    xp = pad_into(x[:, ch], pad[:, ch], attrs["pads"], 0.0)
    flat = xp.reshape(n, xp.shape[1], -1)
    span = oh * wp
    cols = s["cols"].reshape(n, c, kh * kw, span)[:, ch]
    for i in range(kh):
        for j in range(kw):
            off = i * dh * wp + j * dw
            np.copyto(cols[:, :, i * kw + j], flat[:, :, off:off + span])


def _window_cols(x: np.ndarray, s: dict[str, np.ndarray], attrs: dict, out_hw, at: tuple) -> None:
    """General im2col into cols (N, G, C/G*KH*KW, OH*OW) of the input channels picked by the
    index `at` into (N, G, C/G, ...) (a block of groups, or of channels in every group)."""
    g = attrs["group"]
    n, c, h, w = x.shape
    xp = x
    if "pad" in s:
        xp = s["pad"]
        pad_into(x.reshape(n, g, c // g, h, w)[at], xp.reshape(n, g, c // g, *xp.shape[2:])[at],
                 attrs["pads"], 0.0)
    win = windows(xp, g, attrs["kernel"], attrs["stride"], attrs["dilation"], out_hw)
    np.copyto(s["cols"].reshape(win.shape)[at], win[at])


def _axis(axis: int, part: slice) -> tuple:
    """Index picking `part` along `axis` (1 = groups, 2 = channels in each group) of arrays
    laid out (N, G, channels, ...)."""
    return (slice(None),) * axis + (part,)


@register("conv2d")
def conv2d(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW conv: inputs x, packed weight (G, O/G, K) [, bias (O, 1)] [, residual (the
    output's shape, added before the activation when attrs["residual"])]; attrs kernel,
    stride, dilation, pads [top, bottom, left, right], group, activation, scratch: (pad,
    cols, wide) for the shifted stride-1 form, else (pad, cols) for im2col, or none for a
    pointwise conv.

    Large convs are split over the NPU's cores (kernels.parallel): im2col by input channel
    (or group), then GEMM + bias + residual + activation by block of output channels, or of
    groups when each group has few (each block's epilogue runs while its rows are in cache).
    """
    x, w = inputs[0], inputs[1]
    y = outputs[0]
    s = scratch(outputs, attrs)
    n, o, oh, ow = y.shape
    c = x.shape[1]
    g = attrs["group"]
    og, k = o // g, w.shape[-1]
    kh, kw = attrs["kernel"]
    wide = s.get("wide")
    if "cols" in s:
        hw = oh * (wide.shape[-1] // oh if wide is not None else ow)
        cost = n * c * kh * kw * hw / parallel.ELEMENTS_PER_US
        if wide is not None:
            parallel.run(lambda ch: _shifted_cols(x, s, attrs, oh, ch), parallel.blocks(c, cost))
        else:  # by whole groups, or by channel when there is one group
            axis = 1 if g > 1 else 2
            parallel.run(lambda part: _window_cols(x, s, attrs, (oh, ow), _axis(axis, part)),
                         parallel.blocks(g if g > 1 else c, cost))
        operand = s["cols"].reshape(n, g, k, hw)
    else:  # 1x1, stride 1, no padding, fp32: the input already is the GEMM operand
        hw = oh * ow
        operand = x.reshape(n, g, k, hw)
    y3 = y.reshape(n, g, og, oh * ow)
    target = y3 if wide is None else wide.reshape(n, g, og, hw)
    extra = list(inputs[2:])
    residual = extra.pop().reshape(n, g, og, oh * ow) if attrs.get("residual") else None
    bias = extra[0].reshape(g, og, 1) if extra else None
    by_group = g > 1 and og < 16  # depthwise-like: too few rows per group to split

    def epilogue(part: slice) -> None:
        at = _axis(1 if by_group else 2, part)
        gemm.matmul(w[at[1:]], operand[at] if by_group else operand, target[at])
        out = y3[at]
        if wide is not None:
            np.copyto(out.reshape(*out.shape[:3], oh, ow),
                      target[at].reshape(*out.shape[:3], oh, hw // oh)[..., :ow], casting="same_kind")
        if bias is not None:
            out += bias[at[1:]]
        if residual is not None:
            out += residual[at]
        activation.fused(out, attrs)

    cost = n * o * k * hw / parallel.MACS_PER_US
    parallel.run(epilogue, parallel.blocks(g, cost) if by_group else parallel.blocks(og, cost, align=8))


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
