"""Integer steps that are one function of one 8-bit code, merged into one table step.

An int8 SiLU from a QDQ model is two steps: s = table(x) (the quantized Sigmoid) and
y = qmul(x, s). Both read only the code of x, so y is a function of that code alone: its
256 values are computed once, at compile time, by running the two steps' own numpy kernels
on every code, and one table lookup replaces both (one pass over the tensor instead of
three, and no intermediate tensor). The codes are exactly the two steps' codes, double
rounding through the Sigmoid's quantization included, since the table is those steps'
result.
"""

from __future__ import annotations

import numpy as np

from provider.npu.lowering import Builder, LoweredStep, producers_and_reads
from provider.npu.ops import KERNELS
from provider.npu.ops.quant import codes as all_codes

__all__ = ["fuse_code_tables"]


def fuse_code_tables(b: Builder, steps: list[LoweredStep]) -> list[LoweredStep]:
    """`qmul(x, qlut(x))` -> `qlut(x)` with the composed table, where the table step's
    output feeds only the qmul and is not a graph output, and the three tensors have one
    shape (no broadcasting)."""
    made_at, reads = producers_and_reads(steps)
    fused: set[int] = set()
    for mi, mul in enumerate(steps):
        if mul.kernel != "qmul" or len(mul.inputs) != 2:
            continue
        for pos in (0, 1):
            x, s = mul.inputs[1 - pos], mul.inputs[pos]
            li = made_at.get(s)
            if li is None or li in fused or steps[li].kernel != "qlut":
                continue
            lut = steps[li]
            vx, vs, vy = b.vals[x], b.vals[s], b.vals[mul.outputs[0]]
            if lut.inputs[0] != x or reads.get(s) != 1 or vs.io \
                    or not vx.shape == vs.shape == vy.shape:
                continue
            codes = all_codes(vx.dtype)
            through = np.empty(256, vs.dtype)
            KERNELS["qlut"].run([codes, b.array(lut.inputs[1])], [through], lut.attrs)
            table = np.empty(256, vy.dtype)
            operands = [codes, through] if pos == 1 else [through, codes]
            KERNELS["qmul"].run(operands, [table], mul.attrs)
            t = b.add(f"{b.vals[mul.outputs[0]].name}.table", (256,), vy.dtype, table)
            steps[mi] = LoweredStep("qlut", {}, [x, t], list(mul.outputs))
            fused.add(li)
            break
    return [s for i, s in enumerate(steps) if i not in fused]
