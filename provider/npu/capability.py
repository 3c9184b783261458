"""What the reference NPU executes: Lite primitives, dtypes and attribute values.

`check(model, i)` returns None when the NPU runs node i, else the reason it stays on the CPU;
`supported_nodes(model)` does it for every node. Both are static (no shapes needed: dynamic
dims are resolved per concrete shape by the caller before compiling) and never raise for an
unsupported node. The table, one row per primitive:

| primitives | run-time dtypes | constraints |
|---|---|---|
| Conv2DFusion, Conv2dTransposeFusion | float32, float16 | NCHW, 2-D, weight (and bias) compile-time constant; transposed conv: pad_mode PAD/VALID |
| FullConnection | float32, float16 | weight (and bias) compile-time constant |
| MatMulFusion | float32, float16 | rank >= 2 operands |
| AddFusion, SubFusion, MulFusion, DivFusion, RealDiv, Maximum, Minimum, AddN | float32, float16, int32 | numpy broadcasting |
| PowFusion | float32, float16 | scale 1, shift 0 |
| Sqrt, ExpFusion, Erf, Neg, Abs, Log, Reciprocal, Floor, Ceil, Square, Sin, Cos | float32, float16 (Neg, Abs: + int32) | |
| Equal, Less, Greater, LessEqual, GreaterEqual, NotEqual | float32, float16, int32 -> bool | |
| Where | bool condition; float32, float16, int32 values | 3 inputs |
| LogicalNot, LogicalAnd, LogicalOr | bool | |
| PReLUFusion | float32, float16 | slope compile-time constant, shared or per channel |
| BroadcastTo, TileFusion | float32, float16, int32, int64, bool | shape / multiples compile-time constant |
| Activation, LeakyRelu, Elu | float32, float16 | activation_type in kernels.activation.ACTIVATIONS |
| Softmax, LogSoftmax | float32, float16 | one axis |
| MaxPoolFusion, AvgPoolFusion | float32, float16 | NCHW, 2-D windows, pad_mode PAD/SAME/VALID, round_mode FLOOR/CEIL, global; AvgPool count_include_pad (extra attr) honoured |
| LayerNormFusion, InstanceNorm, FusedBatchNorm, BatchNorm | float32, float16 | parameters compile-time constant (InstanceNorm, BatchNorm) |
| Concat, Split, SliceFusion, StridedSlice, Transpose, PadFusion, Gather | float32, float16, int32, int64, bool | index/shape inputs compile-time constant; StridedSlice without ellipsis/new-axis masks; PadFusion CONSTANT/REFLECT/SYMMETRIC/EDGE |
| Resize | float32, float16 | NCHW; LINEAR or NEAREST; ASYMMETRIC/ALIGN_CORNERS/HALF_PIXEL; nearest_mode NORMAL/ROUND_HALF_DOWN/ROUND_HALF_UP/FLOOR/CEIL |
| ReduceFusion | float32, float16 | modes in kernels.reduce.MODES; coeff 0 or 1; axes compile-time constant |
| Clip, Cast | float32, float16 (Cast: + int32, int64, bool) | bounds / target compile-time constant |
| Reshape, Flatten, Squeeze, Unsqueeze, ExpandDims, Dropout | any of the above | aliases: no kernel, the buffer is shared |
| Shape, ConstantOfShape | any | evaluated at compile time |

Conv, transposed conv, pooling and Resize take rank-4 (NCHW) data; MatMulFusion rank >= 2
(a rank known from the tensor's declared shape; an empty shape counts as unknown).
Every activation_type attribute (fused into Conv/MatMul/Add/...) must be in ACTIVATIONS.
"Compile-time constant" means a constant tensor or the output of a chain of supported nodes
fed only by constants and Shape (the compiler folds such chains), so weights made by
ConstantOfShape count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from converters.lite import dtypes as lite_dtypes
from converters.lite.ir import LiteModel, LiteNode
from provider.npu.kernels.activation import ACTIVATIONS
from provider.npu.kernels.reduce import MODES as REDUCE_MODES

__all__ = ["TABLE", "check", "supported_nodes", "compile_time_constants"]

FLOAT = frozenset({"float32", "float16"})
NUMERIC = FLOAT | {"int32"}
DATA = NUMERIC | {"int64", "bool"}
ANY = frozenset()  # no dtype restriction

Check = Callable[[LiteNode], str | None]


@dataclass(frozen=True)
class Row:
    """One primitive's entry: allowed run-time dtypes, attribute check, constant inputs."""

    dtypes: frozenset[str]
    check: Check | None = None
    const_inputs: tuple[int, ...] = ()
    rank: tuple[int, int] = (0, 99)  # allowed rank of the run-time data input 0


def _enum(field: str, allowed: tuple[str, ...], default: str) -> Check:
    def check(node: LiteNode) -> str | None:
        value = str(node.attrs.get(field, default))
        return None if value in allowed else f"{field}={value} (NPU takes {', '.join(allowed)})"
    return check


def _all(*checks: Check) -> Check:
    def check(node: LiteNode) -> str | None:
        return next((r for c in checks if (r := c(node)) is not None), None)
    return check


_fused = _enum("activation_type", ACTIVATIONS, "NO_ACTIVATION")
_nchw = _enum("format", ("NCHW",), "NCHW")
_pad_mode = _enum("pad_mode", ("PAD", "SAME", "VALID"), "PAD")


def _two_d(field: str) -> Check:
    def check(node: LiteNode) -> str | None:
        v = node.attrs.get(field)
        return None if v is None or len(v) in (1, 2) else f"{field}={list(v)}: 2-D windows only"
    return check


def _pow(node: LiteNode) -> str | None:
    if node.attrs.get("scale", 1.0) != 1.0 or node.attrs.get("shift", 0.0) != 0.0:
        return "PowFusion with scale/shift"
    return None


def _softmax(node: LiteNode) -> str | None:
    axis = node.attrs.get("axis", -1)
    n = len(axis) if isinstance(axis, (list, tuple)) else 1
    return None if n == 1 else f"softmax over {n} axes"


def _strided(node: LiteNode) -> str | None:
    if node.attrs.get("ellipsis_mask", 0) or node.attrs.get("new_axis_mask", 0):
        return "StridedSlice with ellipsis/new-axis masks"
    return None


def _reduce(node: LiteNode) -> str | None:
    if float(node.attrs.get("coeff", 1.0)) not in (0.0, 1.0):
        return f"ReduceFusion coeff={node.attrs['coeff']}"
    return _enum("mode", REDUCE_MODES, "ReduceMean")(node)


def _dropout(node: LiteNode) -> str | None:
    return "Dropout mask output" if len(node.outputs) > 1 else None


_conv = _all(_fused, _nchw, _pad_mode, _two_d("stride"), _two_d("dilation"))
_pool = _all(_fused, _nchw, _pad_mode, _two_d("kernel_size"), _two_d("strides"),
             _enum("round_mode", ("FLOOR", "CEIL"), "FLOOR"))
_resize = _all(_nchw, _enum("method", ("LINEAR", "NEAREST"), "LINEAR"),
               _enum("coordinate_transform_mode", ("ASYMMETRIC", "ALIGN_CORNERS", "HALF_PIXEL"), "ASYMMETRIC"),
               _enum("nearest_mode", ("NORMAL", "ROUND_HALF_DOWN", "ROUND_HALF_UP", "FLOOR", "CEIL"), "NORMAL"))

TABLE: dict[str, Row] = {
    "Conv2DFusion": Row(FLOAT, _conv, (1, 2), (4, 4)),
    "Conv2dTransposeFusion": Row(FLOAT, _all(_conv, _enum("pad_mode", ("PAD", "VALID"), "PAD")), (1, 2), (4, 4)),
    "FullConnection": Row(FLOAT, _fused, (1, 2)),
    "MatMulFusion": Row(FLOAT, _fused, (), (2, 99)),
    **{op: Row(NUMERIC, _fused) for op in ("AddFusion", "SubFusion", "MulFusion", "DivFusion")},
    **{op: Row(NUMERIC) for op in ("RealDiv", "Maximum", "Minimum", "AddN")},
    "PowFusion": Row(FLOAT, _pow),
    **{op: Row(FLOAT) for op in ("Sqrt", "ExpFusion", "Erf", "Log", "Reciprocal", "Floor", "Ceil",
                                 "Square", "Sin", "Cos")},
    "Neg": Row(NUMERIC),
    "Abs": Row(NUMERIC),
    **{op: Row(NUMERIC | {"bool"}) for op in ("Equal", "Less", "Greater", "LessEqual",
                                              "GreaterEqual", "NotEqual")},
    "Where": Row(NUMERIC | {"bool"}),
    **{op: Row(frozenset({"bool"})) for op in ("LogicalNot", "LogicalAnd", "LogicalOr")},
    "PReLUFusion": Row(FLOAT, None, (1,)),
    "BroadcastTo": Row(DATA, None, (1,)),
    "TileFusion": Row(DATA, None, (1,)),
    "Activation": Row(FLOAT, _fused),
    "LeakyRelu": Row(FLOAT),
    "Elu": Row(FLOAT),
    "Softmax": Row(FLOAT, _softmax),
    "LogSoftmax": Row(FLOAT),
    "MaxPoolFusion": Row(FLOAT, _pool, (), (4, 4)),
    "AvgPoolFusion": Row(FLOAT, _pool, (), (4, 4)),
    "LayerNormFusion": Row(FLOAT),
    "InstanceNorm": Row(FLOAT, None, (1, 2)),
    "FusedBatchNorm": Row(FLOAT, None, (1, 2, 3, 4)),
    "BatchNorm": Row(FLOAT, None, (1, 2, 3, 4)),
    "Concat": Row(DATA),
    "Split": Row(DATA, None, (1,)),
    "SliceFusion": Row(DATA, None, (1, 2)),
    "StridedSlice": Row(DATA, _strided, (1, 2, 3, 4)),
    "Transpose": Row(DATA, None, (1,)),
    "PadFusion": Row(DATA, _enum("padding_mode", ("CONSTANT", "REFLECT", "SYMMETRIC", "EDGE"), "CONSTANT"), (1,)),
    "Gather": Row(DATA, None, (1, 2)),
    "Resize": Row(FLOAT, _resize, (1, 2, 3), (4, 4)),
    "ReduceFusion": Row(FLOAT, _reduce, (1,)),
    "Clip": Row(FLOAT, None, (1, 2)),
    "Cast": Row(DATA, None, (1,)),
    **{op: Row(DATA, None, (1,)) for op in ("Reshape", "Squeeze", "Unsqueeze", "ExpandDims")},
    "Flatten": Row(DATA),
    "Dropout": Row(DATA, _dropout),
    "Shape": Row(ANY),
    "ConstantOfShape": Row(ANY, None, (0,)),
}


def compile_time_constants(model: LiteModel) -> set[int]:
    """Tensors the compiler can compute without running the graph (see module docstring)."""
    known = {i for i, t in enumerate(model.tensors) if t.data is not None}
    changed = True
    while changed:
        changed = False
        for node in model.nodes:
            if node.op not in TABLE or all(t in known for t in node.outputs):
                continue
            if node.op == "Shape" or all(t in known for t in node.inputs):
                known.update(node.outputs)
                changed = True
    return known


def _dtype_name(model: LiteModel, t: int) -> str | None:
    type_id = model.tensors[t].type_id
    return np.dtype(lite_dtypes.to_numpy(type_id)).name if lite_dtypes.has_numpy(type_id) else None


def _check(model: LiteModel, node: LiteNode, consts: set[int]) -> str | None:
    if node.op == "Custom":
        return f"Custom op {node.attrs.get('type', '?')!r} is not an NPU primitive"
    row = TABLE.get(node.op)
    if row is None:
        return f"primitive {node.op} is not in the NPU's set"
    if node.quant_type not in ("QUANT_NONE", "", None):
        return f"quantized node ({node.quant_type})"
    if row.dtypes:
        for t in (*node.inputs, *node.outputs):
            if t in consts:
                continue
            name = _dtype_name(model, t)
            if name is not None and name not in row.dtypes:
                return f"dtype {name} of {model.tensors[t].name!r} (NPU takes {', '.join(sorted(row.dtypes))})"
    lo, hi = row.rank
    if node.inputs and node.inputs[0] not in consts and model.tensors[node.inputs[0]].shape:
        rank = len(model.tensors[node.inputs[0]].shape)
        if not lo <= rank <= hi:
            return f"input rank {rank} (NPU takes {lo}..{hi})"
    for i in row.const_inputs:
        if i < len(node.inputs) and node.inputs[i] not in consts:
            return f"input {i} ({model.tensors[node.inputs[i]].name!r}) is computed at run time"
    return row.check(node) if row.check else None


def check(model: LiteModel, node_index: int) -> str | None:
    """None if the NPU runs model.nodes[node_index], else why it stays on the CPU."""
    return _check(model, model.nodes[node_index], compile_time_constants(model))


def supported_nodes(model: LiteModel) -> dict[int, str | None]:
    """check() for every node, computing the constant analysis once."""
    consts = compile_time_constants(model)
    return {i: _check(model, node, consts) for i, node in enumerate(model.nodes)}
