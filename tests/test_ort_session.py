"""End to end through onnxruntime with the registered NPU EP: results, placement, copies, errors."""

import gc
import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from ort_models import MLP, NPU, STATIC, f32, make_model, npu_session_options, reference
from threads import run_threads

import provider
from provider import session as session_module
from provider.errors import BindingError
from provider.options import InvalidOptionError
from provider.ort import capability, compute
from provider.session import InferenceSession

RNG = np.random.default_rng(0)


def _feeds():
    return {"x": RNG.standard_normal((5, 3)).astype(np.float32),
            "b": RNG.standard_normal(3).astype(np.float32)}


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def test_results_match_cpu_and_nodes_run_on_the_npu():
    sess = InferenceSession(MLP, providers=NPU)
    feeds = _feeds()
    (y,) = sess.run(None, feeds)
    np.testing.assert_allclose(y, reference(MLP, feeds)[0], atol=1e-4, rtol=1e-3)
    placed = {p.name: p.device for p in sess.partition()}
    assert placed == dict.fromkeys(["add", "relu", "matmul", "scale"], "NPU")


def test_plain_onnxruntime_selects_the_npu_through_ep_devices():
    sess = ort.InferenceSession(STATIC, npu_session_options())
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    before = compute_calls()
    (y,) = sess.run(None, {"x": x})
    assert compute_calls() == before + 1
    np.testing.assert_allclose(y, np.maximum(x, 0) + 1, rtol=1e-6)


def compute_calls() -> int:
    return sum(k.calls for k in list(compute._KERNELS.values()))


def test_disabled_op_stays_on_cpu_with_its_reason():
    sess = InferenceSession(MLP, providers=NPU, provider_options=[{"disable_ops": "Relu"}, {}])
    feeds = _feeds()
    np.testing.assert_allclose(sess.run(None, feeds)[0], reference(MLP, feeds)[0],
                               atol=1e-4, rtol=1e-3)
    placed = {p.name: p for p in sess.partition()}
    assert placed["relu"].device == "CPU" and "disable_ops" in placed["relu"].reason
    assert placed["matmul"].device == "NPU"


def test_min_partition_nodes_keeps_small_partitions_on_cpu():
    sess = InferenceSession(STATIC, providers=NPU, provider_options=[{"min_partition_nodes": 3}, {}])
    assert {p.device for p in sess.partition()} == {"CPU"}
    assert "min_partition_nodes" in sess.partition()[0].reason


def test_dynamic_batch_compiles_one_program_per_shape():
    sess = InferenceSession(MLP, providers=NPU)
    for batch in (1, 4, 1):
        feeds = {"x": RNG.standard_normal((batch, 3)).astype(np.float32),
                 "b": RNG.standard_normal(3).astype(np.float32)}
        np.testing.assert_allclose(sess.run(None, feeds)[0], reference(MLP, feeds)[0],
                                   atol=1e-4, rtol=1e-3)


def test_numpy_feeds_copy_exactly_the_io_bytes():
    sess = InferenceSession(STATIC, providers=NPU)
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    sess.run(None, {"x": x})
    before = sess.copy_stats()
    sess.run(None, {"x": x})
    delta = sess.copy_stats() - before
    assert (delta.bytes_to_device, delta.bytes_to_host) == (x.nbytes, x.nbytes)


def test_npu_bound_inputs_and_outputs_copy_nothing():
    sess = InferenceSession(STATIC, providers=NPU)
    x = provider.empty((2, 8), "float32")
    provider.view(x)[...] = RNG.standard_normal((2, 8))
    y = provider.empty((2, 8), "float32")
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_ortvalue_output("y", y)
    sess.run_with_iobinding(binding)
    before = sess.copy_stats()
    sess.run_with_iobinding(binding)
    assert (sess.copy_stats() - before).total_bytes == 0
    np.testing.assert_allclose(provider.view(y), np.maximum(provider.view(x), 0) + 1, rtol=1e-6)


def test_two_sessions_chained_on_the_npu_copy_nothing():
    first, second = InferenceSession(STATIC, providers=NPU), InferenceSession(STATIC, providers=NPU)
    x = provider.ortvalue_from_numpy(RNG.standard_normal((2, 8)).astype(np.float32))
    a, b = first.io_binding(), second.io_binding()
    a.bind_ortvalue_input("x", x)
    a.bind_npu_output("y")
    before = provider.copy_stats()
    first.run_with_iobinding(a)
    middle = a.get_outputs()[0]
    assert middle.device_name().lower() == "npu"
    b.bind_ortvalue_input("x", middle)
    out = provider.empty((2, 8), "float32")
    b.bind_ortvalue_output("y", out)
    second.run_with_iobinding(b)
    assert (provider.copy_stats() - before).total_bytes == 0
    expected = np.maximum(np.maximum(provider.view(x), 0) + 1, 0) + 1
    np.testing.assert_allclose(provider.view(out), expected, rtol=1e-6)


def test_bind_output_helper_allocates_in_npu_memory():
    sess = ort.InferenceSession(STATIC, npu_session_options())
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", provider.ortvalue_from_numpy(np.ones((2, 8), np.float32)))
    provider.bind_output(binding, "y")
    sess.run_with_iobinding(binding)
    out = binding.get_outputs()[0]
    assert out.device_name().lower() == "npu"
    np.testing.assert_allclose(provider.view(out), 2.0)


def test_cpu_to_npu_edge_is_uploaded_and_counted():
    # Relu runs on CPU (disabled); Add on the NPU receives it in CPU memory and uploads it.
    sess = InferenceSession(STATIC, providers=NPU, provider_options=[{"disable_ops": "Relu"}, {}])
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    sess.run(None, {"x": x})
    before = sess.copy_stats()
    (y,) = sess.run(None, {"x": x})
    delta = sess.copy_stats() - before
    np.testing.assert_allclose(y, np.maximum(x, 0) + 1, rtol=1e-6)
    assert delta.bytes_to_device == x.nbytes and delta.bytes_to_host == y.nbytes


def test_eight_threads_share_one_session():
    sess = InferenceSession(MLP, providers=NPU)
    cases = [_feeds() for _ in range(8)]
    expected = [reference(MLP, f)[0] for f in cases]

    def worker(i):
        for _ in range(100):
            np.testing.assert_allclose(sess.run(None, cases[i])[0], expected[i],
                                       atol=1e-4, rtol=1e-3)

    run_threads(worker)


def test_exception_in_compute_reaches_the_caller(monkeypatch):
    """The Python Compute (a shape's first run: MLP's batch is dynamic) fails: the error
    reaches the caller (failures of C runs: test_ort_data_plane)."""
    sess = InferenceSession(MLP, providers=NPU)

    def boom(self, context):
        raise RuntimeError("simulated NPU failure")

    monkeypatch.setattr(compute.FusedKernel, "compute", boom)
    with pytest.raises(Exception, match="simulated NPU failure") as info:
        sess.run(None, _feeds())
    assert "NodeComputeInfo.Compute" in str(info.value)
    assert type(info.value).__name__ == "EPFail"  # OrtErrorCode ORT_EP_FAIL
    # fed as lists (float64 in numpy's eyes), the failure is still the compute's
    with pytest.raises(Exception, match="simulated NPU failure") as info:
        sess.run(None, {k: v.tolist() for k, v in _feeds().items()})
    assert type(info.value).__name__ == "EPFail"


def test_bad_feeds_and_bindings_raise_binding_error():
    sess = InferenceSession(STATIC, providers=NPU)
    with pytest.raises(BindingError, match="input 'x'.*shape"):
        sess.run(None, {"x": np.zeros((3, 8), np.float32)})
    with pytest.raises(BindingError, match="input 'x'.*dtype"):
        sess.run(None, {"x": np.zeros((2, 8), np.float64)})
    with pytest.raises(BindingError, match=r"unknown input\(s\) \['z'\]") as info:
        sess.run(None, {"x": np.zeros((2, 8), np.float32), "z": np.zeros(1, np.float32)})
    assert info.value.__cause__ is not None  # onnxruntime refused the feeds first
    with pytest.raises(BindingError, match=r"missing input\(s\) \['x'\]"):
        sess.run(None, {})
    binding = sess.io_binding()
    with pytest.raises(BindingError, match="output 'y'.*too small"):
        binding.bind_ortvalue_output("y", provider.empty((2, 4), "float32"))
    with pytest.raises(BindingError, match="input 'x'"):
        binding.bind_ortvalue_input("x", provider.empty((2, 8), "int32"))


def test_feeds_onnxruntime_takes_are_not_checked_again(monkeypatch):
    """run() leaves the feed check to onnxruntime; its own check names what is wrong only
    after onnxruntime refused a run."""
    sess = InferenceSession(STATIC, providers=NPU)

    def forbidden(*args):
        raise AssertionError("feeds checked although onnxruntime took them")

    monkeypatch.setattr(session_module, "check_feeds", forbidden)
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x, 0) + 1, rtol=1e-6)
    # a list is converted by onnxruntime to the input's dtype, as plain onnxruntime does
    np.testing.assert_allclose(sess.run(None, {"x": x.tolist()})[0], np.maximum(x, 0) + 1,
                               rtol=1e-6)


def test_unknown_provider_option_is_a_clear_error():
    with pytest.raises(InvalidOptionError, match="valid options: min_partition_nodes"):
        InferenceSession(STATIC, providers=NPU, provider_options=[{"cache_size": "1"}, {}])


def test_unreadable_graph_stays_on_cpu_without_failing(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("simulated unreadable graph")

    monkeypatch.setattr(capability, "read_graph", broken)
    sess = InferenceSession(STATIC, providers=NPU)
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x, 0) + 1, rtol=1e-6)
    assert sess.partition() == []
    assert "simulated unreadable graph" in sess.partition_summary()


def test_reused_session_options_are_a_clear_error():
    options = ort.SessionOptions()
    InferenceSession(STATIC, options, providers=NPU)
    with pytest.raises(InvalidOptionError, match="fresh onnxruntime.SessionOptions"):
        InferenceSession(STATIC, options, providers=NPU)


def test_enable_fp16_runs_within_fp16_tolerance():
    sess = InferenceSession(MLP, providers=NPU, provider_options=[{"enable_fp16": "true"}, {}])
    feeds = _feeds()
    got, want = sess.run(None, feeds)[0], reference(MLP, feeds)[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=2e-2 * float(np.abs(want).max()), rtol=0)
    assert not np.array_equal(got, want)  # fp16 storage really was used


def test_npu_threads_limits_the_cores_and_keeps_results():
    feeds = _feeds()
    want = reference(MLP, feeds)[0]
    for value in ("1", 2, "0"):
        sess = InferenceSession(MLP, providers=NPU, provider_options=[{"npu_threads": value}, {}])
        np.testing.assert_allclose(sess.run(None, feeds)[0], want, atol=1e-4, rtol=1e-3)
    with pytest.raises(InvalidOptionError, match="npu_threads"):
        InferenceSession(MLP, providers=NPU, provider_options=[{"npu_threads": "-1"}, {}])


@pytest.mark.skipif(not hasattr(ort.InferenceSession, "get_provider_graph_assignment_info"),
                    reason="this onnxruntime (1.23) cannot report its node assignment")
def test_partition_report_agrees_with_onnxruntimes_assignment():
    options = ort.SessionOptions()
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = InferenceSession(MLP, options, providers=NPU, provider_options=[{"disable_ops": "Relu"}, {}])
    ran = {n.name: sub.ep_name for sub in sess.get_provider_graph_assignment_info() for n in sub.get_nodes()}
    ours = {p.name: "NPUExecutionProvider" if p.device == "NPU" else "CPUExecutionProvider"
            for p in sess.partition()}
    assert ours == ran


def test_run_async_computes_on_an_onnxruntime_thread():
    sess = InferenceSession(STATIC, providers=NPU)
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    done, result = threading.Event(), {}

    def callback(outputs, user_data, error):
        result["outputs"], result["error"] = outputs, error
        done.set()

    sess.run_async(None, {"x": x}, callback, None)
    assert done.wait(30)
    assert not result["error"]
    np.testing.assert_allclose(result["outputs"][0], np.maximum(x, 0) + 1, rtol=1e-6)


def test_control_flow_bodies_stay_on_cpu():
    then_graph = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [f32("t", [2])])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [f32("e", [2])])
    model = make_model(
        [helper.make_node("Relu", ["x0"], ["x"], name="relu"),
         helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_graph, else_branch=else_graph)],
        [f32("x0", [2]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [f32("y", [2])])
    sess = InferenceSession(model, providers=NPU)
    x = np.array([-1, 2], np.float32)
    assert sess.run(None, {"x0": x, "c": np.array(True)})[0].tolist() == [0, 2]
    assert sess.run(None, {"x0": x, "c": np.array(False)})[0].tolist() == [0, -2]
    placed = {p.name: p for p in sess.partition()}
    assert placed["relu"].device == "NPU"
    assert placed["if"].device == "CPU" and "subgraph" in placed["if"].reason


def test_closed_sessions_give_back_their_npu_memory():
    import gc

    from provider.npu.memory import default_pool

    gc.collect()
    before, kernels = default_pool().stats().in_use, len(compute._KERNELS)
    for _ in range(3):
        sess = InferenceSession(MLP, providers=NPU)
        sess.run(None, _feeds())
        assert len(compute._KERNELS) == kernels + 1
        del sess
    gc.collect()
    assert default_pool().stats().in_use == before
    assert len(compute._KERNELS) == kernels


def test_exception_in_compile_fails_the_session_with_its_message(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("simulated compiler crash")

    monkeypatch.setattr(compute.FusedKernel, "build", boom)
    with pytest.raises(Exception, match="simulated compiler crash") as info:
        InferenceSession(STATIC, providers=NPU)
    assert "Ep.Compile" in str(info.value)


def test_a_session_is_built_with_the_cyclic_gc_off_and_the_gc_restored(monkeypatch):
    """Building a session runs without cyclic garbage collections (they walked every object
    of the process); the collector is on again after, also when the creation failed, and
    stays off when the caller had turned it off."""
    seen = []
    real = compute.FusedKernel.build

    def build(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(compute.FusedKernel, "build", build)
    assert gc.isenabled()
    InferenceSession(STATIC, providers=NPU)
    assert seen == [False] and gc.isenabled()

    def boom(*args, **kwargs):
        raise RuntimeError("simulated compiler crash")

    monkeypatch.setattr(compute.FusedKernel, "build", boom)
    with pytest.raises(Exception, match="simulated compiler crash"):
        InferenceSession(STATIC, providers=NPU)
    assert gc.isenabled()

    monkeypatch.setattr(compute.FusedKernel, "build", build)
    gc.disable()
    try:
        InferenceSession(STATIC, providers=NPU)
        enabled_after = gc.isenabled()
    finally:
        gc.enable()
    assert seen == [False, False] and not enabled_after


def test_placement_is_logged_at_info_and_not_built_when_info_is_off(monkeypatch, caplog):
    built = []
    real = InferenceSession.partition_summary
    monkeypatch.setattr(InferenceSession, "partition_summary",
                        lambda self: built.append(1) or real(self))
    with caplog.at_level("INFO", logger="litenpu.ort"):
        InferenceSession(STATIC, providers=NPU)
    assert built and any("nodes on the NPU" in r.getMessage() for r in caplog.records)
    built.clear()
    caplog.clear()
    with caplog.at_level("WARNING", logger="litenpu.ort"):
        InferenceSession(STATIC, providers=NPU)
    assert not built and not any("nodes on the NPU" in r.getMessage() for r in caplog.records)
