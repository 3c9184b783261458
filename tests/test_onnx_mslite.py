"""Opt-in (`pytest -m mslite`): .ms files the ONNX importer writes run in the real
MindSpore Lite 2.0 runtime and give onnxruntime's outputs on the same seeded inputs.

Needs the Python 3.7 venv with mindspore_lite==2.0.0 that `tox -e mslite` creates under
.tox/mslite-py37. MindSpore Lite's CPU runtime takes NHWC convolutions and pools only, so
CNNs go through `converters.nhwc.to_nhwc` (`litenpu convert --layout nhwc`) first.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_roundtrip import LIGHT, random_feeds, run, with_random_weights

import models
from converters.nhwc import to_nhwc
from converters.onnx_import import import_onnx

pytestmark = pytest.mark.mslite

ROOT = Path(__file__).resolve().parents[1]
MSLITE_PYTHON = ROOT / ".tox" / "mslite-py37" / "bin" / "python"
RUN_MS = ROOT / "tests" / "mslite" / "run_ms.py"


def run_mslite(model: onnx.ModelProto, feeds: dict, tmp_path: Path,
               nhwc: bool = False) -> dict[str, np.ndarray]:
    """Import `model` (re-laid out to NHWC), write it as .ms, run it in MindSpore Lite 2.0;
    outputs by name."""
    if not MSLITE_PYTHON.exists():
        pytest.skip(f"no MindSpore Lite venv at {MSLITE_PYTHON} (run `tox -e mslite` once)")
    from converters.lite import writer

    lite, report = import_onnx(model)
    assert not report.custom, report.custom
    writer.save(to_nhwc(lite) if nhwc else lite, tmp_path / "m.ms")
    np.savez(tmp_path / "in.npz", **feeds)
    proc = subprocess.run([str(MSLITE_PYTHON), str(RUN_MS), "m.ms", "in.npz", "out.npz"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"MindSpore Lite failed:\n{proc.stderr[-4000:]}"
    with np.load(tmp_path / "out.npz") as z:
        return dict(z)


def _compare(model, feeds, tmp_path, nhwc=False):
    got = run_mslite(model, feeds, tmp_path, nhwc)
    want = dict(zip([o.name for o in model.graph.output], run(model, feeds), strict=True))
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        # MindSpore Lite's index outputs (ArgMax, TopK) are int32 where ONNX's are int64.
        np.testing.assert_allclose(got[name].astype(value.dtype), value, rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def _batch_one(name: str) -> onnx.ModelProto:
    model = models.build(name)
    for vi in (*model.graph.input, *model.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = 1  # MindSpore Lite wants static inputs
    return model


def test_transformer_encoder_runs_in_mindspore_lite(tmp_path):
    x = np.random.default_rng(0).standard_normal((1, 16, 64)).astype(np.float32)
    _compare(_batch_one("transformer_encoder"), {"tokens": x}, tmp_path)


@pytest.mark.parametrize("name,size", [("mobilenet_v2", 64), ("resnet_block", 56)])
def test_cnns_in_nhwc_run_in_mindspore_lite(tmp_path, name, size):
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    _compare(_batch_one(name), {"image": x}, tmp_path, nhwc=True)


def test_op_zoo_runs_in_mindspore_lite(tmp_path):
    rng = np.random.default_rng(1)

    def c(name, value):
        return numpy_helper.from_array(np.asarray(value), name)

    inits = [c("axes", np.array([1], np.int64)), c("idx", np.array([2, 0], np.int64)),
             c("st", np.array([1], np.int64)), c("en", np.array([5], np.int64)),
             c("ax", np.array([2], np.int64)), c("sp", np.array([2], np.int64)),
             c("pads", np.array([0, 0, 1, 0, 0, 2], np.int64)),
             c("rep", np.array([1, 2, 1], np.int64)), c("zero", np.array([0], np.int64)),
             c("eshape", np.array([2, 1, 6, 8], np.int64)), c("lo", np.float32(-0.5)),
             c("hi", np.float32(0.7)), c("w", rng.standard_normal((5, 8)).astype(np.float32)),
             c("b", rng.standard_normal(5).astype(np.float32)), c("k", np.array([3], np.int64)),
             c("two", np.float32(2.0)), c("split", np.array([2, 4], np.int64))]
    n = helper.make_node
    nodes = [n("ReduceMean", ["x", "axes"], ["rm"]), n("Gather", ["x", "idx"], ["ga"], axis=1),
             n("Slice", ["x", "st", "en", "ax", "sp"], ["sl"]),
             n("Concat", ["x", "x"], ["cc"], axis=2), n("Split", ["x", "split"], ["s1", "s2"], axis=1),
             n("Pad", ["x", "pads"], ["pd"]), n("Tile", ["x", "rep"], ["tl"]),
             n("Unsqueeze", ["x", "zero"], ["us"]), n("Expand", ["us", "eshape"], ["ex"]),
             n("Greater", ["x", "lo"], ["gt"]), n("Where", ["gt", "x", "hi"], ["wh"]),
             n("ArgMax", ["x"], ["am"], axis=2, keepdims=0), n("TopK", ["x", "k"], ["tv", "ti"]),
             n("Clip", ["x", "lo", "hi"], ["cl"]), n("LeakyRelu", ["x"], ["lr"], alpha=0.2),
             n("Flatten", ["x"], ["fl"], axis=2), n("Gemm", ["fl", "w", "b"], ["gm"], transB=1),
             n("Exp", ["x"], ["e"]), n("Abs", ["x"], ["ab"]), n("Sqrt", ["ab"], ["sq"]),
             n("Pow", ["ab", "two"], ["pw"]), n("Softmax", ["x"], ["sm"], axis=1),
             n("Transpose", ["x"], ["tp"], perm=[2, 0, 1]), n("Cast", ["am"], ["cs"], to=1),
             n("Sigmoid", ["x"], ["sg"]), n("Tanh", ["x"], ["th"]), n("Erf", ["x"], ["er"])]
    outputs = [o for node in nodes for o in node.output if o not in ("gt", "us", "fl", "ab")]
    graph = helper.make_graph(nodes, "zoo", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                           [2, 6, 8])],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                               for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {vi.name: vi.type for vi in inferred.graph.output}
    for vi in model.graph.output:
        vi.type.CopyFrom(types[vi.name])
    x = rng.standard_normal((2, 6, 8)).astype(np.float32)
    _compare(model, {"x": x}, tmp_path)


@pytest.mark.parametrize("stem", ["light_resnet50", "light_inception_v1", "light_densenet121",
                                  "light_shufflenet", "light_bvlc_alexnet"])
def test_light_architectures_in_nhwc_run_in_mindspore_lite(tmp_path, stem):
    model = with_random_weights(onnx.load(LIGHT / f"{stem}.onnx"))
    _compare(model, random_feeds(model, seed=0), tmp_path, nhwc=True)


def test_transposed_conv_in_nhwc_runs_in_mindspore_lite(tmp_path):
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((3, 4, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                            pads=[1, 1, 1, 1], output_padding=[1, 1])
    graph = helper.make_graph([node], "deconv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 10, 10])],
                              [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
    _compare(model, {"x": x}, tmp_path, nhwc=True)
