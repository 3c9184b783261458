"""Timed NPU sessions, shared by `litenpu demo` and the model benchmarks."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from provider.options import NpuOptions
from provider.ort import EP_NAME
from provider.session import CPU_EP, InferenceSession

NPU = [EP_NAME, CPU_EP]
CPU = [CPU_EP]


def cache_options(cache_dir: Path, model_name: str) -> dict[str, str]:
    """NPU options that put the compile cache in `cache_dir`, if this EP has a compile cache."""
    if "cache_dir" in NpuOptions.valid_keys():
        return {"cache_dir": str(cache_dir), "model_name": model_name}
    return {}


@dataclass(frozen=True)
class TimedSession:
    """A new NPU session, the seconds its creation took and the seconds of its first run."""

    session: InferenceSession
    open_s: float
    first_run_s: float

    @property
    def total_s(self) -> float:
        return self.open_s + self.first_run_s


def open_and_run(path: Path, options: dict[str, str], feeds: dict[str, np.ndarray]
                 ) -> TimedSession:
    """Create an NPU session on `path` and run it once, timing both (with dynamic dims the EP
    compiles on the first run, with concrete shapes; first runs also touch fresh memory)."""
    start = time.perf_counter()
    session = InferenceSession(str(path), providers=NPU, provider_options=[options, {}])
    opened = time.perf_counter()
    session.run(None, feeds)
    return TimedSession(session, opened - start, time.perf_counter() - opened)
