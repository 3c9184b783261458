"""The slice of the onnxruntime C ABI the NPU execution provider uses, as ctypes.

Slot indices are the member order of the function tables in onnxruntime's public headers
(`include/onnxruntime/core/session/onnxruntime_c_api.h` for OrtApi,
`onnxruntime_ep_c_api.h` for OrtEpApi and the structs an EP implements). The tables are
append-only, so an index holds for every later version; `since` records the API version that
added an entry so a feature can say which onnxruntime it needs instead of calling past the end of
an older table (slots past the end are not NULL: never probe for NULL).
`tests/test_ort_abi.py` checks a handful of entries against the running onnxruntime.

Over 400 lines on purpose: it is one table of the ABI (slots, signatures, struct layouts);
split, the slot numbering would be spread over files that must agree with each other.
"""

from __future__ import annotations

import ctypes as C
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from provider.errors import LitenpuError
from provider.npu.native import view_at

# Oldest onnxruntime whose plugin-EP ABI we support, and newest API version whose struct
# layouts this module describes (we never request more than the runtime offers).
MIN_API_VERSION = 23
MAX_API_VERSION = 29

# OrtErrorCode
ORT_OK = 0
ORT_FAIL = 1
ORT_INVALID_ARGUMENT = 2
ORT_NOT_IMPLEMENTED = 9
ORT_EP_FAIL = 11

# OrtHardwareDeviceType / OrtMemoryInfoDeviceType / OrtDeviceMemoryType / OrtAllocatorType
HW_DEVICE_CPU = 0
HW_DEVICE_NPU = 2
MEM_DEVICE_CPU = 0
MEM_DEVICE_NPU = 3
DEVICE_MEMORY_DEFAULT = 0
DEVICE_ALLOCATOR = 0

# OrtLoggingLevel
LOG_VERBOSE, LOG_INFO, LOG_WARNING, LOG_ERROR = 0, 1, 2, 3

# OrtOpAttrType
ATTR_INT, ATTR_INTS, ATTR_FLOAT, ATTR_FLOATS, ATTR_STRING, ATTR_STRINGS, ATTR_GRAPH, ATTR_TENSOR = (
    1, 2, 3, 4, 5, 6, 7, 8,
)

# ONNXTensorElementDataType <-> numpy (the types the NPU and onnxruntime tensors share)
ELEMENT_TO_NUMPY: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8),
    4: np.dtype(np.uint16), 5: np.dtype(np.int16), 6: np.dtype(np.int32),
    7: np.dtype(np.int64), 9: np.dtype(np.bool_), 10: np.dtype(np.float16),
    11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
}
NUMPY_TO_ELEMENT: dict[np.dtype, int] = {v: k for k, v in ELEMENT_TO_NUMPY.items()}

vp = C.c_void_p
sz = C.c_size_t
PVP = C.POINTER(vp)
PSZ = C.POINTER(sz)
PSTR = C.POINTER(C.c_char_p)
STATUS = "OrtStatus*"  # marks functions returning OrtStatus* (NULL = success)


@dataclass(frozen=True)
class Entry:
    """One function-table slot: index, API version that added it, C signature."""

    slot: int
    since: int
    restype: Any
    argtypes: tuple


def _e(slot: int, restype, *argtypes, since: int = MIN_API_VERSION) -> Entry:
    return Entry(slot, since, restype, argtypes)


ORT_API: dict[str, Entry] = {
    "CreateStatus": _e(0, vp, C.c_int, C.c_char_p),
    "GetErrorCode": _e(1, C.c_int, vp),
    "GetErrorMessage": _e(2, C.c_char_p, vp),
    "IsTensor": _e(50, STATUS, vp, C.POINTER(C.c_int)),
    "GetTensorMutableData": _e(51, STATUS, vp, PVP),
    "CastTypeInfoToTensorInfo": _e(55, STATUS, vp, PVP),
    "GetOnnxTypeFromTypeInfo": _e(56, STATUS, vp, C.POINTER(C.c_int)),
    "GetTensorElementType": _e(60, STATUS, vp, C.POINTER(C.c_int)),
    "GetDimensionsCount": _e(61, STATUS, vp, PSZ),
    "GetDimensions": _e(62, STATUS, vp, C.POINTER(C.c_int64), sz),
    "GetSymbolicDimensions": _e(63, STATUS, vp, PSTR, sz),
    "GetTensorTypeAndShape": _e(65, STATUS, vp, PVP),
    "MemoryInfoGetName": _e(71, STATUS, vp, PSTR),
    "KernelContext_GetInputCount": _e(88, STATUS, vp, PSZ),
    "KernelContext_GetOutputCount": _e(89, STATUS, vp, PSZ),
    "KernelContext_GetInput": _e(90, STATUS, vp, sz, PVP),
    "KernelContext_GetOutput": _e(91, STATUS, vp, sz, C.POINTER(C.c_int64), sz, PVP),
    "ReleaseStatus": _e(93, None, vp),
    "ReleaseMemoryInfo": _e(94, None, vp),
    "ReleaseValue": _e(96, None, vp),
    "ReleaseTensorTypeAndShapeInfo": _e(99, None, vp),
    "CreateOpAttr": _e(211, STATUS, C.c_char_p, vp, C.c_int, C.c_int, PVP),
    "ReleaseOpAttr": _e(212, None, vp),
    "HasSessionConfigEntry": _e(237, STATUS, vp, C.c_char_p, C.POINTER(C.c_int)),
    "GetSessionConfigEntry": _e(238, STATUS, vp, C.c_char_p, C.c_char_p, PSZ),
    "Logger_LogMessage": _e(247, STATUS, vp, C.c_int, C.c_char_p, C.c_char_p, C.c_int, C.c_char_p),
    "ReadOpAttr": _e(272, STATUS, vp, C.c_int, vp, sz, PSZ),
    "GetValueInfoName": _e(289, STATUS, vp, PSTR),
    "GetValueInfoTypeInfo": _e(290, STATUS, vp, PVP),
    "GetModelEditorApi": _e(291, vp),
    "CreateKeyValuePairs": _e(295, None, PVP),
    "AddKeyValuePair": _e(296, None, vp, C.c_char_p, C.c_char_p),
    "GetKeyValuePairs": _e(298, None, vp, C.POINTER(PSTR), C.POINTER(PSTR), PSZ),
    "ReleaseKeyValuePairs": _e(300, None, vp),
    "HardwareDevice_Type": _e(307, C.c_int, vp),
    "GetEpApi": _e(317, vp),
    "GetTensorSizeInBytes": _e(318, STATUS, vp, PSZ),
    "CreateMemoryInfo_V2": _e(
        320, STATUS, C.c_char_p, C.c_int, C.c_uint32, C.c_int32, C.c_int, sz, C.c_int, PVP
    ),
    "ValueInfo_GetValueProducer": _e(323, STATUS, vp, PVP, PSZ),
    "ValueInfo_GetInitializerValue": _e(326, STATUS, vp, PVP),
    "ValueInfo_IsRequiredGraphInput": _e(328, STATUS, vp, C.POINTER(C.c_bool)),
    "ValueInfo_IsOptionalGraphInput": _e(329, STATUS, vp, C.POINTER(C.c_bool)),
    "ValueInfo_IsGraphOutput": _e(330, STATUS, vp, C.POINTER(C.c_bool)),
    "ValueInfo_IsConstantInitializer": _e(331, STATUS, vp, C.POINTER(C.c_bool)),
    "Graph_GetName": _e(333, STATUS, vp, PSTR),
    "Graph_GetModelPath": _e(334, STATUS, vp, PSTR),
    "Graph_GetNumOperatorSets": _e(336, STATUS, vp, PSZ),
    "Graph_GetOperatorSets": _e(337, STATUS, vp, PSTR, C.POINTER(C.c_int64), sz),
    "Graph_GetNumInputs": _e(338, STATUS, vp, PSZ),
    "Graph_GetInputs": _e(339, STATUS, vp, PVP, sz),
    "Graph_GetNumOutputs": _e(340, STATUS, vp, PSZ),
    "Graph_GetOutputs": _e(341, STATUS, vp, PVP, sz),
    "Graph_GetNumInitializers": _e(342, STATUS, vp, PSZ),
    "Graph_GetInitializers": _e(343, STATUS, vp, PVP, sz),
    "Graph_GetNumNodes": _e(344, STATUS, vp, PSZ),
    "Graph_GetNodes": _e(345, STATUS, vp, PVP, sz),
    "Graph_GetParentNode": _e(346, STATUS, vp, PVP),
    "Node_GetName": _e(349, STATUS, vp, PSTR),
    "Node_GetOperatorType": _e(350, STATUS, vp, PSTR),
    "Node_GetDomain": _e(351, STATUS, vp, PSTR),
    "Node_GetSinceVersion": _e(352, STATUS, vp, C.POINTER(C.c_int)),
    "Node_GetNumInputs": _e(353, STATUS, vp, PSZ),
    "Node_GetInputs": _e(354, STATUS, vp, PVP, sz),
    "Node_GetNumOutputs": _e(355, STATUS, vp, PSZ),
    "Node_GetOutputs": _e(356, STATUS, vp, PVP, sz),
    "Node_GetNumImplicitInputs": _e(357, STATUS, vp, PSZ),
    "Node_GetImplicitInputs": _e(358, STATUS, vp, PVP, sz),
    "Node_GetNumAttributes": _e(359, STATUS, vp, PSZ),
    "Node_GetAttributes": _e(360, STATUS, vp, PVP, sz),
    "Node_GetAttributeByName": _e(361, STATUS, vp, C.c_char_p, PVP),
    "OpAttr_GetTensorAttributeAsOrtValue": _e(362, STATUS, vp, PVP),
    "OpAttr_GetType": _e(363, STATUS, vp, C.POINTER(C.c_int)),
    "OpAttr_GetName": _e(364, STATUS, vp, PSTR),
    "GetRunConfigEntry": _e(373, C.c_char_p, vp, C.c_char_p),  # NULL when absent
    "GetSessionOptionsConfigEntries": _e(379, STATUS, vp, PVP),
    "TensorTypeAndShape_HasShape": _e(390, C.c_bool, vp, since=24),
}

EP_API: dict[str, Entry] = {
    "CreateEpDevice": _e(0, STATUS, vp, vp, vp, vp, PVP),
    "EpGraphSupportInfo_AddNodesToFuse": _e(2, STATUS, vp, PVP, sz, vp),
    "NodeComputeContext_NodeName": _e(4, C.c_char_p, vp),
    "EpDevice_AddAllocatorInfo": _e(5, STATUS, vp, vp),
    "MemoryInfo_GetMemoryDevice": _e(6, vp, vp),
    "Value_GetMemoryDevice": _e(7, vp, vp),
    "MemoryDevice_GetDeviceType": _e(9, C.c_int, vp),
    "MemoryDevice_GetMemoryType": _e(10, C.c_int, vp),
    "MemoryDevice_GetVendorId": _e(11, C.c_uint32, vp),
    "MemoryDevice_GetDeviceId": _e(12, C.c_uint32, vp),
    # CreateHardwareDevice(type, vendor_id, device_id, vendor_name, metadata, out)
    "CreateHardwareDevice": _e(16, STATUS, C.c_int, C.c_uint32, C.c_uint32, C.c_char_p, vp, PVP,
                               since=24),
    # CreateProfilingEvent(category, pid, tid, name, ts_us, dur_us, keys, values, n_args, out)
    "CreateProfilingEvent": _e(65, STATUS, C.c_int, C.c_int32, C.c_int32, C.c_char_p, C.c_int64,
                               C.c_int64, PSTR, PSTR, sz, PVP, since=25),
    "ReleaseProfilingEvent": _e(66, None, vp, since=25),
    "ProfilingEventsContainer_AddEvents": _e(72, STATUS, vp, PVP, sz, since=25),
}


MODEL_EDITOR_API: dict[str, Entry] = {
    # CreateNode(op, domain, name, inputs, n_inputs, outputs, n_outputs, attrs, n_attrs, out)
    "CreateNode": _e(6, STATUS, C.c_char_p, C.c_char_p, C.c_char_p, PSTR, sz, PSTR, sz, PVP, sz, PVP),
}


class OrtCallError(LitenpuError, RuntimeError):
    """An onnxruntime C API call returned an error status."""

    def __init__(self, function: str, code: int, message: str):
        super().__init__(f"{function} failed (OrtErrorCode {code}): {message}")
        self.function, self.code, self.message = function, code, message


class FunctionTable:
    """A function-pointer table (OrtApi, OrtEpApi) called by member name.

    Functions returning OrtStatus* raise OrtCallError on a non-NULL status (and release it);
    `raw(name)` gives the unchecked ctypes function.
    """

    def __init__(self, title: str, address: int, entries: dict[str, Entry], version: int,
                 api: FunctionTable | None = None):
        if not address:
            raise LitenpuError(f"onnxruntime returned no {title} table for API version {version}")
        self._title, self._entries, self._version = title, entries, version
        self._slots = C.cast(address, PVP)
        self._api = api or self
        self._raw: dict[str, Callable] = {}

    def available(self, name: str) -> bool:
        """True if the negotiated API version has this entry."""
        return self._entries[name].since <= self._version

    def pointer(self, name: str) -> int:
        """The entry's function address (for C code that calls it directly)."""
        return self._slots[self._entry(name).slot]

    def _entry(self, name: str) -> Entry:
        entry = self._entries[name]
        if entry.since > self._version:
            raise LitenpuError(
                f"{self._title}::{name} needs onnxruntime API version {entry.since}; "
                f"this onnxruntime offers {self._version}"
            )
        return entry

    def raw(self, name: str) -> Callable:
        fn = self._raw.get(name)
        if fn is None:
            entry = self._entry(name)
            restype = vp if entry.restype is STATUS else entry.restype
            fn = C.CFUNCTYPE(restype, *entry.argtypes)(self._slots[entry.slot])
            self._raw[name] = fn
        return fn

    def __getattr__(self, name: str) -> Callable:
        """First use of an entry: build its caller and store it as an attribute (hot paths)."""
        if name.startswith("_") or name not in self._entries:
            raise AttributeError(f"{self._title} has no entry {name!r} in provider.ort.abi")
        fn = self.raw(name)
        if self._entries[name].restype is STATUS:
            fn = _checked(name, fn, self._api)
        setattr(self, name, fn)
        return fn


def _checked(name: str, fn: Callable, api: FunctionTable) -> Callable:
    def call(*args):
        status = fn(*args)
        if status:
            code = api.raw("GetErrorCode")(status)
            message = api.raw("GetErrorMessage")(status).decode(errors="replace")
            api.raw("ReleaseStatus")(status)
            raise OrtCallError(name, code, message)

    call.__name__ = name
    return call


class _ApiBase(C.Structure):
    _fields_ = [("GetApi", C.CFUNCTYPE(vp, C.c_uint32)), ("GetVersionString", C.CFUNCTYPE(C.c_char_p))]


def runtime_api_version(version_string: str) -> int:
    """ORT_API_VERSION of an onnxruntime release: its minor version ("1.23.2" -> 23)."""
    m = re.match(r"1\.(\d+)", version_string)
    if m is None:
        raise LitenpuError(f"cannot read an API version from onnxruntime version {version_string!r}")
    return int(m.group(1))


class Ort:
    """The OrtApi and OrtEpApi tables of the running onnxruntime, at the negotiated version."""

    def __init__(self, api_base_address: int):
        base = _ApiBase.from_address(api_base_address)
        self.version_string: str = base.GetVersionString().decode()
        runtime = self.runtime_version = runtime_api_version(self.version_string)
        if runtime < MIN_API_VERSION:
            raise LitenpuError(
                f"onnxruntime {self.version_string} is too old for the NPU execution provider "
                f"(needs API version {MIN_API_VERSION}, i.e. onnxruntime >= 1.{MIN_API_VERSION})"
            )
        self.api_version: int = min(runtime, MAX_API_VERSION)
        self.api = FunctionTable("OrtApi", base.GetApi(self.api_version), ORT_API, self.api_version)
        self.ep = FunctionTable("OrtEpApi", self.api.GetEpApi(), EP_API, self.api_version, self.api)
        self._editor: FunctionTable | None = None

    @property
    def editor(self) -> FunctionTable:
        """The OrtModelEditorApi table (EPContext nodes are built with it)."""
        if self._editor is None:
            self._editor = FunctionTable("OrtModelEditorApi", self.api.GetModelEditorApi(),
                                         MODEL_EDITOR_API, self.api_version, self.api)
        return self._editor

    def status(self, code: int, message: str) -> int:
        """A new OrtStatus* (owned by the caller, i.e. by onnxruntime once returned)."""
        return self.api.raw("CreateStatus")(code, message.encode(errors="replace"))

    # --- small readers used by every room of provider.ort ---------------------------------
    def string(self, getter: str, obj: int) -> str:
        """Call a `(obj, const char** out)` getter and decode the result."""
        out = C.c_char_p()
        getattr(self.api, getter)(obj, C.byref(out))
        return (out.value or b"").decode()

    def array(self, count_fn: str, get_fn: str, obj: int) -> list[int]:
        """Call a count/get pair returning an array of pointers (NULL entries kept as 0)."""
        n = sz()
        getattr(self.api, count_fn)(obj, C.byref(n))
        items = (vp * n.value)()
        if n.value:
            getattr(self.api, get_fn)(obj, items, n.value)
        return [p or 0 for p in items]

    def tensor_info(self, info: int, symbols: bool = True) -> tuple[int, tuple[int, ...], tuple[str, ...]]:
        """(element type, dims, symbolic dim names unless `symbols` is False) of an
        OrtTensorTypeAndShapeInfo."""
        et, n = C.c_int(), sz()
        self.api.GetTensorElementType(info, C.byref(et))
        self.api.GetDimensionsCount(info, C.byref(n))
        dims = (C.c_int64 * n.value)()
        syms = (C.c_char_p * n.value)()
        if n.value:
            self.api.GetDimensions(info, dims, n.value)
            if symbols:
                self.api.GetSymbolicDimensions(info, syms, n.value)
        return et.value, tuple(dims), tuple((s or b"").decode() for s in syms)

    def value_type(self, value: int) -> tuple[np.dtype, tuple[int, ...]]:
        """(numpy dtype, shape) of a tensor OrtValue."""
        info = vp()
        self.api.GetTensorTypeAndShape(value, C.byref(info))
        try:
            et, dims, _ = self.tensor_info(info, symbols=False)
        finally:
            self.api.ReleaseTensorTypeAndShapeInfo(info)
        if et not in ELEMENT_TO_NUMPY:
            raise LitenpuError(f"tensor element type {et} has no numpy equivalent on the NPU")
        return ELEMENT_TO_NUMPY[et], dims

    def value_address(self, value: int) -> int:
        """Data address of a tensor OrtValue (0 for an empty tensor)."""
        p = vp()
        self.api.GetTensorMutableData(value, C.byref(p))
        return p.value or 0

    def value_array(self, value: int) -> np.ndarray:
        """Zero-copy numpy view of a host-addressable tensor OrtValue (valid while it lives)."""
        dtype, shape = self.value_type(value)
        return array_at(self.value_address(value), dtype, shape)


def array_at(address: int, dtype: np.dtype, shape: tuple[int, ...], owner: object = None, *,
             readonly: bool = False) -> np.ndarray:
    """numpy array over `address` without copying; `owner` is kept alive by the array (its
    carrier is a ctypes array, which can hold it; without one, native.view_at's memoryview)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if owner is None or nbytes == 0 or not address:
        return view_at(address, dtype, shape, readonly=readonly)
    buf = (C.c_char * nbytes).from_address(address)
    buf._litenpu_owner = owner  # the array's base chain keeps `owner` alive
    array = np.frombuffer(buf, dtype=dtype).reshape(shape)
    if readonly:
        array.flags.writeable = False
    return array


# --------------------------------------------------------------------------------------------
# Structs an execution provider implements: version field, then function pointers in header
# order. We describe them as of MAX_API_VERSION; onnxruntime reads only the members that exist
# at the `ort_version_supported` we put in them (the negotiated version). The allocator, the
# data transfer and the data plane's kernels are C structs (csrc/), not described here.
# --------------------------------------------------------------------------------------------
def _implemented(name: str, version_field: str, members: str) -> type[C.Structure]:
    fields = [(version_field, C.c_uint32)] + [(m, vp) for m in members.split()]
    return type(name, (C.Structure,), {"_fields_": fields})


OrtEpFactory = _implemented(
    "OrtEpFactory", "ort_version_supported",
    "GetName GetVendor GetSupportedDevices CreateEp ReleaseEp GetVendorId GetVersion "
    "ValidateCompiledModelCompatibilityInfo CreateAllocator ReleaseAllocator CreateDataTransfer "
    "IsStreamAware CreateSyncStreamForDevice GetHardwareDeviceIncompatibilityDetails "
    "CreateExternalResourceImporterForDevice GetNumCustomOpDomains GetCustomOpDomains "
    "InitGraphicsInterop DeinitGraphicsInterop SelectBestModelCandidate",
)
OrtEp = _implemented(
    "OrtEp", "ort_version_supported",
    "GetName GetCapability Compile ReleaseNodeComputeInfos GetPreferredDataLayout "
    "ShouldConvertDataLayoutForOp SetDynamicOptions OnRunStart OnRunEnd CreateAllocator "
    "CreateSyncStreamForDevice GetCompiledModelCompatibilityInfo GetKernelRegistry "
    "IsConcurrentRunSupported Sync CreateProfiler IsGraphCaptureEnabled IsGraphCaptured "
    "ReplayGraph GetGraphCaptureNodeAssignmentPolicy GetAvailableResource "
    "OnSessionInitializationEnd GetDefaultMemoryDevice ReleaseCapturedGraph GetWeightlessSupport",
)
IS_CONCURRENT_RUN_SUPPORTED_SINCE = 24  # OrtEp.IsConcurrentRunSupported: onnxruntime 1.24
OrtNodeComputeInfo = _implemented(
    "OrtNodeComputeInfo", "ort_version_supported", "CreateState Compute ReleaseState"
)
OrtEpProfilerImpl = _implemented(  # since API 25
    "OrtEpProfilerImpl", "ort_version_supported",
    "Release StartProfiling StartEvent StopEvent EndProfiling"
)


class OrtNodeFusionOptions(C.Structure):
    _fields_ = [("ort_version_supported", C.c_uint32), ("drop_constant_initializers", C.c_bool)]


# C prototypes of the callbacks we implement (OrtStatus* is a plain pointer here).
P_STRING = C.CFUNCTYPE(vp, vp)  # const char* f(const T* this)
P_UINT32 = C.CFUNCTYPE(C.c_uint32, vp)
P_BOOL = C.CFUNCTYPE(C.c_bool, vp)
P_CREATE_EP_FACTORIES = C.CFUNCTYPE(vp, C.c_char_p, vp, vp, PVP, sz, PSZ)
P_RELEASE_EP_FACTORY = C.CFUNCTYPE(vp, vp)
P_GET_SUPPORTED_DEVICES = C.CFUNCTYPE(vp, vp, PVP, sz, PVP, sz, PSZ)
P_CREATE_EP = C.CFUNCTYPE(vp, vp, PVP, PVP, sz, vp, vp, PVP)
P_RELEASE_EP = C.CFUNCTYPE(None, vp, vp)
P_FACTORY_CREATE_ALLOCATOR = C.CFUNCTYPE(vp, vp, vp, vp, PVP)
P_FACTORY_RELEASE_ALLOCATOR = C.CFUNCTYPE(None, vp, vp)
P_CREATE_DATA_TRANSFER = C.CFUNCTYPE(vp, vp, PVP)
P_GET_CAPABILITY = C.CFUNCTYPE(vp, vp, vp, vp)
P_COMPILE = C.CFUNCTYPE(vp, vp, PVP, PVP, sz, PVP, PVP)
P_RELEASE_NODE_COMPUTE_INFOS = C.CFUNCTYPE(None, vp, PVP, sz)
P_CREATE_STATE = C.CFUNCTYPE(vp, vp, vp, PVP)
P_COMPUTE = C.CFUNCTYPE(vp, vp, vp, vp)
P_RELEASE_STATE = C.CFUNCTYPE(None, vp, vp)
P_VALIDATE_COMPATIBILITY = C.CFUNCTYPE(vp, vp, PVP, sz, C.c_char_p, C.POINTER(C.c_int))
P_COMPATIBILITY_INFO = C.CFUNCTYPE(vp, vp, vp)  # const char* f(OrtEp*, const OrtGraph*)
P_SET_DYNAMIC_OPTIONS = C.CFUNCTYPE(vp, vp, PSTR, PSTR, sz)
P_ON_RUN_START = C.CFUNCTYPE(vp, vp, vp)
P_ON_RUN_END = C.CFUNCTYPE(vp, vp, vp, C.c_bool)
P_CREATE_PROFILER = C.CFUNCTYPE(vp, vp, PVP)
P_PROFILER_RELEASE = C.CFUNCTYPE(None, vp)
P_START_PROFILING = C.CFUNCTYPE(vp, vp, C.c_int64)  # offset (ns) since onnxruntime's start
P_END_PROFILING = C.CFUNCTYPE(vp, vp, vp)
P_ALLOC = C.CFUNCTYPE(vp, vp, sz)
P_FREE = C.CFUNCTYPE(None, vp, vp)
