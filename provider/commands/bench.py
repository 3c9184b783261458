"""`litenpu bench`: run the benchmark suite and write docs/benchmarks/ (see provider.bench)."""

from __future__ import annotations

import argparse
import shlex
import sys
from contextlib import nullcontext
from pathlib import Path

from provider.commands.registry import command
from provider.errors import UsageError

# Timed runs per zoo model: a zoo model runs in ~0.1 ms on the 2-vCPU VM, where 30 runs gave
# resnet_block 1.10x and 0.69x in two reports 15 minutes apart and 200 runs 0.93-0.96x in
# three (the blocks' pauses make it ~12 s a model).
DEFAULT_RUNS = 200

EXAMPLES = """examples:
  litenpu bench                         # everything; writes docs/benchmarks/ of the checkout
  litenpu bench --quick                 # fewer runs, scripts with --quick where they have it
  litenpu bench --no-scripts -o /tmp/b  # zoo models only (works from an installed package)
  litenpu bench --only ep_overhead --models resnet_block
  litenpu bench --make-peer-venv        # first create the venv of the OpenVINO EP column
"""


def _add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES
    p.add_argument("-o", "--out", type=Path, default=None,
                   help="report folder (default: docs/benchmarks of the checkout, else "
                        "./litenpu-benchmarks)")
    p.add_argument("--quick", action="store_true", help="fewer runs; scripts get --quick")
    p.add_argument("--runs", type=int, default=None, help="timed runs per model (default 200, "
                   "5 with --quick)")
    p.add_argument("--models", default=None,
                   help="comma-separated zoo models (default: all); 'none' skips them")
    p.add_argument("--benchmarks", type=Path, default=None,
                   help="folder of bench_*.py scripts (default: benchmarks/ of the checkout "
                        "around the working directory)")
    p.add_argument("--no-scripts", action="store_true", help="run no bench_*.py scripts")
    p.add_argument("--only", action="append", default=None, metavar="WORD",
                   help="run only the scripts whose name contains WORD (repeatable)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per script (default 900)")
    p.add_argument("--no-peers", action="store_true",
                   help="no OpenVINO EP column (onnxruntime's OpenVINO EP on its CPU device)")
    p.add_argument("--peer-venv", type=Path, default=None,
                   help="venv with onnxruntime-openvino for that column, used when the "
                        "onnxruntime-ep-openvino plugin cannot run here (default: "
                        "$LITENPU_PEER_VENV, else peers/openvino in the litenpu cache dir)")
    p.add_argument("--make-peer-venv", action="store_true",
                   help="create that venv first (pip install from PyPI)")


@command("bench", "run the benchmark suite against onnxruntime and write a Markdown report "
         "with plots", _add_args)
def run(args: argparse.Namespace) -> int:
    from provider.bench import machine, report
    from provider.bench.models import measure_all
    from provider.bench.peers import NAME, default_venv, make_venv, openvino_peer
    from provider.bench.scripts import find_benchmarks, run_scripts
    from provider.zoo import NAMES

    names = _model_names(args.models, NAMES)
    runs = args.runs or (5 if args.quick else DEFAULT_RUNS)
    if runs < 1:
        raise UsageError(f"--runs {runs}: expected at least 1")

    def progress(message: str) -> None:
        print(f"bench: {message}", file=sys.stderr, flush=True)

    folder = None if args.no_scripts else find_benchmarks(args.benchmarks)
    out = args.out or (folder.parent / "docs" / "benchmarks" if folder else Path("litenpu-benchmarks"))
    info = machine.describe()  # before the runs: the load average of the idle machine
    venv = args.peer_venv or default_venv()
    if args.make_peer_venv and not args.no_peers:
        make_venv(venv, progress)
    peers = nullcontext((None, "`--no-peers`")) if args.no_peers or not names \
        else openvino_peer(venv)
    with peers as (peer, note):
        if peer is None:
            progress(f"{NAME} column skipped: {note}")
            peer_text = f"not measured ({note})"
        else:
            peer_text = peer.how + (f"; {note}" if note else "")
        models = measure_all(names, runs, progress, peer)
    if args.no_scripts:
        scripts, note = [], "Not run (`--no-scripts`)."
    elif folder is None:
        scripts = []
        note = ("Not available: the `benchmarks/bench_*.py` scripts live in a litenpu "
                "checkout, not in the installed package; run `litenpu bench` inside a checkout "
                "or pass `--benchmarks DIR`.")
        progress(note)
    else:
        scripts = run_scripts(folder, quick=args.quick, timeout=args.timeout, only=args.only,
                              progress=progress)
        note = (f"Every `{folder.name}/bench_*.py` script"
                + (f" matching {args.only}" if args.only else "")
                + ", run as a subprocess; each prints its own same-run baseline.")
    command_line = "litenpu bench " + " ".join(shlex.quote(a) for a in sys.argv[2:]) \
        if sys.argv[1:2] == ["bench"] else "litenpu bench"
    path = report.write(out, info, models, scripts, note, command_line.strip(), peer_text)
    for r in models:
        peer_ms = "" if r.peer_run_ms is None else f"OpenVINO {r.peer_run_ms:8.2f} ms  "
        print(f"{r.model:22s} onnxruntime {r.ort_run_ms:8.2f} ms  {peer_ms}NPU "
              f"{r.npu_run_ms:8.2f} ms  bound {r.npu_bound_ms:8.2f} ms  ratio {r.speed_ratio:5.2f}")
    for s in scripts:
        print(f"{s.name:22s} {'timed out' if s.returncode is None else f'exit {s.returncode}'}"
              f" in {s.seconds:.1f} s")
    print(f"wrote {path}")
    failed = [s.name for s in scripts if s.returncode != 0]
    if failed:
        print(f"litenpu bench: {len(failed)} script(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _model_names(spec: str | None, known: tuple[str, ...]) -> tuple[str, ...]:
    """The zoo models asked for; UsageError names an unknown one."""
    if spec is None:
        return known
    if spec == "none":
        return ()
    names = tuple(n.strip() for n in spec.split(",") if n.strip())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"--models: unknown {unknown}; known: {', '.join(known)}")
    return names
