"""Arenas shared by several Programs: one region sized to the largest live member.

Every partition of a session has one, private (`ArenaGroup(shared=False)`): the Programs of
its input shapes run one at a time, so they can share one arena; a named group
(`internal_memory_group=<name>`, `named_group`) spans the Programs of every session that
names it, across models. A member needing more grows the arena under the group's lock (so
never while a member runs); members rebuild their views before their next run (they compare
`generation`); runs of the whole group are serialized by that lock. When a member leaves, the
arena shrinks to the largest member left; the last one out frees it (and a named group with
it).
"""

from __future__ import annotations

import logging
import threading

from provider.errors import DeviceMemoryError
from provider.npu.memory import DevicePool
from provider.npu.weights import allocate

__all__ = ["ArenaGroup", "named_group"]

log = logging.getLogger("litenpu.memory")


class ArenaGroup:
    """One arena shared by its members (Programs); runs serialized; sized to the largest live
    member."""

    def __init__(self, name: str, pool: DevicePool, *, shared: bool = True):
        self.name = name
        self.pool = pool
        self.shared = shared  # registered under its name (a named group)
        self.lock = threading.RLock()
        self.region = allocate(pool, 0)
        self.generation = 0
        self.sizes: list[int] = []  # what each live member needs

    @property
    def members(self) -> int:
        return len(self.sizes)

    def join(self, nbytes: int) -> None:
        """Add a member needing `nbytes`; grows the arena first (DeviceMemoryError leaves it)."""
        with self.lock:
            if nbytes > self.region.array.nbytes:
                self._resize(nbytes)
            self.sizes.append(nbytes)

    def leave(self, nbytes: int) -> None:
        """Remove a member that needed `nbytes`; the arena shrinks to the largest one left."""
        with self.lock:
            self.sizes.remove(nbytes)
            need = max(self.sizes, default=0)
            if need < self.region.array.nbytes:
                try:
                    self._resize(need)
                except DeviceMemoryError:  # no room for the smaller copy now: keep the big one
                    log.debug("arena group %r: keeps %d bytes", self.name, self.region.array.nbytes)
            if self.sizes or not self.shared:
                return
        with _GROUPS_LOCK:
            if _GROUPS.get((self.name, id(self.pool))) is self and not self.sizes:
                del _GROUPS[(self.name, id(self.pool))]

    def _resize(self, nbytes: int) -> None:
        """Replace the arena by one of `nbytes` (lock held; members rebuild their views)."""
        new = allocate(self.pool, nbytes)
        old, self.region = self.region, new
        if old.buffer is not None:
            old.release()
            self.pool.trim()  # the old arena's pages go back to the OS
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
