"""Opt-in: files our writer produces run in the real MindSpore Lite 2.0 runtime.

`tox -e mslite` (or `pytest -m mslite`) builds a Python 3.7 venv with mindspore_lite==2.0.0
under .tox/ (once), writes a Conv+ReLU+MatMul+Softmax model built directly in Lite IR,
runs it there through tests/mslite/run_ms.py and compares with onnxruntime running the
same computation as an ONNX graph, on the same seeded input.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converters.lite import reader, writer
from converters.lite.ir import LiteModel, LiteNode, LiteTensor

pytestmark = pytest.mark.mslite

ROOT = Path(__file__).resolve().parents[1]
PY37 = Path(os.environ.get("LITENPU_PY37", Path.home() / ".pyenv/versions/3.7.16/bin/python"))
VENV = ROOT / ".tox" / "mslite-py37"
RUN_MS = ROOT / "tests" / "mslite" / "run_ms.py"
CNODE = 2
H = W = 8
C_IN, C_OUT, CLASSES = 3, 4, 10


def weights(seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "conv_w": rng.standard_normal((C_OUT, 3, 3, C_IN)).astype(np.float32) * 0.3,  # OHWI
        "conv_b": rng.standard_normal(C_OUT).astype(np.float32) * 0.1,
        "fc_w": rng.standard_normal((CLASSES, H * W * C_OUT)).astype(np.float32) * 0.05,
        "fc_b": rng.standard_normal(CLASSES).astype(np.float32) * 0.1,
    }


def lite_model(w: dict[str, np.ndarray]) -> LiteModel:
    """NHWC Conv(3x3, pad 1)+bias -> ReLU -> Reshape -> MatMul(+bias, B transposed) -> Softmax."""
    m = LiteModel(name="tiny")

    def act(name, shape):
        return m.add_tensor(LiteTensor.of(name, np.float32, shape, node_type=CNODE, format="NHWC"))

    def const(name, data, fmt="NHWC"):
        return m.add_tensor(LiteTensor.of(name, data.dtype, data.shape, data, format=fmt))

    x = act("x", (1, H, W, C_IN))
    conv_w, conv_b = const("conv_w", w["conv_w"]), const("conv_b", w["conv_b"])
    conv = act("conv", (1, H, W, C_OUT))
    relu = act("relu", (1, H, W, C_OUT))
    shape = const("shape", np.array([1, H * W * C_OUT], np.int32))
    flat = act("flat", (1, H * W * C_OUT))
    fc_w, fc_b = const("fc_w", w["fc_w"], "NCHW"), const("fc_b", w["fc_b"], "NCHW")
    logits = act("logits", (1, CLASSES))
    prob = act("prob", (1, CLASSES))
    m.add_node(LiteNode("conv", "Conv2DFusion", {
        "format": "NHWC", "kernel_size": [3, 3], "stride": [1, 1], "dilation": [1, 1],
        "pad_mode": "PAD", "pad_list": [1, 1, 1, 1], "group": 1,
        "in_channel": C_IN, "out_channel": C_OUT}, [x, conv_w, conv_b], [conv]))
    m.add_node(LiteNode("relu", "Activation", {"activation_type": "RELU"}, [conv], [relu]))
    m.add_node(LiteNode("flatten", "Reshape", {}, [relu, shape], [flat]))
    m.add_node(LiteNode("fc", "MatMulFusion", {"transpose_b": True}, [flat, fc_w, fc_b], [logits]))
    m.add_node(LiteNode("softmax", "Softmax", {"axis": [-1]}, [logits], [prob]))
    m.inputs, m.outputs = [x], [prob]
    return m.finalize_subgraph()


def onnx_reference(w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The same computation in ONNX (NCHW), run by onnxruntime."""
    inits = [
        numpy_helper.from_array(w["conv_w"].transpose(0, 3, 1, 2).copy(), "conv_w"),
        numpy_helper.from_array(w["conv_b"], "conv_b"),
        numpy_helper.from_array(w["fc_w"], "fc_w"),
        numpy_helper.from_array(w["fc_b"], "fc_b"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "flat_shape"),
    ]
    nodes = [
        helper.make_node("Transpose", ["x"], ["x_nchw"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["x_nchw", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("Transpose", ["relu"], ["relu_nhwc"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["relu_nhwc", "flat_shape"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, (1, CLASSES))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def mslite_python() -> Path:
    """The venv's python, created on first use (needs pip access to PyPI)."""
    python = VENV / "bin" / "python"
    if python.exists():
        return python
    if not PY37.exists():
        pytest.skip(f"Python 3.7 not found at {PY37} (set LITENPU_PY37)")
    subprocess.run([str(PY37), "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "mindspore_lite==2.0.0",
                    "numpy<1.22"], check=True)
    return python


def run_in_mslite(model_path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    feeds, outs = model_path.with_suffix(".in.npz"), model_path.with_suffix(".out.npz")
    np.savez(feeds, **inputs)
    proc = subprocess.run([str(mslite_python()), str(RUN_MS), model_path.name, str(feeds), str(outs)],
                          cwd=model_path.parent, capture_output=True, text=True)
    assert proc.returncode == 0, f"MindSpore Lite failed:\n{proc.stderr[-4000:]}"
    with np.load(outs) as z:
        return dict(z)


@pytest.mark.parametrize("external_threshold", [None, 256], ids=["inline", "external"])
def test_mindspore_lite_runs_our_file(tmp_path, external_threshold):
    w = weights()
    x = np.random.default_rng(1234).standard_normal((1, H, W, C_IN)).astype(np.float32)
    path = tmp_path / "tiny.ms"
    writer.save(lite_model(w), path, external_threshold=external_threshold)
    assert (tmp_path / "tiny.msw").exists() == (external_threshold is not None)
    got = run_in_mslite(path, {"x": x})
    want = onnx_reference(w, x)
    assert list(got) == ["prob"]
    np.testing.assert_allclose(got["prob"], want, rtol=1e-4, atol=1e-6)


def test_mindspore_lite_wants_nhwc_tensors_and_ignores_the_conv_format_attr(tmp_path):
    """What MindSpore Lite 2.0's CPU runtime accepts (pinned for the ONNX importer)."""
    w = weights()
    x = np.random.default_rng(1234).standard_normal((1, H, W, C_IN)).astype(np.float32)
    m = lite_model(w)
    m.nodes[0].attrs["format"] = "NCHW"  # the attribute is not what decides the layout
    writer.save(m, tmp_path / "attr.ms")
    np.testing.assert_allclose(run_in_mslite(tmp_path / "attr.ms", {"x": x})["prob"],
                               onnx_reference(w, x), rtol=1e-4, atol=1e-6)
    for t in m.tensors:
        t.format = "NCHW"  # ... the tensors' format is: NCHW conv inputs fail shape inference
    writer.save(m, tmp_path / "nchw.ms")
    with pytest.raises(AssertionError, match="InferShape failed, name: conv"):
        run_in_mslite(tmp_path / "nchw.ms", {"x": x})


def test_files_mindspore_lite_wrote_round_trip_through_us(tmp_path):
    """A real 1.5 file, re-written by us, gives MindSpore Lite 2.0's recorded outputs."""
    from test_lite_reader import real
    src = real("lite_lenet_tod_infer.ms")
    path = tmp_path / "lenet.ms"
    writer.save(reader.load(src), path)
    with np.load(str(src) + ".ref.npz") as ref:
        inputs = {k[3:]: ref[k] for k in ref.files if k.startswith("in:")}
        expected = {k[4:]: ref[k] for k in ref.files if k.startswith("out:")}
    got = run_in_mslite(path, inputs)
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-m", "mslite", "-v"]))
