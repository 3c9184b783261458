"""This process's memory as Linux's /proc reports it: resident bytes in all, and of the
mappings a test picks out of /proc/self/smaps."""

from __future__ import annotations

from collections.abc import Callable


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


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
