"""Creating a session beside onnxruntime's pinned intra-op threads.

With the intra-op thread count left at 0 (and no affinity entry), onnxruntime pins its
intra-op worker i to the i-th processor, leaving the first to the thread that runs the
session, and each new worker spins for a while before it sleeps (~9 ms on this project's
2-vCPU VM). A session's creation runs the EP's Python meanwhile (model import,
GetCapability's compile) on the creating thread; when the scheduler had left that thread on a
worker's processor, the two took turns in 4 ms time slices while the first processor idled:
a cold MobileNetV2 session with a cache to fill took 17.7 ms instead of 9.2 ms (medians of 9
creations in one process, measured both ways in a row). `to_first_cpu` moves the creating
thread to processor 0 just before onnxruntime builds the session; its mask is restored at
once, so no thread started later inherits a narrowed one, and a running thread stays where
it is.
"""

from __future__ import annotations

import os

import onnxruntime as ort

__all__ = ["pins_workers", "to_first_cpu"]

AFFINITY_KEY = "session.intra_op_thread_affinities"
SPINNING_KEY = "session.intra_op.allow_spinning"


def _entry(options: ort.SessionOptions, key: str) -> str | None:
    try:
        return options.get_session_config_entry(key)
    except RuntimeError:  # onnxruntime raises for a key that was never set
        return None


def pins_workers(options: ort.SessionOptions) -> bool:
    """Whether onnxruntime will pin spinning intra-op workers to processors after the first
    for a session with these options (its default thread count, no affinities, spinning)."""
    return (options.intra_op_num_threads == 0 and _entry(options, AFFINITY_KEY) is None
            and _entry(options, SPINNING_KEY) != "0")


def to_first_cpu() -> bool:
    """Move the calling thread to processor 0, keeping its affinity mask (setting a mask
    without the thread's processor migrates it at once). True when it moved or was there;
    False where the platform cannot, or the mask holds one processor or not processor 0
    (where onnxruntime's numbering of a narrowed mask is not known: left as it is)."""
    if not hasattr(os, "sched_setaffinity"):
        return False
    try:
        mask = os.sched_getaffinity(0)
        if len(mask) < 2 or 0 not in mask:
            return False
        try:
            os.sched_setaffinity(0, {0})
        finally:
            os.sched_setaffinity(0, mask)
    except OSError:
        return False
    return True
