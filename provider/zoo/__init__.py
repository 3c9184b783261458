"""Small, realistic ONNX models built from code (onnx.helper + seeded numpy weights).

Shipped with the package so `litenpu demo` and the benchmarks work from any directory after
`pip install .`; the repo's `models/` holds the committed `.onnx` files these builders write.
"""

from __future__ import annotations

import importlib

import onnx

NAMES = ("mobilenet_v2", "resnet_block", "transformer_encoder")


def build(name: str, batch: int | None = None) -> onnx.ModelProto:
    """The model `name` (one of NAMES), built deterministically; with `batch`, its symbolic
    batch dim is fixed to that size (static shapes: the NPU EP compiles at session creation,
    and a compile cache can then give warm sessions from a stored EPContext model)."""
    if name not in NAMES:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(NAMES)}")
    model = importlib.import_module(f"provider.zoo.{name}").build()
    if batch is not None:
        for value in (*model.graph.input, *model.graph.output):
            for dim in value.type.tensor_type.shape.dim:
                if dim.dim_param == "batch":
                    dim.dim_value = batch
        onnx.checker.check_model(model)
    return model
