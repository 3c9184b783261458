"""The reference NPU's compiled kernels (`csrc/`, built as `_native`), its cores and its BLAS.

The numpy kernels in `ops/` define what every step computes; this library runs the
steps that dominate CNNs (conv, depthwise conv, pooling, concat, transpose, fully
connected, clamp-like activations, softmax) in C, split over the NPU's cores by its own
thread pool, with one call per run of consecutive native steps instead of one Python call
(and a few numpy calls) per step. The GEMMs go to OpenBLAS from the `scipy-openblas32`
wheel: a private copy set to one thread, so the NPU's cores are the only parallelism and
numpy's own BLAS settings are left alone.

The library is optional at run time: when it is not built, the BLAS wheel is missing or
`LITENPU_NATIVE=0` is set, `library()` is None (the reason is logged once) and every step
runs on its numpy kernel. `native_steps.lower` decides per step.
"""

from __future__ import annotations

import ctypes as C
import logging
import os
import threading
from collections.abc import Sequence

import numpy as np

from provider.errors import DeviceMemoryError, LitenpuError
from provider.extensions import built_library

__all__ = ["Step", "OPS", "MAX_SLOTS", "MAX_PARAMS", "library", "set_threads", "threads",
           "set_int8_path",
           "check_threads", "default_threads", "worker_tasks", "worker_moves", "blas_core",
           "AddressTable", "StepArray"]

log = logging.getLogger("litenpu.npu")

MAX_SLOTS = 16
MAX_PARAMS = 32
# Op codes of lnpu_step.op, in csrc/npu.h's order.
OPS = {name: code for code, name in enumerate(
    ("conv", "dwconv", "max_pool", "avg_pool", "global_pool", "concat", "transpose",
     "matmul", "activation", "softmax"), start=1)}
# the steps of real models beyond CNNs: codes 11-39 (npu.h)
OPS.update(unary=11, binary=12, layer_norm=13, bmatmul=14, rnn=15, reduce=16)
# The integer kernels' codes (csrc/qconv.c, qeltwise.c; 40-69 are theirs).
OPS.update({"qconv": 40, "qdense": 41, "quantize": 42, "dequantize": 43, "qlut": 44, "qadd": 45,
            "qconcat": 46, "qdwconv": 47, "qmaxpool": 48, "qmul": 49})


class Step(C.Structure):
    """Mirror of lnpu_step: op code, slot indices (-1: none), int and float parameters."""

    _fields_ = [("op", C.c_int64), ("slot", C.c_int64 * MAX_SLOTS),
                ("p", C.c_int64 * MAX_PARAMS), ("f", C.c_float * 4)]


_lock = threading.Lock()
_state: dict[str, object] = {}  # "lib" (CDLL or None), "blas" (kept alive), "why"


def _load_blas() -> tuple[C.CDLL, int]:
    """OpenBLAS from scipy-openblas32, set to one thread; (library, address of its sgemm).

    OpenBLAS reads its environment when it loads. OPENBLAS_NUM_THREADS sizes its thread
    pool, whose idle threads poll: loaded with 1 it starts none (numpy's own OpenBLAS,
    loaded before, keeps its setting). OPENBLAS_CORETYPE forces a kernel on every OpenBLAS
    in the process; set for some other library's sake (an older OpenBLAS that misdetects
    the CPU, say) it would hold this copy to, e.g., the Haswell kernels on an AVX-512 CPU:
    half the speed. This copy picks its own kernel from the CPU unless
    LITENPU_OPENBLAS_CORETYPE names one."""
    settings = {"OPENBLAS_NUM_THREADS": "1",
                "OPENBLAS_CORETYPE": os.environ.get("LITENPU_OPENBLAS_CORETYPE")}
    if os.environ.get("OPENBLAS_CORETYPE") and settings["OPENBLAS_CORETYPE"] is None:
        log.info("the NPU's OpenBLAS ignores OPENBLAS_CORETYPE=%s (set LITENPU_OPENBLAS_CORETYPE "
                 "to force its kernel)", os.environ["OPENBLAS_CORETYPE"])
    saved = {k: os.environ.get(k) for k in settings}
    _set_env(settings)
    try:
        import scipy_openblas32

        blas = C.CDLL(os.path.join(scipy_openblas32.get_lib_dir(),
                                   scipy_openblas32.get_library(fullname=True)))
    finally:
        _set_env(saved)
    for prefix in ("scipy_", ""):
        if hasattr(blas, f"{prefix}cblas_sgemm"):
            getattr(blas, f"{prefix}openblas_set_num_threads")(C.c_int(1))
            return blas, C.cast(getattr(blas, f"{prefix}cblas_sgemm"), C.c_void_p).value
    raise OSError(f"no cblas_sgemm in {blas._name}")


def _set_env(values: dict[str, str | None]) -> None:
    """Set (None: unset) environment variables."""
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def blas_core() -> str:
    """The kernel family (OpenBLAS core name) the NPU's GEMMs run on ("" without the library)."""
    blas = _state.get("blas") if library() is not None else None
    if blas is None:
        return ""
    for name in ("scipy_openblas_get_corename", "openblas_get_corename"):
        fn = getattr(blas, name, None)
        if fn is not None:
            fn.restype = C.c_char_p
            return fn().decode()
    return ""


def default_threads() -> int:
    """The NPU's default core count: the CPUs this process may use, at most 8."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return max(1, min(usable, 8))


def library() -> C.CDLL | None:
    """The loaded native library (sgemm set, default threads), or None when unavailable."""
    lib = _state.get("lib", False)
    if lib is not False:
        return lib  # type: ignore[return-value]
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[return-value]
        lib = None
        path = built_library(os.path.dirname(os.path.abspath(__file__)), "_native")
        if os.environ.get("LITENPU_NATIVE", "1") == "0":
            why = "LITENPU_NATIVE=0"
        elif path is None:
            why = "provider/npu/_native is not built (pip install . or setup.py build_ext --inplace)"
        else:
            try:
                blas, sgemm = _load_blas()
                lib = C.CDLL(path)
                if lib.lnpu_step_size() != C.sizeof(Step):
                    raise OSError(f"lnpu_step is {lib.lnpu_step_size()} bytes, Step {C.sizeof(Step)}")
                lib.lnpu_set_sgemm(C.c_void_p(sgemm))
                lib.lnpu_set_threads(C.c_int(default_threads()))
                lib.lnpu_run.restype = C.c_int64
                lib.lnpu_worker_tasks.restype = C.c_int64
                lib.lnpu_worker_moves.restype = C.c_int64
                lib.lnpu_run.argtypes = [C.c_void_p, C.c_int64, C.c_void_p, C.c_void_p, C.c_int]
                _state["blas"] = blas
                why = ""
            except (ImportError, OSError, AttributeError) as exc:
                lib, why = None, f"{type(exc).__name__}: {exc}"
        if lib is None:
            log.info("native NPU kernels unavailable (%s); steps run on the numpy kernels", why)
        _state["lib"], _state["why"] = lib, why
        return lib


def check_threads(n: object) -> None:
    """ValueError unless `n` is a usable core count: an int (not a bool) of at least 1."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"NPU thread count must be a positive int, got {n!r}")


def set_threads(n: int) -> None:
    """Give the NPU `n` cores from now on (1: the calling thread only). A process-wide
    device setting, for when no run is in progress; a session's `npu_threads` option uses
    at most these."""
    check_threads(n)
    lib = library()
    if lib is not None:
        lib.lnpu_set_threads(C.c_int(n))


def threads() -> int:
    """Cores the native kernels use (1 when the library is unavailable)."""
    lib = library()
    return int(lib.lnpu_threads()) if lib is not None else 1


def worker_tasks() -> int:
    """Tasks the NPU's worker cores (not the calling threads) have run in this process."""
    lib = library()
    return int(lib.lnpu_worker_tasks()) if lib is not None else 0


INT8_PATHS = {"auto": 0, "portable": 1, "avx512_vnni": 2, "avx_vnni": 3}


def set_int8_path(path: str = "auto") -> str:
    """Force the integer GEMMs' code path ("portable", "avx512_vnni", "avx_vnni"; "auto":
    the best the CPU has); returns the one they take now (the CPU's best when it lacks the
    one asked for). For tests and benchmarks: process-wide, set while no run is in progress."""
    if path not in INT8_PATHS:
        raise ValueError(f"int8 path {path!r}: expected one of {', '.join(INT8_PATHS)}")
    lib = library()
    if lib is None:
        return "numpy"
    lib.lnpu_set_int8_path.restype = C.c_int64
    taken = int(lib.lnpu_set_int8_path(C.c_int64(INT8_PATHS[path])))
    return next(name for name, code in INT8_PATHS.items() if code == taken)


def worker_moves() -> int:
    """Times a worker core found itself on its caller's CPU and moved to another."""
    lib = library()
    return int(lib.lnpu_worker_moves()) if lib is not None else 0


class AddressTable:
    """The slot address table native runs read: one address per Program slot (0: none yet);
    an executor fills it once and sets its I/O slots per run."""

    def __init__(self, addresses: Sequence[int]):
        self._table = (C.c_void_p * len(addresses))(*addresses)

    def __setitem__(self, index: int, address: int) -> None:
        self._table[index] = address


class StepArray:
    """Consecutive native steps in one C array, run by one lnpu_run call."""

    def __init__(self, steps: Sequence[Step]):
        self._array = (Step * len(steps))(*steps)

    def __len__(self) -> int:
        return len(self._array)

    def __getitem__(self, index: int) -> Step:
        return self._array[index]

    def run(self, addresses: AddressTable, cores: int = 0,
            stamps: np.ndarray | None = None) -> None:
        """Run the steps on the slot address table, on at most `cores` of the NPU's cores
        (0: all). `stamps` (int64, C-contiguous, one row per step) receives each step's start
        and end in CLOCK_MONOTONIC nanoseconds (`time.monotonic_ns`'s clock): the profile
        (the Executor checked it)."""
        lib = library()
        if lib is None:
            raise LitenpuError("native NPU steps were lowered without the native library")
        status = lib.lnpu_run(self._array, len(self._array), addresses._table,
                              None if stamps is None else stamps.ctypes.data, cores)
        if status == -1:
            raise DeviceMemoryError("native NPU kernel: no memory for its scratch buffer (a "
                                    "step's working set is larger than the machine can give)")
        if status:
            raise LitenpuError(f"native NPU run failed with status {status} "
                               f"(-2: no sgemm, else 1 + the step with an unknown op)")
