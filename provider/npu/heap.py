"""The device pool's books in Python: where the pool keeps them without the native library.

The same policy and interface as the C heap (`native.Heap`, csrc/heap.c), which the pool uses
when the library is loaded and which the tests hold to this one: blocks are multiples of 64
bytes; an allocation takes the smallest free block that holds it at an aligned start (the
lowest address among equals); a freed block merges with its free neighbours. Offsets are
relative to the pool's mapping; external buffers are registered by address. The caller (the
pool) serializes calls.
"""

from __future__ import annotations

import bisect

from provider.npu.planner import align_up

__all__ = ["BLOCK", "PyHeap"]

BLOCK = 64


class PyHeap:
    """Free and live blocks of [0, capacity) of a mapping at `base`, plus external (address,
    nbytes) ranges."""

    def __init__(self, base: int, capacity: int):
        self._base = base
        self._free_offsets = [0]  # sorted starts of free blocks (to find neighbours)
        self._free_size = {0: capacity}  # start -> size
        self._by_size = [(capacity, 0)]  # sorted (size, start): best fit by bisection
        self._used_offsets: list[int] = []  # sorted starts of live blocks
        self._used: dict[int, tuple[int, int]] = {}  # start -> (block size, bytes asked for)
        self._external: list[tuple[int, int]] = []
        self._capacity = capacity
        self._in_use = 0
        self._peak = 0

    def alloc(self, nbytes: int, alignment: int) -> int:
        """Offset of a new block of `nbytes` at a multiple of `alignment`, or -1 (no room)."""
        size = align_up(max(nbytes, 1), BLOCK)
        alignment = max(alignment, BLOCK)
        i = bisect.bisect_left(self._by_size, (size, -1))
        while i < len(self._by_size):
            best_size, best = self._by_size[i]
            if align_up(best, alignment) - best + size <= best_size:
                break
            i += 1
        else:
            return -1
        begin = align_up(best, alignment)
        self._remove_free(best)
        if begin > best:
            self._add_free(best, begin - best)
        if best + best_size > begin + size:
            self._add_free(begin + size, best + best_size - begin - size)
        bisect.insort(self._used_offsets, begin)
        self._used[begin] = (size, nbytes)
        self._in_use += size
        self._peak = max(self._peak, self._in_use)
        return begin

    def release(self, offset: int) -> int:
        """Free the block at `offset` (merged with its free neighbours); its size, or -1."""
        entry = self._used.pop(offset, None)
        if entry is None:
            return -1
        del self._used_offsets[bisect.bisect_left(self._used_offsets, offset)]
        self._in_use -= entry[0]
        self._free_range(offset, entry[0])
        return entry[0]

    def grow(self, capacity: int) -> None:
        """Add [old capacity, capacity) to the free blocks."""
        if capacity > self._capacity:
            self._free_range(self._capacity, capacity - self._capacity)
            self._capacity = capacity

    def _free_range(self, start: int, size: int) -> None:
        """Add [start, start + size) to the free blocks, merged with its free neighbours."""
        following = start + size
        if following in self._free_size:
            size += self._free_size[following]
            self._remove_free(following)
        i = bisect.bisect_left(self._free_offsets, start)
        if i > 0:
            prev = self._free_offsets[i - 1]
            if prev + self._free_size[prev] == start:
                start, size = prev, size + self._free_size[prev]
                self._remove_free(prev)
        self._add_free(start, size)

    def _add_free(self, start: int, size: int) -> None:
        bisect.insort(self._free_offsets, start)
        bisect.insort(self._by_size, (size, start))
        self._free_size[start] = size

    def _remove_free(self, start: int) -> None:
        del self._free_offsets[bisect.bisect_left(self._free_offsets, start)]
        del self._by_size[bisect.bisect_left(self._by_size, (self._free_size.pop(start), start))]

    def stats(self) -> tuple[int, int, int, int]:
        """(in_use, peak, live blocks, largest free block)."""
        largest = self._by_size[-1][0] if self._by_size else 0
        return self._in_use, self._peak, len(self._used), largest

    def block(self, offset: int) -> tuple[int, int] | None:
        """(start, requested bytes) of the live block whose requested bytes hold `offset`."""
        i = bisect.bisect_right(self._used_offsets, offset) - 1
        if i < 0:
            return None
        start = self._used_offsets[i]
        nbytes = self._used[start][1]
        return (start, nbytes) if offset < start + nbytes else None

    def free_blocks(self) -> list[tuple[int, int]]:
        """(start, size) of every free block."""
        return [(start, self._free_size[start]) for start in self._free_offsets]

    def add_range(self, address: int, nbytes: int) -> None:
        self._external.append((address, nbytes))

    def remove_range(self, address: int) -> None:
        for i, (start, _) in enumerate(self._external):
            if start == address:
                del self._external[i]
                return

    def contains(self, address: int, nbytes: int) -> bool:
        """Whether [address, address + nbytes) lies inside one live block's requested bytes or
        in the first external range holding `address`."""
        offset = address - self._base
        if 0 <= offset < self._capacity:
            block = self.block(offset)
            return block is not None and offset + nbytes <= block[0] + block[1]
        for start, size in self._external:
            if start <= address < start + size:
                return address + nbytes <= start + size
        return False
