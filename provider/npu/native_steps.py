"""Lowering of Program steps to native steps (`native.Step`), and the runs of them.

`lower(program, number)` returns the Step that computes what the numpy kernel of that step
computes, or None when the step is outside what the compiled kernels (`csrc/`) do (a dtype
other than float32, a fused activation without a clamp form, batched matmul, ...): that step
stays on its numpy kernel. The lowering of each kernel key lives with its op family
(`ops.NATIVE`), which checks every size the C code relies on against the slots, once, at
executor creation. `segments(program)` groups consecutive native steps so that one C call
runs each group; `channels_last` picks the tensors stored channels last between them.

A Program's lowering is a pure function of the Program and of this litenpu, so a cache entry
stores it (`encode`, the entry's `lowered.bin`) and a warm start reads it back instead of
lowering again (~20 us a step in Python: a third of a small model's warm Executor). The
bytes name the C library's step layout and op codes and the litenpu version they were made
by, and carry a CRC of their steps; anything that does not match is lowered again (logged).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from provider import __version__
from provider.npu import native
from provider.npu.ops import NATIVE
from provider.npu.ops.native_builder import StepBuilder
from provider.npu.program import Program, Slot

__all__ = ["NativeRun", "channels_last", "lower", "segments", "encode", "stats"]

log = logging.getLogger("litenpu.npu")


@dataclass
class Stats:
    """Steps lowered from their Program and lowerings read back from bytes, in this process
    (what tests read to see a warm start lower nothing)."""

    lowered: int = 0
    read: int = 0


stats = Stats()


def lower(program: Program, number: int) -> native.Step | None:
    """The native Step for step `number` of `program`, or None (it stays on numpy)."""
    stats.lowered += 1
    step = program.steps[number]
    lowering = NATIVE.get(step.kernel)
    if lowering is None:
        return None
    slots = program.slots
    builder = StepBuilder(lowering.op, step.inputs, step.outputs)
    ok = lowering.lower([slots[i] for i in step.inputs], [slots[i] for i in step.outputs],
                        step.attrs, builder)
    return builder.build() if ok else None


@dataclass
class NativeRun:
    """Consecutive steps [first, first + count) of a Program, run by one native call."""

    first: int
    steps: native.StepArray

    @property
    def count(self) -> int:
        return len(self.steps)


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
    dwconv = native.OPS["dwconv"]
    candidates = sorted({step.slot[_S_X] for step in steps
                         if step is not None and step.op == dwconv})
    if not candidates:  # (most models: the pass cost the yolo detector 0.5 ms for nothing)
        return []
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
    arena = [(other, s) for other, s in enumerate(program.slots)
             if s.kind == "internal" and other in spans]
    for index in candidates:
        slot = program.slots[index]
        if slot.kind != "internal" or len(slot.shape) != 4 or len(writers.get(index, ())) != 1:
            continue
        producer, users = steps[writers[index][0]], readers.get(index, [])
        if not users or not _writes_channels_last(producer, index):
            continue
        if not all(_reads_channels_last(steps[u], index) for u in users):
            continue
        if _shares_memory(program, index, spans, arena, writers):
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


def _shares_memory(program: Program, index: int, spans: dict[int, list[int]],
                   arena: list[tuple[int, Slot]], writers: dict[int, list[int]]) -> bool:
    """Whether another arena slot in `arena` ((index, slot) pairs) overlaps slot `index`'s
    bytes while both are in use, or ever reads them: a slot no step writes is a view of
    what others wrote (an elided concat's output, read after its parts' last use: a part
    stored channels last came out transposed there)."""
    slot, (first, last) = program.slots[index], spans[index]
    for other, s in arena:
        if other == index:
            continue
        if s.offset < slot.offset + slot.nbytes and slot.offset < s.offset + s.nbytes:
            if other not in writers or (spans[other][0] <= last and first <= spans[other][1]):
                return True
    return False


def _lowered(program: Program) -> list[native.Step | None]:
    """Each step's native Step (None: numpy), channels-last marks included."""
    steps = [lower(program, number) for number in range(len(program.steps))]
    channels_last(program, steps)
    return steps


# lowered.bin: magic, layout version, bytes per native Step, Program steps, ABI digest, CRC-32
# of the rest (a flag byte per step, 1: native, then the native Steps' bytes in order)
_MAGIC = b"LNPULOWR"
_HEADER = struct.Struct("<8sIII16sI")
_KNOWN = np.zeros(max(native.OPS.values()) + 1, dtype=bool)  # by op code: the library's ops
_KNOWN[list(native.OPS.values())] = True


@functools.cache
def _abi() -> bytes:
    """What stored Steps are only valid for: this litenpu, the Step layout, the op codes."""
    text = repr((__version__, native.STEP_BYTES, native.MAX_SLOTS, native.MAX_PARAMS,
                 sorted(native.OPS.items())))
    return hashlib.sha256(text.encode()).digest()[:16]


def encode(program: Program) -> bytes | None:
    """The Program's lowering as bytes (a cache entry's `lowered.bin`), or None when the
    native library is unavailable."""
    if native.library() is None:
        return None
    if program.lowered is None:  # (an Executor made from the Program has set it)
        program.lowered = _encode(_lowered(program))
    return program.lowered


def _encode(steps: list[native.Step | None]) -> bytes:
    body = bytes(step is not None for step in steps) + b"".join(
        bytes(step) for step in steps if step is not None)
    return _HEADER.pack(_MAGIC, 1, native.STEP_BYTES, len(steps), _abi(), zlib.crc32(body)) + body


def _stored(program: Program, blob: bytes) -> list[int | NativeRun]:
    """`segments` from `encode`'s bytes, checked against this library and `program`
    (ValueError: why they do not fit)."""
    if len(blob) < _HEADER.size:
        raise ValueError(f"{len(blob)} bytes, shorter than the header")
    magic, version, step_bytes, count, abi, crc = _HEADER.unpack_from(blob)
    if (magic, version, step_bytes, abi) != (_MAGIC, 1, native.STEP_BYTES, _abi()):
        raise ValueError("made by another litenpu or C library")
    body = memoryview(blob)[_HEADER.size:]
    if count != len(program.steps) or len(body) < count or zlib.crc32(body) != crc:
        raise ValueError("does not match the Program's steps, or its checksum")
    flags = bytes(body[:count])
    natives = [n for n, flag in enumerate(flags) if flag]
    if len(body) != count + len(natives) * step_bytes or set(flags) - {0, 1}:
        raise ValueError("its native steps do not match its flags")
    words = np.frombuffer(body[count:], dtype=np.int64).reshape(len(natives), step_bytes // 8)
    ops, slots = words[:, 0], words[:, 1:1 + native.MAX_SLOTS]
    if (((ops < 0) | (ops >= len(_KNOWN))).any() or not _KNOWN[ops.clip(0, len(_KNOWN) - 1)].all()
            or ((slots < -1) | (slots >= len(program.slots))).any()
            or any(NATIVE.get(program.steps[n].kernel) is None for n in natives)):
        raise ValueError("a step is not a native step of this Program")
    out: list[int | NativeRun] = []
    at = count  # the next native step's bytes
    number = 0
    while number < count:
        if not flags[number]:
            out.append(number)
            number += 1
            continue
        end = flags.find(0, number)
        end = count if end < 0 else end
        size = (end - number) * step_bytes
        out.append(NativeRun(number, native.StepArray.from_bytes(body[at:at + size])))
        at += size
        number = end
    return out


def segments(program: Program) -> list[int | NativeRun]:
    """The Program's steps in order: a step number (numpy kernel) or a NativeRun; all step
    numbers when the native library is unavailable. The Program's stored lowering
    (`program.lowered`, from a cache entry) is used when it fits."""
    if native.library() is None:
        return list(range(len(program.steps)))
    if program.lowered is not None:
        try:
            stored = _stored(program, program.lowered)
            stats.read += 1
            return stored
        except ValueError as exc:
            log.info("program %r: its stored lowering is not used (%s); lowering it again",
                     program.name, exc)
    steps = _lowered(program)
    program.lowered = _encode(steps)  # for the cache entry, if one is written
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
        out.append(NativeRun(end - len(pending), native.StepArray(pending)))
        pending.clear()
