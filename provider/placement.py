"""Where a session's nodes run, summarised: the one text `partition_summary()`, `litenpu
inspect` and the benchmarks print.

`NodePlacement` is one node on the NPU (with its partition) or on CPU (with the reason the NPU
did not take it). `PlacementSummary` counts them and groups the CPU nodes by reason (the
reason with the names it quotes elided, so one cause on many nodes is one group); its
`text()` is

    NPUExecutionProvider: 230 of 234 nodes on the NPU in 2 partition(s), 4 on CPU
      CPU  if_1 (If): inside a control-flow subgraph ...
      CPU  3 x Reshape: Reshape: input 1 (…) is computed at run time (reshape_2, reshape_5, ...)
      NPU  NPUExecutionProvider_..._0: compiled for 2 input shape(s)

the last lines once runs happened: a partition with dynamic input shapes is compiled per
concrete shape (an LRU of `max_shapes` Programs), and says for how many so far.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from provider.ort import EP_NAME

__all__ = ["NodePlacement", "PlacementSummary", "reason_group"]

_QUOTED = re.compile(r"'[^']*'")
_NAMES_SHOWN = 3


@dataclass(frozen=True)
class NodePlacement:
    """Where one node runs: "NPU" (and in which partition) or "CPU" (and why)."""

    name: str
    op_type: str
    device: str
    partition: int | None = None
    reason: str = ""


def reason_group(op_type: str, reason: str) -> str:
    """A CPU reason without the tensor and node names it quotes, so that the same cause on
    many nodes counts as one group."""
    return f"{op_type}: {_QUOTED.sub('…', reason)}"


@dataclass(frozen=True)
class PlacementSummary:
    """Counts of a session's placement and its CPU nodes grouped by reason."""

    nodes: int
    npu_nodes: int
    partitions: int
    cpu_groups: dict[str, list[NodePlacement]] = field(default_factory=dict)  # by reason_group
    failures: tuple[str, ...] = ()  # graphs the EP could not read at all
    shapes: dict[str, int] = field(default_factory=dict)  # fused partition -> input shapes compiled

    @classmethod
    def of(cls, nodes: Sequence[NodePlacement], failures: Sequence[str] = (),
           shapes: Mapping[str, int] | None = None) -> PlacementSummary:
        npu = [n for n in nodes if n.device == "NPU"]
        groups: dict[str, list[NodePlacement]] = {}
        for node in nodes:
            if node.device != "NPU":
                groups.setdefault(reason_group(node.op_type, node.reason), []).append(node)
        ordered = dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))
        return cls(len(nodes), len(npu), len({n.partition for n in npu}), ordered,
                   tuple(failures), dict(shapes or {}))

    @property
    def reasons(self) -> Counter:
        """CPU nodes per reason group."""
        return Counter({reason: len(nodes) for reason, nodes in self.cpu_groups.items()})

    def top_reasons(self, count: int = 3, width: int = 70) -> str:
        """The `count` most common CPU reasons, e.g. `12x Range: no Lite mapping ...`."""
        return "; ".join(f"{n}x {reason[:width]}"
                         for reason, n in self.reasons.most_common(count)) or "-"

    def brief(self) -> str:
        """One line: partitions, NPU nodes of all, the most common CPU reasons."""
        return (f"{self.partitions} partition(s), {self.npu_nodes}/{self.nodes} nodes on the "
                f"NPU; CPU: {self.top_reasons()}")

    def text(self) -> str:
        """The summary's lines: counts, then one line per group of CPU nodes."""
        lines = [f"{EP_NAME}: {self.npu_nodes} of {self.nodes} nodes on the NPU in "
                 f"{self.partitions} partition(s), {self.nodes - self.npu_nodes} on CPU"]
        for reason, group in self.cpu_groups.items():
            if len(group) == 1:
                node = group[0]
                lines.append(f"  CPU  {node.name} ({node.op_type}): {node.reason}")
                continue
            names = ", ".join(n.name for n in group[:_NAMES_SHOWN])
            more = ", ..." if len(group) > _NAMES_SHOWN else ""
            lines.append(f"  CPU  {len(group)} x {reason} ({names}{more})")
        lines += [f"  graph not claimed: {failure}" for failure in self.failures]
        lines += [f"  NPU  {name}: compiled for {n} input shape(s)" for name, n in self.shapes.items()]
        return "\n".join(lines)
