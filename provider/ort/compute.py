"""OrtNodeComputeInfo: one fused NPU partition, compiled and run on onnxruntime's tensors.

Compile reads the partition's OrtGraph into Lite IR once (weights copied: onnxruntime may drop
its initializers after fusing). With static input shapes the Program is compiled right away and
the Lite model dropped; with dynamic dims a Program is compiled on the first run with each
concrete input-shape combination and cached in memory with its Executor. Compute wraps onnxruntime's input and output tensors as numpy views, without
copying; the Executor uses NPU-resident ones in place and stages (and counts) the rest, e.g.
inputs that reach the partition over a CPU->NPU edge and arrive in CPU memory.
"""

from __future__ import annotations

import ctypes as C
import dataclasses
import logging
import threading

import numpy as np

from converters.lite.ir import LiteModel
from converters.onnx_import import import_onnx
from provider.errors import BindingError, UnsupportedError
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor
from provider.npu.memory import default_pool
from provider.ort import abi
from provider.ort.callbacks import address, status_callback, value_callback
from provider.ort.graph import read_graph
from provider.ort.transfer import COUNTERS

log = logging.getLogger("litenpu.ort")


class FusedKernel:
    """A fused partition: its Lite model, and a Program + Executor per input-shape combination."""

    def __init__(self, ep, graph: int, fused_node: int):
        self.ort: abi.Ort = ep.ort
        self.enable_fp16 = ep.options.enable_fp16
        self.name = self.ort.string("Node_GetName", fused_node)
        contents = read_graph(self.ort, graph, copy_initializers=True)
        self.lite, report = import_onnx(contents.view())
        if report.custom:
            raise UnsupportedError(f"partition {self.name}: {report.custom[0].op} has no Lite "
                                   f"primitive ({report.custom[0].reason})")
        # KernelContext inputs/outputs follow the fused node's order; the Program uses names.
        self.input_names = self._names(fused_node, "Node_GetNumInputs", "Node_GetInputs")
        self.output_names = self._names(fused_node, "Node_GetNumOutputs", "Node_GetOutputs")
        self._programs: dict[tuple, Executor] = {}
        self._lock = threading.Lock()
        self.calls = 0
        lite_nodes = len(self.lite.nodes)
        if self._static(contents.inputs):
            # One shape only: compile now and drop the Lite model (and its weight copies).
            self.executor({vi.name: tuple(vi.shape) for vi in contents.inputs})
            self.lite = None
        s = self.struct = abi.OrtNodeComputeInfo()
        s.ort_version_supported = self.ort.api_version
        s.CreateState = address(_create_state)
        s.Compute = address(_compute)
        s.ReleaseState = address(_release_state)
        self.address: int = C.addressof(s)
        _KERNELS[self.address] = self
        log.info("NPU partition %s: %d Lite nodes, inputs %s, outputs %s", self.name,
                 lite_nodes, self.input_names, self.output_names)

    def _static(self, inputs) -> bool:
        """Every input shape fully known (before onnxruntime 1.24 a 0-d shape may mean unknown)."""
        exact_rank = self.ort.api.available("TensorTypeAndShape_HasShape")
        return all(vi.shape is not None and (exact_rank or len(vi.shape) > 0)
                   and all(isinstance(d, int) and d >= 0 for d in vi.shape) for vi in inputs)

    def _names(self, node: int, count_fn: str, get_fn: str) -> list[str]:
        return [self.ort.string("GetValueInfoName", v) if v else ""
                for v in self.ort.array(count_fn, get_fn, node)]

    def executor(self, shapes: dict[str, tuple[int, ...]]) -> Executor:
        """The Executor for these input shapes (compiled on first use, then cached)."""
        key = tuple(sorted(shapes.items()))
        with self._lock:
            executor = self._programs.get(key)
            if executor is None:
                if self.lite is None:
                    compiled = [dict(k) for k in self._programs]
                    raise BindingError(f"partition {self.name} was compiled for input shapes "
                                       f"{compiled}; got {shapes}")
                program = compile_model(with_input_shapes(self.lite, shapes), shapes,
                                        enable_fp16=self.enable_fp16)
                executor = Executor(program, default_pool())
                self._programs[key] = executor
                log.info("NPU partition %s: compiled a program for %s", self.name, dict(key))
        return executor

    def compute(self, context: int) -> None:
        o = self.ort
        n = abi.sz()
        o.api.KernelContext_GetInputCount(context, C.byref(n))
        feeds = {}
        for i in range(n.value):
            value = abi.vp()
            o.api.KernelContext_GetInput(context, i, C.byref(value))
            feeds[self.input_names[i]] = o.value_array(value.value)
        executor = self.executor({k: v.shape for k, v in feeds.items()})
        program = executor.program
        outputs = {}
        for j, name in enumerate(self.output_names):
            slot = program.slots[program.outputs[executor.output_names.index(name)]]
            dims = (C.c_int64 * len(slot.shape))(*slot.shape)
            value = abi.vp()
            o.api.KernelContext_GetOutput(context, j, dims, len(slot.shape), C.byref(value))
            outputs[name] = abi.array_at(o.value_address(value.value), np.dtype(slot.dtype),
                                         tuple(slot.shape))
        with self._lock:  # the executor's stats of this run must be read before the next one
            executor.run_named(feeds, outputs)
            stats = executor.copy_stats
            self.calls += 1
        if stats.bytes_copied_in or stats.bytes_copied_out:
            COUNTERS.add(to_device=stats.bytes_copied_in, to_host=stats.bytes_copied_out)

    def close(self) -> None:
        _KERNELS.pop(self.address, None)
        with self._lock:
            for executor in self._programs.values():
                executor.close()
            self._programs.clear()


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
def _create_state(this, compute_context, state_out):
    state_out[0] = this  # the kernel is its own state: all per-shape data lives in it


@status_callback(abi.P_COMPUTE, "NodeComputeInfo.Compute")
def _compute(this, state, context):
    _KERNELS[this].compute(context)


@value_callback(abi.P_RELEASE_STATE, "NodeComputeInfo.ReleaseState")
def _release_state(this, state):
    """Nothing to free: the state is the kernel itself."""
