"""The oracles of the real-model op tests (test_npu_real_*.py): a model from nodes, and one
NPU session checked against onnxruntime CPU (and the .ms round trip) or onnx's reference."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_roundtrip import assert_close, roundtrip

import provider

NPU = ["NPUExecutionProvider", "CPUExecutionProvider"]
F = TensorProto.FLOAT
I64 = TensorProto.INT64


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def model_of(nodes, inputs, outputs, initializers=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)  # outputs typed
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def cpu_session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def check(model: onnx.ModelProto, cases: list[dict], *, on_npu: bool = True, atol: float = 1e-5,
          rtol: float = 1e-4, ms: bool = True) -> provider.InferenceSession:
    """Every case on one NPU session equals onnxruntime CPU; with `on_npu` every node ran on
    the NPU; with `ms` the .ms round trip runs like the original."""
    cpu = cpu_session(model)
    npu = provider.InferenceSession(model.SerializeToString(), providers=NPU)
    for feeds in cases:
        assert_close(npu.run(None, feeds), cpu.run(None, feeds), rtol=rtol, atol=atol)
    if on_npu:
        cpu_nodes = [(p.name, p.reason) for p in npu.partition() if p.device != "NPU"]
        assert not cpu_nodes, cpu_nodes
    if ms:
        exported, _, report = roundtrip(model)
        assert not report.custom, [(c.op, c.reason) for c in report.custom]
        back = cpu_session(exported)
        for feeds in cases:
            assert_close(back.run(None, feeds), cpu.run(None, feeds), rtol=rtol, atol=atol)
    return npu


def check_reference(model: onnx.ModelProto, cases: list[dict], rtol: float = 1e-4,
                    atol: float = 1e-5) -> None:
    """Every case on one NPU session (every node on the NPU) equals onnx's reference
    evaluator: the oracle where onnxruntime versions disagree (1.23 gives NaN for PRelu of
    an infinity and cannot run a reduction over no axes)."""
    from onnx.reference import ReferenceEvaluator

    npu = provider.InferenceSession(model.SerializeToString(), providers=NPU)
    assert not [(p.name, p.reason) for p in npu.partition() if p.device != "NPU"]
    reference = ReferenceEvaluator(model)
    for feeds in cases:
        want = [np.asarray(w) for w in reference.run(None, feeds)]
        assert_close(npu.run(None, feeds), want, rtol=rtol, atol=atol)


def randn(rng, *shape, scale: float = 1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)
