"""The NPU's one op table: per Lite primitive an `OpDef`, per kernel key a numpy `Kernel` and
a `NativeLowering`, each filled by explicit decorators in the family modules (`ops/*.py`).

- `define(*ops, ...)` registers a lowering rule (concrete shapes in, `Lowered` out) as the
  rule of each Lite primitive in `ops`, together with its static capability row (run-time
  dtypes, attribute check, constant inputs, input rank; shape-free) and the kernel keys the
  rule may emit. `define(..., quant=QUANT_ALL)` registers the rule of the primitive's
  integer form (nodes with that `quant_type`: integer codes in and out, each tensor's
  quantization in its `TensorInfo.quant`); the two forms are separate rows (`key_of`). `capability` answers "does the NPU run this node, and why not" from these
  two alone: the row for any graph, the rule too where shapes are known.
- `register(key)` adds a numpy kernel. It is called by the executor once per step with
  preallocated views: `run(inputs, outputs, attrs)` reads `inputs` (weights are read-only
  views), writes every element of each `outputs` view, and returns None. `attrs` is the
  step's JSON-able dict, already normalised by the rule (explicit pads, resolved axes, ...),
  so kernels do no attribute defaulting.
- `native(key, op)` adds the lowering of a kernel key's steps to the C library's op `op`
  (`native_steps` calls it at executor creation): it fills a `StepBuilder` from the step's
  slots and attrs, or returns False to leave the step on its numpy kernel.

A second registration of a primitive or key is an error; a failed lookup lists what exists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import LitenpuError, UnsupportedError
from provider.npu.ops.common import Lowered, TensorInfo

if TYPE_CHECKING:
    from provider.npu.ops.native_builder import StepBuilder
    from provider.npu.program import Slot

__all__ = ["OPS", "KERNELS", "NATIVE", "OpDef", "Kernel", "NativeLowering", "Check", "Rule",
           "define", "register", "native", "op_def", "get", "lower", "key_of", "custom_key",
           "QUANT_NONE"]

QUANT_NONE = ("QUANT_NONE", "", None)

Check = Callable[[LiteNode], "str | None"]
Rule = Callable[[LiteNode, Sequence[TensorInfo], Sequence["np.dtype | None"]], Lowered]
RunFn = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], dict[str, Any]], None]
LowerFn = Callable[[Sequence["Slot"], Sequence["Slot"], dict, "StepBuilder"], bool]


@dataclass(frozen=True)
class OpDef:
    """One Lite primitive on the NPU: its static capability row and its lowering rule.

    `dtypes` are the allowed run-time dtypes of its tensors (empty: any); `check` looks at
    attributes only; `const_inputs` are the input positions that must be compile-time
    constants; `rank` bounds the declared rank of run-time input 0 (and of inputs 1 ..
    `ranked` - 1, constant or not: a MatMul's B); `kernels` are the
    kernel keys `rule` may emit (besides "", an alias or a compile-time value); `note` is
    the constraints column of capability's table.
    """

    op: str
    rule: Rule
    dtypes: frozenset[str]
    check: Check | None = None
    const_inputs: tuple[int, ...] = ()
    rank: tuple[int, int] = (0, 99)
    kernels: tuple[str, ...] = ()
    note: str = ""
    quant: str = "QUANT_NONE"
    ranked: int = 1

    @property
    def key(self) -> str:
        """The row's key in OPS: the primitive, with its quant_type for an integer form."""
        return self.op if self.quant == "QUANT_NONE" else f"{self.op}[{self.quant}]"


def key_of(node: LiteNode) -> str:
    """The OPS key of a node: its primitive, with its quant_type when it is quantized; a
    Custom node's with its type (an ONNX op the NPU runs though Lite has no primitive)."""
    if node.op == "Custom":
        return custom_key(str(node.attrs.get("type", "")))
    return node.op if node.quant_type in QUANT_NONE else f"{node.op}[{node.quant_type}]"


def custom_key(custom_type: str) -> str:
    """The OPS key of Custom nodes of this type ("onnx:<domain>:<op>" for ONNX's)."""
    return f"Custom[{custom_type}]"


@dataclass(frozen=True)
class Kernel:
    """One registered numpy kernel: its key, run function, and whether output 0 may alias
    input 0."""

    name: str
    run: RunFn
    inplace: bool = False


@dataclass(frozen=True)
class NativeLowering:
    """How steps of numpy kernel `kernel` become steps of the C library's op `op`."""

    kernel: str
    op: str
    lower: LowerFn


OPS: dict[str, OpDef] = {}
KERNELS: dict[str, Kernel] = {}
NATIVE: dict[str, NativeLowering] = {}


def define(*ops: str, dtypes: frozenset[str], check: Check | None = None,
           const_inputs: tuple[int, ...] = (), rank: tuple[int, int] = (0, 99),
           kernels: tuple[str, ...] = (), note: str = "", quant: str = "QUANT_NONE",
           ranked: int = 1) -> Callable[[Rule], Rule]:
    """Decorator registering the rule as the lowering of each Lite primitive in `ops` (their
    `quant` form), with the static row given (see OpDef); decorators stack for primitives
    sharing one rule with other rows. Defining a primitive twice is an error."""

    def deco(fn: Rule) -> Rule:
        defs = [OpDef(op, fn, dtypes, check, const_inputs, rank, kernels, note, quant, ranked)
                for op in ops]
        twice = [d.key for d in defs if d.key in OPS]
        if twice:
            raise ValueError(f"NPU ops {twice} are already defined")
        for d in defs:
            OPS[d.key] = d
        return fn

    return deco


def register(name: str, *, inplace: bool = False) -> Callable[[RunFn], RunFn]:
    """Decorator adding `fn` to KERNELS under `name`; a second registration is an error.

    `inplace=True` declares that the kernel is correct when outputs[0] is the same memory as
    inputs[0] (elementwise kernels), which lets the compiler reuse that buffer.
    """

    def deco(fn: RunFn) -> RunFn:
        if name in KERNELS:
            raise ValueError(f"kernel {name!r} is already registered")
        KERNELS[name] = Kernel(name, fn, inplace)
        return fn

    return deco


def native(*kernels: str, op: str | None = None) -> Callable[[LowerFn], LowerFn]:
    """Decorator registering `fn` as the native lowering of each numpy kernel key in
    `kernels`, to the C library's op `op` (default: the kernel key); twice is an error."""

    def deco(fn: LowerFn) -> LowerFn:
        twice = [k for k in kernels if k in NATIVE]
        if twice:
            raise ValueError(f"native lowerings of kernels {twice} are already registered")
        for kernel in kernels:
            NATIVE[kernel] = NativeLowering(kernel, op or kernel, fn)
        return fn

    return deco


def op_def(op: str) -> OpDef:
    """The definition of OPS key `op` (`key_of`); UnsupportedError listing the known ones."""
    try:
        return OPS[op]
    except KeyError:
        raise UnsupportedError(f"no NPU op {op!r}; known ops: {', '.join(sorted(OPS))}") from None


def get(name: str) -> Kernel:
    """The kernel registered as `name`; UnsupportedError listing the known keys otherwise."""
    try:
        return KERNELS[name]
    except KeyError:
        known = ", ".join(sorted(KERNELS))
        raise UnsupportedError(f"no NPU kernel {name!r}; known kernels: {known}") from None


def lower(node: LiteNode, ins: Sequence[TensorInfo], out_types: Sequence[np.dtype | None]) -> Lowered:
    """Apply the rule of node.op to concrete input facts; UnsupportedError (listing the
    known ops) if the NPU has none. A rule emitting a kernel it did not declare is a bug of
    the op's module."""
    try:
        d = op_def(key_of(node))
    except UnsupportedError as e:
        raise UnsupportedError(f"node {node.name!r}: {e}") from None
    low = d.rule(node, ins, out_types)
    if low.kernel and low.kernel not in d.kernels:
        raise LitenpuError(f"the rule of {node.op} emitted kernel {low.kernel!r}, which it does "
                           f"not declare ({', '.join(d.kernels) or 'none'})")
    return low
