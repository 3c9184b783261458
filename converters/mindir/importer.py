"""MindIR (.mindir) -> Lite IR.

`import_mindir` parses the protobuf (untrusted), resolves primitives and constants
(converters.mindir.graph), drops MindSpore's side-effect plumbing (Load, UpdateState,
Depend, MakeTuple/TupleGetItem, monads), turns parameters into weights and converts every
primitive through the op table (converters.mindir.ops). A primitive with no table entry
becomes a Lite `Custom` node of type "mindir:<Prim>" with its attributes serialized.
"""

from __future__ import annotations

import logging
import os
import pathlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from converters.errors import InvalidModelError, UnsupportedError
from converters.lite.ir import LiteModel
from converters.mindir._generated import mind_ir_pb2 as pb
from converters.mindir.args import as_array
from converters.mindir.builder import Builder, TupleValue
from converters.mindir.external import ExternalDataReader
from converters.mindir.graph import Const, MsGraph, MsNode, parse_graph
from converters.mindir.ops import OPS
from converters.mindir.values import MONAD
from converters.proto_text import check_text
from converters.report import ConversionReport, CustomNode

log = logging.getLogger("litenpu.mindir")

CUSTOM_PREFIX = "mindir:"
# MindIR's fmk_type in MindSpore Lite's converter (FmkType: TF 0, CAFFE 1, ONNX 2, MS 3, TFLITE 4).
FMK_MINDIR = 3
_PLUMBING = {"Load", "UpdateState", "Depend", "MakeTuple", "TupleGetItem"}


@dataclass
class MindirImportReport(ConversionReport):
    """The shared conversion report (`mapped` counts MindSpore primitives) plus MindIR facts:
    producer, side-effect plumbing removed, external data files read."""

    producer: str = ""
    model_version: str = ""  # MindSpore writes its own version here
    mind_ir_version: int = 0
    removed: Counter = field(default_factory=Counter)
    external_files: list[str] = field(default_factory=list)


def import_mindir(source: str | os.PathLike | bytes, *, base_dir: str | os.PathLike | None = None,
                  progress: Callable[[int, int], None] | None = None
                  ) -> tuple[LiteModel, MindirImportReport]:
    """Convert a .mindir file (path or bytes) to a LiteModel; external weights resolve
    against the file's directory (or `base_dir`). `progress(done, total)` follows the nodes."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, label = bytes(source), "<bytes>"
        root = pathlib.Path(base_dir) if base_dir is not None else None
    else:
        path = pathlib.Path(source)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise InvalidModelError(f"{path}: cannot read MindIR file: {e}") from e
        label, root = str(path), pathlib.Path(base_dir) if base_dir is not None else path.parent
    model = _parse(data, label)
    report = MindirImportReport(source=label, producer=model.producer_name,
                                model_version=model.model_version,
                                mind_ir_version=model.mind_ir_version)
    if model.HasField("little_endian") and not model.little_endian:
        raise InvalidModelError(f"{label}: exported on a big-endian device; litenpu loads little-endian MindIR only")
    graph = parse_graph(model)
    external = ExternalDataReader(root)
    lite = _convert(graph, Builder(graph, external), report, progress)
    lite.version = model.model_version
    report.external_files = list(external.files)
    report.weight_bytes = sum(t.data.nbytes for t in lite.tensors if t.data is not None)
    log.info("imported %s: %d nodes, %d tensors, %d Custom", label, len(lite.nodes), len(lite.tensors),
             len(report.custom))
    return lite, report


def _parse(data: bytes, label: str) -> pb.ModelProto:
    model = pb.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InvalidModelError(f"{label}: not a MindIR protobuf ({e})") from e
    if not model.HasField("graph") or not model.graph.output:
        raise InvalidModelError(f"{label}: not a MindIR model (no graph with outputs)")
    check_text(model, label)
    return model


def _convert(graph: MsGraph, b: Builder, report: MindirImportReport,
             progress: Callable[[int, int], None] | None) -> LiteModel:
    for name, info in graph.inputs:
        b.add_input(name, info)
    live = _live(graph)
    for done, node in enumerate(live, 1):
        if node.prim in _PLUMBING:
            b.values[node.output] = _plumbing(b, node)
            report.removed[node.prim] += 1
        elif node.prim in OPS:
            b.values[node.output] = OPS[node.prim](b, node)
            report.mapped[node.prim] += 1
        else:
            b.values[node.output] = _custom(b, node)
            report.custom.append(CustomNode(node.name, node.prim, "no Lite mapping for this primitive"))
        if progress is not None:
            progress(done, len(live))
    for name in graph.outputs:
        b.model.outputs.extend(_output_tensors(b, name))
    b.model.fmk_type = FMK_MINDIR
    return b.model.finalize_subgraph()


def _live(graph: MsGraph) -> list[MsNode]:
    """Nodes the outputs depend on; Depend's and UpdateState's ordering inputs do not count."""
    by_output = {n.output: n for n in graph.nodes}
    needed: set[str] = set()
    stack = list(graph.outputs)
    while stack:
        name = stack.pop()
        if name in needed or name not in by_output:
            continue
        needed.add(name)
        node = by_output[name]
        if node.prim in ("Depend", "Load"):
            stack.extend(node.inputs[:1])
        elif node.prim != "UpdateState":
            stack.extend(node.inputs)
    return [n for n in graph.nodes if n.output in needed]


def _plumbing(b: Builder, n: MsNode) -> Any:
    if n.prim == "UpdateState":
        return MONAD
    if n.prim == "MakeTuple":
        items = tuple(b.value(i) for i in n.inputs)
        return TupleValue(items, len(items), n.name)
    if not n.inputs:
        raise InvalidModelError(f"node {n.name!r} ({n.prim}): has no inputs")
    if n.prim != "TupleGetItem":  # Load / Depend pass their first input on
        return b.value(n.inputs[0])
    tup, index = b.value(n.inputs[0]), b.arg(n, 1, "index")
    if not isinstance(tup, TupleValue) or not isinstance(index, int):
        raise InvalidModelError(f"node {n.name!r} (TupleGetItem): needs a tuple and an integer index")
    if not -tup.arity <= index < tup.arity:
        raise InvalidModelError(f"node {n.name!r} (TupleGetItem): index {index} out of range for {tup.arity} items")
    index %= tup.arity
    if index >= len(tup.items):
        raise UnsupportedError(f"node {n.name!r}: output {index} of {tup.source!r} exists only in training")
    return tup.items[index]


def _custom(b: Builder, n: MsNode) -> Any:
    """Unknown primitive: tensor inputs stay inputs; attributes and constant inputs are serialized."""
    attr = dict(n.raw_attrs)
    inputs = []
    for pos, name in enumerate(n.inputs):
        v = b.value(name)
        if isinstance(v, Const):
            attr[f"input:{pos}"] = v.raw
        elif v is not MONAD:
            inputs.append(b.input(n, pos))
    count = len(n.abstract) if n.abstract and len(n.abstract) > 1 else 1
    log.warning("node %r: MindSpore primitive %s has no Lite mapping; kept as Custom", n.name, n.prim)
    outs = b.emit(n, "Custom", {"type": CUSTOM_PREFIX + n.prim, "attr": attr}, inputs, outputs=count)
    return TupleValue(tuple(outs), count, n.name) if count > 1 else outs[0]


def _output_tensors(b: Builder, name: str) -> list[int]:
    """The tensors graph output `name` stands for, nested tuples flattened in order."""
    out: list[int] = []
    pending = [b.value(name)]
    while pending:  # iterative: a chain of MakeTuples may be deeper than Python's stack
        v = pending.pop()
        if isinstance(v, TupleValue):
            pending.extend(reversed(v.items))
        elif isinstance(v, int):
            out.append(v)
        elif isinstance(v, Const) and v.error is None and v.value is not None:
            out.append(b.constant(as_array(v.value, _dtype_of(v.value), f"graph output {b.short(name)!r}"), name))
        else:
            raise UnsupportedError(f"graph output {b.short(name)!r} is not a tensor")
    return out


def _dtype_of(value: Any) -> np.dtype:
    return value.dtype if isinstance(value, np.ndarray) else np.asarray(value).dtype
