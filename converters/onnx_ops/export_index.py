"""Lite -> ONNX for indexing and generating ops: GatherNd, ScatterNd(Update), Tril/Triu,
CumSum, ReverseV2, SliceFusion, Unstack, Range, OneHot, Fill, Size, Rank.

MindSpore Lite takes index operands as int32 where ONNX wants int64 (converted here), and
scalar operands as 1-element tensors where ONNX wants rank 0 (reshaped here).
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from converters.lite import dtypes
from converters.onnx_ops.export_base import EXPORTERS, unsupported
from converters.onnx_ops.export_quant import dequantize_linear, quantize_linear

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def _since(ctx, node, opset: int, op: str) -> None:
    if ctx.opset < opset:
        raise unsupported(node, f"{op} before opset {opset}")


def _scalar(ctx, name: str, hint: str) -> str:
    """`name` reshaped to rank 0 (ONNX Range/OneHot want scalars)."""
    return ctx.add("Reshape", [name, ctx.const(np.zeros(0, np.int64), f"{hint}/scalar")],
                   name=hint)


def _cast_to_output(ctx, node, value: str, outs: list[str]) -> None:
    """Write int64 `value` to the node's output in the output's dtype."""
    out_type = ctx.model.tensors[node.outputs[0]].type_id
    if out_type in (dtypes.INT64, dtypes.UNKNOWN):
        ctx.add("Identity", [value], outs, name=node.name)
        return
    elem = helper.np_dtype_to_tensor_dtype(dtypes.to_numpy(out_type))
    ctx.add("Cast", [value], outs, name=node.name, to=elem)


@EXPORTERS.register("GatherNd")
def gather_nd(ctx, node, ins, outs):
    _since(ctx, node, 11, "GatherND")
    ctx.add("GatherND", [ins[0], ctx.int64(node.inputs[1], f"{node.name}/indices")], outs,
            name=node.name)


@EXPORTERS.register("ScatterNdUpdate")
def scatter_nd_update(ctx, node, ins, outs):
    """x with x[indices] = updates (inputs: x, indices, updates)."""
    _since(ctx, node, 11, "ScatterND")
    ctx.add("ScatterND", [ins[0], ctx.int64(node.inputs[1], f"{node.name}/indices"), ins[2]],
            outs, name=node.name)


@EXPORTERS.register("ScatterNd")
def scatter_nd(ctx, node, ins, outs):
    """zeros(shape) with updates summed in at indices (inputs: indices, updates, shape)."""
    _since(ctx, node, 16, "ScatterND with reduction")
    dtype = ctx.np_dtype(node.inputs[1])
    zero = helper.make_tensor("zero", helper.np_dtype_to_tensor_dtype(dtype), [1], [0])
    base = ctx.add("ConstantOfShape", [ctx.int64(node.inputs[2], f"{node.name}/shape")],
                   name=f"{node.name}/zeros", value=zero)
    ctx.add("ScatterND", [base, ctx.int64(node.inputs[0], f"{node.name}/indices"), ins[1]],
            outs, name=node.name, reduction="add")


def _triangle(ctx, node, ins, outs):
    _since(ctx, node, 14, "Trilu")
    k = [ctx.int64(node.inputs[1], f"{node.name}/k")] if len(ins) > 1 else []
    ctx.add("Trilu", [ins[0], *k], outs, name=node.name, upper=int(node.op == "Triu"))


EXPORTERS.register("Tril", "Triu")(_triangle)


@EXPORTERS.register("CumSum")
def cum_sum(ctx, node, ins, outs):
    _since(ctx, node, 11, "CumSum")
    a = node.attrs
    ctx.add("CumSum", [ins[0], ctx.int64(node.inputs[1], f"{node.name}/axis")], outs,
            name=node.name, exclusive=int(a.get("exclusive", False)),
            reverse=int(a.get("reverse", False)))


@EXPORTERS.register("ReverseV2")
def reverse(ctx, node, ins, outs):
    axes = list(node.attrs.get("axis", []))
    if not axes:
        ctx.add("Identity", ins[:1], outs, name=node.name)
        return
    _since(ctx, node, 10, "a reversing Slice")
    n = len(axes)

    def c(values, what):
        return ctx.const(np.array(values, np.int64), f"{node.name}/{what}")

    ctx.add("Slice", [ins[0], c([-1] * n, "starts"), c([INT64_MIN] * n, "ends"),
                      c(axes, "axes"), c([-1] * n, "steps")], outs, name=node.name)


@EXPORTERS.register("SliceFusion")
def slice_fusion(ctx, node, ins, outs):
    """x[begin : begin + size] over `axes` (all leading axes when empty); size -1 = to the end."""
    _since(ctx, node, 10, "Slice with inputs")
    begin = ctx.const_ints(node.inputs[1], "begin", node)
    size = ctx.const_ints(node.inputs[2], "size", node)
    if len(size) != len(begin):
        raise unsupported(node, f"a slice with {len(begin)} begins and {len(size)} sizes")
    axes = list(node.attrs.get("axes", [])) or list(range(len(begin)))
    ends = [INT64_MAX if s == -1 else b + s for b, s in zip(begin, size, strict=True)]

    def c(values, what):
        return ctx.const(np.array(values, np.int64), f"{node.name}/{what}")

    ctx.add("Slice", [ins[0], c(begin, "starts"), c(ends, "ends"), c(axes, "axes")], outs,
            name=node.name)


@EXPORTERS.register("Unstack")
def unstack(ctx, node, ins, outs):
    axis = node.attrs.get("axis", 0)
    parts = [ctx.fresh(f"{o}/part") for o in outs]
    ones = np.ones(len(outs), np.int64)
    if ctx.opset >= 13:  # split sizes and squeeze axes became inputs
        sizes = ctx.const(ones, f"{node.name}/sizes")
        axes = ctx.const(np.array([axis], np.int64), f"{node.name}/axis")
        ctx.add("Split", [ins[0], sizes], parts, name=node.name, axis=axis)
        squeezes = [([part, axes], {}) for part in parts]
    else:
        ctx.add("Split", ins[:1], parts, name=node.name, axis=axis, split=ones.tolist())
        squeezes = [([part], {"axes": [axis]}) for part in parts]
    for (inputs, attrs), out in zip(squeezes, outs, strict=True):
        ctx.add("Squeeze", inputs, [out], name=f"{node.name}/{out}", **attrs)


@EXPORTERS.register("Range")
def range_(ctx, node, ins, outs):
    """From (start, limit, delta) inputs, or the attributes in the output's dtype."""
    _since(ctx, node, 11, "Range")
    if len(ins) >= 3:
        bounds = [_scalar(ctx, name, f"{node.name}/{what}")
                  for name, what in zip(ins[:3], ("start", "limit", "delta"), strict=True)]
    else:
        a = node.attrs
        dtype = ctx.np_dtype(node.outputs[0], default=np.int32)
        bounds = [ctx.const(np.array(a.get(k, d), dtype), f"{node.name}/{k}")
                  for k, d in (("start", 0), ("limit", 0), ("delta", 1))]
    ctx.add("Range", bounds, outs, name=node.name)


@EXPORTERS.register("OneHot")
def one_hot(ctx, node, ins, outs):
    """Inputs (indices, depth, on_value, off_value); ONNX takes [off, on] as one tensor."""
    _since(ctx, node, 11, "OneHot")
    if len(ins) != 4:
        raise unsupported(node, f"a one-hot with {len(ins)} inputs")
    one = ctx.const(np.array([1], np.int64), f"{node.name}/one")
    off, on = (ctx.add("Reshape", [name, one], name=f"{node.name}/{what}")
               for name, what in ((ins[3], "off"), (ins[2], "on")))
    values = ctx.add("Concat", [off, on], name=f"{node.name}/values", axis=0)
    ctx.add("OneHot", [ins[0], ins[1], values], outs, name=node.name,
            axis=node.attrs.get("axis", -1))


@EXPORTERS.register("Fill")
def fill(ctx, node, ins, outs):
    """A tensor of shape input 1 filled with the value of input 0."""
    _since(ctx, node, 8, "Expand")
    value = _scalar(ctx, ins[0], f"{node.name}/value")
    ctx.add("Expand", [value, ctx.int64(node.inputs[1], f"{node.name}/shape")], outs,
            name=node.name)


@EXPORTERS.register("Size")
def size(ctx, node, ins, outs):
    _cast_to_output(ctx, node, ctx.add("Size", ins[:1], name=f"{node.name}/size"), outs)


@EXPORTERS.register("Rank")
def rank(ctx, node, ins, outs):
    shape = ctx.add("Shape", ins[:1], name=f"{node.name}/shape")
    _cast_to_output(ctx, node, ctx.add("Size", [shape], name=f"{node.name}/rank"), outs)



@EXPORTERS.register("QuantDTypeCast")
def quant_dtype_cast(ctx, node, ins, outs):
    """float32 -> codes: QuantizeLinear; codes -> float32: DequantizeLinear (per channel
    along the `axis` attribute), by the code tensor's quantParams."""
    src, dst = int(node.attrs.get("src_t", 0)), int(node.attrs.get("dst_t", 0))
    if dst == dtypes.FLOAT32 and src != dtypes.FLOAT32:
        index = node.inputs[0]
        rank = ctx.rank(index) or 1
        axis = int(node.attrs.get("axis", 0)) % rank if len(
            ctx.model.tensors[index].quant_params) > 1 else None
        dequantize_linear(ctx, index, ins[0], axis, node.name, outs[0])
    elif src == dtypes.FLOAT32 and dst != dtypes.FLOAT32:
        quantize_linear(ctx, node.outputs[0], ins[0], outs[0], node.name)
    else:
        raise unsupported(node, f"a cast from TypeId {src} to {dst}")
