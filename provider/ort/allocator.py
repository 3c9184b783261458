"""OrtAllocator over the NPU memory pool: onnxruntime's NPU tensors live in device memory.

onnxruntime asks the factory for an allocator for the NPU memory info it declared; every NPU
tensor it creates (session outputs and intermediates placed on the NPU, `provider.empty`,
`OrtValue.ortvalue_from_shape_and_type(..., "npu", ...)`) is then carved from
`provider.npu.memory.default_pool()`. `adopting(buffer)` makes the next allocation on this
thread return an existing buffer instead (imported fd / wrapped memory, no copy): that is how
`provider.import_fd` / `provider.wrap` turn memory made elsewhere into an NPU `OrtValue`.
"""

from __future__ import annotations

import ctypes as C
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from provider.errors import DeviceMemoryError
from provider.npu.memory import DeviceBuffer, default_pool
from provider.ort import abi
from provider.ort.callbacks import address, value_callback

log = logging.getLogger("litenpu.ort")


class PoolAllocator:
    """An OrtAllocator handing out buffers of the process's NPU pool."""

    def __init__(self, api_version: int, memory_info: int):
        self.memory_info = memory_info  # the pool is looked up per allocation: it is created
        # at first use, sized by the first session's `device_memory_bytes`
        self._live: dict[int, object] = {}  # address -> DeviceBuffer
        self._lock = threading.Lock()
        self.allocations = 0
        self.struct = abi.OrtAllocator()
        self.struct.version = api_version
        self.struct.Alloc = address(_alloc)
        self.struct.Free = address(_free)
        self.struct.Info = address(_info)
        self.struct.Reserve = address(_alloc)
        self.address: int = C.addressof(self.struct)
        _ALLOCATORS[self.address] = self

    def alloc(self, nbytes: int) -> int | None:
        buffer = getattr(_ADOPT, "buffer", None)
        if buffer is not None:
            _ADOPT.buffer = None
            if buffer.nbytes < nbytes:
                log.error("NPU allocator: adopted %r is smaller than %d bytes", buffer, nbytes)
                return None
        else:
            try:
                buffer = default_pool().allocate(max(nbytes, 1))
            except DeviceMemoryError as e:
                log.error("NPU allocator: %s", e)  # onnxruntime reports the NULL as a failed alloc
                return None
        with self._lock:  # an adopted buffer's reference passes to onnxruntime: Free releases it
            self._live[buffer.address] = buffer
            self.allocations += 1
        return buffer.address

    def free(self, pointer: int) -> None:
        with self._lock:
            buffer = self._live.pop(pointer, None)
        if buffer is None:
            log.error("NPU allocator: Free(%#x) of a pointer it did not allocate", pointer)
            return
        buffer.release()

    @property
    def live_bytes(self) -> int:
        with self._lock:
            return sum(b.nbytes for b in self._live.values())


_ADOPT = threading.local()


@contextmanager
def adopting(buffer: DeviceBuffer) -> Iterator[None]:
    """The next NPU allocation on this thread returns `buffer` (which then belongs to the
    tensor); if no allocation took it by the end of the block, it is released."""
    _ADOPT.buffer = buffer
    try:
        yield
    finally:
        if getattr(_ADOPT, "buffer", None) is buffer:
            _ADOPT.buffer = None
            buffer.release()


# Never emptied: onnxruntime may free a tensor after releasing the allocator that made it.
_ALLOCATORS: dict[int, PoolAllocator] = {}


@value_callback(abi.P_ALLOC, "Allocator.Alloc")
def _alloc(this, nbytes):
    return _ALLOCATORS[this].alloc(nbytes)


@value_callback(abi.P_FREE, "Allocator.Free")
def _free(this, pointer):
    if pointer:
        _ALLOCATORS[this].free(pointer)


@value_callback(abi.P_INFO, "Allocator.Info")
def _info(this):
    return _ALLOCATORS[this].memory_info
