"""OrtEpFactory: how onnxruntime discovers the NPU, creates the EP, its allocator and copier.

onnxruntime calls `CreateEpFactories` (here `_create_factories`) once when the library is
registered. The factory then offers one OrtEpDevice (the reference NPU "sim", on a virtual NPU
hardware device where onnxruntime allows one, else on the host CPU device) whose memory is
declared as NPU memory of type DEFAULT: onnxruntime routes NPU tensors through our
allocator (the NPU pool) and CPU<->NPU copies through our counted data transfer.
"""

from __future__ import annotations

import ctypes as C
import logging
import threading

import provider
from provider.ort import (
    CONFIG_PREFIX,
    DEVICE_NAME,
    EP_NAME,
    VENDOR,
    VENDOR_ID,
    abi,
    clib,
    compatibility,
)
from provider.ort.allocator import PoolAllocator
from provider.ort.callbacks import CString, address, keep, set_ort, status_callback, value_callback
from provider.ort.ep import NpuEp
from provider.ort.transfer import DataTransfer

log = logging.getLogger("litenpu.ort")

MEMORY_NAME = "NPU"


class EpFactory:
    """The one OrtEpFactory of this process (onnxruntime loads the library once)."""

    def __init__(self, ort: abi.Ort, registered_name: str):
        self.ort = ort
        self.registered_name = registered_name
        self._strings = {k: CString(v) for k, v in (
            ("name", EP_NAME), ("vendor", VENDOR), ("version", provider.__version__))}
        self.memory_info = self._create_memory_info()
        self.data_transfer = DataTransfer(ort.api_version, VENDOR_ID)
        self.eps: dict[int, object] = {}
        self.allocators: dict[int, object] = {}
        self._lock = threading.Lock()
        self._virtual_npu: int | None = None  # OrtHardwareDevice* we created (API 24)
        s = self.struct = abi.OrtEpFactory()
        s.ort_version_supported = ort.api_version
        s.GetName = address(_get_name)
        s.GetVendor = address(_get_vendor)
        s.GetSupportedDevices = address(_get_supported_devices)
        s.CreateEp = address(_create_ep)
        s.ReleaseEp = address(_release_ep)
        s.GetVendorId = address(_get_vendor_id)
        s.GetVersion = address(_get_version)
        s.ValidateCompiledModelCompatibilityInfo = address(_validate_compatibility)
        s.CreateAllocator = address(_create_allocator)
        s.ReleaseAllocator = address(_release_allocator)
        s.CreateDataTransfer = address(_create_data_transfer)
        s.IsStreamAware = address(_is_stream_aware)
        self.address: int = C.addressof(s)

    def _create_memory_info(self) -> int:
        out = abi.vp()
        self.ort.api.CreateMemoryInfo_V2(MEMORY_NAME.encode(), abi.MEM_DEVICE_NPU, VENDOR_ID, 0,
                                         abi.DEVICE_MEMORY_DEFAULT, 0, abi.DEVICE_ALLOCATOR,
                                         C.byref(out))
        return out.value  # lives as long as the process: onnxruntime keeps pointers to it

    def string(self, key: str) -> int:
        return self._strings[key].address

    def supported_devices(self, devices: list[int], out, max_out: int) -> int:
        """Offer the NPU once; returns how many OrtEpDevices were written to `out`.

        Where onnxruntime lets a plugin create hardware devices (API 24), the NPU is a virtual
        device of type NPU, so device-type filters and selection policies see an NPU; on older
        ones it is declared on the first CPU hardware device."""
        if max_out < 1:
            return 0
        hardware = self._hardware_device(devices)
        if hardware is None:
            log.warning("no CPU hardware device to attach the NPU to; not offering it")
            return 0
        api = self.ort.api
        metadata, options = abi.vp(), abi.vp()
        api.CreateKeyValuePairs(C.byref(metadata))
        api.CreateKeyValuePairs(C.byref(options))
        try:
            api.AddKeyValuePair(metadata, b"device", DEVICE_NAME.encode())
            api.AddKeyValuePair(metadata, b"litenpu.version", provider.__version__.encode())
            ep_device = abi.vp()
            self.ort.ep.CreateEpDevice(self.address, hardware, metadata, options, C.byref(ep_device))
        finally:
            api.ReleaseKeyValuePairs(metadata)
            api.ReleaseKeyValuePairs(options)
        self.ort.ep.EpDevice_AddAllocatorInfo(ep_device, self.memory_info)
        out[0] = ep_device.value
        return 1

    def _hardware_device(self, devices: list[int]) -> int | None:
        """The hardware device the NPU is offered on: our virtual NPU (created once and kept
        for the process: the OrtEpDevice points at it), else the first CPU."""
        if self.ort.ep.available("CreateHardwareDevice"):
            if self._virtual_npu is None:
                api, metadata, device = self.ort.api, abi.vp(), abi.vp()
                api.CreateKeyValuePairs(C.byref(metadata))
                try:
                    api.AddKeyValuePair(metadata, b"is_virtual", b"1")
                    api.AddKeyValuePair(metadata, b"device", DEVICE_NAME.encode())
                    self.ort.ep.CreateHardwareDevice(abi.HW_DEVICE_NPU, VENDOR_ID, 0,
                                                     VENDOR.encode(), metadata, C.byref(device))
                finally:
                    api.ReleaseKeyValuePairs(metadata)
                self._virtual_npu = device.value
            return self._virtual_npu
        api = self.ort.api
        return next((d for d in devices if api.HardwareDevice_Type(d) == abi.HW_DEVICE_CPU), None)

    def session_config(self, session_options: int) -> dict[str, str]:
        """All session config entries (provider options arrive as `ep.npuexecutionprovider.*`)."""
        api = self.ort.api
        pairs = abi.vp()
        api.GetSessionOptionsConfigEntries(session_options, C.byref(pairs))
        try:
            keys, values, n = abi.PSTR(), abi.PSTR(), abi.sz()
            api.GetKeyValuePairs(pairs, C.byref(keys), C.byref(values), C.byref(n))
            return {keys[i].decode(): values[i].decode() for i in range(n.value)}
        finally:
            api.ReleaseKeyValuePairs(pairs)

    def create_ep(self, session_options: int) -> int:
        config = self.session_config(session_options)
        options = {k[len(CONFIG_PREFIX):]: v for k, v in config.items() if k.startswith(CONFIG_PREFIX)}
        ep = NpuEp(self, options, config)
        with self._lock:
            self.eps[ep.address] = ep
        return ep.address

    def release_ep(self, ep_address: int) -> None:
        with self._lock:
            ep = self.eps.pop(ep_address, None)
        if ep is not None:
            ep.close()

    def create_allocator(self, memory_info: int) -> int:
        name = self.ort.string("MemoryInfoGetName", memory_info)
        if name != MEMORY_NAME:
            raise ValueError(f"no allocator for memory {name!r} (only {MEMORY_NAME!r})")
        allocator = PoolAllocator(self.ort.api_version, self.memory_info)
        with self._lock:
            self.allocators[allocator.address] = allocator
        return allocator.address

    def release_allocator(self, allocator_address: int) -> None:
        with self._lock:
            self.allocators.pop(allocator_address, None)


_FACTORY: EpFactory | None = None


def factory() -> EpFactory | None:
    """The process's factory, once onnxruntime has loaded the library."""
    return _FACTORY


def _f(this: int) -> EpFactory:
    if _FACTORY is None or this != _FACTORY.address:
        raise RuntimeError(f"unknown OrtEpFactory {this:#x}")
    return _FACTORY


@value_callback(abi.P_STRING, "Factory.GetName")
def _get_name(this):
    return _f(this).string("name")


@value_callback(abi.P_STRING, "Factory.GetVendor")
def _get_vendor(this):
    return _f(this).string("vendor")


@value_callback(abi.P_STRING, "Factory.GetVersion")
def _get_version(this):
    return _f(this).string("version")


@value_callback(abi.P_UINT32, "Factory.GetVendorId", default=0)
def _get_vendor_id(this):
    return VENDOR_ID


@value_callback(abi.P_BOOL, "Factory.IsStreamAware", default=False)
def _is_stream_aware(this):
    return False


@status_callback(abi.P_GET_SUPPORTED_DEVICES, "Factory.GetSupportedDevices")
def _get_supported_devices(this, devices, num_devices, ep_devices, max_ep_devices, num_out):
    num_out[0] = 0
    num_out[0] = _f(this).supported_devices([devices[i] for i in range(num_devices)],
                                            ep_devices, max_ep_devices)


@status_callback(abi.P_CREATE_EP, "Factory.CreateEp")
def _create_ep(this, devices, metadata, num_devices, session_options, logger, ep_out):
    ep_out[0] = _f(this).create_ep(session_options)


@value_callback(abi.P_RELEASE_EP, "Factory.ReleaseEp")
def _release_ep(this, ep):
    _f(this).release_ep(ep)


@status_callback(abi.P_VALIDATE_COMPATIBILITY, "Factory.ValidateCompiledModelCompatibilityInfo")
def _validate_compatibility(this, devices, num_devices, info, out):
    _f(this)
    verdict = compatibility.validate((info or b"").decode(errors="replace"))
    log.log(logging.INFO if verdict.status == compatibility.OPTIMAL else logging.WARNING,
            "compiled model compatibility: %s", verdict)
    out[0] = verdict.status


@status_callback(abi.P_FACTORY_CREATE_ALLOCATOR, "Factory.CreateAllocator")
def _create_allocator(this, memory_info, allocator_options, out):
    out[0] = _f(this).create_allocator(memory_info)


@value_callback(abi.P_FACTORY_RELEASE_ALLOCATOR, "Factory.ReleaseAllocator")
def _release_allocator(this, allocator):
    _f(this).release_allocator(allocator)


@status_callback(abi.P_CREATE_DATA_TRANSFER, "Factory.CreateDataTransfer")
def _create_data_transfer(this, out):
    out[0] = _f(this).data_transfer.address


# --- the library's entry points, reached through the C trampoline ---------------------------
def _create_factories(registered_name, api_base, logger, factories, max_factories, num_out):
    global _FACTORY
    num_out[0] = 0
    ort = None
    try:
        ort = abi.Ort(api_base)
        set_ort(ort)
        clib.install(ort)
        if _FACTORY is None:
            _FACTORY = keep(EpFactory(ort, registered_name.decode()))
        if max_factories < 1:
            raise ValueError("onnxruntime offered no room for a factory")
        factories[0] = _FACTORY.address
        num_out[0] = 1
        log.info("NPUExecutionProvider loaded by onnxruntime %s (API version %d)",
                 ort.version_string, ort.api_version)
        return None
    except BaseException as e:  # noqa: BLE001 - nothing may escape into C
        log.error("CreateEpFactories failed: %s", e, exc_info=e)
        if ort is None:
            return None  # without the API we cannot even build a status
        return ort.status(abi.ORT_FAIL, f"NPUExecutionProvider: CreateEpFactories: {e}")


def _release_factory(factory_address):
    """The factory, its memory info and transfer stay alive: tensors may outlive registration."""
    return None


CREATE_EP_FACTORIES = keep(abi.P_CREATE_EP_FACTORIES(_create_factories))
RELEASE_EP_FACTORY = keep(abi.P_RELEASE_EP_FACTORY(_release_factory))
