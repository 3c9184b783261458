"""Constant values read as what they stand for, refusing those that stand for nothing."""

from __future__ import annotations

import numpy as np

from converters.errors import InvalidModelError

__all__ = ["as_integers"]


def as_integers(data: np.ndarray, what: str) -> np.ndarray:
    """A constant of integers (axes, perms, shapes) as int64; InvalidModelError for values no
    integer stands for (a float constant's inf, NaN or fractions, values past int64), which
    a cast would turn into wrong numbers."""
    if data.dtype.kind == "c":
        raise InvalidModelError(f"{what}: {data.dtype} values are not integers")
    if data.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(data) | (data != np.trunc(data)) | (np.abs(data) >= 2.0 ** 63)
        if bad.any():
            raise InvalidModelError(f"{what}: {data.dtype} value {data[bad].flat[0].item()} is "
                                    "not an integer")
    elif data.dtype.kind == "u" and data.size and data.max() > np.iinfo(np.int64).max:
        raise InvalidModelError(f"{what}: value {data.max()} is past int64")
    return data.astype(np.int64)
