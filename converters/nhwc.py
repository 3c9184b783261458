"""NCHW Lite IR -> NHWC Lite IR, the layout MindSpore Lite's CPU runtime executes.

The ONNX importer keeps ONNX's NCHW layout (the NPU compiler consumes it), but MindSpore
Lite's own runtime only runs NHWC convolutions and pools. `to_nhwc` rewrites every NCHW
layout layer to its NHWC form (conv weights OIHW -> OHWI, transposed-conv weights IOHW ->
IHWO), with Transposes at the boundary, and
carries NHWC through element-wise ops between such layers so back-to-back layers share
one layout; Transposes nobody reads are dropped. The result computes the same outputs,
with the same names, shapes and layouts at the graph's inputs and outputs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from converters.lite.ir import LiteModel, LiteNode, LiteTensor

TO_NHWC = [0, 2, 3, 1]
TO_NCHW = [0, 3, 1, 2]
LAYOUT_OPS = {"Conv2DFusion", "Conv2dTransposeFusion", "MaxPoolFusion", "AvgPoolFusion", "Resize", "FusedBatchNorm",
              "InstanceNorm", "LRN"}
# Layout ops with no `format` field: their input tensor's format says where channels are.
FORMAT_FROM_INPUT = {"FusedBatchNorm", "InstanceNorm", "LRN"}
# Ops whose result does not depend on layout when every input has the same shape.
ELEMENTWISE = {"Activation", "AddFusion", "SubFusion", "MulFusion", "DivFusion", "Maximum",
               "Minimum", "Clip", "Sqrt", "Abs", "Neg", "Exp", "ExpFusion", "Erf"}


class _Rewriter:
    def __init__(self, model: LiteModel):
        self.src = model
        self.tensors = list(model.tensors)
        self.nodes: list[LiteNode] = []
        self.nhwc_of: dict[int, int] = {}  # NCHW tensor -> its NHWC twin
        self.replaced: set[int] = set()  # constants superseded by a re-laid-out copy

    def add_tensor(self, tensor: LiteTensor) -> int:
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def _perm(self, perm: list[int], hint: str) -> int:
        data = np.array(perm, np.int32)
        return self.add_tensor(LiteTensor.of(hint, np.int32, data.shape, data))

    def nhwc(self, index: int) -> int:
        """The NHWC twin of 4-D NCHW tensor `index` (a Transpose is added the first time)."""
        if index not in self.nhwc_of:
            t = self.tensors[index]
            twin = self.add_tensor(replace(t, name=f"{t.name}/nhwc", shape=_permute(t.shape),
                                           format="NHWC", data=None))
            perm = self._perm(TO_NHWC, f"{t.name}/to_nhwc_perm")
            self.nodes.append(LiteNode(f"{t.name}/to_nhwc", "Transpose", {}, [index, perm],
                                       [twin]))
            self.nhwc_of[index] = twin
        return self.nhwc_of[index]

    def emit_nhwc(self, node: LiteNode, inputs: list[int], attrs: dict) -> None:
        """`node` computed in NHWC; its NCHW outputs come back through Transposes."""
        outs = []
        for o in node.outputs:
            t = self.tensors[o]
            twin = self.add_tensor(replace(t, name=f"{t.name}/nhwc", shape=_permute(t.shape),
                                           format="NHWC"))
            self.nhwc_of[o] = twin
            outs.append(twin)
        self.nodes.append(LiteNode(node.name, node.op, attrs, inputs, outs, node.quant_type,
                                   node.device_type))
        for o, twin in zip(node.outputs, outs, strict=True):
            perm = self._perm(TO_NCHW, f"{self.tensors[o].name}/to_nchw_perm")
            self.nodes.append(LiteNode(f"{self.tensors[o].name}/to_nchw", "Transpose", {},
                                       [twin, perm], [o]))

    def weight_ohwi(self, index: int) -> int:
        t = self.tensors[index]
        if t.data is None:
            return self.nhwc(index)  # a computed weight: transposed like an activation
        data = np.ascontiguousarray(np.asarray(t.data).transpose(TO_NHWC))
        self.replaced.add(index)
        return self.add_tensor(replace(t, name=f"{t.name}/ohwi", shape=data.shape, data=data,
                                       format="NHWC"))


def _permute(shape: tuple) -> tuple:
    return tuple(shape[p] for p in TO_NHWC) if len(shape) == 4 else shape


def _is_4d(model_tensors: list[LiteTensor], index: int) -> bool:
    return len(model_tensors[index].shape) == 4


def to_nhwc(model: LiteModel) -> LiteModel:
    """A new model computing the same as `model` with its NCHW layers in NHWC."""
    r = _Rewriter(model)
    for node in model.nodes:
        if (node.op in LAYOUT_OPS and node.attrs.get("format", "NCHW") == "NCHW"
                and _is_4d(r.tensors, node.inputs[0])):
            inputs = [r.nhwc(node.inputs[0]), *node.inputs[1:]]
            if node.op in ("Conv2DFusion", "Conv2dTransposeFusion"):
                # OIHW -> OHWI for convolutions; IOHW -> IHWO (what MindSpore Lite wants)
                # for transposed ones: the same permutation.
                inputs[1] = r.weight_ohwi(node.inputs[1])
            attrs = dict(node.attrs)
            if node.op not in FORMAT_FROM_INPUT:
                attrs["format"] = "NHWC"
            r.emit_nhwc(node, inputs, attrs)
        elif node.op in ELEMENTWISE and node.inputs and _same_shape_twins(r, node):
            r.emit_nhwc(node, [r.nhwc_of[i] for i in node.inputs], dict(node.attrs))
        else:
            r.nodes.append(node)
    return _without_dead_transposes(model, r)


def _same_shape_twins(r: _Rewriter, node: LiteNode) -> bool:
    """Every input already has an NHWC twin and all inputs and outputs share one shape."""
    shapes = {r.tensors[i].shape for i in (*node.inputs, *node.outputs)}
    return all(i in r.nhwc_of for i in node.inputs) and len(shapes) == 1


def _without_dead_transposes(model: LiteModel, r: _Rewriter) -> LiteModel:
    """Drop layout Transposes (and their perm constants) whose output nobody reads."""
    nodes = list(r.nodes)
    while True:
        read = {i for n in nodes for i in n.inputs} | set(model.outputs)
        keep = [n for n in nodes
                if not (n.op == "Transpose" and n.name.endswith(("/to_nchw", "/to_nhwc"))
                        and n.outputs[0] not in read)]
        if len(keep) == len(nodes):
            break
        nodes = keep
    used = ({i for n in nodes for i in (*n.inputs, *n.outputs)}
            | set(model.inputs) | set(model.outputs))
    # Unread constants of the source model stay (they may carry metadata, e.g. the ONNX
    # header) unless a re-laid-out copy replaced them; anything else stays only if used.
    old = len(model.tensors)
    kept = [i for i in range(len(r.tensors))
            if i in used or (i < old and r.tensors[i].data is not None and i not in r.replaced)]
    remap = {old: new for new, old in enumerate(kept)}
    out = LiteModel(name=model.name, version=model.version, fmk_type=model.fmk_type,
                    tensors=[r.tensors[i] for i in kept],
                    nodes=[replace(n, inputs=[remap[i] for i in n.inputs],
                                   outputs=[remap[i] for i in n.outputs]) for n in nodes],
                    inputs=[remap[i] for i in model.inputs],
                    outputs=[remap[i] for i in model.outputs],
                    mempool_size=model.mempool_size)
    return out.finalize_subgraph()
