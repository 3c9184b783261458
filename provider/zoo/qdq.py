"""Int8 QDQ copies of float models, made with onnxruntime's static quantizer the way users
make them: per-channel int8 weights, uint8 activations, MinMax ranges calibrated on seeded
inputs. Used for the int8 family model and the real-model set's int8 detector.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx
from onnx import version_converter

PER_CHANNEL_OPSET = 13  # DequantizeLinear's axis (per-channel scales) needs opset 13


def quantize_qdq(model: onnx.ModelProto, calibration: Iterable[dict[str, np.ndarray]]
                 ) -> onnx.ModelProto:
    """`model` quantized to int8 in QDQ format, its ranges taken from the `calibration` feeds
    (an opset below 13 is converted up first)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_static,
    )

    class _Feeds(CalibrationDataReader):
        def __init__(self) -> None:
            self._feeds = iter(calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._feeds, None)

    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < PER_CHANNEL_OPSET:
        model = version_converter.convert_version(model, PER_CHANNEL_OPSET)
    with tempfile.TemporaryDirectory(prefix="litenpu-qdq-") as tmp:
        source, target = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, source)
        # onnxruntime's recommended first step: shape inference and its graph optimizations
        # (BatchNormalization folded into the Conv before it, as a deployed model has it)
        quant_pre_process(str(source), str(source), skip_symbolic_shape=True)
        quantize_static(str(source), str(target), _Feeds(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=True)
        return onnx.load(target)
