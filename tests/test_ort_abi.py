"""The ABI table in provider.ort.abi against the running onnxruntime."""

import ctypes as C

import onnxruntime
import pytest

import provider
from provider.errors import LitenpuError
from provider.ort import VENDOR_ID, abi
from provider.ort.callbacks import ort as negotiated
from provider.ort.factory import MEMORY_NAME, factory


@pytest.fixture(scope="module")
def o() -> abi.Ort:
    provider.register()
    return negotiated()


def test_version_string_matches_python_package(o):
    assert o.version_string == onnxruntime.__version__


def test_negotiated_version_never_exceeds_runtime(o):
    runtime = abi.runtime_api_version(onnxruntime.__version__)
    assert o.api_version == min(runtime, abi.MAX_API_VERSION)
    assert o.api_version >= abi.MIN_API_VERSION


def test_status_round_trip(o):
    status = o.status(abi.ORT_INVALID_ARGUMENT, "litenpu slot check")
    try:
        assert o.api.GetErrorCode(status) == abi.ORT_INVALID_ARGUMENT
        assert o.api.GetErrorMessage(status) == b"litenpu slot check"
    finally:
        o.api.ReleaseStatus(status)


def test_key_value_pairs_round_trip(o):
    pairs = abi.vp()
    o.api.CreateKeyValuePairs(C.byref(pairs))
    try:
        o.api.AddKeyValuePair(pairs, b"a", b"1")
        o.api.AddKeyValuePair(pairs, b"b", b"two")
        keys, values, n = abi.PSTR(), abi.PSTR(), abi.sz()
        o.api.GetKeyValuePairs(pairs, C.byref(keys), C.byref(values), C.byref(n))
        assert {keys[i]: values[i] for i in range(n.value)} == {b"a": b"1", b"b": b"two"}
    finally:
        o.api.ReleaseKeyValuePairs(pairs)


def test_memory_info_slots(o):
    info = factory().memory_info
    assert o.string("MemoryInfoGetName", info) == MEMORY_NAME
    device = o.ep.MemoryInfo_GetMemoryDevice(info)
    assert o.ep.MemoryDevice_GetDeviceType(device) == abi.MEM_DEVICE_NPU
    assert o.ep.MemoryDevice_GetVendorId(device) == VENDOR_ID
    assert o.ep.MemoryDevice_GetMemoryType(device) == abi.DEVICE_MEMORY_DEFAULT
    assert o.ep.MemoryDevice_GetDeviceId(device) == 0


def test_error_status_raises_with_message(o):
    with pytest.raises(abi.OrtCallError, match="CreateMemoryInfo_V2.*device type") as info:
        o.api.CreateMemoryInfo_V2(b"bad", 99, 0, 0, 0, 0, 0, C.byref(abi.vp()))
    assert info.value.code == abi.ORT_INVALID_ARGUMENT


def test_entry_newer_than_runtime_is_refused(o):
    entries = {"Future": abi.Entry(0, o.api_version + 1, abi.vp, ())}
    table = abi.FunctionTable("OrtApi", 1, entries, o.api_version)
    assert not table.available("Future")
    with pytest.raises(LitenpuError, match="needs onnxruntime API version"):
        table.Future()


def test_struct_layouts_are_pointer_tables():
    ptr = C.sizeof(C.c_void_p)
    assert abi.OrtEp.GetName.offset == ptr  # uint32 version, padded to a pointer
    assert abi.OrtEpFactory.CreateDataTransfer.offset == ptr * 11
    assert abi.OrtNodeComputeInfo.ReleaseState.offset == ptr * 3


@pytest.mark.parametrize("text, version", [("1.23.2", 23), ("1.31.1", 31)])
def test_runtime_api_version(text, version):
    assert abi.runtime_api_version(text) == version
