"""Small ONNX models shared by the NPU EP tests (built with onnx.helper, seeded weights)."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import provider

NPU = ["NPUExecutionProvider", "CPUExecutionProvider"]


def make_model(nodes, inputs, outputs, initializers=()) -> bytes:
    """A checked opset-17 model (IR 8, which onnxruntime 1.23 still loads) as bytes."""
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def f32(name, shape):
    """A float32 graph input/output."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


W = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
# y = relu(x + b) @ W * 2 with a dynamic batch -- all NPU-capable
MLP = make_model(
    [helper.make_node("Add", ["x", "b"], ["s"], name="add"),
     helper.make_node("Relu", ["s"], ["r"], name="relu"),
     helper.make_node("MatMul", ["r", "W"], ["m"], name="matmul"),
     helper.make_node("Mul", ["m", "two"], ["y"], name="scale")],
    [f32("x", ["N", 3]), f32("b", [3])], [f32("y", ["N", 4])],
    [numpy_helper.from_array(W, "W"), numpy_helper.from_array(np.array(2, np.float32), "two")])
# y = relu(x) + 1, static shape, all on the NPU
STATIC = make_model(
    [helper.make_node("Relu", ["x"], ["r"], name="relu"),
     helper.make_node("Add", ["r", "one"], ["y"], name="add")],
    [f32("x", [2, 8])], [f32("y", [2, 8])], [numpy_helper.from_array(np.ones(8, np.float32), "one")])


def reference(model: bytes, feeds: dict) -> list[np.ndarray]:
    """The oracle: the same model on onnxruntime's CPU EP."""
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


def npu_session_options(**config: str) -> ort.SessionOptions:
    """Plain onnxruntime SessionOptions selecting the registered NPU EP, plus config entries."""
    options = ort.SessionOptions()
    options.add_provider_for_devices(provider.ep_devices(), {})
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    return options


def _conv_weight(rng, out_c: int, in_c: int) -> np.ndarray:
    return (rng.standard_normal((out_c, in_c, 3, 3)) / np.sqrt(in_c * 9)).astype(np.float32)


_RNG = np.random.default_rng(1)
# conv-relu-conv-relu -> global average pool -> gemm, with dynamic batch, height and width:
# a Program (and arena) per input shape
CNN = make_model(
    [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
     helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
     helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
     helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
     helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="pool"),
     helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
     helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc")],
    [f32("x", ["N", 3, "H", "W"])], [f32("y", ["N", 10])],
    [numpy_helper.from_array(_conv_weight(_RNG, 16, 3), "w1"),
     numpy_helper.from_array(_conv_weight(_RNG, 16, 16), "w2"),
     numpy_helper.from_array(_RNG.standard_normal((16, 10)).astype(np.float32), "fc")])
