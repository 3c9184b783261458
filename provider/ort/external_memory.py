"""NPU `OrtValue`s over memory made elsewhere, without copying (RKNN create_mem_from_fd / _phys).

`import_fd` maps a region of a file descriptor (a dma-buf-like fd from another process or
driver, or a `DeviceBuffer.export()`); `wrap` adopts a 64-byte aligned numpy array. Either is
registered with the device pool as external memory (it does not count in `in_use`) and handed
to onnxruntime's NPU allocator for exactly one tensor (`provider.ort.allocator.adopting`), so
the result is an ordinary NPU `OrtValue`: fed as an input, the kernel reads it in place (0
bytes copied); its memory is unmapped / let go when onnxruntime frees the tensor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from provider.errors import BindingError, LitenpuError
from provider.npu.memory import DeviceBuffer, default_pool
from provider.ort import VENDOR_ID
from provider.ort.allocator import adopting
from provider.ort.registration import register

__all__ = ["import_fd", "wrap"]


def import_fd(fd: int, offset: int, size: int, shape: Sequence[int], dtype: Any = "float32") -> ort.OrtValue:
    """An NPU tensor of `shape`/`dtype` over `size` bytes at `offset` of `fd` (no copy).

    BindingError when the offset is not 64-byte aligned, the fd is too small for the region,
    or the region is too small for the tensor.
    """
    dims, dt = _tensor("import_fd", shape, dtype)
    nbytes = math.prod(dims) * dt.itemsize
    if nbytes > size:
        raise BindingError(f"import_fd: {dt.name}{dims} needs {nbytes} bytes, the region has {size}")
    return _adopt(default_pool().import_fd(fd, offset, size), dims, dt)


def wrap(array: np.ndarray) -> ort.OrtValue:
    """An NPU tensor over a C-contiguous, 64-byte aligned array's memory (no copy).

    The tensor keeps the array alive; writes through either are seen by both.
    """
    if not isinstance(array, np.ndarray):
        raise BindingError(f"wrap: expected a numpy array, got {type(array).__name__}")
    dims, dt = _tensor("wrap", array.shape, array.dtype)
    return _adopt(default_pool().wrap(array), dims, dt)


def _tensor(what: str, shape: Sequence[int], dtype: Any) -> tuple[list[int], np.dtype]:
    try:
        dims, dt = [int(d) for d in shape], np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise BindingError(f"{what}: bad shape {shape!r} or dtype {dtype!r}: {exc}") from None
    if any(d < 0 for d in dims) or math.prod(dims) == 0:
        raise BindingError(f"{what}: shape {tuple(dims)} must have only positive dims")
    return dims, dt


def _adopt(buffer: DeviceBuffer, dims: list[int], dt: np.dtype) -> ort.OrtValue:
    """The NPU OrtValue whose memory is `buffer` (onnxruntime's Free releases it)."""
    register()
    with adopting(buffer):
        value = ort.OrtValue.ortvalue_from_shape_and_type(dims, dt.type, "npu", 0, VENDOR_ID)
    if value.data_ptr() != buffer.address:
        raise LitenpuError("onnxruntime did not place the tensor in the adopted memory")
    return value
