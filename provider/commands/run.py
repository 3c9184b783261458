"""`litenpu run MODEL`: feed a model inputs (.npy/.npz files or seeded random), save its outputs.

Runs through `provider.InferenceSession` on the NPU (onnxruntime's CPU provider takes what
the NPU does not) or on onnxruntime's CPU provider alone, so the same command compares both.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from converters.atomic import replacing
from provider.commands.registry import command, key_values
from provider.errors import UsageError

EXAMPLES = """examples:
  litenpu run model.onnx --random                          # seeded random inputs, print a summary
  litenpu run model.ms --inputs feeds.npz -o out.npz       # inputs by name from an .npz
  litenpu run model.onnx --input image=cat.npy -o npu.npz
  litenpu run model.onnx --input image=cat.npy -o cpu.npz --provider cpu
  litenpu run model.onnx --random --dim batch=4 --option disable_ops=Softmax
  litenpu run model.onnx --random --runs 20 --profile      # the NPU steps that take the time
"""


def _add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES
    p.add_argument("model", type=Path, help="model file (.onnx, .ms, .mindir)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="one input from a .npy file (repeatable)")
    p.add_argument("--inputs", type=Path, metavar="FILE.npz", help="inputs by name from an .npz")
    p.add_argument("--random", action="store_true",
                   help="fill the inputs not given with seeded random values")
    p.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                   help="size of a symbolic dimension for --random (default 1)")
    p.add_argument("-o", "--output", type=Path, help="write the outputs to this .npz")
    p.add_argument("--provider", choices=["npu", "cpu"], default="npu",
                   help="npu: the NPU EP with onnxruntime's CPU EP as fallback (default); "
                        "cpu: onnxruntime's CPU EP only")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an NPU provider option (repeatable)")
    p.add_argument("--runs", type=int, default=1, help="run this many times (default 1)")
    p.add_argument("--profile", nargs="?", const="litenpu_profile", metavar="PREFIX",
                   help="profile the runs (onnxruntime's profile JSON, PREFIX_<date>.json; "
                        "default prefix litenpu_profile) and print the NPU steps that took "
                        "the most time")
    p.add_argument("--top", type=int, default=10, help="steps --profile prints (default 10)")


@command("run", "run a model on given or random inputs and save its outputs", _add_args)
def run(args: argparse.Namespace) -> int:
    import onnxruntime as ort

    from provider.ort import EP_NAME
    from provider.session import CPU_EP, InferenceSession

    options = key_values(args.option, "--option")
    if args.runs < 1 or args.top < 1:
        raise UsageError(f"--runs {args.runs} / --top {args.top}: expected counts >= 1")
    sess_options = ort.SessionOptions()
    if args.profile is not None:
        sess_options.enable_profiling = True
        sess_options.profile_file_prefix = args.profile
    if args.provider == "npu":
        session = InferenceSession(str(args.model), sess_options, providers=[EP_NAME, CPU_EP],
                                   provider_options=[options, {}])
    else:
        if options:
            raise UsageError("--option sets NPU provider options; it needs --provider npu")
        session = InferenceSession(str(args.model), sess_options, providers=[CPU_EP])
    feeds = gather_inputs(session.get_inputs(), args)
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        outputs = session.run(None, feeds)
        times.append(time.perf_counter() - start)
    names = [o.name for o in session.get_outputs()]
    if args.provider == "npu":
        print(session.partition_summary())
    print(f"ran in {times[0] * 1e3:.1f} ms" + (
        f" (median of {len(times)}: {float(np.median(times)) * 1e3:.1f} ms)" if len(times) > 1
        else ""))
    for name, value in zip(names, outputs, strict=True):
        print(describe(name, np.asarray(value)))
    if args.output is not None:
        path = args.output if args.output.suffix == ".npz" else Path(f"{args.output}.npz")
        with replacing(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **dict(zip(names, outputs, strict=True)))
        print(f"wrote {path}")
    if args.profile is not None:
        print_profile(session, args.top)
    return 0


def print_profile(session, top: int) -> None:
    """End profiling; print where its files are and the NPU steps that took the most time."""
    from provider.ort.profiling import npu_step_events, top_steps

    path = session.end_profiling()
    print(f"profile: {path}")
    steps_file = session.npu_profile_file
    if steps_file is None:
        print("no NPU step ran")
        return
    if steps_file != path:
        print(f"NPU steps: {steps_file} (this onnxruntime has no EP profiler hook)")
    events = npu_step_events(json.loads(Path(steps_file).read_text()))
    total = sum(e["dur"] for e in events)
    print(f"NPU steps: {len(events)} events, {total / 1e3:.2f} ms; top {top}:")
    print(f"  {'total ms':>9} {'share':>6} {'mean us':>9} {'runs':>5}  op / shape / output")
    for r in top_steps(events, top):
        print(f"  {r['total_us'] / 1e3:9.3f} {r['share']:6.1%} {r['mean_us']:9.1f} {r['runs']:5d}"
              f"  {r['op']} {r['shape']} {r['name']}")


def gather_inputs(metas: list, args: argparse.Namespace) -> dict[str, np.ndarray]:
    """The feeds from --inputs, then --input, then --random; UsageError names what is missing."""
    feeds: dict[str, np.ndarray] = {}
    if args.inputs is not None:
        feeds.update(_load(args.inputs, None))
    for name, file in key_values(args.input, "--input").items():
        feeds[name] = _load(Path(file), name)
    known = {m.name for m in metas}
    unknown = sorted(set(feeds) - known)
    if unknown:
        raise UsageError(f"unknown input(s) {unknown}; the model's inputs are {sorted(known)}")
    missing = [m for m in metas if m.name not in feeds]
    if missing and not args.random:
        raise UsageError(f"no value for input(s) {[m.name for m in missing]}; give "
                         "--input NAME=FILE.npy, --inputs FILE.npz or --random")
    dims = {k: _dim(k, v) for k, v in key_values(args.dim, "--dim").items()}
    from provider.ort.tensors import random_feed

    rng = np.random.default_rng(args.seed)
    for meta in missing:
        feeds[meta.name] = random_feed(meta, dims, rng)
    return feeds


def describe(name: str, value: np.ndarray) -> str:
    """One line: name, dtype, shape, and min/mean/max of numeric outputs."""
    line = f"  {name}: {value.dtype} {list(value.shape)}"
    if value.size and value.dtype.kind in "fiub":
        numbers = value.astype(np.float64)
        line += f" min {numbers.min():.4g} mean {numbers.mean():.4g} max {numbers.max():.4g}"
    return line


def _load(path: Path, name: str | None):
    """An .npy array (name given) or the arrays of an .npz; UsageError for an unreadable file."""
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise UsageError(f"{path}: not a readable .npy/.npz file ({e})") from None
    if name is None:
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise UsageError(f"--inputs {path}: expected an .npz archive of named arrays")
        return {k: data[k] for k in data.files}
    if not isinstance(data, np.ndarray):
        raise UsageError(f"--input {name}={path}: expected a .npy array, got an .npz archive")
    return data


def _dim(name: str, value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        size = -1
    if size < 1:
        raise UsageError(f"--dim {name}={value!r}: expected a size >= 1")
    return size
