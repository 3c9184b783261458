"""The NPU's steps in the profile: one event per step (name, op, shape, time) per run.

While profiling is on, each NPU kernel run hands its Executor a `step_stamps` record, which
the run loop fills with each step's start and end (the native steps stamp themselves in C,
CLOCK_MONOTONIC nanoseconds); the kernel records it here after the run, with the run's
performance mode. Nothing is recorded or timed when profiling is off.

Where onnxruntime lets a plugin EP profile (API 25+: `OrtEp::CreateProfiler`), its session
profiler starts and ends ours (`SessionOptions.enable_profiling`) and the events land in its
profile JSON, on its timeline. Elsewhere (onnxruntime 1.23) the EP writes its own trace file,
`<profile_file_prefix>_<date>_<time>.json` in the same format, when the provider option
`profile_file_prefix` is set (`provider.InferenceSession` sets it from `enable_profiling`):
its timeline starts when the session's EP was created. Either way a step event is
`{"cat": "Kernel", "ph": "X", "name": <the step's output>, "ts", "dur" (microseconds),
"args": {"op_name", "shape", "partition", "step", "perf_mode", "provider"}}`.
"""

from __future__ import annotations

import ctypes as C
import datetime
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from provider.npu.program import Program
from provider.ort import EP_NAME, abi
from provider.ort.callbacks import address, keep, status_callback, value_callback

__all__ = ["KERNEL_CATEGORY", "HOOK_SINCE", "StepProfiler", "npu_step_events", "step_info",
           "top_steps", "write_trace", "create_hook"]

KERNEL_CATEGORY = 2  # OrtProfilingEventCategory_KERNEL ("Kernel" in the JSON)
HOOK_SINCE = 25  # onnxruntime API version of OrtEp::CreateProfiler and OrtEpProfilerImpl

StepInfo = tuple[tuple[str, str, str], ...]  # per step: (name, op, output shape)


def step_info(program: Program) -> StepInfo:
    """What a profile says of each step: the tensor it writes, its kernel, that tensor's
    shape."""
    rows = []
    for step in program.steps:
        out = program.slots[step.outputs[0]] if step.outputs else None
        rows.append((out.name if out else f"step{len(rows)}", step.kernel,
                     str(list(out.shape)) if out else "[]"))
    return tuple(rows)


class StepProfiler:
    """One EP's NPU step times while profiling is on (`start` .. `stop`), thread-safe."""

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self.on_change = on_change  # called after start and stop (the EP's RunControl)
        self.active = False  # read without the lock on the run path: a run started after
        self._origin_ns = 0  # `start` records, one ending after `stop` is dropped
        self._runs: list[tuple] = []
        self._lock = threading.Lock()

    def start(self, origin_ns: int) -> None:
        """Record from now; event times count from `origin_ns` (CLOCK_MONOTONIC)."""
        with self._lock:
            self._origin_ns, self._runs, self.active = origin_ns, [], True
        self.on_change()

    def record(self, partition: str, steps: StepInfo, stamps: np.ndarray, mode: str) -> None:
        """One run of a partition: its steps' (start, end) stamps and its performance mode."""
        with self._lock:
            if self.active:
                self._runs.append((partition, steps, stamps, mode, threading.get_native_id()))

    def stop(self) -> list[dict]:
        """Stop recording; the events recorded since `start`, in run order."""
        with self._lock:
            runs, origin, self._runs, self.active = self._runs, self._origin_ns, [], False
        self.on_change()
        pid, events = os.getpid(), []
        for partition, steps, stamps, mode, tid in runs:
            # ts and end rounded to whole microseconds, dur their difference: the durations
            # of a run add up to its span (no rounding bias over thousands of short steps)
            us = np.rint((stamps - origin) / 1000).astype(np.int64)
            for index, (name, op, shape) in enumerate(steps):
                events.append({
                    "cat": "Kernel", "pid": pid, "tid": tid, "dur": int(us[index, 1] - us[index, 0]),
                    "ts": int(us[index, 0]), "ph": "X", "name": name,
                    "args": {"op_name": op, "shape": json.loads(shape), "partition": partition,
                             "step": str(index), "perf_mode": mode, "provider": EP_NAME}})
        return events


def npu_step_events(trace: list[dict]) -> list[dict]:
    """The NPU step events of a profile JSON (onnxruntime's or the EP's own trace file)."""
    return [e for e in trace if e.get("cat") == "Kernel"
            and (e.get("args") or {}).get("provider") == EP_NAME]


def top_steps(events: list[dict], count: int = 10) -> list[dict]:
    """The `count` steps that took the most time over all runs, each with its total and mean
    microseconds, runs and share of all NPU step time."""
    steps: dict[tuple, dict] = {}
    for e in events:
        args = e["args"]
        row = steps.setdefault((args["partition"], args["step"]), {
            "name": e["name"], "op": args["op_name"], "shape": args["shape"],
            "partition": args["partition"], "total_us": 0, "runs": 0})
        row["total_us"] += e["dur"]
        row["runs"] += 1
    everything = sum(r["total_us"] for r in steps.values()) or 1
    rows = sorted(steps.values(), key=lambda r: -r["total_us"])[:count]
    for r in rows:
        r["mean_us"], r["share"] = r["total_us"] / r["runs"], r["total_us"] / everything
    return rows


def write_trace(prefix: str, events: list[dict]) -> Path:
    """The EP's own trace file, `<prefix>_<date>_<time>.json` (onnxruntime's naming), written
    whole or not at all."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    path = Path(f"{prefix}_{stamp}.json")
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(events))
    os.replace(partial, path)
    return path


# ---- onnxruntime's profiler hook (API 25+) ----------------------------------------------------

_HOOKS: dict[int, _Hook] = keep({})  # kept, as ep._EPS


class _Hook:
    """An OrtEpProfilerImpl onnxruntime owns (until Release) over one EP's StepProfiler."""

    def __init__(self, ort: abi.Ort, profiler: StepProfiler):
        self.ort, self.profiler = ort, profiler
        s = self.struct = abi.OrtEpProfilerImpl()
        s.ort_version_supported = ort.api_version
        s.Release = address(_release)
        s.StartProfiling = address(_start_profiling)
        s.EndProfiling = address(_end_profiling)  # StartEvent/StopEvent: not needed (NULL)
        self.address = C.addressof(s)
        _HOOKS[self.address] = self

    def end(self, container: int) -> None:
        """Hand the recorded events to onnxruntime's profile."""
        ep_api = self.ort.ep
        for event in self.profiler.stop():
            args = event["args"]
            keys = (C.c_char_p * len(args))(*(k.encode() for k in args))
            values = (C.c_char_p * len(args))(*(  # onnxruntime writes a JSON-looking value as is
                (v if isinstance(v, str) else json.dumps(v)).encode() for v in args.values()))
            out = abi.vp()
            ep_api.CreateProfilingEvent(KERNEL_CATEGORY, event["pid"], event["tid"],
                                        event["name"].encode(), event["ts"], event["dur"],
                                        keys, values, len(args), C.byref(out))
            try:
                ep_api.ProfilingEventsContainer_AddEvents(container, C.byref(out), 1)
            finally:
                ep_api.ReleaseProfilingEvent(out)


def create_hook(ort: abi.Ort, profiler: StepProfiler) -> int:
    """A new OrtEpProfilerImpl for onnxruntime (OrtEp::CreateProfiler), its address."""
    return _Hook(ort, profiler).address


@value_callback(abi.P_PROFILER_RELEASE, "EpProfiler.Release")
def _release(this):
    _HOOKS.pop(this, None)


@status_callback(abi.P_START_PROFILING, "EpProfiler.StartProfiling")
def _start_profiling(this, offset_ns):
    # onnxruntime's profiling started offset_ns ago: our origin on our clock
    _HOOKS[this].profiler.start(time.monotonic_ns() - offset_ns)


@status_callback(abi.P_END_PROFILING, "EpProfiler.EndProfiling")
def _end_profiling(this, container):
    _HOOKS[this].end(container)
