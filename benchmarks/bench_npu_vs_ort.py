"""NPU-sim latency vs onnxruntime CPU on real architectures, side by side.

For each model: import_onnx -> compile_model -> Executor, and an onnxruntime CPU session on
the same ONNX model, timed on the same seeded input in interleaved blocks of runs (five
onnxruntime runs, a pause for its spinning threads to settle, five NPU runs, a pause, five
runs of the same Program on the numpy kernels alone, and again; the first two runs of
every block are warm-ups), so a neighbour's load hits all alike. Prints the median and the
10th-90th percentile spread of each, the speed ratio (onnxruntime time / NPU time, the
median over turns of each turn's ratio of block medians, see `paired_ratio`: >= 1 means
the NPU sim is faster; the goal is >= 0.7), how many steps run on the native kernels, the accuracy against onnxruntime, a profile
(time per kernel and the slowest steps, on the NPU's cores) and the planned internal arena
against the sum of all intermediate tensor sizes.

The onnx package's light models ship with all-equal weights (ConstantOfShape), under which
every architecture computes a constant and any error hides; they are replaced by seeded
random weights (as in the tests) stored as real initializers (IR >= 4, not graph inputs),
so onnxruntime may constant-fold and pre-pack them as it would for a real model. Accuracy
is checked on every output and on the logits before a final softmax (a softmax of random
logits is nearly one-hot, which would hide errors).

Environment: the machine exports OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for old OpenBLAS
builds; with a current numpy they force the Haswell kernels (half the AVX-512 speed), so
this script drops both before numpy loads (in its own process only). The BLAS libraries
(numpy's, and the NPU's single-threaded scipy-openblas32), their kernel and thread count,
the NPU core count and the load average are printed. The NPU splits large kernels over its
own cores (--npu-threads, default: the onnxruntime thread count); numpy's OpenBLAS, used only
by the numpy kernels, is set to one thread (OPENBLAS_NUM_THREADS=1 unless set) so that it
does not oversubscribe the cores together with them.

    python3 benchmarks/bench_npu_vs_ort.py [--runs 60] [--ort-threads 2]
        [--npu-threads 2] [--models resnet50 squeezenet shufflenet mobilenet] [--quick]
"""

from __future__ import annotations

from blas_env import DROPPED_ENV  # isort: skip  (first: before numpy loads)

import argparse  # noqa: E402
import ctypes  # noqa: E402
import dataclasses  # noqa: E402
import glob  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from npu_oracle import ort_values, randomized, subgraph, supported_components  # noqa: E402

from converters.onnx_import import import_onnx  # noqa: E402
from provider.bench.timing import interleaved_ms, paired_ratio  # noqa: E402
from provider.npu import native  # noqa: E402
from provider.npu.compiler import compile_model  # noqa: E402
from provider.npu.executor import Executor, step_seconds, step_stamps  # noqa: E402
from provider.npu.memory import DevicePool  # noqa: E402
from provider.npu.ops import KERNELS, parallel  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
DEFAULT = ["resnet50", "squeezenet", "shufflenet", "mobilenet"]


def model_path(name: str) -> str | None:
    """A light model by short name, else the first models/**/*<name>*.onnx."""
    light = os.path.join(LIGHT, f"light_{name}.onnx")
    if os.path.exists(light):
        return light
    found = sorted(glob.glob(os.path.join(ROOT, "models", "**", f"*{name}*.onnx"), recursive=True))
    return found[0] if found else None


def blas_setup() -> str:
    """Every BLAS loaded in this process (numpy's, the NPU's): library, kernel (core) and
    thread count."""
    libs = sorted({line.split()[-1] for line in open("/proc/self/maps")
                   if "blas" in os.path.basename(line.split()[-1]).lower()})
    found = [_describe_blas(path) for path in libs]
    if any(found):
        return "; ".join(f for f in found if f)
    info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    return f"{info.get('name')} {info.get('version')} (kernel and threads unknown: {libs or 'no BLAS library mapped'})"


def _describe_blas(path: str) -> str | None:
    """An OpenBLAS library's version, kernel and thread count, or None."""
    lib = ctypes.CDLL(path)
    for prefix, suffix in (("openblas_", ""), ("scipy_openblas_", "64_"), ("scipy_openblas_", "")):
        core = getattr(lib, f"{prefix}get_corename{suffix}", None)
        nthreads = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
        config = getattr(lib, f"{prefix}get_config{suffix}", None)
        if core is None or nthreads is None or config is None:
            continue
        core.restype = config.restype = ctypes.c_char_p
        version = config().decode().split("  ")[0]
        return f"{version}, {core().decode()} kernel, {nthreads()} thread(s) ({os.path.basename(path)})"
    return None


def as_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with initializers that are not graph inputs (IR >= 4) and none unused."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = max(out.ir_version, 4)
    inits = {i.name for i in out.graph.initializer}
    inputs = [i for i in out.graph.input if i.name not in inits]
    used = {name for node in out.graph.node for name in node.input}
    initializers = [i for i in out.graph.initializer if i.name in used]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    del out.graph.initializer[:]
    out.graph.initializer.extend(initializers)
    return out


def flat(blocks: list[list[float]]) -> list[float]:
    return [t for b in blocks for t in b]


def spread(ms: list[float]) -> str:
    """Median and 10th-90th percentile of a list of times."""
    p10, p50, p90 = np.percentile(ms, [10, 50, 90])
    return f"{p50:8.2f} ms [{p10:.2f}-{p90:.2f}]"


WARM_UP_RUNS = 5


def profile(program, pool: DevicePool, inputs: list[np.ndarray], runs: int) -> list[float]:
    """Each step's median seconds per run over `runs` runs after a few warm-up runs, on the
    NPU's cores (native steps timed in C). Medians: a mean over runs that start cold made
    steps look up to 1.6x slower in the model than alone, which they are not."""
    stamps, per_run = step_stamps(program), []
    with Executor(program, pool) as ex:
        for _ in range(WARM_UP_RUNS):
            ex.run(inputs)
        for _ in range(runs):
            ex.run(inputs, stamps=stamps)
            per_run.append(step_seconds(stamps))
        return list(np.median(per_run, axis=0))


def describe(program, number: int) -> str:
    """One step as kernel, input -> output shape and its window attributes."""
    step = program.steps[number]
    a = step.attrs
    shape = program.slots[step.inputs[0]].shape if step.inputs else ()
    extra = "".join(f" {k}={a[k]}" for k in ("kernel", "stride", "group") if k in a)
    return f"{step.kernel} {list(shape)} -> {list(program.slots[step.outputs[0]].shape)}{extra}"


def bench(name: str, path: str, runs: int, pool: DevicePool, ort_threads: int) -> None:
    model = onnx.load(path)
    if os.path.dirname(path) == LIGHT:
        model = as_constants(randomized(model))
    vi = model.graph.input[0]
    shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    feeds = {vi.name: x}
    start = time.perf_counter()
    lite, _ = import_onnx(model)
    part = ""
    nodes = supported_components(lite)[0]
    if len(nodes) < len(lite.nodes):  # time the largest NPU part, its inputs from onnxruntime
        lite = subgraph(lite, nodes)
        feeds = ort_values(model, {vi.name: x}, [lite.tensors[t].name for t in lite.inputs])
        part = f"; only the NPU part is timed ({len(nodes)} nodes, rest on CPU)"
    input_shapes = {k: v.shape for k, v in feeds.items()}
    program = compile_model(lite, input_shapes)
    compile_s = time.perf_counter() - start
    inputs = [feeds[program.slots[i].name] for i in program.inputs]

    # accuracy: every NPU output and the logits before a softmax, against onnxruntime
    # (a softmax the importer reshaped reads a tensor of its own: onnxruntime has no value)
    onnx_values = {o for n in model.graph.node for o in n.output}
    logits = [n.inputs[0] for n in lite.nodes if n.op in ("Softmax", "LogSoftmax")
              and lite.tensors[n.inputs[0]].name in onnx_values]
    checked = [*lite.outputs, *logits]
    probe = compile_model(dataclasses.replace(lite, outputs=checked, subgraphs=[]), input_shapes)
    want = ort_values(model, {vi.name: x}, [lite.tensors[t].name for t in checked])
    with Executor(probe, pool) as ex:
        got = dict(zip(ex.output_names, (np.array(v) for v in ex.run(inputs)), strict=True))
    err = max(float(np.max(np.abs(got[k] - w))) for k, w in want.items())
    scale = max(float(np.max(np.abs(w))) for w in want.values())

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = ort_threads
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    with Executor(program, pool) as ex, Executor(program, pool, kernels=KERNELS) as numpy_ex:
        native_steps = ex.native_steps
        ort_blocks, npu_blocks, numpy_blocks = interleaved_ms(
            [lambda: sess.run(None, {vi.name: x}), lambda: ex.run(inputs),
             lambda: numpy_ex.run(inputs)], runs)
    ort_ms, npu_ms, numpy_ms = flat(ort_blocks), flat(npu_blocks), flat(numpy_blocks)
    seconds = profile(program, pool, inputs, runs)
    spent: Counter = Counter()
    for step, sec in zip(program.steps, seconds, strict=True):
        spent[step.kernel] += sec
    counts = Counter(s.kernel for s in program.steps)
    total = sum(seconds) or 1.0

    internal = [s for s in program.slots if s.kind == "internal"]
    tensors = sum({s.name: s.nbytes for s in internal}.values())
    ratio = paired_ratio(ort_blocks, npu_blocks)
    print(f"\n== {name}  ({os.path.basename(path)}; {len(program.steps)} steps, "
          f"import+compile {compile_s:.2f} s{part})")
    print(f"   max |npu - ort| {err:.2e} over outputs and logits, {err / scale:.1e} of the "
          f"largest |value| {scale:.3g}")
    print(f"   onnxruntime ({ort_threads} threads) {spread(ort_ms)}   "
          f"npu-sim ({native.threads()} cores) {spread(npu_ms)}   "
          f"speed ratio {ratio:.2f}x (goal >= 0.7x)   load {os.getloadavg()[0]:.2f}")
    print(f"   {native_steps} of {len(program.steps)} steps native; numpy kernels alone "
          f"{spread(numpy_ms)} ({float(np.median(numpy_ms) / np.median(npu_ms)):.1f}x slower)")
    print(f"   arena {program.internal_bytes / 2**20:.2f} MiB vs {tensors / 2**20:.2f} MiB of "
          f"intermediate tensors ({program.internal_bytes / max(tensors, 1):.0%}); "
          f"weights {program.weight_bytes / 2**20:.2f} MiB")
    print(f"   profile (per kernel, {native.threads()} cores):")
    for kernel, sec in spent.most_common():
        print(f"     {kernel:14s} {sec * 1e3:8.2f} ms  {sec / total:6.1%}  "
              f"({counts[kernel]} steps)")
    print("   slowest steps:")
    for number in sorted(range(len(seconds)), key=seconds.__getitem__, reverse=True)[:5]:
        print(f"     {seconds[number] * 1e3:8.2f} ms  {describe(program, number)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--models", nargs="*", default=DEFAULT)
    parser.add_argument("--ort-threads", type=int, default=2)
    parser.add_argument("--npu-threads", type=int, default=None,
                        help="NPU cores (native kernels and ops.parallel); "
                             "default: --ort-threads")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 3 runs of squeezenet and mobilenet only")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.models = 3, ["squeezenet", "mobilenet"]
    ort.set_default_logger_severity(3)  # no initializer warnings from the oracle sessions
    parallel.set_threads(args.npu_threads or args.ort_threads)
    native.set_threads(args.npu_threads or args.ort_threads)
    pool = DevicePool(capacity=1 << 31)
    native.library()  # map the NPU's BLAS before it is described
    dropped = ", ".join(f"{k}={v}" for k, v in DROPPED_ENV.items()) or "none"
    print(f"BLAS: {blas_setup()}; OPENBLAS_NUM_THREADS="
          f"{os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}; dropped from env: {dropped}")
    print(f"numpy {np.__version__}, onnxruntime {ort.__version__}; load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")
    for name in args.models:
        path = model_path(name)
        if path is None:
            print(f"\n== {name}: not found (light models or models/**/*{name}*.onnx)")
            continue
        bench(name, path, args.runs, pool, args.ort_threads)


if __name__ == "__main__":
    main()
