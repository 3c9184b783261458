"""`litenpu inspect` on .ms files and the summary behind it."""

from __future__ import annotations

import json

import numpy as np
from test_lite_reader import real
from test_lite_roundtrip import model_with

from converters.lite import reader, writer
from converters.lite.ir import LiteTensor
from converters.lite.summary import summarize
from provider.cli import main


def test_summary_counts_ops_io_and_weights(tmp_path):
    m = model_with("MatMulFusion", {})
    m.tensors.append(LiteTensor.of("s", np.float16, (8,), np.zeros(8, np.float16)))
    path = tmp_path / "m.ms"
    writer.save(m, path, external_threshold=20)
    s = summarize(reader.load(path))
    assert [(t.name, t.dtype, t.shape) for t in s.inputs] == [("x", "float32", [1, 3, -1])]
    assert [(t.name, t.shape) for t in s.outputs] == [("y", [1, 4, -1])]
    assert s.ops == {"MatMulFusion": 1} and s.nodes == 1
    assert s.weights == 3 and s.weight_bytes == 48 + 16 + 16
    assert s.external_weight_bytes == 48
    assert s.producer == "test 1.0.0" and s.source_framework == "MindSpore"


def test_inspect_real_file(capsys):
    path = real("oh_ml_face_isface.ms")
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "producer: MindSpore Lite 1.5.0; converted from Caffe" in out
    assert "data  float32  [1, 48, 48, 3]" in out
    assert "Conv2DFusion    4" in out
    assert main(["inspect", "--json", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["outputs"] == [{"name": "prob", "dtype": "float32", "shape": [1, 2]}]
    assert summary["ops"]["Softmax"] == 1 and summary["weights"] == 13


def test_inspect_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.ms"
    bad.write_bytes(b"\x08\x00\x00\x00XXXX\x00\x00\x00\x00")
    assert main(["inspect", str(bad)]) == 1
    assert "identifier" in capsys.readouterr().err
    other = tmp_path / "m.tflite"
    other.write_bytes(b"")
    assert main(["inspect", str(other)]) == 1
    assert "known: .mindir, .ms, .onnx" in capsys.readouterr().err
