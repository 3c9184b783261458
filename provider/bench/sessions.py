"""Timed NPU sessions, shared by `litenpu demo` and the model benchmarks."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from provider.ort import EP_NAME
from provider.ort.options import NpuOptions
from provider.session import CPU_EP, InferenceSession

NPU = [EP_NAME, CPU_EP]


def cache_options(cache_dir: Path, model_name: str) -> dict[str, str]:
    """NPU options that put the compile cache in `cache_dir`, if this EP has a compile cache."""
    if "cache_dir" in NpuOptions.valid_keys():
        return {"cache_dir": str(cache_dir), "model_name": model_name}
    return {}


def open_and_run(path: Path, options: dict[str, str], feeds: dict[str, np.ndarray]
                 ) -> tuple[float, InferenceSession]:
    """Seconds to create an NPU session on `path` and finish its first run (the EP compiles
    on the first run with concrete shapes), and the session."""
    start = time.perf_counter()
    session = InferenceSession(str(path), providers=NPU, provider_options=[options, {}])
    session.run(None, feeds)
    return time.perf_counter() - start, session
