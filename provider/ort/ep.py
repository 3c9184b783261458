"""OrtEp: one per session; claims NPU partitions (GetCapability) and compiles them (Compile).

GetCapability never fails a session: a node the NPU cannot take stays on onnxruntime's CPU
kernels and the reason is recorded (`NpuEp.placements`) and logged. Compile turns each fused
partition into a `provider.ort.compute.FusedKernel` (Lite IR -> NPU Program -> Executor).
Where onnxruntime asks (API version 24 on), the EP says runs of a session may overlap: they
do, each in its own arena (shared memory groups take turns inside the EP).
"""

from __future__ import annotations

import ctypes as C
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from converters.lite.ir import LiteModel
from provider.cache import CompileCache
from provider.npu.memory import ensure_default_pool
from provider.npu.session_memory import SessionMemory
from provider.options import NpuOptions
from provider.ort import abi, clib, compatibility, epcontext, profiling, session_link
from provider.ort.callbacks import CString, address, keep, status_callback, value_callback
from provider.ort.capability import (
    Claim,
    ImportedGraph,
    Placement,
    Whole,
    claim,
    import_partition,
)
from provider.ort.compute import FusedKernel
from provider.ort.graph import OrtGraphContents
from provider.ort.partition_source import PartitionSource, compile_counted
from provider.ort.run_modes import RUN_KEY, PerfModes

log = logging.getLogger("litenpu.ort")

STRICT_KEY = "session.disable_cpu_ep_fallback"


@dataclass
class Counters:
    """What an EP did, for tests and benchmarks: graphs imported to Lite IR (GetCapability's
    one per graph, plus any partition Compile had to import itself, plus a stored dynamic
    partition's Lite IR read to compile a new shape), Programs compiled, and seconds spent
    per stage ("read": GetCapability reading onnxruntime's graph, "import", "assess",
    "compile", "cache": lookups and stores, "kernel": the rest of Compile, e.g. building an
    Executor's native plan)."""

    imports: int = 0
    compiles: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def spent(self, stage: str, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds

    def total(self) -> float:
        """Seconds counted so far over every stage."""
        return sum(self.seconds.values())


class NpuEp:
    """The execution provider instance onnxruntime creates for one session."""

    def __init__(self, factory, options: dict[str, str], config: dict[str, str]):
        self.factory = factory
        self.ort: abi.Ort = factory.ort
        link = session_link.find(config)  # a provider.InferenceSession's parsed options
        self.options = link.options if link is not None else NpuOptions.parse(options)
        if self.options.memory.device_memory_bytes:  # before anything takes the pool
            ensure_default_pool(self.options.memory.device_memory_bytes)
        self.memory = SessionMemory(self.options, link.family if link is not None else None)
        self.context = epcontext.ContextOptions.from_config(config)
        self.strict = config.get(STRICT_KEY) == "1"  # onnxruntime refuses nodes left on CPU
        self.cache = CompileCache.from_options(self.options.cache)  # None: compile in memory
        # PartitionCacheStats of the Programs the kernels got (the latest, when shapes churn)
        self.cache_stats: deque = deque(maxlen=1024)
        self.placements: list[Placement] = []
        self.imported: list[ImportedGraph] = []  # what GetCapability imported, for Compile
        self.counters = Counters()
        self.kernels: dict[int, object] = {}  # OrtNodeComputeInfo address -> FusedKernel
        self._lock = threading.Lock()
        s = self.struct = abi.OrtEp()
        s.ort_version_supported = self.ort.api_version
        s.GetName = address(_get_name)
        s.GetCapability = address(_get_capability)
        s.Compile = address(_compile)
        s.ReleaseNodeComputeInfos = address(_release_node_compute_infos)
        self.compatibility = CString(compatibility.info(self.options.compile))
        s.GetCompiledModelCompatibilityInfo = address(_get_compatibility_info)
        # nonzero: the fused kernels' runs take the Python Compute (csrc/compute.c), while
        # they need step stamps (profiling) or a performance mode other than the plans'
        self.run_control = C.c_int(0)
        self.perf_modes = PerfModes(self.options.runtime, self.update_run_control)
        s.SetDynamicOptions = address(_set_dynamic_options)
        # in C: only a run carrying a performance mode enters Python (_on_run_start)
        clib.library().litenpu_set_run_hooks(address(_on_run_start), address(_on_run_end),
                                             RUN_KEY.encode())
        s.OnRunStart = clib.function("litenpu_on_run_start")
        s.OnRunEnd = clib.function("litenpu_on_run_end")
        self.profiler = profiling.StepProfiler(self.update_run_control)
        self.trace_prefix = self.options.runtime.profile_file_prefix
        if self.trace_prefix is not None:  # the EP's own trace file, from now to the end
            self.profiler.start(time.monotonic_ns())
        elif self.ort.api_version >= profiling.HOOK_SINCE:  # onnxruntime's profiler drives ours
            s.CreateProfiler = address(_create_profiler)
        if self.ort.api_version >= abi.IS_CONCURRENT_RUN_SUPPORTED_SINCE:
            s.IsConcurrentRunSupported = clib.function("litenpu_concurrent_run_supported")
        self.address: int = C.addressof(s)
        _EPS[self.address] = self
        if link is not None:
            link.eps.append(self)

    def update_run_control(self) -> None:
        """Send the kernels' runs to the Python Compute while they need it."""
        self.run_control.value = int(self.profiler.active or self.perf_modes.diverting())

    def close(self) -> None:
        _EPS.pop(self.address, None)
        self.end_trace()

    def end_trace(self) -> Path | None:
        """With `profile_file_prefix`: write the NPU steps recorded so far to the EP's own
        trace file and stop recording; its path (None when no NPU step ran)."""
        if self.trace_prefix is None or not self.profiler.active:
            return None
        events = self.profiler.stop()
        if not events:  # e.g. the EP of a warm attempt that fell back: it ran nothing
            return None
        path = profiling.write_trace(self.trace_prefix, events)
        log.info("NPUExecutionProvider: NPU step trace written to %s", path)
        return path

    def get_capability(self, graph: int, support_info: int) -> None:
        try:
            answer = claim(self.ort, graph, self.options, self.compile_whole)
        except Exception as e:  # noqa: BLE001 - an unreadable graph stays on CPU, never fails
            log.warning("NPUExecutionProvider GetCapability: claiming nothing: %s: %s",
                        type(e).__name__, e, exc_info=e)
            answer = Claim(Placement(failure=f"{type(e).__name__}: {e}"), [])
        if self.strict and answer.placement.cpu:
            log.warning("%s=1: onnxruntime will refuse this session: the NPU does not take "
                        "%s", STRICT_KEY, "; ".join(f"{n}: {r}" for n, r in
                                                     answer.placement.cpu.items()))
        with self._lock:
            self.placements.append(answer.placement)
            for stage, seconds in answer.seconds.items():
                self.counters.spent(stage, seconds)
            if answer.imported is not None:
                self.counters.imports += 1
                self.imported.insert(0, answer.imported)  # the latest answer first
        fusion = abi.OrtNodeFusionOptions(self.ort.api_version, True)
        for nodes in answer.groups:
            array = (abi.vp * len(nodes))(*nodes)
            self.ort.ep.EpGraphSupportInfo_AddNodesToFuse(support_info, array, len(nodes),
                                                          C.byref(fusion))

    def compile_whole(self, lite: LiteModel, shapes: dict[str, tuple[int, ...]]) -> Whole | None:
        """GetCapability's compile of a graph the NPU may take whole (`capability.claim`),
        unless a clone relative holds its Programs or the compile cache has its entry (then
        Compile gets them as before). A refusal is no error here: the device is then asked
        node by node, and Compile reports what a compile raises."""
        if self.memory.family.programs:
            return None
        fingerprint = None
        if self.cache is not None:
            source = PartitionSource.held(self, lite.name, lite)
            if self.cache.has(source.keys.key(shapes)):
                return None
            fingerprint = source.descriptor.fingerprint
        start = time.perf_counter()
        try:
            program = compile_counted(self.counters, lite, shapes, self.options.compile,
                                      self.memory.weight_allocator(per_shape=False))
        except Exception as e:  # noqa: BLE001 - a refusal, or a bug assess will localise
            log.debug("NPUExecutionProvider: the whole graph does not compile (%s: %s); "
                      "asking the NPU node by node", type(e).__name__, e)
            return None
        return Whole(lite, shapes, program, time.perf_counter() - start, fingerprint)

    def adopt_whole(self, inputs: list[str], outputs: list[str]) -> Whole | None:
        """GetCapability's Program of the whole graph, if the fused node is that graph."""
        with self._lock:
            return next((w for w in (g.adopt(inputs, outputs) for g in self.imported) if w),
                        None)

    def compile(self, graphs: list[int], fused_nodes: list[int], infos, ep_context_nodes) -> None:
        try:
            for i, (graph, fused) in enumerate(zip(graphs, fused_nodes, strict=True)):
                self._compile_one(i, graph, fused, infos, ep_context_nodes)
        finally:
            with self._lock:  # onnxruntime frees the initializers the imports point into
                self.imported.clear()

    def _compile_one(self, i: int, graph: int, fused: int, infos, ep_context_nodes) -> None:
        start, counted = time.perf_counter(), self.counters.total()
        kernel = FusedKernel.build(self, graph, fused)
        # what the stages the build went through (import, compile, cache) did not count
        self.counters.spent("kernel", time.perf_counter() - start - (self.counters.total() - counted))
        with self._lock:
            self.kernels[kernel.address] = kernel
        infos[i] = kernel.address
        if self.context.enable and ep_context_nodes:
            # embed mode 0 references the Program's cache entry when there is one
            by_entry = not self.context.embed and kernel.cache_entry is not None
            ep_context_nodes[i], kernel.context_written = epcontext.create_node(
                self.ort, kernel.name, kernel.input_names, kernel.output_names,
                kernel.cache_entry if by_entry else kernel.context_blob, self.context)

    def partition(self, contents: OrtGraphContents, inputs: list[str], outputs: list[str],
                  name: str, in_full: Callable[[], OrtGraphContents]) -> LiteModel:
        """A fused partition's Lite IR: cut from what GetCapability imported, or, when no
        import holds all its nodes, imported now (counted) from `in_full()`, the partition
        read again with its nodes' attributes (`contents` may name the nodes only)."""
        with self._lock:
            imported = list(self.imported)
        for graph in imported:
            lite = graph.partition(contents, inputs, outputs, name)
            if lite is not None:
                return lite
        log.info("NPU partition %s: not in GetCapability's import; importing it", name)
        self.counters.imports += 1
        return import_partition(in_full(), name)

    def release_kernels(self, addresses: list[int]) -> None:
        with self._lock:
            for a in addresses:
                kernel = self.kernels.pop(a, None)
                if kernel is not None:
                    kernel.close()


_EPS: dict[int, NpuEp] = keep({})  # kept: an EP onnxruntime frees at exit points into it


def _ep(this: int) -> NpuEp:
    return _EPS[this]


@value_callback(abi.P_STRING, "Ep.GetName")
def _get_name(this):
    return _ep(this).factory.string("name")


@status_callback(abi.P_GET_CAPABILITY, "Ep.GetCapability")
def _get_capability(this, graph, support_info):
    _ep(this).get_capability(graph, support_info)


@status_callback(abi.P_COMPILE, "Ep.Compile")
def _compile(this, graphs, fused_nodes, count, infos, ep_context_nodes):
    _ep(this).compile([graphs[i] for i in range(count)], [fused_nodes[i] for i in range(count)],
                      infos, ep_context_nodes)


@value_callback(abi.P_RELEASE_NODE_COMPUTE_INFOS, "Ep.ReleaseNodeComputeInfos")
def _release_node_compute_infos(this, infos, count):
    ep = _EPS.get(this)
    if ep is not None:
        ep.release_kernels([infos[i] for i in range(count)])


@value_callback(abi.P_COMPATIBILITY_INFO, "Ep.GetCompiledModelCompatibilityInfo")
def _get_compatibility_info(this, graph):
    return _ep(this).compatibility.address


@status_callback(abi.P_SET_DYNAMIC_OPTIONS, "Ep.SetDynamicOptions")
def _set_dynamic_options(this, keys, values, count):
    _ep(this).perf_modes.set_dynamic({keys[i].decode(): values[i].decode()
                                      for i in range(count)})


@status_callback(abi.P_ON_RUN_START, "Ep.OnRunStart")
def _on_run_start(this, run_options):
    ep = _ep(this)
    value = ep.ort.api.GetRunConfigEntry(run_options, RUN_KEY.encode())
    ep.perf_modes.run_started(None if value is None else value.decode())


@status_callback(abi.P_ON_RUN_END, "Ep.OnRunEnd")
def _on_run_end(this, run_options, sync_stream):
    _ep(this).perf_modes.run_ended()


@status_callback(abi.P_CREATE_PROFILER, "Ep.CreateProfiler")
def _create_profiler(this, out):
    ep = _ep(this)
    out[0] = profiling.create_hook(ep.ort, ep.profiler)
