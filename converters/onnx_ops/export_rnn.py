"""Lite -> ONNX for recurrent layers: MindSpore Lite's LSTM and GRU (operands in ONNX's order
and layouts, see import_rnn) to ONNX LSTM and GRU."""

from __future__ import annotations

from converters.onnx_ops.export_base import EXPORTERS, unsupported


def _inputs(ctx, node, ins: list[str]) -> list[str]:
    """The node's inputs, a zero-size constant (an absent optional input) as ""."""
    out = []
    for k, (index, name) in enumerate(zip(node.inputs, ins, strict=True)):
        value = ctx.value(index)
        out.append("" if k >= 3 and value is not None and value.size == 0 else name)
    while out and out[-1] == "":
        out.pop()
    return out


def _hidden(ctx, node) -> int:
    shape = ctx.shape(node.inputs[2])
    if len(shape) != 3 or not isinstance(shape[2], int) or shape[2] <= 0:
        raise unsupported(node, f"R of shape {list(shape)} (expected [D, gates * H, H])")
    return shape[2]


def _direction(node) -> str:
    return "bidirectional" if node.attrs.get("bidirectional") else "forward"


@EXPORTERS.register("LSTM")
def lstm(ctx, node, ins, outs):
    if node.attrs.get("num_layers", 1) not in (0, 1) or node.attrs.get("proj_size", 0):
        raise unsupported(node, "a multi-layer or projected LSTM")
    ctx.add("LSTM", _inputs(ctx, node, ins), outs, name=node.name,
            hidden_size=_hidden(ctx, node), direction=_direction(node))


@EXPORTERS.register("GRU")
def gru(ctx, node, ins, outs):
    ctx.add("GRU", _inputs(ctx, node, ins), outs, name=node.name,
            hidden_size=_hidden(ctx, node), direction=_direction(node), linear_before_reset=1)
