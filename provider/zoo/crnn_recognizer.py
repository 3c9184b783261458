"""A CRNN text recogniser with a dynamic batch and line width: a CNN backbone (Conv+BN+Relu,
MaxPools that halve the height faster than the width) squeezed to a sequence over the width,
a bidirectional LSTM, and a CTC head (MatMul over the classes, Softmax), with the LSTM's
output reshaped from run-time dims as exporters write it.

Input `image` [batch, 1, 32, width] (a multiple of 4) -> `probs` [width / 4, batch, CLASSES].
"""

from __future__ import annotations

import onnx

from provider.zoo._builder import GraphBuilder, tensor
from provider.zoo.inputs import Feed, Inputs

HIDDEN, CLASSES = 32, 40
# (output channels, pool kernel = stride (h, w)) per conv stage: 32 rows -> 1, width / 4
STAGES = ((16, (2, 2)), (32, (2, 2)), (48, (2, 1)), (64, (2, 1)), (64, (2, 1)))

INPUTS = Inputs((Feed("image", "uniform", low=-1.0),),
                ({"image": (1, 1, 32, 64)}, {"image": (3, 1, 32, 160)}))


def build() -> onnx.ModelProto:
    b = GraphBuilder("crnn_recognizer", seed=13)
    h, cin = "image", 1
    for cout, pool in STAGES:
        h = b.op("Relu", [b.batch_norm(b.conv(h, cin, cout, 3, bias=False), cout)])
        h = b.op("MaxPool", [h], kernel_shape=list(pool), strides=list(pool))
        cin = cout
    seq = b.op("Transpose", [b.op("Squeeze", [h, b.ints([2], "axes")])], perm=[2, 0, 1])
    y, _, _ = b.rnn("LSTM", seq, cin, HIDDEN, "bidirectional")
    both = b.op("Transpose", [y], perm=[0, 2, 1, 3])  # [time, batch, 2, hidden]
    shape = b.shape_of([b.dim(seq, 0), b.dim(seq, 1), b.ints([2 * HIDDEN])])
    logits = b.dense(b.op("Reshape", [both, shape]), 2 * HIDDEN, CLASSES)
    b.rename(b.op("Softmax", [logits], axis=-1), "probs")
    return b.model([tensor("image", ["batch", 1, 32, "width"])],
                   [tensor("probs", ["steps", "batch", CLASSES])],
                   doc="CRNN text recogniser: CNN + BiLSTM + CTC head (litenpu family model)")
