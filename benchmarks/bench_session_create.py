"""Session creation: cold compile vs warm compile cache vs EPContext model vs plain onnxruntime.

Models: onnx's light ResNet-50 (its ConstantOfShape weights replaced by seeded random
initializers, as in the tests: ~100 MB of weights) and models/transformer_encoder.onnx, both
with the batch fixed to 1 so the NPU Program is compiled at session creation. Per model, the
median over `--runs` session creations (3x as many for the quick modes), after two untimed
ones, of:

- plain onnxruntime: `onnxruntime.InferenceSession(model.onnx)` on its CPU EP;
- cold: `provider.InferenceSession` with an empty cache directory each time (onnxruntime parses
  the model, the EP converts the partition to Lite IR, compiles and stores it);
- warm: the same with the cache filled (CacheSession: the stored EPContext model is loaded,
  the source is not parsed, the Program is mapped without populate);
- EPContext: `provider.InferenceSession` on the model written by `litenpu compile` (cache
  entries referenced, not embedded).

Each mode runs in a fresh process (two untimed creations first), as a warm start would.
The pages touched on a hit are the Program's weight pages mapped into the process when the
kernel is built (`PartitionCacheStats.pages_touched`). Goals: warm >= 30x faster than cold and
>= 10x faster than plain onnxruntime; pages touched on a hit < 2 % of the Program.

Prints the table, writes docs/benchmarks/session_create.md and, with matplotlib (`pip install
litenpu[bench]`), docs/benchmarks/session_create.png.

    PYTHONPATH=. python3 benchmarks/bench_session_create.py [--runs 7]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from npu_oracle import randomized  # noqa: E402

import provider  # noqa: E402
from provider.commands.compile import compile_model_file  # noqa: E402
from provider.options import NpuOptions  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
OUT = os.path.join(ROOT, "docs", "benchmarks")
GOAL_COLD, GOAL_ORT, GOAL_PAGES = 30.0, 10.0, 0.02
WARMUP = 2  # untimed creations before each mode's timed ones


def _fixed_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    """Batch dims fixed to 1; initializers no longer listed as graph inputs (constants)."""
    used = {name for node in model.graph.node for name in node.input}
    kept = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    inits = {i.name for i in model.graph.initializer} | {
        v.name for v in model.graph.input if v.name not in used}
    keep = [v for v in model.graph.input if v.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].dim_value:
            dims[0].dim_value = 1
    return model


def models(workdir: Path) -> dict[str, Path]:
    """The benchmark's model files, written into `workdir`."""
    resnet = randomized(onnx.load(os.path.join(LIGHT, "light_resnet50.onnx")))
    encoder = onnx.load(os.path.join(ROOT, "models", "transformer_encoder.onnx"))
    paths = {}
    for name, model in (("resnet50 (light)", resnet), ("transformer_encoder", encoder)):
        path = workdir / f"{name.split()[0]}.onnx"
        onnx.save(_fixed_batch(model), str(path))
        paths[name] = path
    return paths


def _quiet() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # onnxruntime's unused-initializer warnings are noise here
    return options


def _npu(model: Path, **options: str) -> provider.InferenceSession:
    return provider.InferenceSession(str(model), _quiet(), providers=[
        ("NPUExecutionProvider", options), "CPUExecutionProvider"])


def median_seconds(create: Callable[[], object], runs: int, before: Callable[[], None] = lambda: None
                   ) -> tuple[float, object]:
    """Median seconds of `create()` (each preceded by an untimed `before()`), the last result.

    The previous result is released and garbage collected before the clock starts: only the
    creation is timed, not the teardown of the session before it.
    """
    times, result = [], None
    for _ in range(WARMUP):  # untimed: first-use costs of the process are not the mode's
        before()
        create()
    for _ in range(runs):
        result = None
        gc.collect()
        before()
        start = time.perf_counter()
        created = create()
        times.append(time.perf_counter() - start)
        result = created
    return statistics.median(times), result


MODES = ("ort", "cold", "warm", "context")


def measure(mode: str, path: Path, cache: Path, runs: int) -> dict:
    """One mode's median creation seconds (in this process), its last session checked against
    onnxruntime; for warm, the pages its hit touched."""
    options = {"cache_dir": str(cache), "model_name": path.stem}
    before: Callable[[], None] = lambda: None  # noqa: E731
    if mode == "ort":
        def create():
            return ort.InferenceSession(str(path), _quiet(), providers=["CPUExecutionProvider"])
    elif mode == "context":
        def create():
            return _npu(path.with_name(f"{path.stem}_ctx.onnx"))
    else:
        def create():
            return _npu(path, **options)
        if mode == "cold":
            def before():
                shutil.rmtree(cache, ignore_errors=True)
    seconds, sess = median_seconds(create, runs, before)
    plain = ort.InferenceSession(str(path), _quiet(), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)
             for i in plain.get_inputs()}
    np.testing.assert_allclose(sess.run(None, feeds)[0], plain.run(None, feeds)[0],
                               atol=1e-3, rtol=1e-3)
    result = {"seconds": seconds}
    if mode == "warm":
        stats = sess.cache_stats()
        assert stats.path == "context-model", stats
        result.update(pages=sum(p.pages_touched or 0 for p in stats.partitions),
                      weight_pages=sum(p.weight_pages for p in stats.partitions))
    return result


def _child(mode: str, path: Path, cache: Path, runs: int) -> dict:
    """`measure` in a fresh process: a warm start is timed as it happens, in a new process with
    nothing else loaded (a big session still alive here doubles the next one's creation)."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, str(path),
                          str(cache), str(runs)], capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"{mode} {path.name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_model(name: str, path: Path, workdir: Path, runs: int) -> dict:
    """One table row: each mode in its own process, in order (cold fills the cache)."""
    cache = workdir / f"cache-{path.stem}"
    quick = 3 * runs  # the cheap modes get more samples: their medians move with the load
    row: dict = {"model": name}
    row["ort"] = _child("ort", path, cache, quick)["seconds"]
    row["cold"] = _child("cold", path, cache, runs)["seconds"]
    os.sync()  # the cold runs wrote (and deleted) whole caches: let that I/O settle first
    warm = _child("warm", path, cache, quick)
    compile_model_file(path, path.with_name(f"{path.stem}_ctx.onnx"),
                       NpuOptions.parse({"cache_dir": str(cache)}), embed=False)
    row["context"] = _child("context", path, cache, quick)["seconds"]
    row.update(warm=warm["seconds"], pages=warm["pages"], weight_pages=warm["weight_pages"],
               program_mb=warm["weight_pages"] * 4096 / 1e6)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| model | Program MB | onnxruntime ms | cold ms | warm ms | EPContext ms | "
             "cold/warm | onnxruntime/warm | pages touched on hit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['program_mb']:.1f} | {r['ort'] * 1e3:.1f} | "
            f"{r['cold'] * 1e3:.1f} | {r['warm'] * 1e3:.1f} | {r['context'] * 1e3:.1f} | "
            f"{r['cold'] / r['warm']:.0f}x | {r['ort'] / r['warm']:.1f}x | "
            f"{r['pages']}/{r['weight_pages']} ({100 * r['pages'] / max(r['weight_pages'], 1):.2f} %) |")
    return "\n".join(lines)


def goals(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        checks = [(r["cold"] / r["warm"] >= GOAL_COLD, f"warm {r['cold'] / r['warm']:.0f}x faster "
                   f"than cold (goal {GOAL_COLD:.0f}x)"),
                  (r["ort"] / r["warm"] >= GOAL_ORT, f"{r['ort'] / r['warm']:.1f}x faster than "
                   f"plain onnxruntime (goal {GOAL_ORT:.0f}x)"),
                  (r["pages"] < GOAL_PAGES * r["weight_pages"], f"{r['pages']} pages touched "
                   f"on a hit (goal < {GOAL_PAGES:.0%} of {r['weight_pages']})")]
        lines += [f"- {r['model']}: {'met' if ok else 'MISSED'}: {text}" for ok, text in checks]
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install litenpu[bench]): no plot written")
        return False
    kinds = [("ort", "plain onnxruntime"), ("cold", "cold (convert + compile)"),
             ("warm", "warm cache"), ("context", "EPContext model")]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.2
    for k, (key, label) in enumerate(kinds):
        xs = [i + (k - 1.5) * width for i in range(len(rows))]
        ax.bar(xs, [r[key] * 1e3 for r in rows], width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [r["model"] for r in rows])
    ax.set_ylabel("session creation, ms (median, log scale)")
    ax.set_title("litenpu: session creation")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="session creations per mode")
    parser.add_argument("--child", nargs=4, metavar=("MODE", "MODEL", "CACHE", "RUNS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    provider.register()
    if args.child:
        mode, model, cache, runs = args.child
        print(json.dumps(measure(mode, Path(model), Path(cache), int(runs))))
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="litenpu-bench-"))
    try:
        rows = [bench_model(name, path, workdir, args.runs)
                for name, path in models(workdir).items()]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = table(rows)
    verdict = goals(rows)
    print(text)
    print(verdict)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "session_create.md"), "w") as f:
        f.write("# Session creation: compile cache, CacheSession, EPContext\n\n"
                "`python3 benchmarks/bench_session_create.py` (median of "
                f"{args.runs} cold and {3 * args.runs} other session creations per mode; see "
                "the script's docstring), "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
                f"load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1/5/15 min): "
                "onnxruntime's own session creation varies by 2x with the load.\n\n"
                f"{text}\n\n{verdict}\n")
    if plot(rows, os.path.join(OUT, "session_create.png")):
        print(f"wrote {OUT}/session_create.md and session_create.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
