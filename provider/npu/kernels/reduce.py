"""ReduceFusion: mean, sum, max, min, prod, sum of squares, L2 over resolved axes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provider.npu.kernels.registry import register

_REDUCERS = {
    "ReduceMean": np.mean,
    "ReduceSum": np.sum,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceProd": np.prod,
}
MODES = (*_REDUCERS, "ReduceSumSquare", "ReduceL2")
# What onnxruntime gives for a reduction over no elements (numpy's max and min have no
# value for it and its mean is NaN); every other mode gives 0.
_OF_NOTHING = {"ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceProd": 1.0}


@register("reduce")
def reduce(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = mode(x) over attrs["axes"] (non-negative); the output may drop them."""
    x, y = inputs[0], outputs[0]
    axes = tuple(attrs["axes"])
    keep = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    yk = y.reshape(keep)
    mode = attrs["mode"]
    if not x.size:
        yk.fill(_OF_NOTHING.get(mode, 0.0))
        return
    if mode in ("ReduceSumSquare", "ReduceL2"):
        np.sum(np.square(x), axis=axes, keepdims=True, out=yk)
        if mode == "ReduceL2":
            np.sqrt(yk, out=yk)
    elif mode in ("ReduceMax", "ReduceMin"):
        _REDUCERS[mode](x, axis=axes, keepdims=True, out=yk)
    else:
        _REDUCERS[mode](x, axis=axes, keepdims=True, out=yk, dtype=np.float32
                        if x.dtype == np.float16 else None)
