"""Data movement: Concat, Split, slices (SliceFusion / StridedSlice), Transpose, PadFusion,
Gather. Index arithmetic is resolved by the compiler; these kernels only copy.

Index arrays are validated at compile time, so np.take runs with mode="clip": with the
default mode="raise" numpy buffers the whole output on every call."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from provider.npu.kernels.registry import register


def slices(spec: Sequence[Sequence[int | None]]) -> tuple[slice, ...]:
    """Turn the compiler's [[start, stop, step], ...] (stop may be None) into a slice tuple."""
    return tuple(slice(*s) for s in spec)


@register("concat")
def concat(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = inputs joined along attrs["axis"] (non-negative)."""
    np.concatenate(inputs, axis=attrs["axis"], out=outputs[0])


@register("split")
def split(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[i] = consecutive pieces of x along attrs["axis"], sized as the outputs."""
    x, axis = inputs[0], attrs["axis"]
    start = 0
    for y in outputs:
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(start, start + y.shape[axis])
        np.copyto(y, x[tuple(idx)])
        start += y.shape[axis]


@register("slice")
def strided_slice(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x[slices] (attrs["slices"] per axis), reshaped to the output (shrink axes)."""
    part = inputs[0][slices(attrs["slices"])]
    np.copyto(outputs[0].reshape(part.shape), part)


@register("transpose")
def transpose(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x.transpose(attrs["perm"])."""
    np.copyto(outputs[0], inputs[0].transpose(attrs["perm"]))


@register("pad")
def pad(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = x padded by attrs["pads"] ([[before, after], ...], non-negative);
    attrs mode "constant" (value) / "reflect" / "edge" / "symmetric"."""
    x, y = inputs[0], outputs[0]
    pads = attrs["pads"]
    if attrs["mode"] == "constant":
        y.fill(attrs["value"])
        y[tuple(slice(b, b + d) for (b, _), d in zip(pads, x.shape, strict=True))] = x
    else:
        np.copyto(y, np.pad(x, pads, mode=attrs["mode"]))


@register("gather")
def gather(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """outputs[0] = take(x, indices, axis) (indices non-negative, checked at compile time)."""
    np.take(inputs[0], inputs[1], axis=attrs["axis"], out=outputs[0], mode="clip")


@register("resize")
def resize(inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], attrs: dict) -> None:
    """NCHW resize along H and W from precomputed source indices and weights.

    inputs: x, h_lo, h_hi, h_frac (OH, 1), w_lo, w_hi, w_frac (OW,); nearest uses h_lo/w_lo only
    (attrs method "nearest" / "linear"). Linear is separable: rows first, then columns.
    Scratch after the output: rows (N, C, OH, W) [, top (N, C, OH, W), left (N, C, OH, OW)].
    """
    x, y = inputs[0], outputs[0]
    rows = outputs[1]
    if attrs["method"] == "nearest":
        np.take(x, inputs[1], axis=2, out=rows, mode="clip")
        np.take(rows, inputs[2], axis=3, out=y, mode="clip")
        return
    top, left = outputs[2], outputs[3]
    h_lo, h_hi, h_frac, w_lo, w_hi, w_frac = inputs[1:7]
    np.take(x, h_lo, axis=2, out=top, mode="clip")
    np.take(x, h_hi, axis=2, out=rows, mode="clip")
    rows -= top
    rows *= h_frac
    rows += top
    np.take(rows, w_lo, axis=3, out=left, mode="clip")
    np.take(rows, w_hi, axis=3, out=y, mode="clip")
    y -= left
    y *= w_frac
    y += left
