"""Small, realistic ONNX models built from code (onnx.helper + seeded numpy weights).

Shipped with the package so `litenpu demo` and the benchmarks work from any directory after
`pip install .`; the repo's `models/` holds the committed `.onnx` files these builders write.
"""

from __future__ import annotations

import importlib

import onnx

NAMES = ("mobilenet_v2", "resnet_block", "transformer_encoder")


def build(name: str) -> onnx.ModelProto:
    """The model `name` (one of NAMES), built deterministically."""
    if name not in NAMES:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"provider.zoo.{name}").build()
