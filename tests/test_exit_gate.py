"""Interpreter exit while daemon threads create and run sessions: the process ends cleanly
(it aborted: onnxruntime's C++ frames were unwound by CPython's thread exit)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from ort_models import CNN

import provider
from provider import exit_gate
from provider.ort.ep import NpuEp

SCRIPT = textwrap.dedent("""
    import sys, threading, time
    import numpy as np
    import provider
    sys.path.insert(0, sys.argv[1])
    from ort_models import CNN
    mode = sys.argv[2]
    P = ["NPUExecutionProvider", "CPUExecutionProvider"]
    x = np.zeros((1, 3, 16, 16), np.float32)
    sess = provider.InferenceSession(CNN, providers=P)

    def run():
        binding = sess.io_binding()
        binding.bind_cpu_input("x", x)
        binding.bind_npu_output("y")
        while True:
            sess.run(None, {"x": x})
            sess.run_with_iobinding(binding)

    def create():
        while True:
            provider.InferenceSession(CNN, providers=P).run(None, {"x": x})

    sys.setswitchinterval(1e-6)  # threads trade the GIL at every chance: races show
    for _ in range(2):
        threading.Thread(target=run if mode == "run" else create, daemon=True).start()
    time.sleep(0.3)
    print("done")
""")


@pytest.mark.parametrize("mode", ["run", "create"])
def test_exit_with_daemon_threads_in_onnxruntime_is_clean(tmp_path, mode):
    """(cwd elsewhere: `python -c` would import the source tree, not the installed package)"""
    for _ in range(2):  # without the gate every attempt aborted
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(Path(__file__).parent), mode],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-2000:]
        assert proc.stderr == ""


PARALLEL_SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    import numpy as np
    import onnxruntime as ort
    from onnx import helper
    sys.path.insert(0, sys.argv[1])
    from ort_models import f32, make_model
    mode, state = sys.argv[2], {}

    def late():  # registered before provider's import: runs after its drain
        for _ in range(20):
            state["run"]()
        print("late runs done")

    if mode == "at_exit":
        atexit.register(late)
    import provider
    # two branches onnxruntime's parallel executor runs at once, one partition on its pool
    model = make_model([helper.make_node("Relu", ["x"], ["a"]),
                        helper.make_node("Sigmoid", ["x"], ["b"]),
                        helper.make_node("Exp", ["a"], ["a2"]),
                        helper.make_node("Tanh", ["b"], ["b2"]),
                        helper.make_node("Add", ["a2", "b2"], ["y"])],
                       [f32("x", [64, 256])], [f32("y", [64, 256])])
    options = ort.SessionOptions()
    options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    options.inter_op_num_threads = 2
    sess = provider.InferenceSession(model, options, providers=[
        ("NPUExecutionProvider", {"disable_ops": "Sigmoid"}), "CPUExecutionProvider"])
    x = np.zeros((64, 256), np.float32)
    state["run"] = lambda: sess.run(None, {"x": x})
    state["run"]()
    if mode == "daemon":
        def loop():
            while True:
                state["run"]()
        for _ in range(2):
            threading.Thread(target=loop, daemon=True).start()
        time.sleep(0.3)
    print("done")
""")


def test_freeing_a_session_is_one_gated_call(monkeypatch):
    """onnxruntime's session destructor calls back into the EP several times (partitions, EP,
    allocator); freed outside the gate, a daemon thread between two of those callbacks let the
    exit go on and then aborted (1 exit in ~150; 1 in 4 with a 1 us switch interval). The
    binding's node descriptions keep the session alive: its free is the one that counts."""
    seen = []
    close = NpuEp.close
    monkeypatch.setattr(NpuEp, "close", lambda ep: (seen.append(exit_gate.in_flight()), close(ep)))
    sess = provider.InferenceSession(CNN, providers=["NPUExecutionProvider"])
    binding = sess.io_binding()
    binding.bind_cpu_input("x", np.zeros((1, 3, 16, 16), np.float32))
    binding.bind_npu_output("y")
    sess.run_with_iobinding(binding)
    del sess
    assert seen == []
    del binding
    assert seen == [2]  # the binding's free, then the EP's release callback inside it


@pytest.mark.parametrize("mode", ["at_exit", "daemon"])
def test_exit_lets_callbacks_on_onnxruntime_threads_through(tmp_path, mode):
    """Python kernels (LITENPU_NATIVE=0) called from onnxruntime's inter-op pool: held by the
    gate, the main thread's run in an atexit handler hung for good, and a daemon thread's run
    in flight kept the exit waiting EXIT_WAIT_S (1 exit in 5)."""
    env = {**os.environ, "LITENPU_NATIVE": "0"}
    for _ in range(3 if mode == "daemon" else 1):
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-c", PARALLEL_SCRIPT, str(Path(__file__).parent),
                               mode], capture_output=True, text=True, timeout=90, cwd=tmp_path,
                              env=env)
        expected = "done\nlate runs done" if mode == "at_exit" else "done"
        assert proc.returncode == 0 and proc.stdout.strip() == expected, proc.stderr[-2000:]
        assert time.monotonic() - start < 20


def test_finalizers_are_walked_after_the_drain(tmp_path):
    """weakref.finalize's exit hook walks a registry daemon threads' sessions change: run
    before the drain, it failed ("dictionary changed size during iteration", 2 exits in 30
    of the create loop above on a busy machine)."""
    script = textwrap.dedent("""
        import weakref
        import provider
        from provider import exit_gate
        def walked():
            print("after the drain" if exit_gate.closing else "before the drain")
        weakref.finalize(walked, walked)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.stdout.strip() == "after the drain", proc.stderr[-2000:]


def test_a_session_freed_at_the_last_teardown_is_quiet(tmp_path):
    """A session that outlives every module (here: a function of __main__ kept by another
    module keeps __main__'s globals) is freed after exit_gate's globals became None: its
    `__del__` and the EP's callbacks printed "Exception ignored ... 'NoneType' object"."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import provider
        from provider.npu import memory
        sys.path.insert(0, sys.argv[1])
        from ort_models import CNN
        sess = provider.InferenceSession(CNN, providers=["NPUExecutionProvider"])
        sess.run(None, {"x": np.zeros((1, 3, 16, 16), np.float32)})
        memory.kept_until_the_end = lambda: sess
        print("done")
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-2000:]
    assert proc.stderr == ""


@exit_gate.gated
def gated_call(inside) -> None:
    """A call into onnxruntime as the session's methods and our callbacks make it."""
    exit_gate.enter()
    try:
        inside()
    finally:
        exit_gate.leave()


def test_drain_waits_for_calls_in_flight_and_holds_later_ones(monkeypatch):
    monkeypatch.setattr(exit_gate, "closing", False)
    monkeypatch.setattr(exit_gate, "EXIT_WAIT_S", 10.0)
    done = threading.Event()

    def in_flight() -> None:  # a run whose callback starts once the exit has begun
        while not exit_gate.closing:
            time.sleep(0.001)
        time.sleep(0.1)
        gated_call(lambda: None)  # nested: goes on (else the exit would wait 10 s)
        done.set()

    threading.Thread(target=gated_call, args=(in_flight,), daemon=True).start()
    while not exit_gate.in_flight():
        time.sleep(0.001)
    start = time.monotonic()
    exit_gate.drain()
    assert done.is_set() and 0.1 < time.monotonic() - start < 5 and not exit_gate.in_flight()
    done.clear()
    late = threading.Thread(target=gated_call, args=(done.set,), daemon=True)
    late.start()  # another thread's outermost call: held for good
    late.join(0.3)
    assert late.is_alive() and not done.is_set() and not exit_gate.in_flight()
    gated_call(done.set)  # the main thread is never held (an atexit handler may run a session)
    assert done.is_set()
