"""Shared helpers of the NPU compiler/kernel tests: onnxruntime as the oracle.

`one_node_onnx` builds a one-node ONNX model, `lite_graph` the equivalent hand-written Lite
model; `run_ort` and `run_npu` run them on the same seeded inputs and `assert_matches`
compares shape, then dtype, then values. `randomized` swaps the light models'
ConstantOfShape weights for seeded random ones; `supported_components` / `subgraph` cut a
model down to its NPU-supported parts and `ort_values` gets onnxruntime's boundary tensors.
`Graph` builds small Lite graphs by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from provider.npu import capability
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor
from provider.npu.memory import DevicePool
from provider.npu.program import from_bytes, to_bytes
from provider.options import CompileOptions

ATOL, RTOL = 1e-4, 1e-3

CONV = {"format": "NCHW", "kernel_size": [3, 3], "stride": [1, 1], "dilation": [1, 1],
        "pad_mode": "PAD", "pad_list": [1, 1, 1, 1], "group": 1, "activation_type": "NO_ACTIVATION"}


class Graph:
    """A tiny Lite graph builder: tensors by name, nodes appended in order."""

    def __init__(self, name: str = "g"):
        self.m = LiteModel(name=name)
        self.ids: dict[str, int] = {}

    def input(self, name: str, shape, dtype=np.float32) -> str:
        self.ids[name] = self.m.add_tensor(LiteTensor.of(name, dtype, shape))
        self.m.inputs.append(self.ids[name])
        return name

    def const(self, name: str, value) -> str:
        value = np.asarray(value)
        self.ids[name] = self.m.add_tensor(LiteTensor.of(name, value.dtype, value.shape, value))
        return name

    def node(self, op: str, inputs, attrs=None, outputs=1, dtype=np.float32) -> str | list[str]:
        names = [f"{op}{len(self.m.nodes)}_{i}" for i in range(outputs)]
        for n in names:
            self.ids[n] = self.m.add_tensor(LiteTensor.of(n, dtype, ()))  # shape unknown
        self.m.add_node(LiteNode(f"{op}{len(self.m.nodes)}", op, dict(attrs or {}),
                                 [self.ids[i] for i in inputs], [self.ids[n] for n in names]))
        return names[0] if outputs == 1 else names

    def outputs(self, *names: str) -> LiteModel:
        self.m.outputs = [self.ids[n] for n in names]
        return self.m


_POOL: DevicePool | None = None


def pool() -> DevicePool:
    """One device pool for the whole test session (2 GiB, lazily committed)."""
    global _POOL
    if _POOL is None:
        _POOL = DevicePool(capacity=1 << 31)
    return _POOL


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def one_node_onnx(op: str, feeds: Mapping[str, np.ndarray], consts: Mapping[str, np.ndarray],
                  attrs: Mapping | None = None, n_outputs: int = 1, opset: int = 17,
                  input_order: Sequence[str] | None = None, domain: str = "") -> onnx.ModelProto:
    """A model with one `op` node: runtime inputs `feeds`, initializers `consts`."""
    order = list(input_order) if input_order is not None else [*feeds, *consts]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, order, outs, domain=domain, **dict(attrs or {}))
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in feeds.items()],
        [onnx.ValueInfoProto(name=o) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
            outputs: Sequence[str] | None = None) -> list[np.ndarray]:
    """onnxruntime CPU outputs (all graph outputs, or the named ones)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(outputs, dict(feeds))


def lite_graph(op: str, attrs: Mapping, inputs: Sequence[tuple[str, np.ndarray, bool]],
               out_dtypes: Sequence = (np.float32,), name: str = "one_node") -> LiteModel:
    """A Lite model with one `op` node; inputs are (name, array, is_constant)."""
    m = LiteModel(name=name)
    idx = []
    for n, arr, is_const in inputs:
        t = LiteTensor.of(n, arr.dtype, arr.shape, arr if is_const else None)
        idx.append(m.add_tensor(t))
        if not is_const:
            m.inputs.append(idx[-1])
    outs = [m.add_tensor(LiteTensor.of(f"y{i}", dt, ())) for i, dt in enumerate(out_dtypes)]
    m.add_node(LiteNode("n0", op, dict(attrs), idx, outs))
    m.outputs = outs
    return m


def run_npu(model: LiteModel, feeds: Mapping[str, np.ndarray], *, enable_fp16: bool = False,
            input_shapes: Mapping[str, Sequence[int]] | None = None) -> list[np.ndarray]:
    """Compile `model` for the shapes of `feeds` and run it through the Executor once (after
    a round trip through the Program file format, so every step's attrs must be JSON-able)."""
    shapes = dict(input_shapes or {k: v.shape for k, v in feeds.items()})
    program = from_bytes(to_bytes(compile_model(model, shapes, CompileOptions(enable_fp16))))
    with Executor(program, pool()) as ex:
        return [np.array(r) for r in ex.run([feeds[n] for n in ex.input_names])]


def assert_matches(got: np.ndarray, want: np.ndarray, atol: float = ATOL, rtol: float = RTOL,
                   what: str = "") -> None:
    """Shape, then dtype, then values (NaNs must match)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, err_msg=what)


# Seeded values for 1-D weights by (consumer op, input position): BatchNorm scale/var and
# other 1-D parameters near 1, biases and means near 0, so activations stay O(1).
_NEAR_ZERO = {("BatchNormalization", 2), ("BatchNormalization", 3), ("Conv", 2), ("Gemm", 2)}


def randomized(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Replace ConstantOfShape weights (with constant shape) by seeded random initializers:
    He-scaled for matrices and kernels, realistic values for 1-D parameters."""
    r = rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    role = {}
    for node in out.graph.node:
        for pos, name in enumerate(node.input):
            role.setdefault(name, (node.op_type, pos))
    keep = []
    for node in out.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
            keep.append(node)
            continue
        shape = [int(d) for d in inits[node.input[0]]]
        if len(shape) > 1:
            value = r.standard_normal(shape) * math.sqrt(2.0 / math.prod(shape[1:]))
        elif role.get(node.output[0]) in _NEAR_ZERO:
            value = r.normal(0.0, 0.1, shape)
        else:
            value = r.uniform(0.5, 1.5, shape)
        out.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
        if out.ir_version < 4:  # initializers must also be graph inputs before IR 4
            out.graph.input.append(helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, shape))
    del out.graph.node[:]
    out.graph.node.extend(keep)
    return out


def supported_components(lite: LiteModel) -> list[list[int]]:
    """Connected groups of NPU-supported nodes (through non-constant tensors), largest first."""
    ok = [i for i, why in capability.supported_nodes(lite).items() if why is None]
    producer = {t: i for i in ok for t in lite.nodes[i].outputs}
    parent = {i: i for i in ok}

    def find(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i in ok:
        for t in lite.nodes[i].inputs:
            if t in producer:
                parent[find(i)] = find(producer[t])
    groups: dict[int, list[int]] = {}
    for i in ok:
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values(), key=len, reverse=True)


def subgraph(lite: LiteModel, nodes: list[int]) -> LiteModel:
    """The Lite model made of `nodes`: inputs = run-time tensors from outside, outputs = what
    leaves (read by other nodes or a graph output)."""
    inside = set(nodes)
    made = {t for i in nodes for t in lite.nodes[i].outputs}
    read_outside = {t for i, n in enumerate(lite.nodes) if i not in inside for t in n.inputs}
    inputs = []
    for i in nodes:
        for t in lite.nodes[i].inputs:
            if t not in made and lite.tensors[t].data is None and t not in inputs:
                inputs.append(t)
    outputs = [t for t in sorted(made) if t in read_outside or t in lite.outputs]
    return LiteModel(name=f"{lite.name}/sub", tensors=lite.tensors,
                     nodes=[lite.nodes[i] for i in sorted(nodes)], inputs=inputs, outputs=outputs)


def ort_values(model: onnx.ModelProto, feeds: dict, names: list[str]) -> dict[str, np.ndarray]:
    """onnxruntime's values of any tensors of `model` (added as extra graph outputs)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in dict.fromkeys(names) if n not in known)
    return dict(zip(names, run_ort(probe, feeds, names), strict=True))
