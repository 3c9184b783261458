"""MatMulFusion and FullConnection: one broadcasting (batched) GEMM plus bias and activation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provider.npu.kernels import activation, gemm
from provider.npu.kernels.registry import register


@register("matmul")
def matmul(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = op(a) @ op(b) [+ bias]; attrs transpose_a, transpose_b, activation.

    The compiler stores constant B already transposed as needed (transpose_b False then).
    FullConnection passes a_shape / y_shape: the (rows, K) and (rows, N) views of its
    flattened input and output, so this one kernel serves both primitives.
    """
    a, b = inputs[0], inputs[1]
    y = outputs[0]
    if "a_shape" in attrs:
        a = a.reshape(attrs["a_shape"])
        y = y.reshape(attrs["y_shape"])
    if attrs["transpose_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_b"]:
        b = np.swapaxes(b, -1, -2)
    gemm.matmul(a, b, y)
    if len(inputs) > 2:
        y += inputs[2]
    activation.fused(y, attrs)
