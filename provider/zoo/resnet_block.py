"""ResNet-style network: stem Conv+BN+Relu and MaxPool, basic residual blocks (two 3x3
Conv+BN, Relu, identity or 1x1-projection shortcut Add), global average pool, Gemm head.

Input `image` [batch, 3, 56, 56] -> `logits` [batch, 10]. `python -m models.resnet_block` rewrites
models/resnet_block.onnx.
"""

from __future__ import annotations

import onnx

from provider.zoo._builder import GraphBuilder, tensor

STAGES = ((32, 1), (32, 1), (64, 2), (64, 1))  # (channels, stride) per basic block
CLASSES = 10


def _basic_block(b: GraphBuilder, x: str, cin: int, cout: int, stride: int) -> str:
    h = b.op("Relu", [b.batch_norm(b.conv(x, cin, cout, 3, stride, bias=False), cout)])
    h = b.batch_norm(b.conv(h, cout, cout, 3, bias=False), cout)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = b.batch_norm(b.conv(x, cin, cout, 1, stride, bias=False), cout)
    return b.op("Relu", [b.op("Add", [h, shortcut])])


def build() -> onnx.ModelProto:
    b = GraphBuilder("resnet_block", seed=1)
    h = b.op("Relu", [b.batch_norm(b.conv("image", 3, 32, 7, stride=2, bias=False), 32)])
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 32
    for cout, stride in STAGES:
        h = _basic_block(b, h, cin, cout, stride)
        cin = cout
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])], axis=1)
    w = b.weight((CLASSES, cin), name="fc_w")
    bias = b.weight((CLASSES,), scale=0.1, name="fc_b")
    b.nodes.append(onnx.helper.make_node("Gemm", [h, w, bias], ["logits"], name="fc",
                                         transB=1))
    return b.model([tensor("image", ["batch", 3, 56, 56])], [tensor("logits", ["batch", CLASSES])],
                   doc="ResNet-style classifier (litenpu test model)")
