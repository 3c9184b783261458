"""Runs a Program on device memory and counts every byte it has to copy.

An Executor owns one arena (the Program's `internal_bytes`, planned at compile time) and
binds graph inputs/outputs per run. Zero-copy rule (cf. the onert I/O-copies discussion):
an input or output that already lives in device memory (`pool.contains`, including
imported and wrapped buffers) with the Program's dtype and shape, C-contiguous, is used in
place. A host array with the right dtype and shape is copied once, into (or out of) a
staging buffer in device memory, and counted in `CopyStats`; the documented reasons for a
copy are "not in device memory" and "not C-contiguous". A wrong dtype, wrong shape or a too
small buffer is a `BindingError` naming the input/output and what was expected.

Weights: a Program loaded with `program.load(..., mmap=True)` keeps its weights in the
file mapping and the executor reads them there, in place (nothing is copied or populated
up front); so it does when the blob already is device memory. A Program whose blob is
ordinary host memory (fresh from the compiler) is uploaded once into a device buffer, so
the caller may drop the compiler's bytes. A caller
can pass its own `weights` buffer (shared across sessions, or allocated outside) and its
own `arena` (an internal memory group); the executor retains both and releases them on
close. Runs of one executor from Python are serialized by its lock (pass a shared `lock`
when several executors share an arena).

A run given `stamps` (`step_stamps(program)`) records each step's start and end there
(CLOCK_MONOTONIC ns; the native steps stamp themselves in C): the profile, one timestamp pair
per step, nothing when not asked for. A run may use at most `cores` of the NPU's cores, per
executor or per run.

With the native library (the pool's books are then its heap) a run is one C call, a
`native.Plan` (`native_plan`): binding by the same rules, staging, native segments, and the
numpy segments called back; its arena comes from `arenas` (a `native.ArenaSet`: a memory
group's, or a lock-only set shared with other executors) or is the executor's own. The
onnxruntime EP runs the same plan without Python (`runner`). Without the library runs go
through the Python loop below: native segments (one C call per run of consecutive native
steps) and numpy kernels.

Over 400 lines on purpose: binding (zero-copy checks, staging, overlap checks) and running
share the Executor's slot views and address table; apart they would pass both back and forth.
"""

from __future__ import annotations

import logging
import mmap
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from provider.errors import BindingError, LitenpuError, UnsupportedError
from provider.npu import native, native_steps
from provider.npu.memory import ALIGNMENT, DeviceBuffer, DevicePool, default_pool
from provider.npu.native import AddressTable
from provider.npu.native_plan import NumpySteps, build_plan, run_step
from provider.npu.native_steps import NativeRun
from provider.npu.ops import KERNELS
from provider.npu.program import Program, Slot, view_slot

__all__ = ["CopyStats", "MemoryInfo", "Executor", "step_stamps", "step_seconds", "upload_weights",
           "weights_are_mapped"]

log = logging.getLogger("litenpu.npu")

IOValue = np.ndarray | DeviceBuffer


@dataclass(frozen=True)
class CopyStats:
    """Bytes copied into device memory for inputs and out of it for outputs."""

    bytes_copied_in: int = 0
    bytes_copied_out: int = 0

    def __add__(self, other: CopyStats) -> CopyStats:
        return CopyStats(self.bytes_copied_in + other.bytes_copied_in,
                         self.bytes_copied_out + other.bytes_copied_out)


@dataclass(frozen=True)
class MemoryInfo:
    """Memory of one executor, like RKNN_QUERY_MEM_SIZE: sizes exact, from the Program.

    `staging` is the device memory allocated so far for host I/O copies; `weights_uploaded`
    says this executor holds its own device copy of the weights (else they are read in
    place: from the Program file mapping, device memory, or the caller's buffer).
    """

    weights: int
    internal: int
    io: int
    staging: int
    weights_uploaded: bool


def weights_are_mapped(program: Program) -> bool:
    """True when the Program's weight blob is a view of an mmap (a loaded Program file)."""
    obj: Any = program.weights
    while obj is not None and not isinstance(obj, mmap.mmap):
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
    return obj is not None


def upload_weights(program: Program, pool: DevicePool | None = None) -> DeviceBuffer:
    """Copy the Program's weight blob into a new device buffer (to share between executors)."""
    buffer = (pool if pool is not None else default_pool()).allocate(program.weight_bytes)
    buffer.view()[:] = program.weights_array()
    return buffer


def step_stamps(program: Program) -> np.ndarray:
    """A run's profile record: one (start, end) row per step, CLOCK_MONOTONIC nanoseconds
    (`time.monotonic_ns`'s clock), filled by `Executor.run(..., stamps=...)`."""
    return np.zeros((len(program.steps), 2), np.int64)


def step_seconds(stamps: np.ndarray) -> np.ndarray:
    """Each step's wall time in seconds, from a run's `step_stamps` record."""
    return (stamps[:, 1] - stamps[:, 0]) * 1e-9


def _checked_stamps(stamps: np.ndarray | None, program: Program) -> np.ndarray | None:
    if stamps is not None and (not isinstance(stamps, np.ndarray) or stamps.dtype != np.int64
                               or stamps.shape != (len(program.steps), 2)
                               or not stamps.flags.c_contiguous):
        raise ValueError(f"stamps must be step_stamps(program): int64, shape "
                         f"({len(program.steps)}, 2), C-contiguous")
    return stamps


def _checked_cores(cores: object) -> int:
    """`cores` when it is a core count (an int >= 0, 0 meaning all the NPU's cores)."""
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 0:
        raise ValueError(f"cores must be an int >= 0 (0: all the NPU's cores), got {cores!r}")
    return cores


def _release_all(plans: list[native.Plan], buffers: list[DeviceBuffer]) -> None:
    """Close the native plan (it waits for its runs), then release every buffer an executor
    holds (also run by the GC if close() was forgotten)."""
    while plans:
        plans.pop().close()
    while buffers:
        buffers.pop().release()


def _block(nbytes: int) -> int:
    """Pool bytes of a buffer of `nbytes` (a block of at least 64)."""
    return -(-max(nbytes, 1) // ALIGNMENT) * ALIGNMENT


def _slot_view(per_slot: Mapping[int, np.ndarray], index: int, slot: Slot) -> np.ndarray:
    """Weight slot `index` from a per-slot mapping of uint8 regions (shared weight store)."""
    region = per_slot.get(index)
    if region is None or region.nbytes != slot.nbytes:
        got = "nothing" if region is None else f"{region.nbytes} bytes"
        raise BindingError(f"weight {slot.name!r}: got {got}, expected {_describe(slot)}")
    return region.view(slot.np_dtype).reshape(slot.shape)


def _address(region: np.ndarray | None) -> int:
    """The address of a region's first byte (0 for none)."""
    return 0 if region is None else region.ctypes.data


def _describe(slot: Slot) -> str:
    return f"{slot.dtype}{list(slot.shape)} ({slot.nbytes} bytes)"


class Executor:
    """Runs one Program: an arena from the pool, weights in place or uploaded, per-run I/O."""

    def __init__(
        self,
        program: Program,
        pool: DevicePool | None = None,
        *,
        kernels: Mapping[str, Any] | None = None,
        weights: DeviceBuffer | np.ndarray | Mapping[int, np.ndarray] | None = None,
        arena: DeviceBuffer | np.ndarray | None = None,
        lock: threading.Lock | None = None,
        cores: int = 0,
        arenas: native.ArenaSet | None = None,
        validated: bool = False,
    ):
        if not validated:  # else the caller's Program passed the check when it was made
            program.validate()  # (compile_model, program.load) and has not changed since
        self.cores = _checked_cores(cores)
        # The native library runs the steps it can (native_steps) unless the caller brings
        # its own kernel table, which then runs every step.
        self._segments: list[int | NativeRun] = (
            native_steps.segments(program) if kernels is None else list(range(len(program.steps))))
        if kernels is None:
            kernels = KERNELS
        self.program = program
        self.pool = pool if pool is not None else default_pool()
        self._lock = lock if lock is not None else threading.Lock()
        self._plan = self._resolve_kernels(kernels)
        self._held: list[DeviceBuffer] = []
        self._native: list[native.Plan] = []  # the run as one C call, when the library is there
        self._weights_uploaded = False
        self._close = native.until_exit(weakref.finalize(self, _release_all, self._native, self._held))
        heap = self.pool.heap
        if arenas is not None and heap is None:
            raise LitenpuError("arena sets need the native library")
        try:
            per_slot = weights if isinstance(weights, Mapping) else None
            weight_region = None if per_slot is not None else self._place_weights(weights)
            own_arena = None
            if arenas is None or arena is not None:
                own_arena = self._hold(arena, program.internal_bytes, "arena")
            self._views: list[np.ndarray | None] = [None] * len(program.slots)
            # each view's address: its region's plus its offset (numpy's per-array
            # .ctypes.data took 2 us a slot)
            addresses = [0] * len(program.slots)
            weight_base = _address(weight_region)
            arena_base = _address(own_arena) if heap is None else None
            for index, slot in enumerate(program.slots):
                if slot.kind == "weight":
                    view = None
                    if per_slot is not None:
                        view = _slot_view(per_slot, index, slot)
                        addresses[index] = view.ctypes.data
                    else:  # a plan reads weights by address (numpy steps view them when they
                        # run): views only for the Python loop (a detector's 126 took 0.3 ms)
                        addresses[index] = weight_base + slot.offset
                        if heap is None:
                            view = view_slot(weight_region, slot)
                    if view is not None:
                        view.flags.writeable = False
                        self._views[index] = view
                elif slot.kind == "internal" and heap is None:
                    self._views[index] = view_slot(own_arena, slot)
                    addresses[index] = arena_base + slot.offset
            self.numpy_steps: NumpySteps | None = None
            if heap is not None:
                plan, self.numpy_steps = build_plan(
                    program, self._segments, self._plan, addresses, heap,
                    arenas if arenas is not None else native.ArenaSet(None),
                    0 if own_arena is None or not own_arena.nbytes else own_arena.ctypes.data,
                    cores)
                self._native.append(plan)
        except BaseException:
            self._close()
            raise
        # Slot addresses for the native steps: weights and arena fixed, I/O set per run.
        self._addresses = AddressTable(addresses)
        self._staging: dict[int, np.ndarray] = {}
        self._buffer_views: dict[int, tuple[DeviceBuffer, np.ndarray]] = {}
        self.copy_stats = CopyStats()
        self.total_copy_stats = CopyStats()

    @property
    def plan(self) -> native.Plan | None:
        """The native plan runs go through (None: the Python loop)."""
        return self._native[0] if self._native else None

    def _resolve_kernels(self, kernels: Mapping[str, Any]) -> list[tuple[Callable, list[int], list[int], dict]]:
        """(run, inputs, outputs, attrs) per step; an unknown kernel lists the known ones."""
        plan = []
        for index, step in enumerate(self.program.steps):
            kernel = kernels.get(step.kernel)
            if kernel is None:
                known = ", ".join(sorted(kernels))
                raise UnsupportedError(
                    f"step {index}: no NPU kernel {step.kernel!r}; known kernels: {known}")
            plan.append((kernel.run, list(step.inputs), list(step.outputs), step.attrs))
        return plan

    def _hold(self, given: DeviceBuffer | np.ndarray | None, nbytes: int, what: str) -> np.ndarray:
        """Retain a caller's buffer (checking its size) or allocate one; its bytes as uint8.

        A plain uint8 array is a region whose lifetime the caller manages (memory controls).
        """
        if given is None:
            buffer = self.pool.allocate(nbytes)
        elif given.nbytes < nbytes:
            raise BindingError(f"{what} buffer has {given.nbytes} bytes, the program needs {nbytes}")
        elif isinstance(given, np.ndarray):
            return given.reshape(-1).view(np.uint8)
        else:
            buffer = given.retain()
        self._held.append(buffer)
        return buffer.view()

    def _place_weights(self, weights: DeviceBuffer | None) -> np.ndarray:
        """The weight region: caller's buffer, the mapped file in place, or a fresh upload."""
        program = self.program
        if weights is not None:
            return self._hold(weights, program.weight_bytes, "weight")
        blob = program.weights_array()
        if not blob.nbytes or weights_are_mapped(program) or (
                blob.flags.c_contiguous and self.pool.contains(blob.ctypes.data, blob.nbytes)):
            log.debug("program %r: %d weight bytes used in place", program.name, blob.nbytes)
            return blob
        buffer = upload_weights(program, self.pool)
        self._held.append(buffer)
        self._weights_uploaded = True
        return buffer.view()

    # binding ---------------------------------------------------------------------------------

    def _staging_view(self, index: int, slot: Slot) -> np.ndarray:
        """A device buffer for slot `index` used when the caller's memory cannot be (lazy)."""
        view = self._staging.get(index)
        if view is None:
            buffer = self.pool.allocate(slot.nbytes)
            self._held.append(buffer)
            view = self._staging[index] = buffer.view(slot.np_dtype, slot.shape)
        return view

    def _validated(self, what: str, index: int, value: IOValue) -> np.ndarray:
        """One bound value as an array of the slot's dtype and shape (a DeviceBuffer's view)."""
        slot = self.program.slots[index]
        if isinstance(value, DeviceBuffer):
            cached = self._buffer_views.get(index)
            if cached is not None and cached[0] is value and value.refcount:
                return cached[1]  # the same buffer as last run: skip re-validation
            if value.nbytes < slot.nbytes:
                raise BindingError(f"{what} {slot.name!r}: device buffer of {value.nbytes} bytes "
                                   f"is too small, expected {_describe(slot)}")
            view = value.view(slot.np_dtype, slot.shape)
            self._buffer_views[index] = (value, view)
            return view
        if not isinstance(value, np.ndarray):
            raise BindingError(f"{what} {slot.name!r}: expected a numpy array or DeviceBuffer, "
                               f"got {type(value).__name__}")
        if value.dtype != slot.np_dtype or value.shape != slot.shape:
            raise BindingError(f"{what} {slot.name!r}: got {value.dtype}{list(value.shape)}, "
                               f"expected {_describe(slot)}")
        return value

    def _check(self, what: str, index: int, value: IOValue) -> np.ndarray | None:
        """Validate one bound value; its in-place view when it is device memory, else None."""
        array = self._validated(what, index, value)
        if isinstance(value, DeviceBuffer) or (
                array.flags.c_contiguous and self.pool.contains(array.ctypes.data, array.nbytes)):
            return array
        return None

    def _bind_inputs(self, inputs: Sequence[IOValue]) -> int:
        """Point input slots at the caller's memory or a filled staging copy; bytes copied."""
        copied = 0
        for index, value in zip(self.program.inputs, inputs, strict=True):
            slot = self.program.slots[index]
            view = self._check("input", index, value)
            if view is None:
                view = self._staging_view(index, slot)
                np.copyto(view, value)
                copied += slot.nbytes
            self._views[index] = view
        return copied

    def _bind_outputs(self, outputs: Sequence[IOValue | None]) -> list[np.ndarray | None]:
        """Point output slots at the caller's device memory or staging; host targets per output."""
        targets: list[np.ndarray | None] = []
        for index, value in zip(self.program.outputs, outputs, strict=True):
            slot = self.program.slots[index]
            view = None if value is None else self._check("output", index, value)
            target = value if view is None else view
            if isinstance(target, np.ndarray) and not target.flags.writeable:
                raise BindingError(f"output {slot.name!r}: the memory is read-only")
            host = None
            if view is None:
                view = self._staging_view(index, slot)
                host = np.empty(slot.shape, slot.np_dtype) if value is None else value
            else:
                self._check_overlap(slot, view, len(targets))
            self._views[index] = view
            targets.append(host)
        return targets

    def _check_overlap(self, slot: Slot, view: np.ndarray, position: int) -> None:
        """An in-place output must not share memory with an input or an earlier output:
        a step could overwrite data a later step still reads."""
        bound = [*self.program.inputs, *self.program.outputs[:position]]
        for other in bound:
            if np.may_share_memory(view, self._views[other]):
                raise BindingError(f"output {slot.name!r} shares memory with "
                                   f"{self.program.slots[other].kind} "
                                   f"{self.program.slots[other].name!r}; bind separate buffers")

    # running ---------------------------------------------------------------------------------

    def run(self, inputs: Sequence[IOValue],
            outputs: Sequence[IOValue | None] | None = None, *,
            cores: int | None = None, stamps: np.ndarray | None = None) -> list[np.ndarray]:
        """Run every step once, on at most `cores` of the NPU's cores (default: the executor's
        `cores`); returns the outputs (caller's arrays/views, or new arrays). `stamps`
        (`step_stamps(program)`) receives each step's start and end: the run's profile."""
        cores = self.cores if cores is None else _checked_cores(cores)
        program = self.program
        stamps = _checked_stamps(stamps, program)
        if len(inputs) != len(program.inputs):
            raise BindingError(f"program {program.name!r} takes {len(program.inputs)} inputs "
                               f"{self.input_names}, got {len(inputs)}")
        if outputs is None:
            outputs = [None] * len(program.outputs)
        elif len(outputs) != len(program.outputs):
            raise BindingError(f"program {program.name!r} has {len(program.outputs)} outputs "
                               f"{self.output_names}, got {len(outputs)} buffers")
        with self._lock:
            if not self._close.alive:
                raise LitenpuError(f"executor of program {program.name!r} is closed")
            if self._native:
                results, copied_in, copied_out = self._run_native(inputs, outputs, cores, stamps)
            else:
                results, copied_in, copied_out = self._run_python(inputs, outputs, cores, stamps)
            self.copy_stats = CopyStats(copied_in, copied_out)
            self.total_copy_stats += self.copy_stats
        return results

    def _run_python(self, inputs: Sequence[IOValue], outputs: Sequence[IOValue | None],
                    cores: int, stamps: np.ndarray | None) -> tuple[list[np.ndarray], int, int]:
        program = self.program
        try:
            copied_in = self._bind_inputs(inputs)
            targets = self._bind_outputs(outputs)
            self._execute(cores, stamps)
            results, copied_out = self._collect(targets)
        finally:
            for index in (*program.inputs, *program.outputs):
                self._views[index] = None  # hold no reference to caller memory
        return results, copied_in, copied_out

    def _run_native(self, inputs: Sequence[IOValue], outputs: Sequence[IOValue | None],
                    cores: int, stamps: np.ndarray | None) -> tuple[list[np.ndarray], int, int]:
        """One plan execution: the caller's memory as C-contiguous bytes (a strided array goes
        through a contiguous copy, counted once by the plan like any host memory)."""
        program = self.program
        ins = []
        for index, value in zip(program.inputs, inputs, strict=True):
            array = np.ascontiguousarray(self._validated("input", index, value))
            ins.append(array)
        results, outs, strided = [], [], []
        for index, value in zip(program.outputs, outputs, strict=True):
            slot = program.slots[index]
            array = (np.empty(slot.shape, slot.np_dtype) if value is None
                     else self._validated("output", index, value))
            if not array.flags.writeable:
                raise BindingError(f"output {slot.name!r}: the memory is read-only")
            results.append(array)
            if not array.flags.c_contiguous:
                strided.append((array, np.empty(slot.shape, slot.np_dtype)))
                array = strided[-1][1]
            outs.append(array)
        copied_in, copied_out = self._native[0].execute(
            [(a.ctypes.data, a.nbytes) for a in ins], [(a.ctypes.data, a.nbytes) for a in outs],
            cores, stamps)
        for target, contiguous in strided:
            np.copyto(target, contiguous)
        return results, copied_in, copied_out

    def _execute(self, cores: int, stamps: np.ndarray | None) -> None:
        views, addresses = self._views, self._addresses
        for index in (*self.program.inputs, *self.program.outputs):
            addresses[index] = views[index].ctypes.data
        for segment in self._segments:
            if isinstance(segment, NativeRun):
                segment.steps.run(addresses, cores, None if stamps is None else
                                  stamps[segment.first:segment.first + segment.count])
                continue
            _, ins, outs, _ = self._plan[segment]
            if stamps is not None:
                stamps[segment, 0] = time.monotonic_ns()
            run_step(self.program, self._plan, segment, [views[i] for i in ins],
                     [views[i] for i in outs])
            if stamps is not None:
                stamps[segment, 1] = time.monotonic_ns()

    @property
    def native_steps(self) -> int:
        """How many of the Program's steps run on the native kernels (the rest on numpy)."""
        return sum(s.count for s in self._segments if isinstance(s, NativeRun))

    def _collect(self, targets: list[np.ndarray | None]) -> tuple[list[np.ndarray], int]:
        """Copy staged outputs to their host targets; results and bytes copied out."""
        results, copied = [], 0
        for index, host in zip(self.program.outputs, targets, strict=True):
            view = self._views[index]
            if host is not None:
                np.copyto(host, view)
                copied += view.nbytes
                view = host
            results.append(view)
        return results, copied

    def run_named(self, feeds: Mapping[str, IOValue],
                  outputs: Mapping[str, IOValue] | None = None) -> dict[str, np.ndarray]:
        """`run` with inputs (and optionally output buffers) by name; results by name."""
        names = self.input_names
        missing = [n for n in names if n not in feeds]
        unknown = [n for n in feeds if n not in names]
        out_names = self.output_names
        unknown += [n for n in (outputs if outputs is not None else {}) if n not in out_names]
        if missing or unknown:
            raise BindingError(f"program {self.program.name!r}: missing inputs {missing}, "
                               f"unknown names {unknown}; inputs are {names}, outputs {out_names}")
        bound = [None if outputs is None else outputs.get(n) for n in out_names]
        results = self.run([feeds[n] for n in names], bound)
        return dict(zip(out_names, results, strict=True))

    def memory_info(self) -> MemoryInfo:
        """Weight, arena, I/O and staging bytes of this executor."""
        program = self.program
        staging = (self._native[0].staging()[0] if self._native
                   else sum(v.nbytes for v in self._staging.values()))
        return MemoryInfo(program.weight_bytes, program.internal_bytes, program.io_bytes,
                          staging, self._weights_uploaded)

    @property
    def staging_device_bytes(self) -> int:
        """Pool bytes of the staging buffers this executor holds."""
        if self._native:
            return self._native[0].staging()[1]
        return sum(_block(v.nbytes) for v in self._staging.values())

    @property
    def input_names(self) -> list[str]:
        """Graph input names in order."""
        return self.program.input_names

    @property
    def output_names(self) -> list[str]:
        """Graph output names in order."""
        return self.program.output_names

    def close(self) -> None:
        """Release the arena, staging and weight buffers (idempotent)."""
        with self._lock:
            self._close()
            self._views = []
            self._staging.clear()
            self._buffer_views.clear()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
