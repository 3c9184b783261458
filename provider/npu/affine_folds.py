"""Constant per-channel affine maps folded into the convs around them (compiler rewrites, run
before lowering; each returns a new model and leaves its input alone).

Exporters write a conv's learnable scale and shift as separate nodes: PaddleOCR's MobileNets
follow every conv with a Mul and an Add by constants, and every hard swish with another
pair. Each such node is one more pass over the tensor (in PP-OCRv4's recogniser the four
of them took as long as its convs). A Mul / Div / Add / Sub by a constant that is a scalar
or one value per channel folds into

- the conv before it (`fold_conv_affine`): y = s * conv(x) + t is a conv with weights s * W
  and bias s * b + t;
- the conv after it when that conv pads nothing (`fold_input_affine`): conv(s * x + t) has
  weights W * s (per input channel) and bias b + sum(W * t), exact only where no padding
  zero enters a window;
- else a scale then a shift become one pass (`merge_scale_shift`): a BatchNorm with mean 0,
  variance 1 and epsilon 0, whose scale and shift are then exactly the two constants (the
  same two roundings as the Mul and the Add).

Weights and biases are computed in float64 and rounded once. Quantized nodes are left alone
(their ranges are the quantizer's).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import numpy as np

from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from provider.npu.ops.registry import QUANT_NONE
from provider.npu.rewrites import consumers

log = logging.getLogger("litenpu.npu")

__all__ = ["fold_conv_affine", "fold_input_affine", "merge_scale_shift"]

_AFFINE = ("MulFusion", "DivFusion", "AddFusion", "SubFusion")


def _channel_vector(value: np.ndarray, channels: int) -> np.ndarray | None:
    """A constant broadcast against an NCHW tensor of `channels` channels, as one float64
    value per channel; None unless it is a scalar or varies along the channel axis only."""
    if value.ndim > 4 or value.dtype != np.float32:
        return None
    shape = (1,) * (4 - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1).astype(np.float64), (channels,))


def _operand(model: LiteModel, node: LiteNode, x: int) -> tuple[np.ndarray, bool] | None:
    """The constant other operand of binary `node` whose input `x` is, and whether x comes
    first; None when the node is not such a binary."""
    if node.op not in _AFFINE or len(node.inputs) != 2 or len(node.outputs) != 1 \
            or node.quant_type not in QUANT_NONE or node.inputs.count(x) != 1:
        return None
    first = node.inputs[0] == x
    data = model.tensors[node.inputs[1 if first else 0]].data
    if data is None or (not first and node.op in ("DivFusion", "SubFusion")):
        return None
    return data, first


def _linear(op: str, c: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) per channel of y = x op c; None for a division by zero (left as
    written: its infinities and NaNs are the graph's)."""
    if op == "DivFusion" and not np.all(c):
        return None
    one, zero = np.ones_like(c), np.zeros_like(c)
    return {"MulFusion": (c, zero), "DivFusion": (1.0 / c, zero),
            "AddFusion": (one, c), "SubFusion": (one, -c)}[op]


def _foldable_conv(model: LiteModel, conv: LiteNode) -> bool:
    return (conv.op == "Conv2DFusion" and conv.quant_type in QUANT_NONE
            and len(conv.inputs) in (2, 3) and len(conv.outputs) == 1
            and all(model.tensors[t].data is not None and model.tensors[t].data.dtype == np.float32
                    for t in conv.inputs[1:])
            and model.tensors[conv.inputs[1]].data.ndim == 4)


def _with_conv(tensors: list[LiteTensor], conv: LiteNode, w: np.ndarray, b: np.ndarray,
               **changes) -> LiteNode:
    """`conv` with new weights and bias (new tensors appended to `tensors`)."""
    old = tensors[conv.inputs[1]]
    tensors.append(dataclasses.replace(old, name=f"{old.name}/affine", data=w.astype(np.float32)))
    tensors.append(LiteTensor.of(f"{conv.name}/affine_bias", np.dtype(np.float32), b.shape,
                                 b.astype(np.float32)))
    n = len(tensors)
    return dataclasses.replace(conv, inputs=[conv.inputs[0], n - 2, n - 1], **changes)


def _weights(tensors: list[LiteTensor], conv: LiteNode) -> tuple[np.ndarray, np.ndarray]:
    w = tensors[conv.inputs[1]].data.astype(np.float64)
    b = (tensors[conv.inputs[2]].data.astype(np.float64).reshape(-1) if len(conv.inputs) > 2
         else np.zeros(w.shape[0]))
    return w, b


# One fold: (the live model, its tensors (appended to), its nodes (a fold sets the removed
# one to None), producers, consumers) -> whether it folded something.
Fold = Callable[[LiteModel, list, list, dict, dict], bool]


def _until_stable(model: LiteModel, fold: Fold) -> LiteModel:
    """`fold` applied pass after pass, each on the graph the last one left, until a pass
    folds nothing (a scale then a shift fold one after the other)."""
    tensors = list(model.tensors)
    nodes: list[LiteNode | None] = list(model.nodes)
    while True:
        live = dataclasses.replace(model, tensors=tensors, nodes=[n for n in nodes if n is not None])
        producers = {t: ni for ni, node in enumerate(live.nodes) for t in node.outputs}
        nodes = list(live.nodes)
        if not fold(live, tensors, nodes, producers, consumers(live)):
            return dataclasses.replace(live, nodes=[n for n in nodes if n is not None],
                                       subgraphs=[])


def _fold_after_conv(live: LiteModel, tensors: list, nodes: list, producers: dict,
                     users: dict) -> bool:
    for bi, node in enumerate(live.nodes):
        for x in node.inputs:
            ci = producers.get(x)
            conv = nodes[ci] if ci is not None else None
            found = _operand(live, node, x) if conv is not None else None
            if found is None or not _foldable_conv(live, conv) or users.get(x) != [bi] \
                    or x in live.outputs \
                    or conv.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION":
                continue
            w, b = _weights(tensors, conv)
            c = _channel_vector(found[0], w.shape[0])
            linear = _linear(node.op, c) if c is not None else None
            if linear is None:
                continue
            scale, shift = linear
            nodes[ci] = _with_conv(
                tensors, conv, w * scale.reshape(-1, 1, 1, 1), b * scale + shift,
                outputs=list(node.outputs),
                attrs={**conv.attrs, "activation_type": node.attrs.get("activation_type",
                                                                        "NO_ACTIVATION")})
            nodes[bi] = None
            log.debug("folded %s into %s", node.name, conv.name)
            return True
    return False


def fold_conv_affine(model: LiteModel) -> LiteModel:
    """A copy of `model` where each Mul / Div / Add / Sub by a per-channel constant right
    after a Conv2DFusion is folded into it (repeatedly: a scale then a shift both fold).

    Applies when the conv has no activation yet (the binary's becomes the conv's), its output
    feeds only the binary and is not a graph output, and the binary keeps the conv's shape.
    """
    return _until_stable(model, _fold_after_conv)


def _pads_nothing(conv: LiteNode) -> bool:
    mode = str(conv.attrs.get("pad_mode", "PAD")).upper()
    if mode == "SAME":
        return list(conv.attrs.get("kernel_size", [0, 0])) == [1, 1]
    return not any(conv.attrs.get("pad_list") or [])


def _has_channels(tensor: LiteTensor, channels: int) -> bool:
    """Whether `tensor` is known to be NCHW with `channels` channels."""
    return len(tensor.shape) == 4 and tensor.shape[1] == channels


def _fold_before_conv(live: LiteModel, tensors: list, nodes: list, producers: dict,
                      users: dict) -> bool:
    for ci, conv in enumerate(live.nodes):
        if not _foldable_conv(live, conv) or not _pads_nothing(conv):
            continue
        h = conv.inputs[0]
        bi = producers.get(h)
        node = nodes[bi] if bi is not None else None
        if node is None or users.get(h) != [ci] or h in live.outputs \
                or node.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION":
            continue
        x = next((t for t in node.inputs if tensors[t].data is None), None)
        found = _operand(live, node, x) if x is not None else None
        w, b = _weights(tensors, conv)
        group = int(conv.attrs.get("group", 1)) or 1
        c = _channel_vector(found[0], w.shape[1] * group) if found is not None else None
        if c is None or (found[0].size > 1 and not _has_channels(tensors[x], len(c))):
            continue  # a per-channel constant must not be what widens x to the channels
        linear = _linear(node.op, c)
        if linear is None:
            continue
        scale, shift = linear
        # input channel i of group g is channel g * (C / G) + i
        per_out = np.repeat(np.arange(group), w.shape[0] // group)
        s = scale.reshape(group, -1)[per_out].reshape(w.shape[0], w.shape[1], 1, 1)
        t = shift.reshape(group, -1)[per_out].reshape(w.shape[0], w.shape[1], 1, 1)
        nodes[ci] = _with_conv(tensors, dataclasses.replace(conv, inputs=[x, *conv.inputs[1:]]),
                               w * s, b + (w * t).sum(axis=(1, 2, 3)))
        nodes[bi] = None
        log.debug("folded %s into %s", node.name, conv.name)
        return True
    return False


def fold_input_affine(model: LiteModel) -> LiteModel:
    """A copy of `model` where each Mul / Div / Add / Sub by a per-channel constant whose
    output feeds only a Conv2DFusion that pads nothing is folded into that conv (repeatedly:
    a scale then a shift both fold). The binary must have no activation of its own."""
    return _until_stable(model, _fold_before_conv)


def merge_scale_shift(model: LiteModel) -> LiteModel:
    """A copy of `model` where Mul(x, s) then Add(., t) (or Sub), s and t scalars or one
    value per channel of an NCHW x of known channels, is one FusedBatchNorm (mean 0,
    variance 1, epsilon 0): one pass over the tensor instead of two. The Mul's output must
    feed only the Add and be no graph output; neither may carry an activation."""
    producers = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    users = consumers(model)
    tensors = list(model.tensors)
    nodes: list[LiteNode | None] = list(model.nodes)
    for ai, add in enumerate(model.nodes):
        if add.op not in ("AddFusion", "SubFusion") \
                or add.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION":
            continue
        m = next((t for t in add.inputs if tensors[t].data is None), None)
        mi = producers.get(m) if m is not None else None
        mul = nodes[mi] if mi is not None else None
        if mul is None or mul.op != "MulFusion" or users.get(m) != [ai] or m in model.outputs \
                or mul.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION":
            continue
        x = next((t for t in mul.inputs if tensors[t].data is None), None)
        found = _operand(model, mul, x) if x is not None else None
        shift = _operand(model, add, m)
        if found is None or shift is None or len(tensors[x].shape) != 4 \
                or not isinstance(tensors[x].shape[1], int) or tensors[x].shape[1] <= 0:
            continue
        channels = tensors[x].shape[1]
        s, t = _channel_vector(found[0], channels), _channel_vector(shift[0], channels)
        if s is None or t is None:
            continue
        t = -t if add.op == "SubFusion" else t
        first = len(tensors)
        for name, value in (("scale", s), ("shift", t), ("mean", np.zeros(channels)),
                            ("var", np.ones(channels))):
            tensors.append(LiteTensor.of(f"{add.name}/{name}", np.dtype(np.float32), (channels,),
                                         value.astype(np.float32)))
        nodes[ai] = dataclasses.replace(add, op="FusedBatchNorm", attrs={"epsilon": 0.0},
                                        inputs=[x, *range(first, first + 4)])
        nodes[mi] = None
    return dataclasses.replace(model, tensors=tensors, nodes=[n for n in nodes if n is not None],
                               subgraphs=[])
