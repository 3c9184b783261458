"""NPU infrastructure benchmarks: device pool, Program loading, executor overhead and copies.

Each line compares against a baseline measured in the same run (numpy or onnxruntime):

    PYTHONPATH=. python3 benchmarks/bench_npu_infra.py [--quick]   (or after pip install .)
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from provider.bench.timing import best_of
from provider.npu import program as fmt
from provider.npu.executor import Executor
from provider.npu.memory import DevicePool
from provider.npu.program import Program, Slot, Step


def report(label: str, ours: float, base: float, base_name: str) -> None:
    print(f"{label:<48} {ours * 1e6:10.1f} us  {base_name} {base * 1e6:10.1f} us  "
          f"ratio {base / ours:6.2f}x")


def add_relu(shape: tuple[int, ...], bias: np.ndarray) -> tuple[Program, bytes]:
    """The same Add(x, bias) + Relu as a Program and as an ONNX model."""
    program = Program(
        [Slot.of("x", "float32", shape, "input"), Slot.of("b", "float32", bias.shape, "weight", 0),
         Slot.of("y", "float32", shape, "output")],
        [Step("binary", {"op": "add", "activation": "RELU"}, [0, 1], [2])],
        [0], [2], bias.tobytes(), 0, {}, "add_relu")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        "add_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        [numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return program, model.SerializeToString()


def bench_pool(quick: bool) -> None:
    pool = DevicePool(256 << 20)
    held = [pool.allocate(n) for n in range(64, 64 * 200, 64)]  # a realistic free list
    for b in held[::2]:
        b.release()

    def ours() -> None:
        pool.allocate(4096).release()

    n = 2000 if quick else 20000
    report("pool allocate+release 4 KiB", best_of(ours, 5, n),
           best_of(lambda: np.empty(4096, np.uint8), 5, n), "np.empty")
    for b in held[1::2]:
        b.release()


def bench_load(quick: bool) -> None:
    size = (16 if quick else 128) << 20
    weights = np.random.default_rng(0).standard_normal(size // 4).astype(np.float32)
    shape = (1, weights.size)
    program, model = add_relu(shape, weights.reshape(shape))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.lnp")
        onnx_path = os.path.join(tmp, "m.onnx")
        fmt.save(program, path)
        with open(onnx_path, "wb") as f:
            f.write(model)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        base = best_of(lambda: ort.InferenceSession(onnx_path, opts,
                                                    providers=["CPUExecutionProvider"]), 3, 1)
        mb = size >> 20
        pool = DevicePool(64 << 20)

        def ready_to_run() -> None:
            Executor(fmt.load(path, verify=False), pool).close()

        report(f"load {mb} MiB Program (mmap, no verify) + Executor", best_of(
            ready_to_run, 5, 3), base, "ort session")
        report(f"load {mb} MiB Program, mmap, verify=True", best_of(
            lambda: fmt.load(path), 3, 1), base, "ort session")
        report(f"load {mb} MiB Program, read()", best_of(
            lambda: fmt.load(path, mmap=False, verify=False), 3, 1), base, "ort session")


def bench_run(shape: tuple[int, ...], quick: bool) -> None:
    rng = np.random.default_rng(0)
    bias = rng.standard_normal((1, *shape[1:])).astype(np.float32)
    program, model = add_relu(shape, bias)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    x = rng.standard_normal(shape).astype(np.float32)
    pool = DevicePool(256 << 20)
    n = 200 if quick else 2000
    n = max(5, n // max(1, int(np.prod(shape)) // 65536))
    with Executor(program, pool) as ex, pool.allocate(x.nbytes) as xb, \
            pool.allocate(x.nbytes) as yb:
        xb.view(np.float32, shape)[:] = x
        base = best_of(lambda: sess.run(None, {"x": x}), 5, n)
        host = best_of(lambda: ex.run([x]), 5, n)
        stats = ex.copy_stats
        device = best_of(lambda: ex.run([xb], [yb]), 5, n)
        assert ex.copy_stats.bytes_copied_in == ex.copy_stats.bytes_copied_out == 0
        np.testing.assert_allclose(yb.view(np.float32, shape), sess.run(None, {"x": x})[0])
    label = "x".join(map(str, shape))
    report(f"Add+Relu {label}, host I/O ({stats.bytes_copied_in + stats.bytes_copied_out} B "
           "copied)", host, base, "ort run")
    report(f"Add+Relu {label}, device I/O (0 B copied)", device, base, "ort run")
    pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}, numpy {np.__version__}")
    bench_pool(args.quick)
    bench_load(args.quick)
    bench_run((1, 16), args.quick)
    bench_run((1, 64, 112, 112), args.quick)


if __name__ == "__main__":
    main()
