"""A small transformer encoder: two pre-norm layers of multi-head self-attention (MatMul
projections, Reshape/Transpose into heads, scaled Softmax attention) and an Erf-based GELU
MLP, with LayerNormalization and residual Adds, then a final LayerNormalization.

Input `tokens` [batch, 16, 64] -> `encoded` [batch, 16, 64]. `python -m models.transformer_encoder` rewrites
models/transformer_encoder.onnx.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from provider.zoo._builder import GraphBuilder, tensor

SEQ, D_MODEL, HEADS, D_FF, LAYERS = 16, 64, 4, 128, 2
HEAD_DIM = D_MODEL // HEADS


def _heads(b: GraphBuilder, x: str) -> str:
    """[batch, seq, d_model] -> [batch, heads, seq, head_dim]."""
    shape = b.const(np.array([0, SEQ, HEADS, HEAD_DIM], np.int64), "heads_shape")
    return b.op("Transpose", [b.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])


def _attention(b: GraphBuilder, x: str) -> str:
    q, k, v = (_heads(b, b.dense(x, D_MODEL, D_MODEL)) for _ in range(3))
    k_t = b.op("Transpose", [k], perm=[0, 1, 3, 2])
    scale = b.const(np.array(1 / math.sqrt(HEAD_DIM), np.float32), "attn_scale")
    scores = b.op("Mul", [b.op("MatMul", [q, k_t]), scale])
    context = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    merged = b.op("Transpose", [context], perm=[0, 2, 1, 3])
    shape = b.const(np.array([0, SEQ, D_MODEL], np.int64), "merge_shape")
    return b.dense(b.op("Reshape", [merged, shape]), D_MODEL, D_MODEL)


def build() -> onnx.ModelProto:
    b = GraphBuilder("transformer_encoder", seed=3)
    h = "tokens"
    for _ in range(LAYERS):
        h = b.op("Add", [h, _attention(b, b.layer_norm(h, D_MODEL))])
        mlp = b.dense(b.gelu(b.dense(b.layer_norm(h, D_MODEL), D_MODEL, D_FF)), D_FF, D_MODEL)
        h = b.op("Add", [h, mlp])
    gamma = b.const(np.ones(D_MODEL, np.float32), "final_ln_g")
    beta = b.const(np.zeros(D_MODEL, np.float32), "final_ln_b")
    b.nodes.append(onnx.helper.make_node("LayerNormalization", [h, gamma, beta], ["encoded"],
                                         name="final_norm", axis=-1, epsilon=1e-5))
    return b.model([tensor("tokens", ["batch", SEQ, D_MODEL])],
                   [tensor("encoded", ["batch", SEQ, D_MODEL])],
                   doc="Small transformer encoder (litenpu test model)")
