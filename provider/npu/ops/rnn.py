"""Recurrent layers: LSTM and GRU (MindSpore Lite's primitives with ONNX's operands, see
converters/onnx_ops/import_rnn.py), and ONNX's RNN, GRU and LSTM carried as Custom where Lite
cannot state them (RNN; GRU with linear_before_reset=0; direction "reverse" with sequence
lengths; `rnn_form` reads them): capability, rule, numpy kernels and the native lowering
to csrc/rnn.c (one task per direction). PyTorch's nn.RNN exports as ONNX RNN (Tanh or
Relu); Keras' GRU(reset_after=False) and ONNX's own default GRU apply the reset gate before
the recurrent product. Clip, input_forget, peepholes, layout 1 and other activations stay
on the CPU.

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

import functools
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
from provider.npu.ops.rnn_form import ONNX_KEYS, custom_form, form_of
from provider.npu.program import Slot

F32 = np.dtype(np.float32)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
STATES = {"LSTM": 2, "GRU": 1, "RNN": 1}  # initial_h (, initial_c)


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
    written = iter(outputs[:n])
    outs = [next(written) if p else None for p in _present_outputs(attrs, STATES[kind] + 1)]
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
        backward = d == 1 or attrs.get("reverse", False)
        for t in (range(steps - 1, -1, -1) if backward else range(steps)):
            if kind == "LSTM":
                h_new, c_new = _lstm_cell(xw[t], h, c, r, hidden)
            elif kind == "GRU":
                h_new, c_new = _gru_cell(xw[t], h, r, inputs[4][d], hidden,
                                         attrs.get("reset_before", False)), None
            else:
                h_new, c_new = _rnn_cell(xw[t], h, r, attrs.get("relu", False)), None
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


def _gru_cell(xw: np.ndarray, h: np.ndarray, r: np.ndarray, rb_new: np.ndarray, hidden: int,
              reset_before: bool):
    """One GRU step (gates z, r, h; the reset gate applied after the recurrent product, or
    to h before it); h after it."""
    hr = h @ (r[:, :2 * hidden] if reset_before else r)
    zr = hr[:, :2 * hidden] + xw[:, :2 * hidden]
    _sigmoid(zr)
    z, reset = zr[:, :hidden], zr[:, hidden:]
    if reset_before:
        cand = (reset * h) @ r[:, 2 * hidden:]
        cand += rb_new
    else:
        cand = hr[:, 2 * hidden:] + rb_new
        cand *= reset
    cand += xw[:, 2 * hidden:]
    np.tanh(cand, out=cand)
    return cand + z * (h - cand)


def _rnn_cell(xw: np.ndarray, h: np.ndarray, r: np.ndarray, relu: bool) -> np.ndarray:
    """One step of ONNX's RNN: f(x W + h R + biases), f Tanh or Relu (fmax: NaN gives 0, as
    csrc/rnn.c)."""
    g = h @ r
    g += xw
    return np.fmax(g, 0.0, out=g) if relu else np.tanh(g, out=g)


def _present_outputs(attrs: dict, count: int) -> list[bool]:
    """Which of Y, Y_h (, Y_c) the step writes: the first attrs["outputs"], unless a Custom
    node's absent outputs say otherwise."""
    return attrs.get("present") or [k < attrs["outputs"] for k in range(count)]


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


@register("rnn")
def rnn(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """ONNX RNN over x (T, B, I): inputs x, W^T (D, I, H), R^T (D, H, H), bias (D, H)
    [, lengths (B,)] [, h0 (D, B, H)]; outputs Y (T, D, B, H) [, Y_h], then the scratch
    X @ W (D, T, B, H) fp32."""
    _run("RNN", inputs, outputs, attrs)


# ---- rule --------------------------------------------------------------------------------

def _check(node: LiteNode) -> str | None:
    if node.op == "Custom":
        form = custom_form(node)
        return form if isinstance(form, str) else None
    if node.op == "LSTM":
        if int(node.attrs.get("num_layers", 1)) not in (0, 1):
            return f"num_layers={node.attrs['num_layers']} (the NPU runs one layer)"
        if int(node.attrs.get("proj_size", 0)):
            return "proj_size (projected LSTM)"
        if float(node.attrs.get("zoneout_cell", 0)) or float(node.attrs.get("zoneout_hidden", 0)):
            return "zoneout (training only)"
    return None


@define("LSTM", "GRU", dtypes=FLOAT | {"int32"}, check=_check, const_inputs=(1, 2, 3),
        rank=(3, 3), kernels=("lstm", "gru"),
        note="ONNX operands; forward or bidirectional; sequence lengths, initial states")
@define(*ONNX_KEYS, dtypes=FLOAT | {"int32"}, check=_check, const_inputs=(1, 2), rank=(3, 3),
        kernels=("lstm", "gru", "rnn"),
        note="ONNX's node carried as Custom: RNN (Tanh, Relu), GRU linear_before_reset=0, "
             "reverse with sequence lengths; no clip, peepholes, layout 1")
def rnn_rule(node: LiteNode, ins: Sequence[TensorInfo], out_types) -> Lowered:
    form = form_of(node)
    kind, dirs = form.kind, form.dirs
    at = list(form.inputs) + [None] * (8 - len(form.inputs))  # node position of operand k

    def present(k: int) -> bool:  # an absent optional is missing or a zero-size constant
        i = at[k]
        return i is not None and i < len(ins) and not (ins[i].value is not None
                                                       and ins[i].value.size == 0)

    if at[1] is None or at[2] is None:
        raise InvalidModelError(f"{describe(node)}: W and R are required")
    x = ins[0]
    if x.dtype.kind != "f":
        raise UnsupportedError(f"{describe(node)}: X of dtype {x.dtype}")
    steps, batch, size = x.shape
    gates = GATES[kind]
    w, r = const(node, ins, at[1], "W"), const(node, ins, at[2], "R")
    if w.ndim != 3 or r.ndim != 3 or w.shape[0] != dirs or r.shape[0] != dirs:
        raise InvalidModelError(f"{describe(node)}: W {list(w.shape)}, R {list(r.shape)} for "
                                f"{dirs} direction(s)")
    hidden = r.shape[2]
    if w.shape[1:] != (gates * hidden, size) or r.shape[1] != gates * hidden \
            or form.hidden_size not in (None, hidden):
        raise InvalidModelError(f"{describe(node)}: W {list(w.shape)}, R {list(r.shape)} for "
                                f"input size {size}, hidden size {form.hidden_size or hidden}")
    b = (const(node, ins, at[3], "B") if present(3)
         else np.zeros((dirs, 2 * gates * hidden), F32))
    if b.shape != (dirs, 2 * gates * hidden):
        raise InvalidModelError(f"{describe(node)}: B {list(b.shape)}, expected "
                                f"{[dirs, 2 * gates * hidden]}")
    gh = gates * hidden

    def packed(make, shape) -> Packed:
        return Packed(shape, F32, lambda: np.ascontiguousarray(make(), dtype=F32))

    blocked = (hidden % BLOCK == 0 and hidden * gh * 4 >= BLOCKED_MIN_BYTES
               and not form.reset_before)  # (its two products per step run by rows)
    operands: list = [0, packed(lambda: w.transpose(0, 2, 1), (dirs, size, gh)),
                      packed(lambda: blocks(r.transpose(0, 2, 1), gates),
                             (dirs, hidden // BLOCK, hidden, gates, BLOCK)) if blocked
                      else packed(lambda: r.transpose(0, 2, 1), (dirs, hidden, gh))]
    if kind != "GRU":
        operands.append(packed(lambda: b[:, :gh] + b[:, gh:], (dirs, gh)))
    else:  # z and r take both biases; the new gate's recurrent bias is scaled by r
        operands.append(packed(lambda: b[:, :gh] + np.concatenate(
            [b[:, gh:gh + 2 * hidden], np.zeros((dirs, hidden), b.dtype)], axis=1), (dirs, gh)))
        operands.append(packed(lambda: b[:, gh + 2 * hidden:], (dirs, hidden)))
    states = STATES[kind]
    attrs = {"first_optional": len(operands), "has_lengths": present(4),
             "r_layout": "blocks" if blocked else "rows",
             "has_states": [present(5 + k) for k in range(states)],
             "outputs": sum(form.outputs)}
    attrs.update({k: True for k in ("reverse", "reset_before", "relu") if getattr(form, k)})
    if attrs["has_lengths"]:
        lengths = ins[at[4]]
        if lengths.shape != (batch,) or lengths.dtype.kind not in "iu":
            raise InvalidModelError(f"{describe(node)}: sequence_lens {lengths.dtype}"
                                    f"{list(lengths.shape)}, expected int [{batch}]")
        operands.append(at[4])
    for k, given in enumerate(attrs["has_states"]):
        if given:
            if ins[at[5 + k]].shape != (dirs, batch, hidden):
                raise InvalidModelError(f"{describe(node)}: initial state {k} of shape "
                                        f"{list(ins[at[5 + k]].shape)}, expected "
                                        f"{[dirs, batch, hidden]}")
            operands.append(at[5 + k])
    state = ((dirs, batch, hidden), x.dtype)
    outputs = [((steps, dirs, batch, hidden), x.dtype), *[state] * states]
    wanted = list(form.outputs[:len(outputs)]) + [False] * (len(outputs) - len(form.outputs))
    if not 1 <= len(node.outputs) == sum(wanted) or any(form.outputs[len(outputs):]):
        raise InvalidModelError(f"{describe(node)}: {len(node.outputs)} outputs")
    if wanted != [k < len(node.outputs) for k in range(len(outputs))]:
        attrs["present"] = wanted  # (a Custom node without Y, say)
    return Lowered(kind.lower(), attrs, operands, [o for o, p in zip(outputs, wanted, strict=True) if p],
                   [("xw", (dirs, steps, batch, gh), F32)])


_KINDS = {"lstm": 0, "gru": 1, "rnn": 2}  # rnn.c's p[5] (3: the RNN with Relu)


def _rnn_native(kernel: str, ins: Sequence[Slot], outs: Sequence[Slot], attrs: dict,
                b: StepBuilder) -> bool:
    """float32 and no sequence lengths (those are checked per run by the numpy kernel)."""
    n = attrs["outputs"]
    if not f32(*ins, *outs) or attrs["has_lengths"]:
        return False
    x, wt = ins[0], ins[1]
    steps, batch, size = x.shape
    dirs, gh = wt.shape[0], wt.shape[2]
    by_blocks = attrs.get("r_layout") == "blocks"
    hidden = ins[2].shape[2 if by_blocks else 1]
    kind = _KINDS[kernel] + int(attrs.get("relu", False))
    b.params(steps, batch, size, hidden, dirs, kind, int(by_blocks),
             int(attrs.get("reset_before", False)), int(attrs.get("reverse", False)))
    k = attrs["first_optional"]
    states = []
    for present in attrs["has_states"]:
        states.append(b.inputs[k] if present else None)
        k += int(present)
    states += [None] * (2 - len(states))
    written = iter(b.outputs[:n])
    results = [next(written) if p else None for p in _present_outputs(attrs, 3)]
    results += [None] * (3 - len(results))  # Y_c of a GRU or an RNN
    b.slots(b.inputs[0], b.inputs[1], b.inputs[2], b.inputs[3], b.inputs[4] if kind == 1 else None,
            *states, *results, b.outputs[n])
    return outs[n].nbytes == 4 * dirs * steps * batch * gh


for _kernel in _KINDS:  # the step's kind from its kernel key (not from its shapes: H may be 0)
    native(_kernel, op="rnn")(functools.partial(_rnn_native, _kernel))
