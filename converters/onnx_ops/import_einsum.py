"""ONNX -> Lite for Einsum: a two-operand contraction as one batched `MatMulFusion` between
`Transpose`s (attention's "bhqd,bhkd->bhqk" and "bhqk,bhkd->bhqd", "bij,bjk->bik").

Each label is a batch label (in both operands and the output), the contracted label (in
both operands only), a left label (the first operand and the output) or a right label (the
second operand and the output). The first operand is permuted to (batch..., left, k), the
second to (batch..., k, right), a missing left or right label is a unit axis put in and
squeezed out again, and the product (batch..., left, right) is permuted to the output's
order. No shape is read, so dynamic batch and sequence lengths map too. Forms that need a
Reshape (several contracted, left or right labels), a label summed within one operand, a
repeated label (a diagonal), an ellipsis, or another operand count stay Custom.
"""

from __future__ import annotations

import numpy as np

from converters.onnx_ops.import_base import IMPORTERS, emit, intermediate
from converters.onnx_ops.import_nn import NO_ACT
from converters.onnx_ops.registry import Unmappable


def _terms(equation: str) -> tuple[str, str, str]:
    """(first operand, second operand, output) of a two-operand equation; ONNX's implicit
    output is the labels seen once, in alphabetical order."""
    equation = equation.replace(" ", "")
    if "." in equation:
        raise Unmappable("an ellipsis")
    lhs, _, out = equation.partition("->")
    operands = lhs.split(",")
    if len(operands) != 2:
        raise Unmappable(f"{len(operands)} operand(s)")
    a, b = operands
    if "->" not in equation:
        out = "".join(sorted(c for c in set(a + b) if (a + b).count(c) == 1))
    if not all(t.isalpha() and len(set(t)) == len(t) for t in (a, b, out)) or not set(out) <= set(a + b):
        raise Unmappable(f"equation {equation!r}: a repeated or unknown label")
    return a, b, out


def _permuted(ctx, node, name: str, term: str, order: list[str], dtype, nodes: list) -> str | int:
    """`name` (labels `term`) transposed to `order` (a no-op when it is already)."""
    perm = [term.index(c) for c in order]
    if perm == list(range(len(perm))):
        return name
    out = intermediate(ctx, f"{node.outputs[0]}/{term}_to_{''.join(order)}", dtype)
    index = ctx.const(f"{node.outputs[0]}/{''.join(order)}_perm", np.array(perm, np.int32))
    nodes.append(emit(ctx, node, "Transpose", {}, [name, index], [out]))
    return out


@IMPORTERS.register("Einsum", since=12)
def einsum(ctx, node):
    equation = node.attrs["equation"]
    a, b, out = _terms(equation.decode() if isinstance(equation, bytes) else equation)
    for name, term in zip(node.inputs[:2], (a, b), strict=True):
        if ctx.rank(name) not in (None, len(term)):
            raise Unmappable(f"operand {name!r} of rank {ctx.rank(name)} for {term!r}")
    batch = [c for c in out if c in a and c in b]
    left = [c for c in out if c in a and c not in b]
    right = [c for c in out if c in b and c not in a]
    contracted = [c for c in a if c in b and c not in out]
    if len(contracted) != 1 or len(left) > 1 or len(right) > 1 \
            or set(a + b) != set(out) | set(contracted):
        raise Unmappable(f"equation {equation!r} needs more than transposes and one MatMul")
    dtype, nodes = ctx.dtype(node.inputs[0]), []
    x = _permuted(ctx, node, node.inputs[0], a, batch + left + contracted, dtype, nodes)
    y = _permuted(ctx, node, node.inputs[1], b, batch + contracted + right, dtype, nodes)
    rank = len(batch) + 2  # the product's: a missing side gets a unit axis
    added = [rank - 2] * (not left) + [rank - 1] * (not right)
    for i, axis in ((0, rank - 2), (1, rank - 1)):
        if axis in added:
            unit = intermediate(ctx, f"{node.outputs[0]}/unit{i}", dtype)
            nodes.append(emit(ctx, node, "Unsqueeze", {"axis": [axis]}, [(x, y)[i]], [unit]))
            x, y = (unit, y) if i == 0 else (x, unit)
    product_order = batch + left + right
    if added or product_order != list(out):
        product = intermediate(ctx, f"{node.outputs[0]}/product", dtype)
    else:
        product = node.outputs[0]
    nodes.append(emit(ctx, node, "MatMulFusion", {"transpose_a": False, "transpose_b": False,
                                                  "activation_type": NO_ACT}, [x, y], [product]))
    if added:
        squeezed = node.outputs[0] if product_order == list(out) else \
            intermediate(ctx, f"{node.outputs[0]}/squeezed", dtype)
        nodes.append(emit(ctx, node, "Squeeze", {"axis": added}, [product], [squeezed]))
        product = squeezed
    if product_order != list(out):
        perm = [product_order.index(c) for c in out]
        index = ctx.const(f"{node.outputs[0]}/out_perm", np.array(perm, np.int32))
        nodes.append(emit(ctx, node, "Transpose", {}, [product, index], [node.outputs[0]]))
    return nodes
