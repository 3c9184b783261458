"""How many pages of a mapped buffer this process has touched: /proc/self/pagemap.

`mincore(2)` would answer a different question (is the page in the page cache, touched by
anyone, e.g. by the writer of a fresh cache entry); pagemap's "present" bit (63) says the
page is mapped into *this* process's page tables, i.e. it was faulted in here. The kernel's
fault-around maps up to 64 KiB of already-cached neighbours on a read fault, so the count is
an upper bound of the pages actually read, never an under-count.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["PAGE_SIZE", "pages_spanned", "pages_present"]

PAGE_SIZE = mmap.PAGESIZE
_PRESENT = np.uint64(1 << 63)


def pages_spanned(array: np.ndarray) -> int:
    """Number of pages the array's bytes span."""
    if not array.nbytes:
        return 0
    start = array.ctypes.data // PAGE_SIZE
    end = (array.ctypes.data + array.nbytes - 1) // PAGE_SIZE
    return end - start + 1


def pages_present(array: np.ndarray) -> int | None:
    """Pages of `array` mapped into this process; None where /proc/self/pagemap is unreadable."""
    count = pages_spanned(array)
    if not count:
        return 0
    first = array.ctypes.data // PAGE_SIZE
    try:
        with open("/proc/self/pagemap", "rb") as f:
            f.seek(first * 8)
            raw = f.read(count * 8)
    except OSError:
        return None
    if len(raw) != count * 8:
        return None
    return int(np.count_nonzero(np.frombuffer(raw, dtype="<u8") & _PRESENT))
