"""NPU execution provider through onnxruntime: per-call overhead, thread scaling, zero-copy chaining.

1. Per-call EP overhead on tiny models: the NPU EP (provider.InferenceSession) vs onnxruntime's
   CPU EP on the same model, with numpy feeds (`run()`) and with bound I/O (IOBinding: NPU
   tensors for the NPU EP, CPU ones for the CPU EP). Relu + Softmax runs natively (the C data
   plane: no Python in the run); Relu + Trilu has a numpy step (one callback into Python per run;
   the Trilu is taken off its native lowering for that).
   Overhead = NPU EP time - CPU EP time, in us per call.
2. Throughput of 2 threads on one session (npu_threads=1, a model of about 2 ms per run) over
   1 thread: runs of one session overlap, each in its own arena, without the GIL.
3. Two models chained, 25 MB tensors: plain `run()` with numpy in and out of each session vs
   IOBinding with NPU-resident tensors (A's NPU output bound as B's input): time ratio and bytes
   copied between CPU and NPU memory (counted by the EP).

Timings alternate between the sides in short blocks (provider.bench.timing) and report the
median over blocks, with the spread (min..max of the block medians) as the noise.

    PYTHONPATH=. python3 benchmarks/bench_ep_overhead.py [--quick]   (or after pip install .)
"""

from __future__ import annotations

import argparse
import logging
import statistics
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import provider
from provider.bench.timing import best_of, interleaved_ms
from provider.npu.ops.registry import NATIVE

NPU = ["NPUExecutionProvider", "CPUExecutionProvider"]
CPU = ["CPUExecutionProvider"]


def _model(nodes, shape, initializers=(), out_shape=None) -> bytes:
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape or shape))],
        list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def relu_add(shape: tuple[int, ...]) -> bytes:
    """y = relu(x) + 1: both nodes run on the NPU's native kernels."""
    one = numpy_helper.from_array(np.ones(shape[-1:], np.float32), "one")
    return _model([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("Add", ["r", "one"], ["y"])], shape, [one])


def relu_trilu(shape: tuple[int, ...]) -> bytes:
    """y = triu(relu(x)): both nodes run on the NPU (the Trilu on its numpy kernel when its
    native lowering is set aside, see `overhead`)."""
    return _model([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("Trilu", ["r"], ["y"])], shape)


def relu_softmax(shape: tuple[int, ...]) -> bytes:
    """y = softmax(relu(x)): both nodes run on the NPU's native kernels."""
    return _model([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("Softmax", ["r"], ["y"], axis=-1)], shape)


def conv_stack(channels: int = 32, size: int = 56, layers: int = 4) -> bytes:
    """A stack of 3x3 conv + relu on 1 x channels x size x size: a few ms per run on one core."""
    rng = np.random.default_rng(0)
    nodes, weights, name = [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((channels, channels if i else 3, 3, 3)).astype(np.float32) * 0.1
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("Conv", [name, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], ["y" if i == layers - 1 else f"r{i}"])]
        name = f"r{i}"
    return _model(nodes, (1, 3, size, size), weights, (1, channels, size, size))


def _us(blocks: list[list[float]]) -> tuple[float, float, float]:
    """(median, min, max) over blocks of each block's median, in us."""
    medians = [statistics.median(b) * 1e3 for b in blocks]
    return statistics.median(medians), min(medians), max(medians)


def overhead(quick: bool) -> None:
    runs = 4000 if quick else 20000
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    _overhead_of("Relu+Softmax (native)", relu_softmax((2, 8)), x, runs)
    # a Program with one step on its numpy kernel: the Trilu's native lowering set aside
    lowering = NATIVE.pop("triangle")
    try:
        _overhead_of("Relu+Trilu (numpy Trilu)", relu_trilu((2, 8)), x, runs)
    finally:
        NATIVE["triangle"] = lowering


def _overhead_of(label: str, model: bytes, x: np.ndarray, runs: int) -> None:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the tiny models gain nothing from onnxruntime's pool
    npu = provider.InferenceSession(model, providers=NPU)
    cpu = ort.InferenceSession(model, options, providers=CPU)
    np.testing.assert_allclose(npu.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)
    npu_bound, cpu_bound = npu.io_binding(), cpu.io_binding()
    npu_bound.bind_ortvalue_input("x", provider.ortvalue_from_numpy(x))
    npu_bound.bind_ortvalue_output("y", provider.empty(npu.get_outputs()[0].shape, "float32"))
    cpu_bound.bind_cpu_input("x", x)
    cpu_bound.bind_output("y")
    blocks = interleaved_ms([lambda: npu.run(None, {"x": x}), lambda: cpu.run(None, {"x": x}),
                             lambda: npu.run_with_iobinding(npu_bound),
                             lambda: cpu.run_with_iobinding(cpu_bound)],
                            runs, block=500, settle=50, pause_s=0.02)
    (n, n_lo, n_hi), (c, c_lo, c_hi), (nb, nb_lo, nb_hi), (cb, cb_lo, cb_hi) = map(_us, blocks)
    print(f"{label:24s} run():     NPU EP {n:6.2f} us ({n_lo:.2f}..{n_hi:.2f})  CPU EP "
          f"{c:6.2f} us ({c_lo:.2f}..{c_hi:.2f})  EP overhead {n - c:+6.2f} us/call  "
          f"({n / c:.2f}x)")
    print(f"{label:24s} bound I/O: NPU EP {nb:6.2f} us ({nb_lo:.2f}..{nb_hi:.2f})  CPU EP "
          f"{cb:6.2f} us ({cb_lo:.2f}..{cb_hi:.2f})  EP overhead {nb - cb:+6.2f} us/call  "
          f"({nb / cb:.2f}x)")


def threads(quick: bool) -> None:
    model = conv_stack()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = provider.InferenceSession(model, options, providers=[
        ("NPUExecutionProvider", {"npu_threads": "1"}), "CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, 3, 56, 56)).astype(np.float32)
    expected = sess.run(None, {"x": x})[0]
    per_run = best_of(lambda: sess.run(None, {"x": x}), 3, 10)
    runs = max(20, int((0.5 if quick else 2.0) / per_run))

    def throughput(count: int) -> float:
        """Runs per second of `count` threads, each doing `runs` runs on the one session."""
        start = threading.Barrier(count + 1)
        errors = []

        def work():
            start.wait()
            for _ in range(runs):
                if not np.array_equal(sess.run(None, {"x": x})[0], expected):
                    errors.append("a threaded run differs from the single-threaded one")

        workers = [threading.Thread(target=work) for _ in range(count)]
        for w in workers:
            w.start()
        start.wait()
        t0 = time.perf_counter()
        for w in workers:
            w.join()
        if errors:
            raise AssertionError(errors[0])
        return count * runs / (time.perf_counter() - t0)

    ratios = []
    for _ in range(3 if quick else 7):  # alternating rounds: 1 thread, then 2
        one = throughput(1)
        two = throughput(2)
        ratios.append(two / one)
    print(f"threads: conv stack {per_run * 1e3:.2f} ms/run (npu_threads=1); 2 threads on one "
          f"session / 1 thread: {statistics.median(ratios):.2f}x throughput "
          f"({min(ratios):.2f}..{max(ratios):.2f} over {len(ratios)} rounds, "
          f"{runs} runs per thread)")


def chain(quick: bool) -> None:
    n = (25 << 20) // 4  # 25 MB of float32
    model = relu_add((n,))
    a, b = provider.InferenceSession(model, providers=NPU), provider.InferenceSession(model, providers=NPU)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    repeat = 2 if quick else 5

    def plain():
        (mid,) = a.run(None, {"x": x})
        return b.run(None, {"x": mid})[0]

    x_npu = provider.ortvalue_from_numpy(x)
    out_npu = provider.empty((n,), "float32")
    bind_a, bind_b = a.io_binding(), b.io_binding()
    bind_a.bind_ortvalue_input("x", x_npu)
    bind_a.bind_npu_output("y")
    bind_b.bind_ortvalue_output("y", out_npu)

    def bound():
        a.run_with_iobinding(bind_a)
        bind_b.bind_ortvalue_input("x", bind_a.get_outputs()[0])
        b.run_with_iobinding(bind_b)

    expected = plain()
    bound()
    np.testing.assert_allclose(provider.view(out_npu), expected, rtol=1e-6)
    results = {}
    for name, fn in (("plain run()", plain), ("NPU-bound IOBinding", bound)):
        before = provider.copy_stats()
        seconds = best_of(fn, repeat, 1)
        copied = (provider.copy_stats() - before).total_bytes // repeat
        results[name] = seconds
        print(f"2-model chain, 25 MB, {name:<20} {seconds * 1e3:8.2f} ms/chain   "
              f"copied {copied / 2**20:7.1f} MiB per chain")
    print(f"2-model chain speed-up of zero-copy binding: "
          f"{results['plain run()'] / results['NPU-bound IOBinding']:.2f}x")
    cpu_a, cpu_b = ort.InferenceSession(model, providers=CPU), ort.InferenceSession(model, providers=CPU)
    t_cpu = best_of(lambda: cpu_b.run(None, {"x": cpu_a.run(None, {"x": x})[0]}), repeat, 1)
    print(f"2-model chain, 25 MB, onnxruntime CPU EP    {t_cpu * 1e3:8.2f} ms/chain")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    provider.register()
    print(f"onnxruntime {ort.__version__}, litenpu {provider.__version__}")
    overhead(args.quick)
    threads(args.quick)
    chain(args.quick)


if __name__ == "__main__":
    main()
