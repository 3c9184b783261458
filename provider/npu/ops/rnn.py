"""Recurrent layers: LSTM and GRU (MindSpore Lite's primitives with ONNX's operands, see
converters/onnx_ops/import_rnn.py): capability, rule, numpy kernels and the native lowering
to csrc/rnn.c (one task per direction).

The rule packs the constant weights once for the kernels: W and R transposed per direction
to (I, G*H) and (H, G*H) so each product is a plain GEMM, and the biases summed where the
equations add them (the GRU's recurrent bias of the new gate stays apart: the reset gate
scales it). A step first computes X @ W + b for every time step at once (one GEMM per
direction, into scratch), then walks time: one (B, H) x (H, G*H) product and the gate
arithmetic per step, forward and, when bidirectional, reverse. Sequence lengths (per batch
row) freeze a row's state past its length and zero its outputs there, as onnxruntime does.
Arithmetic is fp32 whatever the storage dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from converters.lite.ir import LiteNode
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu.ops.common import (
    FLOAT,
    InputValueError,
    Lowered,
    Packed,
    TensorInfo,
    const,
    describe,
)
from provider.npu.ops.native_builder import StepBuilder, f32
from provider.npu.ops.registry import define, native, register
from provider.npu.program import Slot

F32 = np.dtype(np.float32)
GATES = {"LSTM": 4, "GRU": 3}
STATES = {"LSTM": 2, "GRU": 1}  # initial_h (, initial_c)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        np.negative(v, out=v)
        np.exp(v, out=v)
    v += 1.0
    return np.reciprocal(v, out=v)


def _operands(inputs: Sequence[np.ndarray], attrs: dict) -> tuple[np.ndarray | None, list]:
    """(sequence lengths or None, initial states: array or None each) after W, R, biases."""
    k = attrs["first_optional"]
    lengths = None
    if attrs["has_lengths"]:
        lengths = inputs[k].astype(np.int64)
        k += 1
    states = []
    for present in attrs["has_states"]:
        states.append(inputs[k] if present else None)
        k += int(present)
    return lengths, states


def _check_lengths(lengths: np.ndarray | None, steps: int) -> np.ndarray | None:
    """None when every row runs all `steps`; InputValueError for a length outside [0, T]."""
    if lengths is None:
        return None
    if lengths.size and (lengths.min() < 0 or lengths.max() > steps):
        raise InputValueError(f"sequence_lens {lengths.tolist()} outside [0, {steps}]")
    return None if (lengths == steps).all() else lengths


# R^T of at least this many bytes per direction is stored in blocks of BLOCK hidden units
# (see `blocks`): the C kernel then cuts each step over the cores, a contiguous share each.
BLOCKED_MIN_BYTES = 1 << 20
BLOCK = 16  # rnn.c's RNN_BLOCK


def blocks(rt: np.ndarray, gates: int) -> np.ndarray:
    """R^T (D, H, gates * H) as (D, H / BLOCK, H, gates, BLOCK): block b holds, for every k,
    the gates' columns of hidden units [BLOCK b, BLOCK b + BLOCK), contiguous."""
    dirs, hidden, _ = rt.shape
    return np.ascontiguousarray(
        rt.reshape(dirs, hidden, gates, hidden // BLOCK, BLOCK).transpose(0, 3, 1, 2, 4))


def unblocked(stored: np.ndarray) -> np.ndarray:
    """The R^T (D, H, gates * H) that `blocks` stored."""
    dirs, _, hidden, gates, _ = stored.shape
    return stored.transpose(0, 2, 3, 1, 4).reshape(dirs, hidden, gates * hidden)


def _run(kind: str, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    x = inputs[0]
    wt, rt, bias = inputs[1], inputs[2], inputs[3]
    if attrs.get("r_layout") == "blocks":
        rt = unblocked(rt)
    steps, batch, _ = x.shape
    dirs, hidden = wt.shape[0], rt.shape[1]
    lengths, states = _operands(inputs, attrs)
    lengths = _check_lengths(lengths, steps)
    n = attrs["outputs"]
    outs = list(outputs[:n]) + [None] * (STATES[kind] + 1 - n)
    y = outs[0]
    scratch = outputs[n]  # (D, T, B, G*H) fp32
    x2 = x.reshape(steps * batch, -1).astype(F32, copy=False)
    for d in range(dirs):
        xw = scratch[d]
        np.matmul(x2, wt[d].astype(F32, copy=False), out=xw.reshape(steps * batch, -1))
        xw += bias[d]
        h = np.zeros((batch, hidden), F32) if states[0] is None else states[0][d].astype(F32)
        c = None
        if kind == "LSTM":
            c = np.zeros((batch, hidden), F32) if states[1] is None else states[1][d].astype(F32)
        r = rt[d].astype(F32, copy=False)
        order = range(steps) if d == 0 else range(steps - 1, -1, -1)
        for t in order:
            if kind == "LSTM":
                h_new, c_new = _lstm_cell(xw[t], h, c, r, hidden)
            else:
                h_new, c_new = _gru_cell(xw[t], h, r, inputs[4][d], hidden), None
            if lengths is not None:
                live = (t < lengths)[:, None]
                h_new = np.where(live, h_new, h)
                if c_new is not None:
                    c_new = np.where(live, c_new, c)
                if y is not None:
                    y[t, d] = np.where(live, h_new, 0.0)
            elif y is not None:
                y[t, d] = h_new
            h, c = h_new, c_new
        if outs[1] is not None:
            outs[1][d] = h
        if kind == "LSTM" and outs[2] is not None:
            outs[2][d] = c


def _lstm_cell(xw: np.ndarray, h: np.ndarray, c: np.ndarray, r: np.ndarray, hidden: int):
    """One LSTM step (gates i, o, f, c as ONNX orders them); (h, c) after it."""
    g = h @ r
    g += xw
    _sigmoid(g[:, :3 * hidden])
    np.tanh(g[:, 3 * hidden:], out=g[:, 3 * hidden:])
    i, o, f, cand = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
    c_new = f * c
    c_new += i * cand
    return o * np.tanh(c_new), c_new


def _gru_cell(xw: np.ndarray, h: np.ndarray, r: np.ndarray, rb_new: np.ndarray, hidden: int):
    """One GRU step (gates z, r, h; reset after the recurrent product); h after it."""
    hr = h @ r
    zr = hr[:, :2 * hidden] + xw[:, :2 * hidden]
    _sigmoid(zr)
    z, reset = zr[:, :hidden], zr[:, hidden:]
    cand = hr[:, 2 * hidden:] + rb_new
    cand *= reset
    cand += xw[:, 2 * hidden:]
    np.tanh(cand, out=cand)
    return cand + z * (h - cand)


@register("lstm")
def lstm(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """LSTM over x (T, B, I): inputs x, W^T (D, I, 4H), R^T (D, H, 4H), bias (D, 4H)
    [, lengths (B,)] [, h0 (D, B, H)] [, c0]; outputs Y (T, D, B, H) [, Y_h [, Y_c]], then
    the scratch X @ W (D, T, B, 4H) fp32."""
    _run("LSTM", inputs, outputs, attrs)


@register("gru")
def gru(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """GRU over x (T, B, I): inputs x, W^T (D, I, 3H), R^T (D, H, 3H), input-side bias
    (D, 3H), recurrent bias of the new gate (D, H) [, lengths (B,)] [, h0 (D, B, H)];
    outputs Y (T, D, B, H) [, Y_h], then the scratch X @ W (D, T, B, 3H) fp32."""
    _run("GRU", inputs, outputs, attrs)


# ---- rule --------------------------------------------------------------------------------


def _check(node: LiteNode) -> str | None:
    if node.op == "LSTM":
        if int(node.attrs.get("num_layers", 1)) not in (0, 1):
            return f"num_layers={node.attrs['num_layers']} (the NPU runs one layer)"
        if int(node.attrs.get("proj_size", 0)):
            return "proj_size (projected LSTM)"
        if float(node.attrs.get("zoneout_cell", 0)) or float(node.attrs.get("zoneout_hidden", 0)):
            return "zoneout (training only)"
    return None


def _present(ins: Sequence[TensorInfo], i: int) -> bool:
    """Optional input i is given (an absent one is missing or a zero-size constant)."""
    return i < len(ins) and not (ins[i].value is not None and ins[i].value.size == 0)


@define("LSTM", "GRU", dtypes=FLOAT | {"int32"}, check=_check, const_inputs=(1, 2, 3),
        rank=(3, 3), kernels=("lstm", "gru"),
        note="ONNX operands; forward or bidirectional; sequence lengths, initial states")
def rnn_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    kind, x = node.op, ins[0]
    if x.dtype.kind != "f":
        raise UnsupportedError(f"{describe(node)}: X of dtype {x.dtype}")
    steps, batch, size = x.shape
    gates = GATES[kind]
    w, r = const(node, ins, 1, "W"), const(node, ins, 2, "R")
    dirs = 2 if node.attrs.get("bidirectional") else 1
    if w.ndim != 3 or r.ndim != 3 or w.shape[0] != dirs or r.shape[0] != dirs:
        raise InvalidModelError(f"{describe(node)}: W {list(w.shape)}, R {list(r.shape)} for "
                                f"{dirs} direction(s)")
    hidden = r.shape[2]
    if w.shape[1:] != (gates * hidden, size) or r.shape[1] != gates * hidden:
        raise InvalidModelError(f"{describe(node)}: W {list(w.shape)}, R {list(r.shape)} for "
                                f"input size {size}, hidden size {hidden}")
    b = const(node, ins, 3, "B") if _present(ins, 3) else np.zeros((dirs, 2 * gates * hidden), F32)
    if b.shape != (dirs, 2 * gates * hidden):
        raise InvalidModelError(f"{describe(node)}: B {list(b.shape)}, expected "
                                f"{[dirs, 2 * gates * hidden]}")
    gh = gates * hidden

    def packed(make, shape) -> Packed:
        return Packed(shape, F32, lambda: np.ascontiguousarray(make(), dtype=F32))

    blocked = hidden % BLOCK == 0 and hidden * gh * 4 >= BLOCKED_MIN_BYTES
    operands: list = [0, packed(lambda: w.transpose(0, 2, 1), (dirs, size, gh)),
                      packed(lambda: blocks(r.transpose(0, 2, 1), gates),
                             (dirs, hidden // BLOCK, hidden, gates, BLOCK)) if blocked
                      else packed(lambda: r.transpose(0, 2, 1), (dirs, hidden, gh))]
    if kind == "LSTM":
        operands.append(packed(lambda: b[:, :gh] + b[:, gh:], (dirs, gh)))
    else:  # z and r take both biases; the new gate's recurrent bias is scaled by r
        operands.append(packed(lambda: b[:, :gh] + np.concatenate(
            [b[:, gh:gh + 2 * hidden], np.zeros((dirs, hidden), b.dtype)], axis=1), (dirs, gh)))
        operands.append(packed(lambda: b[:, gh + 2 * hidden:], (dirs, hidden)))
    attrs = {"first_optional": len(operands), "has_lengths": _present(ins, 4),
             "r_layout": "blocks" if blocked else "rows",
             "has_states": [_present(ins, 5 + k) for k in range(STATES[kind])],
             "outputs": len(node.outputs)}
    if attrs["has_lengths"]:
        if ins[4].shape != (batch,) or ins[4].dtype.kind not in "iu":
            raise InvalidModelError(f"{describe(node)}: sequence_lens {ins[4].dtype}"
                                    f"{list(ins[4].shape)}, expected int [{batch}]")
        operands.append(4)
    for k, present in enumerate(attrs["has_states"]):
        if present:
            if ins[5 + k].shape != (dirs, batch, hidden):
                raise InvalidModelError(f"{describe(node)}: initial state {k} of shape "
                                        f"{list(ins[5 + k].shape)}, expected {[dirs, batch, hidden]}")
            operands.append(5 + k)
    state = ((dirs, batch, hidden), x.dtype)
    outputs = [((steps, dirs, batch, hidden), x.dtype), *[state] * STATES[kind]]
    if not 1 <= len(node.outputs) <= len(outputs):
        raise InvalidModelError(f"{describe(node)}: {len(node.outputs)} outputs")
    return Lowered(kind.lower(), attrs, operands, outputs[:len(node.outputs)],
                   [("xw", (dirs, steps, batch, gh), F32)])


@native("lstm", "gru", op="rnn")
def _rnn_native(ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict, b: StepBuilder) -> bool:
    """float32 and no sequence lengths (those are checked per run by the numpy kernel)."""
    n = attrs["outputs"]
    gru = len(attrs["has_states"]) == 1
    if not f32(*ins, *outs) or attrs["has_lengths"]:
        return False
    x, wt = ins[0], ins[1]
    steps, batch, size = x.shape
    dirs, gh = wt.shape[0], wt.shape[2]
    hidden = gh // (3 if gru else 4)
    b.params(steps, batch, size, hidden, dirs, int(gru), int(attrs.get("r_layout") == "blocks"))
    k = attrs["first_optional"]
    states = []
    for present in attrs["has_states"]:
        states.append(b.inputs[k] if present else None)
        k += int(present)
    states += [None] * (2 - len(states))
    results = [b.outputs[i] if i < n else None for i in range(3)]
    if gru:
        results[2] = None
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2], b.inputs[3], b.inputs[4] if gru else None,
            *states, *results, b.outputs[n])
    return outs[n].nbytes == 4 * dirs * steps * batch * gh
