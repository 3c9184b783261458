"""Registering the NPU execution provider library with onnxruntime (`provider.register()`)."""

from __future__ import annotations

import ctypes as C
import logging
import threading

import onnxruntime as ort

from provider.errors import LitenpuError
from provider.ort import EP_NAME, clib, factory
from provider.ort.clib import library_path

__all__ = ["library_path", "is_registered", "register", "unregister", "ep_devices"]

log = logging.getLogger("litenpu.ort")

_LOCK = threading.Lock()
_LIBRARY: C.CDLL | None = None
_REGISTERED = False


def _load_library() -> str:
    global _LIBRARY
    path = library_path()
    if _LIBRARY is None:
        lib = clib.library()
        lib.litenpu_set_entry_points(C.cast(factory.CREATE_EP_FACTORIES, C.c_void_p),
                                     C.cast(factory.RELEASE_EP_FACTORY, C.c_void_p))
        _LIBRARY = lib  # keeps the library (and our entry points in it) loaded
    return path


def is_registered() -> bool:
    return _REGISTERED


def register() -> str:
    """Register NPUExecutionProvider with onnxruntime (idempotent); returns the library path.

    Afterwards `onnxruntime.get_ep_devices()` lists it and plain onnxruntime code selects it
    with `SessionOptions.add_provider_for_devices(...)`.
    """
    global _REGISTERED
    with _LOCK:
        path = _load_library()
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
