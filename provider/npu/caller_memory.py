"""Caller-owned device memory (`mem_alloc_outside=1`, RKNN's RKNN_FLAG_MEM_ALLOC_OUTSIDE).

Nothing is allocated for weights or arenas: the caller hands over regions
(`set_weight_memory` / `set_internal_memory`), which a `CallerLayout` lays out as each
Program's blob / arena at 64-byte aligned offsets in Program order. A region is a numpy array
over device memory (what `provider.view` gives for an NPU OrtValue) or a `DeviceBuffer`
(retained while used). Sessions given overlapping internal regions (RKNN's way to share
internal memory) share one run lock (and, with the native library, one lock-only
`native.ArenaSet` that their native runs take turns on), so their runs cannot interleave.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from provider.errors import BindingError
from provider.npu import native
from provider.npu.memory import ALIGNMENT, DeviceBuffer, DevicePool
from provider.npu.program import Program
from provider.npu.weights import block_bytes

__all__ = ["caller_region", "CallerLayout"]


def caller_region(buffer: Any, what: str) -> tuple[np.ndarray, Any]:
    """A writable flat uint8 view of a caller's memory and the object keeping it alive:
    a `DeviceBuffer` (e.g. `DevicePool.import_fd`) or a C-contiguous 64-byte aligned array."""
    if isinstance(buffer, DeviceBuffer):
        array = buffer.view()
    elif isinstance(buffer, np.ndarray):
        array = buffer
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


class Turns:
    """One run at a time over a caller's internal memory: a lock for Python runs and, with the
    native library, a lock-only arena set for native runs."""

    def __init__(self, pool: DevicePool):
        self.lock = threading.RLock()
        self.arenas = native.ArenaSet(None) if pool.heap is not None else None


_REGIONS: list[tuple[weakref.ref, int, int, Turns]] = []
_REGIONS_LOCK = threading.Lock()


def _region_turns(layout: CallerLayout, region: np.ndarray) -> Turns:
    """The turns of a caller's internal region: shared with every session whose internal
    region overlaps it (RKNN lets contexts share internal memory and leaves the races to the
    user; here their runs are serialized)."""
    start, end = region.ctypes.data, region.ctypes.data + region.nbytes
    with _REGIONS_LOCK:
        _REGIONS[:] = [e for e in _REGIONS if e[0]() not in (None, layout)]
        found = {id(e[3]): e[3] for e in _REGIONS if e[1] < end and start < e[2]}
        if len(found) > 1:
            raise BindingError("set_internal_memory(): the region overlaps the internal memory of "
                               "sessions that do not share memory with each other; give it "
                               "exactly one of their regions")
        turns = next(iter(found.values())) if found else Turns(layout.pool)
        _REGIONS.append((weakref.ref(layout), start, end, turns))
    return turns


class CallerLayout:
    """Programs laid out one after another at 64-byte aligned offsets in a caller's region."""

    def __init__(self, what: str, setter: str, pool: DevicePool, *, shared_lock: bool = False):
        self.what, self.setter = what, setter
        self.pool = pool
        self.shared_lock = shared_lock  # overlapping regions of sessions share the run lock
        self.offsets: dict[int, tuple[int, int]] = {}  # id(program) -> (offset, nbytes)
        self.end = 0
        self.region: np.ndarray | None = None
        self.owner: Any = None  # keeps the caller's memory alive
        self.turns = Turns(pool)  # runs using the region (shared when regions overlap)
        self._held: list[DeviceBuffer] = []  # a caller's DeviceBuffer, retained while used
        native.until_exit(weakref.finalize(self, _release_held, self._held))

    def add(self, program: Program, nbytes: int) -> None:
        """Give `program` the next `nbytes` of the layout (once)."""
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

    def set(self, buffer: Any) -> np.ndarray:
        """Use the caller's `buffer` from now on (retained if a DeviceBuffer)."""
        region, owner = caller_region(buffer, f"{self.setter}()")
        if region.nbytes < self.end:
            raise BindingError(f"{self.setter}(): {self.what} memory of {region.nbytes} bytes is "
                               f"too small; the session needs {self.end} bytes")
        turns = _region_turns(self, region) if self.shared_lock else self.turns
        with self.lock:  # not while a Python run uses the previous region
            if isinstance(owner, DeviceBuffer):
                owner.retain()
            _release_held(self._held)
            if isinstance(owner, DeviceBuffer):
                self._held.append(owner)
            self.region, self.owner, self.turns = region, owner, turns
        return region

    @property
    def lock(self) -> threading.RLock:
        """The lock of Python runs over the region (shared when regions overlap)."""
        return self.turns.lock
