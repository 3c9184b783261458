"""Lite (sub)graph -> Program: the NPU compiler.

Pipeline (each stage returns new data, the input model is never mutated):
1. `fold_batchnorm`: inference BatchNorm / FusedBatchNorm after a Conv2DFusion whose output
   feeds nothing else is folded into the conv's weights and bias (float64 arithmetic);
   `fuse_activations` then folds a parameter-free Activation into the conv / GEMM /
   binary / pooling node before it (its activation_type), saving one pass over the tensor;
   after lowering, a residual Add of a conv's output (ResNet's shortcut) is folded into
   that conv's epilogue (`_fuse_residual_adds`).
2. Walk the nodes in topological order with concrete shapes (`shapes.lower`, one rule per
   primitive). A node whose inputs are all constants is run at compile time (constant
   folding of weight-only subgraphs, e.g. ConstantOfShape -> Reshape); every other node
   becomes one kernel step, or an alias for reshape-like ops (no kernel, shared buffer).
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
   NPU's direct kernel takes, that kernel's order (`conv_weights`); pooling divisors, resize
   index maps) are packed once into one 64-byte aligned blob.

fp16 mode (`enable_fp16=True`): every float32 tensor except the graph inputs/outputs is
stored as float16 (weights too, halving weight_bytes); a cast step converts each input once
and each output once. Kernels accumulate in float32 (GEMMs through kernels.gemm, reductions
with dtype=float32) and round once when they store. Error bound: each stored value carries
a relative rounding error <= 2**-11 (fp16's unit roundoff), so one GEMM-based op with
fp16-rounded operands satisfies |y16 - y| <= 2**-11 * |y| + 2**-10 * (|W| @ |x|) + (fp32
accumulation error); tests/test_npu_compiler.py enforces this per op and a loose end-to-end
bound (2e-2 of the output range) through a small network.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from converters.lite import dtypes as lite_dtypes
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu import capability, planner, shapes
from provider.npu.kernels import KERNELS
from provider.npu.program import Program, Slot, Step

log = logging.getLogger("litenpu.npu")

__all__ = ["compile_model", "fold_batchnorm", "fuse_activations"]

ALIGNMENT = 64
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)


# ---- stage 1: BatchNorm folding -----------------------------------------------------------


def _consumers(model: LiteModel) -> dict[int, list[int]]:
    users: dict[int, list[int]] = {}
    for ni, node in enumerate(model.nodes):
        for t in node.inputs:
            users.setdefault(t, []).append(ni)
    return users


def fold_batchnorm(model: LiteModel) -> LiteModel:
    """A copy of `model` where each BatchNorm right after a Conv2DFusion is folded into it.

    Applies when the conv has no fused activation, its output feeds only the BatchNorm and
    is not a graph output, and weights, bias and BN statistics are all constants.
    """
    producers = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    users = _consumers(model)
    tensors = list(model.tensors)
    nodes: list[LiteNode | None] = list(model.nodes)
    for bi, bn in enumerate(model.nodes):
        if bn.op not in ("FusedBatchNorm", "BatchNorm") or not bn.inputs:
            continue
        x = bn.inputs[0]
        ci = producers.get(x)
        if ci is None or nodes[ci] is None or nodes[ci].op != "Conv2DFusion":
            continue
        conv = nodes[ci]
        if (users.get(x) != [bi] or x in model.outputs
                or conv.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION"
                or any(tensors[t].data is None for t in (*conv.inputs[1:], *bn.inputs[1:]))):
            continue
        infos = [shapes.TensorInfo((), F32, tensors[t].data) for t in bn.inputs]
        scale, shift = shapes.batchnorm_affine(bn, infos)
        w = tensors[conv.inputs[1]]
        new_w = (w.data.astype(np.float64) * scale.reshape(-1, 1, 1, 1)).astype(w.data.dtype)
        bias = tensors[conv.inputs[2]].data.astype(np.float64) if len(conv.inputs) > 2 else 0.0
        new_b = (bias * scale + shift).astype(w.data.dtype)
        wi = len(tensors)
        tensors.append(dataclasses.replace(w, name=f"{w.name}/bn_folded", data=new_w))
        tensors.append(LiteTensor.of(f"{bn.name}/bn_bias", new_b.dtype, new_b.shape, new_b))
        nodes[ci] = dataclasses.replace(
            conv, inputs=[conv.inputs[0], wi, wi + 1], outputs=[bn.outputs[0]],
            attrs={**conv.attrs, "activation_type": "NO_ACTIVATION"})
        nodes[bi] = None
        log.debug("folded %s into %s", bn.name, conv.name)
    return dataclasses.replace(model, tensors=tensors, nodes=[n for n in nodes if n is not None],
                               subgraphs=[])


# Producers whose kernels apply a fused activation, and the activations that need no
# parameters (kernels.activation.fused passes none).
_FUSES_ACTIVATION = {"Conv2DFusion", "Conv2dTransposeFusion", "FullConnection", "MatMulFusion",
                     "AddFusion", "SubFusion", "MulFusion", "DivFusion", "MaxPoolFusion",
                     "AvgPoolFusion"}
_FUSABLE = {"RELU", "RELU6", "SIGMOID", "TANH", "HSWISH", "SWISH", "SOFTPLUS", "SOFTSIGN", "ABS"}


def fuse_activations(model: LiteModel) -> LiteModel:
    """A copy of `model` where an Activation right after a fusing producer (conv, GEMM,
    binary arithmetic, pooling) becomes that producer's activation_type.

    Applies when the producer has no activation yet, its output feeds only the Activation
    and is not a graph output, and the activation takes no parameters.
    """
    producers = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    users = _consumers(model)
    nodes: list[LiteNode | None] = list(model.nodes)
    for ai, act in enumerate(model.nodes):
        kind = act.attrs.get("activation_type")
        if act.op != "Activation" or kind not in _FUSABLE or len(act.inputs) != 1:
            continue
        x = act.inputs[0]
        pi = producers.get(x)
        if pi is None or nodes[pi] is None or nodes[pi].op not in _FUSES_ACTIVATION:
            continue
        prod = nodes[pi]
        if (users.get(x) != [ai] or x in model.outputs or len(prod.outputs) != 1
                or prod.attrs.get("activation_type", "NO_ACTIVATION") != "NO_ACTIVATION"):
            continue
        nodes[pi] = dataclasses.replace(prod, outputs=list(act.outputs),
                                        attrs={**prod.attrs, "activation_type": kind})
        nodes[ai] = None
    return dataclasses.replace(model, nodes=[n for n in nodes if n is not None], subgraphs=[])


# ---- stage 2: lowering with constant folding -------------------------------------------------


@dataclass
class _Val:
    """A value of the program under construction (model tensor or compiler-made)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    value: np.ndarray | None = None
    io: str = ""  # "input" / "output" when bound to a caller buffer


@dataclass
class _Step:
    kernel: str  # "" = alias of inputs[0]
    attrs: dict
    inputs: list[int]
    outputs: list[int]
    scratch: list[int] = field(default_factory=list)


class _Builder:
    """Mutable state of one compile_model call (never escapes it)."""

    def __init__(self, fp16: bool):
        self.fp16 = fp16
        self.vals: list[_Val] = []
        self.steps: list[_Step] = []

    def storage(self, dtype: np.dtype) -> np.dtype:
        return F16 if self.fp16 and dtype == F32 else np.dtype(dtype)

    def add(self, name: str, shape, dtype, value: np.ndarray | None = None, *, io: str = "",
            exact: bool = False) -> int:
        """A new val; its dtype becomes the storage dtype unless `exact` or bound to I/O."""
        if value is not None:
            value = np.asarray(value, dtype=self.storage(value.dtype), order="C")
            shape, dtype = value.shape, value.dtype
        elif not (exact or io):
            dtype = self.storage(dtype)
        self.vals.append(_Val(name, tuple(int(d) for d in shape), np.dtype(dtype), value, io))
        return len(self.vals) - 1

    def info(self, v: int) -> shapes.TensorInfo:
        val = self.vals[v]
        return shapes.TensorInfo(val.shape, val.dtype, val.value)


def _run_now(low: shapes.Lowered, arrays: list[np.ndarray], outs: list[tuple]) -> list[np.ndarray]:
    """Run a lowered node's kernel on constant inputs (compile-time constant folding)."""
    results = [np.empty(shape, dtype) for shape, dtype in outs]
    scratch = [np.empty(shape, dtype) for _, shape, dtype in low.scratch]
    KERNELS[low.kernel].run(arrays, [*results, *scratch], low.attrs)
    return results


def _bind_constants(b: _Builder, model: LiteModel, tensors: Sequence[int], env: dict[int, int]) -> None:
    """Give constant tensors a val on first use (a partition may share a big tensor list)."""
    for t in tensors:
        if t not in env and model.tensors[t].data is not None:
            env[t] = b.add(model.tensors[t].name, (), F32, np.asarray(model.tensors[t].data))


def _lower_node(b: _Builder, model: LiteModel, node: LiteNode, env: dict[int, int]) -> None:
    """Lower one node: fold it, or record its step; bind its outputs in env."""
    _bind_constants(b, model, node.inputs, env)
    missing = [model.tensors[t].name for t in node.inputs if t not in env]
    if missing:
        raise InvalidModelError(f"node {node.name!r}: inputs {missing} are produced by no node")
    in_vals = [env[t] for t in node.inputs]
    out_types = [model.tensors[t].dtype if lite_dtypes.has_numpy(model.tensors[t].type_id) else None
                 for t in node.outputs]
    low = shapes.lower(node, [b.info(v) for v in in_vals], out_types)
    if len(low.outputs) < len(node.outputs):
        raise UnsupportedError(f"node {node.name!r} ({node.op}): only {len(low.outputs)} of its "
                               f"{len(node.outputs)} outputs are computed on the NPU")
    outs = [(shape, b.storage(dt)) for shape, dt in low.outputs]
    names = [model.tensors[t].name for t in node.outputs]
    if low.values is not None:
        for t, name, value in zip(node.outputs, names, low.values, strict=True):
            env[t] = b.add(name, (), F32, value)
        return
    operands = [in_vals[o] if isinstance(o, int) else b.add(f"{node.name}/packed{i}", (), F32, o)
                for i, o in enumerate(low.operands)]
    if all(b.vals[v].value is not None for v in operands):
        arrays = [b.vals[v].value for v in operands]
        results = [arrays[0].reshape(outs[0][0])] if not low.kernel else _run_now(low, arrays, outs)
        for t, name, value in zip(node.outputs, names, results, strict=False):
            env[t] = b.add(name, (), F32, value)
        return
    out_vals = [b.add(name, shape, dt) for name, (shape, dt) in zip(names, outs, strict=False)]
    scratch = [b.add(f"{node.name}/{s}", shape, dt, exact=True) for s, shape, dt in low.scratch]
    for t, v in zip(node.outputs, out_vals, strict=False):
        env[t] = v
    b.steps.append(_Step(low.kernel, low.attrs, operands, out_vals, scratch))


def _topological(model: LiteModel) -> list[LiteNode]:
    """Nodes ordered so every tensor is produced before it is read (stable; cycles rejected)."""
    producer = {t: ni for ni, node in enumerate(model.nodes) for t in node.outputs}
    state = [0] * len(model.nodes)  # 0 new, 1 visiting, 2 done
    order: list[LiteNode] = []
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
                order.append(model.nodes[ni])
            elif state[dep] == 1:
                raise InvalidModelError(f"graph has a cycle through node {model.nodes[dep].name!r}")
            elif state[dep] == 0:
                state[dep] = 1
                stack.append((dep, iter(model.nodes[dep].inputs)))
    return order


def _check_indices(model: LiteModel) -> None:
    """Every tensor index the graph uses exists (InvalidModelError naming the user otherwise)."""
    n = len(model.tensors)
    for what, indices in (("graph inputs", model.inputs), ("graph outputs", model.outputs)):
        if any(not 0 <= t < n for t in indices):
            raise InvalidModelError(f"model {model.name!r}: {what} {list(indices)} outside [0, {n})")
    for node in model.nodes:
        if any(not 0 <= t < n for t in (*node.inputs, *node.outputs)):
            raise InvalidModelError(f"node {node.name!r}: tensor indices {node.inputs} -> "
                                    f"{node.outputs} outside [0, {n})")


def _input_shape(t: LiteTensor, given: Mapping[str, Sequence[int]] | None) -> tuple[int, ...]:
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


# ---- stage 3-4: outputs, dead steps, buffer groups, arena plan --------------------------------


def _bind_outputs(b: _Builder, model: LiteModel, env: dict[int, int]) -> list[int]:
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
        b.steps.append(_Step("cast" if io_dtype != val.dtype else "copy", {}, [v], [o]))
        outputs.append(o)
    return outputs


def _live_steps(b: _Builder, outputs: list[int]) -> list[_Step]:
    """Steps that contribute to an output, in order."""
    needed = set(outputs)
    keep = []
    for s in reversed(b.steps):
        if needed.intersection(s.outputs):
            keep.append(s)
            needed.update(s.inputs)
    return keep[::-1]


def _fuse_residual_adds(b: _Builder, steps: list[_Step]) -> list[_Step]:
    """Fold `y = conv(x) + r` (a residual Add) into the conv step: the conv's epilogue adds r
    while its output rows are still in cache, and the Add's pass over memory disappears.

    Applies when the conv has no activation of its own (the Add's becomes the conv's), its
    output feeds only this Add and is not a graph output, r has the output's shape and
    dtype, and r is made before the conv step (so the fused step can read it).
    """
    made_at = {v: i for i, s in enumerate(steps) for v in s.outputs}
    reads: dict[int, int] = {}
    for s in steps:
        for v in s.inputs:
            reads[v] = reads.get(v, 0) + 1
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
            steps[ci] = _Step("conv2d", {**conv.attrs, "residual": True,
                                         "activation": add.attrs.get("activation", "NO_ACTIVATION")},
                              [*conv.inputs, r], list(add.outputs), conv.scratch)
            fused.add(ai)
            break
    return [s for i, s in enumerate(steps) if i not in fused]


def _is_arena(b: _Builder, v: int) -> bool:
    return not b.vals[v].io and b.vals[v].value is None


def _resolve_aliases(b: _Builder, steps: list[_Step], parent: list[int]) -> list[_Step]:
    """Alias steps whose source and target both live in the arena merge into one buffer
    group; the others become copies (a caller's buffer cannot host another tensor)."""
    out = []
    for s in steps:
        if s.kernel:
            out.append(s)
        elif _is_arena(b, s.inputs[0]) and _is_arena(b, s.outputs[0]):
            parent[s.outputs[0]] = _find(parent, s.inputs[0])
        else:
            out.append(_Step("copy", {}, s.inputs, s.outputs))
    return out


def _find(parent: list[int], v: int) -> int:
    while parent[v] != v:
        parent[v] = parent[parent[v]]
        v = parent[v]
    return v


def _group_spans(steps: list[_Step], parent: list[int], arena: set[int]) -> dict[int, list[int]]:
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


def _merge_inplace(b: _Builder, steps: list[_Step], parent: list[int], arena: set[int]) -> None:
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


def _elide_concats(b: _Builder, steps: list[_Step], parent: list[int], arena: set[int],
                   part_at: dict[int, int]) -> list[_Step]:
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


def _plan_arena(b: _Builder, steps: list[_Step], parent: list[int], arena: set[int],
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


def _build_program(b: _Builder, model: LiteModel, steps: list[_Step], inputs: list[int],
                   outputs: list[int], offsets: dict[int, int], arena_bytes: int) -> Program:
    """Slots in order of first use, and the weight blob (64-byte aligned, filled once)."""
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
            weights.append((off, val.value))
            blob_size = off + val.value.nbytes
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
    blob = np.zeros(blob_size, np.uint8)
    for off, value in weights:
        blob[off:off + value.nbytes] = value.reshape(-1).view(np.uint8)
    program = Program(slots=slots, steps=program_steps, inputs=program_inputs,
                      outputs=program_outputs, weights=blob, internal_bytes=arena_bytes,
                      options={"enable_fp16": b.fp16}, name=model.name)
    program.validate()
    return program


def compile_model(model: LiteModel, input_shapes: Mapping[str, Sequence[int]] | None = None,
                  *, enable_fp16: bool = False) -> Program:
    """Compile a Lite (sub)graph whose every node the NPU supports into a static Program.

    `input_shapes` gives concrete shapes for graph inputs by tensor name (required for
    inputs with dynamic dims). Raises UnsupportedError listing the nodes the NPU cannot run
    (see capability.py) and InvalidModelError for malformed graphs or shapes.
    """
    _check_indices(model)
    rejected = {model.nodes[i].name: why for i, why in capability.supported_nodes(model).items() if why}
    if rejected:
        detail = "; ".join(f"{n}: {why}" for n, why in rejected.items())
        raise UnsupportedError(f"model {model.name!r}: {len(rejected)} node(s) not supported on the NPU: {detail}")
    graph = fuse_activations(fold_batchnorm(model))
    b = _Builder(enable_fp16)
    env: dict[int, int] = {}
    inputs = []
    for t in graph.inputs:
        tensor = graph.tensors[t]
        shape = _input_shape(tensor, input_shapes)
        v = b.add(tensor.name, shape, tensor.dtype, io="input")
        inputs.append(v)
        env[t] = v
        if b.storage(tensor.dtype) != tensor.dtype:
            env[t] = b.add(f"{tensor.name}/fp16", shape, tensor.dtype)
            b.steps.append(_Step("cast", {}, [v], [env[t]]))
    for node in _topological(graph):
        _lower_node(b, graph, node, env)
    _bind_constants(b, graph, graph.outputs, env)
    missing = [graph.tensors[t].name for t in graph.outputs if t not in env]
    if missing:
        raise InvalidModelError(f"model {model.name!r}: outputs {missing} are produced by no node")
    outputs = _bind_outputs(b, graph, env)
    steps = _fuse_residual_adds(b, _live_steps(b, outputs))
    parent = list(range(len(b.vals)))
    steps = _resolve_aliases(b, steps, parent)
    arena = {v for s in steps for v in (*s.inputs, *s.outputs, *s.scratch) if _is_arena(b, v)}
    _merge_inplace(b, steps, parent, arena)
    part_at: dict[int, int] = {}
    steps = _elide_concats(b, steps, parent, arena, part_at)
    offsets, arena_bytes = _plan_arena(b, steps, parent, arena, part_at)
    return _build_program(b, graph, steps, inputs, outputs, offsets, arena_bytes)
