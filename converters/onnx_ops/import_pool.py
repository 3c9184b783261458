"""ONNX -> Lite for pooling: MaxPool, AveragePool and their global forms (2-D; 1-D as 2-D)."""

from __future__ import annotations

import numpy as np

from converters.lite.padding import same_total
from converters.onnx_ops.import_base import IMPORTERS, emit, intermediate, single_output
from converters.onnx_ops.import_nn import (
    NO_ACT,
    as_2d,
    check_window,
    pad_fields,
    same_as_pads,
    spatial_rank,
    spatial_sizes,
)
from converters.onnx_ops.registry import Unmappable


def _explicit_same(ctx, node):
    """A SAME_LOWER pool (Lite's SAME puts the odd pad at the end), or an average counting
    SAME pads, with the pads its static input size implies (`same_as_pads`)."""
    mode, kernel = node.attrs.get("auto_pad"), node.attrs.get("kernel_shape", [])
    counted = node.op_type == "AveragePool" and node.attrs.get("count_include_pad", 0)
    if len(kernel) == 2 and (mode == "SAME_LOWER" or (mode == "SAME_UPPER" and counted)):
        check_window(kernel, node.attrs)
        return same_as_pads(ctx, node, kernel)
    return node


def _pool_fields(ctx, node) -> dict:
    a = node.attrs
    kernel = a["kernel_shape"]
    if len(kernel) != 2:
        raise Unmappable("only 2-D pooling maps to Lite")
    if any(d != 1 for d in a.get("dilations", [1, 1])):
        raise Unmappable("dilated pooling")
    check_window(kernel, a)
    pads = a.get("pads", [0, 0, 0, 0])
    if any(p >= kernel[i % 2] for i, p in enumerate(pads)):
        raise Unmappable(f"pads={list(pads)}: a pooling pad must be smaller than the kernel "
                         f"{list(kernel)}")
    single_output(ctx, node)
    _check_same_upper(ctx, node, kernel)
    pad_mode, pad_list = pad_fields(a)
    return {"kernel_size": list(kernel), "strides": list(a.get("strides", [1, 1])),
            "pad": pad_list, "pad_mode": pad_mode,
            "round_mode": "CEIL" if a.get("ceil_mode", 0) else "FLOOR",
            "format": "NCHW", "global": False, "activation_type": NO_ACT}


def _check_same_upper(ctx, node, kernel) -> None:
    """Unmappable for a SAME_UPPER pooling whose padding would be negative: where a stride
    passes its kernel, ceil(size / stride) windows may need less than the input, and
    onnxruntime then crops the input (half the excess at the start) while Lite's SAME pads
    nothing and starts at row 0, so the two read different rows. The exact test needs the
    spatial size; an unknown one is refused too."""
    if node.attrs.get("auto_pad") != "SAME_UPPER":
        return
    spatial = spatial_sizes(ctx, node.inputs[0])
    strides = node.attrs.get("strides", [1, 1])
    for axis, (size, k, s) in enumerate(zip(spatial, kernel, strides, strict=False)):
        if s <= k:  # then ceil(size / s) windows need the whole input
            continue
        if not isinstance(size, int):
            raise Unmappable(f"auto_pad=SAME_UPPER with stride {s} over kernel {k} on an "
                             f"input of unknown size (onnxruntime may crop it)")
        if same_total(size, k, s) < 0:
            raise Unmappable(f"auto_pad=SAME_UPPER with stride {s} over kernel {k} on size "
                             f"{size} (axis {axis + 2}): onnxruntime crops the input")


@IMPORTERS.register("MaxPool")
def max_pool(ctx, node):
    if node.attrs.get("storage_order", 0):
        raise Unmappable("storage_order=1")
    if spatial_rank(ctx, node) == 1:
        single_output(ctx, node)
        return as_2d(ctx, node, max_pool)
    node = _explicit_same(ctx, node)
    return [emit(ctx, node, "MaxPoolFusion", _pool_fields(ctx, node), node.inputs[:1],
                 node.outputs[:1])]


@IMPORTERS.register("AveragePool")
def average_pool(ctx, node):
    """count_include_pad=1 with explicit pads (PyTorch's default) is a zero PadFusion, then
    the pool without pads: Lite averages over the elements inside its input."""
    if spatial_rank(ctx, node) == 1:
        return as_2d(ctx, node, average_pool)
    node = _explicit_same(ctx, node)
    fields = _pool_fields(ctx, node)
    counted = node.attrs.get("count_include_pad", 0)
    if counted and fields["pad_mode"] == "SAME":
        raise Unmappable(f"count_include_pad=1 with auto_pad={node.attrs['auto_pad']} (its "
                         "pads depend on the input size)")
    if not counted or not any(fields["pad"]):
        return [emit(ctx, node, "AvgPoolFusion", fields, node.inputs[:1], node.outputs[:1])]
    top, bottom, left, right = fields["pad"]
    if fields["round_mode"] == "CEIL":
        fields = {**fields, "round_mode": _counted_round_mode(ctx, node, fields)}
    out = node.outputs[0]
    padded = intermediate(ctx, f"{out}/padded", ctx.dtype(node.inputs[0]))
    paddings = ctx.const(f"{out}/paddings",
                         np.array([[0, 0], [0, 0], [top, bottom], [left, right]], np.int32))
    return [emit(ctx, node, "PadFusion", {"padding_mode": "CONSTANT", "constant_value": 0.0},
                 [node.inputs[0], paddings], [padded]),
            emit(ctx, node, "AvgPoolFusion", {**fields, "pad": [0, 0, 0, 0]}, [padded],
                 node.outputs[:1])]


def _counted_round_mode(ctx, node, fields: dict) -> str:
    """The round mode of a ceil_mode pool over its explicitly padded input: ONNX drops a
    last window that would start in the end padding, which the padded input no longer
    tells apart; per axis the output is then the floor one, so FLOOR or CEIL, known for
    static sizes (an axis of each kind, or an unknown size: Unmappable)."""
    sizes = spatial_sizes(ctx, node.inputs[0])
    if not all(isinstance(d, int) for d in sizes):
        raise Unmappable("count_include_pad=1 with ceil_mode=1 on an input of unknown size")
    top, bottom, left, right = fields["pad"]
    wrong = set()
    for size, begin, end, k, s in zip(sizes, (top, left), (bottom, right),
                                      fields["kernel_size"], fields["strides"], strict=True):
        span = size + begin + end - k
        floor, ceil = span // s + 1, -(-span // s) + 1
        onnx = ceil if (ceil - 1) * s < size + begin else ceil - 1
        wrong |= {m for m, n in (("FLOOR", floor), ("CEIL", ceil)) if n != onnx}
    if wrong == {"FLOOR", "CEIL"}:
        raise Unmappable("count_include_pad=1 with ceil_mode=1 whose axes round differently")
    return "CEIL" if "FLOOR" in wrong else "FLOOR"


def _global_pool(ctx, node, op: str):
    if ctx.rank(node.inputs[0]) != 4:
        raise Unmappable("global pooling maps to Lite for 4-D NCHW inputs only")
    # MindSpore Lite checks kernel/stride/pad fields even for global pooling.
    attrs = {"kernel_size": [1, 1], "strides": [1, 1], "pad": [0, 0, 0, 0], "pad_mode": "VALID",
             "round_mode": "FLOOR", "format": "NCHW", "global": True, "activation_type": NO_ACT}
    return [emit(ctx, node, op, attrs, node.inputs)]


@IMPORTERS.register("GlobalAveragePool")
def global_average_pool(ctx, node):
    return _global_pool(ctx, node, "AvgPoolFusion")


@IMPORTERS.register("GlobalMaxPool")
def global_max_pool(ctx, node):
    return _global_pool(ctx, node, "MaxPoolFusion")
