"""Memory controls of NPU sessions: queries, caller-owned memory, shared arenas, clones, shared weights.

RKNN exposes these as manual knobs (RKNN_QUERY_MEM_SIZE, RKNN_FLAG_MEM_ALLOC_OUTSIDE,
rknn_set_internal_mem shared by hand, rknn_dup_context, master/slave weight sharing); here
they are provider options and session methods, and the unsafe parts are done for the user.

Every fused partition's Program gets a `ManagedExecutor` from its session's `SessionMemory`
(one per NpuEp, i.e. per session). It places the Program's two memory kinds:

- **weights**: per Program, held by the session's `_Family` (the session and all its clones),
  refcounted, so clones never copy them. Default: uploaded to one pool block (or read in
  place when the Program is a mapped cache file: no device bytes). `share_weights=1`: each
  weight *slot* comes from the process-wide `WeightStore`, keyed by (BLAKE2b-128 of its
  bytes, size). Programs keep their one-blob layout; the executor is simply handed one
  region per weight slot instead of the blob, so tensors are shared across any Programs
  (other models, other input shapes: the compiler's weight bytes do not depend on the input
  shape) while each Program's own slot offsets stay as compiled. A mapped Program's slots
  are stored as views of its mapping (weights of one cache entry are mapped once, and never
  copied into the pool). Hashes are computed once per Program object (the compiler could
  record them in the Program later; the store only needs the key).
- **internal (arena)**: default, one pool block per partition, shared by the Programs of its
  input shapes and sized to the largest one alive (`ArenaGroup`, private to the session).
  `internal_memory_group=<name>`:
  all Programs of all sessions in the group run in one arena sized to the largest member's
  need; a member needing more grows it under the group lock (so never while a member runs),
  members rebuild their views before their next run; runs of the whole group are
  serialized by that lock. The arena is freed when the last member closes.
- `mem_alloc_outside=1`: nothing is allocated for weights or arenas; the caller passes
  regions (`set_weight_memory` / `set_internal_memory`) which are laid out as each Program's
  blob / arena at 64-byte aligned offsets in Program order; `memory_info()` gives the
  sizes to provide (before any run when the input shapes are static, e.g. with free
  dimension overrides; dynamic shapes compile, and so learn their sizes, at the first run).
  The weights are copied into the caller's region once; a caller's DeviceBuffer is retained
  while used. Sessions given overlapping internal regions (RKNN's way to share internal
  memory) share one run lock, so their runs cannot interleave. It excludes the two options
  above (InvalidOptionError).

`sess.clone()` builds a second onnxruntime session over the same model whose kernels take
their Programs (and weights) from the source's family instead of compiling: one session
per thread, each with its own arena (or its group's).

Numbers are exact: `SessionMemoryInfo` reports the Programs' sizes and the pool blocks
(64-byte multiples, as `DevicePool.stats()` counts them) this session holds.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from provider.errors import BindingError, DeviceMemoryError, LitenpuError
from provider.npu.executor import CopyStats, Executor, weights_are_mapped
from provider.npu.memory import ALIGNMENT, DeviceBuffer, DevicePool, default_pool
from provider.npu.program import Program

__all__ = ["SessionMemoryInfo", "WeightStore", "ArenaGroup", "SessionMemory", "ManagedExecutor",
           "session_memory", "find_session_memory", "cloning", "merge_infos", "caller_region",
           "block_bytes", "weight_store"]

log = logging.getLogger("litenpu.memory")


def block_bytes(nbytes: int) -> int:
    """Pool bytes a region of `nbytes` takes (0 for none: nothing is allocated)."""
    return 0 if nbytes <= 0 else (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True)
class SessionMemoryInfo:
    """A session's NPU memory, like RKNN_QUERY_MEM_SIZE (all in bytes).

    `weights` / `internal` are what `set_weight_memory` / `set_internal_memory` need (the
    Programs' blobs / arenas laid out 64-byte aligned); `io` is the graph I/O of the Programs;
    `total = weights + internal + io`. The `device_*` fields are pool bytes this session holds
    now: weight blocks (shared ones included), arena blocks (its group's whole arena), I/O
    staging; `pool_in_use` is the whole pool's current use.
    """

    weights: int
    internal: int
    io: int
    total: int
    device_weights: int
    device_internal: int
    device_staging: int
    pool_in_use: int

    @property
    def device_total(self) -> int:
        """Pool bytes this session holds."""
        return self.device_weights + self.device_internal + self.device_staging


@dataclass
class _Region:
    """A flat uint8 region and what keeps it alive (a pool buffer to release, or any owner)."""

    array: np.ndarray
    buffer: DeviceBuffer | None = None
    owner: Any = None

    @property
    def device(self) -> int:
        return block_bytes(self.array.nbytes) if self.buffer is not None else 0

    def release(self) -> None:
        if self.buffer is not None:
            self.buffer.release()
            self.buffer = None


def _allocate(pool: DevicePool, nbytes: int) -> _Region:
    if nbytes <= 0:
        return _Region(np.zeros(0, np.uint8))
    buffer = pool.allocate(nbytes)
    return _Region(buffer.view(), buffer)


def _weight_region(program: Program, data: np.ndarray, pool: DevicePool, mapped: bool) -> _Region:
    """`data` (part of `program`'s blob): read in place when the blob is mapped, else copied
    into a pool block."""
    if mapped:
        return _Region(data, owner=program.weights)
    region = _allocate(pool, data.nbytes)
    region.array[:] = data
    return region


# ---- shared weights ------------------------------------------------------------------------

_HASHES: dict[int, dict[int, tuple[bytes, int]]] = {}
_HASHES_LOCK = threading.Lock()


def _slot_keys(program: Program) -> dict[int, tuple[bytes, int]]:
    """Weight slot index -> (BLAKE2b-128 of its bytes, size), once per Program object."""
    with _HASHES_LOCK:
        keys = _HASHES.get(id(program))
    if keys is None:
        blob = program.weights_array()
        keys = {i: (hashlib.blake2b(blob[s.offset:s.offset + s.nbytes], digest_size=16).digest(),
                    s.nbytes)
                for i, s in enumerate(program.slots) if s.kind == "weight"}
        with _HASHES_LOCK:
            if id(program) not in _HASHES:
                _HASHES[id(program)] = keys
                weakref.finalize(program, _HASHES.pop, id(program), None)
    return keys


class WeightStore:
    """Process-wide weight tensors, stored once per content hash and refcounted per use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[bytes, int], list] = {}  # key -> [refs, _Region]

    def acquire(self, program: Program, pool: DevicePool) -> tuple[dict[int, np.ndarray], list]:
        """Per-slot regions of `program`'s weights and the keys to release; on failure
        (pool exhausted) everything taken is given back."""
        keys = _slot_keys(program)
        blob = program.weights_array()
        mapped = weights_are_mapped(program)
        views: dict[int, np.ndarray] = {}
        taken: list = []
        try:
            with self._lock:
                for index, key in keys.items():
                    entry = self._entries.get(key)
                    if entry is None:
                        slot = program.slots[index]
                        region = _weight_region(program, blob[slot.offset:slot.offset + slot.nbytes],
                                                pool, mapped)
                        entry = self._entries[key] = [0, region]
                    entry[0] += 1
                    taken.append(key)
                    views[index] = entry[1].array
        except BaseException:
            self.release(taken)
            raise
        return views, taken

    def release(self, keys: Sequence) -> None:
        """Drop one use of each key; a tensor with no use left leaves the store."""
        with self._lock:
            for key in keys:
                entry = self._entries[key]
                entry[0] -= 1
                if entry[0] == 0:
                    del self._entries[key]
                    entry[1].release()

    def device_bytes(self, keys: Sequence) -> int:
        """Pool bytes of the distinct tensors among `keys`."""
        with self._lock:
            return sum(self._entries[k][1].device for k in set(keys) if k in self._entries)

    def stats(self) -> tuple[int, int]:
        """(distinct tensors stored, pool bytes they take)."""
        with self._lock:
            return len(self._entries), sum(e[1].device for e in self._entries.values())


_STORE = WeightStore()


def weight_store() -> WeightStore:
    """The process's shared weight store (`share_weights=1`)."""
    return _STORE


# ---- internal memory groups ------------------------------------------------------------------

class ArenaGroup:
    """One arena shared by its members (Programs); runs serialized; sized to the largest live
    member. A named group (`internal_memory_group`) spans sessions; every partition also has a
    private one shared by the Programs of its input shapes."""

    def __init__(self, name: str, pool: DevicePool, *, shared: bool = True):
        self.name = name
        self.pool = pool
        self.shared = shared  # registered in _GROUPS under its name
        self.lock = threading.RLock()
        self.region = _allocate(pool, 0)
        self.generation = 0
        self.sizes: list[int] = []  # what each live member needs

    @property
    def members(self) -> int:
        return len(self.sizes)

    def join(self, nbytes: int) -> None:
        """Add a member needing `nbytes`; grows the arena first (DeviceMemoryError leaves it)."""
        with self.lock:  # no member runs while the arena is replaced
            if nbytes > self.region.array.nbytes:
                self._resize(nbytes)
            self.sizes.append(nbytes)

    def leave(self, nbytes: int) -> None:
        """Remove a member that needed `nbytes`; the arena shrinks to the largest one left
        (the last one out frees it, and a named group with it)."""
        with self.lock:
            self.sizes.remove(nbytes)
            need = max(self.sizes, default=0)
            if need < self.region.array.nbytes:
                try:
                    self._resize(need)
                except DeviceMemoryError:  # no room for the smaller copy now: keep the big one
                    log.debug("arena group %r: keeps %d bytes", self.name, self.region.array.nbytes)
            if self.sizes or not self.shared:
                return
        with _GROUPS_LOCK:
            if _GROUPS.get((self.name, id(self.pool))) is self and not self.sizes:
                del _GROUPS[(self.name, id(self.pool))]

    def _resize(self, nbytes: int) -> None:
        """Replace the arena by one of `nbytes` (lock held; members rebuild their views)."""
        new = _allocate(self.pool, nbytes)
        old, self.region = self.region, new
        if old.buffer is not None:
            old.release()
            self.pool.trim()  # the old arena's pages go back to the OS
        self.generation += 1
        log.info("arena group %r: %d bytes", self.name, nbytes)


_GROUPS: dict[tuple[str, int], ArenaGroup] = {}
_GROUPS_LOCK = threading.Lock()


def _group(name: str, pool: DevicePool) -> ArenaGroup:
    with _GROUPS_LOCK:
        group = _GROUPS.get((name, id(pool)))
        if group is None:
            group = _GROUPS[(name, id(pool))] = ArenaGroup(name, pool)
        return group


# ---- caller-owned memory ---------------------------------------------------------------------

def caller_region(buffer: Any, what: str) -> tuple[np.ndarray, Any]:
    """A writable flat uint8 view of a caller's memory and the object keeping it alive.

    Accepts an NPU `OrtValue` (also one from `provider.import_fd` / `provider.wrap`), a
    `DeviceBuffer` (e.g. `DevicePool.import_fd`) or a C-contiguous 64-byte aligned array.
    """
    if isinstance(buffer, DeviceBuffer):
        array = buffer.view()
    elif isinstance(buffer, np.ndarray):
        array = buffer
    elif type(buffer).__name__ == "OrtValue":
        from provider.tensors import view
        array = view(buffer)
    else:
        raise BindingError(f"{what}: expected an NPU OrtValue, a DeviceBuffer or an aligned numpy "
                           f"array, got {type(buffer).__name__}")
    if not array.flags.c_contiguous or not array.flags.writeable:
        raise BindingError(f"{what}: the memory must be C-contiguous and writable")
    if array.nbytes and array.ctypes.data % ALIGNMENT:
        raise BindingError(f"{what}: memory at {array.ctypes.data:#x} is not {ALIGNMENT}-byte "
                           "aligned")
    return array.reshape(-1).view(np.uint8), buffer


def _release_held(held: list) -> None:
    while held:
        held.pop().release()


_CALLER_REGIONS: list[tuple[weakref.ref, int, int, threading.RLock]] = []
_CALLER_LOCK = threading.Lock()


def _region_lock(layout: _Layout, region: np.ndarray) -> threading.RLock:
    """The run lock for a caller's internal region: shared with every session whose internal
    region overlaps it (RKNN lets contexts share internal memory and leaves the races to the
    user; here their runs are serialized)."""
    start, end = region.ctypes.data, region.ctypes.data + region.nbytes
    with _CALLER_LOCK:
        _CALLER_REGIONS[:] = [e for e in _CALLER_REGIONS if e[0]() not in (None, layout)]
        locks = {id(e[3]): e[3] for e in _CALLER_REGIONS if e[1] < end and start < e[2]}
        if len(locks) > 1:
            raise BindingError("set_internal_memory(): the region overlaps the internal memory of "
                               "sessions that do not share memory with each other; give it "
                               "exactly one of their regions")
        lock = next(iter(locks.values())) if locks else threading.RLock()
        _CALLER_REGIONS.append((weakref.ref(layout), start, end, lock))
    return lock


class _Layout:
    """Programs laid out one after another at 64-byte aligned offsets in a caller's region."""

    def __init__(self, what: str, setter: str):
        self.what, self.setter = what, setter
        self.offsets: dict[int, tuple[int, int]] = {}  # id(program) -> (offset, nbytes)
        self.end = 0
        self.region: np.ndarray | None = None
        self.owner: Any = None  # keeps the caller's memory alive
        self.lock = threading.RLock()  # runs using the region (shared when regions overlap)
        self._held: list[DeviceBuffer] = []  # a caller's DeviceBuffer, retained while used
        weakref.finalize(self, _release_held, self._held)

    def add(self, program: Program, nbytes: int) -> None:
        if id(program) not in self.offsets:
            self.offsets[id(program)] = (self.end, nbytes)
            self.end += block_bytes(nbytes)

    def slice(self, program: Program) -> np.ndarray:
        """This Program's part of the caller's region; BindingError naming the bytes needed."""
        if self.region is None or self.region.nbytes < self.end:
            got = "none was set" if self.region is None else f"got {self.region.nbytes} bytes"
            raise BindingError(f"mem_alloc_outside: {self.what} memory of at least {self.end} "
                               f"bytes is needed ({got}); call sess.{self.setter}(buffer)")
        offset, nbytes = self.offsets[id(program)]
        return self.region[offset:offset + nbytes]

    def set(self, buffer: Any, *, shared_lock: bool = False) -> np.ndarray:
        """Use the caller's `buffer` from now on (retained if a DeviceBuffer)."""
        region, owner = caller_region(buffer, f"{self.setter}()")
        if region.nbytes < self.end:
            raise BindingError(f"{self.setter}(): {self.what} memory of {region.nbytes} bytes is "
                               f"too small; the session needs {self.end} bytes")
        lock = _region_lock(self, region) if shared_lock else self.lock
        with self.lock:  # not while a run uses the previous region
            if isinstance(owner, DeviceBuffer):
                owner.retain()
            _release_held(self._held)
            if isinstance(owner, DeviceBuffer):
                self._held.append(owner)
            self.region, self.owner, self.lock = region, owner, lock
        return region


# ---- per session ------------------------------------------------------------------------------

class _Weights:
    """The weights of one Program, shared by a session and its clones (refcounted)."""

    def __init__(self, program: Program, family: _Family, per_shape: bool):
        self.refs = 0
        self.keys: list = []
        self.store: WeightStore | None = None
        self.region: _Region | None = None
        self.per_slot: dict[int, np.ndarray] | None = None
        if family.options.memory.mem_alloc_outside:
            return  # placed in the caller's region (family.weight_layout)
        if family.options.memory.share_weights:
            self.store = _STORE
        elif per_shape:  # the Programs of one partition's input shapes hold the same tensors
            self.store = family.store
        if self.store is not None:
            self.per_slot, self.keys = self.store.acquire(program, family.pool)
        else:
            self.region = _weight_region(program, program.weights_array(), family.pool,
                                         weights_are_mapped(program))

    def device_bytes(self) -> int:
        """Pool bytes of this Program's weights (shared tensors counted in full)."""
        if self.store is not None:
            return self.store.device_bytes(self.keys)
        return self.region.device if self.region is not None else 0

    def free(self) -> None:
        if self.store is not None and self.keys:
            self.store.release(self.keys)
            self.keys = []
        if self.region is not None:
            self.region.release()


class _Family:
    """What a session shares with its clones: Programs by (partition, shapes) and their weights."""

    def __init__(self, options: Any, pool: DevicePool):
        self.options = options
        self.pool = pool
        self.lock = threading.RLock()
        self.programs: dict[tuple[str, tuple], Program] = {}
        self.weights: dict[int, _Weights] = {}
        self.store = WeightStore()  # tensors shared by the shapes of dynamic partitions
        self.weight_layout = _Layout("weight", "set_weight_memory")

    def program(self, partition: str, key: tuple, make: Callable[[], Program]) -> Program:
        with self.lock:
            program = self.programs.get((partition, key))
            if program is None:
                program = self.programs[(partition, key)] = make()
                if self.options.memory.mem_alloc_outside:
                    self.weight_layout.add(program, program.weight_bytes)
                    if self.weight_layout.region is not None:
                        self._fill(program)
            return program

    def acquire(self, program: Program, per_shape: bool) -> _Weights:
        with self.lock:
            weights = self.weights.get(id(program))
            if weights is None:
                weights = self.weights[id(program)] = _Weights(program, self, per_shape)
            weights.refs += 1
            return weights

    def release(self, program: Program) -> None:
        """Drop one user of `program`; with none left (evicted by every session of the
        family) its weights are freed and a later need compiles it again."""
        with self.lock:
            weights = self.weights[id(program)]
            weights.refs -= 1
            if weights.refs == 0:
                del self.weights[id(program)]
                weights.free()
                if not self.options.memory.mem_alloc_outside:  # caller memory keeps its layout
                    self.programs = {k: p for k, p in self.programs.items() if p is not program}

    def set_weight_memory(self, buffer: Any) -> None:
        with self.lock:
            self.weight_layout.set(buffer)
            for program in self.programs.values():
                self._fill(program)

    def _fill(self, program: Program) -> None:
        """Copy a Program's blob into its part of the caller's weight region (if it fits)."""
        layout = self.weight_layout
        offset, nbytes = layout.offsets[id(program)]
        if layout.region is not None and offset + nbytes <= layout.region.nbytes:
            layout.region[offset:offset + nbytes] = program.weights_array()


class ManagedExecutor:
    """A Program's Executor with its memory placed by the session's memory controls.

    Same surface as `Executor` for the fused kernel (program, names, run, copy_stats, close).
    The inner Executor is (re)built under the run lock when first needed and
    after its group's arena moved or caller memory was set.
    """

    def __init__(self, memory: SessionMemory, program: Program, partition: str,
                 per_shape: bool):
        self.memory = memory
        self.program = program
        self.copy_stats = CopyStats()
        self._inner: Executor | None = None
        self._built_for: tuple = ()
        self._closed = False
        options = memory.family.options
        self._group: ArenaGroup | None = None
        if options.memory.internal_memory_group:
            self._group = _group(options.memory.internal_memory_group, memory.pool)
        elif not options.memory.mem_alloc_outside:
            self._group = memory.partition_group(partition)
        self._lock = self._group.lock if self._group is not None else threading.RLock()
        self._weights = memory.family.acquire(program, per_shape)
        try:
            if self._group is None:
                memory.internal_layout.add(program, program.internal_bytes)
            else:
                self._group.join(program.internal_bytes)
        except BaseException:
            memory.family.release(program)
            raise

    @property
    def input_names(self) -> list[str]:
        return self.program.input_names

    @property
    def output_names(self) -> list[str]:
        return self.program.output_names

    def _memory(self) -> tuple[Any, np.ndarray, tuple]:
        """(weights, arena, what they are) for the inner Executor; BindingError if missing."""
        family = self.memory.family
        if family.options.memory.mem_alloc_outside:
            weights = family.weight_layout.slice(self.program)
            arena = self.memory.internal_layout.slice(self.program)
            return weights, arena, (id(family.weight_layout.region),
                                    id(self.memory.internal_layout.region))
        w = self._weights
        weights = w.per_slot if w.per_slot is not None else w.region.array
        return weights, self._group.region.array, (self._group.generation,)

    def _ready(self) -> Executor:
        if self._closed:
            raise LitenpuError(f"executor of program {self.program.name!r} is closed")
        weights, arena, tag = self._memory()
        if self._inner is None or tag != self._built_for:
            if self._inner is not None:
                self._inner.close()
            self._inner = Executor(self.program, self.memory.pool, weights=weights, arena=arena,
                                   lock=threading.Lock(),
                                   cores=self.memory.family.options.runtime.npu_threads)
            self._built_for = tag
        return self._inner

    def check_ready(self) -> None:
        """BindingError (stating the bytes needed) when caller-owned memory is missing."""
        self._memory()

    def run(self, inputs: Sequence, outputs: Sequence | None = None) -> list[np.ndarray]:
        """Run the Program (serialized with its group, or with every session whose caller-owned
        internal memory overlaps this one's)."""
        outside = self.memory.family.options.memory.mem_alloc_outside
        with self.memory.internal_layout.lock if outside else self._lock:
            inner = self._ready()
            results = inner.run(inputs, outputs)
            self.copy_stats = inner.copy_stats
        return results

    @property
    def staging_bytes(self) -> int:
        """Pool bytes of the inner Executor's I/O staging buffers."""
        inner = self._inner
        return 0 if inner is None else sum(block_bytes(v.nbytes) for v in inner._staging.values())

    def close(self) -> None:
        """Release the arena (or group membership), the weights reference and staging."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._inner is not None:
                self._inner.close()
                self._inner = None
        if self._group is not None:
            self._group.leave(self.program.internal_bytes)
        self.memory.family.release(self.program)
        self.memory.forget(self)


class SessionMemory:
    """The memory controls of one session (one NpuEp): its executors and caller regions."""

    def __init__(self, options: Any, family: _Family | None = None,
                 pool: DevicePool | None = None):
        self.pool = pool if pool is not None else default_pool()
        self.family = family if family is not None else _Family(options, self.pool)
        self.internal_layout = _Layout("internal", "set_internal_memory")
        self.executors: list[ManagedExecutor] = []
        self.groups: dict[str, ArenaGroup] = {}  # each partition's private arena
        self._lock = threading.Lock()

    def partition_group(self, partition: str) -> ArenaGroup:
        """The arena shared by the Programs of `partition`'s input shapes in this session."""
        with self._lock:
            group = self.groups.get(partition)
            if group is None:
                group = self.groups[partition] = ArenaGroup(partition, self.pool, shared=False)
            return group

    def executor(self, partition: str, key: tuple, make: Callable[[], Program], *,
                 per_shape: bool = False) -> ManagedExecutor:
        """The executor of `partition` at input shapes `key`: the family's Program (compiled
        by `make` only if no clone relative has it yet), memory placed per the options.
        `per_shape`: the partition gets a Program per input shape, whose weights are stored
        once for all of them."""
        program = self.family.program(partition, key, make)
        executor = ManagedExecutor(self, program, partition, per_shape)
        with self._lock:
            self.executors.append(executor)
        return executor

    def forget(self, executor: ManagedExecutor) -> None:
        with self._lock:
            if executor in self.executors:
                self.executors.remove(executor)

    def set_weight_memory(self, buffer: Any) -> None:
        self._outside("set_weight_memory")
        self.family.set_weight_memory(buffer)

    def set_internal_memory(self, buffer: Any) -> None:
        self._outside("set_internal_memory")
        self.internal_layout.set(buffer, shared_lock=True)

    def _outside(self, method: str) -> None:
        if not self.family.options.memory.mem_alloc_outside:
            raise BindingError(f"{method}() needs the provider option mem_alloc_outside=1")

    def check_ready(self) -> None:
        """BindingError (stating the bytes needed) before a run that would lack caller memory."""
        with self._lock:
            executors = list(self.executors)
        for executor in executors:
            executor.check_ready()

    def info(self) -> SessionMemoryInfo:
        """This session's memory (see SessionMemoryInfo)."""
        with self._lock:
            executors = list(self.executors)
        programs = [e.program for e in executors]
        outside = self.family.options.memory.mem_alloc_outside
        weights = sum(block_bytes(p.weight_bytes) for p in programs)
        internal = sum(block_bytes(p.internal_bytes) for p in programs)
        io = sum(p.io_bytes for p in programs)
        distinct = {id(e._weights): e._weights for e in executors}.values()
        stores: dict[int, tuple[WeightStore, list]] = {}
        for w in distinct:
            if w.store is not None:
                stores.setdefault(id(w.store), (w.store, []))[1].extend(w.keys)
        device_weights = sum(store.device_bytes(keys) for store, keys in stores.values()) + \
            sum(w.region.device for w in distinct if w.region is not None)
        groups = {id(e._group): e._group for e in executors if e._group is not None}
        device_internal = sum(g.region.device for g in groups.values())
        staging = sum(e.staging_bytes for e in executors)
        if outside:
            device_weights = device_internal = 0
        return SessionMemoryInfo(weights, internal, io, weights + internal + io, device_weights,
                                 device_internal, staging, self.pool.stats().in_use)


_SESSIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SESSIONS_LOCK = threading.Lock()
_CLONING = threading.local()


def session_memory(ep: Any) -> SessionMemory:
    """The SessionMemory of an NpuEp (created on first use; a clone's joins its source family)."""
    with _SESSIONS_LOCK:
        memory = _SESSIONS.get(ep)
        if memory is None:
            family = getattr(_CLONING, "family", None)
            memory = _SESSIONS[ep] = SessionMemory(ep.options, family)
        return memory


def find_session_memory(ep: Any) -> SessionMemory | None:
    """The SessionMemory of an NpuEp if it has NPU partitions, else None."""
    with _SESSIONS_LOCK:
        return _SESSIONS.get(ep)


@contextmanager
def cloning(memory: SessionMemory) -> Iterator[None]:
    """While the block runs, NpuEps created on this thread share `memory`'s family."""
    _CLONING.family = memory.family
    try:
        yield
    finally:
        _CLONING.family = None


def merge_infos(infos: Sequence[SessionMemoryInfo], pool_in_use: int) -> SessionMemoryInfo:
    """Sum of several EPs' infos (a session has one NpuEp; zeros without NPU partitions)."""
    fields = [sum(getattr(i, name) for i in infos) for name in
              ("weights", "internal", "io", "total", "device_weights", "device_internal",
               "device_staging")]
    return SessionMemoryInfo(*fields, pool_in_use)



# ---- session-level entry points (used by provider.session.InferenceSession) ------------------

def _memories(eps: Sequence[Any]) -> list[SessionMemory]:
    return [m for m in (find_session_memory(ep) for ep in eps) if m is not None]


def session_info(eps: Sequence[Any]) -> SessionMemoryInfo:
    """The memory of a session's NpuEps (zeros when nothing runs on the NPU)."""
    infos = [m.info() for m in _memories(eps)]
    return merge_infos(infos, default_pool().stats().in_use)


def set_caller_memory(eps: Sequence[Any], kind: str, buffer: Any) -> None:
    """Hand the caller's weight or internal memory to a mem_alloc_outside session."""
    memories = _memories(eps)
    for ep in eps:
        if not ep.options.memory.mem_alloc_outside:
            raise BindingError(f"set_{kind}_memory() needs the provider option mem_alloc_outside=1")
    for memory in memories:
        (memory.set_weight_memory if kind == "weight" else memory.set_internal_memory)(buffer)


def check_ready(eps: Sequence[Any]) -> None:
    """Before a run: BindingError stating the bytes needed if caller memory is missing."""
    for memory in _memories(eps):
        if memory.family.options.memory.mem_alloc_outside:
            memory.check_ready()


def clone_session(eps: Sequence[Any], make: Callable[[], Any]) -> Any:
    """`make()` a session whose NPU kernels reuse the Programs and weights of `eps`' session."""
    memories = _memories(eps)
    if not memories:
        return make()
    with cloning(memories[0]):
        return make()
