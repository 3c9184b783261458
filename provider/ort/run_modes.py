"""Performance modes of the NPU EP: per session, changed by dynamic options, and per run.

A mode (`provider.options.PERF_MODES`) sets how many of the NPU's cores a run may use
(`RuntimeOptions.cores`). The session's is its `npu_perf_mode` provider option;
`SetEpDynamicOptions` (Python: `session.set_ep_dynamic_options({...})`) replaces it for later
runs, with our key `npu_perf_mode` or onnxruntime's generic `ep.dynamic.workload_type`
(`Default` / `Efficient`, i.e. low power). One run asks for its own with the run config entry
`ep.npuexecutionprovider.npu_perf_mode` (`RunOptions.add_run_config_entry`): onnxruntime hands
the run options to OnRunStart, not to the kernels, so the mode is kept per calling thread until
OnRunEnd; a kernel running on another thread (onnxruntime's parallel executor) takes the mode
of the runs in progress when they agree, else the session's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from provider.options import InvalidOptionError, NpuOptions, RuntimeOptions
from provider.ort import CONFIG_PREFIX

__all__ = ["RUN_KEY", "WORKLOAD_KEY", "PerfModes"]

log = logging.getLogger("litenpu.ort")

OPTION = "npu_perf_mode"
RUN_KEY = CONFIG_PREFIX + OPTION  # run config entry (and provider option as a config entry)
WORKLOAD_KEY = "ep.dynamic.workload_type"  # onnxruntime's generic dynamic option
WORKLOADS = {"default": "default", "efficient": "low_power"}


def _mode(key: str, value: str) -> str:
    """`value` of our option, run entry or onnxruntime's workload type, as a performance mode
    (InvalidOptionError naming the key and what is accepted otherwise)."""
    if key == WORKLOAD_KEY:
        mode = WORKLOADS.get(value.strip().lower())
        if mode is None:
            raise InvalidOptionError(f"dynamic option {key}={value!r}: expected Default or "
                                     "Efficient")
        return mode
    return NpuOptions.parse({OPTION: value}).runtime.npu_perf_mode


class PerfModes:
    """One EP's performance modes: the session's, and those of the runs in progress."""

    def __init__(self, runtime: RuntimeOptions, on_change: Callable[[], None] = lambda: None):
        self.runtime = runtime
        self.on_change = on_change  # called after the modes changed (the EP's RunControl)
        self.session = runtime.npu_perf_mode
        self._runs: dict[int, str | None] = {}  # thread ident -> its run's mode (None: session)
        self._lock = threading.Lock()

    def set_dynamic(self, options: dict[str, str]) -> None:
        """SetEpDynamicOptions: our keys change the session's mode (others are other EPs')."""
        for key, value in options.items():
            if key in (OPTION, RUN_KEY, WORKLOAD_KEY):
                self.session = _mode(key, value)
                log.info("NPUExecutionProvider: performance mode %s (dynamic option %s=%s)",
                         self.session, key, value)
        self.on_change()

    def run_started(self, value: str | None) -> None:
        """OnRunStart: the run's config entry `RUN_KEY` (None: the session's mode)."""
        mode = None if value is None else _mode(RUN_KEY, value)
        with self._lock:
            self._runs[threading.get_ident()] = mode
        self.on_change()

    def run_ended(self) -> None:
        """OnRunEnd."""
        with self._lock:
            self._runs.pop(threading.get_ident(), None)
        self.on_change()

    def diverting(self) -> bool:
        """Runs need the Python Compute: the session's mode changed since the plans were
        built, or a run in progress asked for a mode of its own."""
        with self._lock:
            return (self.session != self.runtime.npu_perf_mode
                    or any(mode is not None for mode in self._runs.values()))

    def current(self) -> str:
        """The mode of the run calling a kernel now."""
        with self._lock:
            ident = threading.get_ident()
            if ident in self._runs:  # the run's own thread
                return self._runs[ident] or self.session
            running = {mode or self.session for mode in self._runs.values()}
        return running.pop() if len(running) == 1 else self.session
