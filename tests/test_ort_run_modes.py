"""Strict mode (no CPU fallback) and performance modes per session, per dynamic option and per
run, as plain onnxruntime users set them."""

import logging
import threading

import numpy as np
import onnxruntime as ort
import pytest
from ort_models import NPU, STATIC, npu_session_options, reference
from test_ort_cache import IMAGE, RESNET
from worker_cores import run_until_a_worker_helps

import provider
from provider.errors import UnsupportedError
from provider.npu import native
from provider.options import InvalidOptionError, RuntimeOptions
from provider.ort.run_modes import RUN_KEY, WORKLOAD_KEY, PerfModes
from provider.session import InferenceSession

STRICT = "session.disable_cpu_ep_fallback"
X = np.random.default_rng(8).standard_normal((2, 8)).astype(np.float32)


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


@pytest.fixture
def two_cores():
    if native.library() is None:
        pytest.skip("the NPU's native library is not built")
    before = native.threads()
    native.set_threads(2)
    yield
    native.set_threads(before)


def run_options(mode: str) -> ort.RunOptions:
    options = ort.RunOptions()
    options.add_run_config_entry(RUN_KEY, mode)
    return options


def kernels(session: InferenceSession) -> list:
    return [k for ep in session._npu_eps for k in ep.kernels.values()]


# ---- strict mode ----------------------------------------------------------------------------


def test_strict_mode_runs_a_model_the_npu_takes_whole():
    options = npu_session_options(**{STRICT: "1"})
    session = ort.InferenceSession(STATIC, options)
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], np.maximum(X, 0) + 1)


def test_strict_mode_refuses_nodes_left_on_cpu_and_says_which(caplog):
    options = ort.SessionOptions()
    options.add_session_config_entry(STRICT, "1")
    options.add_provider_for_devices(provider.ep_devices(), {"disable_ops": "Add"})
    with caplog.at_level(logging.WARNING, "litenpu.ort"), \
            pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        ort.InferenceSession(STATIC, options)
    assert f"{STRICT}=1: onnxruntime will refuse this session: the NPU does not take add: " \
           "disabled by provider option disable_ops" in caplog.text
    strict = ort.SessionOptions()
    strict.add_session_config_entry(STRICT, "1")
    with pytest.raises(UnsupportedError, match=r"(?s)disable_cpu_ep_fallback=1, and the NPU "
                                               r"does not take every node:.*CPU  add \(Add\)"):
        InferenceSession(STATIC, strict, providers=[("NPUExecutionProvider",
                                                     {"disable_ops": "Add"})])


# ---- performance modes ----------------------------------------------------------------------


def test_a_run_option_sets_the_mode_of_one_run(two_cores):
    session = InferenceSession(RESNET, providers=NPU)
    default = session.run(None, {"image": IMAGE})[0]
    before = native.worker_tasks()
    low = session.run(None, {"image": IMAGE}, run_options("low_power"))[0]
    assert native.worker_tasks() == before  # one core: the calling thread only
    highs = []
    run_until_a_worker_helps(
        lambda: highs.append(session.run(None, {"image": IMAGE}, run_options("high_performance"))[0]),
        before)
    assert native.worker_tasks() > before
    high = highs[-1]
    expected = reference(RESNET, {"image": IMAGE})[0]
    for out in (default, low, high):
        np.testing.assert_allclose(out, expected, atol=1e-4, rtol=1e-3)
    (kernel,) = kernels(session)
    assert kernel.runs_by_mode["low_power"] == 1 and kernel.runs_by_mode["default"] == 1
    assert kernel.runs_by_mode["high_performance"] >= 1


def test_only_runs_carrying_a_mode_enter_python(monkeypatch):
    started = []
    original = PerfModes.run_started
    monkeypatch.setattr(PerfModes, "run_started",
                        lambda self, value: (started.append(value), original(self, value)))
    session = InferenceSession(STATIC, providers=NPU)
    (kernel,) = kernels(session)
    for _ in range(3):
        session.run(None, {"x": X})
    assert started == []  # OnRunStart is C: a run without the entry never reaches Python
    session.run(None, {"x": X}, run_options("low_power"))
    assert started == ["low_power"]
    computes = kernel.python_computes
    session.run(None, {"x": X})  # the run's mode ended with it: back on the C path
    if kernel.native:
        assert kernel.python_computes == computes
    assert dict(kernel.runs_by_mode) == {"default": 4, "low_power": 1}


def test_the_session_option_and_a_bad_run_value():
    session = InferenceSession(STATIC, providers=[("NPUExecutionProvider",
                                                   {"npu_perf_mode": "low_power"})])
    session.run(None, {"x": X})
    session.run(None, {"x": X}, run_options("high_performance"))
    (kernel,) = kernels(session)
    assert dict(kernel.runs_by_mode) == {"low_power": 1, "high_performance": 1}
    with pytest.raises(InvalidOptionError, match="npu_perf_mode='turbo': expected one of "
                                                 "default, low_power, high_performance"):
        session.run(None, {"x": X}, run_options("turbo"))
    with pytest.raises(InvalidOptionError, match="npu_perf_mode"):
        InferenceSession(STATIC, providers=[("NPUExecutionProvider", {"npu_perf_mode": "max"})])


def test_plain_onnxruntime_run_options_reach_the_kernel():
    session = ort.InferenceSession(STATIC, npu_session_options())
    out = session.run(None, {"x": X}, run_options("low_power"))[0]
    np.testing.assert_array_equal(out, np.maximum(X, 0) + 1)
    from provider.ort.factory import factory

    modes = [k.runs_by_mode for ep in factory().eps.values() for k in ep.kernels.values()]
    assert {"low_power": 1} in [dict(m) for m in modes]


def test_dynamic_options_change_the_session_mode():
    session = InferenceSession(STATIC, providers=NPU)
    if not hasattr(ort.InferenceSession, "set_ep_dynamic_options"):
        with pytest.raises(UnsupportedError, match="has no set_ep_dynamic_options"):
            session.set_ep_dynamic_options({"npu_perf_mode": "low_power"})
        pytest.skip(f"onnxruntime {ort.__version__}'s Python has no set_ep_dynamic_options")
    session.set_ep_dynamic_options({"npu_perf_mode": "low_power"})
    session.run(None, {"x": X})
    session.set_ep_dynamic_options({WORKLOAD_KEY: "Default"})
    session.run(None, {"x": X})
    session.set_ep_dynamic_options({WORKLOAD_KEY: "Efficient"})
    session.run(None, {"x": X})
    (kernel,) = kernels(session)
    assert dict(kernel.runs_by_mode) == {"low_power": 2, "default": 1}
    with pytest.raises(InvalidOptionError, match="npu_perf_mode='turbo'"):
        session.set_ep_dynamic_options({"npu_perf_mode": "turbo"})
    with pytest.raises(InvalidOptionError, match="expected Default or Efficient"):
        session.set_ep_dynamic_options({WORKLOAD_KEY: "Turbo"})


def test_modes_of_runs_in_progress_by_thread():
    """A run's own thread sees its mode; a thread running no run (onnxruntime's parallel
    executor) sees the mode of the runs in progress when they agree, else the session's."""
    modes = PerfModes(RuntimeOptions(npu_perf_mode="high_performance"))
    seen: dict[str, str] = {}
    started, release = threading.Event(), threading.Event()

    def run(mode):
        modes.run_started(mode)
        seen[f"own {mode}"] = modes.current()
        started.set()
        release.wait(10)
        modes.run_ended()

    low = threading.Thread(target=run, args=("low_power",))
    low.start()
    started.wait(10)
    seen["other, one run"] = modes.current()
    started.clear()
    plain = threading.Thread(target=run, args=(None,))
    plain.start()
    started.wait(10)
    seen["other, two runs"] = modes.current()
    release.set()
    low.join()
    plain.join()
    assert seen == {"own low_power": "low_power", "own None": "high_performance",
                    "other, one run": "low_power", "other, two runs": "high_performance"}
    assert modes.current() == "high_performance"


def test_cores_per_mode():
    runtime = RuntimeOptions(npu_threads=3)
    assert [runtime.cores(m) for m in ("default", "low_power", "high_performance")] == [3, 1, 0]
    assert RuntimeOptions(npu_perf_mode="low_power").cores() == 1
