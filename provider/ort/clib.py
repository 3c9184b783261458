"""The EP library's C side (`_trampoline.c` + `csrc/`), as Python sees it.

onnxruntime dlopens the library; Python loads the same file with ctypes (the same handle,
the same globals). This module fills the library's two function tables once onnxruntime has
handed over its API (`install`): onnxruntime's functions, read from the OrtApi / OrtEpApi
tables at the slots `abi` knows, by the names the library lists (`csrc/ep.h`), and, when the
NPU's native library is loaded, the NPU data plane's functions. With both, fused kernels
compute in C (`data_plane()`); the data transfer and the allocator are C in any case.
"""

from __future__ import annotations

import ctypes as C
import os
import threading

from provider.errors import LitenpuError
from provider.extensions import built_library
from provider.npu import native
from provider.ort import EP_NAME, abi

__all__ = ["library_path", "library", "install", "data_plane", "function"]

# onnxruntime functions the library checks for NULL: newer than the oldest onnxruntime served
OPTIONAL = frozenset({"TensorTypeAndShape_HasShape"})

_LOCK = threading.Lock()
_STATE: dict[str, object] = {}  # "lib": CDLL, "npu": bool (the NPU table is filled)


def library_path() -> str:
    """Path of the built EP library (provider/ort/_trampoline<suffix>)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = built_library(here, "_trampoline")
    if path is not None:
        return path
    raise LitenpuError(
        f"the NPU execution provider library is not built (no _trampoline*.so in {here}); "
        "install litenpu with `pip install .` or `pip install -e .`, or build it in place "
        "with `python setup.py build_ext --inplace`")


_SIGNATURES = {
    "litenpu_set_entry_points": (None, [C.c_void_p, C.c_void_p]),
    "litenpu_ort_names": (C.POINTER(C.c_char_p), []),
    "litenpu_npu_names": (C.POINTER(C.c_char_p), []),
    "litenpu_set_ort": (C.c_int, [C.POINTER(C.c_void_p), C.c_size_t, C.c_char_p, C.c_int]),
    "litenpu_set_npu": (C.c_int, [C.POINTER(C.c_void_p), C.c_size_t]),
    "litenpu_copy_counts": (None, [C.POINTER(C.c_int64)]),
    "litenpu_transfer_new": (C.c_void_p, [C.c_uint32, C.c_uint32]),
    "litenpu_allocator_new": (C.c_void_p, [C.c_uint32, C.c_void_p, C.c_void_p, C.c_void_p]),
    "litenpu_allocator_set_heap": (None, [C.c_void_p, C.c_void_p]),
    "litenpu_allocator_count": (C.c_int64, [C.c_void_p]),
    "litenpu_adopting": (None, [C.c_int]),
    "litenpu_kernel_new": (C.c_void_p, [C.c_uint32, C.c_int64, C.c_int64, C.c_void_p,
                                        C.c_void_p]),
    "litenpu_set_run_hooks": (None, [C.c_void_p, C.c_void_p, C.c_char_p]),
    "litenpu_kernel_destroy": (None, [C.c_void_p]),
    "litenpu_kernel_add": (C.c_int64, [C.c_void_p, C.POINTER(C.c_int32), C.POINTER(C.c_int32),
                                       C.POINTER(C.c_int64), C.c_void_p, C.POINTER(C.c_int64),
                                       C.POINTER(C.c_int64), C.POINTER(C.c_int32),
                                       C.POINTER(C.c_int32), C.POINTER(C.c_int64),
                                       C.POINTER(C.c_char_p)]),
    "litenpu_kernel_remove": (None, [C.c_void_p, C.c_int64]),
    "litenpu_kernel_tick": (C.c_uint64, [C.c_void_p, C.c_int64, C.c_int]),
    "litenpu_kernel_runs": (C.c_int64, [C.c_void_p]),
    "litenpu_read_graph": (C.c_int64, [C.c_void_p, C.c_int, C.POINTER(C.c_void_p)]),
    "litenpu_free": (None, [C.c_void_p]),
}


def library() -> C.CDLL:
    """The EP library, loaded once (its functions typed)."""
    lib = _STATE.get("lib")
    if lib is None:
        with _LOCK:
            lib = _STATE.get("lib")
            if lib is None:
                lib = C.CDLL(library_path())
                for name, (restype, argtypes) in _SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.restype, fn.argtypes = restype, argtypes
                _STATE["lib"] = lib
    return lib  # type: ignore[return-value]


def function(name: str) -> int:
    """Address of one of the library's functions (to put in a table onnxruntime reads)."""
    return C.cast(getattr(library(), name), C.c_void_p).value


def _names(listing) -> list[str]:
    names, i = [], 0
    while listing[i]:
        names.append(listing[i].decode())
        i += 1
    return names


def install(ort: abi.Ort) -> None:
    """Give the library onnxruntime's functions and, with the NPU's native library, the NPU
    data plane's (once per process: one onnxruntime per process)."""
    lib = library()
    with _LOCK:
        if "npu" in _STATE:
            return
        names = _names(lib.litenpu_ort_names())
        tables = [(ort.api, abi.ORT_API), (ort.ep, abi.EP_API)]
        fns = [next((table.pointer(n) if n not in OPTIONAL or table.available(n) else 0)
                    for table, entries in tables if n in entries) for n in names]
        if not lib.litenpu_set_ort((C.c_void_p * len(fns))(*fns), len(fns), EP_NAME.encode(),
                                   abi.ORT_EP_FAIL):
            raise LitenpuError("the EP library's onnxruntime table does not match its names")
        npu = native.library() is not None
        if npu:
            names = _names(lib.litenpu_npu_names())
            fns = [native.function_address(n) for n in names]
            npu = bool(lib.litenpu_set_npu((C.c_void_p * len(fns))(*fns), len(fns)))
        _STATE["npu"] = npu


def data_plane() -> bool:
    """True when fused kernels compute in C (onnxruntime's and the NPU's tables are in)."""
    return bool(_STATE.get("npu"))


def copy_counts() -> tuple[int, int, int, int]:
    """Bytes the C side copied to the device, to the host, device to device; copies."""
    out = (C.c_int64 * 4)()
    library().litenpu_copy_counts(out)
    return out[0], out[1], out[2], out[3]
