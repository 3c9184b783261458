"""Integer convolution and GEMM: Conv2DFusion (grouped and depthwise included),
FullConnection and MatMulFusion in their QUANT_ALL form (8-bit codes in, int32
accumulation, requantized 8-bit codes out): rules, numpy kernels.

The rules store what the kernels need once, in the Program: weights as int8 codes in the
native GEMM's blocks of 8 output channels x 4 K ((G, O/G/8, K/4, 8, 4), zero-padded:
`pack_blocks`) when they are symmetric int8, else as they are ((G, O/G, K) or (N, K),
numpy only); the bias with the input zero point folded in (`bias - zu * sum(w - zw)`,
int32, one per output channel, where zu is the zero point of the input codes made unsigned
(+128 for int8), so the kernels multiply unsigned input codes: padding holds zu and
contributes nothing); the weight zero points when any is non-zero; and the float32
requantization multipliers (input scale x weight scale / output scale, as onnxruntime's
QLinearConv / QGemm / QLinearMatMul compute them). The native kernels (csrc/qconv.c) use
the CPU's int8 dot products (VNNI) where it has them. The numpy kernels accumulate exactly in float64 GEMMs (every int8 x uint8 product
sum of any realistic depth is an exact float64 integer) and requantize like onnxruntime:
round half to even, saturate. A fused RELU / RELU6 clamps the output codes at the codes of
0 and 6.

Long by design: the three forms share the weight codes' blocks, the folded bias, the
requantization and the native lowerings' checks; apart, each would import the others'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from converters.lite.quant import QUANT_ALL, Quant
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu.ops.buffers import pad_into, scratch
from provider.npu.ops.common import (
    F32,
    Lowered,
    Packed,
    TensorInfo,
    activation_of,
    axis_of,
    broadcast,
    const,
    describe,
)
from provider.npu.ops.conv import conv2d_rule, windows
from provider.npu.ops.native_builder import StepBuilder, fits_int32
from provider.npu.ops.quant import CODES, F64, I32, limits, multiplier, quant_of, quantize
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot

I64 = np.dtype(np.int64)


def out_range(node: LiteNode, y: Quant, dtype: np.dtype) -> list[int]:
    """[lo, hi] output codes after the node's fused activation (RELU / RELU6 / none)."""
    lo, hi = limits(dtype)
    act = activation_of(node)
    if act == "NO_ACTIVATION":
        return [lo, hi]
    if act not in ("RELU", "RELU6"):
        raise UnsupportedError(f"{describe(node)}: fused {act} on integer codes")
    edges = np.empty(2, dtype)
    quantize(np.array([0.0, 6.0], np.float32), y.scale[0], y.zero_point[0], edges)
    return [max(lo, int(edges[0])), hi if act == "RELU" else min(hi, int(edges[1]))]


def _weights(node: LiteNode, w: TensorInfo, axis: int) -> Quant:
    """The weight's quantization: per tensor, or per output channel along `axis`."""
    return quant_of(node, w, "weight", axis if w.quant is not None and len(w.quant.params) > 1
                    else None)


def _per_channel(v: np.ndarray, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(v).reshape(-1), (channels,)).copy()


def _bias(node: LiteNode, ins: Sequence[TensorInfo], i: int, channels: int) -> np.ndarray:
    """The int32 bias codes (zeros when absent); a float or wrongly shaped bias is refused."""
    if len(ins) <= i:
        return np.zeros(channels, I64)
    b = const(node, ins, i, "bias")
    if b.dtype != I32 or b.size != channels:
        raise InvalidModelError(f"{describe(node)}: bias is {b.dtype}{list(b.shape)}, expected "
                                f"int32 codes, one per output channel ({channels})")
    return b.reshape(-1).astype(I64)


def _folded_bias(bias: np.ndarray, w_centered_sums: np.ndarray, zx: int) -> np.ndarray:
    """bias - zx * sum(w - zw) per output channel, as int32 (InvalidModelError on overflow)."""
    folded = bias - zx * w_centered_sums
    if folded.min(initial=0) < -2**31 or folded.max(initial=0) >= 2**31:
        raise InvalidModelError("a quantized bias with the input zero point folded in "
                                "overflows int32")
    return folded.astype(I32)


def _requant(acc: np.ndarray, mult: np.ndarray, zy: int, lo: int, hi: int, out: np.ndarray) -> None:
    f = acc.astype(np.float32)  # onnxruntime converts the int32 accumulator to float32
    f *= mult.astype(np.float32)
    np.rint(f, out=f)
    f += np.float32(zy)
    np.clip(f, lo, hi, out=f)
    np.copyto(out, f, casting="unsafe")


def pack_blocks(w: np.ndarray) -> np.ndarray:
    """(O, K) int8 codes as the native GEMM reads them: (ceil(O/8), ceil(K/4), 8, 4)."""
    o, k = w.shape
    ob, kg = -(-o // 8), -(-k // 4)
    padded = np.zeros((ob * 8, kg * 4), np.int8)
    padded[:o, :k] = w
    return np.ascontiguousarray(padded.reshape(ob, 8, kg, 4).transpose(0, 2, 1, 3))


def unpack_blocks(packed: np.ndarray, o: int, k: int) -> np.ndarray:
    """The (O, K) codes of pack_blocks' layout (ceil(O/8), ceil(K/4), 8, 4)."""
    ob, kg = packed.shape[:2]
    return packed.transpose(0, 2, 1, 3).reshape(ob * 8, kg * 4)[:o, :k]


def _blocked(w: np.ndarray, zw: np.ndarray) -> bool:
    """Whether weights go to the native GEMM: symmetric int8 codes."""
    return w.dtype == np.int8 and not zw.any()


def unsigned_zero(q: Quant, dtype: np.dtype) -> int:
    """The zero point of input codes made unsigned (int8 codes + 128)."""
    return int(q.zero_point[0]) + (128 if dtype == np.int8 else 0)


# ---- convolution -----------------------------------------------------------------------


@register("qconv2d")
def qconv2d(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW integer conv: inputs x (codes), w (codes: pack_blocks' layout per group when
    attrs blocked, else (G, O/G, K)), folded bias (O,) int32, multipliers (O,), [weight
    zero points (O,)]; attrs kernel, stride, dilation, pads, group, zx (the input's zero
    point, the padding code), zy, range [lo, hi], blocked, scratch (pad, cols: the native
    kernel's)."""
    x, w, bias, mult = inputs[:4]
    y = outputs[0]
    s = scratch(outputs, attrs)
    n, o, oh, ow = y.shape
    c = x.shape[1]
    g = attrs["group"]
    kh, kw = attrs["kernel"]
    k = c // g * kh * kw
    if attrs["blocked"]:
        w = np.stack([unpack_blocks(wg, o // g, k) for wg in w])
    wf = w.astype(F64)
    if len(inputs) > 4:
        wf -= inputs[4].reshape(g, o // g, 1)
    xp = pad_into(x, s["pad"], attrs["pads"], attrs["zx"]) if "pad" in s else x
    xp5 = xp.reshape(n, g, c // g, *xp.shape[2:])
    cols = windows(xp5, [kh, kw], attrs["stride"], attrs["dilation"], (oh, ow))
    cols = cols.reshape(n, g, k, oh * ow).astype(F64)
    if x.dtype == np.int8:
        cols += 128.0  # the bias was folded with the unsigned codes' zero point
    acc = np.matmul(wf, cols).reshape(n, o, oh * ow)
    acc += bias.reshape(o, 1)
    lo, hi = attrs["range"]
    _requant(acc, mult.reshape(o, 1), attrs["zy"], lo, hi, y.reshape(n, o, oh * ow))


@define("Conv2DFusion", dtypes=CODES, quant=QUANT_ALL, const_inputs=(1, 2), rank=(4, 4),
        kernels=("qconv2d",), note="int8/uint8 codes, per-tensor or per-channel weights, "
        "int32 bias; RELU/RELU6 fused")
def qconv2d_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x, y = ins[0], out_types[0]
    w = const(node, ins, 1, "weight")
    qx = quant_of(node, x, "input")
    qy = quant_of(node, y, "output")
    qw = _weights(node, ins[1], 0)
    if w.dtype.name not in CODES:
        raise UnsupportedError(f"{describe(node)}: weight codes are {w.dtype}")
    # The float rule's geometry (pads, output size); its operands and scratch are not used.
    geometry = conv2d_rule(node, [TensorInfo(x.shape, F32), TensorInfo(w.shape, F32, w)],
                           [F32])
    a = geometry.attrs
    n, c, h, wd = x.shape
    o = w.shape[0]
    g = a["group"]
    zw = _per_channel(qw.zero_point, o)
    k = math.prod(w.shape[1:])
    centered = w.reshape(o, k).astype(I64) - zw.reshape(o, 1)
    bias = _folded_bias(_bias(node, ins, 2, o), centered.sum(axis=1), unsigned_zero(qx, x.dtype))
    mult = _per_channel(multiplier(qx, qw, qy), o)
    og, kg = o // g, -(-k // 4)
    depthwise = g == c == o and _blocked(w, zw)  # the C library's depthwise kernel
    blocked = _blocked(w, zw) and not depthwise
    if blocked:
        weights = Packed((g, -(-og // 8), kg, 8, 4), np.dtype(np.int8), lambda: np.stack(
            [pack_blocks(wg) for wg in w.reshape(g, og, k)]))
    else:
        weights = Packed((g, og, k), w.dtype, lambda: np.ascontiguousarray(w.reshape(g, og, k)))
    operands: list = [0, weights, bias, mult]
    if zw.any():
        operands.append(zw.astype(F64))
    top, bottom, left, right = a["pads"]
    oh, ow = geometry.outputs[0][0][2:]
    planned = []
    if any(a["pads"]):
        planned.append(("pad", (n, c, h + top + bottom, wd + left + right), x.dtype))
    shifted = _shifted(a["kernel"], a["stride"], a["dilation"])
    if blocked:  # the native kernel's bytes (qconv.c): packed columns [, planes, wide output]
        planned.append(("cols", (_cols_bytes(c, og, oh, ow, g, kg, a, shifted),),
                        np.dtype(np.uint8)))
    attrs = {"kernel": a["kernel"], "stride": a["stride"], "dilation": a["dilation"],
             "pads": a["pads"], "group": g, "zx": int(qx.zero_point[0]),
             "zy": int(qy.zero_point[0]), "range": out_range(node, qy, y.dtype),
             "blocked": blocked, "depthwise": depthwise, "shifted": blocked and shifted,
             "scratch": [p[0] for p in planned]}
    return Lowered("qconv2d", attrs, operands, [(geometry.outputs[0][0], y.dtype)], planned)


# ---- dense -----------------------------------------------------------------------------


@register("qdense")
def qdense(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """y (rows, N) = requantize(x (rows, K) @ (w (N, K) - zw).T + folded bias): inputs x,
    w (pack_blocks' layout when attrs blocked), bias (N,) int32, multipliers (N,), [weight
    zero points (N,)]; attrs rows, k, zy, range, blocked, scratch (the native kernel's)."""
    x, w, bias, mult = inputs[:4]
    rows = attrs["rows"]
    if attrs["blocked"]:
        w = unpack_blocks(w, mult.shape[0], attrs["k"])
    wf = w.astype(F64)
    if len(inputs) > 4:
        wf -= inputs[4].reshape(-1, 1)
    xf = x.reshape(rows, -1).astype(F64)
    if x.dtype == np.int8:
        xf += 128.0
    acc = xf @ wf.T
    acc += bias
    lo, hi = attrs["range"]
    _requant(acc, mult, attrs["zy"], lo, hi, outputs[0].reshape(rows, -1))


def _dense(node: LiteNode, x: TensorInfo, w: np.ndarray, qw: Quant, bias: np.ndarray,
           y: TensorInfo, out_shape, rows: int) -> Lowered:
    """The qdense step of `x` (rows, K) times codes `w` (N, K) with quantization `qw`."""
    qx = quant_of(node, x, "input")
    qy = quant_of(node, y, "output")
    if w.dtype.name not in CODES:
        raise UnsupportedError(f"{describe(node)}: weight codes are {w.dtype}")
    nout, k = w.shape
    zw = _per_channel(qw.zero_point, nout)
    centered = w.astype(I64) - zw.reshape(-1, 1)
    folded = _folded_bias(bias, centered.sum(axis=1), unsigned_zero(qx, x.dtype))
    blocked = _blocked(w, zw)
    kg = -(-k // 4)
    weights = Packed((-(-nout // 8), kg, 8, 4), np.dtype(np.int8), lambda: pack_blocks(w)) \
        if blocked else w
    operands: list = [0, weights, folded, _per_channel(multiplier(qx, qw, qy), nout)]
    if zw.any():
        operands.append(zw.astype(F64))
    planned = [("cols", (kg * 4 * rows + nout * rows,), np.dtype(np.uint8))] if blocked else []
    attrs = {"rows": rows, "k": k, "zy": int(qy.zero_point[0]),
             "range": out_range(node, qy, y.dtype), "blocked": blocked,
             "scratch": [p[0] for p in planned]}
    return Lowered("qdense", attrs, operands, [(out_shape, y.dtype)], planned)


@define("FullConnection", dtypes=CODES, quant=QUANT_ALL, const_inputs=(1, 2),
        kernels=("qdense",), note="weights (out, in) per tensor or per output channel")
def qfull_connection_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    x = ins[0]
    w = const(node, ins, 1, "weight")
    if w.ndim != 2:
        raise InvalidModelError(f"{describe(node)}: weight {w.shape}, expected (out, in)")
    axis = (axis_of(node, int(node.attrs.get("axis", 1)), len(x.shape))
            if node.attrs.get("use_axis", False) else len(x.shape) - 1)
    rows, k = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    if k != w.shape[1]:
        raise InvalidModelError(f"{describe(node)}: input {x.shape} flattens to K={k}, weight {w.shape}")
    qw = _weights(node, ins[1], 0)
    return _dense(node, x, w, qw, _bias(node, ins, 2, w.shape[0]), out_types[0],
                  (*x.shape[:axis], int(w.shape[0])), rows)


@register("qmatmul")
def qmatmul(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """y = requantize((a - za) @ (b - zb)) for two run-time code tensors (numpy broadcasting
    of the batch dims); attrs za, zb, zy, mult, range, transpose_a."""
    a = inputs[0].astype(F64) - attrs["za"]
    b = inputs[1].astype(F64) - attrs["zb"]
    if attrs["transpose_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_b"]:
        b = np.swapaxes(b, -1, -2)
    lo, hi = attrs["range"]
    _requant(np.matmul(a, b), np.float32(attrs["mult"]), attrs["zy"], lo, hi, outputs[0])


@define("MatMulFusion", dtypes=CODES, quant=QUANT_ALL, rank=(2, 99), ranked=2,
        kernels=("qdense", "qmatmul"), note="constant B per tensor or per column")
def qmatmul_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    a, b, y = ins[0], ins[1], out_types[0]
    ta, tb = bool(node.attrs.get("transpose_a", False)), bool(node.attrs.get("transpose_b", False))
    a_shape = (*a.shape[:-2], a.shape[-1], a.shape[-2]) if ta else a.shape
    b_shape = (*b.shape[:-2], b.shape[-1], b.shape[-2]) if tb else b.shape
    if len(a_shape) < 2 or len(b_shape) < 2 or a_shape[-1] != b_shape[-2]:
        raise InvalidModelError(f"{describe(node)}: cannot multiply {a.shape} by {b.shape}")
    if b.value is not None and b.value.ndim == 2 and not ta:
        # a constant B (K, N) is a dense layer's (N, K) weight; per channel along B's columns
        qb = _weights(node, b, 0 if tb else 1)
        w = b.value if tb else np.ascontiguousarray(b.value.T)
        out = (*a.shape[:-1], w.shape[0])
        return _dense(node, a, w, qb, _bias(node, ins, 2, w.shape[0]), y, out,
                      math.prod(a.shape[:-1]))
    if len(ins) > 2:
        raise UnsupportedError(f"{describe(node)}: a bias on an integer MatMul of two "
                               "run-time inputs")
    qa, qb = quant_of(node, a, "input A"), quant_of(node, b, "input B")
    qy = quant_of(node, y, "output")
    out = (*broadcast(node, a_shape[:-2], b_shape[:-2]), a_shape[-2], b_shape[-1])
    mult = float(np.float32(np.float32(qa.scale[0]) * np.float32(qb.scale[0])) / np.float32(qy.scale[0]))
    attrs = {"za": int(qa.zero_point[0]), "zb": int(qb.zero_point[0]), "zy": int(qy.zero_point[0]),
             "mult": mult, "range": out_range(node, qy, y.dtype), "transpose_a": ta,
             "transpose_b": tb}
    return Lowered("qmatmul", attrs, [0, 1], [(out, y.dtype)])


# ---- native lowerings ------------------------------------------------------------------

CODE_DTYPES = ("int8", "uint8")


def _shifted(kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> bool:
    """Whether the native conv takes the shifted form (csrc/qconv.c): stride 1, or strides
    whose taps read every phase plane (a 3x3/2 does; a 1x1/2 would copy four planes to read
    one, so it keeps im2col)."""
    return all({t * d % s for t in range(k)} == set(range(s))
               for k, s, d in zip(kernel, stride, dilation, strict=True))


def _phase_extent(oh: int, ow: int, attrs: dict) -> tuple[int, int]:
    """Rows and columns of the shifted form's phase planes (csrc/qconv.c: Hp, Wp)."""
    (kh, kw), (sh, sw), (dh, dw) = attrs["kernel"], attrs["stride"], attrs["dilation"]
    return oh + (kh - 1) * dh // sh, ow + (kw - 1) * dw // sw


def _cols_bytes(c: int, og: int, oh: int, ow: int, g: int, kg: int, attrs: dict,
                shifted: bool) -> int:
    """The native conv's scratch bytes: packed columns [, phase planes, wide output]."""
    if not shifted:
        return g * kg * 4 * oh * ow
    hp, wp = _phase_extent(oh, ow, attrs)
    sh, sw = attrs["stride"]
    return g * kg * 4 * oh * wp + c * sh * sw * (hp + 1) * wp + og * oh * wp


def _common(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, cols_bytes: int) -> bool:
    """The checks both integer GEMM lowerings share (dtypes, bias, multipliers, scratch)."""
    x, w, bias, mult, y = ins[0], ins[1], ins[2], ins[3], outs[0]
    names = list(attrs.get("scratch", []))
    return (attrs.get("blocked", False) and len(ins) == 4 and x.dtype in CODE_DTYPES
            and y.dtype in CODE_DTYPES and w.dtype == "int8" and bias.dtype == "int32"
            and mult.dtype == "float64" and "cols" in names
            and outs[1 + names.index("cols")].nbytes >= cols_bytes)


@native("qconv2d", op="qconv")
def _qconv_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """An integer conv on the C library's packed GEMM (csrc/qconv.c)."""
    x, w, y = ins[0], ins[1], outs[0]
    n, c, h, wd = x.shape
    _, o, oh, ow = y.shape
    g = attrs["group"]
    kh, kw = attrs["kernel"]
    kg = -(-(c // g * kh * kw) // 4)
    if ins[2].shape != (o,) or ins[3].shape != (o,):
        return False
    lo, hi = attrs["range"]
    flip = 128 if x.dtype == "int8" else 0
    shifted = attrs.get("shifted", False)
    if not fits_int32(h, wd, kh, kw, *attrs["stride"], *attrs["dilation"], *attrs["pads"]):
        return False
    params = (n, c, h, wd, o, oh, ow, g, kh, kw, *attrs["stride"], *attrs["dilation"],
              attrs["pads"][0], attrs["pads"][2], kg, attrs["zx"] + flip, flip, attrs["zy"], lo, hi,
              shifted)
    if attrs.get("depthwise", False):
        if (w.shape != (c, 1, kh * kw) or w.dtype != "int8" or len(ins) != 4 or not c == g == o
                or x.dtype not in CODE_DTYPES or y.dtype not in CODE_DTYPES):
            return False
        b.set_op("qdwconv")
        b.params(*params)
        b.slots(b.inputs[0], b.inputs[1], b.inputs[2], b.inputs[3], b.outputs[0])
        return True
    need = _cols_bytes(c, o // g, oh, ow, g, kg, attrs, shifted)
    top, bottom, left, right = attrs["pads"]
    padded = (h + top + bottom, wd + left + right)  # a stride-1 plane is the padded input
    if shifted and (not _shifted(attrs["kernel"], attrs["stride"], attrs["dilation"]) or (
            attrs["stride"] == [1, 1] and _phase_extent(oh, ow, attrs) != padded)):
        return False
    if w.shape != (g, -(-(o // g) // 8), kg, 8, 4) or not _common(ins, outs, attrs, need):
        return False
    b.params(*params)
    names = list(attrs["scratch"])
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2], b.inputs[3], b.outputs[0],
            b.outputs[1 + names.index("cols")])
    return True


@native("qmatmul", op="qmatmul")
def _qmatmul_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """An integer MatMul of two run-time code tensors on the C library (csrc/qmatmul.c): no
    transposes, each operand's batch the output's or one matrix for all, K small enough for
    exact int32 sums."""
    x, w, y = ins[0], ins[1], outs[0]
    if (attrs["transpose_a"] or attrs["transpose_b"] or len(x.shape) < 2 or len(w.shape) < 2
            or x.dtype not in CODE_DTYPES or w.dtype not in CODE_DTYPES
            or y.dtype not in CODE_DTYPES):
        return False
    (m, k), (k2, n) = x.shape[-2:], w.shape[-2:]
    batch = y.shape[:-2]
    if k != k2 or tuple(y.shape[-2:]) != (m, n) or k * 255 * 255 >= 2**31:
        return False
    strides = []
    for operand, size in ((x, m * k), (w, k * n)):
        if tuple(operand.shape[:-2]) == tuple(batch):
            strides.append(size)
        elif math.prod(operand.shape[:-2]) == 1:
            strides.append(0)
        else:  # broadcast along some batch dims only: the numpy kernel
            return False
    lo, hi = attrs["range"]
    b.params(math.prod(batch), m, k, n, *strides, x.dtype == "int8", w.dtype == "int8",
             attrs["za"], attrs["zb"], attrs["zy"], lo, hi)
    b.f[0] = attrs["mult"]
    b.slots(b.inputs[0], b.inputs[1], b.outputs[0])
    return True


@native("qdense", op="qdense")
def _qdense_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """An integer dense layer on the C library's packed GEMM (csrc/qconv.c)."""
    rows, k = attrs["rows"], attrs["k"]
    o = ins[3].shape[0]
    kg = -(-k // 4)
    if (ins[1].shape != (-(-o // 8), kg, 8, 4) or ins[2].shape != (o,)
            or math.prod(ins[0].shape) != rows * k or math.prod(outs[0].shape) != rows * o):
        return False
    if not _common(ins, outs, attrs, kg * 4 * rows + o * rows):
        return False
    lo, hi = attrs["range"]
    flip = 128 if ins[0].dtype == "int8" else 0
    b.params(rows, k, o, kg, flip, attrs["zy"], lo, hi)
    names = list(attrs["scratch"])
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2], b.inputs[3], b.outputs[0],
            b.outputs[1 + names.index("cols")])
    return True
