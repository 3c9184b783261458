"""OrtAllocator over the NPU memory pool: onnxruntime's NPU tensors live in device memory.

onnxruntime asks the factory for an allocator for the NPU memory info it declared; every NPU
tensor it creates (session outputs and intermediates placed on the NPU, `provider.empty`,
`OrtValue.ortvalue_from_shape_and_type(..., "npu", ...)`) is then carved from
`provider.npu.memory.default_pool()`. The allocator is C (`csrc/allocator.c`): once the pool
exists and keeps its books in the native heap, Alloc and Free never enter Python. Python
allocates the rest (`PoolAllocator.alloc`): before the pool exists (the first allocation makes
it), without the native library, and while `adopting(buffer)`, which makes the next
allocation on this thread return an existing buffer (imported fd / wrapped memory, no copy):
that is how `provider.import_fd` / `provider.wrap` turn memory made elsewhere into an NPU
`OrtValue`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from provider.errors import DeviceMemoryError
from provider.npu.memory import DeviceBuffer, default_pool
from provider.ort import abi, clib
from provider.ort.callbacks import address, keep, value_callback

log = logging.getLogger("litenpu.ort")


class PoolAllocator:
    """An OrtAllocator (C) handing out buffers of the process's NPU pool."""

    def __init__(self, api_version: int, memory_info: int):
        self.memory_info = memory_info  # the pool is looked up per allocation: it is created
        # at first use, sized by the first session's `device_memory_bytes`
        self._live: dict[int, object] = {}  # address -> DeviceBuffer Python allocated
        self._lock = threading.Lock()
        self._python_allocations = 0
        self.address: int = clib.library().litenpu_allocator_new(
            api_version, memory_info, address(_alloc), address(_free))
        if not self.address:
            raise MemoryError("no host memory for the NPU allocator")
        _ALLOCATORS[self.address] = self

    @property
    def allocations(self) -> int:
        """NPU tensors allocated so far (by the C side and by Python)."""
        return self._python_allocations + clib.library().litenpu_allocator_count(self.address)

    def alloc(self, nbytes: int) -> int | None:
        """An allocation the C side hands to Python (see the module docstring)."""
        buffer = getattr(_ADOPT, "buffer", None)
        if buffer is not None:
            _ADOPT.buffer = None
            if buffer.nbytes < nbytes:
                log.error("NPU allocator: adopted %r is smaller than %d bytes", buffer, nbytes)
                return None
        else:
            pool = default_pool()
            if pool.heap is not None and clib.data_plane():  # from now on C allocates
                clib.library().litenpu_allocator_set_heap(self.address, pool.heap.address)
            try:
                buffer = pool.allocate(max(nbytes, 1))
            except DeviceMemoryError as e:
                log.error("NPU allocator: %s", e)  # onnxruntime reports the NULL as a failed alloc
                return None
        with self._lock:  # an adopted buffer's reference passes to onnxruntime: Free releases it
            self._live[buffer.address] = buffer
            self._python_allocations += 1
        return buffer.address

    def free(self, pointer: int) -> None:
        with self._lock:
            buffer = self._live.pop(pointer, None)
        if buffer is None:
            log.error("NPU allocator: Free(%#x) of a pointer it did not allocate", pointer)
            return
        buffer.release()



_ADOPT = threading.local()


@contextmanager
def adopting(buffer: DeviceBuffer) -> Iterator[None]:
    """The next NPU allocation on this thread returns `buffer` (which then belongs to the
    tensor); if no allocation took it by the end of the block, it is released."""
    _ADOPT.buffer = buffer
    clib.library().litenpu_adopting(1)
    try:
        yield
    finally:
        clib.library().litenpu_adopting(0)
        if getattr(_ADOPT, "buffer", None) is buffer:
            _ADOPT.buffer = None
            buffer.release()


# Never emptied: onnxruntime may free a tensor after releasing the allocator that made it.
_ALLOCATORS: dict[int, PoolAllocator] = keep({})


@value_callback(abi.P_ALLOC, "Allocator.Alloc")
def _alloc(this, nbytes):
    return _ALLOCATORS[this].alloc(nbytes)


@value_callback(abi.P_FREE, "Allocator.Free")
def _free(this, pointer):
    if pointer:
        _ALLOCATORS[this].free(pointer)


def _forget_heaps_in_child() -> None:
    """A forked child gets a fresh pool: its allocators ask Python again, which finds it."""
    for allocator in list(_ALLOCATORS):
        clib.library().litenpu_allocator_set_heap(allocator, None)


os.register_at_fork(after_in_child=_forget_heaps_in_child)
