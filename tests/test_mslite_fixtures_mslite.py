"""Opt-in (`pytest -m mslite`): MindSpore Lite 2.0's own converter, run now on every
`models/mslite/make_fixtures.py` model and the nine onnx light architectures, writes files
that import into our IR and export to ONNX matching onnxruntime on the original model; the
committed fixtures are exactly what it writes; and what MindSpore Lite 2.0's runtime does
with the ops our exporter learned from it.

Needs the Python 3.7 venv with mindspore_lite==2.0.0 under .tox/mslite-py37 (`tox -e mslite`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx_roundtrip import LIGHT, random_feeds, run, with_random_weights

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
                                  "op_cnn_fp16", "op_seq_fp16", "op_cnn_wq", "op_seq_wq",
                                  "op_cnn_none", "op_seq_none"])
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


def _logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` without a final Softmax (saturated probabilities would hide differences)."""
    last = model.graph.node[-1]
    if last.op_type == "Softmax" and last.output[0] == model.graph.output[0].name:
        del model.graph.node[-1]
        model.graph.output[0].name = last.input[0]
        model.graph.output[0].type.tensor_type.ClearField("shape")
    return model


@pytest.mark.parametrize("path", sorted(LIGHT.glob("*.onnx")), ids=lambda p: p.stem)
def test_converter_output_of_light_architectures_exports_and_matches(tmp_path, path):
    """The nine onnx light architectures (seeded random weights), converted by MindSpore
    Lite's converter (NHWC inputs), exported back: onnxruntime's logits within rtol 1e-4 and
    1e-5 of their largest magnitude."""
    mf = _make_fixtures()
    model = _logits(with_random_weights(onnx.load(path)))
    onnx.save(model, tmp_path / "light.onnx")
    mf._mslite(str(mf.CONVERT), "light.onnx", "light", cwd=tmp_path)
    feeds = random_feeds(model, seed=0)
    want = run(model, feeds)
    exported = export_onnx(reader.load(tmp_path / "light.ms"))
    nhwc = {k: v.transpose(0, 2, 3, 1).copy() if v.ndim == 4 else v for k, v in feeds.items()}
    got = run(exported, {vi.name: nhwc[vi.name] for vi in exported.graph.input})
    for g, w in zip(got, want, strict=True):
        # the converter folds BatchNorm into conv weights: float32 rounding changes with the
        # logits' scale (up to 1e7 here with random weights), so atol follows that scale
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(w).max()))


@pytest.mark.parametrize("stem", ["lenet5_ms20", "mobilenetv2_block_ms20"])
def test_converter_output_of_mindir_exports_to_mindspores_outputs(tmp_path, stem):
    """MindSpore 2.0 MindIR fixtures (`models/mindir`; the 2.0 converter cannot read the 2.10
    ones) converted by MindSpore Lite's converter export to ONNX giving MindSpore's outputs."""
    mf = _make_fixtures()
    source = ROOT / "models" / "mindir" / f"{stem}.mindir"
    mf._mslite(str(mf.CONVERT), str(source), "m", "fmk=MINDIR", cwd=tmp_path)
    with np.load(ROOT / "models" / "mindir" / f"{stem}.npz") as z:
        x, want = z["in0"], z["out0"]
    exported = export_onnx(reader.load(tmp_path / "m.ms"))
    got = run(exported, {exported.graph.input[0].name: x.transpose(0, 2, 3, 1).copy()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


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
