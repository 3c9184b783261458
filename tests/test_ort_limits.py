"""The EP at its limits: errors typed across onnxruntime, device memory exhausted and given
back, per-shape state bounded, nothing printed by onnxruntime's fallback or at exit."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from ort_models import CNN, MLP, NPU, reference

import provider
from provider.errors import BindingError, InvalidModelError
from provider.npu.memory import default_pool
from provider.options import InvalidOptionError
from provider.session import InferenceSession


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def cnn_feeds(n: int, h: int, w: int) -> dict:
    return {"x": np.random.default_rng(h * 1000 + w).standard_normal((n, 3, h, w), np.float32)}


def in_use() -> int:
    gc.collect()
    return default_pool().stats().in_use


# ---- errors typed across onnxruntime ----------------------------------------------------------


def test_bound_output_of_another_shape_is_a_binding_error():
    sess = InferenceSession(MLP, providers=NPU)
    binding = sess.io_binding()
    x = provider.empty((3, 3))
    provider.view(x)[...] = 1
    binding.bind_ortvalue_input("x", x)
    binding.bind_cpu_input("b", np.ones(3, np.float32))
    binding._iobinding.bind_ortvalue_output("y", provider.empty((2, 4))._ortvalue)  # unchecked
    with pytest.raises(BindingError, match=r"output 'y': this run computes shape \[3, 4\]"):
        sess.run_with_iobinding(binding)


def test_one_buffer_bound_as_input_and_output_is_a_binding_error():
    model = onnx.load_from_string(MLP)
    sess = InferenceSession(model.SerializeToString(), providers=NPU)
    shared = provider.empty((4, 4))
    provider.view(shared)[...] = 1
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", provider.ortvalue_from_numpy(np.ones((4, 3), np.float32)))
    binding.bind_cpu_input("b", np.ones(3, np.float32))
    binding.bind_ortvalue_output("y", shared)
    sess.run_with_iobinding(binding)  # distinct buffers: fine
    np.testing.assert_allclose(provider.view(shared), reference(
        MLP, {"x": np.ones((4, 3), np.float32), "b": np.ones(3, np.float32)})[0], rtol=1e-5)


def test_malformed_model_is_typed_and_prints_no_fallback_banner(capfd):
    model = onnx.load_from_string(MLP)
    model.graph.node[2].input[1] = "no_such_tensor"  # dangling input
    with pytest.raises(InvalidModelError, match="onnxruntime cannot load it"):
        InferenceSession(model.SerializeToString(), providers=NPU)
    with pytest.raises(InvalidModelError):
        InferenceSession(b"not a model", providers=NPU)
    out, err = capfd.readouterr()
    assert "Falling back" not in out + err and "EP Error" not in out + err


def test_a_refusal_quoting_bytes_that_are_not_utf8_is_typed():
    """onnxruntime's message quotes the model's attribute, which is not UTF-8: its binding
    raises UnicodeDecodeError instead of its error (1.23: a RuntimeException without its
    message); ours is the InvalidModelError, readable where the message survived."""
    from onnx import helper

    node = helper.make_node("GRU", ["x", "w", "r"], ["y"], hidden_size=2, direction=b"\xff\xfe")
    f = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [f("x", 1, [2, 1, 3])], [f("y", 1, None)], [
        onnx.numpy_helper.from_array(np.ones((1, 6, 3), np.float32), "w"),
        onnx.numpy_helper.from_array(np.ones((1, 6, 2), np.float32), "r")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8  # what every supported onnxruntime (1.23 included) loads
    with pytest.raises(InvalidModelError, match="cannot load it: ") as refused:
        InferenceSession(model.SerializeToString(), providers=NPU)
    if isinstance(refused.value.__cause__, UnicodeDecodeError):
        assert "Invalid 'direction' argument" in str(refused.value)


def test_a_failed_creation_is_never_retried_on_cpu(monkeypatch, capfd):
    """onnxruntime retries a session whose creation raised RuntimeError on the CPU alone,
    printing an "EP Error ... Falling back" banner; ours must fail with the NPU's error."""
    import onnxruntime as ort

    def fail(self, providers, *args, **kwargs):
        raise RuntimeError("NPU side failed")

    monkeypatch.setattr(ort.InferenceSession, "_create_inference_session", fail)
    with pytest.raises(RuntimeError, match="NPU side failed"):
        InferenceSession(MLP, providers=NPU)
    out, err = capfd.readouterr()
    assert "Falling back" not in out + err and "EP Error" not in out + err


def test_missing_model_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        InferenceSession(str(tmp_path / "absent.onnx"), providers=NPU)


# ---- device memory: the option, exhaustion, recovery ------------------------------------------


def test_device_memory_bytes_option_is_validated_and_grows_the_pool():
    for bad in ("12", "lots", "1.5G", "-1"):
        with pytest.raises(InvalidOptionError, match="device_memory_bytes"):
            InferenceSession(MLP, providers=[("NPUExecutionProvider",
                                              {"device_memory_bytes": bad}), "CPUExecutionProvider"])
    pool = default_pool()
    bigger = pool.capacity + (64 << 20)
    InferenceSession(MLP, providers=[("NPUExecutionProvider", {"device_memory_bytes": str(bigger)}),
                                     "CPUExecutionProvider"])
    assert pool.capacity == bigger and default_pool() is pool
    InferenceSession(MLP, providers=[("NPUExecutionProvider", {"device_memory_bytes": "16M"}),
                                     "CPUExecutionProvider"])  # smaller: the pool stays
    assert pool.capacity == bigger


EXHAUSTION = textwrap.dedent("""
    import gc, json, sys
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    import provider
    from provider.errors import DeviceMemoryError
    from provider.npu.memory import default_pool
    sys.path.insert(0, sys.argv[1])
    from ort_models import CNN, make_model, f32, reference
    provider.register()
    opts = [("NPUExecutionProvider", {"device_memory_bytes": "8M"}), "CPUExecutionProvider"]
    result = {}
    big = np.ones((2048, 1536), np.float32)  # 12 MiB of weights: cannot fit 8 MiB
    heavy = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [f32("x", [1, 2048])],
                       [f32("y", [1, 1536])], [numpy_helper.from_array(big, "w")])
    try:
        provider.InferenceSession(heavy, providers=opts)
    except DeviceMemoryError as e:
        result["compile"] = [e.requested, e.available, str(e)]
    gc.collect()
    result["after_compile"] = default_pool().stats().in_use
    sess = provider.InferenceSession(CNN, providers=opts)
    small = {"x": np.ones((1, 3, 16, 16), np.float32)}
    try:
        sess.run(None, {"x": np.ones((1, 3, 512, 512), np.float32)})  # 16 MiB tensors
    except DeviceMemoryError as e:
        result["run"] = [e.requested, e.available, str(e)]
    out = sess.run(None, small)[0]
    result["small_ok"] = bool(np.allclose(out, reference(CNN, small)[0], atol=1e-4, rtol=1e-3))
    del sess
    gc.collect()
    result["after_del"] = default_pool().stats().in_use
    print(json.dumps(result))
""")


def test_out_of_device_memory_is_typed_and_leaves_the_pool_usable(tmp_path):
    """An 8 MiB device: weights that cannot fit fail the session with DeviceMemoryError, a
    shape whose arena cannot fit fails that run; the pool serves the next run and is back
    to empty once the sessions are gone."""
    from pathlib import Path
    proc = subprocess.run([sys.executable, "-c", EXHAUSTION, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    for when in ("compile", "run"):
        requested, available, message = result[when]
        assert requested > available > 0 and "requested" in message, (when, message)
    assert result["after_compile"] == 0 and result["after_del"] == 0
    assert result["small_ok"]


def _huge(op: str) -> onnx.ModelProto:
    """x (length n) -> a tensor of n * 2**40 elements: a constant (ConstantOfShape, folded
    when the shape is known) or x's sum expanded (a step), then summed."""
    from onnx import TensorProto, helper, numpy_helper

    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    big = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mul", ["s", "big"], ["n"])]
    make = ([helper.make_node("ConstantOfShape", ["n"], ["z"], value=value)] if op == "constant"
            else [helper.make_node("ReduceSum", ["x"], ["r"], keepdims=1),  # shape [1]
                  helper.make_node("Expand", ["r", "n"], ["z"])])
    graph = helper.make_graph(
        [*big, *make, helper.make_node("ReduceSum", ["z"], ["y"], keepdims=0)], op,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array([1 << 40], np.int64), "big")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("op", ["constant", "expanded"])
def test_a_tensor_no_memory_can_hold_is_a_device_memory_error(op):
    """A shape computed into a size beyond the machine's memory (the long fuzz's mutated
    dims found these as untyped EPFail: numpy's MemoryError while folding a constant, or its
    'array is too big'): DeviceMemoryError naming the node, before anything is allocated
    where the size is known; the session runs the next shape."""
    from provider.errors import DeviceMemoryError

    sess = InferenceSession(_huge(op).SerializeToString(), providers=NPU)
    with pytest.raises(DeviceMemoryError, match="node .*(ConstantOfShape|BroadcastTo)"):
        sess.run(None, {"x": np.ones(3, np.float32)})
    assert sess.run(None, {"x": np.ones(0, np.float32)})[0] == 0.0


# ---- per-shape state is bounded -----------------------------------------------------------------


def test_thirty_shapes_stay_within_max_shapes_and_one_arena():
    before = in_use()
    sess = InferenceSession(CNN, providers=[("NPUExecutionProvider", {"max_shapes": "4"}),
                                            "CPUExecutionProvider"])
    shapes = [(1 + i % 2, 8 + 2 * i, 12 + i) for i in range(30)]
    for n, h, w in shapes:
        feeds = cnn_feeds(n, h, w)
        np.testing.assert_allclose(sess.run(None, feeds)[0], reference(CNN, feeds)[0],
                                   atol=1e-4, rtol=1e-3)
        info = sess.memory_info()
        (kernel,) = [k for ep in sess._npu_eps for k in ep.kernels.values()]
        live = [c.executor.program for c in kernel._programs.values()]
        assert len(live) <= 4
        # one arena for the partition, as big as the largest live shape's
        assert info.device_internal == max(-(-p.internal_bytes // 64) * 64 for p in live)
        # the shapes' Programs hold the same weights: stored once
        assert info.device_weights <= -(-live[0].weight_bytes // 64) * 64 + 64 * 8
    del sess, kernel, live
    assert in_use() == before


def test_clones_on_two_batch_sizes_in_threads():
    from threads import run_threads
    sess = InferenceSession(CNN, providers=[("NPUExecutionProvider", {"max_shapes": "1"}),
                                            "CPUExecutionProvider"])
    clones = [sess, sess.clone()]
    feeds = {n: cnn_feeds(n, 20, 24) for n in (1, 3)}
    expected = {n: reference(CNN, f)[0] for n, f in feeds.items()}

    def work(i: int) -> None:
        for k in range(40):
            n = (1, 3)[(i + k) % 2]
            np.testing.assert_allclose(clones[i % 2].run(None, feeds[n])[0], expected[n],
                                       atol=1e-4, rtol=1e-3)

    run_threads(work, 4)


# ---- nothing printed at interpreter exit ----------------------------------------------------------


AT_EXIT = textwrap.dedent("""
    import sys
    import numpy as np
    import provider
    sys.path.insert(0, sys.argv[1])
    from ort_models import CNN, MLP
    provider.register()
    sess = provider.InferenceSession(CNN, providers=["NPUExecutionProvider", "CPUExecutionProvider"])
    clone = sess.clone()
    x = provider.empty((1, 3, 16, 16))
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_npu_output("y")
    sess.run_with_iobinding(binding)
    outputs = binding.get_outputs()
    try:
        sess.run(None, {"x": np.zeros((2, 3), np.float32)})
    except Exception:
        pass
    print("done")
""")


# The user's logging handler (a class of __main__) on litenpu's logger ties the torn-down
# modules' cycles to __main__'s globals: the sessions those hold are then freed in the
# collection at exit that clears functions, onnxruntime calls our callbacks from there, and
# they must still be whole (they were not: a segmentation fault, every time).
USER_HANDLER = textwrap.dedent("""
    import logging

    class Collect(logging.Handler):
        def emit(self, record):
            pass

    logging.getLogger("litenpu").addHandler(Collect())
""")


@pytest.mark.parametrize("script", [AT_EXIT, USER_HANDLER + AT_EXIT], ids=["plain", "collected"])
def test_interpreter_exit_prints_nothing(tmp_path, script):
    """(cwd elsewhere: `python -c` would import the source tree, not the installed package)"""
    from pathlib import Path
    proc = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    assert proc.stderr == ""
