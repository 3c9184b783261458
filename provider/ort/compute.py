"""OrtNodeComputeInfo: one fused NPU partition, compiled and run on onnxruntime's tensors.

Compile adopts the Program GetCapability compiled for a graph the NPU takes whole, or cuts
the partition from GetCapability's import, or restores it from one of our
EPContext nodes (a Program embedded or in a cache entry; for dynamic shapes, the partition's
descriptor and Lite IR, `provider.ort.partition_payload`). Static shapes: the Program is got
now. Dynamic dims: the partition's weights are copied (onnxruntime may drop its initializers
after fusing) and a Program is got on the first run with each concrete input-shape
combination and kept in memory with its Executor. Where a Program comes from (the compile
cache by key, else a compile; the Lite IR of a stored partition read only then) is
`provider.ort.partition_source`; each outcome is recorded (`PartitionCacheStats`, the
session's `cache_stats()`). Executors come from the session's
`provider.npu.session_memory.SessionMemory` (memory options, clones, shared weights).

Compute is C when the NPU's native library is loaded (`csrc/compute.c`, `clib.data_plane()`):
each compiled shape is registered with the C kernel (its executor's runner, the I/O order,
the output shapes), and a run of a registered shape reads onnxruntime's tensors and runs the
executor's plan without entering Python (numpy steps excepted); the plan uses NPU-resident
tensors in place and stages (and counts) the rest, e.g. inputs that reach the partition over
a CPU->NPU edge and arrive in CPU memory. Runs of one partition may overlap: each takes its
own arena (shared memory groups take turns). Everything else calls the Python Compute
(`FusedKernel.compute`): a new shape (compiled, registered, run), a runner without a plan
(caller memory missing: the error says so), runs while the EP's `RunControl` says so (the
profiler is on, or a run asked for its own performance mode: those need the step stamps and
the run's mode), and every run without the native library, which wraps the tensors as numpy
views and runs the Executor, serialized per kernel. The session's performance mode reaches C
runs as the number of cores in the same `RunControl`.
"""

from __future__ import annotations

import ctypes as C
import dataclasses
import functools
import logging
import threading
import time
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np

from converters.lite.ir import LiteModel
from provider.cache import CONTEXT, PartitionCacheStats
from provider.cache.keys import lite_digest
from provider.cache.writer import Pending
from provider.errors import BindingError
from provider.npu.executor import Executor, step_stamps
from provider.npu.program import Program
from provider.ort import abi, clib, compatibility, epcontext
from provider.ort.callbacks import address, keep, status_callback, value_callback
from provider.ort.capability import own_weights
from provider.ort.graph import read_graph, static_inputs
from provider.ort.partition_payload import StoredPartition
from provider.ort.partition_source import PartitionSource, record
from provider.ort.profiling import StepInfo, step_info
from provider.ort.transfer import COUNTERS

log = logging.getLogger("litenpu.ort")


class _Compiled:
    """One Program's Executor and how the fused node's I/O order maps onto the Program's."""

    def __init__(self, executor: Executor, input_names: list[str], output_names: list[str]):
        self.executor = executor
        program = executor.program
        self.input_order = [input_names.index(name) for name in executor.input_names]
        positions = {name: k for k, name in enumerate(executor.output_names)}
        self.outputs = []  # per fused output: (program position, C dims, dtype, shape)
        for name in output_names:
            slot = program.slots[program.outputs[positions[name]]]
            shape = tuple(slot.shape)
            self.outputs.append((positions[name], (C.c_int64 * len(shape))(*shape),
                                 np.dtype(slot.dtype), shape))
        self.entry = -1  # its id in the C kernel's table (-1: not registered)

    def register(self, kernel: int, input_names: list[str], output_names: list[str]) -> None:
        """Enter this shape in the C kernel's table (its runs then stay in C)."""
        program = self.executor.program
        inputs: list[tuple[int, tuple[int, ...]]] = [(0, ())] * len(input_names)
        for k, fused in enumerate(self.input_order):
            slot = program.slots[program.inputs[k]]
            inputs[fused] = (abi.NUMPY_TO_ELEMENT[np.dtype(slot.dtype)], tuple(slot.shape))
        outputs = [(abi.NUMPY_TO_ELEMENT[dtype], shape) for _, _, dtype, shape in self.outputs]
        messages = [_refused(name, shape).encode() for name, (_, shape) in
                    zip(output_names, outputs, strict=True)]

        def described(tensors):
            return ((C.c_int32 * max(len(tensors), 1))(*[t for t, _ in tensors]),
                    (C.c_int32 * max(len(tensors), 1))(*[len(s) for _, s in tensors]),
                    (C.c_int64 * max(sum(len(s) for _, s in tensors), 1))(
                        *[d for _, s in tensors for d in s]))

        self.entry = clib.library().litenpu_kernel_add(
            kernel, *described(inputs), self.executor.runner.address,
            (C.c_int64 * max(len(self.input_order), 1))(*self.input_order),
            (C.c_int64 * max(len(self.outputs), 1))(*[p for p, *_ in self.outputs]),
            *described(outputs), (C.c_char_p * max(len(messages), 1))(*messages))

    @functools.cached_property
    def steps(self) -> StepInfo:
        """The Program's steps as the profile names them (computed when first profiled)."""
        return step_info(self.executor.program)


def _refused(name: str, shape: tuple[int, ...]) -> str:
    """What a run says when onnxruntime will not give output `name` this run's shape."""
    return (f"output {name!r}: this run computes shape {list(shape)} and the bound output has "
            "another; bind one of that shape, or let onnxruntime allocate it (bind_npu_output)")


class FusedKernel:
    """A fused partition: a Program + Executor per input-shape combination, and while more
    shapes may come, where further Programs come from (`PartitionSource`)."""

    def __init__(self, ep, name: str, input_names: list[str], output_names: list[str],
                 source: Program | PartitionSource,
                 static_shapes: dict[str, tuple[int, ...]] | None):
        self.ort: abi.Ort = ep.ort
        self.name = name
        self.memory = ep.memory  # placement per the memory options
        # KernelContext inputs/outputs follow the fused node's order; the Program uses names.
        self.input_names, self.output_names = input_names, output_names
        self.per_shape = static_shapes is None and isinstance(source, PartitionSource)
        self.max_shapes = ep.options.runtime.max_shapes
        self._programs: OrderedDict[tuple, _Compiled] = OrderedDict()  # least recent first
        self._lock = threading.Lock()
        self.python_computes = 0  # runs that entered the Python Compute
        self._python_runs = 0  # of which ran (the others raised)
        self.native = clib.data_plane()  # Compute in C
        if self.native:
            self.address: int = clib.library().litenpu_kernel_new(
                self.ort.api_version, len(input_names), len(output_names), address(_compute),
                C.addressof(ep.run_control))
            if not self.address:
                raise MemoryError("no host memory for a fused kernel")
        else:
            s = self.struct = abi.OrtNodeComputeInfo()
            s.ort_version_supported = self.ort.api_version
            s.CreateState = address(_create_state)
            s.Compute = address(_compute)
            s.ReleaseState = address(_release_state)
            self.address = C.addressof(s)
        _KERNELS[self.address] = self
        self.cache = ep.cache  # None: compiled in memory
        self._stats: list[PartitionCacheStats] = ep.cache_stats
        self.cache_entry: Path | None = None  # the cache entry of the (single) Program
        self.context_written: Pending | None = None  # the EPContext side file's write
        self.perf_modes = ep.perf_modes
        self.profiler = ep.profiler
        self._python_modes: Counter[str] = Counter()  # Python runs per performance mode
        self._plan_mode = ep.options.runtime.npu_perf_mode  # C runs' (else they divert)
        self.source: PartitionSource | None = None  # while more input shapes may come
        if isinstance(source, Program):
            shapes = {source.slots[i].name: tuple(source.slots[i].shape) for i in source.inputs}
            self._programs[_key(shapes)] = self._compiled_for(_key(shapes), lambda: source)
        elif static_shapes is not None:
            # One shape only: get the Program now and keep no Lite model.
            self.source = source
            try:
                self.executor(static_shapes)
            finally:
                self.source = None
                source.close()
        else:
            self.source = source
        log.info("NPU partition %s: inputs %s, outputs %s, %s", self.name, self.input_names,
                 self.output_names, "compiled" if self.source is None else "compiled per shape at run time")

    @classmethod
    def build(cls, ep, graph: int, fused_node: int) -> FusedKernel:
        """The kernel of a fused partition: its nodes, or one EPContext node we wrote earlier."""
        o: abi.Ort = ep.ort
        name = o.string("Node_GetName", fused_node)
        inputs = _names(o, fused_node, "Node_GetNumInputs", "Node_GetInputs")
        outputs = _names(o, fused_node, "Node_GetNumOutputs", "Node_GetOutputs")
        whole = ep.adopt_whole(inputs, outputs)
        if whole is not None and whole.program is not None:  # compiled by GetCapability
            return cls(ep, name, inputs, outputs, PartitionSource.adopted(ep, name, whole),
                       whole.shapes)
        if whole is not None:  # the whole graph, dynamic shapes: Programs per shape later
            lite = dataclasses.replace(whole.lite, name=name)
            return cls(ep, name, inputs, outputs, PartitionSource.held(ep, name, lite), None)
        # views: valid in Compile; the nodes by name only (GetCapability read them in full),
        # but an EPContext node with its attributes
        only = o.array("Graph_GetNumNodes", "Graph_GetNodes", graph)
        context = len(only) == 1 and o.string("Node_GetOperatorType", only[0]) == epcontext.OP_TYPE
        contents = read_graph(o, graph, copy_initializers=False, nodes_in_full=context)
        nodes = contents.nodes
        if context and epcontext.is_ours(nodes[0].view.op_type, nodes[0].view.domain,
                                         nodes[0].view.attrs):
            return cls._from_context(ep, name, inputs, outputs, nodes[0].view,
                                     epcontext.model_path(o, graph))
        lite = ep.partition(contents, inputs, outputs, name,  # cut from GetCapability's import
                            lambda: read_graph(o, graph, copy_initializers=False))
        if not static_inputs(o, contents.inputs):  # Programs per concrete shape, at run time
            return cls(ep, name, inputs, outputs, PartitionSource.held(ep, name, own_weights(lite)),
                       None)
        shapes = {vi.name: tuple(vi.shape) for vi in contents.inputs}
        return cls(ep, name, inputs, outputs, PartitionSource.held(ep, name, lite), shapes)

    @classmethod
    def _from_context(cls, ep, name: str, inputs: list[str], outputs: list[str], view,
                      model_path: str) -> FusedKernel:
        """The kernel of one of our EPContext nodes: its Program, or (dynamic shapes) its
        partition's descriptor, whose Programs come per shape from the cache."""
        start = time.perf_counter()
        loaded = epcontext.load_node(view.attrs, model_path, view.name)  # named as in the file
        source = loaded.source
        if isinstance(source, StoredPartition):
            source.descriptor.check_io(inputs, outputs, view.name)
            return cls(ep, name, inputs, outputs, PartitionSource.stored(ep, name, source), None)
        if isinstance(source, LiteModel):  # a bare .ms image (no descriptor): keyed by content
            return cls(ep, name, inputs, outputs,
                       PartitionSource.held(ep, name, source, lite_digest(source)), None)
        compatibility.check_program(source, ep.options.compile, view.name)
        kernel = cls(ep, name, inputs, outputs, source, None)
        kernel.cache_entry = loaded.entry
        shapes = {source.slots[i].name: source.slots[i].shape for i in source.inputs}
        kernel._stats.append(record(name, CONTEXT, "", shapes, source,
                                    time.perf_counter() - start, 0.0, loaded.entry))
        return kernel

    def context_blob(self) -> bytes:
        """This partition as an EPContext payload: its Program, or its descriptor and Lite IR
        if shapes vary."""
        if self.source is not None:
            return self.source.payload()
        with self._lock:
            (compiled,) = self._programs.values()
        return epcontext.to_bytes(compiled.executor.program)

    def executor(self, shapes: dict[str, tuple[int, ...]]) -> Executor:
        """The Executor for these input shapes (compiled on first use, then cached)."""
        with self._lock:
            return self._compiled(shapes).executor

    def _compiled(self, shapes: dict[str, tuple[int, ...]]) -> _Compiled:
        """The Program for these input shapes, most recently used now (lock held). A new
        shape beyond `max_shapes` evicts the least recently used one's Program and memory."""
        key = _key(shapes)
        compiled = self._programs.get(key)
        if compiled is not None:
            self._programs.move_to_end(key)
            if self.native:
                clib.library().litenpu_kernel_tick(self.address, compiled.entry, 1)
            return compiled
        if self.source is None:
            known = [dict(k) for k in self._programs]
            raise BindingError(f"partition {self.name} was compiled for input shapes "
                               f"{known}; got {shapes}")
        while len(self._programs) >= self.max_shapes:
            old_key = self._least_recent()
            old = self._programs.pop(old_key)
            self._forget(old)
            log.info("NPU partition %s: evicted the Program for %s (max_shapes=%d)", self.name,
                     dict(old_key), self.max_shapes)
        compiled = self._programs[key] = self._compiled_for(key, lambda: self._program(shapes))
        return compiled

    def _least_recent(self) -> tuple:
        """The key of the Program used least recently (C runs count: their kernel's clock)."""
        if not self.native:
            return next(iter(self._programs))
        lib = clib.library()
        return min(self._programs,
                   key=lambda k: lib.litenpu_kernel_tick(self.address, self._programs[k].entry, 0))

    def _forget(self, compiled: _Compiled) -> None:
        """Take a Program out of the C table (runs holding it finish), then close it."""
        if self.native:
            clib.library().litenpu_kernel_remove(self.address, compiled.entry)
        compiled.executor.close()

    def _compiled_for(self, key: tuple, make) -> _Compiled:
        compiled = _Compiled(self.memory.executor(self.name, key, make, per_shape=self.per_shape),
                             self.input_names, self.output_names)
        if self.native:
            compiled.register(self.address, self.input_names, self.output_names)
        return compiled

    def _program(self, shapes: dict[str, tuple[int, ...]]) -> Program:
        """The Program for `shapes` from the partition's source (cache, else compiled)."""
        # a compiled Program's weights are packed straight into device memory (the cache
        # writer stores them from there; a cache hit maps its entry instead)
        program, stats = self.source.program(shapes, self.memory.weight_allocator(self.per_shape))
        if self.cache is not None:
            self.cache_entry = Path(stats.entry) if stats.entry is not None else None
        self._stats.append(stats)
        return program

    def compute(self, context: int) -> None:
        """The Python Compute (see the module docstring for when it runs)."""
        self.python_computes += 1
        o = self.ort
        n = abi.sz()
        o.api.KernelContext_GetInputCount(context, C.byref(n))
        arrays = []
        for i in range(n.value):
            value = abi.vp()
            o.api.KernelContext_GetInput(context, i, C.byref(value))
            arrays.append(o.value_array(value.value))
        with self._lock:  # one Python Compute at a time per kernel (C runs never wait here)
            self._run(context, arrays)

    def _run(self, context: int, arrays: list[np.ndarray]) -> None:
        """Get the outputs at this run's shapes, run the Program (lock held)."""
        o = self.ort
        compiled = self._compiled({self.input_names[i]: a.shape for i, a in enumerate(arrays)})
        outputs: list = [None] * len(compiled.outputs)
        for j, (position, dims, dtype, shape) in enumerate(compiled.outputs):
            value = abi.vp()
            try:
                o.api.KernelContext_GetOutput(context, j, dims, len(shape), C.byref(value))
            except abi.OrtCallError as exc:  # e.g. a bound output of another shape
                raise BindingError(_refused(self.output_names[j], shape)) from exc
            outputs[position] = abi.array_at(o.value_address(value.value), dtype, shape)
        executor = compiled.executor
        mode = self.perf_modes.current()
        stamps = step_stamps(executor.program) if self.profiler.active else None
        executor.run([arrays[i] for i in compiled.input_order], outputs,
                     cores=self.perf_modes.runtime.cores(mode), stamps=stamps)
        if stamps is not None:
            self.profiler.record(self.name, compiled.steps, stamps, mode)
        stats = executor.copy_stats
        self._python_runs += 1
        self._python_modes[mode] += 1
        if stats.bytes_copied_in or stats.bytes_copied_out:
            COUNTERS.add(to_device=stats.bytes_copied_in, to_host=stats.bytes_copied_out)

    @property
    def native_runs(self) -> int:
        """Runs that stayed in C (never entered the Python Compute)."""
        return clib.library().litenpu_kernel_runs(self.address) if self.native else 0

    @property
    def runs_by_mode(self) -> Counter[str]:
        """Runs per performance mode: C runs are in the mode the plans were built for."""
        native = self.native_runs
        return self._python_modes + Counter({self._plan_mode: native} if native else {})

    @property
    def calls(self) -> int:
        """Runs this kernel made, in C or in Python."""
        return self._python_runs + self.native_runs

    def close(self) -> None:
        """After onnxruntime released the kernel: its Programs and their memory go (once the
        cache writer has stored them: a released session's entries are on disk)."""
        _KERNELS.pop(self.address, None)
        if self.context_written is not None:
            self.context_written.error()  # its bytes come from this kernel
        if self.cache is not None:
            self.cache.flush()
        with self._lock:
            for compiled in self._programs.values():
                self._forget(compiled)
            self._programs.clear()
            if self.source is not None:
                self.source.close()
            if self.native:
                clib.library().litenpu_kernel_destroy(self.address)
                self.native = False


def _key(shapes: dict[str, tuple[int, ...]]) -> tuple:
    return tuple(sorted((k, tuple(v)) for k, v in shapes.items()))


def _names(o: abi.Ort, node: int, count_fn: str, get_fn: str) -> list[str]:
    return [o.string("GetValueInfoName", v) if v else "" for v in o.array(count_fn, get_fn, node)]


_KERNELS: dict[int, FusedKernel] = keep({})  # kept, as ep._EPS


@status_callback(abi.P_CREATE_STATE, "NodeComputeInfo.CreateState")
def _create_state(this, compute_context, state_out):  # the Python-only kernel's (C has its own)
    state_out[0] = this  # the kernel is its own state: all per-shape data lives in it


@status_callback(abi.P_COMPUTE, "NodeComputeInfo.Compute")
def _compute(this, state, context):
    _KERNELS[this].compute(context)


@value_callback(abi.P_RELEASE_STATE, "NodeComputeInfo.ReleaseState")
def _release_state(this, state):
    """Nothing to free: the state is the kernel itself."""
