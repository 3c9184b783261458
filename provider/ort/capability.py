"""GetCapability's decisions: which nodes the NPU takes, grouped into fusable partitions.

The graph onnxruntime offers is imported to Lite IR once (`import_onnx` on the whole graph;
the report says which Lite nodes each ONNX node became), and the device answers for every
Lite node in one pass (`provider.npu.capability.assess`: the static checks of its op table,
and, where input shapes are known, the op's own lowering rule). An ONNX node goes to the NPU
when every Lite node it became does. Supported nodes are then grouped into partitions
onnxruntime accepts (`group`): each partition is convex, i.e. no path leaves it through a CPU
node and comes back (values a control-flow node's body reads count as its inputs), so fusing
it cannot create a cycle. The import is kept (`ImportedGraph`) for Compile, which cuts each
fused partition out of it instead of importing again. A graph the NPU may take whole (every
node has a primitive, its input shapes are static, no cache entry holds its Program yet) is
compiled at once instead of assessed: the compile lowers every node, so it answers for all
of them, and Compile adopts its Program (`ImportedGraph.whole`); only if the compile fails
is every node assessed. A graph of dynamic shapes that goes to the NPU whole is handed over
as its cut (weights copied), so Compile reads nothing again. A compiled model (one holding
our EPContext nodes) is not imported: its EPContext nodes are claimed, each alone, and its
other nodes stay on CPU. Nothing here raises for a node: a node that cannot go to the NPU
gets a reason instead.
"""

from __future__ import annotations

import ctypes as C
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from converters.lite.ir import LiteModel
from converters.onnx_import import import_onnx
from converters.onnx_ops.import_quant import QOPERATORS
from converters.report import ConversionReport
from provider.errors import LitenpuError, UnsupportedError
from provider.npu.capability import assess, has_row, supported_nodes
from provider.npu.program import Program
from provider.options import NpuOptions
from provider.ort import abi, epcontext
from provider.ort.abi import ELEMENT_TO_NUMPY
from provider.ort.graph import (
    OrtGraphContents,
    OrtNode,
    read_graph,
    static_inputs,
    string_attribute,
)

log = logging.getLogger("litenpu.ort")

# A graph holding our EPContext nodes was compiled: its other nodes stayed off the NPU then, so
# they are not imported and assessed again (a warm start does no Lite IR work).
COMPILED = "a compiled model (it holds NPU EPContext nodes): only those run on the NPU"


@dataclass
class Placement:
    """Where the nodes of one graph went: NPU partitions, and why the rest stayed on CPU."""

    graph: str = ""
    nested: bool = False  # a control-flow body rather than the main graph
    partitions: list[list[str]] = field(default_factory=list)  # node names per NPU partition
    cpu: dict[str, str] = field(default_factory=dict)  # node name -> reason it is not on the NPU
    op_types: dict[str, str] = field(default_factory=dict)  # node name -> op type
    failure: str = ""  # set when the graph could not be read at all (nothing claimed)

    @property
    def npu_nodes(self) -> int:
        return sum(len(p) for p in self.partitions)


def _node_key(node: OrtNode) -> tuple[str, ...]:
    """What names a node across onnxruntime's graphs: its outputs (each value has one writer)."""
    return tuple(node.view.outputs)


class Whole(NamedTuple):
    """A graph the NPU takes whole, handed from GetCapability to Compile so that Compile
    need not read the graph again: the partition Compile will be given, cut as Compile cuts
    it (inputs as the fused node orders them). Static input shapes: compiled while the
    device was asked (its lowering answered for every node), with its Program, the compile's
    seconds and the content digest when a cache key needed it. Dynamic ones: the cut alone,
    its weights copied (`own_weights`), compiled per shape at run time."""

    lite: LiteModel
    shapes: dict[str, tuple[int, ...]] | None
    program: Program | None
    seconds: float = 0.0
    fingerprint: str | None = None


@dataclass
class ImportedGraph:
    """One graph GetCapability imported: its Lite IR and where every node and value went."""

    lite: LiteModel
    report: ConversionReport
    index: dict[tuple[str, ...], int]  # _node_key -> ONNX node index
    whole: Whole | None = None  # the NPU takes the whole graph: its Program, for Compile

    def adopt(self, inputs: Sequence[str], outputs: Sequence[str]) -> Whole | None:
        """The whole graph's Program, handed over once, if the fused node with these inputs
        and outputs (in this order) is the whole graph."""
        whole = self.whole
        if whole is None:
            return None
        lite = whole.lite
        if ([lite.tensors[i].name for i in lite.inputs] != list(inputs)
                or [lite.tensors[i].name for i in lite.outputs] != list(outputs)):
            return None
        self.whole = None
        return whole

    def partition(self, contents: OrtGraphContents, inputs: Sequence[str],
                  outputs: Sequence[str], name: str) -> LiteModel | None:
        """The Lite IR of the fused partition `contents` (its nodes found by their outputs)
        with the fused node's `inputs` / `outputs`, its weights those of `contents` (the
        arrays onnxruntime holds now); None when this graph does not hold all its nodes."""
        report = self.report
        found = [self.index.get(_node_key(n)) for n in contents.nodes]
        if None in found or any(n not in report.values for n in (*inputs, *outputs)):
            return None
        nodes = sorted({j for i in found for j in report.origins[i]})
        part = self.lite.cut(nodes, [report.values[n] for n in inputs],
                             [report.values[n] for n in outputs], name)
        tensors = list(part.tensors)
        for position, (index, wanted) in enumerate(zip([*part.inputs, *part.outputs],
                                                       [*inputs, *outputs], strict=True)):
            if tensors[index].name != wanted:  # an alias (Identity-like op) of another value
                if position >= len(part.inputs) and index in part.inputs:
                    return None  # an output that is an input under another name
                tensors[index] = dataclasses.replace(tensors[index], name=wanted)
        by_name = {t.name: i for i, t in enumerate(tensors)}
        for initializer, array in contents.initializers.items():
            i = by_name.get(initializer)
            if i is not None and initializer in report.initializers:
                tensors[i] = tensors[i].with_data(array)
        return dataclasses.replace(part, tensors=tensors)


@dataclass
class Claim:
    """GetCapability's answer for one graph: placement, node groups to fuse, the import."""

    placement: Placement
    groups: list[list[int]]  # node addresses per partition
    imported: ImportedGraph | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # "read", "import", "assess"


def _static_reason(contents: OrtGraphContents, node: OrtNode, options: NpuOptions) -> str | None:
    """Why `node` stays on CPU before the device is asked (None: ask the device)."""
    view = node.view
    if contents.nested:
        return "inside a control-flow subgraph (If/Loop/Scan bodies stay on CPU)"
    if view.op_type in options.placement.disable_ops:
        return "disabled by provider option disable_ops"
    if node.unreadable:
        return node.unreadable
    if view.domain and (view.domain, view.op_type) not in QOPERATORS:
        return f"domain {view.domain!r} is not ONNX's default"
    for name in (*view.inputs, *view.outputs):
        info = contents.value_info.get(name)
        if name and info is not None and info.elem_type not in ELEMENT_TO_NUMPY:
            return f"value {name!r} has ONNX element type {info.elem_type}, which the NPU lacks"
    return None


# Compiles a whole graph's partition at its static input shapes; None when it does not.
CompileWhole = Callable[[LiteModel, dict[str, tuple[int, ...]]], Whole | None]


def _whole(graph: ImportedGraph, contents: OrtGraphContents, candidates: list[int],
           options: NpuOptions, compile_whole: CompileWhole | None) -> Whole | None:
    """The graph's Program when every node can go to the NPU as one partition (each node
    has a Lite primitive that passes the static checks) and it compiles: compiling lowers
    every node, so it answers the device's question for all of them. `compile_whole` is
    None unless the graph's input shapes are static."""
    report = graph.report
    if (compile_whole is None or len(candidates) != len(contents.nodes) or report.custom
            or len(contents.nodes) < options.placement.min_partition_nodes
            or not all(report.origins)):  # the compile checks the static rows first
        return None
    cut = _whole_cut(graph, contents)
    if cut is None:
        return None
    names = {cut.tensors[i].name for i in cut.inputs}
    return compile_whole(cut, {vi.name: tuple(vi.shape) for vi in contents.inputs
                               if vi.name in names})


def _whole_cut(graph: ImportedGraph, contents: OrtGraphContents) -> LiteModel | None:
    """The whole graph as the one partition Compile would be given: its inputs those the
    nodes read, in the graph's order (as the fused node has them)."""
    read = {name for n in contents.nodes for name in (*n.view.inputs, *n.view.implicit_inputs)}
    inputs = [vi.name for vi in contents.inputs if vi.name in read]
    return graph.partition(contents, inputs, [vi.name for vi in contents.outputs],
                           graph.lite.name)


def _device_reasons(contents: OrtGraphContents, candidates: list[int], options: NpuOptions,
                    seconds: dict[str, float], compile_whole: CompileWhole | None
                    ) -> tuple[dict[int, str], ImportedGraph]:
    """Import the graph once and ask the device about every Lite node; a reason per
    candidate ONNX node it refuses, and the import (kept for Compile). A graph the NPU may
    take whole is compiled first (`_whole`); only if that fails is every node assessed."""
    start = time.perf_counter()
    lite, report = import_onnx(contents.view())
    imported = time.perf_counter()
    graph = ImportedGraph(lite, report, {_node_key(n): i for i, n in enumerate(contents.nodes)})
    graph.whole = _whole(graph, contents, candidates, options, compile_whole)
    checked = time.perf_counter()  # a compile counts its own seconds
    verdicts = ([None] * len(lite.nodes) if graph.whole is not None
                else assess(lite, options.compile))
    seconds.update({"import": imported - start, "assess": time.perf_counter() - checked})
    custom = iter(report.custom)
    reasons: dict[int, str] = {}
    for i, origin in enumerate(report.origins):
        carried = next(custom) if any(lite.nodes[j].op == "Custom" for j in origin) else None
        if i not in candidates:
            continue
        refusal = next(((j, verdicts[j]) for j in origin if verdicts[j] is not None), None)
        if carried is not None:  # the NPU runs some ONNX ops carried as Custom
            if refusal is not None:
                reasons[i] = f"no Lite primitive: {carried.reason}"
                if has_row(lite.nodes[refusal[0]]):
                    reasons[i] += f"; the NPU's own form: {refusal[1]}"
        elif not origin:
            reasons[i] = "imports to no NPU operation"
        elif refusal is not None:
            reasons[i] = f"{lite.nodes[refusal[0]].op}: {refusal[1]}"
    return reasons, graph


def _partition_refusals(imported: ImportedGraph, groups: list[list[int]]) -> dict[int, str]:
    """Nodes the device refuses once their partition is cut out: a constant input that the
    whole graph could fold (e.g. a shape computed from Shape) but that this partition
    receives from the CPU or another partition is computed at run time."""
    lite, report = imported.lite, imported.report
    refused: dict[int, str] = {}
    for indices in groups:
        owner = {j: i for i in indices for j in report.origins[i]}
        members = sorted(owner)
        produced = {t for j in members for t in lite.nodes[j].outputs}
        outside = dict.fromkeys(t for j in members for t in lite.nodes[j].inputs
                                if t not in produced and lite.tensors[t].data is None)
        verdicts = supported_nodes(lite.cut(members, list(outside), []))
        for k, j in enumerate(members):
            if verdicts[k] is not None and owner[j] not in refused:
                refused[owner[j]] = f"{lite.nodes[j].op}: {verdicts[k]} in its partition"
    return refused


def group(inputs: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]],
          supported: Sequence[bool]) -> list[list[int]]:
    """Convex partitions of the supported nodes of a topologically ordered graph.

    Walk the nodes in order and grow one open partition; a node "depends on" the partition
    when a path from the partition reaches it. A supported node joins the open partition
    unless one of its inputs comes from an unsupported node that depends on it (joining would
    make a cycle through the CPU); then the partition closes and a new one opens. A node's
    inputs include the outer values its subgraphs read (If/Loop/Scan bodies).
    """
    producer = {name: i for i, names in enumerate(outputs) for name in names if name}
    groups: list[list[int]] = []
    current: list[int] = []
    member: set[int] = set()
    tainted: set[int] = set()  # nodes outside `current` reachable from it
    for i, ok in enumerate(supported):
        preds = {producer[n] for n in inputs[i] if n in producer}
        if ok and not (preds & tainted):
            current.append(i)
            member.add(i)
            continue
        if ok:  # joining would close a cycle through the CPU: start a new partition
            groups.append(current)
            current, member, tainted = [i], {i}, set()
            continue
        if preds & (member | tainted):
            tainted.add(i)
    if current:
        groups.append(current)
    return [g for g in groups if g]


def claim(ort: abi.Ort, graph: int, options: NpuOptions,
          compile_whole: CompileWhole | None = None) -> Claim:
    """GetCapability on one OrtGraph: placement, partitions and the import behind them;
    with `compile_whole`, a graph the NPU takes whole is compiled now (`ImportedGraph.whole`)."""
    compiled = _context_claim(ort, graph)
    if compiled is not None:
        return compiled
    start = time.perf_counter()
    contents = read_graph(ort, graph, copy_initializers=False)
    seconds = {"read": time.perf_counter() - start}
    placement = Placement(graph=contents.name, nested=contents.nested)
    nodes = contents.nodes
    labels = [n.view.name or f"{n.view.op_type}_{i}" for i, n in enumerate(nodes)]
    placement.op_types.update(zip(labels, (n.view.op_type for n in nodes), strict=True))
    # Our EPContext nodes (a model compiled earlier) are claimed alone: one node, one kernel.
    saved = [i for i, n in enumerate(nodes)
             if epcontext.is_ours(n.view.op_type, n.view.domain, n.view.attrs)]
    reasons: dict[int, str] = {}
    for i, node in enumerate(nodes):
        why = None if i in saved else (COMPILED if saved else
                                       _static_reason(contents, node, options))
        if why is not None:
            reasons[i] = why
    candidates = [i for i in range(len(nodes)) if i not in reasons and i not in saved]
    imported = None
    static = static_inputs(ort, contents.inputs)
    if candidates:
        try:
            device, imported = _device_reasons(
                contents, candidates, options, seconds, compile_whole if static else None)
        except LitenpuError as e:  # a graph the importer refuses stays on CPU
            device = dict.fromkeys(candidates, f"the graph cannot be imported: {e}")
        except Exception:  # noqa: BLE001 - a bug of the importer: logged, the graph stays on CPU
            log.debug("importing graph %s failed", contents.name, exc_info=True)
            device = dict.fromkeys(candidates, "importing the graph failed unexpectedly (a "
                                               "litenpu bug; details at DEBUG)")
        reasons.update(device)
    node_inputs = [(*n.view.inputs, *n.view.implicit_inputs) for n in nodes]
    node_outputs = [n.view.outputs for n in nodes]
    while True:  # a node may need a value only its partition can fold: check per partition
        groups = group(node_inputs, node_outputs,
                       [i not in reasons and i not in saved for i in range(len(nodes))])
        # a whole graph that compiled has no partition boundary to check
        refused = (_partition_refusals(imported, groups)
                   if imported is not None and imported.whole is None else {})
        if not refused:
            break
        reasons.update(refused)
    chosen = []
    for indices in groups + [[i] for i in saved]:
        minimum = options.placement.min_partition_nodes
        if len(indices) < minimum and indices[0] not in saved:
            why = f"partition of {len(indices)} node(s) < min_partition_nodes={minimum}"
            placement.cpu.update(dict.fromkeys((labels[i] for i in indices), why))
            continue
        placement.partitions.append([labels[i] for i in indices])
        chosen.append([nodes[i].address for i in indices])
    if (imported is not None and imported.whole is None and not static
            and len(chosen) == 1 and len(chosen[0]) == len(nodes)):
        # the NPU takes a graph of dynamic shapes whole: Compile gets the cut, not reading
        # the graph again to find it (the weights copied: onnxruntime's are views)
        cut = _whole_cut(imported, contents)
        imported.whole = Whole(own_weights(cut), None, None) if cut is not None else None
    for i, reason in sorted(reasons.items()):
        placement.cpu[labels[i]] = reason
        log.debug("node %s (%s) stays on CPU: %s", labels[i], nodes[i].view.op_type, reason)
    log.info("NPUExecutionProvider GetCapability(%s): %d of %d nodes in %d NPU partition(s)",
             contents.name or "graph", placement.npu_nodes, len(nodes), len(chosen))
    return Claim(placement, chosen, imported, seconds)


def _context_claim(ort: abi.Ort, graph: int) -> Claim | None:
    """A graph of our EPContext nodes only (a warm start's stored model): each node claimed
    alone from its op type, domain and `source` attribute, nothing else read (the general
    path reads every node in full and every value's type). None for any other graph."""
    nodes = ort.array("Graph_GetNumNodes", "Graph_GetNodes", graph)
    if not nodes or any(ort.string("Node_GetOperatorType", n) != epcontext.OP_TYPE
                        or ort.string("Node_GetDomain", n) != epcontext.DOMAIN for n in nodes):
        return None
    names = []
    for node in nodes:
        attrs = {ort.string("OpAttr_GetName", a): a
                 for a in ort.array("Node_GetNumAttributes", "Node_GetAttributes", node)}
        source = attrs.get("source")
        if source is None or string_attribute(ort, source) != epcontext.SOURCE:
            return None
        names.append(ort.string("Node_GetName", node) or f"{epcontext.OP_TYPE}_{len(names)}")
    parent = abi.vp()
    ort.api.Graph_GetParentNode(graph, C.byref(parent))
    placement = Placement(graph=ort.string("Graph_GetName", graph), nested=bool(parent.value),
                          partitions=[[name] for name in names],
                          op_types=dict.fromkeys(names, epcontext.OP_TYPE))
    log.info("NPUExecutionProvider GetCapability(%s): %d of %d nodes in %d NPU partition(s)",
             placement.graph or "graph", len(nodes), len(nodes), len(nodes))
    return Claim(placement, [[node] for node in nodes])


def import_partition(contents: OrtGraphContents, name: str) -> LiteModel:
    """A fused partition imported on its own (when no GetCapability import holds it)."""
    lite, report = import_onnx(contents.view())
    carried = [n for n in lite.nodes if n.op == "Custom"]  # in report.custom's order
    refused = [c for c, n in zip(report.custom, carried, strict=True) if not has_row(n)]
    if refused:
        raise UnsupportedError(f"partition {name}: {refused[0].op} has no Lite primitive "
                               f"({refused[0].reason})")
    return lite


def own_weights(lite: LiteModel) -> LiteModel:
    """A copy of `lite` whose constants are its own (onnxruntime frees its initializers after
    Compile; a partition compiled per shape later must not point into them)."""
    return dataclasses.replace(lite, tensors=[
        t.with_data(np.array(t.data, copy=True)) if t.data is not None else t
        for t in lite.tensors])
