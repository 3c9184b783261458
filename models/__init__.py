"""The committed `.onnx` files of the zoo models (builders live in `provider.zoo`).

`build(name)` returns the ModelProto; `python -m models.<name>` rewrites `<name>.onnx`.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from provider.zoo import NAMES, build

__all__ = ["NAMES", "build", "write"]


def write(model: onnx.ModelProto, script: str) -> Path:
    """Save `model` next to its script as `<script stem>.onnx`."""
    path = Path(script).with_suffix(".onnx")
    onnx.save(model, path)
    return path
