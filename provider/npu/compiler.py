"""Lite (sub)graph -> Program: the NPU compiler.

Pipeline (each stage returns new data, the input model is never mutated):
1. `rewrites.fold_batchnorm`: inference BatchNorm / FusedBatchNorm after a Conv2DFusion whose output
   feeds nothing else is folded into the conv's weights and bias (float64 arithmetic);
   `rewrites.fuse_bias_adds` makes a constant bias Add after a MatMul that MatMul's bias;
   `rewrites.fuse_gelu` writes x * 0.5 * (1 + erf(x / sqrt(2))) as one GELU Activation;
   `rewrites.fuse_swish` writes x * sigmoid(x) as one SWISH Activation (SiLU);
   `rewrites.fuse_activations` then folds a parameter-free Activation into the conv / GEMM /
   binary / pooling node before it (its activation_type), saving one pass over the tensor;
   after lowering, a residual Add of a conv's output (ResNet's shortcut) is folded into
   that conv's epilogue (`_fuse_residual_adds`), and an int8 SiLU's table + multiply into one
   table (`code_tables.fuse_code_tables`).
2. Walk the nodes in topological order with concrete shapes (`lowering`, one rule per
   primitive in `ops`). A node whose inputs are all constants is run at compile time
   (constant folding of weight-only subgraphs, e.g. ConstantOfShape -> Reshape); every other
   node becomes one kernel step, or an alias for reshape-like ops (no kernel, shared buffer).
3. Graph outputs are bound to output slots: the producing step writes straight into the
   caller's buffer. An output that is a graph input, a constant, listed twice, or stored in
   another dtype (fp16 mode) gets one copy/cast step; an output made by an alias op (and an
   alias of a caller's buffer) turns that alias into the one copy.
4. Unused steps are dropped; aliases and in-place elementwise steps (the input's last use,
   same shape and dtype) merge tensors into buffer groups; a concat whose inputs can be
   computed straight into their slices of its output is dropped too, its inputs joining the
   output's group at their offsets (`_elide_concats`); `planner.lifetimes` / `place` give
   each group (and each step's scratch) an arena offset, so `internal_bytes` is exact.
5. Weights (and constants the rules derive: GEMM-packed conv/FC weights, or for convs the
   NPU's direct kernel takes, that kernel's order (`ops.conv_weights`); pooling divisors,
   resize index maps; made only now, see `ops.common.Packed`) are packed once into one
   64-byte aligned blob.

fp16 mode (`CompileOptions(enable_fp16=True)`): every float32 tensor except the graph inputs/outputs is
stored as float16 (weights too, halving weight_bytes); a cast step converts each input once
and each output once. Kernels accumulate in float32 (GEMMs through ops.gemm, reductions
with dtype=float32) and round once when they store. Error bound: each stored value carries
a relative rounding error <= 2**-11 (fp16's unit roundoff), so one GEMM-based op with
fp16-rounded operands satisfies |y16 - y| <= 2**-11 * |y| + 2**-10 * (|W| @ |x|) + (fp32
accumulation error); tests/test_npu_compiler.py enforces this per op and a loose end-to-end
bound (2e-2 of the output range) through a small network.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from converters.lite import dtypes as lite_dtypes
from converters.lite.ir import LiteModel
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu import capability, planner
from provider.npu.affine_folds import fold_conv_affine, fold_input_affine, merge_scale_shift
from provider.npu.code_tables import fuse_code_tables
from provider.npu.lowering import (
    Builder,
    LoweredStep,
    bind_constants,
    check_indices,
    input_shape,
    lower_node,
    producers_and_reads,
    topological,
)
from provider.npu.memory import DeviceBuffer
from provider.npu.ops import KERNELS
from provider.npu.program import Program, Slot, Step
from provider.npu.rewrites import (
    fold_batchnorm,
    fuse_activations,
    fuse_bias_adds,
    fuse_gelu,
    fuse_hardswish,
    fuse_swish,
)
from provider.options import DEFAULT_COMPILE, CompileOptions

WeightAllocator = Callable[[int], DeviceBuffer]

__all__ = ["compile_model"]

ALIGNMENT = 64
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)


# ---- stage 3-4: outputs, dead steps, buffer groups, arena plan --------------------------------


def _bind_outputs(b: Builder, model: LiteModel, env: dict[int, int]) -> list[int]:
    """Output vals bound to caller buffers, adding a copy/cast step where no step can write."""
    producer = {v: s for s in b.steps for v in s.outputs}
    outputs = []
    for t in model.outputs:
        v = env[t]
        val = b.vals[v]
        declared = model.tensors[t]
        declared = declared.dtype if lite_dtypes.has_numpy(declared.type_id) else val.dtype
        io_dtype = F32 if b.fp16 and declared == F32 and val.dtype == F16 else val.dtype
        step = producer.get(v)
        if step is not None and not val.io and val.dtype == io_dtype:  # aliases become copies
            val.io = "output"
            outputs.append(v)
            continue
        o = b.add(model.tensors[t].name, val.shape, io_dtype, io="output")
        b.steps.append(LoweredStep("cast" if io_dtype != val.dtype else "copy", {}, [v], [o]))
        outputs.append(o)
    return outputs


def _live_steps(b: Builder, outputs: list[int]) -> list[LoweredStep]:
    """Steps that contribute to an output, in order."""
    needed = set(outputs)
    keep = []
    for s in reversed(b.steps):
        if needed.intersection(s.outputs):
            keep.append(s)
            needed.update(s.inputs)
    return keep[::-1]


def _fuse_residual_adds(b: Builder, steps: list[LoweredStep]) -> list[LoweredStep]:
    """Fold `y = conv(x) + r` (a residual Add) into the conv step: the conv's epilogue adds r
    while its output rows are still in cache, and the Add's pass over memory disappears.

    Applies when the conv has no activation of its own (the Add's becomes the conv's), its
    output feeds only this Add and is not a graph output, r has the output's shape and
    dtype, and r is made before the conv step (so the fused step can read it).
    """
    made_at, reads = producers_and_reads(steps)
    fused: set[int] = set()  # indices of the Add steps folded away
    for ai, add in enumerate(steps):
        if add.kernel != "binary" or add.attrs.get("op") != "add" or len(add.inputs) != 2:
            continue
        for pos in (0, 1):
            y, r = add.inputs[pos], add.inputs[1 - pos]
            ci = made_at.get(y)
            if ci is None or y == r:
                continue
            conv = steps[ci]
            vy, vr, vo = b.vals[y], b.vals[r], b.vals[add.outputs[0]]
            if (conv.kernel != "conv2d" or conv.attrs.get("residual") or reads.get(y) != 1 or vy.io
                    or conv.attrs.get("activation", "NO_ACTIVATION") != "NO_ACTIVATION"
                    or not vr.shape == vy.shape == vo.shape or not vr.dtype == vy.dtype == vo.dtype
                    or made_at.get(r, -1) > ci):
                continue
            steps[ci] = LoweredStep("conv2d", {**conv.attrs, "residual": True,
                                         "activation": add.attrs.get("activation", "NO_ACTIVATION")},
                              [*conv.inputs, r], list(add.outputs), conv.scratch)
            fused.add(ai)
            break
    return [s for i, s in enumerate(steps) if i not in fused]


def _is_arena(b: Builder, v: int) -> bool:
    return not b.vals[v].io and b.vals[v].value is None


def _resolve_aliases(b: Builder, steps: list[LoweredStep], parent: list[int]) -> list[LoweredStep]:
    """Alias steps whose source and target both live in the arena merge into one buffer
    group; the others become copies (a caller's buffer cannot host another tensor)."""
    out = []
    for s in steps:
        if s.kernel:
            out.append(s)
        elif _is_arena(b, s.inputs[0]) and _is_arena(b, s.outputs[0]):
            parent[s.outputs[0]] = _find(parent, s.inputs[0])
        else:
            out.append(LoweredStep("copy", {}, s.inputs, s.outputs))
    return out


def _find(parent: list[int], v: int) -> int:
    while parent[v] != v:
        parent[v] = parent[parent[v]]
        v = parent[v]
    return v


def _group_spans(steps: list[LoweredStep], parent: list[int], arena: set[int]) -> dict[int, list[int]]:
    """[first, last] step of each buffer group (keyed by its root): its members' lifetimes."""
    lives = planner.lifetimes([(s.inputs, (*s.outputs, *s.scratch)) for s in steps], len(parent))
    spans: dict[int, list[int]] = {}
    for v in arena:
        if lives[v] is None:  # an elided concat's output that was only another's input
            continue
        first, last = lives[v]
        span = spans.setdefault(_find(parent, v), [first, last])
        span[0], span[1] = min(span[0], first), max(span[1], last)
    return spans


def _merge_inplace(b: Builder, steps: list[LoweredStep], parent: list[int], arena: set[int]) -> None:
    """Let an in-place-capable step write over its first input when that input dies there."""
    spans = _group_spans(steps, parent, arena)
    for i, s in enumerate(steps):
        if not KERNELS[s.kernel].inplace or not s.outputs:
            continue
        x, y = s.inputs[0], s.outputs[0]
        if x not in arena or y not in arena or s.inputs.count(x) > 1:
            continue
        rx, ry = _find(parent, x), _find(parent, y)
        vx, vy = b.vals[x], b.vals[y]
        if rx == ry or spans[rx][1] != i or vx.shape != vy.shape or vx.dtype != vy.dtype:
            continue
        if any(_find(parent, v) == rx for v in s.inputs[1:]):
            continue
        parent[ry] = rx
        spans[rx][1] = max(spans[rx][1], spans.pop(ry)[1])


def _elide_concats(b: Builder, steps: list[LoweredStep], parent: list[int], arena: set[int],
                   part_at: dict[int, int]) -> list[LoweredStep]:
    """Concats whose inputs can be computed in place, each straight into its slice of the
    output buffer, vanish (no copy, and the inputs take no arena of their own): a concat
    along an axis with nothing but size-1 axes before it (so each input is one contiguous
    slice of the output), output and inputs in the arena, and each input a buffer of its
    own (no alias or in-place partner), used once by the concat and by nothing after it.
    The inputs join the output's buffer group at their byte offset (`part_at`: val -> bytes
    from the start of its group). Later concats go first, so that a concat's output can in
    turn be a slice of the next one's (nested concats)."""
    spans = _group_spans(steps, parent, arena)
    members: dict[int, int] = {}
    for v in arena:
        members[_find(parent, v)] = members.get(_find(parent, v), 0) + 1
    elided = set()
    for i in range(len(steps) - 1, -1, -1):
        s = steps[i]
        y = s.outputs[0] if s.kernel == "concat" else None
        if y is None or y not in arena or len(set(s.inputs)) != len(s.inputs):
            continue
        if np.prod(b.vals[y].shape[:s.attrs["axis"]]) != 1:
            continue
        if not all(x in arena and members[_find(parent, x)] == 1 and spans[_find(parent, x)][1] == i
                   and b.vals[x].dtype == b.vals[y].dtype for x in s.inputs):
            continue
        root, at = _find(parent, y), part_at.get(y, 0)
        for x in s.inputs:
            parent[x] = root
            part_at[x] = at
            at += b.vals[x].dtype.itemsize * int(np.prod(b.vals[x].shape))
            members[root] += 1
        elided.add(i)
    return [s for i, s in enumerate(steps) if i not in elided]


def _plan_arena(b: Builder, steps: list[LoweredStep], parent: list[int], arena: set[int],
                part_at: dict[int, int]) -> tuple[dict[int, int], int]:
    """Arena offset of every arena val (groups share one buffer, a val `part_at` bytes into
    it), and the arena size."""
    spans = _group_spans(steps, parent, arena)
    roots = sorted(spans)
    size: dict[int, int] = {}
    for v in arena:
        r = _find(parent, v)
        end = part_at.get(v, 0) + b.vals[v].dtype.itemsize * int(np.prod(b.vals[v].shape))
        size[r] = max(size.get(r, 0), end)
    requests = [(size[r], spans[r][0], spans[r][1]) for r in roots]
    offsets, total = planner.place(requests, ALIGNMENT)
    at = dict(zip(roots, offsets, strict=True))
    return {v: at[_find(parent, v)] + part_at.get(v, 0) for v in arena if _find(parent, v) in at}, total


# ---- stage 5: slots and weights ----------------------------------------------------------------


def _build_program(b: Builder, model: LiteModel, options: CompileOptions,
                   steps: list[LoweredStep], inputs: list[int], outputs: list[int],
                   offsets: dict[int, int], arena_bytes: int,
                   allocate: WeightAllocator | None) -> Program:
    """Slots in order of first use, and the weight blob (64-byte aligned, filled once; in
    the device memory `allocate` gives, else in host memory)."""
    slot_of: dict[int, int] = {}
    slots: list[Slot] = []
    weights: list[tuple[int, np.ndarray]] = []
    blob_size = 0

    def slot(v: int) -> int:
        nonlocal blob_size
        if v in slot_of:
            return slot_of[v]
        val = b.vals[v]
        if val.io:
            s = Slot.of(val.name, val.dtype, val.shape, val.io)
        elif val.value is not None:
            off = planner.align_up(blob_size, ALIGNMENT)
            value = b.array(v)
            weights.append((off, value))
            blob_size = off + value.nbytes
            s = Slot.of(val.name, val.dtype, val.shape, "weight", off)
        else:
            s = Slot.of(val.name, val.dtype, val.shape, "internal", offsets[v])
        slots.append(s)
        slot_of[v] = len(slots) - 1
        return slot_of[v]

    program_inputs = [slot(v) for v in inputs]
    program_outputs = [slot(v) for v in outputs]
    program_steps = [Step(s.kernel, dict(s.attrs), [slot(v) for v in s.inputs],
                          [slot(v) for v in (*s.outputs, *s.scratch)]) for s in steps]
    buffer = allocate(blob_size) if allocate is not None and blob_size else None
    blob = buffer.view() if buffer is not None else np.empty(blob_size, np.uint8)
    end = 0
    for off, value in weights:
        blob[end:off] = 0  # alignment padding: the Program's bytes are deterministic
        blob[off:off + value.nbytes] = value.reshape(-1).view(np.uint8)
        end = off + value.nbytes
    blob[end:] = 0
    program = Program(slots=slots, steps=program_steps, inputs=program_inputs,
                      outputs=program_outputs, weights=blob, internal_bytes=arena_bytes,
                      options=options.as_dict(), name=model.name)
    if buffer is not None:
        weakref.finalize(program, buffer.release)  # the Program owns its device memory
    program.validate()
    return program


def compile_model(model: LiteModel, input_shapes: Mapping[str, Sequence[int]] | None = None,
                  options: CompileOptions = DEFAULT_COMPILE, *,
                  allocate: WeightAllocator | None = None) -> Program:
    """Compile a Lite (sub)graph whose every node the NPU supports into a static Program.

    `input_shapes` gives concrete shapes for graph inputs by tensor name (required for
    inputs with dynamic dims); `options` is what the Program records (and cache keys hash).
    With `allocate` (e.g. `DevicePool.allocate`), the weight blob is packed straight into the
    device memory it returns, owned by the Program: an executor uses it in place instead of
    uploading a host copy. Raises UnsupportedError listing the nodes the NPU cannot run (see
    capability.py), InvalidModelError for malformed graphs or shapes, DeviceMemoryError when
    `allocate` cannot hold the weights.
    """
    check_indices(model)
    rejected = {model.nodes[i].name: why for i, why in capability.supported_nodes(model).items() if why}
    if rejected:
        detail = "; ".join(f"{n}: {why}" for n, why in rejected.items())
        raise UnsupportedError(f"model {model.name!r}: {len(rejected)} node(s) not supported on the NPU: {detail}")
    graph = fuse_gelu(fuse_bias_adds(model))
    graph = fuse_activations(fuse_swish(fold_conv_affine(fold_batchnorm(graph))))
    graph = fold_input_affine(fuse_activations(fuse_hardswish(graph)))  # after the RELU6 fused
    graph = merge_scale_shift(graph)
    b = Builder(options.enable_fp16)
    env: dict[int, int] = {}
    inputs = []
    for t in graph.inputs:
        tensor = graph.tensors[t]
        v, env[t] = b.bind_input(tensor, input_shape(tensor, input_shapes))
        inputs.append(v)
    for ni in topological(graph):
        lower_node(b, graph, graph.nodes[ni], env)
    bind_constants(b, graph, graph.outputs, env)
    missing = [graph.tensors[t].name for t in graph.outputs if t not in env]
    if missing:
        raise InvalidModelError(f"model {model.name!r}: outputs {missing} are produced by no node")
    outputs = _bind_outputs(b, graph, env)
    steps = _fuse_residual_adds(b, fuse_code_tables(b, _live_steps(b, outputs)))
    parent = list(range(len(b.vals)))
    steps = _resolve_aliases(b, steps, parent)
    arena = {v for s in steps for v in (*s.inputs, *s.outputs, *s.scratch) if _is_arena(b, v)}
    _merge_inplace(b, steps, parent, arena)
    part_at: dict[int, int] = {}
    steps = _elide_concats(b, steps, parent, arena, part_at)
    offsets, arena_bytes = _plan_arena(b, steps, parent, arena, part_at)
    return _build_program(b, graph, options, steps, inputs, outputs, offsets, arena_bytes,
                          allocate)
