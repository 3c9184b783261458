"""Registration, device listing, NPU memory in onnxruntime and counted copies."""

import gc

import numpy as np
import onnxruntime as ort
import pytest

import provider
from provider.errors import BindingError
from provider.npu.memory import default_pool
from provider.ort import EP_NAME, VENDOR, VENDOR_ID


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def test_register_is_idempotent_and_lists_our_device():
    """(Other code of this process may have registered the library by path too: each
    registration lists the device; test_ort_discovery counts them in a fresh process.)"""
    before = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    provider.register()
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    assert len(devices) == len(before) >= 1
    device = devices[0]
    assert device.ep_vendor == VENDOR
    assert device.ep_metadata["device"] == "sim"
    assert device.ep_metadata["litenpu.version"] == provider.__version__


def test_empty_is_allocated_in_the_npu_pool():
    pool = default_pool()
    gc.collect()  # earlier tests' sessions may still hold pool memory until collected
    before = pool.stats().in_use
    value = provider.empty((3, 5), "float32")
    assert value.device_name().lower() == "npu"
    assert value.shape() == [3, 5]
    assert pool.contains(value.data_ptr(), 60)
    assert pool.stats().in_use >= before + 60
    del value
    gc.collect()
    assert pool.stats().in_use == before


def test_view_shares_memory_with_the_device_buffer():
    value = provider.empty((4,), "int32")
    view = provider.view(value)
    view[...] = [1, 2, 3, 4]
    buffer = default_pool().find(value.data_ptr())
    assert buffer is not None
    assert buffer.view(np.int32, (4,)).tolist() == [1, 2, 3, 4]
    assert np.shares_memory(view, buffer.view(np.int32, (4,)))


def test_view_outlives_the_python_reference_to_its_value():
    view = provider.view(provider.ortvalue_from_numpy(np.arange(6, dtype=np.float32)))
    gc.collect()
    assert view.tolist() == [0, 1, 2, 3, 4, 5]


def test_numpy_is_a_counted_copy_to_host():
    value = provider.ortvalue_from_numpy(np.arange(10, dtype=np.float64))
    before = provider.copy_stats()
    host = value.numpy()
    delta = provider.copy_stats() - before
    assert delta.bytes_to_host == 80 and delta.bytes_to_device == 0
    assert host.tolist() == list(range(10))
    assert not np.shares_memory(host, provider.view(value))


def test_ortvalue_from_numpy_counts_the_upload():
    before = provider.copy_stats()
    provider.ortvalue_from_numpy(np.ones((2, 8), np.float16))
    assert (provider.copy_stats() - before).bytes_to_device == 32


def test_view_rejects_cpu_values():
    with pytest.raises(BindingError, match="NPU memory"):
        provider.view(ort.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32)))


def test_npu_device_carries_our_vendor_id():
    device = provider.npu_device()
    assert device.device_type() == ort.capi._pybind_state.OrtDevice.npu()
    assert device.device_vendor_id() == VENDOR_ID


def test_missing_library_is_a_clear_error(monkeypatch):
    import importlib.machinery

    from provider.errors import LitenpuError
    from provider.ort import discovery

    monkeypatch.setattr(importlib.machinery, "EXTENSION_SUFFIXES", [".nowhere.so"])
    with pytest.raises(LitenpuError, match="pip install -e"):
        discovery.get_library_path()


def test_unregister_then_register_again():
    provider.unregister()
    provider.register()
    assert provider.ep_devices()
    value = provider.ortvalue_from_numpy(np.arange(3, dtype=np.float32))
    assert provider.view(value).tolist() == [0, 1, 2]


def test_session_tensors_come_from_the_ep_allocator():
    from onnx import TensorProto, helper

    from provider.ort.factory import factory

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = provider.InferenceSession(model.SerializeToString(), providers=["NPUExecutionProvider"])

    def allocations():
        return sum(a.allocations for a in factory().allocators.values())

    before = allocations()
    (y,) = sess.run(None, {"x": np.array([-1, 2, -3, 4], np.float32)})
    assert y.tolist() == [0, 2, 0, 4]
    assert allocations() > before  # the fed copy and the output live in NPU memory
