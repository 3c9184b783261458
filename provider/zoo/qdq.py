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

from provider.quantize.prepare import prepare


def quantize_qdq(model: onnx.ModelProto, calibration: Iterable[dict[str, np.ndarray]]
                 ) -> onnx.ModelProto:
    """`model` quantized to int8 in QDQ format, its ranges taken from the `calibration` feeds
    (prepared as `litenpu quantize` prepares it: opset >= 13, onnxruntime's pre-processing,
    which folds BatchNormalization into the Conv before it as a deployed model has it)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class _Feeds(CalibrationDataReader):
        def __init__(self) -> None:
            self._feeds = iter(calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._feeds, None)

    with tempfile.TemporaryDirectory(prefix="litenpu-qdq-") as tmp:
        source, target = prepare(model, Path(tmp)), Path(tmp) / "int8.onnx"
        quantize_static(str(source), str(target), _Feeds(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=True)
        return onnx.load(target)
