"""How plain onnxruntime code finds the NPU execution provider, as onnxruntime-ep-* packages do.

`get_library_path()`, `get_ep_name()` and `get_ep_names()` are the names every plugin-EP
package exposes, so `ort.register_execution_provider_library("litenpu", get_library_path())`
works with nothing else from litenpu. The library (`_trampoline.c`) holds no EP: its entry
points are Python functions installed by `install_entry_points`, which `provider.register()`
calls first and which the library calls itself (through the Python C API, under the GIL) when
onnxruntime loads it in a Python process that has not. This module imports no onnxruntime and
none of the EP until it installs the entry points.
"""

from __future__ import annotations

import ctypes as C
import os
import threading

from provider.ort import EP_NAME, clib

__all__ = ["get_library_path", "get_ep_name", "get_ep_names", "install_entry_points"]

_LOCK = threading.Lock()
_LIBRARIES: dict[str, C.CDLL] = {}  # realpath -> loaded library with our entry points


def get_library_path() -> str:
    """Path of the NPU execution provider library (the built `_trampoline` in provider/ort)."""
    return clib.library_path()


def get_ep_name() -> str:
    """The name onnxruntime lists the EP under (`OrtEpDevice.ep_name`)."""
    return EP_NAME


def get_ep_names() -> list[str]:
    """Every EP name the library provides (one)."""
    return [EP_NAME]


def install_entry_points(library: str | None = None) -> str:
    """Load the EP library (`library`, default `get_library_path()`) and install the Python
    entry points in it (idempotent); returns its path. The library calls this with its own
    path when onnxruntime loads it first, so the entry points land in the copy in use."""
    path = library if library is not None else get_library_path()
    key = os.path.realpath(path)
    if key in _LIBRARIES:  # installed: no lock (see provider.ort.registration.register)
        return path
    with _LOCK:
        if key not in _LIBRARIES:
            from provider.ort import factory  # the EP itself: only now

            lib = C.CDLL(path)  # the loaded library's handle: dlopen finds it by file
            lib.litenpu_set_entry_points.argtypes = [C.c_void_p, C.c_void_p]
            lib.litenpu_set_entry_points.restype = None
            lib.litenpu_set_entry_points(C.cast(factory.CREATE_EP_FACTORIES, C.c_void_p),
                                         C.cast(factory.RELEASE_EP_FACTORY, C.c_void_p))
            _LIBRARIES[key] = lib  # keeps the library (and our entry points in it) loaded
    return path
