"""NPU-sim latency vs onnxruntime CPU (2 threads) on real architectures.

For each model: import_onnx -> compile_model -> Executor, and an onnxruntime CPU session on
the same ONNX model, both timed on the same seeded input (median of --runs after warm-up).
Prints the speed ratio (onnxruntime time / NPU time: >= 1 means the NPU sim is faster; the
goal is >= 0.7), a per-kernel profile (where the NPU's time goes), and the planned internal
arena against the sum of all intermediate tensor sizes.

The light models' ConstantOfShape weights are replaced by seeded random ones (as in the
tests) so both runtimes see realistic values (no denormals, no saturated softmax).

Measure on an otherwise idle machine: numpy's OpenBLAS threads spin-wait, and when another
process holds a core its multi-threaded GEMMs slow down 3-10x (single-threaded ones do not);
on a shared machine run with OPENBLAS_NUM_THREADS=1 (and --ort-threads 1 for a per-core
comparison). The BLAS setting and the load average are printed with the results.

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/bench_npu_vs_ort.py [--runs 10] [--ort-threads 2]
        [--models resnet50 squeezenet shufflenet mobilenet]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from npu_oracle import ort_values, randomized, subgraph, supported_components  # noqa: E402

from converters.onnx_import import import_onnx  # noqa: E402
from provider.npu.compiler import compile_model  # noqa: E402
from provider.npu.executor import Executor  # noqa: E402
from provider.npu.kernels import KERNELS, Kernel  # noqa: E402
from provider.npu.memory import DevicePool  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
DEFAULT = ["resnet50", "squeezenet", "shufflenet", "mobilenet"]


def model_path(name: str) -> str | None:
    """A light model by short name, else the first models/**/*<name>*.onnx."""
    light = os.path.join(LIGHT, f"light_{name}.onnx")
    if os.path.exists(light):
        return light
    found = sorted(glob.glob(os.path.join(ROOT, "models", "**", f"*{name}*.onnx"), recursive=True))
    return found[0] if found else None


def median_ms(fn: Callable[[], object], runs: int) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def timed_kernels(spent: Counter) -> dict[str, Kernel]:
    """The kernel table with every run timed into spent[kernel name]."""

    def wrap(k: Kernel) -> Kernel:
        def run(inputs, outputs, attrs):
            start = time.perf_counter()
            k.run(inputs, outputs, attrs)
            spent[k.name] += time.perf_counter() - start
        return Kernel(k.name, run, k.inplace)

    return {name: wrap(k) for name, k in KERNELS.items()}


def bench(name: str, path: str, runs: int, pool: DevicePool, ort_threads: int) -> None:
    model = onnx.load(path)
    if os.path.dirname(path) == LIGHT:
        model = randomized(model)
    inits = {i.name for i in model.graph.initializer}
    vi = next(i for i in model.graph.input if i.name not in inits)
    shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    feeds = {vi.name: x}
    start = time.perf_counter()
    lite, _ = import_onnx(model)
    part = ""
    nodes = supported_components(lite)[0]
    if len(nodes) < len(lite.nodes):  # time the largest NPU part, its inputs from onnxruntime
        sub = subgraph(lite, nodes)
        part = f"; NPU part {len(nodes)} of {len(lite.nodes)} nodes, the rest is not timed"
        names = [lite.tensors[t].name for t in sub.inputs]
        feeds = ort_values(model, {vi.name: x}, names)
        want_names = [lite.tensors[t].name for t in sub.outputs]
        lite = sub
    program = compile_model(lite, {k: v.shape for k, v in feeds.items()})
    compile_s = time.perf_counter() - start
    inputs = [feeds[program.slots[i].name] for i in program.inputs]

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ort_threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, {vi.name: x}) if not part else list(ort_values(model, {vi.name: x}, want_names).values())
    ort_ms = median_ms(lambda: sess.run(None, {vi.name: x}), runs)

    with Executor(program, pool) as ex:
        got = [np.array(v) for v in ex.run(inputs)]
        npu_ms = median_ms(lambda: ex.run(inputs), runs)
    err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))

    spent: Counter = Counter()
    with Executor(program, pool, kernels=timed_kernels(spent)) as ex:
        for _ in range(runs):
            ex.run(inputs)
    counts = Counter(s.kernel for s in program.steps)
    total = sum(spent.values())

    internal = [s for s in program.slots if s.kind == "internal"]
    tensors = sum({s.name: s.nbytes for s in internal}.values())
    print(f"\n== {name}  ({os.path.basename(path)}; {len(program.steps)} steps, "
          f"import+compile {compile_s:.2f} s, max |npu - ort| {err:.2e}{part})")
    print(f"   onnxruntime ({ort_threads} threads) {ort_ms:8.2f} ms   npu-sim {npu_ms:8.2f} ms   "
          f"speed ratio {ort_ms / npu_ms:.2f}x (goal >= 0.7x)")
    print(f"   arena {program.internal_bytes / 2**20:.2f} MiB vs {tensors / 2**20:.2f} MiB of "
          f"intermediate tensors ({program.internal_bytes / max(tensors, 1):.0%}); "
          f"weights {program.weight_bytes / 2**20:.2f} MiB")
    print("   profile:")
    for kernel, seconds in spent.most_common():
        print(f"     {kernel:14s} {seconds / runs * 1e3:8.2f} ms  {seconds / total:6.1%}  "
              f"({counts[kernel]} steps)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--models", nargs="*", default=DEFAULT)
    parser.add_argument("--ort-threads", type=int, default=2)
    args = parser.parse_args(argv)
    pool = DevicePool(capacity=1 << 31)
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(default)')}, "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for name in args.models:
        path = model_path(name)
        if path is None:
            print(f"\n== {name}: not found (light models or models/**/*{name}*.onnx)")
            continue
        bench(name, path, args.runs, pool, args.ort_threads)


if __name__ == "__main__":
    main()
