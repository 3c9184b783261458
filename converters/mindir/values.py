"""Decoding MindIR protobuf values: AttributeProto -> Python values, TensorProto -> numpy.

MindIR keeps primitive arguments in two shapes: attributes on a PrimitiveProto (1.x, and
2.x for some primitives) and `Constant` nodes feeding an input (2.x). Both end up here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from converters.errors import InvalidModelError, UnsupportedError
from converters.mindir._generated import mind_ir_pb2 as pb

AttrType = pb.AttributeProto.AttributeType
TensorType = pb.TensorProto.DataType

# mind_ir TensorProto.DataType -> numpy (little-endian, as MindSpore writes raw_data).
NUMPY_OF = {
    TensorType.FLOAT: np.dtype("<f4"),
    TensorType.UINT8: np.dtype("u1"),
    TensorType.INT8: np.dtype("i1"),
    TensorType.UINT16: np.dtype("<u2"),
    TensorType.INT16: np.dtype("<i2"),
    TensorType.INT32: np.dtype("<i4"),
    TensorType.INT64: np.dtype("<i8"),
    TensorType.BOOL: np.dtype("?"),
    TensorType.FLOAT16: np.dtype("<f2"),
    TensorType.DOUBLE: np.dtype("<f8"),
    TensorType.UINT32: np.dtype("<u4"),
    TensorType.UINT64: np.dtype("<u8"),
    TensorType.FLOAT64: np.dtype("<f8"),
}

_INTS = {
    AttrType.UINT8, AttrType.INT8, AttrType.UINT16, AttrType.INT16, AttrType.INT32,
    AttrType.INT64, AttrType.UINT32, AttrType.UINT64,
}
_MONADS = {AttrType.UMONAD, AttrType.IOMONAD}


class Monad:
    """The side-effect token (UMonad / IOMonad): carries ordering, never data."""

    def __repr__(self) -> str:
        return "Monad"


MONAD = Monad()


@dataclass(frozen=True)
class TensorInfo:
    """Declared element type and shape of a value (from a node's "shape" attribute)."""

    dtype: np.dtype
    shape: tuple[int, ...]


def numpy_dtype(data_type: int, what: str) -> np.dtype:
    """numpy dtype of a mind_ir DataType; UnsupportedError naming `what` if there is none."""
    try:
        return NUMPY_OF[data_type]
    except KeyError:
        name = TensorType.Name(data_type) if data_type in TensorType.values() else data_type
        raise UnsupportedError(f"{what}: MindIR data type {name} is not supported") from None


def tensor_info(t: pb.TensorProto, what: str) -> TensorInfo:
    """Element type and dims of a TensorProto."""
    return TensorInfo(numpy_dtype(t.data_type, what), tuple(int(d) for d in t.dims))


def inline_tensor(t: pb.TensorProto, what: str) -> np.ndarray | None:
    """Values held inside the TensorProto (raw_data or typed fields); None if it holds none."""
    info = tensor_info(t, what)
    count = math.prod(info.shape)
    if any(d < 0 for d in info.shape):
        raise InvalidModelError(f"{what}: constant tensor has unknown dims {info.shape}")
    if t.HasField("raw_data"):
        return from_bytes(t.raw_data, info, what)
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        values = getattr(t, field)
        if len(values):
            if len(values) != count:
                raise InvalidModelError(
                    f"{what}: {field} holds {len(values)} values, dims {info.shape} need {count}")
            return np.array(values).astype(info.dtype).reshape(info.shape)
    return None


def from_bytes(data: bytes, info: TensorInfo, what: str) -> np.ndarray:
    """A tensor from its little-endian bytes; InvalidModelError if the size does not match."""
    expected = math.prod(info.shape) * info.dtype.itemsize
    if len(data) != expected:
        raise InvalidModelError(
            f"{what}: tensor data is {len(data)} bytes, dims {info.shape} of {info.dtype} "
            f"need {expected}")
    return np.frombuffer(data, dtype=info.dtype).reshape(info.shape).astype(
        info.dtype.newbyteorder("="))


def _scalar_or_tuple(scalar_set: bool, scalar: Any, repeated, convert) -> Any:
    # A scalar sits in the singular field, or (inside tuples) as a one-element repeated field.
    if scalar_set:
        return convert(scalar)
    if len(repeated) == 1:
        return convert(repeated[0])
    return tuple(convert(v) for v in repeated)


def decode_attr(a: pb.AttributeProto, what: str) -> Any:
    """The Python value of an attribute: int/float/bool/str, tuple, numpy array, None or MONAD."""
    kind = a.type
    if kind in _INTS:
        return _scalar_or_tuple(a.HasField("i"), a.i, a.ints, int)
    if kind == AttrType.BOOL:
        return _scalar_or_tuple(a.HasField("i"), a.i, a.ints, bool)
    if kind == AttrType.FLOAT:
        return _scalar_or_tuple(a.HasField("f"), a.f, a.floats, float)
    if kind == AttrType.DOUBLE:
        return _scalar_or_tuple(a.HasField("d"), a.d, a.doubles, float)
    if kind == AttrType.STRING:
        return _scalar_or_tuple(a.HasField("s"), a.s, a.strings, lambda b: _utf8(b, a.name, what))
    if kind in (AttrType.TUPLE, AttrType.LIST):
        return tuple(decode_attr(v, what) for v in a.values)
    if kind == AttrType.TENSORS and len(a.tensors) == 1:
        return _const_tensor(a.tensors[0], what)
    if kind == AttrType.TENSOR and a.HasField("t"):
        return _const_tensor(a.t, what)
    if kind == AttrType.NONE:
        return None
    if kind in _MONADS:
        return MONAD
    raise UnsupportedError(f"{what}: attribute {a.name!r} of type {AttrType.Name(kind)} is not supported")


def _utf8(data: bytes, name: str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidModelError(f"{what}: string attribute {name!r} is not valid UTF-8") from None


def _const_tensor(t: pb.TensorProto, what: str) -> np.ndarray:
    data = inline_tensor(t, what)
    if data is None:
        raise InvalidModelError(f"{what}: constant tensor has no data")
    return data


def decode_abstract(a: pb.AttributeProto, what: str) -> list[TensorInfo] | None:
    """Output types from a node's "shape" attribute: one per output; None when not tensors."""
    if a.type == AttrType.TENSORS:
        return [tensor_info(t, what) for t in a.tensors]
    if a.type == AttrType.TUPLE:
        infos: list[TensorInfo] = []
        for v in a.values:
            if v.type != AttrType.TENSORS or len(v.tensors) != 1:
                return None
            infos.append(tensor_info(v.tensors[0], what))
        return infos
    return None
