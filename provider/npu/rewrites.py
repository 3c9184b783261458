"""Graph rewrites the compiler makes before lowering (each returns a new model, the input is
never mutated): an inference BatchNorm folded into the conv before it, x * sigmoid(x)
written as one SWISH Activation (SiLU, exported to ONNX as Sigmoid and Mul),
x * relu6(x + 3) / 6 as one HSWISH Activation, a constant bias Add after a MatMul as the
MatMul's bias, x * 0.5 * (1 + erf(x / sqrt(2))) as one GELU Activation, and a
parameter-free Activation folded into the producer before it (its activation_type), each
saving passes over the tensor (affine_folds.py folds constant scales and shifts into convs).
Quantized nodes are left alone (their ranges are the quantizer's)."""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np

from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from provider.npu.ops.common import F32, TensorInfo
from provider.npu.ops.norm import batchnorm_affine
from provider.npu.ops.registry import QUANT_NONE

log = logging.getLogger("litenpu.npu")

__all__ = ["consumers", "fold_batchnorm", "fuse_bias_adds", "fuse_gelu", "fuse_hardswish",
           "fuse_swish", "fuse_activations"]


def consumers(model: LiteModel) -> dict[int, list[int]]:
    """Per tensor index, the indices of the nodes that read it."""
    users: dict[int, list[int]] = {}
    for ni, node in enumerate(model.nodes):
        for t in node.inputs:
            users.setdefault(t, []).append(ni)
    return users


def fold_batchnorm(model: LiteModel) -> LiteModel:
    """A copy of `model` where each BatchNorm right after a Conv2DFusion is folded into it.

    Applies when the conv has no fused activation, its output feeds only the BatchNorm and
    is not a graph output, and weights, bias and BN statistics are all constants.
    """
    producers = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    users = consumers(model)
    tensors = list(model.tensors)
    nodes: list[LiteNode | None] = list(model.nodes)
    for bi, bn in enumerate(model.nodes):
        if bn.op not in ("FusedBatchNorm", "BatchNorm") or not bn.inputs:
            continue
        x = bn.inputs[0]
        ci = producers.get(x)
        if ci is None or nodes[ci] is None or nodes[ci].op != "Conv2DFusion":
            continue
        conv = nodes[ci]
        if (users.get(x) != [bi] or x in model.outputs or conv.quant_type not in QUANT_NONE
                or bn.quant_type not in QUANT_NONE
                or conv.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION"
                or any(tensors[t].data is None for t in (*conv.inputs[1:], *bn.inputs[1:]))):
            continue
        infos = [TensorInfo((), F32, tensors[t].data) for t in bn.inputs]
        scale, shift = batchnorm_affine(bn, infos)
        w = tensors[conv.inputs[1]]
        # computed in float64 and rounded once, without a float64 copy of the weights
        new_w = np.empty_like(w.data)
        np.multiply(w.data, scale.reshape(-1, 1, 1, 1), out=new_w, dtype=np.float64,
                    casting="same_kind")
        bias = tensors[conv.inputs[2]].data.astype(np.float64) if len(conv.inputs) > 2 else 0.0
        new_b = (bias * scale + shift).astype(w.data.dtype)
        wi = len(tensors)
        tensors.append(dataclasses.replace(w, name=f"{w.name}/bn_folded", data=new_w))
        tensors.append(LiteTensor.of(f"{bn.name}/bn_bias", new_b.dtype, new_b.shape, new_b))
        nodes[ci] = dataclasses.replace(
            conv, inputs=[conv.inputs[0], wi, wi + 1], outputs=[bn.outputs[0]],
            attrs={**conv.attrs, "activation_type": "NO_ACTIVATION"})
        nodes[bi] = None
        log.debug("folded %s into %s", bn.name, conv.name)
    return dataclasses.replace(model, tensors=tensors, nodes=[n for n in nodes if n is not None],
                               subgraphs=[])


def fuse_swish(model: LiteModel) -> LiteModel:
    """A copy of `model` where MulFusion(x, Activation[SIGMOID](x)) (either operand order) is
    one Activation[SWISH](x): the sigmoid's output must feed only that Mul and be no graph
    output, and the Mul have no activation of its own. fuse_activations may then fold the
    SWISH into x's producer (a conv's epilogue)."""
    producers = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    users = consumers(model)
    nodes: list[LiteNode | None] = list(model.nodes)
    for mi, mul in enumerate(model.nodes):
        if (mul.op != "MulFusion" or len(mul.inputs) != 2 or len(mul.outputs) != 1
                or mul.quant_type not in QUANT_NONE
                or mul.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION"):
            continue
        for s, x in (mul.inputs, mul.inputs[::-1]):
            si = producers.get(s)
            sig = nodes[si] if si is not None else None
            if (sig is not None and sig.op == "Activation" and sig.inputs == [x] and s != x
                    and sig.attrs.get("activation_type") == "SIGMOID"
                    and sig.quant_type in QUANT_NONE and users.get(s) == [mi]
                    and s not in model.outputs):
                nodes[mi] = dataclasses.replace(mul, op="Activation", inputs=[x],
                                                attrs={"activation_type": "SWISH"})
                nodes[si] = None
                break
    return dataclasses.replace(model, nodes=[n for n in nodes if n is not None], subgraphs=[])


def fuse_bias_adds(model: LiteModel) -> LiteModel:
    """A copy of `model` where AddFusion(MatMulFusion(a, B), c) (either operand order) is one
    MatMulFusion(a, B, c) whose kernel adds c in its epilogue: B a matrix of a static shape
    (a constant, or weights the compiler folds: a dequantized int8 matrix), c a constant of
    B's N columns (shape (N,)) of B's dtype, the product feeding only the Add and no graph
    output, the MatMul with no bias or activation of its own (the Add's activation moves to
    it). Exporters write a dense layer so (BERT's every projection); the Add was a pass over
    the layer's output of its own."""
    producers = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    users = consumers(model)
    nodes: list[LiteNode | None] = list(model.nodes)
    for ai, add in enumerate(model.nodes):
        if (add.op != "AddFusion" or len(add.inputs) != 2 or len(add.outputs) != 1
                or add.quant_type not in QUANT_NONE):
            continue
        for x, c in (add.inputs, add.inputs[::-1]):
            mi = producers.get(x)
            mm = nodes[mi] if mi is not None else None
            if (mm is None or mm.op != "MatMulFusion" or len(mm.inputs) != 2 or x == c
                    or mm.quant_type not in QUANT_NONE or users.get(x) != [ai]
                    or x in model.outputs or mm.attrs.get("transpose_a", False)
                    or mm.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION"):
                continue
            b, bias = model.tensors[mm.inputs[1]], model.tensors[c].data
            if (len(b.shape) != 2 or not all(isinstance(d, int) and d > 0 for d in b.shape)
                    or bias is None or bias.dtype != b.dtype):
                continue
            n = b.shape[0] if mm.attrs.get("transpose_b", False) else b.shape[1]
            if bias.shape != (n,):  # (1, N) would broadcast a 1-D product up a rank
                continue
            nodes[mi] = dataclasses.replace(
                mm, inputs=[*mm.inputs, c], outputs=list(add.outputs),
                attrs={**mm.attrs, "activation_type": add.attrs.get("activation_type",
                                                                    "NO_ACTIVATION")})
            nodes[ai] = None
            break
    return dataclasses.replace(model, nodes=[n for n in nodes if n is not None], subgraphs=[])


def fuse_gelu(model: LiteModel) -> LiteModel:
    """A copy of `model` where x * 0.5 * (1 + erf(x / sqrt(2))), as exporters write an exact
    GELU (Div by sqrt(2) or Mul by its inverse, Erf, Add 1, then the Muls by x and by 0.5
    in any order and grouping), is one Activation[GELU](x): five passes over the tensor (a
    transformer's widest, its feed-forward layer) become one. Every intermediate must feed
    only the next node and be no graph output, and carry no activation."""
    producers = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    users = consumers(model)
    nodes: list[LiteNode | None] = list(model.nodes)

    def plain(ni: int | None, op: str) -> LiteNode | None:
        """Node ni when it is a live, unquantized, activation-free `op` with two inputs."""
        node = nodes[ni] if ni is not None else None
        if (node is None or node.op != op or node.quant_type not in QUANT_NONE
                or len(node.outputs) != 1
                or node.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION"):
            return None
        return node if op == "Erf" or len(node.inputs) == 2 else None

    def only_user(t: int) -> int | None:
        """The one node reading t (no graph output), else None."""
        readers = users.get(t, [])
        return readers[0] if len(readers) == 1 and t not in model.outputs else None

    def other(node: LiteNode, t: int) -> int:
        return node.inputs[1] if node.inputs[0] == t else node.inputs[0]

    def near(t: int, value: float) -> bool:  # once x is known
        return _scalar(model, t, value, x, 1e-6)

    for ei, erf in enumerate(model.nodes):
        if plain(ei, "Erf") is None or len(erf.inputs) != 1:
            continue
        di = producers.get(erf.inputs[0])
        scale = plain(di, "DivFusion") or plain(di, "MulFusion")
        if scale is None or only_user(erf.inputs[0]) != ei:
            continue
        by = math.sqrt(2) if scale.op == "DivFusion" else math.sqrt(0.5)
        if _scalar(model, scale.inputs[1], by, scale.inputs[0], 1e-6):
            x = scale.inputs[0]
        elif scale.op == "MulFusion" and _scalar(model, scale.inputs[0], by, scale.inputs[1], 1e-6):
            x = scale.inputs[1]
        else:
            continue
        ai = only_user(erf.outputs[0])
        add = plain(ai, "AddFusion")
        if add is None or not near(other(add, erf.outputs[0]), 1.0):
            continue
        # then x * a * 0.5 as (x * a) * 0.5, (a * 0.5) * x, or a * (x * 0.5)
        m1i = only_user(add.outputs[0])
        m1 = plain(m1i, "MulFusion")
        if m1 is None:
            continue
        f = other(m1, add.outputs[0])
        hi = producers.get(f)
        half = plain(hi, "MulFusion")
        if f == x or near(f, 0.5):  # a second Mul by the other factor
            yi = only_user(m1.outputs[0])
            y = plain(yi, "MulFusion")
            if y is None or not (near(other(y, m1.outputs[0]), 0.5) if f == x
                                 else other(y, m1.outputs[0]) == x):
                continue
            gone, last = [di, ei, ai, m1i], yi
        elif (half is not None and only_user(f) == m1i and x in half.inputs
              and near(other(half, x), 0.5)):
            gone, last = [di, ei, ai, hi], m1i
        else:
            continue
        nodes[last] = dataclasses.replace(nodes[last], op="Activation", inputs=[x],
                                          attrs={"activation_type": "GELU", "approximate": False})
        for ni in gone:
            nodes[ni] = None
    return dataclasses.replace(model, nodes=[n for n in nodes if n is not None], subgraphs=[])


def _scalar(model: LiteModel, t: int, value: float, x: int, rel: float = 0.0) -> bool:
    """Whether tensor t is a constant holding `value` (within rel of it) once, of no more dims
    than x (the tensor the rewritten nodes take): a (1, 1, 1, 1) constant in a chain on a
    rank-3 x makes its result rank 4, which the one Activation replacing it would not."""
    data = model.tensors[t].data
    return (data is not None and data.size == 1 and data.ndim <= len(model.tensors[x].shape)
            and abs(float(data.reshape(-1)[0]) - value) <= rel * abs(value))


def fuse_hardswish(model: LiteModel) -> LiteModel:
    """A copy of `model` where x * relu6(x + 3) / 6, as exporters write a hard swish (Add,
    Clip or Relu6, Mul, then Div by 6; run after fuse_activations, which makes the first two
    one Add with a RELU6), is one Activation[HSWISH](x); fuse_activations may then fold it
    into x's producer. Every intermediate must feed only the next node and be no graph
    output; the Mul and the Div must carry no activation."""
    producers = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    users = consumers(model)
    nodes: list[LiteNode | None] = list(model.nodes)

    def made_by(t: int, op: str, activation: str, user: int) -> int | None:
        """The producer of t when it is `op` with `activation`, feeding only node `user`."""
        ni = producers.get(t)
        node = nodes[ni] if ni is not None else None
        if node is None or node.op != op or len(node.inputs) != 2 or len(node.outputs) != 1 \
                or node.quant_type not in QUANT_NONE or users.get(t) != [user] \
                or t in model.outputs \
                or node.attrs.get("activation_type", "NO_ACTIVATION") != activation:
            return None
        return ni

    for di, div in enumerate(model.nodes):
        if div.op != "DivFusion" or len(div.inputs) != 2 or div.quant_type not in QUANT_NONE \
                or div.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION":
            continue
        mi = made_by(div.inputs[0], "MulFusion", "NO_ACTIVATION", di)
        if mi is None:
            continue
        mul = nodes[mi]
        for x, r in (mul.inputs, mul.inputs[::-1]):
            ai = made_by(r, "AddFusion", "RELU6", mi) if x != r else None
            add = nodes[ai] if ai is not None else None
            if add is None or add.inputs.count(x) != 1 or not _scalar(
                    model, next(t for t in add.inputs if t != x), 3.0, x) \
                    or not _scalar(model, div.inputs[1], 6.0, x):
                continue
            nodes[di] = dataclasses.replace(div, op="Activation", inputs=[x],
                                            attrs={"activation_type": "HSWISH"})
            nodes[mi] = nodes[ai] = None
            break
    return dataclasses.replace(model, nodes=[n for n in nodes if n is not None], subgraphs=[])


# Producers whose kernels apply a fused activation, and the activations that need no
# parameters (ops.activation.fused passes none).
_FUSES_ACTIVATION = {"Conv2DFusion", "Conv2dTransposeFusion", "FullConnection", "MatMulFusion",
                     "AddFusion", "SubFusion", "MulFusion", "DivFusion", "MaxPoolFusion",
                     "AvgPoolFusion"}
_FUSABLE = {"RELU", "RELU6", "SIGMOID", "TANH", "HSWISH", "SWISH", "SOFTPLUS", "SOFTSIGN", "ABS",
            "GELU"}  # GELU's exact form only: a producer's activation_type has no `approximate`


def fuse_activations(model: LiteModel) -> LiteModel:
    """A copy of `model` where an Activation right after a fusing producer (conv, GEMM,
    binary arithmetic, pooling) becomes that producer's activation_type.

    Applies when the producer has no activation yet, its output feeds only the Activation
    and is not a graph output, and the activation takes no parameters.
    """
    producers = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    users = consumers(model)
    nodes: list[LiteNode | None] = list(model.nodes)
    for ai, act in enumerate(model.nodes):
        kind = act.attrs.get("activation_type")
        if (act.op != "Activation" or kind not in _FUSABLE or len(act.inputs) != 1
                or act.attrs.get("approximate")):
            continue
        x = act.inputs[0]
        pi = producers.get(x)
        if pi is None or nodes[pi] is None or nodes[pi].op not in _FUSES_ACTIVATION:
            continue
        prod = nodes[pi]
        if (users.get(x) != [ai] or x in model.outputs or len(prod.outputs) != 1
                or prod.quant_type not in QUANT_NONE or act.quant_type not in QUANT_NONE
                or prod.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION"):
            continue
        nodes[pi] = dataclasses.replace(prod, outputs=list(act.outputs),
                                        attrs={**prod.attrs, "activation_type": kind})
        nodes[ai] = None
    return dataclasses.replace(model, nodes=[n for n in nodes if n is not None], subgraphs=[])
