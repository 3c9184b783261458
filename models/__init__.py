"""Small, realistic ONNX models built from code (onnx.helper + seeded numpy weights).

`build(name)` returns the ModelProto; `python -m models.<name>` rewrites `<name>.onnx`.
"""

from __future__ import annotations

import importlib

import onnx

NAMES = ("mobilenet_v2", "resnet_block", "transformer_encoder")


def build(name: str) -> onnx.ModelProto:
    """The model `name` (one of NAMES), built deterministically."""
    if name not in NAMES:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"models.{name}").build()
