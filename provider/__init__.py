"""litenpu: an onnxruntime execution provider for NPUs, written in Python.

The public API is imported on first use, so `provider.npu` (the device, which never imports
onnxruntime) and the command line load without onnxruntime and the EP machinery.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "InferenceSession": "provider.session",
    "get_library_path": "provider.ort.discovery",
    "get_ep_name": "provider.ort.discovery",
    "get_ep_names": "provider.ort.discovery",
    "register": "provider.ort.registration",
    "unregister": "provider.ort.registration",
    "ep_devices": "provider.ort.registration",
    "empty": "provider.ort.tensors",
    "ortvalue_from_numpy": "provider.ort.tensors",
    "view": "provider.ort.tensors",
    "npu_device": "provider.ort.tensors",
    "bind_output": "provider.ort.tensors",
    "copy_stats": "provider.ort.tensors",
    "import_fd": "provider.ort.external_memory",
    "wrap": "provider.ort.external_memory",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'provider' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
