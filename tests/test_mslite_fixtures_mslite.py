"""Opt-in (`pytest -m mslite`): MindSpore Lite 2.0's own converter, run now on every
`models/mslite/make_fixtures.py` model, writes files that import into our IR and export to
ONNX matching onnxruntime on the original model; the committed fixtures are exactly what it
writes; and what MindSpore Lite 2.0's runtime does with the ops our exporter learned from it.

Needs the Python 3.7 venv with mindspore_lite==2.0.0 under .tox/mslite-py37 (`tox -e mslite`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from onnx_roundtrip import run

from converters.lite import reader, writer
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from converters.onnx_export import export_onnx

pytestmark = pytest.mark.mslite

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "models" / "mslite"
CNODE = 2


def _make_fixtures():
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not module.MSLITE_PYTHON.exists():
        pytest.skip(f"no MindSpore Lite venv at {module.MSLITE_PYTHON} (run `tox -e mslite` once)")
    return module


@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet_block", "transformer_encoder",
                                  "op_cnn", "op_cnn_nchw", "op_cnn2", "op_seq", "op_misc", "op_dyn",
                                  "op_cnn_fp16", "op_seq_fp16", "op_cnn_wq", "op_seq_wq"])
def test_fresh_converter_output_imports_and_matches(tmp_path, name):
    mf = _make_fixtures()
    model, feeds, want = mf.reference(name)
    path = mf.convert(name, model, tmp_path)
    assert path.read_bytes() == (FIXTURES / f"{name}.ms").read_bytes()
    exported = export_onnx(reader.load(path))
    names = [o.name for o in exported.graph.output]
    assert sorted(names) == sorted(want)
    for out, value in zip(names, run(exported, feeds), strict=True):
        np.testing.assert_allclose(value, want[out], err_msg=out, **mf.tolerance(name))


def _one_op(op: str, attrs: dict, out_dtype, tmp_path: Path) -> tuple[Path, LiteModel]:
    m = LiteModel(name=op)
    x = m.add_tensor(LiteTensor.of("x", np.float32, (3, 5), node_type=CNODE, format="NHWC"))
    inputs = [x]
    if op == "NotEqual":
        ref = np.array([0.5, -1, 2, 0, 1], np.float32)
        inputs.append(m.add_tensor(LiteTensor.of("ref", np.float32, (5,), ref, format="NHWC")))
    y = m.add_tensor(LiteTensor.of("y", out_dtype, (3, 5), node_type=CNODE, format="NHWC"))
    m.add_node(LiteNode(op, op, attrs, inputs, [y]))
    m.inputs, m.outputs = [x], [y]
    m.finalize_subgraph()
    writer.save(m, tmp_path / f"{op}.ms")
    return tmp_path / f"{op}.ms", m


@pytest.mark.parametrize("op,out_dtype", [("NotEqual", np.bool_), ("OnesLike", np.float32),
                                          ("ZerosLike", np.float32)])
def test_mindspore_lite_agrees_with_the_export_of(tmp_path, op, out_dtype):
    mf = _make_fixtures()
    path, m = _one_op(op, {}, out_dtype, tmp_path)
    x = (np.random.default_rng(0).standard_normal((3, 5)) * 3).astype(np.float32)
    x[0] = [0.5, -1, 2, 0, 1]
    got = mf.run_mslite(path, {"x": x})["y"]
    np.testing.assert_array_equal(got, run(export_onnx(m), {"x": x})[0])


def test_mindspore_lite_2_0_has_no_fast_gelu_activation(tmp_path):
    """Why the MindIR importer writes FastGeLU as Mul/Sigmoid/Mul: MindSpore Lite 2.0's CPU
    runtime rejects Activation FAST_GELU ("invalid activation type: 20")."""
    mf = _make_fixtures()
    path, _ = _one_op("Activation", {"activation_type": "FAST_GELU"}, np.float32, tmp_path)
    with pytest.raises(RuntimeError, match="invalid activation type: 20"):
        mf.run_mslite(path, {"x": np.zeros((3, 5), np.float32)})
