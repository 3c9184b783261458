"""`litenpu inspect MODEL`: what a model file holds (I/O, ops, weights, producer) and where
its nodes run.

One summariser per file format (`converters.convert.format_of`) in SUMMARIZERS; each returns
the format-neutral `ModelSummary`, so adding a format is one function and one table entry.
The placement comes from a real NPU session on the file (`InferenceSession.partition()`):
every node on the NPU or on CPU with the reason the NPU did not take it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import onnx

from converters.convert import format_of
from converters.errors import InvalidModelError
from converters.graph_view import ValueInfo, load_onnx, value_info
from converters.lite import reader
from converters.lite.summary import ModelSummary, TensorInfo, format_summary, summarize
from converters.proto_text import check_text
from provider.commands.registry import command, key_values
from provider.ort import EP_NAME
from provider.placement import NodePlacement, PlacementSummary


def _summarize_ms(path: Path) -> ModelSummary:
    return summarize(reader.load(path, lazy=True))


def _summarize_onnx(path: Path) -> ModelSummary:
    """ONNX op types and initializer sizes, read without loading external weight data."""
    model = load_onnx(path, load_external_data=False)
    check_text(model, str(path))
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)

    def info(v: onnx.ValueInfoProto) -> TensorInfo:
        vi = value_info(v)
        dims = [d if d is not None else "?" for d in vi.shape or ()]
        return TensorInfo(v.name, vi.dtype.name if vi.dtype is not None else "?", dims)

    def nbytes(t: onnx.TensorProto) -> int:
        dtype = ValueInfo(t.name, t.data_type).dtype
        if any(d < 0 for d in t.dims):
            raise InvalidModelError(f"{path}: initializer {t.name!r} has negative dims "
                                    f"{list(t.dims)}")
        return math.prod(t.dims) * (dtype.itemsize if dtype is not None else 0)

    histogram = Counter(n.op_type for n in graph.node)
    external = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    return ModelSummary(
        format="ONNX (.onnx)", name=graph.name,
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        source_framework=f"ONNX (IR {model.ir_version}, opset {opsets})",
        inputs=[info(v) for v in graph.input if v.name not in inits],
        outputs=[info(v) for v in graph.output], nodes=len(graph.node),
        ops=dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
        weights=len(inits), weight_bytes=sum(nbytes(t) for t in graph.initializer),
        external_weight_bytes=sum(nbytes(t) for t in external))


def _summarize_mindir(path: Path) -> ModelSummary:
    """The summary of the Lite IR a .mindir imports to (ops are Lite ops)."""
    from converters.mindir.importer import import_mindir

    return replace(summarize(import_mindir(path)[0]), format="MindIR (.mindir), as Lite IR")


SUMMARIZERS: dict[str, Callable[[Path], ModelSummary]] = {
    ".ms": _summarize_ms,
    ".onnx": _summarize_onnx,
    ".mindir": _summarize_mindir,
}


def placement(path: Path, options: dict[str, str] | None = None) -> list[NodePlacement]:
    """Where each node of the model file runs with the NPU EP (onnxruntime's CPU EP for the rest)."""
    from provider.session import CPU_EP, InferenceSession

    # onnxruntime's own logging follows the CLI's setting (its placement warning repeats ours)
    session = InferenceSession(str(path), providers=[EP_NAME, CPU_EP],
                               provider_options=[options or {}, {}])
    return session.partition()


def format_placement(nodes: list[NodePlacement]) -> str:
    """The placement summary (`provider.placement`): counts, then the CPU nodes by reason."""
    return PlacementSummary.of(nodes).text()


def summarize_file(path: Path) -> ModelSummary:
    """The summary of a model file, by its format; UnsupportedError lists the known ones."""
    return SUMMARIZERS[format_of(path)](path)


EXAMPLES = """examples:
  litenpu inspect model.onnx                     # summary + which nodes run on the NPU, and why not
  litenpu inspect model.ms --json                # the same as JSON
  litenpu inspect model.onnx --option disable_ops=Softmax
  litenpu inspect model.mindir --no-placement    # summary only (no session is created)
  litenpu inspect model.onnx --memory            # + NPU memory: weights, internal, I/O bytes
"""


def _add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES
    p.add_argument("model", type=Path, help=f"model file ({', '.join(sorted(SUMMARIZERS))})")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-placement", action="store_true",
                   help="skip the placement (which needs an NPU session on the model)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an NPU provider option for the placement session (repeatable)")
    p.add_argument("--memory", action="store_true",
                   help="print the NPU memory plan (weights, internal, I/O bytes; dynamic dims at 1)")


@command("inspect", "show a model's inputs, outputs, ops, weights, producer and NPU placement",
         _add_args)
def run(args: argparse.Namespace) -> int:
    summary = summarize_file(args.model)
    nodes = None if args.no_placement else placement(args.model, key_values(args.option, "--option"))
    plan = None
    if args.memory:
        from provider.memory_report import format_memory, memory_plan
        plan = memory_plan(args.model, key_values(args.option, "--option"))
    if args.json:
        data = summary.to_dict()
        if nodes is not None:
            data["placement"] = [asdict(n) for n in nodes]
        if plan is not None:
            data["memory"] = plan.to_dict()
        print(json.dumps(data, indent=2))
    else:
        print(format_summary(summary, str(args.model)))
        if nodes is not None:
            print(format_placement(nodes))
        if plan is not None:
            print(format_memory(plan))
    return 0

