"""What a conversion did: ops mapped, ops carried as Custom (and why), weight bytes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CustomNode:
    """One source node carried as `Custom` because it has no exact Lite mapping."""

    name: str
    op: str
    reason: str


@dataclass
class ConversionReport:
    """Summary of one conversion, filled in by the importer/exporter and the convert driver."""

    source: str = ""
    destination: str = ""
    mapped: Counter = field(default_factory=Counter)
    custom: list[CustomNode] = field(default_factory=list)
    weight_bytes: int = 0
    # provenance (ONNX import): per source node in order, the Lite nodes it became; the Lite
    # tensor of every source value (aliases included) and of every source initializer
    origins: list[list[int]] = field(default_factory=list)
    values: dict[str, int] = field(default_factory=dict)
    initializers: dict[str, int] = field(default_factory=dict)

    @property
    def mapped_count(self) -> int:
        return sum(self.mapped.values())

    def summary(self) -> str:
        """A few human-readable lines (what the CLI prints at the end)."""
        lines = [f"{self.source} -> {self.destination}" if self.destination else self.source,
                 f"  ops mapped: {self.mapped_count} ({len(self.mapped)} kinds)",
                 f"  ops carried as Custom: {len(self.custom)}",
                 f"  weight bytes: {self.weight_bytes:,}"]
        reasons = Counter(f"{c.op}: {c.reason}" for c in self.custom)
        lines += [f"    {n} x {why}" for why, n in reasons.most_common()]
        return "\n".join(lines)
