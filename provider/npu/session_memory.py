"""The device memory of one session: where its Programs' weights and arenas live.

RKNN exposes these as manual knobs (RKNN_QUERY_MEM_SIZE, RKNN_FLAG_MEM_ALLOC_OUTSIDE,
rknn_set_internal_mem shared by hand, rknn_dup_context, master/slave weight sharing); here
they are `MemoryOptions` and session methods, and the unsafe parts are done for the user.
Each option picks a policy once, when the session's `SessionMemory` is made:

- weights (`provider.npu.weights.ProgramWeights`): per Program, held by the session's
  `Family` (the session and all its clones), refcounted, so clones never copy them. In one
  pool block (or read in place from a mapped cache file); `share_weights=1`: per tensor in
  the process-wide store; a dynamic partition's per-shape Programs compiled in memory: per
  tensor in the family's store (their compiled weights are the same tensors; those mapped
  from the cache are read in place, as hashing them would read every page); `mem_alloc_outside=1`: in
  the caller's weight region (`provider.npu.caller_memory`), copied there once.
- arenas (`provider.npu.arenas.ArenaGroup`): per partition, arenas shared by the Programs of
  its input shapes, sized to the largest live one, one per run in progress (at most
  `concurrent_runs`; with the native library); `internal_memory_group=<name>`: one arena
  shared with every session of the group, runs take turns; `mem_alloc_outside=1`: the
  caller's internal region, laid out per Program, runs take turns.

`ManagedExecutor` is a Program's Executor with its memory so placed: the inner Executor is
(re)built when first needed and after its arena moved or caller memory was set (with the
native library: as soon as that happens, and its plan installed in the `runner` that the
onnxruntime kernel runs without Python). `SessionMemoryInfo` is exact: the Programs' sizes
and the pool blocks (64-byte multiples, as `DevicePool.stats()` counts them) the session holds.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from provider.errors import BindingError, LitenpuError
from provider.npu import native
from provider.npu.arenas import ArenaGroup, named_group
from provider.npu.caller_memory import CallerLayout
from provider.npu.executor import CopyStats, Executor, weights_are_mapped
from provider.npu.memory import DeviceBuffer, DevicePool, default_pool
from provider.npu.program import Program
from provider.npu.weights import (
    ProgramWeights,
    WeightStore,
    block_bytes,
    device_weight_bytes,
    weight_store,
)
from provider.options import NpuOptions

__all__ = ["SessionMemoryInfo", "Family", "SessionMemory", "ManagedExecutor", "merge_infos"]


@dataclass(frozen=True)
class SessionMemoryInfo:
    """A session's NPU memory, like RKNN_QUERY_MEM_SIZE (all in bytes).

    `weights` / `internal` are what `set_weight_memory` / `set_internal_memory` need (the
    Programs' blobs / arenas laid out 64-byte aligned); `io` is the graph I/O of the Programs;
    `total = weights + internal + io`. The `device_*` fields are pool bytes this session holds
    now: weight blocks (shared ones included), arena blocks (its group's whole arena, and one
    more per partition for each run that ran concurrently with another: `arenas` counts them,
    at most `concurrent_runs` per partition), I/O staging (per arena); `pool_in_use` is the
    whole pool's current use.
    """

    weights: int
    internal: int
    io: int
    total: int
    device_weights: int
    device_internal: int
    device_staging: int
    pool_in_use: int
    arenas: int = 0

    @property
    def device_total(self) -> int:
        """Pool bytes this session holds."""
        return self.device_weights + self.device_internal + self.device_staging


def merge_infos(infos: Sequence[SessionMemoryInfo], pool_in_use: int) -> SessionMemoryInfo:
    """Sum of several EPs' infos (a session has one NpuEp; zeros without NPU partitions)."""
    fields = {name: sum(getattr(i, name) for i in infos) for name in
              ("weights", "internal", "io", "total", "device_weights", "device_internal",
               "device_staging", "arenas")}
    return SessionMemoryInfo(**fields, pool_in_use=pool_in_use)


class Family:
    """What a session shares with its clones: Programs by (partition, shapes) and their weights."""

    def __init__(self, options: NpuOptions, pool: DevicePool):
        self.options = options
        self.pool = pool
        self.caller = options.memory.mem_alloc_outside
        self.lock = threading.RLock()
        self.programs: dict[tuple[str, tuple], Program] = {}
        self.weights: dict[int, ProgramWeights] = {}
        self.store = WeightStore()  # tensors shared by the shapes of dynamic partitions
        self.weight_layout = CallerLayout("weight", "set_weight_memory", pool)
        self.executors: weakref.WeakSet[ManagedExecutor] = weakref.WeakSet()  # of every session

    def program(self, partition: str, key: tuple, make: Callable[[], Program]) -> Program:
        """The Program of `partition` at input shapes `key` (made by `make` on first need)."""
        with self.lock:
            program = self.programs.get((partition, key))
            if program is None:
                program = self.programs[(partition, key)] = make()
                if self.caller:
                    self.weight_layout.add(program, program.weight_bytes)
                    if self.weight_layout.region is not None:
                        self._fill(program)
            return program

    def acquire(self, program: Program, per_shape: bool) -> ProgramWeights | None:
        """One more user of `program`'s weights (None: they live in the caller's region)."""
        if self.caller:
            return None
        with self.lock:
            weights = self.weights.get(id(program))
            if weights is None:
                # a dynamic partition's Programs share their tensors, unless mapped from
                # the cache: those are read in place (hashing them would read every page)
                store = weight_store() if self.options.memory.share_weights else \
                    self.store if per_shape and not weights_are_mapped(program) else None
                weights = self.weights[id(program)] = ProgramWeights(program, self.pool, store)
            weights.refs += 1
            return weights

    def release(self, program: Program) -> None:
        """Drop one user of `program`; with none left (evicted by every session of the
        family) its weights are freed and a later need compiles it again."""
        if self.caller:
            return  # caller memory keeps its layout
        with self.lock:
            weights = self.weights[id(program)]
            weights.refs -= 1
            if weights.refs == 0:
                del self.weights[id(program)]
                weights.free()
                self.programs = {k: p for k, p in self.programs.items() if p is not program}

    def weights_for(self, program: Program, weights: ProgramWeights | None) -> tuple[Any, int]:
        """(what the Executor takes as weights, what they are: changes when they move)."""
        if weights is not None:
            return weights.for_executor, 0
        return self.weight_layout.slice(program), id(self.weight_layout.region)

    def set_weight_memory(self, buffer: Any) -> None:
        with self.lock:
            self.weight_layout.set(buffer)
            for program in self.programs.values():
                self._fill(program)
        for executor in list(self.executors):
            executor.refresh()

    def _fill(self, program: Program) -> None:
        """Copy a Program's blob into its part of the caller's weight region (if it fits)."""
        layout = self.weight_layout
        offset, nbytes = layout.offsets[id(program)]
        if layout.region is not None and offset + nbytes <= layout.region.nbytes:
            layout.region[offset:offset + nbytes] = program.weights_array()


class _GroupArena:
    """A Program's place in an ArenaGroup (its partition's, or a named group)."""

    def __init__(self, group: ArenaGroup, nbytes: int):
        group.join(nbytes)
        self.group, self.nbytes = group, nbytes

    @property
    def lock(self) -> threading.RLock:
        return self.group.lock

    def placement(self, program: Program) -> tuple[dict[str, Any], int]:
        """(the Executor's arena arguments, what they are: changes when they move)."""
        if self.group.arenas is not None:
            return {"arenas": self.group.arenas}, 0  # the set follows its own resizes
        return {"arena": self.group.region.array}, self.group.generation

    def release(self) -> None:
        self.group.leave(self.nbytes)


class _CallerArena:
    """A Program's part of the caller's internal region."""

    def __init__(self, layout: CallerLayout, program: Program):
        layout.add(program, program.internal_bytes)
        self.layout = layout

    @property
    def lock(self) -> threading.RLock:
        return self.layout.lock  # shared with sessions whose regions overlap, once set

    def placement(self, program: Program) -> tuple[dict[str, Any], int]:
        arena = self.layout.slice(program)
        turns = self.layout.turns.arenas
        return ({"arena": arena} if turns is None else {"arena": arena, "arenas": turns},
                id(self.layout.region))

    def release(self) -> None:
        """The layout keeps the Program's offsets (the caller sized the region by them)."""


class ManagedExecutor:
    """A Program's Executor with its memory placed by the session's memory policy.

    Same surface as `Executor` for the fused kernel (program, names, run, copy_stats, close),
    plus `runner` (with the native library): the plan of the current inner Executor, None
    while caller memory is missing.
    """

    def __init__(self, memory: SessionMemory, program: Program, partition: str,
                 per_shape: bool):
        self.memory = memory
        self.program = program
        self.copy_stats = CopyStats()
        self._inner: Executor | None = None
        self._built_for: tuple = ()
        self._closed = False
        self._build_lock = threading.RLock()
        self.runner = native.Runner() if memory.pool.heap is not None else None
        self._weights = memory.family.acquire(program, per_shape)
        try:
            self._arena = memory.arena(program, partition)
        except BaseException:
            memory.family.release(program)
            raise
        memory.family.executors.add(self)
        self.refresh()

    @property
    def input_names(self) -> list[str]:
        return self.program.input_names

    @property
    def output_names(self) -> list[str]:
        return self.program.output_names

    def _ready(self) -> Executor:
        """The inner Executor over the current weights and arena (BindingError naming the
        bytes needed when caller memory is missing); build lock held."""
        if self._closed:
            raise LitenpuError(f"executor of program {self.program.name!r} is closed")
        weights, weights_tag = self.memory.family.weights_for(self.program, self._weights)
        arena, arena_tag = self._arena.placement(self.program)
        tag = (weights_tag, arena_tag)
        if self._inner is None or tag != self._built_for:
            # the family's Programs come from compile_model or program.load: checked there
            inner = Executor(self.program, self.memory.pool, weights=weights,
                             lock=threading.Lock(), cores=self.memory.options.runtime.cores(),
                             validated=True, **arena)
            self._install(inner)
            self._built_for = tag
        return self._inner

    def _install(self, inner: Executor | None) -> None:
        """Run `inner` from now on; the previous Executor closes once its runs are done."""
        old, self._inner = self._inner, inner
        if self.runner is not None:
            self.runner.set(None if inner is None else inner.plan)
        if old is not None:
            old.close()

    def refresh(self) -> None:
        """With the native library: rebuild the inner Executor now if its memory moved, so the
        onnxruntime kernel's next run uses it (nothing while caller memory is missing)."""
        if self.runner is None:
            return
        with self._build_lock:
            if self._closed:
                return
            try:
                self._ready()
            except BindingError:
                self._install(None)  # runs go through Python, which says what is missing

    def check_ready(self) -> None:
        """BindingError (stating the bytes needed) when caller-owned memory is missing."""
        self.memory.family.weights_for(self.program, self._weights)
        self._arena.placement(self.program)

    def run(self, inputs: Sequence, outputs: Sequence | None = None, *,
            cores: int | None = None, stamps: np.ndarray | None = None) -> list[np.ndarray]:
        """Run the Program (on at most `cores` NPU cores; default: the session's
        `npu_threads`; each step's start and end into `stamps` when given): a native plan
        takes its own turn (its arena); without the native library runs are serialized with
        the other users of the arena."""
        lock = self._build_lock if self.runner is not None else self._arena.lock
        with lock:
            inner = self._ready()
            results = inner.run(inputs, outputs, cores=cores, stamps=stamps)
            self.copy_stats = inner.copy_stats
        return results

    @property
    def staging_bytes(self) -> int:
        """Pool bytes of the inner Executor's I/O staging buffers."""
        inner = self._inner
        return 0 if inner is None else inner.staging_device_bytes

    def close(self) -> None:
        """Release the arena place, the weights reference and staging."""
        with self._arena.lock, self._build_lock:
            if self._closed:
                return
            self._closed = True
            self._install(None)
        self._arena.release()
        self.memory.family.release(self.program)
        self.memory.family.executors.discard(self)
        self.memory.forget(self)


class SessionMemory:
    """The device memory of one session (one NpuEp): its executors, arenas, caller regions."""

    def __init__(self, options: NpuOptions, family: Family | None = None,
                 pool: DevicePool | None = None):
        self.options = options
        self.pool = pool if pool is not None else default_pool()
        self.family = family if family is not None else Family(options, self.pool)
        self.caller = options.memory.mem_alloc_outside
        self.internal_layout = CallerLayout("internal", "set_internal_memory", self.pool,
                                            shared_lock=True)
        self.executors: list[ManagedExecutor] = []
        self.groups: dict[str, ArenaGroup] = {}  # each partition's private arena
        self._lock = threading.Lock()

    def arena(self, program: Program, partition: str) -> _GroupArena | _CallerArena:
        """Where `program` (of `partition`) runs: its place in an arena, per the policy."""
        if self.caller:
            return _CallerArena(self.internal_layout, program)
        group = self.options.memory.internal_memory_group
        if group:
            return _GroupArena(named_group(group, self.pool), program.internal_bytes)
        with self._lock:
            private = self.groups.get(partition)
            if private is None:
                private = self.groups[partition] = ArenaGroup(
                    partition, self.pool, shared=False,
                    max_arenas=self.options.runtime.concurrent_runs or native.default_threads())
        return _GroupArena(private, program.internal_bytes)

    def weight_allocator(self, per_shape: bool) -> Callable[[int], DeviceBuffer] | None:
        """Where a Program compiled for this session packs its weights: the pool when its
        blob becomes the Program's one weight region; else the host (caller memory must be
        the only device memory the session takes; shared tensors are stored per slot)."""
        one_region = not (self.caller or per_shape or self.options.memory.share_weights)
        return self.pool.allocate if one_region else None

    def executor(self, partition: str, key: tuple, make: Callable[[], Program], *,
                 per_shape: bool = False) -> ManagedExecutor:
        """The executor of `partition` at input shapes `key`: the family's Program (compiled
        by `make` only if no clone relative has it yet), memory placed per the policy.
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
        self.internal_layout.set(buffer)
        with self._lock:
            executors = list(self.executors)
        for executor in executors:
            executor.refresh()

    def _outside(self, method: str) -> None:
        if not self.caller:
            raise BindingError(f"{method}() needs the provider option mem_alloc_outside=1")

    def check_ready(self) -> None:
        """BindingError (stating the bytes needed) before a run that would lack caller memory."""
        if not self.caller:
            return
        with self._lock:
            executors = list(self.executors)
        for executor in executors:
            executor.check_ready()

    def info(self) -> SessionMemoryInfo:
        """This session's memory (see SessionMemoryInfo)."""
        with self._lock:
            executors = list(self.executors)
        programs = [e.program for e in executors]
        weights = sum(block_bytes(p.weight_bytes) for p in programs)
        internal = sum(block_bytes(p.internal_bytes) for p in programs)
        io = sum(p.io_bytes for p in programs)
        staging = sum(e.staging_bytes for e in executors)
        device_weights = device_internal = arenas = 0
        if not self.caller:
            device_weights = device_weight_bytes([e._weights for e in executors])
            groups = {id(e._arena.group): e._arena.group for e in executors}
            device_internal = sum(g.device for g in groups.values())
            arenas = sum(g.held for g in groups.values())
        return SessionMemoryInfo(weights, internal, io, weights + internal + io, device_weights,
                                 device_internal, staging, self.pool.stats().in_use, arenas)
