"""Fuzzing every user path with mutated model files (.onnx, .ms, .mindir), in subprocesses.

A case is a seed model, a mutation level and an index (`fuzz_mutations`), named by its id
`MODEL:LEVEL:SEED:INDEX`; its mutated bytes are a pure function of the id. Each case runs
the paths a user runs on a file they were given:

- `inspect`: `litenpu inspect FILE` (the CLI's `main`, in-process in the child);
- `convert`: `litenpu convert FILE -o OUT` (.onnx -> .ms, others -> .onnx); OUT must be
  absent after a failure (and no temporary file left) or complete and loadable;
- `session`: `provider.InferenceSession` on the NPU EP plus one run on random feeds seeded
  by the case, checked against onnxruntime's CPU provider on the same model (for
  .ms/.mindir: on the same conversion) at rtol 1e-3, atol max(1e-4, 1e-5 * max|ref|), a
  quantized output within one quantization step; where onnxruntime's int8 kernels
  saturate (provider.quantize.saturation), against its unfused float path.

Accepted outcomes: success with correct output (`ok`; `ok-unverified` when onnxruntime's
CPU provider refuses the model, e.g. a pooling pad wider than its kernel, and the NPU,
which takes every node, runs it: there is no oracle); CLI exit 1 with exactly one
`litenpu CMD: error:` line and no traceback, or a `LitenpuError` from Python (`error`);
from `provider.InferenceSession` only, onnxruntime's own exception of the class that
onnxruntime's CPU provider raises on the same model (`ort-rejects`): the model is
well-formed as a file but onnxruntime's graph checks (types, shapes, kernels) reject it,
and that exception is what onnxruntime users already handle for any model onnxruntime
refuses. Anything else is a bug, unless a `KNOWN_ISSUES` entry (fixed elsewhere) names it.

Cases run in batches, one child process per batch, each writing one JSON line per path it
starts and finishes and per case it finishes, so a child that dies by a signal or hangs points at the
case it was in; that case is rerun alone to confirm, the rest of the batch continues.

    python tests/fuzz_models.py --cases 300              # a run and its summary
    python tests/fuzz_models.py --replay 'mslite/op_cnn.ms:struct:15:7' --keep /tmp/case
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_mutations import LEVELS, mutate, seed_models  # noqa: E402

from provider.cli import ORT_ERRORS_MODULE  # noqa: E402

DEFAULT_SEED = 15
CASE_TIMEOUT = 60.0  # seconds for one case (all its paths); a slower case counts as a hang
MEMORY_LIMIT = 8 << 30  # address space of a child: a huge allocation fails, never OOM-kills
MAX_FEED_BYTES = 64 << 20
TIE_CODES = 2  # quantized values a rounding tie may leave one code off (upstream_ties)
LARGE_OUTPUT = 1 << 18  # elements: beyond, float32 accumulation order shows (see session_path)
ORT_NO_MEMORY = "Failed to allocate memory"  # onnxruntime's arena, out of memory
FALLBACK = "Falling back to"  # onnxruntime's print when it retries a session without the EP
SELFTEST = "selftest"  # ids `selftest:signal|hang|ok` exercise the harness itself


# ---- cases ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    model: str
    level: str
    seed: int
    index: int

    @property
    def id(self) -> str:
        return f"{self.model}:{self.level}:{self.seed}:{self.index}"

    @classmethod
    def parse(cls, case_id: str) -> Case:
        model, level, seed, index = case_id.rsplit(":", 3)
        if level not in LEVELS:
            raise ValueError(f"case {case_id!r}: level {level!r} is not one of {LEVELS}")
        return cls(model, level, int(seed), int(index))


def case_ids(count: int, seed: int = DEFAULT_SEED, models: list[str] | None = None) -> list[str]:
    """`count` case ids, round-robin over the seed models and both levels."""
    names = models or list(seed_models())
    return [Case(names[i % len(names)], LEVELS[(i // len(names)) % 2], seed, i).id
            for i in range(count)]


def mutated_file(case_id: str, folder: Path) -> tuple[Path, list[str]]:
    """Write the case's mutated model (and links to its side files) into `folder`."""
    case = Case.parse(case_id)
    seed = seed_models()[case.model]
    data, mutations = mutate(seed, case.level, random.Random(case_id))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"model{seed.ext}"
    path.write_bytes(data)
    for side in seed.side:
        link = folder / side.name
        if not link.exists():
            link.symlink_to(side)
    return path, mutations


# ---- outcomes ------------------------------------------------------------------------------

@dataclass(frozen=True)
class KnownIssue:
    """A bug outside the fuzzer's rooms, being fixed elsewhere: tolerated until then."""

    key: str
    reason: str
    match: Callable[[dict, list[str]], bool]  # (bug outcome, the case's mutations)


def _error_type(outcome: dict) -> str:
    return outcome.get("exception", {}).get("type", "")


def _message(outcome: dict) -> str:
    return outcome.get("exception", {}).get("message", "") + outcome.get("stderr", "")


KNOWN_ISSUES: list[KnownIssue] = [
    KnownIssue("negative-same-pad",
               "not a bug, a gap in ONNX: a SAME_UPPER pool whose stride exceeds the image "
               "gets a negative pad from the spec's formula; onnxruntime refuses it at run "
               "time, onnx's reference crops, the NPU pads 0 (as onnx's reference Conv does)",
               lambda o, mutations: o["why"].startswith("the NPU session ran where")
               and "padding values must be non-negative" in o["oracle"]["message"]),
]


def _known(outcome: dict, mutations: list[str]) -> dict:
    """A bug outcome matched to a KNOWN_ISSUES entry becomes `known:<key>`."""
    if outcome["outcome"] == "bug":
        for issue in KNOWN_ISSUES:
            if issue.match(outcome, mutations):
                return {**outcome, "outcome": f"known:{issue.key}"}
    return outcome


def _bug(why: str, **facts) -> dict:
    return {"outcome": "bug", "why": why, **facts}


def describe_exception(e: BaseException) -> dict:
    from converters.errors import LitenpuError

    module = type(e).__module__
    return {"type": type(e).__name__, "module": module,
            "litenpu": isinstance(e, LitenpuError) and module.split(".")[0] in ("converters", "provider"),
            "message": str(e)[:600]}


# ---- the user paths (run in the child) -------------------------------------------------------

@contextlib.contextmanager
def captured_fds() -> Iterator[dict]:
    """Capture fds 1 and 2 (Python and native writers alike); the text lands in the dict."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    files = {fd: tempfile.TemporaryFile() for fd in (1, 2)}
    text: dict[str, str] = {}
    try:
        for fd, f in files.items():
            os.dup2(f.fileno(), fd)
        yield text
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, f in files.items():
            os.dup2(saved[fd], fd)
            os.close(saved[fd])
            f.seek(0)
            text["out" if fd == 1 else "err"] = f.read().decode("utf-8", "replace")
            f.close()


def run_cli(argv: list[str]) -> dict:
    """`litenpu ARGV` through the CLI's `main`: exit code, stderr, or what escaped it."""
    from provider.cli import main

    escaped = None
    with captured_fds() as text:
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 2
        except BaseException as e:  # noqa: BLE001 - anything escaping main is the finding
            rc, escaped = None, describe_exception(e)
    return {"rc": rc, "stderr": tail_lines(text["err"]), "stdout": text["out"][-3000:],
            "escaped": escaped}


def tail_lines(text: str, limit: int = 3000) -> str:
    """The end of `text`, at most `limit` characters of whole lines (a line cut in two would
    read as stray output: a mindir file with 40 unknown primitives logs 40 warnings)."""
    return text if len(text) <= limit else text[-limit:].split("\n", 1)[-1]


LOG_LINE = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")


def cli_outcome(command: str, run: dict) -> dict:
    """ok (exit 0) or error (exit 1 and exactly one `litenpu CMD:` line); anything else on
    stderr but one-line log records (a traceback, onnxruntime's own output) is a bug."""
    err = run["stderr"]
    if run["escaped"] is not None:
        return _bug(f"exception escaped the CLI: {run['escaped']['type']}", exception=run["escaped"],
                    stderr=err)
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(f"litenpu {command}:")]
    stray = [line for line in lines if line not in errors and not LOG_LINE.match(line)]
    if stray:
        return _bug("stray output on stderr", rc=run["rc"], stderr=err)
    if FALLBACK in run.get("stdout", ""):
        return _bug("onnxruntime's fallback message", rc=run["rc"], output=run["stdout"])
    if run["rc"] == 0 and not errors:
        return {"outcome": "ok", "stderr": err}
    if run["rc"] == 1 and len(errors) == 1:
        return {"outcome": "error", "line": errors[0][:300]}
    return _bug(f"exit {run['rc']} with {len(errors)} error line(s)", rc=run["rc"], stderr=err)


def inspect_path(src: Path, work: Path) -> dict:
    return cli_outcome("inspect", run_cli(["inspect", str(src)]))


def convert_path(src: Path, work: Path) -> dict:
    """`litenpu convert`; OUT complete and loadable on success, absent (no temp files) on error."""
    out = work / ("out.ms" if src.suffix == ".onnx" else "out.onnx")
    before = set(os.listdir(work))
    outcome = cli_outcome("convert", run_cli(["convert", str(src), "-o", str(out), "-q"]))
    extra = sorted(set(os.listdir(work)) - before - {out.name})
    if extra:
        return _bug(f"convert left {extra} next to its output", first=outcome)
    if outcome["outcome"] == "error" and out.exists():
        return _bug("convert failed but wrote its output", line=outcome["line"])
    if outcome["outcome"] == "ok":
        problem = _unloadable(out)
        if problem:
            return _bug(f"converted output is not loadable: {problem}")
    return outcome


def _unloadable(path: Path) -> str | None:
    """Why the converted file cannot be read back, or None."""
    try:
        if path.suffix == ".ms":
            from converters.lite import reader

            reader.load(path, lazy=False)
        else:
            import onnx

            onnx.load(str(path))
    except Exception as e:  # noqa: BLE001 - any failure to read back is the finding
        return f"{type(e).__name__}: {str(e)[:300]}"
    return None


def session_path(src: Path, work: Path) -> dict:
    """provider.InferenceSession on the NPU + one run, checked against onnxruntime CPU."""
    import onnxruntime as ort

    from provider.ort import EP_NAME
    from provider.ort.tensors import random_feed
    from provider.quantize.saturation import onnxruntime_saturates
    from provider.session import CPU_EP, InferenceSession

    def options(oracle: bool = False, unfused: bool = False) -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = 1
        if unfused or (oracle and onnxruntime_saturates()):
            # its fused int8 kernels saturate on this CPU (provider.quantize.saturation):
            # the unfused float path is the exact integer oracle
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return so

    oracle, oracle_error = None, None
    try:
        if src.suffix == ".onnx":
            oracle = ort.InferenceSession(str(src), options(oracle=True), providers=[CPU_EP])
        else:  # the same conversion to ONNX as the NPU session, run by onnxruntime CPU
            oracle = InferenceSession(str(src), options(oracle=True), providers=[CPU_EP])
    except Exception as e:  # noqa: BLE001 - the oracle's refusal is a fact, not a failure
        oracle_error = {**describe_exception(e), "plain": src.suffix == ".onnx"}
    with captured_fds() as printed:
        try:
            session, error = InferenceSession(str(src), options(), providers=[EP_NAME, CPU_EP]), None
        except Exception as e:  # noqa: BLE001 - classified below
            error = e
    if FALLBACK in printed["out"]:
        return _bug("onnxruntime's fallback message", output=printed["out"][-2000:])
    if error is not None:
        return _rejected(error, oracle_error, "session creation")
    rng = np.random.default_rng(zlib.crc32(work.name.encode()))  # the case's folder: a replay
    # feeds the same inputs (its full path is a fresh temporary directory each run)
    feeds = {}
    for meta in session.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in meta.shape]
        if int(np.prod(shape, dtype=np.float64)) * 8 > MAX_FEED_BYTES:
            return {"outcome": "ok", "note": f"input {meta.name!r} {meta.shape} too big to feed"}
        try:
            feeds[meta.name] = random_feed(meta, {}, rng)
        except Exception as e:  # noqa: BLE001 - a non-tensor input: nothing to feed
            return {"outcome": "ok", "note": f"not run: {type(e).__name__}: {e}"}
    try:
        got = session.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - classified below
        if oracle is not None:
            try:
                oracle.run(None, feeds)
            except Exception as ref:  # noqa: BLE001
                oracle_error = {**describe_exception(ref), "plain": src.suffix == ".onnx"}
        return _rejected(e, oracle_error, "run")
    if oracle is None:  # the NPU takes every node whose CPU kernel refuses its attributes
        return {"outcome": "ok-unverified", "note": "onnxruntime CPU rejects the model "
                f"({oracle_error['type']}: {oracle_error['message'][:300]}); the NPU runs it"}
    try:
        want = oracle.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        reference = reference_outputs(src, feeds) if _small(got) else None
        if reference is not None and compare(got, reference) is None:
            # e.g. onnxruntime computes negative pads for a SAME_UPPER pool whose stride
            # exceeds the image and refuses them; onnx's reference computes what the NPU does
            return {"outcome": "ok", "checked": True,
                    "note": f"onnxruntime CPU raises, onnx's reference agrees with the NPU: {e}"}
        if ORT_NO_MEMORY in str(e):
            # not a refusal of the model: onnxruntime's kernel asked for more memory than
            # there is (mslite/op_cnn2.ms:struct:110:722, an LRN of size 2**32 + 1 whose
            # window covers every channel: 841 GB), which the NPU's does not
            return {"outcome": "ok-unverified",
                    "note": f"onnxruntime CPU runs out of memory, the NPU runs it: {e}"}
        return _bug("the NPU session ran where onnxruntime CPU raises",
                    oracle=describe_exception(e))
    mismatch = compare(got, want)
    if mismatch is None:
        return {"outcome": "ok", "checked": True}
    # A quantized output may be one quantization step off onnxruntime's: its unfused float
    # path (the oracle where its int8 kernels saturate) sums dequantized products in
    # float32 and on long sums rounds a code the other way now and then (~10% of random
    # inputs of a MindSpore Lite full-quant fixture); its fused kernels (the oracle
    # elsewhere) round their scale ratios their own way (onnxruntime 1.23's QLinearAdd:
    # 2 of 10 codes of a full-quant ResNet block whose Add lost its Relu, on one input).
    # An int8 output (a mutation made a quantized tensor the output) is one code off the
    # same way: in mslite/resnet_block_fq.ms:struct:41:119 the exact integer sum gives code
    # 36.49999, the NPU 36 and onnxruntime's float path 37. Such a code off upstream grows
    # through float adds into a finer output step: in mslite/resnet_block_fq.ms:struct:94:1483
    # onnxruntime's float path rounded a conv's exact -94.4999999 to -95 (the NPU: -94), and
    # the difference, 1.14 output steps after two residual adds, became two output codes
    # (`quant_cases.code_slack`).
    steps = quantization_steps(src, [o.name for o in session.get_outputs()])
    if steps is not None and compare(got, want, steps=steps[0], codes=steps[1]) is None:
        path = "unfused path" if onnxruntime_saturates() else "fused int8 kernels"
        return {"outcome": "ok", "checked": True,
                "note": f"within one quantization step of onnxruntime's {path}: {mismatch}"}
    if steps is not None and any(steps[0]) and not onnxruntime_saturates():
        # onnxruntime's fused int8 kernels round their own way where its unfused float path
        # (the QDQ graph as ONNX defines it) does not: in mslite/op_cnn_fq.ms:bytes:122:146
        # six codes of a quantized Add came out one off its unfused path, which the NPU
        # matched code for code, and an InstanceNorm after them made those 8 output steps
        unfused = unfused_outputs(src, feeds, options(oracle=True, unfused=True))
        if unfused is not None and compare(got, unfused, steps=steps[0], codes=steps[1]) is None:
            return {"outcome": "ok", "checked": True, "note": "agrees with onnxruntime's "
                    f"unfused float path; its fused int8 kernels differ: {mismatch}"}
    if extreme_weights(src):
        if compare(got, want, finite_only=True) is None:
            # NaN/inf weights: where NaNs go through Max/Relu/Clip/pooling is not specified
            # by ONNX (onnxruntime's CPU kernels drop some that numpy keeps), and overflow to
            # inf depends on the summation order; wherever both sides are finite they agree.
            return {"outcome": "ok", "checked": True,
                    "note": f"finite positions only: {mismatch}"}
        # a weight past the square root of the float max: squares and long sums overflow by
        # formula (onnxruntime's LayerNorm variance became inf and zeroed rows the NPU
        # normalized, 2 cases in 1,500), so even finite outputs are not comparable
        return {"outcome": "ok-unverified", "note": f"float overflow inside the model: {mismatch}"}
    if not _small(want):
        # Mutated dims make huge planes, whose reductions (instance norm over 10**6 values)
        # gather float32 rounding in an order-dependent way: onnxruntime's CPU kernel sums
        # naively (5e-4 off the float64 value in one such case, where the NPU was 3e-6 off).
        # There, only a difference over 1% of an output's range counts as a wrong number.
        if compare(got, want, rtol=1e-2, atol_scale=1e-2) is None:
            return {"outcome": "ok", "checked": True, "note": f"large outputs: {mismatch}"}
    else:  # onnx's reference evaluator is the tie-breaker (too slow for big tensors)
        reference = reference_outputs(src, feeds)
        if reference is not None and compare(got, reference) is None:
            # e.g. onnxruntime pads SAME_UPPER convs negatively when the stride exceeds the
            # image, where the NPU and the reference agree
            return {"outcome": "ok", "checked": True,
                    "note": f"onnx's reference evaluator agrees with the NPU: {mismatch}"}
    # A tie rounded one way by float32 and the other by an exact sum, upstream of a
    # normalization: mslite/op_cnn_fq.ms:struct:96:1472's InstanceNorm input was one code
    # off at one value (its float input equal to 5e-7), which the norm's 1/sigma made 1.4
    # steps at the output. Neither side is then known to be right.
    ties = upstream_ties(src, feeds, options)
    if ties is not None:
        return {"outcome": "ok-unverified", "note": f"{ties}: {mismatch}"}
    return _bug(f"wrong output: {mismatch}")


def _small(outputs: list) -> bool:
    """Whether every output is small enough for onnx's reference evaluator and for a
    float32 comparison at the tight tolerance (see session_path)."""
    return all(np.asarray(o).size < LARGE_OUTPUT for o in outputs)


def _rejected(e: BaseException, oracle_error: dict | None, stage: str) -> dict:
    """error (a LitenpuError), ort-rejects or bug.

    ort-rejects: onnxruntime's CPU provider rejects the same model too and the NPU session
    raised an onnxruntime exception other than EPFail (the EP's own failure); its class may
    differ, as the nodes the EP takes change which of onnxruntime's checks fires first. For
    .onnx files, which go to onnxruntime as they are, also the very exception (any type)
    plain onnxruntime raises, e.g. its UnicodeDecodeError on a non-UTF-8 name.
    """
    error = describe_exception(e)
    if error["litenpu"]:
        return {"outcome": "error", "exception": error}
    if oracle_error is not None:
        ours = error["module"] == ORT_ERRORS_MODULE and error["type"] != "EPFail"
        theirs = oracle_error["module"] == ORT_ERRORS_MODULE
        same = all(oracle_error[k] == error[k] for k in ("module", "type", "message"))
        if (ours and theirs) or (same and oracle_error.get("plain")):
            return {"outcome": "ort-rejects", "exception": error}
    return _bug(f"untyped {error['module']}.{error['type']} at {stage}", exception=error,
                oracle=oracle_error)


def structure_mismatch(got: list, want: list) -> str | None:
    """Why outputs `got` cannot match onnxruntime CPU's `want` whatever their values: the
    output count, then each output's shape and dtype; None when those agree."""
    if len(got) != len(want):
        return f"{len(got)} outputs, onnxruntime CPU gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, onnxruntime CPU {w.shape}"
        if g.dtype != w.dtype:
            return f"output {i}: dtype {g.dtype}, onnxruntime CPU {w.dtype}"
    return None


def compare(got: list, want: list, finite_only: bool = False, rtol: float = 1e-3,
            atol_scale: float = 1e-5, steps: list[float] | None = None,
            codes: list[int] | None = None) -> str | None:
    """Why `got` differs from onnxruntime CPU's `want` (count, shapes, dtypes, then values, at
    `rtol` and atol max(1e-4, atol_scale * max|want|), or one of the output's quantization
    `steps`, a quantized output by its `codes` (default one)); `finite_only` compares only
    where both are finite."""
    if (why := structure_mismatch(got, want)) is not None:
        return why
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if w.dtype.kind in "fc":
            if finite_only:
                both = np.isfinite(g) & np.isfinite(w)
                g, w = g[both], w[both]
            finite = np.abs(w[np.isfinite(w)])
            atol = max(1e-4, atol_scale * float(finite.max())) if finite.size else 1e-4
            if steps is not None:
                atol = max(atol, steps[i] * 1.0001)
            try:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
            except AssertionError as e:
                return f"output {i}: {' '.join(str(e).split())[:400]}"
        elif steps is not None and steps[i] > 0 and w.dtype in (np.int8, np.uint8):
            # a quantized tensor's codes: one step is one code
            allowed = codes[i] if codes is not None else 1
            if g.shape != w.shape or np.abs(g.astype(np.int16) - w).max(initial=0) > allowed:
                return f"output {i}: codes differ by more than {allowed} from onnxruntime CPU's"
        elif not np.array_equal(g, w):
            return f"output {i}: values differ from onnxruntime CPU"
    return None


def quantization_steps(src: Path, names: list[str]) -> tuple[list[float], list[int]] | None:
    """Each output's last quantization step (0.0 for a float output) and, for a quantized
    output, the codes it may differ by (`quant_cases.code_slack`), from the model as
    onnxruntime gets it; None when it cannot be read."""
    from quant_cases import code_slack, output_scales

    try:
        model = _as_onnx(src)
        scales, slack = output_scales(model), code_slack(model)
    except Exception:  # noqa: BLE001 - no steps: the mismatch stands
        return None
    return [scales.get(name, 0.0) for name in names], [slack.get(name, 1) for name in names]


def unfused_outputs(src: Path, feeds: dict, options) -> list | None:
    """onnxruntime CPU's outputs with its graph optimizations off (no fused int8 kernels:
    each QDQ unit computed in float as written); None when it cannot run the model."""
    from provider.session import CPU_EP, InferenceSession

    try:
        return InferenceSession(str(src), options, providers=[CPU_EP]).run(None, feeds)
    except Exception:  # noqa: BLE001 - no second oracle: the mismatch stands
        return None


def reference_outputs(src: Path, feeds: dict) -> list | None:
    """What onnx's reference evaluator computes for the model as onnxruntime gets it (None
    when it cannot): the tie-breaker when the NPU and onnxruntime CPU disagree."""
    from onnx.reference import ReferenceEvaluator

    try:
        return ReferenceEvaluator(_as_onnx(src)).run(None, feeds)
    except Exception:  # noqa: BLE001 - no tie-breaker: the mismatch stands
        return None


def _as_onnx(src: Path):
    """The model as onnxruntime gets it: an ONNX file as it is, a .ms / .mindir file converted
    to ONNX through Lite IR (as the session does)."""
    import onnx

    from converters.onnx_export import export_onnx

    return onnx.load(str(src)) if src.suffix == ".onnx" else export_onnx(_lite_model(src))


def upstream_ties(src: Path, feeds: dict, options: Callable[..., object]) -> str | None:
    """Why the outputs differ when a rounding tie is the cause: with every QuantizeLinear's
    output exposed, the NPU's quantized tensors (graph outputs among them) are all within one
    code of onnxruntime CPU's and at most TIE_CODES codes differ (a value at x.5 in float32
    that the other side's sum puts across it; a normalization after it divides the step by
    the values' sigma). None otherwise, or when it cannot tell. `options(oracle=...)` gives
    the session options."""
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    from provider.ort import EP_NAME
    from provider.session import CPU_EP, InferenceSession

    try:
        model = _as_onnx(src)
        inits = {i.name: i for i in model.graph.initializer}
        outputs = {o.name for o in model.graph.output}
        quantized = {n.output[0]: numpy_helper.to_array(inits[n.input[2]]).dtype
                     for n in model.graph.node if n.op_type == "QuantizeLinear"
                     and len(n.input) > 2 and n.input[2] in inits}
        if not quantized:
            return None
        model.graph.output.extend(
            helper.make_value_info(name, helper.make_tensor_type_proto(
                helper.np_dtype_to_tensor_dtype(dtype), None))
            for name, dtype in quantized.items() if name not in outputs)
        data = model.SerializeToString()
        oracle = ort.InferenceSession(data, options(oracle=True), providers=[CPU_EP])
        npu = InferenceSession(data, options(), providers=[EP_NAME, CPU_EP])
        names = [o.name for o in npu.get_outputs()]
        got = dict(zip(names, npu.run(None, feeds), strict=True))
        want = dict(zip(names, oracle.run(None, feeds), strict=True))
        off = [np.abs(got[n].astype(np.int16) - want[n].astype(np.int16)) for n in quantized]
    except Exception:  # noqa: BLE001 - cannot tell: the mismatch stands
        return None
    count = sum(int((d > 0).sum()) for d in off)
    if any(d.max(initial=0) > 1 for d in off) or not 0 < count <= TIE_CODES:
        return None
    return f"{count} quantized value(s) one code off onnxruntime's (a rounding tie) upstream"


def _lite_model(src: Path):
    """The Lite IR of a .ms or .mindir file (what the session converts to ONNX)."""
    if src.suffix == ".ms":
        from converters.lite import reader

        return reader.load(src)
    from converters.mindir import import_mindir

    return import_mindir(src)[0]


def extreme_weights(src: Path) -> bool:
    """Whether a float constant of the model is NaN, inf, past the square root of its
    dtype's max (its square, or its products summed, overflow) or past 1/sqrt(eps) (its
    square drowns every unit in a float sum: onnxruntime's LRN adds the window's squares
    and takes the leaving one away, and after a 7.3e15 bias the differences it keeps are
    rounding garbage, negative ones NaN: mslite/op_cnn2.ms:bytes:154:960)."""

    if src.suffix == ".onnx":
        from converters.graph_view import from_onnx

        arrays = list(from_onnx(src, check=False, infer_shapes=False).initializers.values())
    else:
        arrays = [t.data for t in _lite_model(src).tensors if t.data is not None]
    for a in arrays:
        if a.dtype.kind == "f" and a.size:
            info = np.finfo(a.dtype)
            big = min(np.sqrt(info.max), info.eps ** -0.5)
            if not np.all(np.isfinite(a)) or np.abs(a).max() > big:
                return True
    return False


PATHS: dict[str, Callable[[Path, Path], dict]] = {
    "inspect": inspect_path, "convert": convert_path, "session": session_path,
}


def _selftest(kind: str) -> None:
    """Harness checks: a case that dies by a signal, one that hangs, one that passes."""
    if kind == "signal":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif kind == "hang":
        time.sleep(3600)


def run_case(case_id: str, work: Path, log: Callable[[dict], None]) -> dict:
    """Every path of one case; `log` records each path as it starts (crash attribution)."""
    if case_id.startswith(SELFTEST + ":"):
        log({"start": case_id, "path": "selftest"})
        _selftest(case_id.split(":", 1)[1])
        return {"case": case_id, "mutations": [], "paths": {"selftest": {"outcome": "ok"}}}
    folder = work / f"case{zlib.crc32(case_id.encode()):08x}"
    start = time.perf_counter()
    try:
        try:
            src, mutations = mutated_file(case_id, folder)
        except Exception as e:  # noqa: BLE001 - a mutation that fails is the harness's bug
            return {"case": case_id, "mutations": [], "paths": {
                "mutate": _bug(f"harness error: the mutation failed: {type(e).__name__}: {e}")}}
        paths = {}
        for name, fn in PATHS.items():
            log({"start": case_id, "path": name})
            try:
                paths[name] = _known(fn(src, folder), mutations)
            except Exception as e:  # noqa: BLE001 - a harness failure is reported, not hidden
                paths[name] = _bug(f"harness error: {type(e).__name__}: {e}")
            log({"done": case_id, "path": name, "result": paths[name]})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"case": case_id, "mutations": mutations, "paths": paths,
            "seconds": round(time.perf_counter() - start, 3)}


def child(cases_file: Path, results_file: Path) -> int:
    """The child process: run the cases, one JSON line per path started and per case done."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    faults = open(results_file.with_suffix(".faults"), "w")  # noqa: SIM115 - lives as long as we do
    faulthandler.enable(faults)
    work = Path(tempfile.mkdtemp(prefix="fuzz-"))
    with open(results_file, "a", buffering=1) as out:
        def log(record: dict) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        try:
            for case_id in json.loads(cases_file.read_text()):
                log(run_case(case_id, work, log))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


# ---- the parent: batches of cases in child processes ----------------------------------------

def run_cases(ids: list[str], jobs: int = 2, batch: int = 20,
              case_timeout: float = CASE_TIMEOUT) -> list[dict]:
    """Results of every case, `batch` cases per child, `jobs` children at a time."""
    chunks = [ids[i:i + batch] for i in range(0, len(ids), batch)]
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        done = pool.map(lambda chunk: run_batch(chunk, case_timeout), chunks)
        return [r for results in done for r in results]


def run_batch(ids: list[str], case_timeout: float = CASE_TIMEOUT) -> list[dict]:
    """Run `ids` in children; a case that kills or hangs its child is rerun alone to confirm."""
    results: list[dict] = []
    pending = list(ids)
    while pending:
        finished, crash = _spawn(pending, case_timeout)
        results += finished
        if crash is None:
            break
        culprit = pending[len(finished)]
        if len(pending) > 1:
            alone, crash_alone = _spawn([culprit], case_timeout)
            if crash_alone is None:  # the partial results of the batch run are dropped
                crash.pop("finished")
                crash = {**crash, "why": crash["why"] + " (in a batch; the case alone passes)"}
                results += [{**r, "paths": {**r["paths"], "process": _bug(**crash)}} for r in alone]
            else:
                results.append(_crash_result(culprit, crash_alone))
        else:
            results.append(_crash_result(culprit, crash))
        pending = pending[len(finished) + 1:]
    return results


def _crash_result(case_id: str, crash: dict) -> dict:
    """The crashed path as a bug (or known issue), with the paths that finished before it."""
    path = crash.pop("path", "process")
    finished = crash.pop("finished", {})
    mutations = _mutations_of(case_id)
    return {"case": case_id, "mutations": mutations,
            "paths": {**finished, path: _known(_bug(**crash), mutations)}}


def _mutations_of(case_id: str) -> list[str]:
    if case_id.startswith(SELFTEST + ":"):
        return []
    with tempfile.TemporaryDirectory() as folder:
        return mutated_file(case_id, Path(folder))[1]


def _spawn(ids: list[str], case_timeout: float) -> tuple[list[dict], dict | None]:
    """One child over `ids`: the finished results, and how it died (None when it did not)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-batch-") as folder:
        cases, results = Path(folder) / "cases.json", Path(folder) / "results.jsonl"
        cases.write_text(json.dumps(ids))
        results.touch()
        with open(Path(folder) / "child.log", "w") as log:
            proc = subprocess.Popen([sys.executable, __file__, "--child", str(cases), str(results)],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=folder,
                                    start_new_session=True)
        started, current, timed_out = time.monotonic(), None, False
        while proc.poll() is None:
            time.sleep(0.05)
            records = _records(results)
            last = records[-1] if records else None
            key = (len(records), last.get("path") if last else None)
            if key != current:
                current, started = key, time.monotonic()
            elif last is not None and "start" in last and time.monotonic() - started > case_timeout:
                os.killpg(proc.pid, signal.SIGKILL)  # the child's own group: only what we started
                proc.wait()
                timed_out = True
        records = _records(results)
        finished = [r for r in records if "case" in r]
        if proc.returncode == 0 and not timed_out:
            return finished, None
        last = records[-1] if records and "start" in records[-1] else {}
        culprit = ids[len(finished)]
        crash = {"path": last.get("path", "process"),
                 "finished": {r["path"]: r["result"] for r in records if r.get("done") == culprit}}
        if timed_out:
            crash["why"] = f"hang: no progress in {case_timeout:.0f} s"
        elif proc.returncode < 0:
            crash["why"] = f"killed by {signal.Signals(-proc.returncode).name}"
            crash["signal"] = -proc.returncode
        else:
            crash["why"] = f"child exited {proc.returncode}"
        faults = results.with_suffix(".faults")
        crash["stderr"] = (faults.read_text(errors="replace") if faults.exists() else "")[-3000:]
        crash["stderr"] += (Path(folder) / "child.log").read_text(errors="replace")[-2000:]
        return finished, crash


def _records(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line being written
    return records


# ---- reporting -----------------------------------------------------------------------------

def outcome_counts(results: list[dict]) -> Counter:
    """(path, outcome) -> number of cases."""
    return Counter((path, o["outcome"]) for r in results for path, o in r["paths"].items())


def failures(results: list[dict]) -> list[tuple[dict, str, dict]]:
    """(case result, path, outcome) of every bug."""
    return [(r, path, o) for r in results for path, o in r["paths"].items()
            if o["outcome"] == "bug"]


def known_hits(results: list[dict]) -> list[str]:
    """One line per case that hit a KNOWN_ISSUES entry (to replay once it is fixed)."""
    return [f"{o['outcome']}: {r['case']} [{path}]" for r in results
            for path, o in r["paths"].items() if o["outcome"].startswith("known:")]


def format_summary(results: list[dict], seconds: float | None = None) -> str:
    counts = outcome_counts(results)
    lines = [f"{len(results)} cases" + (f" in {seconds:.1f} s" if seconds is not None else "")]
    for path in sorted({p for p, _ in counts}):
        parts = ", ".join(f"{o} {n}" for (p, o), n in sorted(counts.items()) if p == path)
        lines.append(f"  {path}: {parts}")
    return "\n".join(lines)


def format_failure(result: dict, path: str, outcome: dict) -> str:
    """A failing case: what broke, the mutation, and the command that replays it."""
    details = {k: v for k, v in outcome.items() if k not in ("outcome", "why")}
    return (f"{result['case']} [{path}] {outcome['why']}\n"
            f"  mutations: {'; '.join(result['mutations'])}\n"
            f"  replay: python tests/fuzz_models.py --replay '{result['case']}' --keep /tmp/case\n"
            f"  {json.dumps(details)[:1500]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300, help="number of cases")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--model", action="append", help="only these seed models (repeatable)")
    parser.add_argument("--replay", action="append", help="run these case ids only")
    parser.add_argument("--keep", type=Path, help="with --replay: also write the mutated file here")
    parser.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child)
    ids = args.replay or case_ids(args.cases, args.seed, args.model)
    if args.keep and args.replay:
        for case_id in args.replay:
            path, mutations = mutated_file(case_id, args.keep)
            print(f"{case_id}: {path} ({'; '.join(mutations)})")
    start = time.perf_counter()
    results = run_cases(ids, jobs=args.jobs)
    elapsed = time.perf_counter() - start
    if args.replay:
        print(json.dumps(results, indent=2))
    for line in known_hits(results):
        print(line)
    bugs = failures(results)
    for failure in bugs:
        print(format_failure(*failure))
    print(format_summary(results, elapsed))
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
