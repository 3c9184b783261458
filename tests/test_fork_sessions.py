"""Sessions made before fork() (a server's workers forked from a preloaded model) give right
answers in every process: they gave wrong ones when the processes shared the device pool's
arenas. A child forked while another thread runs or creates sessions does not wait for good
on what that thread held (the NPU's worker pool mid-kernel, the registration lock)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import provider
    sys.path.insert(0, sys.argv[1])
    from ort_models import CNN
    P = ["NPUExecutionProvider", "CPUExecutionProvider"]
    sess = provider.InferenceSession(CNN, providers=P)
    xs = [np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32)
          for i in range(4)]
    ys = [sess.run(None, {"x": x})[0] for x in xs]
    binding = sess.io_binding()
    binding.bind_cpu_input("x", xs[0])
    binding.bind_npu_output("y")
    sess.run_with_iobinding(binding)
    bound = binding.get_outputs()[0]

    def wrong_runs(first: int) -> int:
        return sum(not np.allclose(sess.run(None, {"x": xs[(i + first) % 4]})[0],
                                   ys[(i + first) % 4], atol=1e-5) for i in range(300))

    children = []
    for c in range(2):
        pid = os.fork()
        if pid == 0:
            bad = wrong_runs(c + 1) + (not np.allclose(bound.numpy(), ys[0], atol=1e-5))
            fresh = provider.InferenceSession(CNN, providers=P)
            bad += not np.allclose(fresh.run(None, {"x": xs[1]})[0], ys[1], atol=1e-5)
            os._exit(min(bad, 100))
        children.append(pid)
    bad = wrong_runs(0)
    print("parent", bad, "children", [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1])
                                      for p in children])
""")


def test_sessions_made_before_fork_are_right_in_every_process(tmp_path):
    """(cwd elsewhere: `python -c` would import the source tree, not the installed package)"""
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", SCRIPT,
                           str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["parent", "0", "children", "[0,", "0]"], proc.stdout


BUSY_SCRIPT = textwrap.dedent("""
    import os, sys, threading, time
    import numpy as np
    import provider
    from provider.ort import discovery, registration
    from provider.zoo import build
    proto = build("resnet_block", batch=1)
    model = proto.SerializeToString()
    x = np.random.default_rng(0).standard_normal((1, 3, 56, 56)).astype(np.float32)
    sess = provider.InferenceSession(model, providers=[("NPUExecutionProvider",
                                                        {"npu_threads": "2"})])
    y0 = sess.run(None, {"image": x})[0]
    # a thread inside register() at the fork (its locks held), and one always mid-kernel
    holding = threading.Event()
    def hold():
        with registration._LOCK, discovery._LOCK:
            holding.set()
            time.sleep(3600)
    threading.Thread(target=hold, daemon=True).start()
    holding.wait()
    # the busy thread runs a Program on the NPU directly: a session's run would also hold
    # onnxruntime's own locks at times, and a child finding one held waits in onnxruntime
    from converters.onnx_import import import_onnx
    from provider.npu.compiler import compile_model
    from provider.npu.executor import Executor
    from provider.npu.memory import default_pool
    executor = Executor(compile_model(import_onnx(proto)[0], {"image": x.shape}),
                        default_pool())
    stop = False
    def run():
        while not stop:
            executor.run([x])
    worker = threading.Thread(target=run)
    worker.start()
    hung = wrong = 0
    for i in range(40):
        time.sleep(0.003)
        pid = os.fork()
        if pid == 0:
            y = sess.run(None, {"image": x})[0]
            fresh = provider.InferenceSession(model, providers=["NPUExecutionProvider"])
            z = fresh.run(None, {"image": x})[0]
            os._exit(0 if np.abs(y - y0).max() < 1e-5 and np.abs(z - y0).max() < 1e-4 else 3)
        start = time.monotonic()
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.monotonic() - start > 20:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                hung += 1
                break
            time.sleep(0.005)
        else:
            continue
    stop = True
    worker.join()
    print("hung", hung)
""")


def test_a_child_forked_while_threads_are_busy_does_not_hang(tmp_path):
    """Without resetting the worker pool's job state after fork, 4 of 40 children waited for
    good for workers that only the parent has; without a lock-free register() once
    registered, every child whose parent held its lock did. (A child can still find one of
    onnxruntime's own locks held by a thread running a session: plain onnxruntime sessions
    share that hazard; the user guide says to fork before starting threads.)"""
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c",
                           BUSY_SCRIPT], capture_output=True, text=True, timeout=900,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["hung", "0"], proc.stdout


BOOKS_SCRIPT = textwrap.dedent("""
    import ctypes as C, os, sys, threading, time
    from provider.npu import native
    lib = native.library()
    lib.lnpu_heap_hold.argtypes = [C.c_void_p, C.c_int64]
    lib.lnpu_arenas_acquire.argtypes = [C.c_void_p, C.POINTER(C.c_int64),
                                        C.POINTER(C.c_void_p), C.c_void_p]
    lib.lnpu_arenas_release.argtypes = [C.c_void_p, C.c_int64]
    heap = native.Heap(1 << 20, 1 << 30)
    arenas = native.ArenaSet(heap, 4096, max_arenas=1)

    def acquire():
        generation, base = C.c_int64(), C.c_void_p()
        return lib.lnpu_arenas_acquire(arenas.address, C.byref(generation), C.byref(base), None)

    taken, done = threading.Event(), threading.Event()
    def other_thread():
        if sys.argv[1] == "heap":  # inside the heap's books while the main thread forks
            taken.set()
            lib.lnpu_heap_hold(heap.address, 300_000_000)
        else:  # a run of this thread holds the set's one arena
            index = acquire()
            taken.set()
            done.wait()
            lib.lnpu_arenas_release(arenas.address, index)
    thread = threading.Thread(target=other_thread)
    thread.start()
    taken.wait()
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:  # the child allocates, and takes the arena (the other thread is not here)
        ok = heap.alloc(64, 64) >= 0 and acquire() == 0
        os._exit(0 if ok else 3)
    start = time.monotonic()
    while not (status := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() - start > 20:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("hung")
            break
        time.sleep(0.005)
    else:
        print("exit", os.waitstatus_to_exitcode(status[1]))
    done.set()
    thread.join()
""")


@pytest.mark.parametrize("held", ["heap", "arena"])
def test_a_child_forked_while_another_thread_holds_the_books_can_allocate(tmp_path, held):
    """A thread inside a heap's lock at fork() left it locked in the child for good (the
    child's first allocation waited forever; 1 in 100 forks while a thread allocated), and
    an arena another thread's run held stayed taken there: fork() now waits for the books'
    locks, and the child frees what runs that are not in it held."""
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c",
                           BOOKS_SCRIPT, held], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["exit", "0"], proc.stdout


GEMM_SCRIPT = textwrap.dedent("""
    import os, threading, time
    import numpy as np
    from onnx import helper as h, numpy_helper, TensorProto as TP
    from converters.onnx_import import import_onnx
    from provider.npu.compiler import compile_model
    from provider.npu.executor import Executor
    from provider.npu.memory import default_pool
    # a weight times a small input, on one core: the run is one sgemm call
    M, K, N = 2048, 2048, 1024
    a = numpy_helper.from_array(np.ones((M, K), np.float32), "a")
    graph = h.make_graph([h.make_node("MatMul", ["a", "b"], ["y"])], "g",
                         [h.make_tensor_value_info("b", TP.FLOAT, [K, N])],
                         [h.make_tensor_value_info("y", TP.FLOAT, [M, N])], [a])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    b = np.ones((K, N), np.float32)
    executor = Executor(compile_model(import_onnx(model)[0], {"b": b.shape}), default_pool(),
                        cores=1)
    executor.run([b])
    start = time.monotonic()
    executor.run([b])
    gemm = time.monotonic() - start
    for attempt in range(3):
        started = threading.Event()
        def run():
            started.set()
            executor.run([b])
        thread = threading.Thread(target=run)
        thread.start()
        started.wait()
        time.sleep(gemm / 4)
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        forked = time.monotonic() - start
        os.waitpid(pid, 0)
        thread.join()
        print(f"gemm {gemm * 1e3:.0f} ms, fork {forked * 1e3:.0f} ms")
        if forked > gemm / 4:
            print("waited")
            break
""")


def test_fork_waits_for_a_gemm_another_thread_is_in(tmp_path):
    """OpenBLAS holds its buffer allocator's lock for a moment in every sgemm: a child forked
    then waited for good in its first GEMM (the busy test above: 5 children of 12,000 forked
    while another thread ran a convolution, on a loaded machine). fork() now waits until no
    thread is inside an sgemm; without that wait, it returned here in ~6 ms while the other
    thread was a quarter into a ~100 ms GEMM."""
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c",
                           GEMM_SCRIPT], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "waited" in proc.stdout, proc.stdout
