"""onnxruntime tensors in NPU memory: create them, view them without copying, bind them.

`empty` / `ortvalue_from_numpy` give `onnxruntime.OrtValue`s allocated by the NPU EP's
allocator (the NPU pool). `view(value)` is a numpy array over that NPU memory itself (like
RKNN's virt_addr): writing it uploads with zero copies. `value.numpy()` keeps onnxruntime's
meaning: a copy to CPU, made by our data transfer and counted.

Binding outputs on the NPU: onnxruntime's `IOBinding.bind_output(name, "npu", 0)` cannot name
our vendor id, so it fails to find the allocator; use `bind_output(binding, name)` (or
`binding.bind_ortvalue_output(name, empty(shape, dtype))` for a preallocated buffer).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from provider.errors import BindingError
from provider.npu.memory import default_pool
from provider.ort import VENDOR_ID
from provider.ort.abi import array_at
from provider.ort.registration import register
from provider.ort.transfer import COUNTERS, CopyStats

# OrtValue.data_type() / NodeArg.type strings -> numpy dtypes
ORT_TYPE_TO_NUMPY = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16, "tensor(int32)": np.int32, "tensor(uint32)": np.uint32,
    "tensor(int64)": np.int64, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
}


def npu_device() -> ort.OrtDevice:
    """The `OrtDevice` of NPU memory (device type npu, id 0, our vendor id)."""
    return ort.OrtDevice.make("npu", 0, VENDOR_ID)


def empty(shape: Sequence[int], dtype="float32") -> ort.OrtValue:
    """An uninitialised tensor in NPU memory."""
    register()
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise BindingError(f"empty(): shape {tuple(shape)} has a negative dim")
    return ort.OrtValue.ortvalue_from_shape_and_type(dims, np.dtype(dtype).type, "npu", 0, VENDOR_ID)


def ortvalue_from_numpy(array: np.ndarray) -> ort.OrtValue:
    """A tensor in NPU memory holding a copy of `array` (one counted upload)."""
    array = np.asarray(array)
    value = empty(array.shape, array.dtype)
    view(value)[...] = array
    COUNTERS.add(to_device=array.nbytes)
    return value


def view(value: ort.OrtValue) -> np.ndarray:
    """A zero-copy numpy view of an NPU tensor's memory (keeps `value` alive).

    BindingError if `value` is not in NPU memory (use `value.numpy()` for CPU tensors).
    """
    if value.device_name().lower() != "npu":
        raise BindingError(f"view() needs an OrtValue in NPU memory; this one is on "
                           f"{value.device_name()} (use .numpy() instead)")
    dtype = np.dtype(ORT_TYPE_TO_NUMPY[value.data_type()])
    shape = tuple(value.shape())
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    address = value.data_ptr()
    if nbytes and not default_pool().contains(address, nbytes):
        raise BindingError(f"view(): the OrtValue's {nbytes} bytes at {address:#x} are not in "
                           "the NPU pool")
    return array_at(address, dtype, shape, owner=value)


def bind_output(binding: ort.IOBinding, name: str) -> None:
    """Bind output `name` to NPU memory onnxruntime allocates (our allocator) at run time."""
    binding._iobinding.bind_output(name, npu_device()._get_c_device())


def copy_stats() -> CopyStats:
    """Process-wide bytes copied between CPU and NPU memory so far (subtract two snapshots)."""
    return COUNTERS.snapshot()


def random_feed(meta, dims: dict[str, int], rng: np.random.Generator) -> np.ndarray:
    """Seeded random values for one session input (`meta`: an onnxruntime NodeArg; its
    symbolic dims from `dims`, else 1): normal floats, coin-flip bools, integers in [0, 10)."""
    dtype = ORT_TYPE_TO_NUMPY.get(meta.type)
    if dtype is None:
        raise BindingError(f"input {meta.name!r} is a {meta.type}; random values fill tensors "
                           "only")
    shape = [d if isinstance(d, int) and d >= 0 else dims.get(str(d), 1) for d in meta.shape]
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 10, shape).astype(dtype)
