"""Quantization parameters of Lite tensors: building, checking and reading `quantParams`.

A quantized tensor is an int8 / uint8 (activations, weights) or int32 (biases) tensor with
one `QuantParam` (per tensor) or one per channel along an axis the consumer implies (conv
weights: output channels, axis 0; FullConnection weights: axis 0; MatMul's second operand:
its last axis) or, for the explicit QuantDTypeCast steps, its `axis` attribute. The value a
code q stands for is `(q - zero_point) * scale`, as in ONNX's DequantizeLinear. Malformed
parameters (a scale that is zero, negative or not finite, a zero point outside the type,
counts that do not match the channel axis) are an InvalidModelError naming the tensor:
they would otherwise turn into wrong numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from converters.errors import InvalidModelError
from converters.lite import dtypes
from converters.lite.ir import LiteTensor, QuantParam

QUANT_NONE = "QUANT_NONE"
QUANT_ALL = "QUANT_ALL"  # integer inputs and outputs (MindSpore Lite's full quantization)
QUANT_WEIGHT = "QUANT_WEIGHT"
QUANT_DYNAMIC = "QUANT_DYNAMIC"  # codes and run-time zero points in, exact int32 sums out

CODE_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))  # what activations and weights hold
BIAS_DTYPE = np.dtype(np.int32)


@dataclass(frozen=True)
class Quant:
    """A tensor's quantization as arrays: scales (float32) and zero points (int64), one entry
    (per tensor) or one per channel along `axis` (None for per tensor)."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    def params(self, num_bits: int = 8) -> list[QuantParam]:
        """The schema's QuantParam list (scales as float32 values; 32 bits for biases)."""
        return [QuantParam(scale=float(s), zero_point=int(z), num_bits=num_bits,
                           narrow_range=False)
                for s, z in zip(self.scale.reshape(-1), self.zero_point.reshape(-1), strict=True)]

    def same(self, other: Quant) -> bool:
        return (self.axis == other.axis and np.array_equal(self.scale, other.scale)
                and np.array_equal(self.zero_point, other.zero_point))


def check(name: str, scale, zero_point, dtype: np.dtype, *, axis: int | None = None,
          shape: Sequence | None = None) -> Quant:
    """A checked Quant for tensor `name` of integer `dtype`: scales finite and > 0, zero
    points inside `dtype`, one pair per tensor or per channel of `axis` (checked against
    `shape` where its rank and that dim are known). InvalidModelError naming `name`."""
    dtype = np.dtype(dtype)
    s = np.asarray(scale, dtype=np.float64).reshape(-1)
    z = np.asarray(zero_point if zero_point is not None else np.zeros(s.shape), np.float64).reshape(-1)
    if s.size == 0:
        raise InvalidModelError(f"tensor {name!r}: no quantization scale")
    if z.size != s.size:
        raise InvalidModelError(f"tensor {name!r}: {s.size} quantization scales but "
                                f"{z.size} zero points")
    bad = ~(np.isfinite(s) & (s > 0))
    if bad.any():
        raise InvalidModelError(f"tensor {name!r}: quantization scale {float(s[bad][0])} "
                                "(scales must be finite and > 0)")
    if dtype.kind not in "iu":
        raise InvalidModelError(f"tensor {name!r}: quantized tensors are integer, not {dtype}")
    info = np.iinfo(dtype)
    if not (np.all(np.isfinite(z)) and np.all(z == np.round(z))
            and z.min() >= info.min and z.max() <= info.max):
        raise InvalidModelError(f"tensor {name!r}: zero point {[f'{v:g}' for v in z.tolist()[:4]]} outside {dtype} "
                                f"[{info.min}, {info.max}]")
    if axis is None and s.size != 1:
        raise InvalidModelError(f"tensor {name!r}: {s.size} quantization parameters for a "
                                "per-tensor quantization")
    if axis is not None and shape is not None and len(shape):
        rank = len(shape)
        if not -rank <= axis < rank:
            raise InvalidModelError(f"tensor {name!r}: per-channel axis {axis} out of range "
                                    f"for rank {rank}")
        axis %= rank
        dim = shape[axis]
        if isinstance(dim, (int, np.integer)) and dim >= 0 and dim != s.size:
            raise InvalidModelError(f"tensor {name!r}: {s.size} quantization parameters for "
                                    f"{dim} channels on axis {axis}")
    return Quant(s.astype(np.float32), z.astype(np.int64), axis)


def of_tensor(t: LiteTensor, axis: int | None = None) -> Quant:
    """The checked Quant of Lite tensor `t`: per tensor when it has one QuantParam, else per
    channel along `axis` (the consumer's channel axis). InvalidModelError naming it."""
    params = t.quant_params
    if not params:
        raise InvalidModelError(f"tensor {t.name!r}: quantized tensor without quantParams")
    shape = t.data.shape if t.data is not None else t.shape
    if len(params) > 1 and axis is None:
        raise InvalidModelError(f"tensor {t.name!r}: {len(params)} quantization parameters "
                                "where one per tensor is expected")
    dtype = t.data.dtype if t.data is not None else t.dtype
    return check(t.name, [p.scale for p in params], [p.zero_point for p in params], dtype,
                 axis=axis if len(params) > 1 else None, shape=shape)


def is_quantized(t: LiteTensor) -> bool:
    """Whether `t` holds integer codes with quantization parameters."""
    return bool(t.quant_params) and t.type_id in _QUANT_TYPE_IDS


_QUANT_TYPE_IDS = {dtypes.INT8, dtypes.UINT8, dtypes.INT32}


@dataclass(frozen=True)
class TensorQuant:
    """A tensor's name and quantParams, as a quantized node's rule sees them."""

    name: str
    params: tuple[QuantParam, ...]

    def get(self, dtype, axis: int | None = None, shape: Sequence | None = None) -> Quant:
        """The checked Quant (per channel along `axis` when there are several params)."""
        if not self.params:
            raise InvalidModelError(f"tensor {self.name!r}: quantized tensor without quantParams")
        if len(self.params) > 1 and axis is None:
            raise InvalidModelError(f"tensor {self.name!r}: {len(self.params)} quantization "
                                    "parameters where one per tensor is expected")
        return check(self.name, [p.scale for p in self.params],
                     [p.zero_point for p in self.params], dtype,
                     axis=axis if len(self.params) > 1 else None, shape=shape)
