"""A tiny graph builder shared by the zoo models: named nodes, seeded weights."""

from __future__ import annotations

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

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
              doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits,
                                  doc_string=doc)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="litenpu-models", producer_version="1")
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model


def tensor(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

