"""Device memory of the reference NPU: one shared-memory pool per process.

The pool is a `memfd_create` file mapped MAP_SHARED (an anonymous mapping where memfd is
unavailable), with a capacity (default 1 GiB, the provider option `device_memory_bytes`)
that can grow (`grow`) within an address range reserved at creation, and committed lazily:
the file is sparse, so a page costs memory only once something writes it, and `trim()`
gives the pages of free blocks back (arena groups, as they shrink, keep
`ARENA_RETAINED_BYTES` of them: the next session's arena lands there without page faults).
Buffers are carved from it by a best-fit allocator with coalescing; every block is a
multiple of 64 bytes and 64-byte aligned. A buffer's numpy view *is* the device memory
(host-accessible, like RKNN's virt_addr), so a caller who fills a view has uploaded the
data with zero copies.

The books (which blocks are free, which are live, which external buffers count as device
memory) are the native library's heap when it is loaded (`native.Heap`): the data plane
allocates arenas, staging and onnxruntime's NPU tensors there without Python, and asks it
what is device memory. Without the library they are `provider.npu.heap.PyHeap`, the same
policy in Python. Blocks the data plane allocated have no DeviceBuffer of their own: `find`
returns a borrowed one (its release frees nothing).

Buffers can leave the process as (fd, offset, size), like dma-buf, and memory made
elsewhere can be imported from an fd (`import_fd`, cf. `rknn_create_mem_from_fd`) or by
wrapping an aligned host array without copying (`wrap`). Imported and wrapped buffers are
not pool memory (they do not count in `in_use`) but `contains`/`find` know them, so the
executor uses them in place.

Lifetimes are explicit: a buffer starts with one reference, `retain()` adds one,
`release()` drops one, and at zero its block returns to the pool. As with the C APIs this
imitates, numpy views taken from a buffer must not be used after its last release, and a
buffer never released stays allocated (the pool keeps it: `find(address)` still returns it).
All methods are thread-safe. After `fork()` the child's copy of each pool becomes private
to it (copy-on-write from the parent's contents, as the rest of its memory; its buffers no
longer export an fd), so sessions made before the fork run in both processes without
writing into each other's arenas, and the child gets a fresh default pool for what it
allocates next.

Over 400 lines on purpose: the pool, its allocator and the buffers it hands out (pool
blocks, imported fds, wrapped arrays) share one lock and one set of books.
"""

from __future__ import annotations

import logging
import math
import mmap
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from provider.errors import BindingError, DeviceMemoryError, LitenpuError, UnsupportedError
from provider.npu import native
from provider.npu.heap import PyHeap
from provider.npu.planner import align_up

__all__ = ["ALIGNMENT", "DEFAULT_CAPACITY", "PoolStats", "DeviceBuffer", "DevicePool", "default_pool",
           "ensure_default_pool"]

log = logging.getLogger("litenpu.npu")

ALIGNMENT = 64
DEFAULT_CAPACITY = 1 << 30
# Freed pages an arena group leaves committed when it shrinks (a closing session's arena):
# the next session's arena lands on them instead of faulting fresh zeroed pages in (2.5 ms
# of a warm MobileNetV2's first run at 64x64 was those faults). `trim()` frees them all.
ARENA_RETAINED_BYTES = 32 << 20


@dataclass(frozen=True)
class PoolStats:
    """A snapshot of a pool: bytes reserved by live buffers, their peak, live buffer count."""

    in_use: int
    peak: int
    allocations: int
    largest_free: int
    capacity: int


class DeviceBuffer:
    """A reference-counted region of device memory (pool block, imported fd, or wrapped array)."""

    def __init__(
        self,
        pool: DevicePool,
        mem: np.ndarray,
        address: int,
        export: tuple[int, int, int] | None,
        on_free: Callable[[DeviceBuffer], None],
        owner: Any = None,
    ):
        self.pool = pool
        self.nbytes = mem.nbytes
        self.address = address  # explicit: numpy reports no pointer for empty slices
        self._mem = mem
        self._export = export
        self._on_free = on_free
        self._owner = owner  # keeps an imported mapping or a wrapped array alive
        self._refs = 1

    def __repr__(self) -> str:
        return f"DeviceBuffer(nbytes={self.nbytes}, address={self.address:#x}, refs={self._refs})"

    @property
    def refcount(self) -> int:
        """Number of outstanding references (0 once freed)."""
        return self._refs

    def view(self, dtype: Any = np.uint8, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A numpy array over this device memory (no copy); default: all bytes as uint8."""
        if self._refs == 0:
            raise LitenpuError(f"{self!r} was released; its memory may belong to someone else")
        dt = np.dtype(dtype)
        if shape is None:
            return self._mem[: self.nbytes - self.nbytes % dt.itemsize].view(dt)
        nbytes = math.prod(shape) * dt.itemsize
        if nbytes > self.nbytes:
            raise BindingError(
                f"device buffer of {self.nbytes} bytes is too small for {dt.name}{list(shape)} "
                f"({nbytes} bytes)"
            )
        return self._mem[:nbytes].view(dt).reshape(shape)

    def export(self) -> tuple[int, int, int]:
        """(fd, offset, size) another mapping of this memory can be made from.

        The fd belongs to the pool (or to the import); dup it to keep it past their lifetime.
        """
        if self._export is None:
            raise UnsupportedError(f"{self!r} has no file descriptor (wrapped host memory or "
                                   "a pool without memfd_create)")
        return self._export

    def retain(self) -> DeviceBuffer:
        """Add a reference; returns self for chaining."""
        with self.pool._lock:
            if self._refs == 0:
                raise LitenpuError(f"cannot retain {self!r}: already released")
            self._refs += 1
        return self

    def release(self) -> None:
        """Drop a reference; the memory goes back at zero."""
        with self.pool._lock:
            if self._refs == 0:
                raise LitenpuError(f"double release of {self!r}")
            self._refs -= 1
            if self._refs == 0:
                self._on_free(self)

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class DevicePool:
    """A memfd-backed region with an aligned best-fit allocator, refcounted buffers and stats."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, name: str = "litenpu-npu",
                 reserve: int | None = None):
        if not isinstance(capacity, int) or capacity <= 0:
            raise DeviceMemoryError(f"pool capacity must be a positive int, got {capacity!r}")
        self.capacity = align_up(capacity, mmap.PAGESIZE)
        self._lock = threading.RLock()
        self.fd = -1
        # The address range is reserved once (sparse file, nothing committed), so that the
        # capacity can grow later without moving any live buffer.
        self.reserve = max(self.capacity, align_up(reserve if reserve is not None
                                                   else _physical_memory(), mmap.PAGESIZE))
        try:
            self.fd = os.memfd_create(name, os.MFD_CLOEXEC)
            os.ftruncate(self.fd, self.reserve)
            self._mm = mmap.mmap(self.fd, self.reserve)
        except (AttributeError, OSError) as exc:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            log.info("memfd_create unavailable (%s): anonymous pool, no fd export, no growth",
                     exc)
            self.reserve = self.capacity
            self._mm = mmap.mmap(-1, self.capacity)
        self._array = np.frombuffer(self._mm, dtype=np.uint8)
        self.base_address = self._array.ctypes.data
        self.heap: native.Heap | None = (native.Heap(self.base_address, self.capacity)
                                         if native.library() is not None else None)
        self._books: native.Heap | PyHeap = (self.heap if self.heap is not None
                                             else PyHeap(self.base_address, self.capacity))
        self._used: dict[int, DeviceBuffer] = {}  # start -> the buffer this pool handed out
        self._external: list[DeviceBuffer] = []
        if self.fd >= 0:
            _SHARED_POOLS.add(self)

    def _private_in_child(self) -> None:
        """In a forked child: this pool's pages become the child's own copy (its parent's
        contents at the fork, copy-on-write), and nothing exports them any more. Takes no
        lock: a thread of the parent may have held it at the fork."""
        native.remap_private(self.base_address, self.reserve, self.fd)
        os.close(self.fd)
        self.fd = -1
        for buffer in self._used.values():
            buffer._export = None

    def __repr__(self) -> str:
        return f"DevicePool(capacity={self.capacity}, fd={self.fd})"

    # allocation ---------------------------------------------------------------------------

    def allocate(self, nbytes: int, alignment: int = ALIGNMENT) -> DeviceBuffer:
        """A new buffer of `nbytes` (>= 0) at a multiple of `alignment` (power of two)."""
        if not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise DeviceMemoryError(f"cannot allocate {nbytes!r} bytes: expected an int >= 0")
        if alignment <= 0 or alignment & (alignment - 1):
            raise DeviceMemoryError(f"alignment {alignment} is not a positive power of two")
        nbytes = int(nbytes)
        with self._lock:
            start = self._books.alloc(nbytes, alignment)
            if start < 0:
                in_use, _, _, largest = self._books.stats()
                raise DeviceMemoryError(
                    f"device pool exhausted: requested {nbytes} bytes (alignment "
                    f"{max(alignment, ALIGNMENT)}), largest free block {largest}, "
                    f"{self.capacity - in_use} of {self.capacity} bytes free",
                    requested=nbytes,
                    available=largest,
                )
            mem = self._array[start : start + nbytes]
            export = (self.fd, start, nbytes) if self.fd >= 0 else None
            buffer = DeviceBuffer(self, mem, self.base_address + start, export, self._free_block)
            self._used[start] = buffer
        return buffer

    def grow(self, capacity: int) -> None:
        """Let the pool hold `capacity` bytes (never shrinks; live buffers stay where they are).

        DeviceMemoryError when `capacity` exceeds the address range reserved at creation (the
        machine's physical memory by default)."""
        wanted = align_up(int(capacity), mmap.PAGESIZE)
        with self._lock:
            if wanted <= self.capacity:
                return
            if wanted > self.reserve:
                raise DeviceMemoryError(
                    f"device memory of {capacity} bytes requested; this pool can grow to "
                    f"{self.reserve} bytes", requested=int(capacity), available=self.reserve)
            self._books.grow(wanted)
            self.capacity = wanted
        log.info("device pool grown to %d bytes", wanted)

    def _free_block(self, buffer: DeviceBuffer) -> None:
        """Return a pool buffer's block (lock held)."""
        start = buffer.address - self.base_address
        del self._used[start]
        self._books.release(start)

    # external memory ----------------------------------------------------------------------

    def import_fd(self, fd: int, offset: int, size: int) -> DeviceBuffer:
        """Map `size` bytes at `offset` of another process's or driver's fd as a buffer.

        The mapping is shared and writable, or read-only when the fd was opened read-only.
        """
        if offset < 0 or size <= 0:
            raise BindingError(f"import_fd: offset {offset} / size {size}: expected >= 0 / > 0")
        try:
            file_size = os.fstat(fd).st_size
        except OSError as exc:
            raise BindingError(f"import_fd: fd {fd} is not usable: {exc}") from exc
        if offset + size > file_size:
            raise BindingError(
                f"import_fd: fd {fd} holds {file_size} bytes, too small for "
                f"[{offset}, {offset + size})"
            )
        base = offset - offset % mmap.ALLOCATIONGRANULARITY
        if (offset - base) % ALIGNMENT:
            raise BindingError(f"import_fd: offset {offset} is not {ALIGNMENT}-byte aligned")
        own_fd = os.dup(fd)
        try:
            try:
                mapping = mmap.mmap(own_fd, offset - base + size, offset=base)
            except PermissionError:  # a read-only fd: the buffer can feed inputs, not outputs
                mapping = mmap.mmap(own_fd, offset - base + size, offset=base,
                                    access=mmap.ACCESS_READ)
        except OSError as exc:
            os.close(own_fd)
            raise BindingError(f"import_fd: cannot map fd {fd}: {exc}") from exc
        mem = np.frombuffer(mapping, dtype=np.uint8, count=size, offset=offset - base)
        return self._register(mem, (own_fd, offset, size), owner=mapping)

    def wrap(self, array: np.ndarray, nbytes: int | None = None) -> DeviceBuffer:
        """Use an aligned, C-contiguous host array as device memory, without copying."""
        if not isinstance(array, np.ndarray):
            raise BindingError(f"wrap: expected a numpy array, got {type(array).__name__}")
        if not array.flags.c_contiguous:
            raise BindingError("wrap: array is not C-contiguous")
        if array.ctypes.data % ALIGNMENT:
            raise BindingError(
                f"wrap: array at {array.ctypes.data:#x} is not {ALIGNMENT}-byte aligned"
            )
        if nbytes is not None and array.nbytes < nbytes:
            raise BindingError(f"wrap: array has {array.nbytes} bytes, need {nbytes}")
        mem = array.reshape(-1).view(np.uint8)
        return self._register(mem, None, owner=array)

    def _register(self, mem: np.ndarray, export: tuple[int, int, int] | None, owner: Any) -> DeviceBuffer:
        buffer = DeviceBuffer(self, mem, mem.ctypes.data, export, self._forget_external, owner)
        with self._lock:
            self._books.add_range(buffer.address, buffer.nbytes)
            self._external.append(buffer)
        return buffer

    def _forget_external(self, buffer: DeviceBuffer) -> None:
        """Unregister an imported/wrapped buffer (lock held); its fd closes, its map follows GC."""
        self._external.remove(buffer)
        self._books.remove_range(buffer.address)
        if buffer._export is not None:
            os.close(buffer._export[0])
        buffer._mem = buffer._owner = None  # the mapping goes once no view is left

    # queries --------------------------------------------------------------------------------

    def find(self, address: int) -> DeviceBuffer | None:
        """The live buffer (pool or external) holding `address`, if any; a block the data
        plane or onnxruntime allocated comes back borrowed (releasing it frees nothing)."""
        with self._lock:
            offset = address - self.base_address
            if 0 <= offset < self.capacity:
                block = self._books.block(offset)
                if block is None:
                    return None
                start, nbytes = block
                buffer = self._used.get(start)
                if buffer is None:
                    buffer = DeviceBuffer(self, self._array[start:start + nbytes],
                                          self.base_address + start,
                                          (self.fd, start, nbytes) if self.fd >= 0 else None,
                                          _borrowed)
                return buffer
            for buffer in self._external:
                if buffer.address <= address < buffer.address + buffer.nbytes:
                    return buffer
        return None

    def contains(self, address: int, nbytes: int) -> bool:
        """True when [address, address + nbytes) lies inside one live buffer."""
        return self._books.contains(address, nbytes)

    def trim(self, keep: int = 0) -> int:
        """Give the pages of free blocks back to the OS (they are committed again on next
        touch), all but the first `keep` free bytes in address order (the best fit reuses a
        block's low end first); returns the bytes released. Call after closing big sessions."""
        if self.heap is not None:  # C runs allocate without this lock: trim under the heap's
            return self.heap.trim(mmap.PAGESIZE, keep)
        released = 0
        with self._lock:
            for start, size in self._books.free_blocks():
                kept = min(keep, size)
                keep -= kept
                first = align_up(start + kept, mmap.PAGESIZE)
                length = (start + size - first) // mmap.PAGESIZE * mmap.PAGESIZE
                if length > 0:
                    try:  # shmem: frees the pages
                        self._mm.madvise(mmap.MADV_REMOVE, first, length)
                    except OSError:  # a forked child's private copy: drop its own pages
                        self._mm.madvise(mmap.MADV_DONTNEED, first, length)
                    released += length
        return released

    def stats(self) -> PoolStats:
        """Bytes reserved by live pool buffers (64-byte blocks), peak, count, largest free."""
        in_use, peak, allocations, largest = self._books.stats()
        return PoolStats(in_use, peak, allocations, largest, self.capacity)

    def close(self) -> None:
        """Unmap the pool and close its fd; refuses while buffers are live."""
        with self._lock:
            live = self._books.stats()[2] + len(self._external)
            if live:
                raise LitenpuError(f"{self!r}: cannot close with {live} live buffers")
            self._array = np.empty(0, np.uint8)
            try:
                self._mm.close()
            except BufferError:
                log.debug("pool views still referenced; the mapping is freed when they are")
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            _SHARED_POOLS.discard(self)  # nothing left for a forked child to copy

    def __enter__(self) -> DevicePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _borrowed(buffer: DeviceBuffer) -> None:
    """The last release of a borrowed buffer: its block belongs to whoever allocated it."""


def _physical_memory() -> int:
    """Bytes of RAM in this machine (the default limit a pool may grow to)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return DEFAULT_CAPACITY


_default_lock = threading.Lock()
_default: DevicePool | None = None


def default_pool(capacity: int | None = None) -> DevicePool:
    """The process's device pool, created on first use with `capacity` (default 1 GiB).

    A later, larger `capacity` grows it (`DevicePool.grow`); a smaller one is an error: memory
    already handed out cannot be taken back.
    """
    global _default
    with _default_lock:
        if _default is None:
            _default = DevicePool(DEFAULT_CAPACITY if capacity is None else capacity)
            log.info("device pool: %d bytes (lazily committed), fd %d", _default.capacity,
                     _default.fd)
        elif capacity is not None and align_up(capacity, mmap.PAGESIZE) < _default.capacity:
            raise DeviceMemoryError(
                f"the device pool already exists with {_default.capacity} bytes; "
                f"configure its capacity ({capacity}) before first use",
                requested=capacity,
                available=_default.capacity,
            )
        elif capacity is not None:
            _default.grow(capacity)
        return _default


def ensure_default_pool(capacity: int) -> DevicePool:
    """The process's pool holding at least `capacity` bytes: created with it, or grown to it
    (a session's `device_memory_bytes`; the largest request wins, none shrinks the pool)."""
    with _default_lock:
        exists = _default is not None
    if not exists:
        try:
            return default_pool(capacity)
        except DeviceMemoryError:  # another thread created it meanwhile
            pass
    pool = default_pool()
    if capacity > pool.capacity:
        pool.grow(capacity)
    elif capacity < pool.capacity:
        log.info("device pool stays at %d bytes (%d asked for)", pool.capacity, capacity)
    return pool


_SHARED_POOLS: weakref.WeakSet[DevicePool] = weakref.WeakSet()  # memfd pools, mapped shared


def _forget_default_in_child() -> None:
    """A forked child must not write into its parent's shared mappings: each becomes the
    child's private copy, and its next allocations come from a fresh default pool."""
    global _default, _default_lock
    for pool in list(_SHARED_POOLS):
        pool._private_in_child()
    _SHARED_POOLS.clear()
    _default = None
    _default_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_default_in_child)
