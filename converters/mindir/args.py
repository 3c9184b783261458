"""Checked conversions of decoded MindIR values into the Python types converters expect.

Arguments come from an untrusted file: an `axis` may arrive as a tuple, a tensor or a monad.
Each function returns the value or raises InvalidModelError naming `what` and the value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from converters.errors import InvalidModelError


def _bad(what: str, expected: str, value: Any) -> InvalidModelError:
    text = repr(value)
    return InvalidModelError(f"{what}: expected {expected}, got {text[:80]}{'...' if len(text) > 80 else ''}")


def _scalar(value: Any) -> Any:
    """A one-element numpy array stands for its element (MindIR scalars may be 0-d tensors)."""
    if isinstance(value, np.ndarray) and value.size == 1:
        return value.reshape(()).item()
    return value


def as_int(value: Any, what: str) -> int:
    v = _scalar(value)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise _bad(what, "an integer", value)
    return int(v)


def as_float(value: Any, what: str) -> float:
    v = _scalar(value)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise _bad(what, "a number", value)
    return float(v)


def as_bool(value: Any, what: str) -> bool:
    v = _scalar(value)
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)):
        return bool(v)
    raise _bad(what, "a boolean", value)


def as_ints(value: Any, what: str) -> list[int]:
    """An int, a tuple of ints or an integer tensor, as a flat list."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iu":
            raise _bad(what, "integers", value)
        return [int(x) for x in value.reshape(-1)]
    if isinstance(value, (tuple, list)):
        return [as_int(x, what) for x in value]
    return [as_int(value, what)]


def as_array(value: Any, dtype: Any, what: str) -> np.ndarray:
    """A numeric constant as an array of `dtype`; integers must fit, floats never become ints."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        raise _bad(what, "a numeric constant", value) from None
    if arr.dtype.kind not in "biuf":
        raise _bad(what, "a numeric constant", value)
    target = np.dtype(dtype)
    if target.kind in "iu" and arr.size:
        info = np.iinfo(target)
        if arr.dtype.kind == "f" or arr.min() < info.min or arr.max() > info.max:
            raise _bad(what, f"values that fit {target}", value)
    return arr.astype(target)
