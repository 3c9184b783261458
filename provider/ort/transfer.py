"""OrtDataTransferImpl: onnxruntime's copies between CPU memory and NPU memory, counted.

onnxruntime calls CanCopy to learn which device pairs we handle and CopyTensors to move
tensors (feeding numpy inputs to the NPU, fetching NPU outputs, `OrtValue.numpy()` on an NPU
value). Both are C (`csrc/transfer.c`): a run never enters Python to copy. Every byte moved
is counted; the process-wide `COUNTERS` add the C side's counts (these copies, and the
uploads a C Compute makes for inputs arriving in CPU memory) to the ones Python makes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields

from provider.ort import clib


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

    def __add__(self, other: CopyStats) -> CopyStats:
        return CopyStats(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


class CopyCounters:
    """Thread-safe cumulative copy counters: Python's, plus the C side's in `snapshot`."""

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
            return self._stats + CopyStats(*clib.copy_counts())


COUNTERS = CopyCounters()


class DataTransfer:
    """The factory's OrtDataTransferImpl (C) between CPU memory and NPU memory of `vendor_id`;
    it lives as long as the process."""

    def __init__(self, api_version: int, vendor_id: int):
        self.vendor_id = vendor_id
        self.address: int = clib.library().litenpu_transfer_new(api_version, vendor_id)
        if not self.address:
            raise MemoryError("no host memory for the data transfer")
