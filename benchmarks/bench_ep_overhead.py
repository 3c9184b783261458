"""NPU execution provider through onnxruntime: per-call overhead and zero-copy chaining.

1. Per-call EP overhead on a tiny model (Relu + Add on 2x8): NPU EP vs onnxruntime's CPU EP,
   with numpy feeds and with NPU-bound I/O.
2. Two models chained, 25 MB tensors: plain `run()` with numpy in and out of each session vs
   IOBinding with NPU-resident tensors (A's NPU output bound as B's input): time ratio and bytes
   copied between CPU and NPU memory (counted by the EP).

    PYTHONPATH=. python3 benchmarks/bench_ep_overhead.py [--quick]   (or after pip install .)
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import provider
from provider.bench.timing import best_of

NPU = ["NPUExecutionProvider", "CPUExecutionProvider"]
CPU = ["CPUExecutionProvider"]


def relu_add(shape: tuple[int, ...]) -> bytes:
    """y = relu(x) + 1: both nodes run on the NPU."""
    one = numpy_helper.from_array(np.ones(shape[-1:], np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "one"], ["y"])], "relu_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], [one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()



def overhead(quick: bool) -> None:
    model = relu_add((2, 8))
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    npu = provider.InferenceSession(model, providers=NPU)
    cpu = ort.InferenceSession(model, providers=CPU)
    number = 200 if quick else 2000
    t_npu = best_of(lambda: npu.run(None, {"x": x}), 3, number)
    t_cpu = best_of(lambda: cpu.run(None, {"x": x}), 3, number)
    binding = npu.io_binding()
    binding.bind_ortvalue_input("x", provider.ortvalue_from_numpy(x))
    binding.bind_ortvalue_output("y", provider.empty(x.shape, "float32"))
    t_bound = best_of(lambda: npu.run_with_iobinding(binding), 3, number)
    print(f"tiny model run():        NPU EP {t_npu * 1e6:8.1f} us   CPU EP {t_cpu * 1e6:8.1f} us   "
          f"EP overhead {(t_npu - t_cpu) * 1e6:8.1f} us/call ({t_npu / t_cpu:.1f}x)")
    print(f"tiny model, NPU-bound:   NPU EP {t_bound * 1e6:8.1f} us   "
          f"(no CPU<->NPU copies; Python EP path only)")


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
    chain(args.quick)


if __name__ == "__main__":
    main()
