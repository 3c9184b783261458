"""The OrtGraph adapter reads what converters.graph_view.from_onnx reads from the same model."""

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import provider
from converters.graph_view import from_onnx
from provider.ort import capability
from provider.session import InferenceSession

RNG = np.random.default_rng(1)


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(RNG.standard_normal((4, 2)).astype(np.float32), "fc")
    two = numpy_helper.from_array(np.array([2], np.int64), "two")
    fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [0.5])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[2, 2], pads=[1, 1, 1, 1],
                         auto_pad="NOTSET", group=1),
        helper.make_node("LeakyRelu", ["c"], ["r"], name="leaky", alpha=0.1),  # not a float32: read exactly
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fc"], ["g"], name="gemm", alpha=1.0, transB=0),
        helper.make_node("ConstantOfShape", ["two"], ["k"], name="fill", value=fill),
        helper.make_node("Add", ["g", "k"], ["y"], name="add"),
    ]
    graph = helper.make_graph(nodes, "adapter", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])], [w, fc, two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture
def seen(monkeypatch):
    provider.register()
    captured = []
    original = capability.read_graph

    def spy(*args, **kwargs):
        contents = original(*args, **kwargs)
        # GetCapability reads initializers in place: valid only during the callback
        copies = {k: v.copy() for k, v in contents.initializers.items()}
        captured.append(dataclasses.replace(contents, initializers=copies))
        return contents

    monkeypatch.setattr(capability, "read_graph", spy)
    return captured


def test_ort_graph_view_matches_from_onnx(seen):
    model = _model()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    InferenceSession(model.SerializeToString(), options, providers=["NPUExecutionProvider"])
    ours, theirs = seen[0].view(), from_onnx(model)
    mine = {n.name: n for n in ours.nodes}  # both topological, not necessarily the same order
    assert mine.keys() == {n.name for n in theirs.nodes}
    for b in theirs.nodes:
        a = mine[b.name]
        assert (a.op_type, a.domain, a.inputs, a.outputs) == (b.op_type, b.domain, b.inputs, b.outputs)
        assert a.attrs.keys() >= b.attrs.keys(), a.name  # onnxruntime fills in defaults
        for key, value in b.attrs.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(a.attrs[key], value)
            elif isinstance(value, float):  # the float32 exactly, as a float
                assert isinstance(a.attrs[key], float) and a.attrs[key] == value, (a.name, key)
            else:
                assert a.attrs[key] == value, (a.name, key)
    assert ours.inputs[0].name == "x" and ours.inputs[0].shape == ("batch", 3, 8, 8)
    assert ours.inputs[0].elem_type == TensorProto.FLOAT
    assert ours.outputs[0].shape == ("batch", 2)
    assert ours.initializers.keys() == theirs.initializers.keys()
    for name, value in theirs.initializers.items():
        np.testing.assert_array_equal(ours.initializers[name], value)
    assert ours.opset[""] == 17


def test_cnn_runs_on_the_npu_and_matches_cpu(seen):
    model = _model().SerializeToString()
    sess = InferenceSession(model, providers=["NPUExecutionProvider", "CPUExecutionProvider"])
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], expected[0], atol=1e-4, rtol=1e-3)
    on_npu = {p.op_type for p in sess.partition() if p.device == "NPU"}
    assert {"Conv", "LeakyRelu", "Gemm"} <= on_npu


def test_a_name_that_is_not_utf8_leaves_the_graph_to_the_cpu():
    """The C reader decodes names strictly, as the C API's strings were: a value whose name
    is not UTF-8 leaves the graph unclaimed, with the reason, and the run is onnxruntime's."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "x"], ["y"], name="add")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    raw = model.SerializeToString().replace(b"\x12\x01r", b"\x12\x01\xed").replace(b"\x0a\x01r", b"\x0a\x01\xed")
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    expected = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    session = InferenceSession(raw, providers=["NPUExecutionProvider"])
    assert "not claimed" in session.partition_summary()
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected)
