"""Conv2DFusion and Conv2dTransposeFusion as im2col / col2im plus one batched GEMM.

Weights arrive packed by the compiler (compiler.pack_conv_weight): conv as (G, O/G, C/G*KH*KW),
transposed conv as (G, C/G, O/G*KH*KW) -> used transposed. Scratch buffers are planned by the
compiler and passed after the real outputs, named by attrs["scratch"].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provider.npu.kernels import activation, gemm
from provider.npu.kernels.registry import register


def scratch(outputs: Sequence[np.ndarray], attrs: dict) -> dict[str, np.ndarray]:
    """Map the scratch names in attrs["scratch"] to the views after outputs[0]."""
    return dict(zip(attrs.get("scratch", []), outputs[1:], strict=True))


def pad_into(x: np.ndarray, buf: np.ndarray, pads: Sequence[int], value: float) -> np.ndarray:
    """Copy NCHW x into the centre of buf, fill the border with value; returns buf.

    The border is rewritten every run because the arena memory is shared with other tensors.
    """
    top, left = pads[0], pads[2]
    h, w = x.shape[2], x.shape[3]
    buf[:, :, :top, :] = value
    buf[:, :, top + h:, :] = value
    rows = buf[:, :, top:top + h]
    rows[:, :, :, :left] = value
    rows[:, :, :, left + w:] = value
    rows[:, :, :, left:left + w] = x
    return buf


def windows(xp: np.ndarray, groups: int, kernel, stride, dilation, out_hw) -> np.ndarray:
    """Read-only (N, G, C/G, KH, KW, OH, OW) view of every conv window of padded NCHW xp."""
    n, c = xp.shape[:2]
    sn, sc, sh, sw = xp.strides
    shape = (n, groups, c // groups, kernel[0], kernel[1], out_hw[0], out_hw[1])
    strides = (sn, sc * (c // groups), sc, sh * dilation[0], sw * dilation[1],
               sh * stride[0], sw * stride[1])
    return np.lib.stride_tricks.as_strided(xp, shape, strides, writeable=False)


def _conv_shifted(x: np.ndarray, w: np.ndarray, y: np.ndarray, s: dict[str, np.ndarray],
                  attrs: dict) -> None:
    """Stride-1 conv over the padded image flattened per channel: every tap is then one
    contiguous shifted slice of length OH*Wp (long copies instead of OH short rows), the
    GEMM computes Wp - OW extra "wrap-around" columns per row into `wide`, and those are
    dropped when it is copied into y. The pad buffer has one spare row so the last tap's
    slice stays inside it.
    """
    n, o, oh, ow = y.shape
    c = x.shape[1]
    g = attrs["group"]
    kh, kw = attrs["kernel"]
    dh, dw = attrs["dilation"]
    xp = pad_into(x, s["pad"], attrs["pads"], 0.0)
    wp = xp.shape[3]
    flat = xp.reshape(n, c, -1)
    span = oh * wp
    cols = s["cols"].reshape(n, c, kh * kw, span)
    for i in range(kh):
        for j in range(kw):
            off = i * dh * wp + j * dw
            np.copyto(cols[:, :, i * kw + j], flat[:, :, off:off + span])
    wide = s["wide"].reshape(n, g, o // g, span)
    gemm.matmul(w, s["cols"].reshape(n, g, w.shape[-1], span), wide)
    np.copyto(y, wide.reshape(n, o, oh, wp)[:, :, :, :ow], casting="same_kind")


@register("conv2d")
def conv2d(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW conv: inputs x, packed weight (G, O/G, K) [, bias (O, 1)]; attrs kernel, stride,
    dilation, pads [top, bottom, left, right], group, activation, scratch: (pad, cols, wide)
    for the shifted stride-1 form, else (pad, cols) for im2col, or none for a pointwise conv."""
    x, w = inputs[0], inputs[1]
    y = outputs[0]
    s = scratch(outputs, attrs)
    n, o, oh, ow = y.shape
    g = attrs["group"]
    y3 = y.reshape(n, g, o // g, oh * ow)
    if "wide" in s:
        _conv_shifted(x, w, y, s, attrs)
    elif "cols" in s:
        xp = pad_into(x, s["pad"], attrs["pads"], 0.0) if "pad" in s else x
        cols = s["cols"]
        win = windows(xp, g, attrs["kernel"], attrs["stride"], attrs["dilation"], (oh, ow))
        np.copyto(cols.reshape(win.shape), win)
        gemm.matmul(w, cols.reshape(n, g, w.shape[-1], oh * ow), y3)
    else:  # 1x1, stride 1, no padding, fp32: the input already is the GEMM operand
        gemm.matmul(w, x.reshape(n, g, w.shape[-1], oh * ow), y3)
    if len(inputs) > 2:
        y.reshape(n, o, oh * ow)[...] += inputs[2]
    activation.fused(y, attrs)


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
