"""The data plane in C: runs that enter no Python, hold no GIL, overlap on one session, fail with
the Python path's typed errors, and give every byte back.

Needs the NPU's native library (the C Compute runs on it); without it the Python Compute runs
everything, as the last test checks in a child process with LITENPU_NATIVE=0.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper
from ort_models import CNN, NPU, STATIC, f32, make_model, reference
from quant_cases import build as build_quantized
from quant_cases import run_npu
from threads import run_threads

import provider
from provider.bench.process_memory import rss_bytes
from provider.errors import BindingError, LitenpuError
from provider.npu import native
from provider.npu.memory import default_pool
from provider.npu.ops import KERNELS
from provider.npu.ops.registry import NATIVE, Kernel
from provider.ort import abi, compute
from provider.session import InferenceSession

needs_native = pytest.mark.skipif(native.library() is None,
                                  reason="the NPU's native library is not loaded")

RNG = np.random.default_rng(17)
SINGLE = [("NPUExecutionProvider", {"npu_threads": "1"}), "CPUExecutionProvider"]
# y = softmax(relu(x)): both steps native
NATIVE_ONLY = make_model(
    [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
    [f32("x", [2, 8])], [f32("y", [2, 8])])
# y = triu(relu(x)) + 1: relu and add native, Trilu on its numpy kernel between them (the
# tests that use it take it off its native lowering: `numpy_trilu`)
MIXED = make_model(
    [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Trilu", ["r"], ["t"]),
     helper.make_node("Add", ["t", "one"], ["y"])],
    [f32("x", [2, 8])], [f32("y", [2, 8])],
    [numpy_helper.from_array(np.ones(8, np.float32), "one")])
# the ops of real models (native codes 11-16): layer norm, batched matmul, unary, binary, reduce
REAL_OPS = make_model(
    [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], axis=-1),
     helper.make_node("MatMul", ["n", "w"], ["m"]), helper.make_node("Erf", ["m"], ["s"]),
     helper.make_node("Mul", ["s", "x"], ["g"]),
     helper.make_node("ReduceMean", ["g"], ["y"], axes=[-1], keepdims=1)],
    [f32("x", [2, 4, 8])], [f32("y", [2, 4, 1])],
    [numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "gamma"),
     numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "beta"),
     numpy_helper.from_array(RNG.standard_normal((8, 8)).astype(np.float32), "w")])
NATIVE_ANY_BATCH = make_model(
    [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
    [f32("x", ["N", 8])], [f32("y", ["N", 8])])


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


@pytest.fixture
def numpy_trilu(monkeypatch):
    """Trilu without its native lowering: MIXED's numpy step between two native ones."""
    monkeypatch.delitem(NATIVE, "triangle")


def kernels(sess: InferenceSession) -> list[compute.FusedKernel]:
    return [k for ep in sess._npu_eps for k in ep.kernels.values()]


def cnn_feeds(seed: int, n: int = 1, h: int = 12, w: int = 10) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((n, 3, h, w)).astype(np.float32)}


def python_frames_during(fn) -> list[str]:
    """The litenpu modules whose Python functions ran on this thread while `fn` ran."""
    seen: list[str] = []
    root = str(Path(provider.__file__).parent)

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            seen.append(os.path.relpath(frame.f_code.co_filename, root))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


# ---- no Python ------------------------------------------------------------------------------


@needs_native
def test_runs_of_a_fully_native_program_enter_no_python():
    sess = InferenceSession(CNN, providers=NPU)
    feeds = cnn_feeds(0)
    expected = reference(CNN, feeds)[0]
    np.testing.assert_allclose(sess.run(None, feeds)[0], expected, atol=1e-4, rtol=1e-3)
    (kernel,) = kernels(sess)
    (compiled,) = kernel._programs.values()
    assert compiled.executor._inner.numpy_steps.calls == 0  # every step is native
    computes, runs = kernel.python_computes, kernel.native_runs
    results = []
    # plain run(): onnxruntime copies x to the NPU and y back (our C data transfer), allocates
    # both (our C allocator) and calls Compute (C): only the session's feed check is Python
    frames = python_frames_during(lambda: results.extend(sess.run(None, feeds)[0] for _ in range(20)))
    assert set(frames) <= {"session.py"}, sorted(set(frames))
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", provider.ortvalue_from_numpy(feeds["x"]))
    binding.bind_npu_output("y")
    frames = python_frames_during(lambda: [sess.run_with_iobinding(binding) for _ in range(20)])
    assert set(frames) <= {"session.py"}, sorted(set(frames))
    assert kernel.python_computes == computes and kernel.native_runs == runs + 40
    for y in (*results, binding.get_outputs()[0].numpy()):
        np.testing.assert_array_equal(y, results[0])
    np.testing.assert_allclose(results[0], expected, atol=1e-4, rtol=1e-3)


def assert_runs_whole_in_c(sess: InferenceSession, feeds: dict, kernels_used: set[str]
                           ) -> np.ndarray:
    """Ten runs of `sess`'s one NPU partition in C with no numpy step; its output."""
    first = sess.run(None, feeds)[0]
    (kernel,) = kernels(sess)
    (compiled,) = kernel._programs.values()
    assert kernels_used <= {step.kernel for step in compiled.executor.program.steps}
    computes, runs = kernel.python_computes, kernel.native_runs
    for _ in range(10):
        np.testing.assert_array_equal(sess.run(None, feeds)[0], first)
    assert compiled.executor._inner.numpy_steps.calls == 0
    assert kernel.python_computes == computes and kernel.native_runs == runs + 10
    return first


@needs_native
def test_the_ops_of_real_models_run_in_c():
    feeds = {"x": RNG.standard_normal((2, 4, 8)).astype(np.float32)}
    y = assert_runs_whole_in_c(InferenceSession(REAL_OPS, providers=NPU), feeds,
                               {"layer_norm", "matmul", "unary", "binary", "reduce"})
    np.testing.assert_allclose(y, reference(REAL_OPS, feeds)[0], atol=1e-5, rtol=1e-4)


@needs_native
@pytest.mark.parametrize("case, kernel", [
    ("conv", "qconv2d"), ("conv_depthwise", "qconv2d"), ("gemm", "qdense"), ("sigmoid", "qlut"),
    ("concat", "qconcat"), ("maxpool", "qmax_pool"), ("add_same_shape", "qadd"),
    ("mul_same_shape", "qmul")])
def test_integer_programs_run_in_c(case, kernel):
    """Quantized units run on the integer op codes (40-49) from the C Compute, to the code
    the Executor's own native run gives."""
    model, feeds = build_quantized(case, np.int8, 3)
    y = assert_runs_whole_in_c(InferenceSession(model.SerializeToString(), providers=NPU), feeds,
                               {kernel})
    np.testing.assert_array_equal(y, run_npu(model, feeds))


@needs_native
def test_a_mixed_program_enters_python_only_for_its_numpy_steps(numpy_trilu):
    sess = InferenceSession(MIXED, providers=NPU)
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    sess.run(None, {"x": x})
    (kernel,) = kernels(sess)
    (compiled,) = kernel._programs.values()
    steps = compiled.executor._inner.numpy_steps
    calls, computes = steps.calls, kernel.python_computes
    for _ in range(10):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0],
                                   np.triu(np.maximum(x, 0)) + 1, rtol=1e-6)
    assert steps.calls == calls + 10  # one numpy segment per run
    assert kernel.python_computes == computes


@needs_native
def test_a_new_shape_enters_python_once():
    sess = InferenceSession(CNN, providers=NPU)
    (kernel,) = kernels(sess)
    for n in (1, 2, 1, 2, 1):
        feeds = cnn_feeds(n, n=n)
        np.testing.assert_allclose(sess.run(None, feeds)[0], reference(CNN, feeds)[0],
                                   atol=1e-4, rtol=1e-3)
    assert kernel.python_computes == 2 and kernel.native_runs == 3


@needs_native
def test_the_gil_is_not_held_during_a_run():
    """A Python thread counts while a ~0.1 s NPU run is in progress: it keeps counting."""
    k = 1024
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["m"]),
                        helper.make_node("MatMul", ["m", "w"], ["y"])],
                       [f32("x", [k, k])], [f32("y", [k, k])],
                       [numpy_helper.from_array(RNG.standard_normal((k, k)).astype(np.float32) / 32, "w")])
    sess = InferenceSession(model, providers=SINGLE)
    x = RNG.standard_normal((k, k)).astype(np.float32)
    sess.run(None, {"x": x})
    count, stop = [0], threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=counter)
    thread.start()
    try:
        time.sleep(0.05)
        progress = []
        for _ in range(3):
            before, start = count[0], time.perf_counter()
            sess.run(None, {"x": x})
            progress.append((count[0] - before) / (time.perf_counter() - start))
        before, start = count[0], time.perf_counter()
        time.sleep(0.1)
        free_rate = (count[0] - before) / (time.perf_counter() - start)
    finally:
        stop.set()
        thread.join()
    # counting while the run holds the GIL would be impossible; allow for a busy machine
    assert max(progress) > 0.2 * free_rate, (progress, free_rate)


# ---- concurrency ------------------------------------------------------------------------------


def _hammer(sessions: list[InferenceSession], runs: int, feeds: list[dict],
            expected: list[np.ndarray]) -> None:
    def worker(i: int) -> None:
        sess = sessions[i % len(sessions)]
        for r in range(runs):
            j = (i + r) % len(feeds)
            np.testing.assert_array_equal(sess.run(None, feeds[j])[0], expected[j])

    run_threads(worker, 8)


@needs_native
def test_eight_threads_on_one_session_match_single_threaded_runs():
    options = [("NPUExecutionProvider", {"npu_threads": "1", "concurrent_runs": "8"}),
               "CPUExecutionProvider"]
    sess = InferenceSession(CNN, providers=options)
    feeds = [cnn_feeds(seed) for seed in range(8)]
    expected = [sess.run(None, f)[0] for f in feeds]  # single-threaded, one core: exact
    for f, y in zip(feeds, expected, strict=True):
        np.testing.assert_allclose(y, reference(CNN, f)[0], atol=1e-4, rtol=1e-3)
    _hammer([sess], 200, feeds, expected)
    info = sess.memory_info()
    assert 1 <= info.arenas <= 8
    assert info.device_internal == info.arenas * info.internal
    (kernel,) = kernels(sess)
    assert kernel.python_computes == 1  # the shape's first run compiled it


@needs_native
def test_eight_threads_on_clones_match_single_threaded_runs():
    sess = InferenceSession(CNN, providers=SINGLE)
    clones = [sess, *(sess.clone() for _ in range(3))]
    feeds = [cnn_feeds(seed, n=2) for seed in range(4)]
    expected = [sess.run(None, f)[0] for f in feeds]
    _hammer(clones, 200, feeds, expected)


@needs_native
def test_threads_on_more_shapes_than_max_shapes_stay_correct():
    """Shapes evicted and compiled again while other threads run: entries leave the C table
    only once their runs are done."""
    options = [("NPUExecutionProvider", {"npu_threads": "1", "max_shapes": "2"}),
               "CPUExecutionProvider"]
    sess = InferenceSession(CNN, providers=options)
    feeds = [cnn_feeds(seed, h=8 + 2 * seed) for seed in range(4)]
    expected = [reference(CNN, f)[0] for f in feeds]

    def worker(i: int) -> None:
        for r in range(12):
            j = (i + r) % len(feeds)
            np.testing.assert_allclose(sess.run(None, feeds[j])[0], expected[j],
                                       atol=1e-4, rtol=1e-3)

    run_threads(worker, 4)
    assert len(kernels(sess)[0]._programs) <= 2


@needs_native
def test_a_named_group_takes_turns_and_stays_correct():
    options = [("NPUExecutionProvider", {"internal_memory_group": "data-plane"}),
               "CPUExecutionProvider"]
    sessions = [InferenceSession(CNN, providers=options) for _ in range(2)]
    feeds = [cnn_feeds(seed) for seed in range(4)]
    expected = [sessions[0].run(None, f)[0] for f in feeds]
    _hammer(sessions, 20, feeds, [np.asarray(y) for y in expected])
    assert all(s.memory_info().arenas == 1 for s in sessions)


@needs_native
def test_the_ep_declares_concurrent_runs():
    sess = InferenceSession(NATIVE_ONLY, providers=NPU)
    (ep,) = sess._npu_eps
    if ep.ort.api_version < abi.IS_CONCURRENT_RUN_SUPPORTED_SINCE:
        pytest.skip(f"onnxruntime API {ep.ort.api_version} has no IsConcurrentRunSupported")
    assert ep.struct.IsConcurrentRunSupported


# ---- errors from C ------------------------------------------------------------------------------


@needs_native
def test_a_bound_output_of_another_shape_is_refused_in_c():
    sess = InferenceSession(NATIVE_ANY_BATCH, providers=NPU)
    sess.run(None, {"x": np.ones((2, 8), np.float32)})  # compiles the shape (Python, once)
    (kernel,) = kernels(sess)
    assert kernel.python_computes == 1
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", provider.ortvalue_from_numpy(np.ones((2, 8), np.float32)))
    binding._iobinding.bind_ortvalue_output("y", provider.empty((3, 8))._ortvalue)  # unchecked
    with pytest.raises(BindingError, match=r"^output 'y': this run computes shape \[2, 8\] and "
                                           r"the bound output has another; bind one"):
        sess.run_with_iobinding(binding)
    assert kernel.python_computes == 1


@needs_native
def test_an_output_sharing_the_input_memory_is_refused_in_c():
    sess = InferenceSession(NATIVE_ONLY, providers=NPU)
    (kernel,) = kernels(sess)
    shared = provider.ortvalue_from_numpy(np.ones((2, 8), np.float32))
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", shared)
    binding.bind_ortvalue_output("y", shared)
    with pytest.raises(BindingError, match=r"^output 'y' shares memory with input 'x'; bind "
                                           r"separate buffers$"):
        sess.run_with_iobinding(binding)
    assert kernel.python_computes == 0


@needs_native
def test_a_numpy_step_failing_in_a_c_run_is_typed(monkeypatch, numpy_trilu):
    def broken(inputs, outputs, attrs):
        raise FloatingPointError("simulated kernel failure")

    monkeypatch.setitem(KERNELS, "triangle", Kernel("triangle", broken))
    sess = InferenceSession(MIXED, providers=NPU)
    (kernel,) = kernels(sess)
    with pytest.raises(LitenpuError, match=r"step 1 \(triangle\) failed: FloatingPointError: "
                                           r"simulated kernel failure") as info:
        sess.run(None, {"x": np.ones((2, 8), np.float32)})
    assert "NodeComputeInfo.Compute: LitenpuError" in str(info.value.__cause__)
    assert kernel.python_computes == 0


def _bad_run_messages(in_c: bool) -> list[str]:
    """What three bad runs raise (type and text), with Compute in C or in Python: an output
    bound with the wrong shape, an output sharing the input's memory, a failing numpy step."""
    messages = []
    sess = InferenceSession(NATIVE_ANY_BATCH, providers=NPU)
    sess.run(None, {"x": np.ones((2, 8), np.float32)})
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", provider.ortvalue_from_numpy(np.ones((2, 8), np.float32)))
    binding._iobinding.bind_ortvalue_output("y", provider.empty((3, 8))._ortvalue)  # unchecked
    shared = provider.ortvalue_from_numpy(np.ones((2, 8), np.float32))
    native_only = InferenceSession(NATIVE_ONLY, providers=NPU)
    overlapping = native_only.io_binding()
    overlapping.bind_ortvalue_input("x", shared)
    overlapping.bind_ortvalue_output("y", shared)
    mixed = InferenceSession(MIXED, providers=NPU)
    for run in (lambda: sess.run_with_iobinding(binding),
                lambda: native_only.run_with_iobinding(overlapping),
                lambda: mixed.run(None, {"x": np.ones((2, 8), np.float32)})):
        with pytest.raises(LitenpuError) as info:
            run()
        messages.append(f"{type(info.value).__name__}: {info.value}")
    assert all(k.native == in_c for s in (sess, native_only, mixed) for k in kernels(s))
    return messages


@needs_native
def test_errors_from_c_have_the_python_computes_types_and_text(monkeypatch, numpy_trilu):
    def broken(inputs, outputs, attrs):
        raise FloatingPointError("simulated kernel failure")

    monkeypatch.setitem(KERNELS, "triangle", Kernel("triangle", broken))
    from_c = _bad_run_messages(True)
    monkeypatch.setattr(compute.clib, "data_plane", lambda: False)  # kernels made from now on
    from_python = _bad_run_messages(False)
    assert from_c == from_python
    assert [m.split(":")[0] for m in from_c] == ["BindingError", "BindingError", "LitenpuError"]


# ---- memory -------------------------------------------------------------------------------------


def _cycles(count: int) -> None:
    """Create, run (plain and NPU-bound) and destroy a session `count` times: the pool is
    back where it was and the process does not grow."""
    feeds = cnn_feeds(3)
    expected = reference(CNN, feeds)[0]
    gc.collect()
    before, kernels_before = default_pool().stats().in_use, len(compute._KERNELS)

    def cycle() -> None:
        sess = InferenceSession(CNN, providers=NPU)
        np.testing.assert_allclose(sess.run(None, feeds)[0], expected, atol=1e-4, rtol=1e-3)
        binding = sess.io_binding()
        binding.bind_ortvalue_input("x", provider.ortvalue_from_numpy(feeds["x"]))
        binding.bind_npu_output("y")
        sess.run_with_iobinding(binding)

    for _ in range(min(20, count)):  # warm up: caches, lazily loaded code
        cycle()
    gc.collect()
    rss = rss_bytes()
    for _ in range(count):
        cycle()
    gc.collect()
    assert default_pool().stats().in_use == before
    assert len(compute._KERNELS) == kernels_before
    grown = rss_bytes() - rss
    assert grown < 16 << 20, f"RSS grew by {grown / 2**20:.1f} MiB over {count} sessions"


@needs_native
def test_a_hundred_create_run_destroy_cycles_give_everything_back():
    _cycles(100)


@needs_native
@pytest.mark.slow
def test_a_thousand_create_run_destroy_cycles_give_everything_back():
    _cycles(1000)


# ---- without the native library -------------------------------------------------------------------


CHILD = """
import numpy as np
import provider
from provider.ort import clib
provider.register()
sess = provider.InferenceSession({model!r}, providers=["NPUExecutionProvider", "CPUExecutionProvider"])
x = np.arange(16, dtype=np.float32).reshape(2, 8) - 8
for _ in range(3):
    y = sess.run(None, {{"x": x}})[0]
(kernel,) = [k for ep in sess._npu_eps for k in ep.kernels.values()]
print(clib.data_plane(), kernel.python_computes, kernel.native_runs,
      bool(np.allclose(y, np.maximum(x, 0) + 1)))
"""


def test_without_the_native_library_every_run_is_python(tmp_path):
    path = tmp_path / "static.onnx"
    path.write_bytes(STATIC)
    home = str(Path(provider.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": home, "LITENPU_NATIVE": "0"}
    done = subprocess.run([sys.executable, "-c", CHILD.format(model=str(path))], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "3", "0", "True"]
