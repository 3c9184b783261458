"""Filling one native step (`native.Step`, csrc/npu.h's lnpu_step) from a Program step: the
builder every family's native lowering writes into, the fused activations' clamp forms, the
unary function codes (activations and elementwise math share them) and the walk of a
broadcast operand over merged dims."""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

import numpy as np

from provider.npu import native
from provider.npu.program import Slot

F32 = np.dtype(np.float32)
INF = float(np.finfo(np.float32).max) * 2  # becomes +inf as float32

# Fused activations with a clamp form: (lo, hi); ACT_CLAMP in csrc/npu.h.
CLAMPS = {"NO_ACTIVATION": (-INF, INF), "RELU": (0.0, INF), "RELU6": (0.0, 6.0)}
# csrc/npu.h's ACT_* codes, in its order
(ACT_CLAMP, ACT_LEAKY, ACT_SWISH, ACT_SIGMOID, ACT_HSWISH, ACT_TANH, ACT_SOFTPLUS, ACT_SOFTSIGN,
 ACT_ABS, ACT_ELU, ACT_THRESHOLD, ACT_GELU) = range(12)
# Fused activations npu.h's finish computes beside the clamps: their codes.
FINISH = {"SWISH": ACT_SWISH, "SIGMOID": ACT_SIGMOID, "HSWISH": ACT_HSWISH, "TANH": ACT_TANH,
          "SOFTPLUS": ACT_SOFTPLUS, "SOFTSIGN": ACT_SOFTSIGN, "ABS": ACT_ABS, "GELU": ACT_GELU}
# Those with a parameter (alpha, in f[2]): the activation op's alone (fusion takes none).
FINISH_ALPHA = {"LEAKY_RELU": ACT_LEAKY, "ELU": ACT_ELU, "THRESHOLDRELU": ACT_THRESHOLD}
MAX_SLOTS = native.MAX_SLOTS  # slot positions of one step


# lnpu_step as bytes (native order, no padding: the assert checks the C layout agrees): op,
# slot indices, int parameters, float parameters
_LAYOUT = struct.Struct(f"=q{MAX_SLOTS}q{native.MAX_PARAMS}q4f")
assert _LAYOUT.size == native.STEP_BYTES
_FLT_MAX = float(np.finfo(np.float32).max)


class StepBuilder:
    """Fills one Step: slot indices by position (`slot`), integer parameters (`p`, appended
    in order by `params` or set by position) and float ones (`f`), all Python lists that
    `build` packs into the native Step at once (stores into the ctypes Step cost a lowering
    ~0.25 us a value: a detector's 90 steps spent a millisecond on them)."""

    def __init__(self, op: str, inputs: Sequence[int], outputs: Sequence[int]):
        self.set_op(op)
        self.inputs, self.outputs = inputs, outputs
        self.slot = [-1] * MAX_SLOTS
        self.p = [0] * native.MAX_PARAMS
        self.f = [0.0] * 4
        self._n = 0

    def set_op(self, op: str) -> None:
        """Make the step one of the C library's op `op` (a lowering may pick another than
        its registered one, e.g. a depthwise conv)."""
        self.op = op
        self.code = native.OPS[op]

    def slots(self, *indices: int | None) -> None:
        for position, index in enumerate(indices):
            self.slot[position] = -1 if index is None else index

    def slot_at(self, position: int, index: int) -> None:
        self.slot[position] = index

    def params(self, *values: int) -> None:
        end = self._n + len(values)
        if end > native.MAX_PARAMS:
            raise IndexError(f"{self.op}: {end} parameters, a step holds {native.MAX_PARAMS}")
        self.p[self._n:end] = map(int, values)
        self._n = end

    def activation_code(self, kind: str) -> int | None:
        """Set f[0:2] for the fused activation `kind`; its code (a clamp form, or one of
        FINISH: every kernel's epilogue is npu.h's finish), or None when it has neither."""
        if kind in FINISH:
            self.f[0], self.f[1] = CLAMPS["NO_ACTIVATION"]
            return FINISH[kind]
        if kind not in CLAMPS:
            return None
        self.f[0], self.f[1] = CLAMPS[kind]
        return ACT_CLAMP

    def activation(self, kind: str) -> bool:
        """Append the fused activation `kind` as the next parameter; False when unknown."""
        code = self.activation_code(kind)
        if code is not None:
            self.params(code)
        return code is not None

    def build(self) -> native.Step:
        """The native Step (floats beyond float32's range become infinities, as a float32
        store makes them)."""
        if (len(self.slot), len(self.p), len(self.f)) != (MAX_SLOTS, native.MAX_PARAMS, 4):
            raise ValueError(f"{self.op}: a lowering resized the step's slots or parameters")
        floats = [math.copysign(math.inf, v) if abs(v) > _FLT_MAX else v for v in self.f]
        return native.Step.from_buffer_copy(_LAYOUT.pack(self.code, *self.slot, *self.p, *floats))


def f32(*slots: Slot) -> bool:
    """Whether every slot holds float32 (the only dtype the C kernels compute)."""
    return all(s.dtype == "float32" or s.np_dtype == F32 for s in slots)  # (the name: 0.1 us)


# csrc/elementwise.c's unary function codes (U_*)
UNARY_CODES = {name: code for code, name in enumerate((
    "sigmoid", "tanh", "erf", "gelu", "gelu_tanh", "swish", "hswish", "hsigmoid", "exp",
    "sqrt", "neg", "abs", "reciprocal", "square", "floor", "ceil", "round"))}
MAX_RANK = 6
# csrc/npu.h's element types (ET_*) of the kernels that take more than float32, and of
# index outputs (IT_*); an index input the C kernels read by its bytes, 4 or 8: one of these
ELEMENT_TYPES = {np.dtype(np.float32): 0, np.dtype(np.int32): 1, np.dtype(np.int64): 2}
INDEX_TYPES = {np.dtype(np.int32): 0, np.dtype(np.int64): 1}


def fits_int32(*sizes: int) -> bool:
    """Whether a kernel's sizes (extents, strides, dilations, pads) all fit the C kernels'
    32-bit arithmetic; bigger ones (a fuzzed dilation of 2**62) stay on the numpy kernel."""
    return not sizes or (min(sizes) >= 0 and max(sizes) < 2**31)


def around(shape: Sequence[int], axis: int) -> tuple[int, int, int]:
    """(outer, length, inner): a tensor seen as the dims before `axis`, `axis` itself and the
    dims after it, the view of the C kernels that work along one axis."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def broadcast_strides(shape: Sequence[int], out: Sequence[int]) -> list[int]:
    """Element strides of a contiguous `shape` read at each index of `out` (0 where it is
    broadcast), aligned to out's rank."""
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides, step = [0] * len(out), 1
    for d in range(len(out) - 1, -1, -1):
        strides[d] = step if padded[d] != 1 else 0
        step *= padded[d]
    return strides


def merged(out: Sequence[int], *strides: list[int]) -> tuple[list[int], list[list[int]]]:
    """out's dims (size-1 dims dropped, neighbours merged where every operand walks them as
    one) and each operand's strides over them; at least one dim."""
    dims: list[int] = []
    walks: list[list[int]] = [[] for _ in strides]
    for d, size in enumerate(out):
        if size == 1:
            continue
        if dims and all(w[-1] == s[d] * size for w, s in zip(walks, strides, strict=True)):
            dims[-1] *= size
            for w, s in zip(walks, strides, strict=True):
                w[-1] = s[d]
            continue
        dims.append(size)
        for w, s in zip(walks, strides, strict=True):
            w.append(s[d])
    if not dims:
        return [1], [[0] for _ in strides]
    return dims, walks


def lower_unary(x: Slot, function: str, b: StepBuilder, alpha: float = 0.0,
                beta: float = 0.0) -> bool:
    """Make `b` the C library's unary op `function` over x (False when it has none)."""
    if function not in UNARY_CODES:
        return False
    b.set_op("unary")
    b.params(math.prod(x.shape), UNARY_CODES[function])
    b.f[2], b.f[3] = alpha, beta
    b.slots(b.inputs[0], b.outputs[0])
    return True
