"""MobileNetV2-style CNN: inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 project),
ReLU6 as Clip(0, 6), residual Adds, global average pool, Gemm classifier head.

Input `image` [batch, 3, 64, 64] -> `logits` [batch, 10]. `python -m models.mobilenet_v2` rewrites
models/mobilenet_v2.onnx.
"""

from __future__ import annotations

import onnx

from provider.zoo._builder import GraphBuilder, tensor

# (expansion, output channels, stride) per inverted residual block.
BLOCKS = ((1, 16, 1), (6, 24, 2), (6, 24, 1), (6, 32, 2), (6, 32, 1), (6, 64, 2), (6, 64, 1))
CLASSES = 10


def _inverted_residual(b: GraphBuilder, x: str, cin: int, expand: int, cout: int,
                       stride: int) -> str:
    hidden = cin * expand
    h = x
    if expand != 1:
        h = b.relu6(b.batch_norm(b.conv(h, cin, hidden, 1, bias=False), hidden))
    h = b.relu6(b.batch_norm(b.conv(h, hidden, hidden, 3, stride, group=hidden, bias=False),
                             hidden))
    h = b.batch_norm(b.conv(h, hidden, cout, 1, bias=False), cout)
    return b.op("Add", [x, h]) if stride == 1 and cin == cout else h


def build() -> onnx.ModelProto:
    b = GraphBuilder("mobilenet_v2", seed=2)
    h = b.relu6(b.batch_norm(b.conv("image", 3, 16, 3, stride=2, bias=False), 16))
    cin = 16
    for expand, cout, stride in BLOCKS:
        h = _inverted_residual(b, h, cin, expand, cout, stride)
        cin = cout
    h = b.relu6(b.batch_norm(b.conv(h, cin, 128, 1, bias=False), 128))
    h = b.op("GlobalAveragePool", [h])
    h = b.op("Flatten", [h], axis=1)
    w = b.weight((CLASSES, 128), name="fc_w")
    bias = b.weight((CLASSES,), scale=0.1, name="fc_b")
    b.nodes.append(onnx.helper.make_node("Gemm", [h, w, bias], ["logits"], name="classifier",
                                         transB=1))
    return b.model([tensor("image", ["batch", 3, 64, 64])], [tensor("logits", ["batch", CLASSES])],
                   doc="MobileNetV2-style classifier (litenpu test model)")
