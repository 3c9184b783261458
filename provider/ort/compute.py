"""OrtNodeComputeInfo: one fused NPU partition, compiled and run on onnxruntime's tensors.

Compile reads the partition's OrtGraph, or restores it from one of our EPContext nodes (a
Program embedded, in a cache entry, or Lite IR). With a compile cache (`cache_dir`), a static
partition's key is built from the graph without converting it (`provider.cache.keys`): a
hit maps the cached Program and neither imports nor compiles; a miss imports to Lite IR,
compiles and stores. With dynamic dims the partition is imported once (weights copied:
onnxruntime may drop its initializers after fusing) and a Program is obtained on the first run
with each concrete input-shape combination (its own cache key, from the Lite IR) and kept in
memory with its Executor. Where each Program came from is recorded (`PartitionCacheStats`, the
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
(caller memory missing: the error says so), and every run without the native library, which
wraps the tensors as numpy views and runs the Executor, serialized per kernel.
"""

from __future__ import annotations

import ctypes as C
import dataclasses
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from converters.lite.ir import LiteModel
from provider.cache import CONTEXT, OFF, PartitionCacheStats, PartitionKeys
from provider.cache.keys import lite_digest, within
from provider.cache.residency import pages_present, pages_spanned
from provider.errors import BindingError
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor
from provider.npu.program import Program
from provider.ort import abi, clib, epcontext
from provider.ort.callbacks import address, status_callback, value_callback
from provider.ort.capability import own_weights
from provider.ort.graph import read_graph
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


def _refused(name: str, shape: tuple[int, ...]) -> str:
    """What a run says when onnxruntime will not give output `name` this run's shape."""
    return (f"output {name!r}: this run computes shape {list(shape)} and the bound output has "
            "another; bind one of that shape, or let onnxruntime allocate it (bind_npu_output)")


class FusedKernel:
    """A fused partition: a Program + Executor per input-shape combination (and its Lite model
    while more shapes may come)."""

    def __init__(self, ep, name: str, input_names: list[str], output_names: list[str],
                 source: Program | LiteModel,
                 static_shapes: dict[str, tuple[int, ...]] | None, *,
                 keys: PartitionKeys | None = None):
        self.ort: abi.Ort = ep.ort
        self.compile_options = ep.options.compile
        self.name = name
        self.memory = ep.memory  # placement per the memory options
        # KernelContext inputs/outputs follow the fused node's order; the Program uses names.
        self.input_names, self.output_names = input_names, output_names
        self.per_shape = static_shapes is None and not isinstance(source, Program)
        self.max_shapes = ep.options.runtime.max_shapes
        self._programs: OrderedDict[tuple, _Compiled] = OrderedDict()  # least recent first
        self._lock = threading.Lock()
        self.python_computes = 0  # runs that entered the Python Compute
        self._python_runs = 0  # of which ran (the others raised)
        self.native = clib.data_plane()  # Compute in C
        if self.native:
            self.address: int = clib.library().litenpu_kernel_new(
                self.ort.api_version, len(input_names), len(output_names), address(_compute))
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
        self.cache = ep.cache if keys is not None else None
        self._keys = keys
        self._stats: list[PartitionCacheStats] = ep.cache_stats
        self.cache_entry: Path | None = None  # the cache entry of the (single) Program
        self.counters = ep.counters
        self.lite: LiteModel | None = None  # while more input shapes may come
        if isinstance(source, Program):
            shapes = {source.slots[i].name: tuple(source.slots[i].shape) for i in source.inputs}
            self._programs[_key(shapes)] = self._compiled_for(_key(shapes), lambda: source)
        elif static_shapes is not None:
            # One shape only: get the Program now and keep no Lite model.
            self.lite = source
            try:
                self.executor(static_shapes)
            finally:
                self.lite = None
        else:
            self.lite = source
        log.info("NPU partition %s: inputs %s, outputs %s, %s", self.name, self.input_names,
                 self.output_names, "compiled" if self.lite is None else "compiled per shape at run time")

    @classmethod
    def build(cls, ep, graph: int, fused_node: int) -> FusedKernel:
        """The kernel of a fused partition: its nodes, or one EPContext node we wrote earlier."""
        o: abi.Ort = ep.ort
        name = o.string("Node_GetName", fused_node)
        inputs = _names(o, fused_node, "Node_GetNumInputs", "Node_GetInputs")
        outputs = _names(o, fused_node, "Node_GetNumOutputs", "Node_GetOutputs")
        # views: valid in Compile; the nodes by name only (GetCapability read them in full)
        contents = read_graph(o, graph, copy_initializers=False, nodes_in_full=False)
        nodes = contents.nodes
        if len(nodes) == 1 and nodes[0].view.op_type == epcontext.OP_TYPE:
            contents = read_graph(o, graph, copy_initializers=False)  # its attributes too
            nodes = contents.nodes
        if len(nodes) == 1 and epcontext.is_ours(nodes[0].view.op_type, nodes[0].view.domain,
                                                 nodes[0].view.attrs):
            start = time.perf_counter()
            loaded = epcontext.load_node(nodes[0].view.attrs,  # named as in the file
                                         epcontext.model_path(o, graph), nodes[0].view.name)
            source = loaded.source
            if isinstance(source, LiteModel):  # dynamic shapes: Programs per shape, cached
                return cls(ep, name, inputs, outputs, source, None,
                           keys=_lite_keys(ep, source, lambda: loaded.blob))
            kernel = cls(ep, name, inputs, outputs, source, None)
            kernel.cache_entry = loaded.entry
            shapes = {source.slots[i].name: source.slots[i].shape for i in source.inputs}
            kernel._record(CONTEXT, "", shapes, source, time.perf_counter() - start, 0.0,
                           loaded.entry)
            return kernel
        lite = ep.partition(contents, inputs, outputs, name)  # cut from GetCapability's import
        if not _static(o, contents.inputs):  # Programs per concrete shape, at run time
            lite = own_weights(lite)
            return cls(ep, name, inputs, outputs, lite, None,
                       keys=_lite_keys(ep, lite, lambda: epcontext.to_bytes(lite)))
        keys = None if ep.cache is None else _partition_keys(ep, lite)
        shapes = {vi.name: tuple(vi.shape) for vi in contents.inputs}
        return cls(ep, name, inputs, outputs, lite, shapes, keys=keys)

    def context_blob(self) -> bytes:
        """This partition as an EPContext payload: its Program, or its Lite IR if shapes vary."""
        if self.lite is not None:
            return epcontext.to_bytes(self.lite)
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
        if self.lite is None:
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
        """The Program for `shapes`: from the cache, else compiled (and stored)."""
        lite = self.lite

        # without a cache, the weights are packed straight into device memory (a cached
        # Program is mapped back from its entry instead)
        allocate = self.memory.weight_allocator(self.per_shape) if self.cache is None else None

        def compile_fn() -> Program:
            start = time.perf_counter()
            self.counters.compiles += 1
            program = compile_model(with_input_shapes(lite, shapes), shapes, self.compile_options,
                                    allocate=allocate)
            self.counters.spent("compile", time.perf_counter() - start)
            return program

        if self.cache is None:
            start = time.perf_counter()
            program = compile_fn()
            self._record(OFF, "", shapes, program, 0.0, time.perf_counter() - start, None)
            return program
        start = time.perf_counter()
        program, outcome = self.cache.get_or_compile(self._keys.key(shapes), compile_fn)
        self.counters.spent("cache", time.perf_counter() - start - outcome.compile_seconds)
        self.cache_entry = outcome.entry
        self._stats.append(PartitionCacheStats.of(self.name, shapes, outcome))
        return program

    def _record(self, status: str, reason: str, shapes: dict[str, tuple[int, ...]],
                program: Program, load_seconds: float, compile_seconds: float,
                entry: Path | None) -> None:
        """Record a Program that did not come through get_or_compile (context, no cache)."""
        weights = program.weights_array()
        touched = pages_present(weights) if entry is not None else None
        self._stats.append(PartitionCacheStats(
            self.name, dict(shapes), status, reason, load_seconds, compile_seconds, touched,
            pages_spanned(weights), str(entry) if entry is not None else None))
        log.info("NPU partition %s: program %s (%.1f ms)", self.name,
                 "loaded from its EPContext node" if status == CONTEXT else "compiled",
                 (load_seconds + compile_seconds) * 1e3)

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
        executor.run([arrays[i] for i in compiled.input_order], outputs)
        stats = executor.copy_stats
        self._python_runs += 1
        if stats.bytes_copied_in or stats.bytes_copied_out:
            COUNTERS.add(to_device=stats.bytes_copied_in, to_host=stats.bytes_copied_out)

    @property
    def native_runs(self) -> int:
        """Runs that stayed in C (never entered the Python Compute)."""
        return clib.library().litenpu_kernel_runs(self.address) if self.native else 0

    @property
    def calls(self) -> int:
        """Runs this kernel made, in C or in Python."""
        return self._python_runs + self.native_runs

    def close(self) -> None:
        """After onnxruntime released the kernel: its Programs and their memory go."""
        _KERNELS.pop(self.address, None)
        with self._lock:
            for compiled in self._programs.values():
                self._forget(compiled)
            self._programs.clear()
            if self.native:
                clib.library().litenpu_kernel_destroy(self.address)
                self.native = False


def _key_options(ep) -> dict:
    """What a partition's Program depends on besides its content and input shapes."""
    return {**ep.options.compile.as_dict(), "onnxruntime": ep.ort.version_string}


def _partition_keys(ep, lite: LiteModel) -> PartitionKeys:
    """Cache keys of a static partition: its content is the model's fingerprint with the
    partition's structure, or, without one, the partition with its weights hashed."""
    model = ep.options.cache.model_fingerprint
    fingerprint = (within(model, lite_digest(lite, weights=False)) if model
                   else lite_digest(lite))
    return PartitionKeys.of([(n.name, n.op) for n in lite.nodes],
                            model_name=ep.options.cache.model_name, fingerprint=fingerprint,
                            options=_key_options(ep))


def _lite_keys(ep, lite: LiteModel, image: Callable[[], bytes]) -> PartitionKeys | None:
    """Cache keys of a partition held as Lite IR (None without a cache), keyed by its `.ms`
    image (`image()`): the same bytes whether the partition was just imported or read back
    from an EPContext node."""
    if ep.cache is None:
        return None
    return PartitionKeys.of([(n.name, n.op) for n in lite.nodes],
                            model_name=ep.options.cache.model_name,
                            fingerprint=hashlib.sha256(image()).hexdigest(),
                            options=_key_options(ep))


def _key(shapes: dict[str, tuple[int, ...]]) -> tuple:
    return tuple(sorted((k, tuple(v)) for k, v in shapes.items()))


def _names(o: abi.Ort, node: int, count_fn: str, get_fn: str) -> list[str]:
    return [o.string("GetValueInfoName", v) if v else "" for v in o.array(count_fn, get_fn, node)]


def _static(o: abi.Ort, inputs) -> bool:
    """Every input shape fully known (before onnxruntime 1.24 a 0-d shape may mean unknown)."""
    exact_rank = o.api.available("TensorTypeAndShape_HasShape")
    return all(vi.shape is not None and (exact_rank or len(vi.shape) > 0)
               and all(isinstance(d, int) and d >= 0 for d in vi.shape) for vi in inputs)


def with_input_shapes(lite: LiteModel, shapes: dict[str, tuple[int, ...]]) -> LiteModel:
    """A copy of `lite` whose graph inputs declare the concrete `shapes` onnxruntime ran with.

    The partition's value infos may lack a rank (an intermediate onnxruntime could not infer);
    the imported model then declares () and would refuse the real shape.
    """
    tensors = list(lite.tensors)
    for i in lite.inputs:
        if tensors[i].name in shapes:
            tensors[i] = dataclasses.replace(tensors[i], shape=tuple(shapes[tensors[i].name]))
    return dataclasses.replace(lite, tensors=tensors)


_KERNELS: dict[int, FusedKernel] = {}


@status_callback(abi.P_CREATE_STATE, "NodeComputeInfo.CreateState")
def _create_state(this, compute_context, state_out):  # the Python-only kernel's (C has its own)
    state_out[0] = this  # the kernel is its own state: all per-shape data lives in it


@status_callback(abi.P_COMPUTE, "NodeComputeInfo.Compute")
def _compute(this, state, context):
    _KERNELS[this].compute(context)


@value_callback(abi.P_RELEASE_STATE, "NodeComputeInfo.ReleaseState")
def _release_state(this, state):
    """Nothing to free: the state is the kernel itself."""
