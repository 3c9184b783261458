"""OrtDataTransferImpl: onnxruntime's copies between CPU memory and NPU memory, counted.

onnxruntime calls CanCopy to learn which device pairs we handle and CopyTensors to move
tensors (feeding numpy inputs to the NPU, fetching NPU outputs, `OrtValue.numpy()` on an NPU
value). Every byte moved is added to the process-wide `COUNTERS`, which also receive the
uploads Compute makes itself for inputs arriving in CPU memory.
"""

from __future__ import annotations

import ctypes as C
import threading
from dataclasses import dataclass, fields

from provider.ort import abi
from provider.ort.callbacks import address, ort, status_callback, value_callback


@dataclass(frozen=True)
class CopyStats:
    """Bytes moved between CPU and NPU memory (cumulative, or a difference of two snapshots)."""

    bytes_to_device: int = 0
    bytes_to_host: int = 0
    bytes_device_to_device: int = 0
    copies: int = 0

    @property
    def total_bytes(self) -> int:
        return self.bytes_to_device + self.bytes_to_host + self.bytes_device_to_device

    def __sub__(self, other: CopyStats) -> CopyStats:
        return CopyStats(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))


class CopyCounters:
    """Thread-safe cumulative copy counters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = CopyStats()

    def add(self, to_device: int = 0, to_host: int = 0, device_to_device: int = 0,
            copies: int = 1) -> None:
        with self._lock:
            s = self._stats
            self._stats = CopyStats(s.bytes_to_device + to_device, s.bytes_to_host + to_host,
                                    s.bytes_device_to_device + device_to_device, s.copies + copies)

    def snapshot(self) -> CopyStats:
        with self._lock:
            return self._stats


COUNTERS = CopyCounters()


class DataTransfer:
    """The factory's OrtDataTransferImpl between CPU memory and NPU memory of `vendor_id`."""

    def __init__(self, api_version: int, vendor_id: int):
        self.vendor_id = vendor_id
        self.struct = abi.OrtDataTransferImpl()
        self.struct.ort_version_supported = api_version
        self.struct.Release = address(_release)
        self.struct.CanCopy = address(_can_copy)
        self.struct.CopyTensors = address(_copy_tensors)
        self.address: int = C.addressof(self.struct)
        _TRANSFERS[self.address] = self

    def kind(self, memory_device: int) -> str | None:
        """"npu", "cpu" or None (a device we do not copy to or from)."""
        ep = ort().ep
        device_type = ep.MemoryDevice_GetDeviceType(memory_device)
        if device_type == abi.MEM_DEVICE_CPU:
            return "cpu"
        if device_type == abi.MEM_DEVICE_NPU and ep.MemoryDevice_GetVendorId(memory_device) == self.vendor_id:
            return "npu"
        return None

    def can_copy(self, src_device: int, dst_device: int) -> bool:
        kinds = (self.kind(src_device), self.kind(dst_device))
        return "npu" in kinds and None not in kinds

    def copy(self, sources: list[int], destinations: list[int]) -> None:
        o = ort()
        for src, dst in zip(sources, destinations, strict=True):
            nbytes, dst_bytes = abi.sz(), abi.sz()
            o.api.GetTensorSizeInBytes(src, C.byref(nbytes))
            o.api.GetTensorSizeInBytes(dst, C.byref(dst_bytes))
            if nbytes.value != dst_bytes.value:
                raise ValueError(f"CopyTensors: source has {nbytes.value} bytes, "
                                 f"destination {dst_bytes.value}")
            if nbytes.value:
                C.memmove(o.value_address(dst), o.value_address(src), nbytes.value)
            direction = (self.kind(o.ep.Value_GetMemoryDevice(src)),
                         self.kind(o.ep.Value_GetMemoryDevice(dst)))
            n = nbytes.value
            if direction == ("cpu", "npu"):
                COUNTERS.add(to_device=n)
            elif direction == ("npu", "cpu"):
                COUNTERS.add(to_host=n)
            else:
                COUNTERS.add(device_to_device=n)


_TRANSFERS: dict[int, DataTransfer] = {}


@value_callback(abi.P_TRANSFER_RELEASE, "DataTransfer.Release")
def _release(this):
    """Owned by the factory for the life of the process: nothing to free."""


@value_callback(abi.P_CAN_COPY, "DataTransfer.CanCopy", default=False)
def _can_copy(this, src_device, dst_device):
    return _TRANSFERS[this].can_copy(src_device, dst_device)


@status_callback(abi.P_COPY_TENSORS, "DataTransfer.CopyTensors")
def _copy_tensors(this, sources, destinations, streams, count):
    _TRANSFERS[this].copy([sources[i] for i in range(count)],
                          [destinations[i] for i in range(count)])
