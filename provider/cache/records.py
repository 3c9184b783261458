"""What the compile cache reports: where a Program came from (`CacheStatus`, `CacheOutcome`,
`PartitionCacheStats` per NPU partition) and what an entry is (`EntryInfo`, `litenpu cache ls`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from pathlib import Path

from provider.cache.writer import Pending

__all__ = ["CacheStatus", "CacheOutcome", "PartitionCacheStats", "EntryInfo", "CONTEXT", "OFF"]


class CacheStatus(str, enum.Enum):
    """Where get_or_compile's Program came from."""

    HIT = "hit"  # mapped from a valid entry; compile_fn not called
    MISS = "miss"  # no entry: compiled, stored, mapped from the new entry
    REBUILT = "rebuilt"  # a bad entry (reason given): compiled and replaced
    IN_MEMORY = "in-memory"  # compiled; the cache could not store it (reason given)


@dataclass(frozen=True)
class CacheOutcome:
    """What get_or_compile did and what it cost.

    `load_seconds` covers the entry lookup and Program mapping (on a miss: mapping the new
    entry). `pages_touched` counts weight pages mapped into this process when the Program is
    returned (residency.pages_present: pagemap present bits, fault-around included); None
    for an in-memory Program or without /proc/self/pagemap. `weight_pages` is the total.
    `written`: the background write of a compiled Program still to be settled (`settled`).
    """

    status: CacheStatus
    reason: str
    compile_seconds: float
    load_seconds: float
    pages_touched: int | None
    weight_pages: int
    entry: Path | None
    written: Pending | None = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        """One line for logs and reports, e.g. 'hit: loaded in 0.4 ms, 15/170 weight pages'."""
        facts = []
        if self.compile_seconds:
            facts.append(f"compiled in {self.compile_seconds * 1e3:.1f} ms")
        if self.entry is not None:
            facts.append(f"loaded in {self.load_seconds * 1e3:.1f} ms")
        if self.pages_touched is not None:
            facts.append(f"{self.pages_touched}/{self.weight_pages} weight pages mapped")
        text = f"{self.status.value}: {', '.join(facts)}"
        return f"{text} ({self.reason})" if self.reason else text


# statuses besides CacheStatus values: "context" (built from an EPContext node), "off" (no cache)
CONTEXT, OFF = "context", "off"


@dataclass(frozen=True)
class PartitionCacheStats:
    """Where one NPU partition's Program came from and what that cost
    (what `InferenceSession.cache_stats()` lists)."""

    partition: str  # the fused node's name
    input_shapes: dict[str, tuple[int, ...]]
    status: str  # hit | miss | rebuilt | in-memory | context | off
    reason: str  # why a miss was rebuilt / kept in memory ('' when nothing went wrong)
    load_seconds: float  # entry lookup + mapping (hit, context) or mapping the new entry
    compile_seconds: float  # import + compile (0 on a hit or from a context)
    pages_touched: int | None  # weight pages mapped into this process when handed over
    weight_pages: int
    entry: str | None  # the cache entry directory (None: in memory)
    written: Pending | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, partition: str, shapes: dict[str, tuple[int, ...]],
           outcome: CacheOutcome) -> PartitionCacheStats:
        """The record of one get_or_compile outcome."""
        return cls(partition, dict(shapes), outcome.status.value, outcome.reason,
                   outcome.load_seconds, outcome.compile_seconds, outcome.pages_touched,
                   outcome.weight_pages, str(outcome.entry) if outcome.entry else None,
                   outcome.written)

    def settled(self) -> PartitionCacheStats:
        """This record once its background write is done (waits for it): as it was, or
        in-memory with the write's error added to the reason when the entry could not be
        stored."""
        if self.written is None:
            return self
        error = self.written.error()
        if error is None:
            return replace(self, written=None)
        return replace(self, status=CacheStatus.IN_MEMORY.value, entry=None, written=None,
                       reason=f"{self.reason}; {error}" if self.reason else str(error))


@dataclass(frozen=True)
class EntryInfo:
    """One entry as `litenpu cache ls` shows it; `problem` is set when its manifest is bad."""

    name: str
    path: Path
    model_name: str
    program_name: str
    cache_version: str
    size: int
    created: float | None
    last_used: float
    problem: str | None
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # the Program's (per-shape entries)

    def shapes_text(self) -> str:
        """The input shapes as `name=1x3x64x64,...` ('-' for an entry without inputs, e.g. a
        CacheSession's)."""
        return ",".join(f"{name}={'x'.join(map(str, dims)) or 'scalar'}"
                        for name, dims in self.input_shapes) or "-"
