"""Normalisations: LayerNormFusion, InstanceNorm, inference BatchNorm / FusedBatchNorm
(a per-channel scale and shift, when the compiler could not fold it into a conv), LRN
across channels and LpNormalization: capability, rules and numpy kernels; LayerNorm, LRN,
LpNormalization and the scale and shift also natively (csrc/elementwise.c, csrc/dwconv.c).

Statistics are accumulated in fp32 (dtype=np.float32) even when storage is fp16.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError
from provider.npu.ops.activation import fused
from provider.npu.ops.common import (
    FLOAT,
    Lowered,
    Packed,
    TensorInfo,
    axis_of,
    const,
    describe,
    per_channel,
)
from provider.npu.ops.native_builder import StepBuilder, around, f32
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot

F32 = np.float32


@np.errstate(over="ignore", invalid="ignore", divide="ignore")  # inf/NaN data gives inf/NaN
def _normalize(x: np.ndarray, y: np.ndarray, axes: tuple[int, ...], eps: float) -> None:
    """y = (x - mean) / sqrt(var + eps) over `axes`."""
    mean = np.mean(x, axis=axes, keepdims=True, dtype=F32)
    np.subtract(x, mean, out=y)
    var = np.mean(np.square(y, dtype=F32), axis=axes, keepdims=True)
    var += eps
    np.sqrt(var, out=var)
    y /= var


@register("layer_norm")
def layer_norm(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """LayerNormFusion: normalise over axes >= begin_norm_axis, then * gamma + beta if given."""
    x, y = inputs[0], outputs[0]
    _normalize(x, y, tuple(range(attrs["begin_norm_axis"], x.ndim)), attrs["epsilon"])
    if len(inputs) > 1:
        y *= inputs[1]
    if len(inputs) > 2:
        y += inputs[2]


@register("instance_norm")
def instance_norm(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """InstanceNorm: normalise each (n, c) over the spatial axes, then * scale + bias (C,1,..)."""
    x, y = inputs[0], outputs[0]
    _normalize(x, y, tuple(range(2, x.ndim)), attrs["epsilon"])
    y *= inputs[1]
    y += inputs[2]


@register("scale_shift", inplace=True)
def scale_shift(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x * scale + shift, per channel on axis 1 (a BatchNorm not foldable into a
    conv; inputs: x, scale, shift with shapes broadcastable over NC...)."""
    y = outputs[0]
    np.multiply(inputs[0], inputs[1], out=y)
    y += inputs[2]
    fused(y, attrs)


@register("lrn")
@np.errstate(over="ignore", invalid="ignore", divide="ignore")  # as x / 0 and inf / inf give
def lrn(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """LRN across channels (axis 1): y = x / (bias + alpha * sum of x^2 over the channels
    within `radius`)^beta, alpha already per element (ONNX's alpha / size)."""
    x, r = inputs[0], attrs["radius"]
    squares = np.square(x, dtype=F32)
    padded = np.pad(squares, [(0, 0), (r, r)] + [(0, 0)] * (x.ndim - 2))
    window = np.zeros_like(squares)
    for k in range(2 * r + 1):  # channel windows of a few channels: shifted sums
        window += padded[:, k:k + x.shape[1]]
    window *= attrs["alpha"]
    window += attrs["bias"]
    np.divide(x, np.power(window, attrs["beta"], dtype=F32), out=outputs[0])


@register("lp_norm")
@np.errstate(invalid="ignore", divide="ignore")
def lp_norm(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """x / ||x||_p along attrs["axis"] (p 1 or 2); a zero norm gives 0, as onnxruntime's
    kernel does (not 0 / 0)."""
    x, axis = inputs[0], attrs["axis"]
    if attrs["p"] == 1:
        norm = np.sum(np.abs(x), axis=axis, keepdims=True, dtype=F32)
    else:
        norm = np.sqrt(np.sum(np.square(x, dtype=F32), axis=axis, keepdims=True))
    np.divide(x, norm, out=outputs[0])
    outputs[0][np.broadcast_to(norm == 0, x.shape)] = 0


# ---- rules -------------------------------------------------------------------------------


def _lrn_attrs(node: LiteNode) -> dict:
    """The kernel's attributes; absent fields are the schema's zeros, as the ONNX exporter
    reads them."""
    return {"radius": int(node.attrs.get("depth_radius", 0)),
            "bias": float(node.attrs.get("bias", 0.0)), "alpha": float(node.attrs.get("alpha", 0.0)),
            "beta": float(node.attrs.get("beta", 0.0))}


def _lrn_check(node: LiteNode) -> str | None:
    """Across channels only, and finite parameters: with an infinite one onnxruntime's
    running window sum makes the layer NaN everywhere (inf - inf); left to it."""
    region = node.attrs.get("norm_region") or "ACROSS_CHANNELS"
    if region != "ACROSS_CHANNELS":
        return f"norm_region {region}"
    attrs = _lrn_attrs(node)
    if not all(math.isfinite(attrs[k]) for k in ("bias", "alpha", "beta")):
        return f"non-finite alpha, beta or bias {attrs}"
    return None


@define("LRN", dtypes=FLOAT, check=_lrn_check, rank=(3, 99), kernels=("lrn",),
        note="across channels (axis 1), finite parameters")
def lrn_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    attrs = _lrn_attrs(node)
    # a window wider than the channels sums them all, as one of the channels' width does
    # (the numpy kernel pads by the radius: a huge one was a huge allocation)
    attrs["radius"] = max(0, min(attrs["radius"], ins[0].shape[1]))
    return Lowered("lrn", attrs, [0], [(ins[0].shape, ins[0].dtype)])


@native("lrn")
def _lrn_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """LRN of float32 NCHW (elementwise.c), the channels' windows in the numpy kernel's
    order."""
    x = ins[0]
    if not f32(x, outs[0]):
        return False
    b.params(x.shape[0], x.shape[1], math.prod(x.shape[2:]), attrs["radius"])
    b.f[0], b.f[1], b.f[2] = attrs["alpha"], attrs["bias"], attrs["beta"]
    b.slots(b.inputs[0], b.outputs[0])
    return True


def _lp_check(node: LiteNode) -> str | None:
    p = node.attrs.get("p", 2)
    return None if p in (1, 2) else f"p={p} (ONNX defines 1 and 2)"


@define("LpNormalization", dtypes=FLOAT, check=_lp_check, kernels=("lp_norm",), note="p 1 or 2")
def lp_norm_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    axis = axis_of(node, int(node.attrs.get("axis", -1)), len(ins[0].shape))
    attrs = {"axis": axis, "p": int(node.attrs.get("p", 2))}
    return Lowered("lp_norm", attrs, [0], [(ins[0].shape, ins[0].dtype)])


@native("lp_norm")
def _lp_norm_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """LpNormalization of float32 along any axis (elementwise.c), norms summed in double."""
    x = ins[0]
    if not f32(x, outs[0]) or not x.shape:
        return False
    b.params(*around(x.shape, attrs["axis"]), attrs["p"])
    b.slots(b.inputs[0], b.outputs[0])
    return True


@define("LayerNormFusion", dtypes=FLOAT, kernels=("layer_norm",))
def layer_norm_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    ndim = len(ins[0].shape)
    axis = axis_of(node, int(node.attrs.get("begin_norm_axis", -1)), ndim)
    normalized = tuple(ins[0].shape[axis:])
    for what, t in zip(("gamma", "beta"), ins[1:3], strict=False):
        # as onnxruntime requires: the normalised dims, or a shape that broadcasts to them
        try:
            fits = np.broadcast_shapes(tuple(t.shape), normalized) == normalized
        except ValueError:
            fits = False
        if not fits:
            raise InvalidModelError(f"{describe(node)}: {what} of shape {list(t.shape)} does "
                                    f"not broadcast to the normalised dims {list(normalized)}")
    attrs = {"begin_norm_axis": axis, "epsilon": float(node.attrs.get("epsilon", 1e-5))}
    return Lowered("layer_norm", attrs, list(range(min(len(ins), 3))), [(ins[0].shape, ins[0].dtype)])


@define("InstanceNorm", dtypes=FLOAT, const_inputs=(1, 2), kernels=("instance_norm",))
def instance_norm_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    nd = len(ins[0].shape)
    operands: list[int | np.ndarray | Packed] = [0, per_channel(const(node, ins, 1, "scale"), nd),
                                                 per_channel(const(node, ins, 2, "bias"), nd)]
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
        raise InvalidModelError(f"{describe(node)}: {len(ins)} inputs, expected 3 or 5")
    scale = gamma / np.sqrt(var + eps)
    return scale, beta - mean * scale


@define("FusedBatchNorm", "BatchNorm", dtypes=FLOAT, const_inputs=(1, 2, 3, 4),
        kernels=("scale_shift",))
def batch_norm_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    scale, shift = batchnorm_affine(node, ins)
    nd = len(ins[0].shape)
    dt = ins[0].dtype
    operands: list[int | np.ndarray | Packed] = [0, per_channel(scale.astype(dt), nd), per_channel(shift.astype(dt), nd)]
    return Lowered("scale_shift", {"activation": "NO_ACTIVATION"}, operands, [(ins[0].shape, dt)])


@native("layer_norm")
def _layer_norm_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """float32, gamma and beta (when given) spanning the normalised dims whole."""
    x = ins[0]
    length = math.prod(x.shape[attrs["begin_norm_axis"]:])
    if not f32(*ins, outs[0]) or any(t.nbytes != 4 * length for t in ins[1:]):
        return False
    b.params(math.prod(x.shape[:attrs["begin_norm_axis"]]), length, len(ins) > 1, len(ins) > 2, 0)
    b.f[0] = attrs["epsilon"]
    b.slots(b.inputs[0], b.inputs[1] if len(ins) > 1 else None,
            b.inputs[2] if len(ins) > 2 else None, b.outputs[0])
    return True


@native("instance_norm", op="layer_norm")
def _instance_norm_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict,
                          b: StepBuilder) -> bool:
    """float32: the layer norm's rows, one per (image, channel), with the channel's scale and
    bias (image-to-image models, and PyTorch's GroupNorm exported as a reshaped InstanceNorm)."""
    x = ins[0]
    if not f32(*ins, outs[0]) or len(x.shape) < 3 or \
            any(t.nbytes != 4 * x.shape[1] for t in ins[1:3]):
        return False
    b.params(x.shape[0] * x.shape[1], math.prod(x.shape[2:]), 1, 1, x.shape[1])
    b.f[0] = attrs["epsilon"]
    b.slots(*b.inputs[:3], b.outputs[0])
    return True


@native("scale_shift", op="dwconv")
def _scale_shift_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """A 1x1 depthwise conv: the scale its weights, the shift its bias (one per channel)."""
    x, y = ins[0], outs[0]
    if not f32(*ins, y) or len(x.shape) < 2 or any(t.nbytes != 4 * x.shape[1] for t in ins[1:]):
        return False
    n, c, size = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    act = b.activation_code(attrs.get("activation", "NO_ACTIVATION"))
    if act is None:
        return False
    b.params(n, c, 1, size, c, 1, size, c, 1, 1, 1, 1, 1, 1, 0, 0, act, 0, 0, 0, 0)
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2], None, b.outputs[0])
    return True
