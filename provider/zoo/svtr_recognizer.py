"""An SVTR-style text recogniser with a dynamic batch and line width: a conv stem
(Conv+BN+GELU) down to a 4-row feature map, flattened into a token sequence with shape
arithmetic on the run-time dims, pre-norm attention mixer blocks over all tokens
(LayerNormalization, multi-head attention, GELU MLP), folded back to the map, averaged over
the rows (ReduceMean) and read by a CTC head (MatMul over the classes, Softmax).

Input `image` [batch, 3, 32, width] (a multiple of 4) -> `probs` [batch, width / 4, CLASSES].
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from provider.zoo._builder import GraphBuilder, tensor
from provider.zoo.inputs import Feed, Inputs

DIM, HEADS, MLP, BLOCKS, CLASSES = 48, 4, 96, 2, 40
HEAD_DIM = DIM // HEADS

INPUTS = Inputs((Feed("image", "uniform", low=-1.0),),
                ({"image": (1, 3, 32, 64)}, {"image": (2, 3, 32, 128)}))


def _conv(b: GraphBuilder, x: str, cin: int, cout: int, stride: tuple[int, int]) -> str:
    w = b.weight((cout, cin, 3, 3), name="conv_w")
    h = b.op("Conv", [x, w], kernel_shape=[3, 3], strides=list(stride), pads=[1, 1, 1, 1])
    return b.gelu(b.batch_norm(h, cout))


def _attention(b: GraphBuilder, x: str) -> str:
    batch, tokens = b.dim(x, 0), b.dim(x, 1)
    qkv = b.dense(x, DIM, 3 * DIM)
    shape = b.shape_of([batch, tokens, b.ints([3, HEADS, HEAD_DIM])])
    heads = b.op("Transpose", [b.op("Reshape", [qkv, shape])], perm=[2, 0, 3, 1, 4])
    q, k, v = (b.op("Squeeze", [part, b.ints([0], "axes")]) for part in
               b.op("Split", [heads, b.ints([1, 1, 1], "split")], n_out=3, axis=0))
    scale = b.const(np.array(1 / math.sqrt(HEAD_DIM), np.float32), "attn_scale")
    scores = b.op("MatMul", [b.op("Mul", [q, scale]), b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    context = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    merged = b.op("Reshape", [b.op("Transpose", [context], perm=[0, 2, 1, 3]),
                              b.shape_of([batch, tokens, b.ints([DIM])])])
    return b.dense(merged, DIM, DIM)


def build() -> onnx.ModelProto:
    b = GraphBuilder("svtr_recognizer", seed=14)
    h = _conv(b, _conv(b, "image", 3, 24, (2, 2)), 24, DIM, (2, 2))
    h = _conv(b, _conv(b, h, DIM, DIM, (2, 1)), DIM, DIM, (1, 1))  # [batch, DIM, 4, width/4]
    batch, rows, cols = b.dim(h, 0), b.dim(h, 2), b.dim(h, 3)
    flat = b.op("Reshape", [h, b.shape_of([batch, b.ints([DIM]), b.ints([-1])])])
    x = b.op("Transpose", [flat], perm=[0, 2, 1])  # tokens [batch, 4 width/4, DIM]
    for _ in range(BLOCKS):
        x = b.op("Add", [x, _attention(b, b.layer_norm(x, DIM))])
        x = b.op("Add", [x, b.dense(b.gelu(b.dense(b.layer_norm(x, DIM), DIM, MLP)), MLP, DIM)])
    x = b.layer_norm(x, DIM)
    grid = b.op("Reshape", [b.op("Transpose", [x], perm=[0, 2, 1]),
                            b.shape_of([batch, b.ints([DIM]), rows, cols])])
    columns = b.op("Transpose", [b.op("ReduceMean", [grid], axes=[2], keepdims=0)],
                   perm=[0, 2, 1])  # [batch, width/4, DIM]
    b.rename(b.op("Softmax", [b.dense(columns, DIM, CLASSES)], axis=-1), "probs")
    return b.model([tensor("image", ["batch", 3, 32, "width"])],
                   [tensor("probs", ["batch", "steps", CLASSES])],
                   doc="SVTR-style text recogniser: conv stem + attention mixers + CTC head "
                       "(litenpu family model)")
