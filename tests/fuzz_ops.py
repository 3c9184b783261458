"""Differential fuzzing of single ops: the NPU EP against onnxruntime's CPU provider.

Each case is a small random model, mostly one node, drawn by its family's generator from
`(family, seed, index)` alone, so a case replays from those three numbers. The runner:

1. prints the case (family, seed, index, op, attributes, input shapes, small constant
   inputs) and flushes, before running it: if the process dies by a signal, the last
   `case` line names the crashing case;
2. runs onnxruntime's CPU provider on it; a model onnxruntime rejects (session creation or
   run) is *skipped* and counted as such: there is no oracle;
3. runs `provider.InferenceSession(model, providers=["NPUExecutionProvider",
   "CPUExecutionProvider"])` on the same feeds and notes whether the op under test was
   placed on the NPU (`on_npu`: a family that silently falls back to the CPU shows there);
4. compares every output: same shape and dtype; floats by np.allclose(rtol=1e-4,
   atol=1e-4, equal_nan=True), integers and booleans exactly; a QDQ model's output within
   one output quantization step of onnxruntime's optimized (fused int8) or unoptimized
   (float) path.

A case is *bad* when the NPU session raises where onnxruntime CPU ran the same model, or
when an output differs. The run prints a per-family summary (ran, on_npu, skipped, bad)
and exits 1 if any case was bad.

The draws, and the differences by design they leave out, are in fuzz_op_families.py.

    python tests/fuzz_ops.py --family conv --seed 1 --cases 200
    python tests/fuzz_ops.py --family all --seed 0 --cases 100
    python tests/fuzz_ops.py --family pool --seed 3 --case 17 --save /tmp/case   # replay one
"""

from __future__ import annotations

import argparse
import copy
import faulthandler
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
import onnx
from fuzz_models import structure_mismatch
from fuzz_op_families import FAMILIES, Draw
from onnx import TensorProto, helper, numpy_helper

NPU_EP = "NPUExecutionProvider"
CPU_EP = "CPUExecutionProvider"
RTOL = 1e-4
ATOL = 1e-4
STEP_SLACK = 1.01  # a QDQ output may be this many output quantization steps off
SPECIALS_P = 0.1  # chance that a case with `specials` sprinkles them into its float32 feeds
DYNAMIC_P = 0.25  # chance that some graph input dims are symbolic (named, not numbers)


# ---- a case: the model and its feeds -----------------------------------------------------------

@dataclass
class Case:
    family: str
    seed: int
    index: int
    draw: Draw
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]
    npu_threads: int
    symbolic: list[str]  # graph input dims named in the model, known only from the feeds

    @property
    def main(self) -> onnx.NodeProto:
        return self.model.graph.node[self.draw.main]

    def describe(self) -> str:
        """One line: what the case is, enough to read a crash's last words."""
        attrs = {a.name: _plain(helper.get_attribute_value(a)) for a in self.main.attribute}
        shapes = {name: list(v.shape) for name, v in self.feeds.items()}
        consts = {t.name: numpy_helper.to_array(t).tolist() for t in self.model.graph.initializer
                  if t.data_type != TensorProto.FLOAT and np.prod(t.dims) <= 16}
        text = (f"{self.family} seed={self.seed} case={self.index} {self.main.op_type} {attrs} "
                f"inputs={shapes}")
        if consts:
            text += f" consts={consts}"
        if self.draw.notes:
            text += f" {self.draw.notes}"
        if self.symbolic:
            text += f" symbolic={self.symbolic}"
        return text + f" npu_threads={self.npu_threads}"

    def replay(self) -> str:
        return (f"python tests/fuzz_ops.py --family {self.family} --seed {self.seed} "
                f"--case {self.index}")


def _plain(value):
    return value.decode() if isinstance(value, bytes) else value


def case_rng(family: str, seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, index, zlib.crc32(family.encode())])


def make_case(family: str, seed: int, index: int) -> Case:
    """The case's model (outputs typed by shape inference) and feeds, from its numbers alone."""
    rng = case_rng(family, seed, index)
    draw = FAMILIES[family](rng)
    for i, node in enumerate(draw.nodes):
        node.name = node.name or f"{node.op_type}_{i}"
    outputs = [name for name in draw.nodes[-1].output if name]
    graph = helper.make_graph(draw.nodes, family, draw.inputs,
                              [onnx.ValueInfoProto(name=name) for name in outputs], draw.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", draw.opset)])
    model.ir_version = 8 if draw.opset < 15 else 9
    types = _output_types(model)
    for out in model.graph.output:
        out.type.tensor_type.elem_type = types.get(out.name, TensorProto.FLOAT)
    specials = draw.specials if rng.random() < SPECIALS_P else ()
    feeds = {info.name: draw.feeds.get(info.name) for info in draw.inputs}
    for info in draw.inputs:
        if feeds[info.name] is None:
            feeds[info.name] = random_feed(rng, info, specials)
    threads = int(rng.integers(1, 3))
    symbolic = []
    if rng.random() < DYNAMIC_P:  # the shapes the NPU compiles for at run time
        for info in model.graph.input:
            for j, dim in enumerate(info.type.tensor_type.shape.dim):
                if rng.random() < 0.5:
                    dim.dim_param = f"{info.name}_{j}"
                    symbolic.append(dim.dim_param)
    return Case(family, seed, index, draw, model, feeds, threads, symbolic)


def _output_types(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - onnxruntime will say what is wrong with the model
        return {}
    return {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info
            if v.type.tensor_type.elem_type}


def random_feed(rng: np.random.Generator, info: onnx.ValueInfoProto,
                specials: Sequence[float] = ()) -> np.ndarray:
    """Standard normal floats (float32: one of `specials` at 20% of the places), integers
    around +-10 (non-negative for unsigned), booleans half true."""
    elem = info.type.tensor_type.elem_type
    shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    if elem == TensorProto.BOOL:
        return np.asarray(rng.random(shape) < 0.5)
    values = np.asarray(rng.standard_normal(shape))  # a rank-0 draw is a Python float
    if np.issubdtype(dtype, np.floating):
        if specials and elem == TensorProto.FLOAT:
            odd = np.array(specials)[rng.integers(0, len(specials), shape)]
            values = np.where(rng.random(shape) < 0.2, odd, values)
        return values.astype(dtype)
    values = np.abs(values) if np.issubdtype(dtype, np.unsignedinteger) else values
    return np.asarray(values * 10).astype(dtype)  # values * 10 of rank 0 is a scalar


# ---- running and comparing ---------------------------------------------------------------------

@dataclass
class Outcome:
    status: str  # "ok", "skipped" (onnxruntime CPU rejects the model) or "bad"
    on_npu: bool = False
    why: str = ""


def _options():
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    return options


def cpu_run(model: bytes, feeds: dict, optimized: bool = True) -> list[np.ndarray]:
    """onnxruntime's CPU provider: the oracle (unoptimized: its float path for QDQ models)."""
    import onnxruntime as ort

    options = _options()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, options, providers=[CPU_EP]).run(None, feeds)


def npu_run(model: bytes, feeds: dict, threads: int, main: str) -> tuple[list[np.ndarray], bool]:
    """Our session's outputs, and whether node `main` was placed on the NPU."""
    import provider

    session = provider.InferenceSession(model, _options(), providers=[NPU_EP, CPU_EP],
                                        provider_options=[{"npu_threads": str(threads)}, {}])
    on_npu = any(p.name == main and p.device == "NPU" for p in session.partition())
    return session.run(None, feeds), on_npu


def compare(got: list, want: list, step: float = 0.0) -> str | None:
    """Why `got` differs from onnxruntime's `want`, or None: shapes and dtypes equal; floats
    np.allclose(rtol=RTOL, atol=ATOL, equal_nan=True) or, with a quantization `step`, within
    one step; anything else exactly."""
    if (why := structure_mismatch(got, want)) is not None:
        return why
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if np.issubdtype(w.dtype, np.floating):
            rtol, atol = (0.0, step * STEP_SLACK) if step else (RTOL, ATOL)
            close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = g == w
        if not np.all(close):
            return f"output {i} {w.shape} {w.dtype}: " + _differences(g, w, ~close)
    return None


def _differences(got: np.ndarray, want: np.ndarray, wrong: np.ndarray) -> str:
    """How many places differ, the largest difference and a few places."""
    where = np.argwhere(wrong)
    text = f"{len(where)} of {want.size} differ"
    if np.issubdtype(want.dtype, np.number) and want.dtype != np.bool_:
        with np.errstate(invalid="ignore"):  # inf - inf
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))[wrong]
        finite = diff[np.isfinite(diff)]
        text += f", max |diff| {finite.max() if finite.size else float('nan'):.4g}"
    samples = [f"{tuple(int(v) for v in p)}: got {got[tuple(p)]} want {want[tuple(p)]}"
               for p in where[:3]]
    return text + "; " + "; ".join(samples)


def run_case(case: Case) -> Outcome:
    """onnxruntime CPU (a refusal skips the case), then our session, then the comparison."""
    model = case.model.SerializeToString()
    if case.main.op_type in ("ArgMax", "ArgMin") and any(
            np.isnan(f).any() for f in case.feeds.values() if f.dtype.kind == "f"):
        # ONNX leaves a NaN's index open, and onnxruntime's answer depends on its version
        # (1.23 scans: a NaN wins only as the first value; 1.32's vector path may pick a
        # number that is not the largest): no oracle
        return Outcome("skipped", why="a NaN in an ArgMax/ArgMin input (no defined index)")
    try:
        references = [cpu_run(model, case.feeds)]
        if case.draw.step:  # within a step of the fused int8 or of the float path
            references.append(cpu_run(model, case.feeds, optimized=False))
    except Exception as e:  # noqa: BLE001 - no oracle: the case is skipped
        return Outcome("skipped", why=f"onnxruntime CPU: {type(e).__name__}: {str(e)[:200]}")
    try:
        got, on_npu = npu_run(model, case.feeds, case.npu_threads, case.main.name)
    except Exception as e:  # noqa: BLE001 - onnxruntime CPU ran this model: any error is a bug
        return Outcome("bad", why=f"NPU session raised {type(e).__name__}: {str(e)[:500]}")
    mismatches = [compare(got, want, case.draw.step) for want in references]
    if all(mismatches) and not agrees_with_reference(case, got):
        return Outcome("bad", on_npu, mismatches[0])
    return Outcome("ok", on_npu)


def agrees_with_reference(case: Case, got: list) -> bool:
    """Whether onnx's reference evaluator computes what the NPU did: the tie-breaker where
    onnxruntime CPU disagrees (onnxruntime 1.23 divides a count_include_pad average by the
    valid count at the end pads, and gives NaN for a LogSumExp holding +inf; 1.32 and the
    reference do not)."""
    from onnx.reference import ReferenceEvaluator

    try:
        reference = ReferenceEvaluator(_same_pads_written(case.model, case.feeds)).run(
            None, case.feeds)
    except Exception:  # noqa: BLE001 - no tie-breaker: the mismatch stands
        return False
    return not compare(got, [np.asarray(r) for r in reference], case.draw.step)


def _same_pads_written(model: onnx.ModelProto, feeds: dict) -> onnx.ModelProto:
    """The model with each pool / conv on a fed input whose auto_pad is SAME_* given the
    explicit pads ONNX derives (and ceil_mode 0: SAME's ceil(size / stride) windows fit
    exactly), for onnx's reference, which refuses ceil_mode with auto_pad."""
    from converters.lite.padding import same_total

    model = copy.deepcopy(model)
    for node in model.graph.node:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        mode = a.get("auto_pad", b"NOTSET")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in ("SAME_UPPER", "SAME_LOWER") or node.input[0] not in feeds:
            continue
        sizes = feeds[node.input[0]].shape[2:]
        kernel = a.get("kernel_shape") or list(
            next(i for i in model.graph.initializer if i.name == node.input[1]).dims[2:])
        strides, dilations = a.get("strides", [1] * len(sizes)), a.get("dilations", [1] * len(sizes))
        totals = [same_total(*v) for v in zip(sizes, kernel, strides, dilations, strict=True)]
        if min(totals) < 0:
            continue
        small, large = [t // 2 for t in totals], [t - t // 2 for t in totals]
        pads = (large + small) if mode == "SAME_LOWER" else (small + large)
        keep = [x for x in node.attribute if x.name not in ("auto_pad", "pads", "ceil_mode")]
        del node.attribute[:]
        node.attribute.extend([*keep, helper.make_attribute("pads", pads)])
    return model


@dataclass
class Summary:
    ran: int = 0
    on_npu: int = 0
    skipped: int = 0
    bad: int = 0

    def line(self, family: str) -> str:
        return (f"{family:8} ran {self.ran:4}  on_npu {self.on_npu:4}  "
                f"skipped {self.skipped:4}  bad {self.bad:3}")


def run_family(family: str, seed: int, indices: Sequence[int], out: TextIO = sys.stdout,
               save: Path | None = None) -> Summary:
    """Run the cases; each is printed (and flushed) before it runs, each bad one after."""
    summary = Summary()
    for index in indices:
        case = make_case(family, seed, index)
        print(f"case {case.describe()}", file=out, flush=True)
        if save is not None:
            save_case(case, save)
        outcome = run_case(case)
        if outcome.status == "skipped":
            summary.skipped += 1
            continue
        summary.ran += 1
        summary.on_npu += outcome.on_npu
        if outcome.status == "bad":
            summary.bad += 1
            where = "NPU" if outcome.on_npu else "CPU"
            print(f"BAD {family} seed={seed} case={index} {case.main.op_type} (placed on {where})"
                  f": {outcome.why}\n  replay: {case.replay()}", file=out, flush=True)
    return summary


def save_case(case: Case, folder: Path) -> None:
    """The case's model.onnx and feeds.npz in `folder/FAMILY-SEED-INDEX`."""
    target = folder / f"{case.family}-{case.seed}-{case.index}"
    target.mkdir(parents=True, exist_ok=True)
    onnx.save(case.model, str(target / "model.onnx"))
    np.savez(target / "feeds.npz", **case.feeds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", choices=[*FAMILIES, "all"],
                        help="a family to run (repeatable; default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=100, help="cases per family")
    parser.add_argument("--case", type=int, action="append",
                        help="run only this case index (repeatable): a replay")
    parser.add_argument("--save", type=Path, help="write each case's model and feeds here")
    args = parser.parse_args(argv)
    faulthandler.enable()  # a crash prints the Python stack under the last `case` line
    families = args.family or ["all"]
    names = list(FAMILIES) if "all" in families else list(dict.fromkeys(families))
    indices = args.case or range(args.cases)
    summaries = {name: run_family(name, args.seed, indices, save=args.save) for name in names}
    print(f"summary (seed {args.seed}, {len(indices)} cases per family)")
    for name, summary in summaries.items():
        print("  " + summary.line(name))
    bad = sum(s.bad for s in summaries.values())
    print(f"{bad} bad case(s)" if bad else "no bad cases", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
