"""Waiting for the NPU's worker cores in tests that check a run's tasks were shared."""

from __future__ import annotations

import time
from collections.abc import Callable

from provider.npu import native


def run_until_a_worker_helps(run: Callable[[], object], before: int, seconds: float = 10.0) -> None:
    """Call `run` until the worker cores have run a task since `native.worker_tasks()` was
    `before`, or `seconds` have passed (the caller then asserts). A worker that wakes late
    finds every task taken by the calling thread, and on a loaded 2-core machine (a CI's
    other jobs) it missed 200 runs in a row: a deadline, not a count of tries."""
    deadline = time.monotonic() + seconds
    while True:
        run()
        if native.worker_tasks() > before or time.monotonic() > deadline:
            return
