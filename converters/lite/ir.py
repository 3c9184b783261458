"""Lite IR: the in-memory form of a MindSpore Lite model that every other room works on.

Plain dataclasses mirroring the `.ms` schema (MetaGraph / SubGraph / CNode / Tensor):
tensors and nodes live in flat lists and refer to each other by index, as on the wire.

Conventions every producer and consumer follows:
- `LiteNode.op` is the PrimitiveType member name ("Conv2DFusion", "Activation", ...).
- `LiteNode.attrs` holds the op table's fields under their schema names (snake_case as in
  ops.fbs); enum-typed fields hold the enum member *name* ("RELU", "SAME", "NCHW");
  fields left out take the schema default. `Custom` nodes hold
  `{"type": str, "attr": {name: bytes}}`.
- `LiteTensor.data` is a numpy array for constants (weights), None for activations.
  A dim is an int (-1 = unknown) or a str naming a symbolic dim (written as -1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from converters.lite import dtypes

Dim = int | str


@dataclass
class QuantParam:
    """One quantization parameter set (schema table QuantParam, same defaults)."""

    scale: float = 1.0
    zero_point: int = 0
    min: float = 0.0
    max: float = 0.0
    narrow_range: bool = True
    num_bits: int = 8
    inited: bool = False
    var_corr: float = 1.0
    mean_corr: float = 0.0
    dst_dtype: int = 32
    round_type: int = 1
    multiplier: int = 1


@dataclass
class ExternalData:
    """Where a tensor's bytes live outside the flatbuffer (schema table ExternalData)."""

    location: str
    offset: int = 0
    length: int = -1
    checksum: str = ""


@dataclass
class LiteTensor:
    """A graph tensor: activation (data is None) or constant (data holds the values)."""

    name: str
    type_id: int
    shape: tuple[Dim, ...]
    data: np.ndarray | None = None
    format: str = "NCHW"
    node_type: int = 0
    quant_params: list[QuantParam] = field(default_factory=list)
    quant_clusters: list[float] = field(default_factory=list)
    external: ExternalData | None = None

    @classmethod
    def of(cls, name: str, dtype, shape, data: np.ndarray | None = None, **kw) -> LiteTensor:
        """Build a tensor from a numpy dtype (anything np.dtype() accepts)."""
        return cls(name, dtypes.from_numpy(dtype), tuple(shape), data, **kw)

    def with_data(self, data: np.ndarray | None) -> LiteTensor:
        """A copy holding `data`: dataclasses.replace without its __init__ round trip (0.4
        vs 2.3 us; a session's partition and weight copies make hundreds)."""
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__, data=data)
        return copy

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype; UnsupportedError for TypeIds numpy cannot hold."""
        return dtypes.to_numpy(self.type_id)

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) and d >= 0 for d in self.shape)


@dataclass
class LiteNode:
    """One CNode: a primitive applied to input tensors, producing output tensors."""

    name: str
    op: str
    attrs: dict[str, Any] = field(default_factory=dict)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    quant_type: str = "QUANT_NONE"
    device_type: int = -1


@dataclass
class LiteSubGraph:
    name: str
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    tensors: list[int] = field(default_factory=list)


@dataclass
class LiteModel:
    """A whole model (MetaGraph). `inputs`/`outputs` index `tensors`."""

    name: str = ""
    version: str = ""
    fmk_type: int = 0
    tensors: list[LiteTensor] = field(default_factory=list)
    nodes: list[LiteNode] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    subgraphs: list[LiteSubGraph] = field(default_factory=list)
    mempool_size: int = 0

    def add_tensor(self, tensor: LiteTensor) -> int:
        """Append a tensor and return its index."""
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def add_node(self, node: LiteNode) -> int:
        """Append a node and return its index."""
        self.nodes.append(node)
        return len(self.nodes) - 1

    def tensor_index(self, name: str) -> int:
        """Index of the first tensor called `name`; KeyError if none."""
        for i, t in enumerate(self.tensors):
            if t.name == name:
                return i
        raise KeyError(name)

    def main_subgraph(self) -> LiteSubGraph:
        """The one SubGraph of a single-graph model: every node and tensor, the model's I/O."""
        return LiteSubGraph(
            name=self.name or "main",
            inputs=list(self.inputs),
            outputs=list(self.outputs),
            nodes=list(range(len(self.nodes))),
            tensors=list(range(len(self.tensors))),
        )

    def cut(self, nodes: list[int], inputs: list[int], outputs: list[int],
            name: str = "") -> LiteModel:
        """A model of `nodes` (indices, in order) whose graph inputs and outputs are the
        tensors `inputs` / `outputs`: only the tensors they use, reindexed; the tensors
        themselves are shared, not copied."""
        used = dict.fromkeys([*inputs, *outputs,
                              *(t for n in nodes for t in (*self.nodes[n].inputs,
                                                            *self.nodes[n].outputs))])
        index = {old: new for new, old in enumerate(used)}
        return LiteModel(
            name=name or self.name, version=self.version, fmk_type=self.fmk_type,
            tensors=[self.tensors[t] for t in used],
            nodes=[LiteNode(node.name, node.op, node.attrs, [index[t] for t in node.inputs],
                            [index[t] for t in node.outputs], node.quant_type,
                            node.device_type) for node in (self.nodes[n] for n in nodes)],
            inputs=[index[t] for t in inputs], outputs=[index[t] for t in outputs])

    def finalize_subgraph(self) -> LiteModel:
        """Give a single-graph model its main SubGraph (as MindSpore Lite writes it)."""
        if not self.subgraphs:
            self.subgraphs.append(self.main_subgraph())
        return self
