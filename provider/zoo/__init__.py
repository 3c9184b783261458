"""Small, realistic ONNX models built from code (onnx.helper + seeded numpy weights).

Shipped with the package so `litenpu demo` and the benchmarks work from any directory after
`pip install .`. Two tables:

* NAMES: the demo and benchmark models with fixed image/sequence sizes; the repo's `models/`
  holds the committed `.onnx` files these builders write.
* FAMILIES: one model per family of the real-model set (`benchmarks/real_models.py`), built
  as exporters write them (dynamic batch and sizes, shape arithmetic on symbolic dims, RNNs,
  int8 QDQ), small enough to test without the network; `inputs(name)` gives the concrete
  shapes to run each at. Not committed as files: they are built when asked for.
"""

from __future__ import annotations

import importlib

import onnx

from provider.zoo.inputs import Inputs

NAMES = ("mobilenet_v2", "resnet_block", "transformer_encoder")
FAMILIES = {
    "yolo_detector": "detector",
    "bert_encoder": "text encoder",
    "crnn_recognizer": "OCR recogniser",
    "svtr_recognizer": "OCR recogniser",
    "speech_rnn": "speech RNN",
    "yolo_detector_int8": "detector (int8 QDQ)",
}


def _module(name: str):
    if name not in NAMES and name not in FAMILIES:
        raise KeyError(f"unknown model {name!r}; known: {', '.join((*NAMES, *FAMILIES))}")
    return importlib.import_module(f"provider.zoo.{name}")


def build(name: str, batch: int | None = None) -> onnx.ModelProto:
    """The model `name` (one of NAMES or FAMILIES), built deterministically; with `batch`, its
    symbolic batch dim is fixed to that size (static shapes: the NPU EP compiles at session
    creation, and a compile cache can then give warm sessions from a stored EPContext model)."""
    model = _module(name).build()
    if batch is not None:
        for value in (*model.graph.input, *model.graph.output):
            for dim in value.type.tensor_type.shape.dim:
                if dim.dim_param == "batch":
                    dim.dim_value = batch
        onnx.checker.check_model(model)
    return model


def inputs(name: str) -> Inputs:
    """How to feed family model `name` and the concrete shapes to run it at."""
    if name not in FAMILIES:
        raise KeyError(f"{name!r} is not a family model; families: {', '.join(FAMILIES)}")
    return _module(name).INPUTS
