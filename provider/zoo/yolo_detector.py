"""A YOLOv8-style detector with a dynamic batch and image size: Conv+BN+SiLU blocks, C2f
blocks (1x1 conv, Split in two, bottlenecks, Concat of every branch), SPPF (three chained 5x5
MaxPools), a PAN neck with Resize upsampling, and a decoupled head per stride (box
distribution and class branches) whose outputs are flattened, decoded against anchor grids
and concatenated with shape arithmetic on the symbolic dims (Shape -> Gather -> Unsqueeze ->
Concat -> Reshape, Range/Expand grids), as a dynamic export writes it.

Input `image` [batch, 3, height, width] (multiples of 32) -> `detections`
[batch, 4 + CLASSES, anchors]: box centre x, y, width, height in pixels, then class scores.
"""

from __future__ import annotations

import numpy as np
import onnx

from provider.zoo._builder import GraphBuilder, tensor
from provider.zoo.inputs import Feed, Inputs

CLASSES, REG = 6, 8  # classes; bins of each box side's distribution (DFL)
HEAD = 32  # channels of the head's branches

INPUTS = Inputs((Feed("image", "uniform"),),
                ({"image": (1, 3, 64, 64)}, {"image": (2, 3, 96, 128)}))


def _conv(b: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
    return b.silu(b.batch_norm(b.conv(x, cin, cout, k, stride, bias=False), cout))


def _c2f(b: GraphBuilder, x: str, cin: int, cout: int, shortcut: bool = True) -> str:
    """1x1 conv, Split in halves, one bottleneck on the second half, Concat all, 1x1 conv."""
    half = cout // 2
    first, y = b.op("Split", [_conv(b, x, cin, cout, 1), b.ints([half, half], "split")],
                    n_out=2, axis=1)
    z = _conv(b, _conv(b, y, half, half, 3), half, half, 3)
    z = b.op("Add", [y, z]) if shortcut else z
    return _conv(b, b.op("Concat", [first, y, z], axis=1), 3 * half, cout, 1)


def _sppf(b: GraphBuilder, x: str, c: int) -> str:
    h = _conv(b, x, c, c // 2, 1)
    pools = [h]
    for _ in range(3):
        pools.append(b.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1],
                          pads=[2, 2, 2, 2]))
    return _conv(b, b.op("Concat", pools, axis=1), 2 * c, c, 1)


def _upsample(b: GraphBuilder, x: str) -> str:
    scales = b.const(np.array([1, 1, 2, 2], np.float32), "scales")
    return b.op("Resize", [x, "", scales], mode="nearest")


def _head(b: GraphBuilder, x: str, c: int) -> str:
    """Box and class branches, concatenated and flattened: [batch, 4 REG + CLASSES, h w]."""
    box = b.conv(_conv(b, _conv(b, x, c, HEAD, 3), HEAD, HEAD, 3), HEAD, 4 * REG, 1)
    cls = b.conv(_conv(b, _conv(b, x, c, HEAD, 3), HEAD, HEAD, 3), HEAD, CLASSES, 1)
    both = b.op("Concat", [box, cls], axis=1)
    shape = b.shape_of([b.dim(x, 0), b.ints([4 * REG + CLASSES]), b.ints([-1])])
    return b.op("Reshape", [both, shape])


def _grid(b: GraphBuilder, x: str, stride: int) -> tuple[str, str]:
    """Anchor centres [2, h w] (in cells, +0.5) and their stride [1, h w] for feature map `x`,
    computed from its run-time size as a dynamic export does (Range, Expand)."""
    h, w = b.dim(x, 2), b.dim(x, 3)
    hw = b.shape_of([h, w])
    zero, one = b.ints(0, "start"), b.ints(1, "delta")
    half = b.const(np.array(0.5, np.float32), "half_cell")
    cells = []
    for size, view in ((w, [1, -1]), (h, [-1, 1])):
        limit = b.op("Squeeze", [size, b.ints([0], "axes")])
        centres = b.op("Add", [b.op("Cast", [b.op("Range", [zero, limit, one])],
                                    to=onnx.TensorProto.FLOAT), half])
        plane = b.op("Expand", [b.op("Reshape", [centres, b.ints(view, "view")]), hw])
        cells.append(b.op("Reshape", [plane, b.ints([1, -1], "row")]))
    anchors = b.op("Concat", cells, axis=0)
    count = b.shape_of([b.ints([1]), b.op("Mul", [h, w])])
    stride_row = b.op("Expand", [b.const(np.full((1, 1), stride, np.float32), "stride"), count])
    return anchors, stride_row


def _decode(b: GraphBuilder, flat: str, anchors: str, strides: str) -> str:
    """Box distributions -> expected distances (DFL: Softmax, then a 1x1 conv by 0..REG-1),
    -> centre/size boxes in pixels; class logits -> Sigmoid."""
    box, cls = b.op("Split", [flat, b.ints([4 * REG, CLASSES], "split")], n_out=2, axis=1)
    batch, count = b.dim(flat, 0), b.dim(flat, 2)
    bins = b.op("Reshape", [box, b.shape_of([batch, b.ints([4, REG]), count])])
    probs = b.op("Softmax", [b.op("Transpose", [bins], perm=[0, 2, 1, 3])], axis=1)
    arange = b.const(np.arange(REG, dtype=np.float32).reshape(1, REG, 1, 1), "dfl_w")
    expected = b.op("Conv", [probs, arange], kernel_shape=[1, 1])
    dist = b.op("Reshape", [expected, b.shape_of([batch, b.ints([4]), count])])
    left_top, right_bottom = b.op("Split", [dist, b.ints([2, 2], "split")], n_out=2, axis=1)
    top_left = b.op("Sub", [anchors, left_top])
    bottom_right = b.op("Add", [anchors, right_bottom])
    two = b.const(np.array(2.0, np.float32), "two")
    centre = b.op("Div", [b.op("Add", [top_left, bottom_right]), two])
    size = b.op("Sub", [bottom_right, top_left])
    boxes = b.op("Mul", [b.op("Concat", [centre, size], axis=1), strides])
    return b.op("Concat", [boxes, b.op("Sigmoid", [cls])], axis=1)


def build() -> onnx.ModelProto:
    b = GraphBuilder("yolo_detector", seed=11)
    x = _conv(b, "image", 3, 8, 3, 2)
    x = _c2f(b, _conv(b, x, 8, 16, 3, 2), 16, 16)
    p3 = _c2f(b, _conv(b, x, 16, 32, 3, 2), 32, 32)
    p4 = _c2f(b, _conv(b, p3, 32, 48, 3, 2), 48, 48)
    p5 = _sppf(b, _c2f(b, _conv(b, p4, 48, 64, 3, 2), 64, 64), 64)
    n4 = _c2f(b, b.op("Concat", [_upsample(b, p5), p4], axis=1), 112, 48, shortcut=False)
    n3 = _c2f(b, b.op("Concat", [_upsample(b, n4), p3], axis=1), 80, 32, shortcut=False)
    d4 = _c2f(b, b.op("Concat", [_conv(b, n3, 32, 32, 3, 2), n4], axis=1), 80, 48,
              shortcut=False)
    d5 = _c2f(b, b.op("Concat", [_conv(b, d4, 48, 48, 3, 2), p5], axis=1), 112, 64,
              shortcut=False)
    flats, anchors, strides = [], [], []
    for feature, channels, stride in ((n3, 32, 8), (d4, 48, 16), (d5, 64, 32)):
        flats.append(_head(b, feature, channels))
        grid, stride_row = _grid(b, feature, stride)
        anchors.append(grid)
        strides.append(stride_row)
    detections = _decode(b, b.op("Concat", flats, axis=2), b.op("Concat", anchors, axis=1),
                         b.op("Concat", strides, axis=1))
    b.rename(detections, "detections")
    return b.model([tensor("image", ["batch", 3, "height", "width"])],
                   [tensor("detections", ["batch", 4 + CLASSES, "anchors"])],
                   doc="YOLOv8-style detector, dynamic batch and size (litenpu family model)")
