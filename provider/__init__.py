"""litenpu: an onnxruntime execution provider for NPUs, written in Python."""

__version__ = "0.1.0"

from provider.registration import ep_devices, register, unregister  # noqa: E402
from provider.session import InferenceSession  # noqa: E402
from provider.tensors import (  # noqa: E402
    bind_output,
    copy_stats,
    empty,
    npu_device,
    ortvalue_from_numpy,
    view,
)

__all__ = [
    "__version__",
    "InferenceSession",
    "register",
    "unregister",
    "ep_devices",
    "empty",
    "ortvalue_from_numpy",
    "view",
    "npu_device",
    "bind_output",
    "copy_stats",
]
