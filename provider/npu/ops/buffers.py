"""Helpers of the numpy kernels: scratch views by name, and padding into a planned buffer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def scratch(outputs: Sequence[np.ndarray], attrs: dict) -> dict[str, np.ndarray]:
    """Map the scratch names in attrs["scratch"] to the views after outputs[0]."""
    return dict(zip(attrs.get("scratch", []), outputs[1:], strict=True))


def pad_into(x: np.ndarray, buf: np.ndarray, pads: Sequence[int], value: float) -> np.ndarray:
    """Copy x (..., H, W) into the centre of buf, fill the border with value; returns buf.

    The border is rewritten every run because the arena memory is shared with other tensors.
    """
    top, left = pads[0], pads[2]
    h, w = x.shape[-2:]
    buf[..., :top, :] = value
    buf[..., top + h:, :] = value
    rows = buf[..., top:top + h, :]
    rows[..., :left] = value
    rows[..., left + w:] = value
    rows[..., left:left + w] = x
    return buf
