"""Normalisations and softmax: LayerNormFusion, InstanceNorm, Softmax, LogSoftmax.

Statistics are accumulated in fp32 (dtype=np.float32) even when storage is fp16.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provider.npu.kernels.registry import register

F32 = np.float32


def _normalize(x: np.ndarray, y: np.ndarray, axes: tuple[int, ...], eps: float) -> None:
    """y = (x - mean) / sqrt(var + eps) over `axes`."""
    mean = np.mean(x, axis=axes, keepdims=True, dtype=F32)
    np.subtract(x, mean, out=y)
    var = np.mean(np.square(y, dtype=F32), axis=axes, keepdims=True)
    var += eps
    np.sqrt(var, out=var)
    y /= var


@register("layer_norm")
def layer_norm(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """LayerNormFusion: normalise over axes >= begin_norm_axis, then * gamma + beta if given."""
    x, y = inputs[0], outputs[0]
    _normalize(x, y, tuple(range(attrs["begin_norm_axis"], x.ndim)), attrs["epsilon"])
    if len(inputs) > 1:
        y *= inputs[1]
    if len(inputs) > 2:
        y += inputs[2]


@register("instance_norm")
def instance_norm(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """InstanceNorm: normalise each (n, c) over the spatial axes, then * scale + bias (C,1,..)."""
    x, y = inputs[0], outputs[0]
    _normalize(x, y, tuple(range(2, x.ndim)), attrs["epsilon"])
    y *= inputs[1]
    y += inputs[2]


@register("softmax")
def softmax(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = softmax(x) along attrs["axis"] (log_softmax when attrs["log"])."""
    x, y = inputs[0], outputs[0]
    if not y.size:  # nothing to write (and an empty axis has no max)
        return
    axis = attrs["axis"]
    np.subtract(x, np.max(x, axis=axis, keepdims=True), out=y)
    if attrs["log"]:
        e = np.exp(y, dtype=F32)
        y -= np.log(np.sum(e, axis=axis, keepdims=True))
    else:
        np.exp(y, out=y)
        y /= np.sum(y, axis=axis, keepdims=True, dtype=F32)
