"""Lowering a Lite graph node by node with concrete shapes: the compiler's stage 2, which
`capability.assess` runs too (so "would the compiler take it" has one implementation).

Nodes are walked in topological order; each node's rule (`ops.lower`) turns the facts known
about its inputs into a `Lowered`. A node whose inputs are all constants is run at compile
time (constant folding of weight-only subgraphs, e.g. ConstantOfShape -> Reshape; Shape
chains); every other node becomes one kernel step, or an alias for reshape-like ops (no
kernel, shared buffer). Constants a rule derives (`ops.common.Packed`: weights in a kernel's
order, divisors, index maps) are made only when something reads them: the folding of a
node, or the compiler's weight blob (`Builder.array`). A tensor larger than the machine's
memory (a malformed dimension, say) is a DeviceMemoryError naming the node, before anything
is allocated for it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from converters.lite import dtypes as lite_dtypes
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from converters.lite.quant import QUANT_ALL, TensorQuant
from provider.errors import DeviceMemoryError, InvalidModelError, UnsupportedError
from provider.npu.ops import KERNELS, lower
from provider.npu.ops.common import Lowered, Packed, TensorInfo

__all__ = ["Val", "LoweredStep", "Builder", "lower_node", "topological", "check_indices",
           "input_shape"]

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)


@dataclass
class Val:
    """A value of the program under construction (model tensor or compiler-made); `value`
    is set for constants (a Packed one until `Builder.array` makes it)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    value: np.ndarray | Packed | None = None
    io: str = ""  # "input" / "output" when bound to a caller buffer


@dataclass
class LoweredStep:
    """One kernel step of the program under construction, over Val indices."""

    kernel: str  # "" = alias of inputs[0]
    attrs: dict
    inputs: list[int]
    outputs: list[int]
    scratch: list[int] = field(default_factory=list)


def producers_and_reads(steps: Sequence[LoweredStep]) -> tuple[dict[int, int], dict[int, int]]:
    """For step fusions: the index of the step that makes each val, and how many step
    inputs read each val."""
    made_at = {v: i for i, s in enumerate(steps) for v in s.outputs}
    reads: dict[int, int] = {}
    for s in steps:
        for v in s.inputs:
            reads[v] = reads.get(v, 0) + 1
    return made_at, reads


class Builder:
    """Mutable state of one lowering pass (one compile_model or assess call; never escapes it)."""

    def __init__(self, fp16: bool):
        self.fp16 = fp16
        self.vals: list[Val] = []
        self.steps: list[LoweredStep] = []

    def storage(self, dtype: np.dtype) -> np.dtype:
        """The dtype a tensor of `dtype` is stored in (float16 for float32 in fp16 mode)."""
        return F16 if self.fp16 and dtype == F32 else np.dtype(dtype)

    def add(self, name: str, shape, dtype, value: np.ndarray | Packed | None = None, *,
            io: str = "", exact: bool = False) -> int:
        """A new val; its dtype becomes the storage dtype unless `exact` or bound to I/O."""
        if isinstance(value, Packed):
            shape, dtype = value.shape, self.storage(value.dtype)
        elif value is not None:
            value = np.asarray(value, dtype=self.storage(value.dtype), order="C")
            shape, dtype = value.shape, value.dtype
        elif not (exact or io):
            dtype = self.storage(dtype)
        self.vals.append(Val(name, tuple(int(d) for d in shape), np.dtype(dtype), value, io))
        return len(self.vals) - 1

    def array(self, v: int) -> np.ndarray:
        """The value of constant val v, making it (once) when the rule packed it lazily."""
        val = self.vals[v]
        if isinstance(val.value, Packed):
            val.value = np.asarray(val.value.value(), dtype=val.dtype, order="C")
        return val.value

    def info(self, v: int) -> TensorInfo:
        """What a rule may know about val v."""
        val = self.vals[v]
        return TensorInfo(val.shape, val.dtype, None if val.value is None else self.array(v))

    def bind_input(self, tensor: LiteTensor, shape: tuple[int, ...]) -> tuple[int, int]:
        """Vals of a graph input of concrete `shape`: the caller's buffer, and the value the
        nodes read (the same, or its fp16 copy made by a cast step in fp16 mode).
        DeviceMemoryError when no memory could hold it (onnxruntime infers a partition's
        input shapes, a corrupt attribute upstream included)."""
        _check_sizes("graph input", [(tensor.name, shape, tensor.dtype)])
        v = self.add(tensor.name, shape, tensor.dtype, io="input")
        if self.storage(tensor.dtype) == tensor.dtype:
            return v, v
        stored = self.add(f"{tensor.name}/fp16", shape, tensor.dtype)
        self.steps.append(LoweredStep("cast", {}, [v], [stored]))
        return v, stored


# numpy's messages for an array no address space can hold
_TOO_BIG = ("array is too big", "Maximum allowed size exceeded", "Maximum allowed dimension")


@functools.cache
def _memory_bytes() -> int:
    """The machine's physical memory: what the NPU's pool (shared host memory) could hold
    at the very most (asked once: every lowered node checks against it)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf: a generous 1 TiB
        return 1 << 40


def _check_sizes(owner: str, tensors: Sequence[tuple[str, tuple, np.dtype]]) -> None:
    """DeviceMemoryError for a tensor no memory could hold, named with its `owner` (a node,
    or the graph input it is)."""
    limit = _memory_bytes()
    for name, shape, dtype in tensors:
        need = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
        if need > limit:
            raise DeviceMemoryError(
                f"{owner}: {name!r} of shape {list(shape)} needs {need} bytes, more than this "
                f"machine's {limit} bytes of memory", requested=need, available=limit)


def _run_now(node: LiteNode, low: Lowered, arrays: list[np.ndarray], outs: list[tuple]
             ) -> list[np.ndarray]:
    """Run a lowered node's kernel on constant inputs (compile-time constant folding)."""
    try:
        results = [np.empty(shape, dtype) for shape, dtype in outs]
        scratch = [np.empty(shape, dtype) for _, shape, dtype in low.scratch]
    except MemoryError as exc:
        need = sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in outs)
        raise DeviceMemoryError(f"node {node.name!r} ({node.op}): no memory to fold its "
                                f"constant output(s) of {need} bytes", requested=need) from exc
    KERNELS[low.kernel].run(arrays, [*results, *scratch], low.attrs)
    return results


def bind_constants(b: Builder, model: LiteModel, tensors: Sequence[int], env: dict[int, int]) -> None:
    """Give constant tensors a val on first use (a partition may share a big tensor list)."""
    for t in tensors:
        if t not in env and model.tensors[t].data is not None:
            env[t] = b.add(model.tensors[t].name, (), F32, np.asarray(model.tensors[t].data))


def lower_node(b: Builder, model: LiteModel, node: LiteNode, env: dict[int, int]) -> None:
    """Lower one node: fold it, or record its step; bind its outputs in env (tensor -> val).
    Raises what its rule raises (UnsupportedError, InvalidModelError)."""
    bind_constants(b, model, node.inputs, env)
    missing = [model.tensors[t].name for t in node.inputs if t not in env]
    if missing:
        raise InvalidModelError(f"node {node.name!r}: inputs {missing} are produced by no node")
    in_vals = [env[t] for t in node.inputs]
    out_types = [model.tensors[t].dtype if lite_dtypes.has_numpy(model.tensors[t].type_id) else None
                 for t in node.outputs]
    ins = [b.info(v) for v in in_vals]
    if node.quant_type == QUANT_ALL or node.op == "QuantDTypeCast":  # the rule reads each
        # integer tensor's quantization
        ins = [dataclasses.replace(info, quant=_quant_of(model.tensors[t]))
               for info, t in zip(ins, node.inputs, strict=True)]
        out_types = [TensorInfo((), dt, None, _quant_of(model.tensors[t]))
                     for dt, t in zip(out_types, node.outputs, strict=True)]
    try:
        low = lower(node, ins, out_types)
    except MemoryError as exc:  # a rule folding a constant (ConstantOfShape, Range, ...)
        if isinstance(exc, DeviceMemoryError):
            raise
        raise DeviceMemoryError(f"node {node.name!r} ({node.op}): no memory for its constant "
                                f"output: {exc}") from exc
    except ValueError as exc:  # numpy's refusal of a size beyond any address space
        if not any(text in str(exc) for text in _TOO_BIG):
            raise
        raise DeviceMemoryError(f"node {node.name!r} ({node.op}): its constant output is larger "
                                f"than any memory: {exc}") from exc
    if len(low.outputs) < len(node.outputs):
        raise UnsupportedError(f"node {node.name!r} ({node.op}): only {len(low.outputs)} of its "
                               f"{len(node.outputs)} outputs are computed on the NPU")
    outs = [(shape, b.storage(dt)) for shape, dt in low.outputs]
    names = [model.tensors[t].name for t in node.outputs]
    _check_sizes(f"node {node.name!r} ({node.op})",
                 [*((n, shape, dt) for n, (shape, dt) in zip(names, outs, strict=False)),
                  *((f"{node.name}/{n}", shape, dt) for n, shape, dt in low.scratch)])
    if low.values is not None:
        for t, name, value in zip(node.outputs, names, low.values, strict=True):
            env[t] = b.add(name, (), F32, value)
        return
    operands = [in_vals[o] if isinstance(o, int) else b.add(f"{node.name}/packed{i}", (), F32, o)
                for i, o in enumerate(low.operands)]
    if all(b.vals[v].value is not None for v in operands):
        arrays = [b.array(v) for v in operands]
        results = [arrays[0].reshape(outs[0][0])] if not low.kernel else _run_now(node, low, arrays, outs)
        for t, name, value in zip(node.outputs, names, results, strict=False):
            env[t] = b.add(name, (), F32, value)
        return
    out_vals = [b.add(name, shape, dt) for name, (shape, dt) in zip(names, outs, strict=False)]
    scratch = [b.add(f"{node.name}/{s}", shape, dt, exact=True) for s, shape, dt in low.scratch]
    for t, v in zip(node.outputs, out_vals, strict=False):
        env[t] = v
    b.steps.append(LoweredStep(low.kernel, low.attrs, operands, out_vals, scratch))


def _quant_of(t: LiteTensor) -> TensorQuant | None:
    return TensorQuant(t.name, tuple(t.quant_params)) if t.quant_params else None


def topological(model: LiteModel) -> list[int]:
    """Node indices ordered so every tensor is produced before it is read (stable; cycles
    rejected with InvalidModelError)."""
    producer = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    state = [0] * len(model.nodes)  # 0 new, 1 visiting, 2 done
    order: list[int] = []
    for root in range(len(model.nodes)):
        stack = [(root, iter(model.nodes[root].inputs))]
        if state[root]:
            continue
        state[root] = 1
        while stack:
            ni, it = stack[-1]
            dep = next((producer[t] for t in it if t in producer), None)
            if dep is None:
                stack.pop()
                state[ni] = 2
                order.append(ni)
            elif state[dep] == 1:
                raise InvalidModelError(f"graph has a cycle through node {model.nodes[dep].name!r}")
            elif state[dep] == 0:
                state[dep] = 1
                stack.append((dep, iter(model.nodes[dep].inputs)))
    return order


def check_indices(model: LiteModel) -> None:
    """Every tensor index the graph uses exists (InvalidModelError naming the user otherwise)."""
    n = len(model.tensors)
    for what, indices in (("graph inputs", model.inputs), ("graph outputs", model.outputs)):
        if any(not 0 <= t < n for t in indices):
            raise InvalidModelError(f"model {model.name!r}: {what} {list(indices)} outside [0, {n})")
    for node in model.nodes:
        if any(not 0 <= t < n for t in (*node.inputs, *node.outputs)):
            raise InvalidModelError(f"node {node.name!r}: tensor indices {node.inputs} -> "
                                    f"{node.outputs} outside [0, {n})")


def input_shape(t: LiteTensor, given: Mapping[str, Sequence[int]] | None) -> tuple[int, ...]:
    """The concrete shape of graph input t: from `given`, else its own static shape."""
    if given is not None and t.name in given:
        shape = tuple(int(d) for d in given[t.name])
        if len(shape) != len(t.shape) or any(
                isinstance(d, int) and d >= 0 and d != s for d, s in zip(t.shape, shape, strict=True)):
            raise InvalidModelError(f"input {t.name!r}: shape {shape} does not fit declared {t.shape}")
        if min(shape, default=1) < 0:
            raise InvalidModelError(f"input {t.name!r}: negative dim in {shape}")
        return shape
    if not t.is_static:
        raise InvalidModelError(f"input {t.name!r} has dynamic shape {t.shape}: pass input_shapes")
    return tuple(int(d) for d in t.shape)
