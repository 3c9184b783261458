"""Lowering of Program steps to native steps (`native.Step`), and the runs of them.

`lower(program, number)` returns the Step that computes what the numpy kernel of that step
computes, or None when the step is outside what the compiled kernels (`csrc/`) do (a dtype
other than float32, a fused activation without a clamp form, batched matmul, ...): that step
stays on its numpy kernel. Every size the C code relies on is checked here against the
slots, once, at executor creation. `segments(program)` groups consecutive native steps so that one C call runs each
group.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from provider.npu import native
from provider.npu.conv_weights import DIRECT_MAX_TAPS
from provider.npu.program import Program, Slot

__all__ = ["NativeRun", "channels_last", "lower", "segments"]

F32 = np.dtype(np.float32)
INF = float(np.finfo(np.float32).max) * 2  # becomes +inf as float32

# Fused activations with a clamp form: (lo, hi); ACT_CLAMP in csrc/npu.h.
_CLAMPS = {"NO_ACTIVATION": (-INF, INF), "RELU": (0.0, INF), "RELU6": (0.0, 6.0)}
_ACT_CLAMP, _ACT_LEAKY = 0, 1

Lowering = Callable[[Sequence[Slot], Sequence[Slot], dict, "_Builder"], bool]
_LOWERINGS: dict[str, tuple[str, Lowering]] = {}  # kernel -> (native op, lowering)


class _Builder:
    """Fills one Step: slot indices by position and integer parameters in order."""

    def __init__(self, op: str, inputs: Sequence[int], outputs: Sequence[int]):
        self.step = native.Step()
        self.step.op = native.OPS[op]
        for i in range(native.MAX_SLOTS):
            self.step.slot[i] = -1
        self.inputs, self.outputs = inputs, outputs
        self._n = 0

    def slots(self, *indices: int | None) -> None:
        for position, index in enumerate(indices):
            self.step.slot[position] = -1 if index is None else index

    def slot_at(self, position: int, index: int) -> None:
        self.step.slot[position] = index

    def params(self, *values: int) -> None:
        for v in values:
            self.step.p[self._n] = int(v)
            self._n += 1

    def activation_code(self, kind: str) -> int | None:
        """Set f[0:2] for the fused activation `kind`; its code, or None when it has no
        clamp form."""
        if kind not in _CLAMPS:
            return None
        self.step.f[0], self.step.f[1] = _CLAMPS[kind]
        return _ACT_CLAMP

    def activation(self, kind: str) -> bool:
        """Append the fused activation `kind` as the next parameter; False when unknown."""
        code = self.activation_code(kind)
        if code is not None:
            self.params(code)
        return code is not None


def _lowers(kernel: str, op: str | None = None) -> Callable[[Lowering], Lowering]:
    """Register the lowering of numpy kernel `kernel` to native op `op` (default: the same)."""
    def deco(fn: Lowering) -> Lowering:
        _LOWERINGS[kernel] = (op or kernel, fn)
        return fn
    return deco


def _f32(*slots: Slot) -> bool:
    return all(s.np_dtype == F32 for s in slots)


@_lowers("conv2d", "conv")
def _conv2d(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: _Builder) -> bool:
    x, w, y = ins[0], ins[1], outs[0]
    residual = attrs.get("residual", False)
    bias = ins[2] if len(ins) > 2 + residual else None
    res = ins[-1] if residual else None
    if not _f32(x, w, y, *(s for s in (bias, res) if s is not None)):
        return False
    n, c, h, wd = x.shape
    _, o, oh, ow = y.shape
    g = attrs["group"]
    kh, kw = attrs["kernel"]
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    top, _, left, _ = attrs["pads"]
    if w.shape != (g, o // g, c // g * kh * kw) or (bias is not None and bias.shape != (o, 1)):
        return False
    depthwise = c == g
    im2col = not depthwise and ([kh, kw] != [1, 1] or [sh, sw] != [1, 1] or any(attrs["pads"]))
    cols = None
    if im2col:  # the planned cols scratch holds one image's (C*KH*KW, OH*OW) matrix (an
        # empty batch plans an empty one, which the kernel, with no image to do, never touches)
        names = list(attrs.get("scratch", []))
        need = c * kh * kw * oh * ow * 4 if n else 0
        if "cols" not in names or outs[1 + names.index("cols")].nbytes < need:
            return False
        cols = b.outputs[1 + names.index("cols")]
    act = b.activation_code(attrs.get("activation", "NO_ACTIVATION"))
    if act is None:
        return False
    b.step.op = native.OPS["dwconv" if depthwise else "conv"]
    direct = attrs.get("weights") == "direct"  # stored for the direct kernel (conv_weights)
    if direct and (depthwise or kh * kw > DIRECT_MAX_TAPS):
        return False  # a Program the compiler did not write: the kernel holds at most this many taps
    b.params(n, c, h, wd, o, oh, ow, g, kh, kw, sh, sw, dh, dw, top, left, act, im2col, 0, 0,
             direct)
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2] if bias is not None else None,
            b.inputs[-1] if residual else None, b.outputs[0], cols)
    return True


def _pool(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: _Builder) -> bool:
    x, y = ins[0], outs[0]
    if not _f32(*ins, y) or len(x.shape) != 4:
        return False
    n, c, h, wd = x.shape
    _, _, oh, ow = y.shape
    if len(ins) > 1 and ins[1].shape != (oh, ow):
        return False
    top, _, left, _ = attrs["pads"]
    if (oh, ow) == (1, 1) and list(attrs["kernel"]) == [h, wd] and not any(attrs["pads"]):
        # one window over the whole plane (a classifier's final pool): a global pool; with
        # no padding an average's reciprocal count is 1 / (H * W), the global mean's
        is_max = b.step.op == native.OPS["max_pool"]
        b.step.op = native.OPS["global_pool"]
        b.params(n * c, h * wd, is_max)
        b.slots(b.inputs[0], b.outputs[0])
        return b.activation(attrs.get("activation", "NO_ACTIVATION"))
    b.params(n * c, h, wd, oh, ow, *attrs["kernel"], *attrs["stride"], top, left)
    b.slots(b.inputs[0], b.inputs[1] if len(ins) > 1 else None, b.outputs[0])
    return b.activation(attrs.get("activation", "NO_ACTIVATION"))


_lowers("max_pool")(_pool)
_lowers("avg_pool")(_pool)


@_lowers("global_pool")
def _global_pool(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: _Builder) -> bool:
    x = ins[0]
    if not _f32(x, outs[0]) or len(x.shape) != 4:
        return False
    b.params(x.shape[0] * x.shape[1], x.shape[2] * x.shape[3], attrs["mode"] == "max")
    b.slots(b.inputs[0], b.outputs[0])
    return b.activation(attrs.get("activation", "NO_ACTIVATION"))


@_lowers("concat")
def _concat(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: _Builder) -> bool:
    y, axis = outs[0], attrs["axis"]
    if len(ins) >= native.MAX_SLOTS or any(s.np_dtype != y.np_dtype for s in ins):
        return False
    b.params(math.prod(y.shape[:axis]), len(ins))
    b.params(*(math.prod(s.shape[axis:]) * s.np_dtype.itemsize for s in ins))
    for position, index in enumerate(b.inputs):
        b.slot_at(position, index)
    b.slot_at(native.MAX_SLOTS - 1, b.outputs[0])
    return True


def _merged_transpose(shape: Sequence[int], perm: Sequence[int]) -> tuple[list[int], list[int]]:
    """The same transpose with size-1 axes dropped and input axes that stay adjacent merged:
    (input shape, perm) of at most as many axes."""
    keep = [a for a in perm if shape[a] != 1]
    groups: list[list[int]] = []
    for a in keep:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda i: groups[i][0])
    merged = [math.prod(shape[a] for a in groups[i]) for i in order]
    return merged, [order.index(i) for i in range(len(groups))]


@_lowers("transpose")
def _transpose(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: _Builder) -> bool:
    x = ins[0]
    size = x.np_dtype.itemsize
    shape, perm = _merged_transpose(x.shape, attrs["perm"])
    if not shape:
        shape, perm = [1], [0]
    if len(shape) > 6 or (perm[-1] != len(shape) - 1 and size != 4):
        return False
    strides = [math.prod(shape[a + 1:]) * size for a in range(len(shape))]
    out_shape = [shape[a] for a in perm]
    block = out_shape[-1] * size if perm[-1] == len(shape) - 1 else 0
    b.params(len(shape), block)
    b.step.p[2:2 + len(shape)] = out_shape
    b.step.p[8:8 + len(shape)] = [strides[a] for a in perm]
    b.slots(b.inputs[0], b.outputs[0])
    return True


@_lowers("matmul")
def _matmul(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: _Builder) -> bool:
    a_shape = attrs.get("a_shape", ins[0].shape)
    y_shape = attrs.get("y_shape", outs[0].shape)
    if (not _f32(*ins, outs[0]) or attrs["transpose_a"] or len(a_shape) != 2
            or len(y_shape) != 2 or len(ins[1].shape) != 2):
        return False
    (m, k), n = a_shape, y_shape[1]
    if ins[1].shape != ((n, k) if attrs["transpose_b"] else (k, n)):
        return False
    if len(ins) > 2 and ins[2].nbytes != n * 4:
        return False
    b.params(m, n, k, attrs["transpose_b"])
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2] if len(ins) > 2 else None, b.outputs[0])
    return b.activation(attrs.get("activation", "NO_ACTIVATION"))


@_lowers("activation")
def _activation(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: _Builder) -> bool:
    if not _f32(ins[0], outs[0]):
        return False
    kind = attrs["activation_type"]
    b.params(math.prod(ins[0].shape))
    b.slots(b.inputs[0], b.outputs[0])
    if kind == "HARD_TANH":
        b.step.f[0], b.step.f[1] = attrs.get("min_val", 0.0), attrs.get("max_val", 0.0)
        b.params(_ACT_CLAMP)
        return True
    if kind == "LEAKY_RELU":
        b.step.f[2] = attrs.get("alpha", 0.0)
        b.params(_ACT_LEAKY)
        return True
    return b.activation(kind)


@_lowers("softmax")
def _softmax(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: _Builder) -> bool:
    x = ins[0]
    if not _f32(x, outs[0]) or attrs["axis"] != len(x.shape) - 1:
        return False
    b.params(math.prod(x.shape[:-1]), x.shape[-1], attrs["log"])
    b.slots(b.inputs[0], b.outputs[0])
    return True


def lower(program: Program, number: int) -> native.Step | None:
    """The native Step for step `number` of `program`, or None (it stays on numpy)."""
    step = program.steps[number]
    if step.kernel not in _LOWERINGS:
        return None
    op, fn = _LOWERINGS[step.kernel]
    slots = program.slots
    builder = _Builder(op, step.inputs, step.outputs)
    ok = fn([slots[i] for i in step.inputs], [slots[i] for i in step.outputs], step.attrs, builder)
    return builder.step if ok else None


@dataclass
class NativeRun:
    """Consecutive steps [first, first + count) of a Program, run by one native call."""

    first: int
    steps: ctypes.Array  # of native.Step
    count: int

    def run(self, addresses: ctypes.Array, seconds: ctypes.Array | None = None,
            cores: int = 0) -> None:
        """Run the steps on the slot address table (per-step seconds into `seconds`)."""
        native.run(self.steps, self.count, addresses, seconds, cores)


# conv parameter positions (csrc/npu.h: C_*) and slot positions (S_*) the layout pass reads
_C_C, _C_O, _C_XCL, _C_YCL, _C_DIRECT = 1, 4, 18, 19, 20
_S_X, _S_RES, _S_Y = 0, 3, 4


def channels_last(program: Program, steps: Sequence[native.Step | None]) -> list[int]:
    """Store in channels-last order, and mark in `steps`, each arena tensor a native GEMM
    conv (not a direct one; no residual) writes and only native depthwise convs read (as
    their input, one channel per group). The depthwise kernel computes channels last, so it
    then skips transposing its input, and the GEMM writes the transposed product at no cost
    (MobileNet's expand / depthwise pairs; measured 20% off MobileNetV2). The other way,
    depthwise to pointwise, was measured slower: OpenBLAS runs the transposed operand's small
    GEMMs worse than the transpose costs. A tensor some other slot overlaps in the arena while
    it is live (an alias, an in-place result) keeps its layout. Returns the tensors' slot
    indices."""
    writers: dict[int, list[int]] = {}
    readers: dict[int, list[int]] = {}
    spans: dict[int, list[int]] = {}
    for number, step in enumerate(program.steps):
        for i in step.outputs:
            writers.setdefault(i, []).append(number)
        for i in step.inputs:
            readers.setdefault(i, []).append(number)
        for i in (*step.inputs, *step.outputs):
            span = spans.setdefault(i, [number, number])
            span[1] = number
    marked = []
    for index, slot in enumerate(program.slots):
        if slot.kind != "internal" or len(slot.shape) != 4 or len(writers.get(index, ())) != 1:
            continue
        producer, users = steps[writers[index][0]], readers.get(index, [])
        if not users or not _writes_channels_last(producer, index):
            continue
        if not all(_reads_channels_last(steps[u], index) for u in users):
            continue
        if _shares_memory(program, index, spans):
            continue
        producer.p[_C_YCL] = 1
        for u in users:
            steps[u].p[_C_XCL] = 1
        marked.append(index)
    return marked


def _writes_channels_last(step: native.Step | None, index: int) -> bool:
    return (step is not None and step.op == native.OPS["conv"] and step.slot[_S_Y] == index
            and step.slot[_S_RES] < 0 and not step.p[_C_DIRECT])


def _reads_channels_last(step: native.Step | None, index: int) -> bool:
    return (step is not None and step.op == native.OPS["dwconv"] and step.slot[_S_X] == index
            and step.p[_C_O] == step.p[_C_C]
            and not any(step.slot[s] == index for s in range(1, native.MAX_SLOTS)))


def _shares_memory(program: Program, index: int, spans: dict[int, list[int]]) -> bool:
    """Whether another arena slot overlaps slot `index`'s bytes while both are in use."""
    slot, (first, last) = program.slots[index], spans[index]
    for other, s in enumerate(program.slots):
        if other == index or s.kind != "internal" or other not in spans:
            continue
        if s.offset < slot.offset + slot.nbytes and slot.offset < s.offset + s.nbytes:
            if spans[other][0] <= last and first <= spans[other][1]:
                return True
    return False


def segments(program: Program) -> list[int | NativeRun]:
    """The Program's steps in order: a step number (numpy kernel) or a NativeRun; all step
    numbers when the native library is unavailable."""
    if native.library() is None:
        return list(range(len(program.steps)))
    steps = [lower(program, number) for number in range(len(program.steps))]
    channels_last(program, steps)
    out: list[int | NativeRun] = []
    pending: list[native.Step] = []
    for number, step in enumerate(steps):
        if step is not None:
            pending.append(step)
            continue
        _flush(out, pending, number)
        out.append(number)
    _flush(out, pending, len(program.steps))
    return out


def _flush(out: list[int | NativeRun], pending: list[native.Step], end: int) -> None:
    if pending:
        array = (native.Step * len(pending))(*pending)
        out.append(NativeRun(end - len(pending), array, len(pending)))
        pending.clear()
