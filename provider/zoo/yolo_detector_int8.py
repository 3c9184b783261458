"""The YOLOv8-style family detector (`yolo_detector`) quantized to int8 QDQ with onnxruntime's
static quantizer at build time, calibrated on four seeded images: the int8 path of a detector
with dynamic batch and size.

Input `image` [batch, 3, height, width] -> `detections` [batch, 4 + CLASSES, anchors].
"""

from __future__ import annotations

import onnx

from provider.zoo import yolo_detector
from provider.zoo.qdq import quantize_qdq

INPUTS = yolo_detector.INPUTS
CALIBRATION_SEEDS = (100, 101, 102, 103)


def build() -> onnx.ModelProto:
    model = quantize_qdq(yolo_detector.build(),
                         (INPUTS.case(0, seed) for seed in CALIBRATION_SEEDS))
    model.graph.name = "yolo_detector_int8"
    onnx.checker.check_model(model, full_check=True)
    return model
