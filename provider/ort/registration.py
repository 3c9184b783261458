"""Registering the NPU execution provider library with onnxruntime (`provider.register()`)."""

from __future__ import annotations

import logging
import threading

import onnxruntime as ort

from provider.errors import LitenpuError
from provider.ort import EP_NAME
from provider.ort.discovery import install_entry_points

log = logging.getLogger("litenpu.ort")

_LOCK = threading.Lock()
_REGISTERED = False


def register() -> str:
    """Register NPUExecutionProvider with onnxruntime (idempotent); returns the library path.

    Afterwards `onnxruntime.get_ep_devices()` lists it and plain onnxruntime code selects it
    with `SessionOptions.add_provider_for_devices(...)`.
    """
    global _REGISTERED
    if _REGISTERED:  # every session's creation: no lock, so a fork never copies it held by a
        return install_entry_points()  # thread creating one (the child then waited for good)
    with _LOCK:
        path = install_entry_points()
        if not _REGISTERED:
            ort.register_execution_provider_library(EP_NAME, path)
            _REGISTERED = True
            if not ep_devices():
                raise LitenpuError(
                    f"onnxruntime {ort.__version__} loaded {path} but lists no "
                    f"{EP_NAME} device (see the litenpu.ort log for why)")
            log.info("registered %s from %s", EP_NAME, path)
        return path


def unregister() -> None:
    """Undo `register()` (sessions using the EP must be gone)."""
    global _REGISTERED
    with _LOCK:
        if _REGISTERED:
            ort.unregister_execution_provider_library(EP_NAME)
            _REGISTERED = False


def ep_devices() -> list:
    """onnxruntime's OrtEpDevice objects for the NPU EP (empty before `register()`)."""
    return [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
