"""This process's memory as Linux's /proc reports it: resident bytes in all, and of the
mappings one picks out of /proc/self/smaps (the benchmarks' and the tests' one reader)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def rss_bytes() -> int:
    """Resident bytes of this process (VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def smaps_rss(selects: Callable[[list[str]], bool]) -> int:
    """Resident bytes of the mappings whose smaps header, split into at most six fields
    (address range, permissions, offset, device, inode, path), `selects` accepts."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=5)
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                inside = selects(head)
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


def mapped_rss(path: Path) -> int:
    """Resident bytes of this process's mappings of the file `path`."""
    target = str(path.resolve())
    return smaps_rss(lambda head: len(head) == 6 and head[5].strip() == target)
