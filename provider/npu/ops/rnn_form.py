"""What a recurrent node computes (ops/rnn.py lowers it): a Lite LSTM/GRU primitive, or
ONNX's RNN, GRU or LSTM carried as Custom (converters.onnx_import) in a form the NPU runs.
A carried node keeps ONNX's attributes and only its non-empty inputs and outputs, so its
Form maps ONNX operand positions to the node's."""

from __future__ import annotations

from dataclasses import dataclass

from onnx import helper

from converters.lite.ir import LiteNode
from converters.onnx_import import carried_node, custom_type
from provider.errors import UnsupportedError
from provider.npu.ops.common import describe
from provider.npu.ops.registry import custom_key

__all__ = ["Form", "ONNX_KEYS", "custom_form", "form_of"]

ONNX_KEYS = tuple(custom_key(custom_type("", op)) for op in ("RNN", "GRU", "LSTM"))
_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"]}
_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


@dataclass(frozen=True)
class Form:
    """What a recurrent node computes, whether a Lite primitive or an ONNX node carried as
    Custom: `inputs[k]` is the node's input position of ONNX operand k (None: absent; a
    Custom node has only ONNX's non-empty inputs), `outputs[k]` whether the node has ONNX
    output k (Y, Y_h, Y_c)."""

    kind: str  # "LSTM", "GRU" or "RNN"
    dirs: int
    inputs: tuple[int | None, ...]
    outputs: tuple[bool, ...]
    hidden_size: int | None = None  # the attribute, when given (R's shape must agree)
    reverse: bool = False  # one direction, walked from the last step
    reset_before: bool = False  # GRU: the reset gate scales h before its product
    relu: bool = False  # RNN: Relu, not Tanh


def _lite_form(node: LiteNode) -> Form:
    return Form(node.op, 2 if node.attrs.get("bidirectional") else 1,
                tuple(range(len(node.inputs))), (True,) * len(node.outputs))


def _text(value: object) -> object:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def custom_form(node: LiteNode) -> Form | str:
    """The Form of a carried ONNX RNN/GRU/LSTM node, or why the NPU does not run it (also
    for a node that does not hold together: a .ms file is input like any other)."""
    try:
        proto = carried_node(node)
        a = {x.name: helper.get_attribute_value(x) for x in proto.attribute} if proto else {}
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and kin: a bad blob
        return f"its carried ONNX node does not parse ({type(exc).__name__})"
    if proto is None:
        return "carries no ONNX node"
    op = proto.op_type
    if op not in ("RNN", "GRU", "LSTM") or proto.domain \
            or node.attrs.get("type") != custom_type("", op):
        return f"type {node.attrs.get('type')!r} carries {proto.domain or 'ai.onnx'}:{op}"
    text = {k: _text(v) for k, v in a.items()}
    direction = text.get("direction", "forward")
    if direction not in _DIRECTIONS:
        return f"direction={direction}"
    dirs = _DIRECTIONS[direction]
    for name in ("clip", "input_forget", "layout"):
        if text.get(name):
            return f"{name}={text[name]} (the NPU's {op} has none)"
    acts = [_text(v) for v in a.get("activations", [])]
    # (a one-direction RNN's schema default lists two: onnxruntime reads the first)
    allowed = ([[f] * n for f in ("Tanh", "Relu") for n in {dirs, 2}] if op == "RNN"
               else [_DEFAULT_ACTIVATIONS[op] * dirs])
    if acts and acts not in allowed:
        return f"activations={acts} (the NPU's {op} takes {' or '.join(map(str, allowed))})"
    if op == "LSTM" and len(proto.input) > 7 and proto.input[7]:
        return "peepholes (the NPU's LSTM has none)"
    position, inputs = 0, []
    for name in proto.input:
        inputs.append(position if name else None)
        position += bool(name)
    outputs = tuple(bool(name) for name in proto.output)
    if len(node.inputs) != position or len(node.outputs) != sum(outputs):
        return (f"{len(node.inputs)} inputs and {len(node.outputs)} outputs for its carried "
                f"node's {position} and {sum(outputs)}")
    hidden = a.get("hidden_size")
    return Form(op, dirs, tuple(inputs), outputs,
                hidden_size=hidden if isinstance(hidden, int) else None,
                reverse=direction == "reverse",
                reset_before=op == "GRU" and not a.get("linear_before_reset", 0),
                relu=bool(acts) and acts[0] == "Relu")


def form_of(node: LiteNode) -> Form:
    if node.op != "Custom":
        return _lite_form(node)
    form = custom_form(node)
    if isinstance(form, str):
        raise UnsupportedError(f"{describe(node)} ({node.attrs.get('type')}): {form}")
    return form
