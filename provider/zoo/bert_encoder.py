"""A BERT-style text encoder with a dynamic batch and sequence length, written the way a
tracing exporter writes one: word, position (Range over the run-time length) and token-type
embeddings gathered and summed, the attention mask turned into an additive bias (Unsqueeze,
Cast, Sub, Mul), post-norm layers of multi-head attention whose Reshapes take shapes built
from Shape -> Gather -> Unsqueeze -> Concat, and an Erf GELU MLP. The first layer uses the
fused LayerNormalization op, the second the decomposed ReduceMean/Sub/Pow/Sqrt/Div form that
older exports contain; a Tanh pooler reads the first token.

Inputs `input_ids`, `attention_mask` int64 [batch, sequence] -> `last_hidden_state`
[batch, sequence, HIDDEN], `pooler_output` [batch, HIDDEN].
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from provider.zoo._builder import GraphBuilder, tensor
from provider.zoo.inputs import Feed, Inputs

VOCAB, MAX_POSITIONS, HIDDEN, HEADS, FF = 1000, 128, 64, 4, 128
HEAD_DIM = HIDDEN // HEADS

INPUTS = Inputs((Feed("input_ids", "integers", "int64", 0, VOCAB),
                 Feed("attention_mask", "mask", "int64")),
                ({"input_ids": (1, 16), "attention_mask": (1, 16)},
                 {"input_ids": (2, 48), "attention_mask": (2, 48)}))


def _scalar(b: GraphBuilder, value: float, name: str) -> str:
    return b.const(np.array(value, np.float32), name)


def _decomposed_layer_norm(b: GraphBuilder, x: str) -> str:
    """(x - mean) / sqrt(var + eps) * gamma + beta in elementary ops, as opset < 17 exports."""
    mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
    centred = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [centred, _scalar(b, 2.0, "two")])], axes=[-1],
               keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, _scalar(b, 1e-12, "eps")])])
    gamma = b.const((1 + 0.05 * b.rng.standard_normal(HIDDEN)).astype(np.float32), "ln_g")
    beta = b.const((0.05 * b.rng.standard_normal(HIDDEN)).astype(np.float32), "ln_b")
    return b.op("Add", [b.op("Mul", [b.op("Div", [centred, std]), gamma]), beta])


def _embeddings(b: GraphBuilder) -> str:
    words = b.weight((VOCAB, HIDDEN), scale=0.5, name="word_emb")
    positions = b.weight((MAX_POSITIONS, HIDDEN), scale=0.5, name="pos_emb")
    token_type = b.weight((1, 1, HIDDEN), scale=0.5, name="type_emb")
    length = b.op("Gather", [b.op("Shape", ["input_ids"]), b.ints(1, "axis")], axis=0)
    position_ids = b.op("Unsqueeze", [b.op("Range", [b.ints(0, "start"), length,
                                                     b.ints(1, "delta")]), b.ints([0], "axes")])
    h = b.op("Add", [b.op("Gather", [words, "input_ids"], axis=0),
                     b.op("Gather", [positions, position_ids], axis=0)])
    return b.layer_norm(b.op("Add", [h, token_type]), HIDDEN)


def _mask_bias(b: GraphBuilder) -> str:
    """attention_mask [batch, seq] -> (1 - mask) * -10000 as [batch, 1, 1, seq]."""
    mask = b.op("Cast", [b.op("Unsqueeze", ["attention_mask", b.ints([1, 2], "axes")])],
                to=TensorProto.FLOAT)
    return b.op("Mul", [b.op("Sub", [_scalar(b, 1.0, "one"), mask]),
                        _scalar(b, -10000.0, "mask_fill")])


def _split_heads(b: GraphBuilder, x: str, batch: str, seq: str) -> str:
    """[batch, seq, HIDDEN] -> [batch, HEADS, seq, HEAD_DIM], its shape from run-time dims."""
    shape = b.shape_of([batch, seq, b.ints([HEADS]), b.ints([HEAD_DIM])])
    return b.op("Transpose", [b.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])


def _attention(b: GraphBuilder, x: str, bias: str) -> str:
    batch, seq = b.dim(x, 0), b.dim(x, 1)
    q, k, v = (_split_heads(b, b.dense(x, HIDDEN, HIDDEN), batch, seq) for _ in range(3))
    scores = b.op("Div", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                          _scalar(b, math.sqrt(HEAD_DIM), "sqrt_head_dim")])
    probs = b.op("Softmax", [b.op("Add", [scores, bias])], axis=-1)
    context = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merged = b.op("Reshape", [context, b.shape_of([batch, seq, b.ints([HIDDEN])])])
    return b.dense(merged, HIDDEN, HIDDEN)


def build() -> onnx.ModelProto:
    b = GraphBuilder("bert_encoder", seed=12)
    h = _embeddings(b)
    bias = _mask_bias(b)
    for fused in (True, False):
        norm = (lambda x: b.layer_norm(x, HIDDEN)) if fused else (
            lambda x: _decomposed_layer_norm(b, x))
        h = norm(b.op("Add", [h, _attention(b, h, bias)]))
        mlp = b.dense(b.gelu(b.dense(h, HIDDEN, FF)), FF, HIDDEN)
        h = norm(b.op("Add", [h, mlp]))
    first = b.op("Gather", [h, b.ints(0, "index")], axis=1)
    pooled = b.op("Tanh", [b.dense(first, HIDDEN, HIDDEN)])
    b.rename(h, "last_hidden_state")
    b.rename(pooled, "pooler_output")
    ids = ["batch", "sequence"]
    return b.model([tensor("input_ids", ids, TensorProto.INT64),
                    tensor("attention_mask", ids, TensorProto.INT64)],
                   [tensor("last_hidden_state", [*ids, HIDDEN]),
                    tensor("pooler_output", ["batch", HIDDEN])],
                   doc="BERT-style encoder, dynamic batch and sequence (litenpu family model)")
