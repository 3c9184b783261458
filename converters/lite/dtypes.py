"""MindSpore TypeId numbers (Tensor.dataType on the wire) <-> numpy dtypes."""

import numpy as np

from converters.errors import UnsupportedError

# MindSpore's TypeId enum values for the number types (mindspore/core/ir/dtype/type_id.h);
# checked against the public DataType enum of mindspore_lite 2.0.0 (include/api/data_type.h)
# and the dataType fields of real MindSpore Lite files.
BOOL = 30
INT8 = 32
INT16 = 33
INT32 = 34
INT64 = 35
UINT8 = 37
UINT16 = 38
UINT32 = 39
UINT64 = 40
FLOAT16 = 42
FLOAT32 = 43
FLOAT64 = 44
# Object types that appear in real files but have no numpy equivalent.
OBJECT_STRING = 12
OBJECT_TENSOR_TYPE = 17
UNKNOWN = 0

_TO_NUMPY = {
    BOOL: np.dtype(np.bool_),
    INT8: np.dtype(np.int8),
    INT16: np.dtype(np.int16),
    INT32: np.dtype(np.int32),
    INT64: np.dtype(np.int64),
    UINT8: np.dtype(np.uint8),
    UINT16: np.dtype(np.uint16),
    UINT32: np.dtype(np.uint32),
    UINT64: np.dtype(np.uint64),
    FLOAT16: np.dtype(np.float16),
    FLOAT32: np.dtype(np.float32),
    FLOAT64: np.dtype(np.float64),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}


def to_numpy(type_id: int) -> np.dtype:
    """The numpy dtype of a MindSpore TypeId; UnsupportedError if it has none."""
    try:
        return _TO_NUMPY[type_id]
    except KeyError:
        raise UnsupportedError(f"MindSpore TypeId {type_id} has no numpy dtype") from None


def from_numpy(dtype) -> int:
    """The MindSpore TypeId of a numpy dtype (anything np.dtype() accepts)."""
    dt = np.dtype(dtype)
    try:
        return _FROM_NUMPY[dt]
    except KeyError:
        raise UnsupportedError(f"dtype {dt} has no MindSpore TypeId") from None


def has_numpy(type_id: int) -> bool:
    """Whether numpy can hold tensors of this TypeId (else they stay raw bytes)."""
    return type_id in _TO_NUMPY
