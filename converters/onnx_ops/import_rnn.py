"""ONNX -> Lite for recurrent layers: LSTM and GRU to MindSpore Lite's LSTM and GRU primitives.

The Lite nodes keep ONNX's operands and layouts (the importer never repacks weights):

    LSTM inputs  X [T, B, I], W [D, 4H, I], R [D, 4H, H], B [D, 8H], sequence_lens [B],
                 initial_h [D, B, H], initial_c [D, B, H]; gates i, o, f, c
         outputs Y [T, D, B, H], Y_h [D, B, H], Y_c [D, B, H]
    GRU  inputs  X, W [D, 3H, I], R [D, 3H, H], B [D, 6H], sequence_lens, initial_h;
                 gates z, r, h; the reset gate applied after the recurrent product
                 (ONNX linear_before_reset=1, MindSpore's GRU and PyTorch's export)
         outputs Y, Y_h

An absent optional input is a zero-size constant (trailing ones are left out); every output
has a tensor, read or not, so positions keep their meaning. D is 2 when `bidirectional`
(forward, then reverse), else 1. Direction "reverse" is the forward layer between two
ReverseV2 on the time axis (X, then Y; the final states are the reverse pass's as they
are). Forms Lite cannot state stay Custom: direction "reverse" with sequence_lens,
non-default activations, clip, input_forget, layout 1, peepholes, and GRU with
linear_before_reset=0.
"""

from __future__ import annotations

import numpy as np

from converters.onnx_ops.import_base import IMPORTERS, emit, intermediate, present, static_ints
from converters.onnx_ops.registry import Unmappable

_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}
_GATES = {"LSTM": 4, "GRU": 3}
_OPTIONAL = {"LSTM": (3, 4, 5, 6), "GRU": (3, 4, 5)}  # B, sequence_lens, initial_h[, initial_c]


def _common(ctx, node) -> tuple[bool, int, int]:
    """(bidirectional, hidden_size, input_size) after refusing what Lite cannot state."""
    a = node.attrs
    op = node.op_type
    direction = a.get("direction", "forward")
    if direction not in ("forward", "bidirectional", "reverse"):
        raise Unmappable(f"direction={direction}")
    if direction == "reverse" and present(node, 4):
        raise Unmappable("direction=reverse with sequence_lens (each sequence reversed alone)")
    acts = list(a.get("activations", []))
    if acts and acts != _DEFAULT_ACTIVATIONS[op] * (2 if direction == "bidirectional" else 1):
        raise Unmappable(f"activations={acts}")
    for name in ("clip", "input_forget", "layout"):
        if a.get(name):
            raise Unmappable(f"{name}={a[name]}")
    if op == "LSTM" and present(node, 7):
        p = ctx.const_value(node.inputs[7])
        if p is None or np.any(p):
            raise Unmappable("peepholes")
    w = ctx.shape(node.inputs[1])
    r = ctx.shape(node.inputs[2])
    if w is None or r is None or len(w) != 3 or len(r) != 3:
        raise Unmappable("W or R is not 3-D")
    dirs, rows, input_size = static_ints(w, "W's shape")
    hidden = static_ints(r, "R's shape")[2]
    if a.get("hidden_size", hidden) != hidden or rows != _GATES[op] * hidden:
        raise Unmappable(f"hidden_size={a.get('hidden_size')} against W {list(w)}, R {list(r)}")
    if dirs != (2 if direction == "bidirectional" else 1):
        raise Unmappable(f"W has {dirs} directions for direction={direction}")
    return direction == "bidirectional", hidden, input_size


def _operands(ctx, node) -> list[str | int]:
    """X, W, R and the optional inputs, an absent one a zero-size constant (trailing ones
    left out)."""
    ins: list[str | int] = list(node.inputs[:3])
    optional = _OPTIONAL[node.op_type]
    last = max((i for i in optional if present(node, i)), default=2)
    for i in range(3, last + 1):
        if present(node, i):
            ins.append(node.inputs[i])
        else:
            dtype = np.int32 if i == 4 else ctx.dtype(node.inputs[0]) or np.float32
            ins.append(ctx.const(f"{node.outputs[0] or node.name}/absent{i}", np.zeros(0, dtype)))
    return ins


def _outputs(ctx, node) -> list[str | int]:
    """Every output of the op, a fresh tensor where the node leaves one out."""
    count = 3 if node.op_type == "LSTM" else 2
    names = list(node.outputs) + [""] * (count - len(node.outputs))
    dtype = ctx.dtype(node.inputs[0])
    return [n if n else intermediate(ctx, f"{node.name or node.op_type}/unused{k}", dtype)
            for k, n in enumerate(names[:count])]


def _layer(ctx, node, op: str, attrs: dict) -> list:
    """The Lite layer; for direction "reverse", between two ReverseV2 on the time axis."""
    ins, outs = _operands(ctx, node), _outputs(ctx, node)
    if node.attrs.get("direction", "forward") != "reverse":
        return [emit(ctx, node, op, attrs, ins, outs)]
    dtype, name = ctx.dtype(node.inputs[0]), node.outputs[0] or node.name
    x, y = (intermediate(ctx, f"{name}/{what}", dtype) for what in ("x_reversed", "y_reversed"))
    time = {"axis": [0]}
    return [emit(ctx, node, "ReverseV2", time, [node.inputs[0]], [x]),
            emit(ctx, node, op, attrs, [x, *ins[1:]], [y, *outs[1:]]),
            emit(ctx, node, "ReverseV2", time, [y], [outs[0]])]


@IMPORTERS.register("LSTM", since=7)
def lstm(ctx, node):
    bidirectional, hidden, input_size = _common(ctx, node)
    attrs = {"bidirectional": bidirectional, "has_bias": present(node, 3) != "",
             "input_size": input_size, "hidden_size": hidden, "num_layers": 1,
             "num_directions": 2 if bidirectional else 1, "dropout": 0.0}
    return _layer(ctx, node, "LSTM", attrs)


@IMPORTERS.register("GRU", since=7)
def gru(ctx, node):
    if not node.attrs.get("linear_before_reset", 0):
        raise Unmappable("linear_before_reset=0 (Lite's GRU applies the reset gate after "
                         "the recurrent product)")
    bidirectional, _, _ = _common(ctx, node)
    return _layer(ctx, node, "GRU", {"bidirectional": bidirectional})
