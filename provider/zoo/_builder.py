"""A tiny graph builder shared by the zoo models: named nodes, seeded weights."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # loadable by every onnxruntime litenpu supports


class GraphBuilder:
    """Accumulates nodes and initializers; every weight comes from one seeded generator."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}

    def _name(self, kind: str) -> str:
        n = self._count.get(kind, 0)
        self._count[kind] = n + 1
        return f"{kind}_{n}"

    def weight(self, shape, scale: float | None = None, name: str = "w") -> str:
        """A float32 initializer with He-style scale (or `scale`)."""
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        s = np.sqrt(2.0 / max(fan_in, 1)) if scale is None else scale
        return self.const(self.rng.standard_normal(shape).astype(np.float32) * np.float32(s),
                          name)

    def const(self, value, name: str = "c") -> str:
        full = self._name(name)
        self.inits.append(numpy_helper.from_array(np.asarray(value), full))
        return full

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        """Append a node named `<op>_<k>`; its output name (or names when n_out > 1)."""
        name = self._name(op_type.lower())
        outs = [f"{name}_out{i}" if n_out > 1 else name for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs if n_out > 1 else outs[0]

    def rename(self, x: str, name: str) -> str:
        """Give tensor `x` the name `name` (a graph output's), in its producer and readers."""
        for node in self.nodes:
            for names in (node.input, node.output):
                for i, value in enumerate(names):
                    if value == x:
                        names[i] = name
        return name

    # ---- layers -------------------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = True) -> str:
        w = self.weight((cout, cin // group, k, k), name="conv_w")
        inputs = [x, w] + ([self.weight((cout,), scale=0.1, name="conv_b")] if bias else [])
        return self.op("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[k // 2] * 4, group=group)

    def batch_norm(self, x: str, c: int) -> str:
        scale = self.const((1.0 + 0.1 * self.rng.standard_normal(c)).astype(np.float32), "bn_s")
        shift = self.const((0.1 * self.rng.standard_normal(c)).astype(np.float32), "bn_b")
        mean = self.const((0.1 * self.rng.standard_normal(c)).astype(np.float32), "bn_m")
        var = self.const((1.0 + 0.2 * self.rng.random(c)).astype(np.float32), "bn_v")
        return self.op("BatchNormalization", [x, scale, shift, mean, var], epsilon=1e-5)

    def relu6(self, x: str) -> str:
        lo = self.const(np.array(0.0, np.float32), "relu6_min")
        hi = self.const(np.array(6.0, np.float32), "relu6_max")
        return self.op("Clip", [x, lo, hi])

    def silu(self, x: str) -> str:
        """x * sigmoid(x), as exporters write SiLU / Swish."""
        return self.op("Mul", [x, self.op("Sigmoid", [x])])

    def gelu(self, x: str) -> str:
        """0.5 x (1 + erf(x / sqrt 2)), as PyTorch exports it before opset 20."""
        root2 = self.const(np.array(math.sqrt(2), np.float32), "sqrt2")
        one = self.const(np.array(1.0, np.float32), "one")
        half = self.const(np.array(0.5, np.float32), "half")
        erf = self.op("Erf", [self.op("Div", [x, root2])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [erf, one])]), half])

    def dense(self, x: str, din: int, dout: int) -> str:
        """MatMul by a [din, dout] weight, then Add a bias (a Linear layer as exported)."""
        w = self.weight((din, dout), scale=1 / math.sqrt(din), name="dense_w")
        return self.op("Add", [self.op("MatMul", [x, w]),
                               self.weight((dout,), scale=0.02, name="dense_b")])

    def layer_norm(self, x: str, dim: int) -> str:
        """LayerNormalization over the last axis (the fused op, opset 17)."""
        gamma = self.const((1 + 0.05 * self.rng.standard_normal(dim)).astype(np.float32), "ln_g")
        beta = self.const((0.05 * self.rng.standard_normal(dim)).astype(np.float32), "ln_b")
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)

    def rnn(self, op_type: str, x: str, din: int, hidden: int, direction: str = "forward",
            initial: list[str] = ()) -> list[str]:
        """An ONNX LSTM or GRU over `x` [time, batch, din]: its outputs Y [time, dirs, batch,
        hidden] and the last states ([dirs, batch, hidden]: Y_h, and Y_c for an LSTM);
        `initial` names the initial states (h0, plus c0 for an LSTM), else they are zeros."""
        gates = {"LSTM": 4, "GRU": 3}[op_type]
        dirs = 2 if direction == "bidirectional" else 1
        scale = hidden ** -0.5
        inputs = [x, self.weight((dirs, gates * hidden, din), scale, "rnn_w"),
                  self.weight((dirs, gates * hidden, hidden), scale, "rnn_r"),
                  self.weight((dirs, 2 * gates * hidden), scale, "rnn_b")]
        if initial:
            inputs += ["", *initial]  # no sequence_lens: every sequence runs the full length
        extra = {"linear_before_reset": 1} if op_type == "GRU" else {}
        return self.op(op_type, inputs, n_out=3 if op_type == "LSTM" else 2,
                       hidden_size=hidden, direction=direction, **extra)

    # ---- shape arithmetic, as exporters emit it for symbolic dims -------------------------
    def ints(self, values, name: str = "ints") -> str:
        """An int64 initializer (a shape, axes, an index)."""
        return self.const(np.array(values, np.int64), name)

    def dim(self, x: str, axis: int) -> str:
        """Dim `axis` of `x` at run time as a 1-element int64 tensor: Shape -> Gather ->
        Unsqueeze, the chain a tracing exporter writes for every symbolic dim it reads."""
        size = self.op("Gather", [self.op("Shape", [x]), self.ints(axis, "axis")], axis=0)
        return self.op("Unsqueeze", [size, self.ints([0], "axes")])

    def shape_of(self, parts: list[str]) -> str:
        """Concat 1-element int64 tensors (from `dim` or `ints`) into a shape."""
        return self.op("Concat", parts, axis=0)

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
              doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits,
                                  doc_string=doc)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="litenpu-models", producer_version="1")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model


def tensor(name: str, shape, elem_type: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)

