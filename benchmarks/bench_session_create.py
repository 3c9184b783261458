"""Session creation (+ first run): plain onnxruntime vs the NPU EP cold (no cache / a cache
to fill) vs warm (compile cache) vs an EPContext model, and onnxruntime's own floor.

Models: onnx's light ResNet-50 (its ConstantOfShape weights replaced by seeded random
initializers, as in the tests: ~100 MB of weights), the batch fixed to 1 (static: its Program
is compiled at session creation); the same ResNet-50 and the zoo's mobilenet_v2 with a dynamic
batch, height and width (`*_dynamic`: one Program per concrete shape, got at the first run)
and the zoo's yolo_detector (dynamic batch and size, shape arithmetic on CPU between its NPU
partitions); the zoo models mobilenet_v2, resnet_block and transformer_encoder, batch 1. Per
model and mode, in a fresh process whose runtime was first warmed on another model (the zoo's
`resnet_block` or `mobilenet_v2`: imports, library loading and first-use costs are paid before
the clock starts, but no cache of this model's), the median over `--runs` of the session
creation and of creation + first run (at the shape in `RUN_SHAPES`, else batch 1):

- onnxruntime: `onnxruntime.InferenceSession(model.onnx)` on its CPU EP;
- no cache: `provider.InferenceSession` without a cache directory (import, compile);
- cold: with an empty cache directory each time (import, compile, store);
- warm: with the cache filled (CacheSession: the stored EPContext model is loaded, the source
  is not parsed; a static partition's Program is mapped at creation, a dynamic one's on the
  first run of each shape, by a key built from its descriptor, the Lite IR never read);
- EPContext: `provider.InferenceSession` on the model written by `litenpu compile` (cache
  entries referenced, not embedded);
- source floor: onnxruntime's creation of the source model with the EP claiming every node
  in one partition without reading them and compiling nothing (`null_ep`): onnxruntime's own
  share of a creation without a cache, the part no work of the EP's can remove;
- floor: onnxruntime's creation of the CacheSession's stored EPContext model alone
  (`onnxruntime.InferenceSession(context.onnx)` selecting the NPU EP) with the EP doing the
  least an EP can: GetCapability claims the EPContext nodes without reading them and Compile
  returns kernels that do nothing (`null_ep`). No first run (those kernels compute nothing).

Goals: (issue 16) no cache <= 1.2x onnxruntime's creation, cold <= 2x; (issue 6) warm creation
>= 30x faster than cold and >= 10x faster than onnxruntime's, pages touched on a hit < 2 % of
the Program's; (issue 21) for the CNNs, warm creation + first run >= 10x faster than
onnxruntime's creation + first run and >= 30x faster than cold's; for the transformer, warm
creation at or under the floor. A first run includes one inference, which onnxruntime and the
NPU both pay: `bound` is the best creation + first run ratio possible, onnxruntime's creation +
first run over the NPU's steady-state run alone. The EP's own split of a cold creation (the
medians of its counters: GetCapability reading the graph, import, assess; compile; Compile's
kernels; cache lookups and stores) is printed per model, with `rest`: what the cold creation
spends beyond the source floor and those stages (the session wrapper, e.g. fingerprinting the
source, and the crossings into the EP).

Prints the table, writes docs/benchmarks/session_create.md and, with matplotlib (`pip install
litenpu[bench]`), docs/benchmarks/session_create.png.

    PYTHONPATH=. python3 benchmarks/bench_session_create.py [--runs 7] [--models resnet50 ...]
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
from provider.ort.tensors import random_feed  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
OUT = os.path.join(ROOT, "docs", "benchmarks")
GOAL_COLD, GOAL_ORT, GOAL_PAGES = 30.0, 10.0, 0.02
GOAL_NOCACHE, GOAL_FILL = 1.2, 2.0  # creation vs onnxruntime's: no cache, a cache to fill
ZOO = ("mobilenet_v2", "resnet_block", "transformer_encoder")
DYNAMIC = ("resnet50_dynamic", "mobilenet_v2_dynamic", "yolo_detector")
NOT_CNN = ("transformer_encoder",)  # its goal is the floor
# the symbolic dims of the dynamic models' first run (others: batch 1)
RUN_SHAPES = {"resnet50_dynamic": {"batch": 1, "height": 224, "width": 224},
              "mobilenet_v2_dynamic": {"batch": 1, "height": 64, "width": 64},
              "yolo_detector": {"batch": 1, "height": 64, "width": 64}}


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


def _dynamic_image(model: onnx.ModelProto) -> onnx.ModelProto:
    """The first input's dims [N, C, H, W] made symbolic: batch, (C), height, width."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, name in zip(dims, ("batch", None, "height", "width"), strict=True):
        if name is not None:
            dim.dim_param = name
    for value in model.graph.output:
        for dim in value.type.tensor_type.shape.dim[:1]:
            dim.dim_param = "batch"
    return model


def models(workdir: Path, names: list[str] | None = None) -> dict[str, Path]:
    """The benchmark's model files (all, or those named), written into `workdir`."""
    from provider.zoo import build

    def resnet50() -> onnx.ModelProto:
        return _fixed_batch(randomized(onnx.load(os.path.join(LIGHT, "light_resnet50.onnx"))))

    makers = {"resnet50": resnet50,
              "resnet50_dynamic": lambda: _dynamic_image(resnet50()),
              "mobilenet_v2_dynamic": lambda: _dynamic_image(build("mobilenet_v2")),
              "yolo_detector": lambda: build("yolo_detector"),
              **{name: (lambda n=name: _fixed_batch(build(n))) for name in ZOO}}
    paths = {}
    for name, make in makers.items():
        if names and name not in names:
            continue
        path = workdir / f"{name}.onnx"
        onnx.save(make(), str(path))
        paths[name] = path
    return paths


def _feeds(sess, dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs for a session (symbolic dims from `dims`, else 1)."""
    rng = np.random.default_rng(0)
    return {i.name: random_feed(i, dims or {}, rng) for i in sess.get_inputs()}


def _warm_up(runtime: str, path: Path) -> None:
    """First-use costs of this runtime (imports, library loading, thread pools), paid on
    another model than `path`: creations and a run."""
    from provider.zoo import build

    other = "mobilenet_v2" if path.stem != "mobilenet_v2" else "resnet_block"
    model = build(other).SerializeToString()
    for _ in range(2):
        sess = (ort.InferenceSession(model, _quiet(), providers=["CPUExecutionProvider"])
                if runtime == "ort" else provider.InferenceSession(model, _quiet(), providers=[
                    "NPUExecutionProvider", "CPUExecutionProvider"]))
        sess.run(None, _feeds(sess))


def _quiet() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # onnxruntime's unused-initializer warnings are noise here
    return options


def _npu(model: Path, **options: str) -> provider.InferenceSession:
    return provider.InferenceSession(str(model), _quiet(), providers=[
        ("NPUExecutionProvider", options), "CPUExecutionProvider"])


def timed(create: Callable[[], object], runs: int, before: Callable[[], None],
          dims: dict[str, int] | None = None, first_run: bool = True
          ) -> tuple[float, float | None, object]:
    """Median seconds of `create()` and of `create()` + its first run at `dims` (each preceded
    by an untimed `before()`), and the last session. The previous session is released and
    garbage collected before the clock starts: only creation and first run are timed."""
    created_s, first_s, sess = [], [], None
    for _ in range(runs):
        sess = None
        gc.collect()
        before()
        start = time.perf_counter()
        sess = create()
        created = time.perf_counter()
        created_s.append(created - start)
        if first_run:
            feeds = _feeds(sess, dims)
            ready = time.perf_counter()  # making the inputs is not the runtime's time
            sess.run(None, feeds)
            first_s.append(created - start + time.perf_counter() - ready)
    return (statistics.median(created_s), statistics.median(first_s) if first_run else None,
            sess)


def steady_run(sess, dims: dict[str, int] | None, runs: int = 5) -> float:
    """Median seconds of a run once the session has run (what an inference itself costs)."""
    feeds = _feeds(sess, dims)
    sess.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def null_ep(claim_all: bool = False) -> None:
    """Make this process's NPU EP do the least an EP can: GetCapability claims every one of our
    EPContext nodes (op type and domain only, no attribute read, no import), or with
    `claim_all` every node of the graph as one partition, and Compile returns kernels whose
    Compute does nothing. onnxruntime's creation of an EPContext model through it is
    onnxruntime's own cost of that model: the floor of a warm start; of the source model with
    `claim_all`, the floor of a creation without a cache (loading, its optimizations before
    it asks the EP, partitioning, session state)."""
    import ctypes as C

    from provider.ort import abi, compute, epcontext
    from provider.ort import ep as ep_module
    from provider.ort.capability import Claim, Placement

    class NullKernel:
        """An OrtNodeComputeInfo whose Compute returns at once."""

        cache_entry = None

        def __init__(self, ep, graph: int, fused: int):
            s = self.struct = abi.OrtNodeComputeInfo()
            s.ort_version_supported = ep.ort.api_version
            s.CreateState = compute.address(compute._create_state)
            s.Compute = compute.address(compute._compute)
            s.ReleaseState = compute.address(compute._release_state)
            self.address = C.addressof(s)
            compute._KERNELS[self.address] = self

        def compute(self, context: int) -> None:
            pass

        def close(self) -> None:
            compute._KERNELS.pop(self.address, None)

    def claim(o: abi.Ort, graph: int, options, compile_whole=None) -> Claim:
        nodes = o.array("Graph_GetNumNodes", "Graph_GetNodes", graph)
        if claim_all:
            return Claim(Placement(), [list(nodes)] if nodes else [])
        ours = [[n] for n in nodes if o.string("Node_GetOperatorType", n) == epcontext.OP_TYPE
                and o.string("Node_GetDomain", n) == epcontext.DOMAIN]
        return Claim(Placement(), ours)

    ep_module.claim = claim
    ep_module.FusedKernel = type("NullKernels", (), {"build": staticmethod(NullKernel)})


def stored_context(cache: Path) -> Path:
    """The EPContext model of the CacheSession entry in `cache`."""
    from provider.cache import CompileCache
    from provider.ort.cache_session import CONTEXT_MODEL

    (entry,) = [e for e in CompileCache(cache).entries()
                if e.program_name.startswith("CacheSession")]
    return entry.path / CONTEXT_MODEL


def measure(mode: str, path: Path, cache: Path, runs: int) -> dict:
    """One mode's median creation (and creation + first run) seconds in this process, after
    its runtime was warmed on another model; its last session checked against onnxruntime;
    for warm, the pages its hit touched and a steady run; for cold, where the EP spent its
    time."""
    _warm_up("ort" if mode == "ort" else "npu", path)
    dims = RUN_SHAPES.get(path.stem)
    options = {"cache_dir": str(cache), "model_name": path.stem}
    before: Callable[[], None] = lambda: None  # noqa: E731
    if mode in ("floor", "source_floor"):
        null_ep(claim_all=mode == "source_floor")
        model = str(stored_context(cache) if mode == "floor" else path)

        def create():
            sess_options = _quiet()
            sess_options.add_provider_for_devices(provider.ep_devices(), {})
            return ort.InferenceSession(model, sess_options)

        seconds, _, _ = timed(create, runs, before, first_run=False)
        return {"seconds": seconds, "first_run": None}
    if mode == "ort":
        def create():
            return ort.InferenceSession(str(path), _quiet(), providers=["CPUExecutionProvider"])
    elif mode == "context":
        def create():
            return _npu(path.with_name(f"{path.stem}_ctx.onnx"))
    elif mode == "nocache":
        def create():
            return _npu(path)
    else:
        splits: list[dict[str, float]] = []  # each cold creation's EP counters

        def create():
            sess = _npu(path, **options)
            if mode == "cold":
                splits.extend(dict(ep.counters.seconds) for ep in sess._npu_eps)
            return sess
        if mode == "cold":
            def before():
                shutil.rmtree(cache, ignore_errors=True)
    seconds, first_run, sess = timed(create, runs, before, dims)
    plain = ort.InferenceSession(str(path), _quiet(), providers=["CPUExecutionProvider"])
    feeds = _feeds(plain, dims)
    np.testing.assert_allclose(sess.run(None, feeds)[0], plain.run(None, feeds)[0],
                               atol=1e-3, rtol=1e-3)
    result = {"seconds": seconds, "first_run": first_run}
    if mode in ("ort", "warm"):
        result["steady"] = steady_run(sess, dims)
    if mode == "warm":
        stats = sess.cache_stats()
        assert stats.path == "context-model", stats
        (ep,) = sess._npu_eps
        assert (ep.counters.imports, ep.counters.compiles) == (0, 0), ep.counters
        result.update(pages=sum(p.pages_touched or 0 for p in stats.partitions),
                      weight_pages=sum(p.weight_pages for p in stats.partitions))
    if mode == "cold":  # per stage, the median over the creations
        result.update(split={stage: statistics.median(d.get(stage, 0.0) for d in splits)
                             for stage in {k for d in splits for k in d}})
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
    row: dict = {"model": name}
    row["source_floor"] = _child("source_floor", path, cache, runs)["seconds"]
    for mode in ("ort", "nocache", "cold"):
        result = _child(mode, path, cache, runs)
        row[mode], row[f"{mode}_run"] = result["seconds"], result["first_run"]
        row.update({f"{mode}_{k}": v for k, v in result.items()
                    if k not in ("seconds", "first_run")})
    os.sync()  # the cold runs wrote (and deleted) whole caches: let that I/O settle first
    warm = _child("warm", path, cache, runs)
    floor = _child("floor", path, cache, runs)
    compile_model_file(path, path.with_name(f"{path.stem}_ctx.onnx"),
                       NpuOptions.parse({"cache_dir": str(cache)}), embed=False)
    context = _child("context", path, cache, runs)
    row.update(warm=warm["seconds"], warm_run=warm["first_run"], warm_steady=warm["steady"],
               pages=warm["pages"], weight_pages=warm["weight_pages"],
               program_mb=warm["weight_pages"] * 4096 / 1e6, floor=floor["seconds"],
               context=context["seconds"], context_run=context["first_run"])
    return row


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def table(rows: list[dict]) -> str:
    lines = ["Session creation (ms, medians)", "",
             "| model | Program MB | onnxruntime | no cache | cold | warm | EPContext | floor | "
             "no cache / ort | cold / ort | cold / warm | ort / warm | warm / floor | "
             "pages touched on hit |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['program_mb']:.1f} | {_ms(r['ort'])} | {_ms(r['nocache'])} | "
            f"{_ms(r['cold'])} | {_ms(r['warm'])} | {_ms(r['context'])} | {_ms(r['floor'])} | "
            f"{r['nocache'] / r['ort']:.2f}x | {r['cold'] / r['ort']:.2f}x | "
            f"{r['cold'] / r['warm']:.0f}x | {r['ort'] / r['warm']:.1f}x | "
            f"{r['warm'] / r['floor']:.2f}x | "
            f"{r['pages']}/{r['weight_pages']} ({100 * r['pages'] / max(r['weight_pages'], 1):.2f} %) |")
    lines += ["", "Creation + first run (ms, medians; `run`: one steady-state run; `bound`: the "
              "best ort / warm possible, onnxruntime's creation + first run over the NPU's "
              "steady run)", "",
              "| model | onnxruntime | no cache | cold | warm | EPContext | ort run | NPU run | "
              "ort / warm | cold / warm | bound |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | " + " | ".join(
            _ms(r[f"{m}_run"]) for m in ("ort", "nocache", "cold", "warm", "context"))
            + f" | {_ms(r['ort_steady'])} | {_ms(r['warm_steady'])} | "
            f"{r['ort_run'] / r['warm_run']:.1f}x | {r['cold_run'] / r['warm_run']:.0f}x | "
            f"{r['ort_run'] / r['warm_steady']:.1f}x |")
    lines += ["", "Where a cold creation's time goes (ms, medians over the cold creations of the "
              "EP's counters: `read` GetCapability reading onnxruntime's graph, `kernel` the rest "
              "of Compile, e.g. the Executors' native plans), beside onnxruntime's own share of a "
              "creation without a cache (`source floor`: the source model through an EP that "
              "claims every node and computes nothing), `rest` (cold - source floor - the EP's "
              "stages: the session wrapper, the callbacks' crossings, onnxruntime's work beyond "
              "the floor) and what the no-cache goal leaves the EP (goal x onnxruntime's "
              "creation - source floor):", "",
              "| model | " + " | ".join(SPLIT) + " | EP | source floor | rest | "
              "left for the EP at the goal |",
              "|---|" + "---:|" * (len(SPLIT) + 4)]
    for r in rows:
        spent = sum(r['cold_split'].get(k, 0.0) for k in SPLIT)
        lines.append(f"| {r['model']} | " + " | ".join(
            _ms(r['cold_split'].get(k, 0.0)) for k in SPLIT)
            + f" | {_ms(spent)} | {_ms(r['source_floor'])} | "
            f"{_ms(r['cold'] - r['source_floor'] - spent)} | "
            f"{_ms(GOAL_NOCACHE * r['ort'] - r['source_floor'])} |")
    return "\n".join(lines)


# NpuEp.counters.seconds keys, in the order a creation spends them
SPLIT = ("read", "import", "assess", "compile", "kernel", "cache")


def goals(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        checks = [(r["nocache"] / r["ort"] <= GOAL_NOCACHE, f"no cache {r['nocache'] / r['ort']:.2f}x "
                   f"onnxruntime's creation (goal <= {GOAL_NOCACHE}x)"),
                  (r["cold"] / r["ort"] <= GOAL_FILL, f"cold with a cache to fill "
                   f"{r['cold'] / r['ort']:.2f}x onnxruntime's (goal <= {GOAL_FILL}x)"),
                  (r["cold"] / r["warm"] >= GOAL_COLD, f"warm creation {r['cold'] / r['warm']:.0f}x "
                   f"faster than cold (goal {GOAL_COLD:.0f}x)"),
                  (r["ort"] / r["warm"] >= GOAL_ORT, f"warm creation {r['ort'] / r['warm']:.1f}x "
                   f"faster than plain onnxruntime (goal {GOAL_ORT:.0f}x)"),
                  (r["pages"] < GOAL_PAGES * r["weight_pages"], f"{r['pages']} pages touched "
                   f"on a hit (goal < {GOAL_PAGES:.0%} of {r['weight_pages']})")]
        if r["model"] in NOT_CNN:
            checks.append((r["warm"] <= r["floor"], f"warm creation {_ms(r['warm'])} ms, "
                           f"onnxruntime's own creation of the EPContext model (floor) "
                           f"{_ms(r['floor'])} ms (goal: at or under it)"))
        else:
            bound = r["ort_run"] / r["warm_steady"]
            checks += [(r["ort_run"] / r["warm_run"] >= GOAL_ORT, f"warm creation + first run "
                        f"{r['ort_run'] / r['warm_run']:.1f}x faster than onnxruntime's (goal "
                        f"{GOAL_ORT:.0f}x; {bound:.1f}x at most with this inference)"),
                       (r["cold_run"] / r["warm_run"] >= GOAL_COLD, f"warm creation + first run "
                        f"{r['cold_run'] / r['warm_run']:.0f}x faster than cold's (goal "
                        f"{GOAL_COLD:.0f}x)")]
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
    kinds = [("ort", "plain onnxruntime"), ("nocache", "no cache (import + compile)"),
             ("cold", "cold (a cache to fill)"), ("warm", "warm cache"),
             ("context", "EPContext model"), ("floor", "onnxruntime's floor")]
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
    width = 0.14
    for ax, suffix, what in ((axes[0], "", "session creation"),
                             (axes[1], "_run", "creation + first run")):
        for k, (key, label) in enumerate(kinds):
            if any(key + suffix not in r for r in rows):
                continue  # the floor has no first run
            xs = [i + (k - 2.5) * width for i in range(len(rows))]
            ax.bar(xs, [r[key + suffix] * 1e3 for r in rows], width, label=label)
        ax.set_yscale("log")
        ax.set_xticks(range(len(rows)), [r["model"] for r in rows], rotation=20, fontsize=8)
        ax.set_ylabel(f"{what}, ms (median, log scale)")
        ax.set_title(f"litenpu: {what}")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="session creations per mode")
    parser.add_argument("--models", nargs="*", default=None,
                        help=f"resnet50, {' '.join(DYNAMIC)} and/or {' '.join(ZOO)} "
                             "(default: all)")
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
                for name, path in models(workdir, args.models).items()]
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
                f"{args.runs} session creations per mode, each mode in a fresh process whose "
                "runtime was warmed on another model; the floor is onnxruntime creating the "
                "stored EPContext model with an EP that does nothing; see the script's "
                "docstring), "
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
                f"load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1/5/15 min): "
                "onnxruntime's own session creation varies by 2x with the load.\n\n"
                f"{text}\n\n{verdict}\n")
    if plot(rows, os.path.join(OUT, "session_create.png")):
        print(f"wrote {OUT}/session_create.md and session_create.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
