"""Arenas shared by several Programs: regions sized to the largest live member.

Every partition of a session has one group, private (`ArenaGroup(shared=False)`): the
Programs of its input shapes share its arenas. With the native library its arenas are a
`native.ArenaSet` of up to `max_arenas`: a run takes a free arena, or a new one while fewer
exist, so concurrent runs of one session each have their own (released to the group when
done, given back to the pool when the group resizes or goes, their pages to the OS past
`memory.ARENA_RETAINED_BYTES`, kept for the next arena). A named group
(`internal_memory_group=<name>`, `named_group`) spans the Programs of every session that
names it, across models: one arena, runs take turns, by design. Without the library a group
is one region and runs of the whole group are serialized by its lock. A member needing more
grows the arenas once no run holds one; members find the new arenas before their next run.
When a member leaves, the arenas shrink to the largest member left; the last one out frees
them (and a named group with them).
"""

from __future__ import annotations

import logging
import threading

from provider.errors import DeviceMemoryError
from provider.npu import native
from provider.npu.memory import ARENA_RETAINED_BYTES, DevicePool
from provider.npu.weights import allocate

__all__ = ["ArenaGroup", "named_group"]

log = logging.getLogger("litenpu.memory")


class ArenaGroup:
    """Arenas shared by their members (Programs), sized to the largest live member: in C (up to
    `max_arenas` for concurrent runs) or one region whose runs are serialized by `lock`."""

    def __init__(self, name: str, pool: DevicePool, *, shared: bool = True, max_arenas: int = 1):
        self.name = name
        self.pool = pool
        self.shared = shared  # registered under its name (a named group)
        self.lock = threading.RLock()
        self.nbytes = 0  # of each arena
        self.arenas = (native.ArenaSet(pool.heap, 0, max_arenas) if pool.heap is not None
                       else None)
        self.region = allocate(pool, 0) if self.arenas is None else None
        self.generation = 0
        self.sizes: list[int] = []  # what each live member needs

    @property
    def members(self) -> int:
        return len(self.sizes)

    @property
    def device(self) -> int:
        """Pool bytes of the arenas held now."""
        return self.arenas.held()[1] if self.arenas is not None else self.region.device

    @property
    def held(self) -> int:
        """Arenas held now (1 without the native library)."""
        return self.arenas.held()[0] if self.arenas is not None else 1

    def join(self, nbytes: int) -> None:
        """Add a member needing `nbytes`; grows the arenas first (DeviceMemoryError leaves them)."""
        with self.lock:
            if nbytes > self.nbytes:
                self._resize(nbytes)
            self.sizes.append(nbytes)

    def leave(self, nbytes: int) -> None:
        """Remove a member that needed `nbytes`; the arenas shrink to the largest one left."""
        with self.lock:
            self.sizes.remove(nbytes)
            need = max(self.sizes, default=0)
            if need < self.nbytes:
                try:
                    self._resize(need)
                except DeviceMemoryError:  # no room for the smaller copy now: keep the big one
                    log.debug("arena group %r: keeps %d bytes", self.name, self.nbytes)
            if self.sizes or not self.shared:
                return
        with _GROUPS_LOCK:
            if _GROUPS.get((self.name, id(self.pool))) is self and not self.sizes:
                del _GROUPS[(self.name, id(self.pool))]

    def _resize(self, nbytes: int) -> None:
        """Arenas of `nbytes` from now on (lock held; waits until no run holds one)."""
        if self.arenas is not None:
            self.arenas.resize(nbytes)
        else:
            new = allocate(self.pool, nbytes)
            old, self.region = self.region, new
            old.release()
        self.nbytes = nbytes
        self.pool.trim(keep=ARENA_RETAINED_BYTES)  # the old arenas' pages, past those kept
        self.generation += 1
        log.info("arena group %r: %d bytes", self.name, nbytes)


_GROUPS: dict[tuple[str, int], ArenaGroup] = {}
_GROUPS_LOCK = threading.Lock()


def named_group(name: str, pool: DevicePool) -> ArenaGroup:
    """The process's arena group called `name` on `pool` (created on first use)."""
    with _GROUPS_LOCK:
        group = _GROUPS.get((name, id(pool)))
        if group is None:
            group = _GROUPS[(name, id(pool))] = ArenaGroup(name, pool)
        return group
