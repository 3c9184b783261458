"""Program weights in device memory: regions, the content-keyed weight store, refcounted use.

A Program's weights are one 64-byte aligned blob (`Program.weights_array()`). `ProgramWeights`
places them once for every session that runs the Program (a session and its clones share
it, refcounted): read in place when the blob is a mapped cache file (no device bytes), else
copied into one pool block; or, from a `WeightStore`, one region per weight *slot* keyed by
(the first 16 bytes of its SHA-256, size), so that identical tensors are stored once however many
Programs hold them. The process-wide store serves `share_weights=1` (other models, other
input shapes); a session's own store serves the Programs of one dynamic partition's shapes,
whose compiled weights are the same tensors. A mapped Program's slots are stored as views
of its mapping (never copied into the pool).
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from provider.npu.executor import weights_are_mapped
from provider.npu.memory import ALIGNMENT, DeviceBuffer, DevicePool
from provider.npu.program import Program

__all__ = ["block_bytes", "Region", "allocate", "WeightStore", "weight_store", "ProgramWeights",
           "device_weight_bytes"]


def block_bytes(nbytes: int) -> int:
    """Pool bytes a region of `nbytes` takes (0 for none: nothing is allocated)."""
    return 0 if nbytes <= 0 else (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass
class Region:
    """A flat uint8 region and what keeps it alive (a pool buffer to release, or any owner).
    `in_pool`: pool memory owned by `owner` (a Program compiled into device memory)."""

    array: np.ndarray
    buffer: DeviceBuffer | None = None
    owner: Any = None
    in_pool: bool = False

    @property
    def device(self) -> int:
        """Pool bytes it takes (0 when it is not pool memory)."""
        return block_bytes(self.array.nbytes) if self.buffer is not None or self.in_pool else 0

    def release(self) -> None:
        if self.buffer is not None:
            self.buffer.release()
            self.buffer = None


def allocate(pool: DevicePool, nbytes: int) -> Region:
    """A fresh pool block of `nbytes` (no block at all for 0)."""
    if nbytes <= 0:
        return Region(np.zeros(0, np.uint8))
    buffer = pool.allocate(nbytes)
    return Region(buffer.view(), buffer)


def _weight_region(program: Program, data: np.ndarray, pool: DevicePool, mapped: bool) -> Region:
    """`data` (part of `program`'s blob): read in place when the blob is mapped or already
    device memory (compiled into the pool), else copied into a pool block."""
    if data.nbytes and pool.contains(data.ctypes.data, data.nbytes):
        return Region(data, owner=program, in_pool=True)  # (the pool is a mapping too)
    if mapped:
        return Region(data, owner=program.weights)
    region = allocate(pool, data.nbytes)
    region.array[:] = data
    return region


_HASHES: dict[int, dict[int, tuple[bytes, int]]] = {}
_HASHES_LOCK = threading.Lock()


def _slot_keys(program: Program) -> dict[int, tuple[bytes, int]]:
    """Weight slot index -> (16 bytes of SHA-256 of its bytes, size), once per Program
    object (SHA-256: hashed in hardware by current CPUs, ~4x faster than BLAKE2b here)."""
    with _HASHES_LOCK:
        keys = _HASHES.get(id(program))
    if keys is None:
        blob = program.weights_array()
        keys = {i: (hashlib.sha256(blob[s.offset:s.offset + s.nbytes]).digest()[:16], s.nbytes)
                for i, s in enumerate(program.slots) if s.kind == "weight"}
        with _HASHES_LOCK:
            if id(program) not in _HASHES:
                _HASHES[id(program)] = keys
                weakref.finalize(program, _HASHES.pop, id(program), None)
    return keys


class WeightStore:
    """Weight tensors stored once per content hash and refcounted per use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[bytes, int], list] = {}  # key -> [refs, Region]

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


_PROCESS_STORE = WeightStore()


def weight_store() -> WeightStore:
    """The process's shared weight store (`share_weights=1`)."""
    return _PROCESS_STORE


class ProgramWeights:
    """The weights of one Program in device memory, shared by its users (refcounted by the
    session family that owns it): one region, or per-slot regions from `store`."""

    def __init__(self, program: Program, pool: DevicePool, store: WeightStore | None):
        self.refs = 0
        self.store = store
        self.keys: list = []
        self.region: Region | None = None
        self.per_slot: dict[int, np.ndarray] | None = None
        if store is not None:
            self.per_slot, self.keys = store.acquire(program, pool)
        else:
            self.region = _weight_region(program, program.weights_array(), pool,
                                         weights_are_mapped(program))

    @property
    def for_executor(self) -> np.ndarray | dict[int, np.ndarray]:
        """What `Executor(weights=...)` takes: the blob's region or the per-slot regions."""
        return self.per_slot if self.per_slot is not None else self.region.array

    def free(self) -> None:
        if self.store is not None and self.keys:
            self.store.release(self.keys)
            self.keys = []
        if self.region is not None:
            self.region.release()


def device_weight_bytes(weights: Sequence[ProgramWeights]) -> int:
    """Pool bytes of these Programs' weights, each shared tensor counted once."""
    by_store: dict[int, tuple[WeightStore, list]] = {}
    total = 0
    for w in {id(w): w for w in weights}.values():
        if w.store is not None:
            by_store.setdefault(id(w.store), (w.store, []))[1].extend(w.keys)
        elif w.region is not None:
            total += w.region.device
    return total + sum(store.device_bytes(keys) for store, keys in by_store.values())
