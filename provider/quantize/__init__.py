"""Post-training quantization for the NPU and the accuracy it costs.

`quantize_model` turns a float ONNX model into a QDQ int8 model with onnxruntime's quantizer
and the NPU's configuration (`config.NPU_INT8_OPS`); `accuracy_report` compares the float
model, the quantized model on onnxruntime's CPU and the quantized model on the NPU, per
output and per quantized tensor. Calibration data come from `load_calibration`.
"""

from provider.quantize.accuracy import (
    AccuracyReport,
    LayerComparison,
    OutputComparison,
    accuracy_report,
)
from provider.quantize.calibration import (
    CalibrationData,
    CalibrationError,
    ModelInput,
    model_inputs,
)
from provider.quantize.config import NPU_INT8_OPS, QuantConfig, QuantOptionError
from provider.quantize.driver import NodeDecision, QuantizeResult, quantize_model
from provider.quantize.images import ImageOptions
from provider.quantize.metrics import Metrics
from provider.quantize.optional import MissingExtraError
from provider.quantize.sources import load_calibration

__all__ = [
    "AccuracyReport", "LayerComparison", "OutputComparison", "accuracy_report",
    "NPU_INT8_OPS", "CalibrationData", "CalibrationError", "ImageOptions", "Metrics", "MissingExtraError",
    "ModelInput", "NodeDecision", "QuantConfig", "QuantOptionError", "QuantizeResult",
    "load_calibration", "model_inputs", "quantize_model",
]
