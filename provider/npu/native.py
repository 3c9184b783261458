"""The reference NPU's compiled library (`csrc/`, built as `_native`): kernels, cores, BLAS, and
the data plane (device heap, arena sets, run plans).

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

The data plane (`csrc/plane.h`) runs a whole Program in C: `Heap` holds the device pool's
books (so C can allocate and tell device memory from host memory), `ArenaSet` hands runs their
arenas, `Plan` binds inputs and outputs, runs the native segments and calls back into Python
only for numpy segments, and `Runner` is the plan a compiled onnxruntime kernel runs now.
Without the library the pool keeps its books in Python and executors run in Python.

Over 400 lines on purpose: every ctypes mirror of the library's structs and functions is here
(ctypes stays in this module), checked against the library's own sizes when it loads.
"""

from __future__ import annotations

import ctypes as C
import logging
import math
import os
import threading
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from provider.errors import BindingError, DeviceMemoryError, InputValueError, LitenpuError
from provider.extensions import built_library

__all__ = ["Step", "OPS", "MAX_SLOTS", "MAX_PARAMS", "STEP_BYTES", "library", "set_threads", "threads",
           "set_int8_path", "set_vector_width",
           "check_threads", "default_threads", "worker_tasks", "worker_moves", "worker_steers", "blas_core",
           "AddressTable", "StepArray", "Heap", "ArenaSet", "Plan", "Runner", "SLOT_KINDS",
           "view_at", "function_address", "remap_private", "until_exit"]

log = logging.getLogger("litenpu.npu")

MAX_SLOTS = 16
MAX_PARAMS = 32
KERNEL_REFUSED = -3  # lnpu_run: a kernel refused its input (csrc/npu.h)
# Op codes of lnpu_step.op, in csrc/npu.h's order.
OPS = {name: code for code, name in enumerate(
    ("conv", "dwconv", "max_pool", "avg_pool", "global_pool", "concat", "transpose",
     "matmul", "activation", "softmax"), start=1)}
# the steps of real models beyond CNNs: codes 11-39 (npu.h)
OPS.update(unary=11, binary=12, layer_norm=13, bmatmul=14, rnn=15, reduce=16, pad=17, cast=18,
           split=19, deconv=20, gather=21, compare=22, where=23,
           gather_nd=24, resize_linear=25, arg=26, topk=27, cumsum=28, add_n=29,
           resize_cubic=30, gather_elements=31, triangle=32, lrn=33,
           lp_norm=34, scatter_nd=35, scatter_elements=36)
# The integer kernels' codes (csrc/qconv.c, qeltwise.c, qsoftmax.c, qmatmul.c; 40-69 are theirs).
OPS.update({"qconv": 40, "qdense": 41, "quantize": 42, "dequantize": 43, "qlut": 44, "qadd": 45,
            "qconcat": 46, "qdwconv": 47, "qmaxpool": 48, "qmul": 49, "qglobalpool": 50,
            "qresize": 51, "qsoftmax": 52, "qmatmul": 53})


class Step(C.Structure):
    """Mirror of lnpu_step: op code, slot indices (-1: none), int and float parameters."""

    _fields_ = [("op", C.c_int64), ("slot", C.c_int64 * MAX_SLOTS),
                ("p", C.c_int64 * MAX_PARAMS), ("f", C.c_float * 4)]


STEP_BYTES = C.sizeof(Step)


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
                lib.lnpu_kernel_error.restype = C.c_char_p
                lib.lnpu_worker_tasks.restype = C.c_int64
                lib.lnpu_worker_moves.restype = C.c_int64
                lib.lnpu_worker_steers.restype = C.c_int64
                lib.lnpu_run.argtypes = [C.c_void_p, C.c_int64, C.c_void_p, C.c_void_p, C.c_int]
                _declare_plane(lib)
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


INT8_PATHS = {"auto": 0, "portable": 1, "avx512_vnni": 2, "avx_vnni": 3, "avx2": 4}


def set_int8_path(path: str = "auto") -> str:
    """Force the integer GEMMs' code path ("portable", "avx512_vnni", "avx_vnni", "avx2"; "auto":
    the best the CPU has); returns the one they take now (the CPU's best when it lacks the
    one asked for). Code tables use AVX-512 VBMI only on the avx512_vnni path. For tests and
    benchmarks: process-wide, set while no run is in progress."""
    if path not in INT8_PATHS:
        raise ValueError(f"int8 path {path!r}: expected one of {', '.join(INT8_PATHS)}")
    lib = library()
    if lib is None:
        return "numpy"
    lib.lnpu_set_int8_path.restype = C.c_int64
    taken = int(lib.lnpu_set_int8_path(C.c_int64(INT8_PATHS[path])))
    return next(name for name, code in INT8_PATHS.items() if code == taken)


def set_vector_width(floats: int = 0) -> int:
    """Force the vector width of the fp32 kernels that have two (direct conv, depthwise): 8
    floats (what CPUs without AVX-512 run), or 0 for the widest the CPU has (16 with
    AVX-512); returns the width they take now. For tests and benchmarks: process-wide, set
    while no run is in progress."""
    if floats not in (0, 8):
        raise ValueError(f"vector width {floats!r}: expected 0 (automatic) or 8")
    lib = library()
    if lib is None:
        return 0
    lib.lnpu_set_vector_width.restype = C.c_int64
    return int(lib.lnpu_set_vector_width(C.c_int64(floats)))


def set_qdw_block_pixels(pixels: int = -1) -> int:
    """Output pixels up to which int8 depthwise convs run a block of channels at a time
    (small planes), beyond which one channel at a time: -1 for the built-in bound, 0 for
    channels only; returns the bound taken. For tests and benchmarks: process-wide, set while
    no run is in progress."""
    lib = library()
    if lib is None:
        return 0
    lib.lnpu_set_qdw_block_pixels.restype = C.c_int64
    return int(lib.lnpu_set_qdw_block_pixels(C.c_int64(pixels)))


def worker_moves() -> int:
    """Times a worker core found itself on its caller's CPU and moved to another."""
    lib = library()
    return int(lib.lnpu_worker_moves()) if lib is not None else 0


def worker_steers() -> int:
    """Times a sleeping worker core was woken with its caller's CPU kept out of its mask."""
    lib = library()
    return int(lib.lnpu_worker_steers()) if lib is not None else 0


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

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> StepArray:
        """Steps stored back to back (STEP_BYTES each), copied into a new array."""
        array = cls([])
        array._array = (Step * (len(data) // STEP_BYTES)).from_buffer_copy(data)
        return array

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
        if status == KERNEL_REFUSED:
            raise InputValueError(lib.lnpu_kernel_error().decode(errors="replace"))
        if status:
            raise LitenpuError(f"native NPU run failed with status {status} "
                               f"(-2: no sgemm, else 1 + the step with an unknown op)")


# ---- the data plane (csrc/plane.h) ----------------------------------------------------------

SLOT_KINDS = {"input": 0, "output": 1, "weight": 2, "internal": 3}  # LNPU_SLOT_*


class Error(C.Structure):
    """Mirror of lnpu_error: the litenpu exception class name, its message, byte counts."""

    _fields_ = [("type", C.c_char * 48), ("requested", C.c_int64), ("available", C.c_int64),
                ("message", C.c_char * 4000)]


class _HeapStats(C.Structure):
    _fields_ = [(name, C.c_int64) for name in
                ("in_use", "peak", "allocations", "largest_free", "capacity")]


class SlotSpec(C.Structure):
    """Mirror of lnpu_slot."""

    _fields_ = [("kind", C.c_int64), ("nbytes", C.c_int64), ("offset", C.c_int64),
                ("address", C.c_void_p), ("name", C.c_char_p)]


assert C.sizeof(SlotSpec) == 5 * 8  # _slot_table fills it as five int64 columns


def _slot_table(slots: Sequence[tuple[str, int, int, int, str]]) -> tuple[np.ndarray, C.Array]:
    """The lnpu_slot array of `slots` as an int64 table, built a column at a time (a ctypes
    structure per slot cost 3 us: a millisecond for a detector's 350 slots), and the buffer
    of the names its last column points into (each a repr, NUL-terminated)."""
    table = np.zeros((max(len(slots), 1), 5), np.int64)
    if not slots:
        return table, C.create_string_buffer(0)
    kinds, nbytes, offsets, addresses, names = zip(*slots, strict=True)
    encoded = ("\0".join(map(repr, names)) + "\0").encode(errors="replace")  # repr: no NULs
    ends = np.flatnonzero(np.frombuffer(encoded, np.uint8) == 0)
    starts = np.concatenate(([0], ends[:-1] + 1))
    buffer = C.create_string_buffer(encoded, len(encoded))
    table[:, 0] = [SLOT_KINDS[kind] for kind in kinds]
    table[:, 1] = nbytes
    table[:, 2] = offsets
    table[:, 3] = addresses
    table[:, 4] = starts + C.addressof(buffer)
    return table, buffer


class SegmentSpec(C.Structure):
    """Mirror of lnpu_segment (steps NULL: numpy steps)."""

    _fields_ = [("first", C.c_int64), ("count", C.c_int64), ("steps", C.POINTER(Step))]


class Buffer(C.Structure):
    """Mirror of lnpu_buffer."""

    _fields_ = [("address", C.c_void_p), ("nbytes", C.c_int64)]


class Copies(C.Structure):
    """Mirror of lnpu_copies."""

    _fields_ = [("copied_in", C.c_int64), ("copied_out", C.c_int64)]


NUMPY_FN = C.CFUNCTYPE(C.c_int64, C.c_int64, C.c_int64, C.c_int64, C.POINTER(C.c_void_p),
                       C.POINTER(Error))


class _PlanSpec(C.Structure):
    _fields_ = [("n_slots", C.c_int64), ("slots", C.POINTER(SlotSpec)),
                ("n_inputs", C.c_int64), ("inputs", C.POINTER(C.c_int64)),
                ("n_outputs", C.c_int64), ("outputs", C.POINTER(C.c_int64)),
                ("n_segments", C.c_int64), ("segments", C.POINTER(SegmentSpec)),
                ("heap", C.c_void_p), ("arenas", C.c_void_p), ("own_arena", C.c_void_p),
                ("numpy", NUMPY_FN), ("owner", C.c_int64), ("cores", C.c_int64)]


_MIRRORS = (Error, _HeapStats, SlotSpec, SegmentSpec, Buffer, Copies, _PlanSpec)


def _declare_plane(lib: C.CDLL) -> None:
    """Signatures of the data plane's functions, after checking the struct mirrors."""
    sizes = (C.c_int64 * len(_MIRRORS))()
    lib.lnpu_plane_sizes(sizes)
    for mirror, size in zip(_MIRRORS, sizes, strict=True):
        if C.sizeof(mirror) != size:
            raise OSError(f"{mirror.__name__} is {C.sizeof(mirror)} bytes, the library's {size}")
    vp, i64, err = C.c_void_p, C.c_int64, C.POINTER(Error)
    signatures = {
        "lnpu_heap_new": (vp, [vp, i64]), "lnpu_heap_destroy": (None, [vp]),
        "lnpu_heap_alloc": (i64, [vp, i64, i64]), "lnpu_heap_release": (i64, [vp, i64]),
        "lnpu_heap_grow": (C.c_int, [vp, i64]),
        "lnpu_heap_get_stats": (None, [vp, C.POINTER(_HeapStats)]),
        "lnpu_heap_block": (i64, [vp, i64, C.POINTER(i64)]),
        "lnpu_heap_free_blocks": (i64, [vp, C.POINTER(i64), i64]),
        "lnpu_heap_trim": (i64, [vp, i64, i64]),
        "lnpu_heap_add_range": (C.c_int, [vp, vp, i64]),
        "lnpu_heap_remove_range": (C.c_int, [vp, vp]),
        "lnpu_heap_contains": (C.c_int, [vp, vp, i64]),
        "lnpu_arenas_new": (vp, [vp, i64, i64, err]), "lnpu_arenas_destroy": (None, [vp]),
        "lnpu_arenas_resize": (i64, [vp, i64, err]),
        "lnpu_arenas_held": (None, [vp, C.POINTER(i64), C.POINTER(i64)]),
        "lnpu_plan_new": (vp, [C.POINTER(_PlanSpec), err]), "lnpu_plan_destroy": (None, [vp]),
        "lnpu_plan_hold": (C.c_int, [vp]), "lnpu_plan_drop": (None, [vp]),
        "lnpu_plan_execute": (i64, [vp, C.POINTER(Buffer), C.POINTER(Buffer), i64, vp,
                                    C.POINTER(Copies), err]),
        "lnpu_plan_staging": (None, [vp, C.POINTER(i64), C.POINTER(i64)]),
        "lnpu_runner_new": (vp, []), "lnpu_runner_destroy": (None, [vp]),
        "lnpu_runner_set": (None, [vp, vp]), "lnpu_runner_hold": (vp, [vp]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes


def function_address(name: str) -> int:
    """Address of one of the library's functions (for the onnxruntime EP library to call)."""
    return C.cast(getattr(_lib(), name), C.c_void_p).value


def _lib() -> C.CDLL:
    lib = library()
    if lib is None:
        raise LitenpuError("the NPU's data plane needs the native library")
    return lib


_ERRORS: dict[str, type[Exception]] = {"BindingError": BindingError, "LitenpuError": LitenpuError,
                                       "MemoryError": MemoryError,
                                       "InputValueError": InputValueError}


def remap_private(address: int, length: int, fd: int) -> None:
    """Map `length` bytes of `fd` at `address` again, copy-on-write and private to this
    process (MAP_PRIVATE | MAP_FIXED over the shared mapping there): a forked child's copy of
    its parent's device pool. Needs only libc, not the library. OSError when the kernel
    refuses."""
    libc = C.CDLL(None, use_errno=True)
    libc.mmap.restype = C.c_void_p
    libc.mmap.argtypes = [C.c_void_p, C.c_size_t, C.c_int, C.c_int, C.c_int, C.c_long]
    prot_rw, map_private, map_fixed = 0x1 | 0x2, 0x02, 0x10  # <sys/mman.h>, Linux
    got = libc.mmap(address, length, prot_rw, map_private | map_fixed, fd, 0)
    if got != address:
        err = C.get_errno()
        raise OSError(err, f"mmap(MAP_PRIVATE | MAP_FIXED) of the device pool: {os.strerror(err)}")


def until_exit(finalizer: weakref.finalize) -> weakref.finalize:
    """A finalizer that frees C memory when its owner is collected, never at exit: then the
    pool's buffers and onnxruntime's tensors may still give their blocks back to a heap, and
    a daemon thread's run may still use them (`provider.exit_gate`)."""
    finalizer.atexit = False
    return finalizer


def raise_error(error: Error) -> None:
    """Raise what a C call reported in `error`."""
    kind, message = error.type.decode(), error.message.decode(errors="replace")
    if kind == "DeviceMemoryError":
        raise DeviceMemoryError(message, requested=error.requested, available=error.available)
    raise _ERRORS.get(kind, LitenpuError)(message)


_memory_view = C.pythonapi.PyMemoryView_FromMemory
_memory_view.restype, _memory_view.argtypes = C.py_object, [C.c_void_p, C.c_ssize_t, C.c_int]
_PyBUF_READ, _PyBUF_WRITE = 0x100, 0x200


def view_at(address: int, dtype: np.dtype, shape: tuple[int, ...], *,
            readonly: bool = False) -> np.ndarray:
    """A numpy array over `address` (memory a plan or onnxruntime handed over), without
    copying; valid while that memory lives. It sits on a memoryview: a ctypes array type per
    distinct size cost 13.6 us the first time a size was seen and 3.6 us after, where the
    memoryview costs 1.3 us (numpy steps view their outputs again on every run whose output
    moved)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0 or not address:
        array = np.empty(shape, dtype)
    else:
        array = np.frombuffer(_memory_view(address, nbytes, _PyBUF_READ if readonly else
                                           _PyBUF_WRITE), dtype=dtype).reshape(shape)
    if readonly:
        array.flags.writeable = False
    return array


class Heap:
    """The device pool's books in C (see csrc/heap.c): offsets into the pool's mapping."""

    def __init__(self, base: int, capacity: int):
        lib = self._lib = _lib()
        self.address: int = lib.lnpu_heap_new(base, capacity)
        if not self.address:
            raise MemoryError("no host memory for the device heap")
        until_exit(weakref.finalize(self, lib.lnpu_heap_destroy, self.address))

    def alloc(self, nbytes: int, alignment: int) -> int:
        return self._lib.lnpu_heap_alloc(self.address, nbytes, alignment)

    def release(self, offset: int) -> int:
        return self._lib.lnpu_heap_release(self.address, offset)

    def grow(self, capacity: int) -> None:
        if not self._lib.lnpu_heap_grow(self.address, capacity):
            raise MemoryError("no host memory to grow the device heap")

    def stats(self) -> tuple[int, int, int, int]:
        """(in_use, peak, live blocks, largest free block)."""
        s = _HeapStats()
        self._lib.lnpu_heap_get_stats(self.address, C.byref(s))
        return s.in_use, s.peak, s.allocations, s.largest_free

    def block(self, offset: int) -> tuple[int, int] | None:
        """(start, requested bytes) of the live block holding `offset`, or None."""
        nbytes = C.c_int64()
        start = self._lib.lnpu_heap_block(self.address, offset, C.byref(nbytes))
        return None if start < 0 else (start, nbytes.value)

    def free_blocks(self) -> list[tuple[int, int]]:
        """(start, size) of every free block."""
        n = self._lib.lnpu_heap_free_blocks(self.address, None, 0)
        out = (C.c_int64 * (2 * n))()
        self._lib.lnpu_heap_free_blocks(self.address, out, n)
        return [(out[2 * i], out[2 * i + 1]) for i in range(n)]

    def trim(self, page: int, keep: int = 0) -> int:
        """Free blocks' pages back to the OS under the heap's lock (a C run may allocate
        meanwhile), all but the first `keep` free bytes; the bytes released."""
        return self._lib.lnpu_heap_trim(self.address, page, keep)

    def add_range(self, address: int, nbytes: int) -> None:
        if not self._lib.lnpu_heap_add_range(self.address, address, nbytes):
            raise MemoryError("no host memory to register external device memory")

    def remove_range(self, address: int) -> None:
        self._lib.lnpu_heap_remove_range(self.address, address)

    def contains(self, address: int, nbytes: int) -> bool:
        return bool(self._lib.lnpu_heap_contains(self.address, address, nbytes))


class ArenaSet:
    """Arenas of one memory group (see csrc/arenas.c). With a heap: up to `max_arenas` arenas
    of `nbytes`, the first allocated now (DeviceMemoryError if it cannot be); without: no
    memory, one run at a time (plans bring their own arena)."""

    def __init__(self, heap: Heap | None, nbytes: int = 0, max_arenas: int = 1):
        lib = self._lib = _lib()
        self.heap = heap  # the heap outlives the set
        error = Error()
        self.address: int = lib.lnpu_arenas_new(None if heap is None else heap.address, nbytes,
                                                max_arenas, C.byref(error))
        if not self.address:
            raise_error(error)
        until_exit(weakref.finalize(self, lib.lnpu_arenas_destroy, self.address))

    def resize(self, nbytes: int) -> None:
        """Arenas of `nbytes` from now on (waits for runs in progress); DeviceMemoryError
        leaves the set as it was (its extra arenas given back)."""
        error = Error()
        if self._lib.lnpu_arenas_resize(self.address, nbytes, C.byref(error)) < 0:
            raise_error(error)

    def held(self) -> tuple[int, int]:
        """(arenas held, their pool bytes)."""
        count, nbytes = C.c_int64(), C.c_int64()
        self._lib.lnpu_arenas_held(self.address, C.byref(count), C.byref(nbytes))
        return count.value, nbytes.value


# numpy segments of the plans in this process, by owner id: fn(first, count, slots)
_NUMPY_OWNERS: dict[int, Callable[[int, int, C.Array], None]] = {}
_NUMPY_LOCK = threading.Lock()
_owner_ids = iter(range(1, 1 << 62))
_PYTHON_CALLER = threading.local()  # an execute() from Python: its numpy error, kept to re-raise


def _numpy_thunk(owner: int, first: int, count: int, slots, error) -> int:
    """The plans' way into Python: run numpy steps; an error is written to `error`, and kept
    (to re-raise with its traceback) when the run was started from Python on this thread."""
    try:
        _NUMPY_OWNERS[owner](first, count, slots)
        return 0
    except BaseException as exc:  # noqa: BLE001 - nothing may escape into C
        try:
            out = error.contents
            out.type = type(exc).__name__.encode()[:47]
            out.message = str(exc).encode(errors="replace")[:3999]
            if getattr(_PYTHON_CALLER, "active", False):
                _PYTHON_CALLER.error = exc
        except BaseException:  # noqa: BLE001 - interpreter teardown: no one to tell
            pass
        return 1


_NUMPY_CALLBACK = NUMPY_FN(_numpy_thunk)


class Plan:
    """One Program's run in C (see csrc/plan.c); built by `provider.npu.executor.Executor`.

    `slots`: (kind, nbytes, arena offset, weight address, name) per Program slot; `segments`:
    (first step, StepArray or None for numpy steps); `numpy(first, count, slots)` runs numpy
    steps on the slot address table."""

    def __init__(self, slots: Sequence[tuple[str, int, int, int, str]], inputs: Sequence[int],
                 outputs: Sequence[int], segments: Sequence[tuple[int, int, StepArray | None]],
                 heap: Heap, arenas: ArenaSet, own_arena: int, cores: int,
                 numpy: Callable[[int, int, C.Array], None] | None):
        lib = self._lib = _lib()
        self.heap, self.arenas = heap, arenas  # both outlive the plan
        self.n_inputs, self.n_outputs = len(inputs), len(outputs)
        table, names = _slot_table(slots)  # both alive until lnpu_plan_new copied them
        slot_specs = C.cast(table.ctypes.data, C.POINTER(SlotSpec))
        segment_specs = (SegmentSpec * max(len(segments), 1))(*[
            SegmentSpec(first, count, None if steps is None else
                        C.cast(steps._array, C.POINTER(Step)))
            for first, count, steps in segments])
        spec = _PlanSpec(len(slots), slot_specs, len(inputs), (C.c_int64 * max(len(inputs), 1))(*inputs),
                         len(outputs), (C.c_int64 * max(len(outputs), 1))(*outputs), len(segments),
                         segment_specs, heap.address, arenas.address, own_arena or None,
                         _NUMPY_CALLBACK, 0, cores)
        if numpy is not None:
            with _NUMPY_LOCK:
                spec.owner = next(_owner_ids)
                _NUMPY_OWNERS[spec.owner] = numpy
        self.owner = spec.owner
        error = Error()
        self.address: int = lib.lnpu_plan_new(C.byref(spec), C.byref(error))
        if not self.address:
            _NUMPY_OWNERS.pop(self.owner, None)
            raise_error(error)
        self._close = until_exit(weakref.finalize(self, _destroy_plan, lib, self.address,
                                                   self.owner))

    def execute(self, inputs: Sequence[tuple[int, int]], outputs: Sequence[tuple[int, int]],
                cores: int = -1, stamps: np.ndarray | None = None) -> tuple[int, int]:
        """Run once on (address, nbytes) inputs and outputs (address 0: not collected), on
        `cores` of the NPU's cores (0: all; -1: the plan's), each step's (start, end) into
        `stamps` when given (int64, C-contiguous, a row per step: the Executor checked it);
        returns (bytes copied in, bytes copied out). Raises what the run raised."""
        lib = self._lib
        ins = (Buffer * max(self.n_inputs, 1))(*[Buffer(a or None, n) for a, n in inputs])
        outs = (Buffer * max(self.n_outputs, 1))(*[Buffer(a or None, n) for a, n in outputs])
        if not self._close.alive or not lib.lnpu_plan_hold(self.address):
            raise LitenpuError("this executor is closed")
        copies, error = Copies(), Error()
        _PYTHON_CALLER.active = True
        try:
            status = lib.lnpu_plan_execute(self.address, ins, outs, cores,
                                           None if stamps is None else stamps.ctypes.data,
                                           C.byref(copies), C.byref(error))
        finally:
            _PYTHON_CALLER.active = False
            lib.lnpu_plan_drop(self.address)
        if status:
            raised = getattr(_PYTHON_CALLER, "error", None)
            _PYTHON_CALLER.error = None
            if raised is not None:
                raise raised
            raise_error(error)
        return copies.copied_in, copies.copied_out

    def staging(self) -> tuple[int, int]:
        """(requested bytes, pool bytes) of the staging buffers this plan holds."""
        nbytes, blocks = C.c_int64(), C.c_int64()
        if self._close.alive:
            self._lib.lnpu_plan_staging(self.address, C.byref(nbytes), C.byref(blocks))
        return nbytes.value, blocks.value

    def close(self) -> None:
        """Wait for runs in progress, give the staging back, free the plan (idempotent)."""
        self._close()


def _destroy_plan(lib: C.CDLL, address: int, owner: int) -> None:
    lib.lnpu_plan_destroy(address)
    _NUMPY_OWNERS.pop(owner, None)


class Runner:
    """The plan an onnxruntime kernel runs for one executor (None while it cannot run)."""

    def __init__(self) -> None:
        lib = self._lib = _lib()
        self.address: int = lib.lnpu_runner_new()
        if not self.address:
            raise MemoryError("no host memory for a runner")
        self.plan: Plan | None = None
        until_exit(weakref.finalize(self, lib.lnpu_runner_destroy, self.address))

    def set(self, plan: Plan | None) -> Plan | None:
        """Run `plan` from now on; returns the plan it replaced (close it: that waits for the
        runs that still hold it)."""
        self._lib.lnpu_runner_set(self.address, None if plan is None else plan.address)
        old, self.plan = self.plan, plan
        return old
