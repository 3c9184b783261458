"""GetCapability's decisions: which nodes the NPU takes, grouped into fusable partitions.

Each candidate node is imported alone (OrtGraph node -> GraphView -> Lite IR) and every Lite
node it becomes is checked with `provider.npu.capability.check`. Supported nodes are then
grouped into partitions onnxruntime accepts (`group`): each partition is convex, i.e. no path
leaves it through a CPU node and comes back, so fusing it cannot create a cycle.
When the node's input shapes are static it is also compiled alone, so what the compiler
refuses stays on CPU instead of failing the session at Compile. Nothing here raises for a
node: a node that cannot go to the NPU gets a reason instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from converters.lite.ir import LiteModel
from converters.onnx_import import import_onnx
from provider.npu import capability as npu_capability
from provider.npu.compiler import compile_model
from provider.options import NpuOptions
from provider.ort import abi, epcontext
from provider.ort.abi import ELEMENT_TO_NUMPY
from provider.ort.graph import OrtGraphContents, OrtNode, read_graph

log = logging.getLogger("litenpu.ort")


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


def node_reason(contents: OrtGraphContents, node: OrtNode, options: NpuOptions) -> str | None:
    """Why `node` cannot run on the NPU, or None when it can."""
    view = node.view
    if epcontext.is_ours(view.op_type, view.domain, view.attrs):
        return None
    if contents.nested:
        return "inside a control-flow subgraph (If/Loop/Scan bodies stay on CPU)"
    if view.op_type in options.placement.disable_ops:
        return "disabled by provider option disable_ops"
    if node.unreadable:
        return node.unreadable
    if view.domain:
        return f"domain {view.domain!r} is not ONNX's default"
    for name in (*view.inputs, *view.outputs):
        info = contents.value_info.get(name)
        if name and info is not None and info.elem_type not in ELEMENT_TO_NUMPY:
            return f"value {name!r} has ONNX element type {info.elem_type}, which the NPU lacks"
    try:
        lite, report = import_onnx(contents.node_graph(node))
    except Exception as e:  # noqa: BLE001 - any import failure only means "not on the NPU"
        return f"import failed: {type(e).__name__}: {e}"
    if report.custom:
        return f"no Lite primitive: {report.custom[0].reason}"
    if not lite.nodes:
        return "imports to no NPU operation"
    for index in range(len(lite.nodes)):
        try:
            reason = npu_capability.check(lite, index)
        except Exception as e:  # noqa: BLE001 - a checker crash only means "not on the NPU"
            reason = f"capability check failed: {type(e).__name__}: {e}"
        if reason is not None:
            return f"{lite.nodes[index].op}: {reason}"
    return _trial_compile(lite, options)


def _trial_compile(lite: LiteModel, options: NpuOptions) -> str | None:
    """With static input shapes, compile the node alone: what the compiler refuses stays on CPU."""
    if not all(lite.tensors[i].is_static for i in lite.inputs):
        return None  # checked again per concrete shape at run time
    try:
        compile_model(lite, None, enable_fp16=options.compile.enable_fp16)
    except Exception as e:  # noqa: BLE001 - a compile failure only means "not on the NPU"
        return f"compile failed: {type(e).__name__}: {e}"
    return None


def group(inputs: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]],
          supported: Sequence[bool]) -> list[list[int]]:
    """Convex partitions of the supported nodes of a topologically ordered graph.

    Walk the nodes in order and grow one open partition; a node "depends on" the partition
    when a path from the partition reaches it. A supported node joins the open partition
    unless one of its inputs comes from an unsupported node that depends on it (joining would
    make a cycle through the CPU); then the partition closes and a new one opens.
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


def claim(ort: abi.Ort, graph: int, options: NpuOptions) -> tuple[Placement, list[list[int]]]:
    """(Placement, [[node addresses], ...]) for one OrtGraph offered to GetCapability."""
    contents = read_graph(ort, graph, copy_initializers=False)
    placement = Placement(graph=contents.name, nested=contents.nested)
    labels = [n.view.name or f"{n.view.op_type}_{i}" for i, n in enumerate(contents.nodes)]
    reasons = [node_reason(contents, node, options) for node in contents.nodes]
    placement.op_types.update(zip(labels, (n.view.op_type for n in contents.nodes), strict=True))
    # Our EPContext nodes (a model compiled earlier) are claimed alone: one node, one kernel.
    saved = [i for i, n in enumerate(contents.nodes)
             if epcontext.is_ours(n.view.op_type, n.view.domain, n.view.attrs)]
    groups = group([n.view.inputs for n in contents.nodes],
                   [n.view.outputs for n in contents.nodes],
                   [r is None and i not in saved for i, r in enumerate(reasons)])
    chosen = []
    for indices in groups + [[i] for i in saved]:
        minimum = options.placement.min_partition_nodes
        if len(indices) < minimum and indices[0] not in saved:
            why = f"partition of {len(indices)} node(s) < min_partition_nodes={minimum}"
            placement.cpu.update(dict.fromkeys((labels[i] for i in indices), why))
            continue
        placement.partitions.append([labels[i] for i in indices])
        chosen.append([contents.nodes[i].address for i in indices])
    for label, node, reason in zip(labels, contents.nodes, reasons, strict=True):
        if reason is not None:
            placement.cpu[label] = reason
            log.debug("node %s (%s) stays on CPU: %s", label, node.view.op_type, reason)
    log.info("NPUExecutionProvider GetCapability(%s): %d of %d nodes in %d NPU partition(s)",
             contents.name or "graph", placement.npu_nodes, len(contents.nodes), len(chosen))
    return placement, chosen

