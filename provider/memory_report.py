"""The memory plan of a model file (`litenpu inspect --memory`), like RKNN_QUERY_MEM_SIZE.

A real NPU session is created on the file with every named dynamic dim fixed (1 unless
given), so each partition's Program is compiled at creation and its sizes are exact; a
model whose dims have no name is run once on zeros to compile its Programs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from provider.npu.session_memory import SessionMemoryInfo
from provider.npu.weights import block_bytes

__all__ = ["ProgramMemory", "MemoryPlan", "memory_plan", "format_memory"]


@dataclass(frozen=True)
class ProgramMemory:
    """One compiled partition: its weight blob, arena and graph I/O bytes."""

    name: str
    weights: int
    internal: int
    io: int


@dataclass(frozen=True)
class MemoryPlan:
    """A session's memory (see SessionMemoryInfo), per Program, and the dims it was planned at."""

    info: SessionMemoryInfo
    programs: list[ProgramMemory]
    dims: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"dims": self.dims, **asdict(self.info), "device_total": self.info.device_total,
                "programs": [asdict(p) for p in self.programs]}


def _named_dims(session: Any) -> list[str]:
    return sorted({d for i in session.get_inputs() for d in i.shape if isinstance(d, str)})


def memory_plan(path: Path, options: dict[str, str] | None = None,
                dims: dict[str, int] | None = None) -> MemoryPlan:
    """Create an NPU session on `path` at fixed dims and report its memory."""
    import onnxruntime as ort

    from provider.ort.tensors import ORT_TYPE_TO_NUMPY
    from provider.session import CPU_EP, EP_NAME, InferenceSession

    def session(fixed: dict[str, int]) -> InferenceSession:
        quiet = ort.SessionOptions()
        quiet.log_severity_level = 3
        for name, value in fixed.items():
            quiet.add_free_dimension_override_by_name(name, value)
        return InferenceSession(str(path), quiet, providers=[EP_NAME, CPU_EP],
                                provider_options=[options or {}, {}])

    sess = session(dict(dims or {}))
    fixed = {name: (dims or {}).get(name, 1) for name in _named_dims(sess)}
    if fixed:
        sess = session(fixed)
    if sess._npu_eps and not _programs(sess):
        feeds = {i.name: np.zeros([d if isinstance(d, int) and d >= 0 else 1 for d in i.shape],
                                  ORT_TYPE_TO_NUMPY.get(i.type, np.float32)) for i in sess.get_inputs()}
        sess.run(None, feeds)
    programs = [ProgramMemory(p.name, block_bytes(p.weight_bytes), block_bytes(p.internal_bytes),
                              p.io_bytes) for p in _programs(sess)]
    return MemoryPlan(sess.memory_info(), programs, fixed)


def _programs(sess: Any) -> list:
    return [e.program for ep in sess._npu_eps for e in ep.memory.executors]


def format_memory(plan: MemoryPlan) -> str:
    """Human-readable memory plan: totals, then one line per Program."""
    info = plan.info
    at = ", ".join(f"{k}={v}" for k, v in plan.dims.items())
    lines = [f"memory{f' (at {at})' if at else ''}: weights {info.weights}, internal "
             f"{info.internal}, I/O {info.io}, total {info.total} bytes",
             f"  device now: weights {info.device_weights}, internal {info.device_internal}, "
             f"staging {info.device_staging} bytes; pool in use {info.pool_in_use}"]
    lines += [f"  program {p.name or '?'}: weights {p.weights}, internal {p.internal}, I/O {p.io}"
              for p in plan.programs]
    return "\n".join(lines)

