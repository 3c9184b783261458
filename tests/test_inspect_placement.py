"""`litenpu inspect` on .onnx and .mindir: the summary, and where each node runs and why."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from provider.cli import main

MODELS = Path(__file__).resolve().parent.parent / "models"


def hardmax_model(path: Path) -> Path:
    """relu -> Hardmax (no Lite primitive) -> neg, sigmoid -> add: Hardmax stays on CPU."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Hardmax", ["r"], ["v"], name="hardmax", axis=1),
             helper.make_node("Neg", ["v"], ["y"], name="neg"),
             helper.make_node("Sigmoid", ["r"], ["j"], name="sigmoid"),
             helper.make_node("Add", ["y", "j"], ["z"], name="add")]
    graph = helper.make_graph(
        nodes, "hardmax_graph", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 2, 2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 5, 2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="test", producer_version="1")
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_unsupported_and_disabled_ops_are_named_with_reasons(tmp_path, capsys):
    path = hardmax_model(tmp_path / "hardmax.onnx")
    assert main(["inspect", str(path), "--option", "disable_ops=Neg"]) == 0
    out = capsys.readouterr().out
    assert "hardmax.onnx: ONNX (.onnx) 'hardmax_graph'" in out
    assert "NPUExecutionProvider: 3 of 5 nodes on the NPU" in out and "2 on CPU" in out
    assert "CPU  hardmax (Hardmax): no Lite primitive: no Lite mapping for Hardmax" in out
    assert "CPU  neg (Neg): disabled by provider option disable_ops" in out
    assert "CPU  relu" not in out


def test_onnx_summary_and_json_placement(capsys):
    path = MODELS / "transformer_encoder.onnx"
    assert main(["inspect", "--json", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "ONNX (.onnx)" and data["producer"] == "litenpu-models 1"
    assert data["inputs"] == [{"name": "tokens", "dtype": "float32", "shape": ["batch", 16, 64]}]
    assert data["ops"]["MatMul"] > 0 and data["nodes"] == sum(data["ops"].values())
    model = onnx.load(path)
    assert data["weights"] == len(model.graph.initializer)
    assert data["weight_bytes"] == sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)
    assert 0 < len(data["placement"]) <= data["nodes"]  # after onnxruntime's fusions
    assert {p["device"] for p in data["placement"]} == {"NPU"}


def test_mindir_summary_and_placement(capsys):
    pytest.importorskip("google.protobuf")
    path = MODELS / "mindir" / "lenet5.mindir"
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MindIR (.mindir), as Lite IR" in out
    assert "Conv2DFusion" in out and "NPUExecutionProvider: " in out and "nodes on the NPU" in out


def test_no_placement_and_bad_option(tmp_path, capsys):
    path = hardmax_model(tmp_path / "m.onnx")
    assert main(["inspect", "--no-placement", str(path)]) == 0
    assert "placement:" not in capsys.readouterr().out
    assert main(["inspect", str(path), "--option", "disable_ops"]) == 1
    assert capsys.readouterr().err.strip() == (
        "litenpu inspect: error: --option 'disable_ops': expected KEY=VALUE")
    assert main(["inspect", str(path), "--option", "bogus=1"]) == 1
    assert "unknown NPUExecutionProvider option(s) 'bogus'" in capsys.readouterr().err
