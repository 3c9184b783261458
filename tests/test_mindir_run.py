"""MindIR -> Lite IR -> ONNX (converters.onnx_export) -> onnxruntime CPU, against MindSpore.

The fixtures carry MindSpore 2.10.0's own outputs for fixed inputs (models/mindir/*.npz);
the hand-built graphs are checked against numpy on seeded inputs.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from test_mindir_import import FIXTURE_FILES, FIXTURES, GraphMaker

from converters.lite import reader, writer
from converters.mindir import import_mindir
from converters.onnx_export import export_onnx

RTOL, ATOL = 1e-4, 1e-5  # atol only absorbs float32 noise on values near zero


def run_lite(model, *inputs: np.ndarray) -> list[np.ndarray]:
    proto = export_onnx(model)
    onnx.checker.check_model(proto)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, inputs, strict=True)))


@pytest.mark.parametrize("via_ms", [False, True], ids=["ir", "via-ms"])
@pytest.mark.parametrize("name", sorted(FIXTURE_FILES))
def test_fixture_matches_mindspore(name, via_ms):
    """Directly, and after a .ms round trip (what `litenpu convert x.mindir -o x.ms` writes)."""
    model, _ = import_mindir(FIXTURES / FIXTURE_FILES[name])
    if via_ms:
        model = reader.loads(writer.dumps(model))
    ref = np.load(FIXTURES / f"{name}.npz")
    outs = run_lite(model, ref["in0"])
    expected = [ref[f"out{i}"] for i in range(len(ref.files) - 1)]
    assert len(outs) == len(expected)
    for i, (got, want) in enumerate(zip(outs, expected, strict=True)):
        assert got.shape == want.shape and got.dtype == want.dtype, (name, i)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{name} output {i}")


def test_1x_spelling_dense_relu6_softmax_runs():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    gm = GraphMaker()
    x = gm.input("x", [4, 3])
    mm = gm.op("MatMul", [x, gm.param("w", w)], [4, 5], attrs={"transpose_a": False, "transpose_b": True}, ref=False)
    biased = gm.op("BiasAdd", [mm, gm.param("b", bias)], [4, 5], attrs={"format": "NCHW"}, ref=False)
    act = gm.op("ReLU6", [biased], [4, 5], ref=False)
    gm.output(gm.op("Softmax", [act], [4, 5], attrs={"axis": (1,)}, ref=False))
    model, _ = import_mindir(gm.bytes())
    assert [n.op for n in model.nodes] == ["MatMulFusion", "Activation", "Softmax"]
    xv = rng.standard_normal((4, 3)).astype(np.float32) * 3
    h = np.clip(xv @ w.T + bias, 0, 6)
    want = np.exp(h - h.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(run_lite(model, xv)[0], want, rtol=RTOL, atol=ATOL)


def test_strided_slice_masks_resolve_to_plain_slices():
    # x[1:, :5:2, 3] in TF terms: begin_mask on axis 1, end_mask on axis 0, shrink on axis 2
    gm = GraphMaker()
    x = gm.input("x", [4, 6, 5])
    args = [gm.const(v) for v in ((1, 9, 3), (0, 5, 4), (1, 2, 1), 2, 1, 0, 0, 4)]
    gm.output(gm.op("StridedSlice", [x, *args], [3, 3]))
    model, _ = import_mindir(gm.bytes())
    assert [n.op for n in model.nodes] == ["StridedSlice", "Squeeze"]
    xv = np.arange(120, dtype=np.float32).reshape(4, 6, 5)
    np.testing.assert_array_equal(run_lite(model, xv)[0], xv[1:, :5:2, 3])


def test_dense_primitive_and_shape():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    gm = GraphMaker()
    x = gm.input("x", [2, 4])
    dense = gm.op("Dense", [x, gm.param("w", w), gm.param("b", bias)], [2, 6])
    gm.output(dense)
    gm.output(gm.op("Shape", [dense], [2], dtype=7))  # int64
    model, report = import_mindir(gm.bytes())
    assert report.mapped == {"Dense": 1, "Shape": 1}
    xv = rng.standard_normal((2, 4)).astype(np.float32)
    y, shape = run_lite(model, xv)
    np.testing.assert_allclose(y, xv @ w.T + bias, rtol=RTOL, atol=ATOL)
    assert shape.tolist() == [2, 6]


def test_ones_like_zeros_like_map_to_lite_primitives():
    """(converters.onnx_export has no rule for OnesLike / ZerosLike yet: mapping only.)"""
    gm = GraphMaker()
    x = gm.input("x", [1, 3, 2, 2])
    gm.output(gm.op("OnesLike", [x], [1, 3, 2, 2]))
    gm.output(gm.op("ZerosLike", [x], [1, 3, 2, 2]))
    model, _ = import_mindir(gm.bytes())
    assert [(n.op, n.attrs) for n in model.nodes] == [("OnesLike", {}), ("ZerosLike", {})]


def test_bias_add_without_a_product_to_fuse_into():
    bias = np.array([1.0, -2.0, 3.0], np.float32)
    gm = GraphMaker()
    x = gm.input("x", [1, 3, 4, 4])
    gm.output(gm.op("BiasAdd", [x, gm.param("b", bias), gm.const(0)], [1, 3, 4, 4]))
    model, _ = import_mindir(gm.bytes())
    assert [(n.op, n.attrs) for n in model.nodes] == [("BiasAdd", {"format": "NCHW"})]
    np.testing.assert_allclose(run_lite(model, _X[:1])[0], _X[:1] + bias.reshape(1, 3, 1, 1), rtol=RTOL)


def test_convert_mindir_file_to_onnx_and_ms(tmp_path):
    """`litenpu convert x.mindir -o x.onnx|x.ms` goes through converters.convert's .mindir reader."""
    from converters.convert import convert

    calls = []
    report = convert(FIXTURES / "lenet5_ext_graph.mindir", tmp_path / "lenet.onnx",
                     progress=lambda done, total: calls.append((done, total)))
    assert report.mapped["Conv2D"] == 2 and report.external_files == ["lenet5_ext_variables/data_0"]
    total = calls[0][1]  # the import reports first (the ONNX export follows)
    assert calls[:total] == [(done, total) for done in range(1, total + 1)]
    ref = np.load(FIXTURES / "lenet5_ext.npz")
    sess = ort.InferenceSession(str(tmp_path / "lenet.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: ref["in0"]})[0]
    np.testing.assert_allclose(got, ref["out0"], rtol=RTOL, atol=ATOL)
    convert(FIXTURES / "lenet5_ext_graph.mindir", tmp_path / "lenet.ms")
    np.testing.assert_allclose(run_lite(reader.load(tmp_path / "lenet.ms"), ref["in0"])[0], ref["out0"],
                               rtol=RTOL, atol=ATOL)


def _single(prim: str, inputs: list, shape, dtype=1, attrs=None) -> GraphMaker:
    """A graph x -> prim(x, *inputs) (constants as 2.x Constant nodes), output typed `shape`."""
    gm = GraphMaker()
    x = gm.input("x", [2, 3, 4, 4])
    args = [x] + [gm.input("y", [2, 3, 4, 4]) if isinstance(v, str) else gm.const(v) for v in inputs]
    gm.output(gm.op(prim, args, shape, attrs=attrs, dtype=dtype))
    return gm


_X = np.random.default_rng(11).standard_normal((2, 3, 4, 4)).astype(np.float32)
_Y = np.random.default_rng(12).standard_normal((2, 3, 4, 4)).astype(np.float32)
# (primitive, constant inputs, output shape, output dtype, Lite op, numpy reference or None:
#  None = converters.onnx_export has no rule for that Lite op yet, so only the mapping is checked)
_SINGLE = [
    ("Rsqrt", [], [2, 3, 4, 4], 1, "Rsqrt", lambda x, y: 1 / np.sqrt(x)),
    ("Square", [], [2, 3, 4, 4], 1, "Square", lambda x, y: x * x),
    ("NotEqual", ["y"], [2, 3, 4, 4], 9, "NotEqual", None),
    ("LogicalOr", ["y"], [2, 3, 4, 4], 9, "LogicalOr", None),  # (bool inputs in real graphs)
    ("GreaterEqual", ["y"], [2, 3, 4, 4], 9, "GreaterEqual", lambda x, y: x >= y),
    ("RealDiv", ["y"], [2, 3, 4, 4], 1, "DivFusion", lambda x, y: x / y),
    ("Softsign", [], [2, 3, 4, 4], 1, "Activation", lambda x, y: x / (1 + np.abs(x))),
    ("Argmin", [2, 34], [2, 3, 4], 6, "ArgMinFusion", lambda x, y: x.argmin(2).astype(np.int32)),
    ("MeanExt", [(1, 3), True, None], [2, 1, 4, 1], 1, "ReduceFusion", lambda x, y: x.mean((1, 3), keepdims=True)),
    ("GatherV2", [np.array([2, 0], np.int32), -1, 0], [2, 3, 4, 2], 1, "Gather", lambda x, y: x[..., [2, 0]]),
]


@pytest.mark.parametrize("prim, consts, shape, dtype, lite_op, ref", _SINGLE, ids=[c[0] for c in _SINGLE])
def test_single_primitive(prim, consts, shape, dtype, lite_op, ref):
    model, report = import_mindir(_single(prim, consts, shape, dtype).bytes())
    assert [n.op for n in model.nodes] == [lite_op] and report.mapped == {prim: 1}
    if ref is not None:
        x = np.abs(_X) + 0.5  # inside every op's domain
        feeds = [x, _Y] if any(isinstance(c, str) for c in consts) else [x]
        got = run_lite(model, *feeds)[0]
        want = ref(x, _Y)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_resize_bilinear_1x_attributes():
    gm = GraphMaker()
    x = gm.input("x", [1, 1, 2, 2])
    attrs = {"size": (3, 3), "align_corners": True}
    gm.output(gm.op("ResizeBilinear", [x], [1, 1, 3, 3], attrs=attrs, ref=False))
    model, _ = import_mindir(gm.bytes())
    xv = np.array([[[[0, 2], [4, 6]]]], np.float32)
    np.testing.assert_allclose(run_lite(model, xv)[0][0, 0], [[0, 1, 2], [2, 3, 4], [4, 5, 6]], rtol=RTOL)
