"""The orders a conv step's weights are stored in, and which convs take which.

The compiler packs every conv's weights once (`conv.conv2d_rule`): as the GEMM matrix
(G, O/G, K); for a conv the NPU computes with its blocked convolution (csrc/blocked.c), in
blocks of 16 input x 16 output channels per tap (attrs["weights"] == "blocked"); or, for a
conv it computes with its direct convolution (csrc/direct.c), in that kernel's order
(attrs["weights"] == "direct"): per group, the output channels in
blocks of DIRECT_ROWS (then 4, 2, 1), each block stored K-major, its rows' weights for one
k side by side. The direct kernel then reads them in place, as they come, where it used
to gather each block from the GEMM matrix on every run (at ResNet-50's 7x7 stage the
gather, a pass over 9 MB of weights per conv, cost as much as the arithmetic). All
three orders hold the same floats in the same (G, O/G, K) shape; the numpy kernels read the
GEMM order (`gemm_weights`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["KERNEL_CODES", "DIRECT_ROWS", "direct_conv", "direct_row_blocks", "direct_blocks", "blocked_conv",
           "blocked_fits", "blocked_weights", "gemm_weights"]

# The direct kernel computes tiles of DIRECT_ROWS output channels by positions in vectors
# of DIRECT_VECTOR floats, on the output laid out in rows of the padded width. Which convs
# it takes was measured per shape against im2col + GEMM.
DIRECT_ROWS, DIRECT_VECTOR, DIRECT_MAX_TAPS, DIRECT_MIN_K = 8, 16, 64, 32
# From this many output positions up, fewer multiply-adds per output than DIRECT_MIN_K go
# direct too: an RGB stem's K = 27 im2col matrix is then a memory pass larger than the conv
# (3 -> 16, 3x3/2, whole step on 2 cores: 1024x1024 7.0 -> 4.5 ms, 640x640 2.0 -> 1.3 ms,
# 224x224/1 0.58 -> 0.54 ms; at 32x32 outputs GEMM stayed ahead, 22 vs 26 us).
DIRECT_SMALL_K_POSITIONS = 10_000
# The blocked kernel's vectors: 16 output channels each (csrc/blocked.c); the largest input
# image it takes a strided conv of (blocked_conv).
BLOCK, BLOCKED_STRIDED_BYTES = 16, 4 << 20
BLOCKED_1X1_POSITIONS = range(33, 57)  # planes of a blocked 1x1 conv (blocked_conv)
# The conv step's kernel parameter (csrc/npu.h C_DIRECT) per stored order.
KERNEL_CODES = {None: 0, "direct": 1, "blocked": 2}


def direct_conv(cg: int, g: int, kh: int, kw: int, sw: int, dw: int, oh: int, ow: int) -> bool:
    """Whether an fp32 conv of g groups of cg input channels runs as the direct convolution
    (depthwise convs have their own kernel): windows only (GEMM does 1x1 better), enough
    multiply-adds per output (DIRECT_MIN_K) to fill a tile's registers unless the plane is
    big (DIRECT_SMALL_K_POSITIONS) or there is one input channel (a grayscale stem: as a
    plane per output channel it read the input once per channel, 1x1x96x96 -> 16 7x7 497 ->
    144 us, 1x1x48x320 -> 32 3x3 387 -> 298 us, one core), and planes that waste little of
    the last vector and of the padded rows' extra columns: at least 70 % of the positions
    computed are outputs (a 7x7 output computes 64 positions for 49), 50 % at stride 1.
    OpenBLAS's small GEMMs did worse than half the direct kernel's work there (one core, the
    step alone: 64 channels on 4x4 41 -> 19 us, on 2x16 46 -> 25, 160 on 3x3 138 -> 66, a
    5x5 of 64 on 5x5 121 -> 88), but not below it (256 channels on 2x2, 25 %: even; on 1x1
    101 -> 160) nor at stride 2 (64 -> 128 3x3/2 to 4x4, 50 %: 43 -> 72)."""
    taps = kh * kw
    if cg < 1 or (cg == 1 and g > 1) or taps == 1 or taps > DIRECT_MAX_TAPS:
        return False
    if cg > 1 and cg * taps < DIRECT_MIN_K and oh * ow < DIRECT_SMALL_K_POSITIONS:
        return False
    wq = ow + (kw - 1) * dw // sw
    computed = -(-oh * wq // DIRECT_VECTOR) * DIRECT_VECTOR
    return oh * ow * 10 >= computed * 7 or (sw == 1 and oh * ow * 2 >= computed)


def direct_row_blocks(rows: int) -> list[tuple[int, int]]:
    """(first row, row count) of the direct kernel's blocks of a group's output channels:
    DIRECT_ROWS at a time, the rest in blocks of 4, 2 and 1."""
    blocks, at = [], 0
    while at < rows:
        size = next(b for b in (DIRECT_ROWS, 4, 2, 1) if rows - at >= b)
        blocks.append((at, size))
        at += size
    return blocks


def direct_blocks(gemm: np.ndarray) -> np.ndarray:
    """GEMM-ordered weights (G, O/G, K) in the direct kernel's order, same shape."""
    g, rows, k = gemm.shape
    out = np.empty_like(gemm)
    flat = out.reshape(g, -1)
    full = rows // DIRECT_ROWS * DIRECT_ROWS  # the full blocks in one reshaped copy
    flat[:, :full * k] = (gemm[:, :full].reshape(g, full // DIRECT_ROWS, DIRECT_ROWS, k)
                          .transpose(0, 1, 3, 2).reshape(g, -1))
    for first, size in direct_row_blocks(rows)[full // DIRECT_ROWS:]:
        flat[:, first * k:(first + size) * k] = gemm[:, first:first + size].transpose(0, 2, 1).reshape(g, -1)
    return out


def blocked_conv(c: int, o: int, g: int, kh: int, kw: int, h: int, w: int, stride: list[int]) -> bool:
    """Whether an fp32 conv runs as the blocked convolution (csrc/blocked.c): one group,
    input and output channels in whole blocks of BLOCK (or an RGB image with a 7x7 window or
    wider), a window of at most DIRECT_MAX_TAPS; strided only on an input of at most
    BLOCKED_STRIDED_BYTES (the kernel copies a whole image before its tiles read it, where
    the direct kernel builds bands of rows each read from cache: 16 -> 32 3x3/2 at 512x512,
    16 MB, 5.6 -> 6.9 ms on 2 cores; at 256x256, 4 MB, even). Where it applies it was as
    fast as the direct kernel or im2col + GEMM or faster (one core, the step alone,
    alternating): 3x3 convs of 64 channels on 7x7 1.5x, on 2x40 (batch 3) 1.8x, on 56x56
    even, 128 on 28x28 1.2x, 256 on 2x2 2.8x (GEMM's), 32 -> 64 3x3/2 on 14x14 1.7x, RGB
    7x7/2 stems to 32 channels at 56x56 and to 64 at 224x224 1.2x; 2 cores: 32 on 256x256
    1.14x, 32 -> 64 3x3/2 on 128x128 1.24x. RGB 3x3 stems ran at 0.87-0.96x the direct
    kernel's or GEMM's speed, a one-channel 7x7 at 0.7x: not those.

    1x1 convs only with output planes of BLOCKED_1X1_POSITIONS (the plane of ceil(h / stride)
    rows and columns), where GEMM's 49 columns are few for its panels (one core, alternating
    run by run): 512 -> 2048 on 7x7 1.24x GEMM's speed, 2048 -> 512 1.19x, 1024 -> 2048
    1.23x, 256 -> 1024 1.14x, 160 -> 960 1.24x; ResNet-50 as a whole 1.06x. Strided too:
    ResNet-50's 1024 -> 2048 1x1/2 shortcut from 14x14 (im2col's gathered columns and a
    GEMM before) 1.6 -> 1.2 ms on one core, 0.82 -> 0.63 ms on two (the step in the model's
    profile, 40 runs, twice each way). Elsewhere GEMM was as fast or faster: 4x4
    (0.75-0.95x), 8x8 (0.8-1.05x), 14x14 (0.92-1.01x), 28x28 (0.95-1.02x)."""
    if c == 3 and kh * kw < 49:
        return False
    if kh * kw == 1 and -(-h // stride[0]) * -(-w // stride[1]) not in BLOCKED_1X1_POSITIONS:
        return False
    return blocked_fits(c, o, g, kh, kw) and (stride == [1, 1] or c * h * w * 4 <= BLOCKED_STRIDED_BYTES)


def blocked_fits(c: int, o: int, g: int, kh: int, kw: int) -> bool:
    """Whether the blocked kernel can compute a conv: one group of whole blocks of 16
    channels (or of an RGB image's 3) to whole blocks of 16, a window of at most
    DIRECT_MAX_TAPS."""
    return (g == 1 and o % BLOCK == 0 and (c % BLOCK == 0 or c == 3) and c > 0
            and kh * kw <= DIRECT_MAX_TAPS)


def blocked_shape(shape: tuple[int, ...], kernel: tuple[int, int]) -> tuple[int, ...]:
    """The 6-d view [O/16][C/ICW][KH][KW][ICW][16] of weights (1, O, C*KH*KW) stored in
    the blocked kernel's order (ICW = 16, or C for an RGB image)."""
    _, o, k = shape
    kh, kw = kernel
    icw = min(k // (kh * kw), BLOCK)
    return (o // BLOCK, k // (kh * kw * icw), kh, kw, icw, BLOCK)


def blocked_weights(gemm: np.ndarray, kernel: tuple[int, int]) -> np.ndarray:
    """GEMM-ordered weights (1, O, C*KH*KW) in the blocked kernel's order (blocked_shape),
    same shape."""
    ob, cb, kh, kw, icw, _ = blocked_shape(gemm.shape, kernel)
    w = gemm.reshape(ob, BLOCK, cb, icw, kh, kw)
    return np.ascontiguousarray(w.transpose(0, 2, 4, 5, 3, 1)).reshape(gemm.shape)


def gemm_weights(w: np.ndarray, attrs: dict) -> np.ndarray:
    """A conv step's weights (G, O/G, K) in GEMM order, whichever order attrs say they are
    stored in (a copy when in the direct or the blocked kernel's)."""
    if attrs.get("weights") == "blocked":
        blocks = w.reshape(blocked_shape(w.shape, attrs["kernel"]))
        return np.ascontiguousarray(blocks.transpose(0, 5, 1, 4, 2, 3)).reshape(w.shape)
    if attrs.get("weights") != "direct":
        return w
    g, rows, k = w.shape
    out = np.empty_like(w)
    flat = w.reshape(g, -1)
    full = rows // DIRECT_ROWS * DIRECT_ROWS
    out[:, :full] = (flat[:, :full * k].reshape(g, full // DIRECT_ROWS, k, DIRECT_ROWS)
                     .transpose(0, 1, 3, 2).reshape(g, full, k))
    for first, size in direct_row_blocks(rows)[full // DIRECT_ROWS:]:
        out[:, first:first + size] = flat[:, first * k:(first + size) * k].reshape(g, k, size).transpose(0, 2, 1)
    return out
