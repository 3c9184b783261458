"""The one matrix-multiply entry point every GEMM-based kernel uses (conv, deconv, matmul).

fp32 operands go straight to BLAS through np.matmul(out=). Anything else (fp16 storage) is
accumulated in fp32 and rounded once into `out`, as the fp16 mode promises; that path makes
fp32 temporaries (numpy has no fp16 BLAS), which the fp16 mode accepts.
"""

from __future__ import annotations

import numpy as np

F32 = np.dtype(np.float32)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b (numpy broadcasting of the batch dims), accumulated in at least fp32."""
    if a.dtype == F32 and b.dtype == F32 and out.dtype == F32:
        np.matmul(a, b, out=out)
    else:  # values beyond fp16's range become inf, as fp16 storage implies
        with np.errstate(over="ignore", invalid="ignore"):
            np.copyto(out, np.matmul(a.astype(F32, copy=False), b.astype(F32, copy=False)),
                      casting="same_kind")
