"""`litenpu quantize` / `provider.quantize.quantize_model`: calibration data readers and their
errors, the NPU configuration, --exclude, --to-ms, atomic writes and the command line."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from quant_cases import REDUCE_RANGE

from converters.lite import reader as ms_reader
from converters.onnx_export import export_onnx
from provider.cli import main
from provider.quantize import (
    NPU_INT8_OPS,
    CalibrationError,
    ImageOptions,
    QuantConfig,
    QuantOptionError,
    accuracy_report,
    load_calibration,
    model_inputs,
    quantize_model,
)
from provider.quantize.config import PER_CHANNEL_AXIS
from provider.zoo import build

INPUT = "image"
SHAPE = (1, 3, 56, 56)  # resnet_block at batch 1


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "resnet_block.onnx"
    onnx.save(build("resnet_block", batch=1), path)
    return path


def samples(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, *SHAPE[1:])).astype(np.float32)


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


# ---- readers -------------------------------------------------------------------------------

def test_npz_samples_along_the_first_axis(model, tmp_path):
    np.savez(tmp_path / "stacked.npz", **{INPUT: samples(3)})           # (3, 3, 56, 56)
    np.savez(tmp_path / "batched.npz", **{INPUT: samples(3)[:, None]})  # (3, 1, 3, 56, 56)
    for name in ("stacked.npz", "batched.npz"):
        data = load_calibration(model, tmp_path / name)
        assert len(data) == 3
        np.testing.assert_array_equal(data[2][INPUT], samples(3)[2:3])


def test_npy_folder_one_file_per_sample(model, tmp_path):
    for i, x in enumerate(samples(2)):
        np.save(tmp_path / f"{i}.npy", x)  # without the batch axis: added
    data = load_calibration(model, tmp_path)
    assert len(data) == 2 and data[1][INPUT].shape == SHAPE


def test_npy_subfolders_for_several_inputs(tmp_path):
    from provider.quantize.calibration import ModelInput, from_npy_dir

    inputs = [ModelInput("a", "tensor(float)", (1, 4)), ModelInput("b", "tensor(int64)", (1, 2))]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for i in range(3):
        np.save(tmp_path / "a" / f"{i}.npy", np.full((1, 4), i, np.float32))
        np.save(tmp_path / "b" / f"{i}.npy", np.full((1, 2), i, np.int64))
    data = from_npy_dir(inputs, tmp_path)
    assert len(data) == 3 and data[2]["b"].tolist() == [[2, 2]]
    (tmp_path / "b" / "2.npy").unlink()
    with pytest.raises(CalibrationError, match="different numbers"):
        from_npy_dir(inputs, tmp_path)


def test_image_folder_resized_and_normalised(model, tmp_path):
    image_module = pytest.importorskip("PIL.Image", reason="image folders need the quantize extra")
    pixels = np.zeros((20, 30, 3), np.uint8)
    pixels[..., 0], pixels[..., 1], pixels[..., 2] = 10, 100, 250
    image_module.fromarray(pixels).save(tmp_path / "a.png")
    options = ImageOptions(mean=(10.0, 50.0, 50.0), std=(1.0, 2.0, 4.0))
    data = load_calibration(model, tmp_path, images=options)
    x = data[0][INPUT]
    assert x.shape == SHAPE and x.dtype == np.float32
    np.testing.assert_allclose(x[0, :, 7, 9], [0.0, 25.0, 50.0])  # (pixel - mean) / std
    nhwc = load_calibration([_nhwc_input()], tmp_path, images=ImageOptions(
        layout="nhwc", size=(8, 8), std=(255.0,)))
    np.testing.assert_allclose(nhwc[0]["x"][0, 3, 3], np.array([10, 100, 250]) / 255, rtol=1e-6)


def _nhwc_input():
    from provider.quantize.calibration import ModelInput

    return ModelInput("x", "tensor(float)", ("batch", 8, 8, 3))


def test_random_samples_are_seeded(model):
    a, b = load_calibration(model, random=2, seed=3), load_calibration(model, random=2, seed=3)
    np.testing.assert_array_equal(a[1][INPUT], b[1][INPUT])
    assert a[0][INPUT].shape == SHAPE


# ---- bad calibration data: clear errors, no output file -------------------------------------

BAD_NPZ = {
    "wrong input name": ({"pixels": samples(2)}, r"unknown input\(s\) \['pixels'\].*\['image'\]"),
    "wrong shape": ({INPUT: samples(2)[:, :, :28]}, r"sample 0: input 'image' has shape \[1, 3, 28, 56\], expected float32 \[1, 3, 56, 56\]"),
    "wrong rank": ({INPUT: samples(2)[:, 0]}, r"'image' array has shape \[2, 56, 56\]"),
    "wrong dtype": ({INPUT: samples(2).astype(np.float64)}, r"'image' is float64, expected float32"),
    "empty set": ({INPUT: samples(0)}, r"no calibration samples"),
    "NaN": ({INPUT: np.where(np.arange(2)[:, None, None, None] == 1, np.nan, samples(2))},
            r"sample 1: input 'image' contains NaN"),
    "Inf": ({INPUT: np.full((1, *SHAPE[1:]), np.inf, np.float32)}, r"'image' contains Inf"),
}


@pytest.mark.parametrize("case", BAD_NPZ, ids=list(BAD_NPZ))
def test_bad_calibration_data_is_named_and_writes_nothing(model, tmp_path, case):
    arrays, message = BAD_NPZ[case]
    np.savez(tmp_path / "calib.npz", **arrays)
    output = tmp_path / "out" / "q.onnx"
    output.parent.mkdir()
    output.write_bytes(b"previous")  # an older file stays as it was
    with pytest.raises(CalibrationError, match=message):
        data = load_calibration(model, tmp_path / "calib.npz")
        quantize_model(model, output, data, ms_output=tmp_path / "out" / "q.ms")
    assert output.read_bytes() == b"previous"
    assert sorted(p.name for p in output.parent.iterdir()) == ["q.onnx"]


def test_bad_calibration_data_on_the_command_line(model, tmp_path, capsys):
    np.savez(tmp_path / "calib.npz", pixels=samples(2))
    code = main(["quantize", str(model), "-o", str(tmp_path / "q.onnx"),
                 "--calibration", str(tmp_path / "calib.npz")])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "unknown input(s) ['pixels']" in err and not (tmp_path / "q.onnx").exists()


def test_data_for_another_model_is_rejected(model, tmp_path):
    other = load_calibration([_nhwc_input()], random=1)
    with pytest.raises(CalibrationError, match=r"for inputs \['x'\]; the model's inputs are \['image'\]"):
        quantize_model(model, tmp_path / "q.onnx", other)
    with pytest.raises(CalibrationError, match="not both"):
        load_calibration(model, tmp_path, random=2)


def test_image_folder_without_pillow_names_the_extra(model, tmp_path, monkeypatch):
    (tmp_path / "a.png").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "PIL", None)  # None in sys.modules: the import fails
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(ImportError, match=r"litenpu\[quantize\]"):
        load_calibration(model, tmp_path)


# ---- the NPU configuration ------------------------------------------------------------------

@pytest.fixture(scope="module")
def quantized(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("q")
    result = quantize_model(model, folder / "q.onnx", load_calibration(model, random=4),
                            QuantConfig(reduce_range=REDUCE_RANGE), ms_output=folder / "q.ms")
    return result, onnx.load(folder / "q.onnx")


def test_npu_configuration(quantized):
    result, model = quantized
    consts = initializers(model)
    ops = {n.op_type for n in model.graph.node} - {"QuantizeLinear", "DequantizeLinear"}
    dq = {n.output[0]: n for n in model.graph.node if n.op_type == "DequantizeLinear"}
    for node in model.graph.node:
        if node.op_type in PER_CHANNEL_AXIS:
            weight = dq[node.input[1]]  # weights dequantized per output channel, int8 symmetric
            values, scale = consts[weight.input[0]], consts[weight.input[1]]
            assert values.dtype == np.int8 and scale.shape == (values.shape[0],)
            assert not consts[weight.input[2]].any()
    assert {"Conv", "Add", "MaxPool", "GlobalAveragePool", "Gemm"} <= ops
    zero_points = [consts[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert zero_points and all(z.dtype == np.int8 for z in zero_points)
    kept = {(n.name, n.reason) for n in result.nodes if n.precision == "float"}
    assert kept == {("flatten_0", "no int8 kernel on the NPU")}
    assert all(n.op_type in NPU_INT8_OPS for n in result.nodes if n.precision == "int8")
    summary = result.summary()
    assert "kept float, no int8 kernel on the NPU: flatten_0 (Flatten)" in summary
    assert result.size_after < result.size_before / 2 and "smaller" in summary


def test_reduce_range_quantizes_weights_to_7_bits(model, tmp_path):
    """`reduce_range` (onnxruntime's remedy for its saturating int8 kernels) keeps every
    weight code within +-64; the summary says so."""
    data = load_calibration(model, random=2)
    result = quantize_model(model, tmp_path / "r.onnx", data, QuantConfig(reduce_range=True))
    quantized = onnx.load(tmp_path / "r.onnx")
    consts = initializers(quantized)
    weights = [consts[n.input[0]] for n in quantized.graph.node
               if n.op_type == "DequantizeLinear" and consts.get(n.input[0]) is not None
               and consts[n.input[0]].dtype == np.int8]
    assert weights and max(int(np.abs(w.astype(np.int32)).max()) for w in weights) <= 64
    assert "7-bit weights per channel" in result.summary()


def test_uint8_activations_and_other_methods(model, tmp_path):
    data = load_calibration(model, random=3)
    for method in ("entropy", "percentile"):
        result = quantize_model(model, tmp_path / f"{method}.onnx", data,
                                QuantConfig(activations="uint8", method=method))
        q = onnx.load(result.output)
        consts = initializers(q)
        assert all(consts[n.input[2]].dtype == np.uint8
                   for n in q.graph.node if n.op_type == "QuantizeLinear")
    with pytest.raises(QuantOptionError, match="minmax, entropy, percentile"):
        QuantConfig(method="kl")


def test_progress_is_reported_per_sample(model, tmp_path):
    calls = []
    quantize_model(model, tmp_path / "q.onnx", load_calibration(model, random=3),
                   progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_exclude_keeps_a_node_float_and_the_reports_show_it(model, tmp_path):
    data = load_calibration(model, random=3)
    result = quantize_model(model, tmp_path / "q.onnx", data, QuantConfig(exclude=("conv_2",)))
    decision = next(n for n in result.nodes if n.name == "conv_2")
    assert (decision.precision, decision.reason) == ("float", "excluded by --exclude")
    assert "kept float, excluded by --exclude: conv_2 (Conv)" in result.summary()
    q = onnx.load(tmp_path / "q.onnx")
    conv = next(n for n in q.graph.node if n.name == "conv_2")
    assert initializers(q)[conv.input[1]].dtype == np.float32  # float weights, no DQ
    report = accuracy_report(model, tmp_path / "q.onnx", data)
    assert ("conv_2", "Conv") in report.float_nodes
    assert "conv_2 (Conv)" in report.to_text().splitlines()[-1]
    weightless = quantize_model(model, tmp_path / "q3.onnx", data, QuantConfig(exclude=("maxpool_0",)))
    assert "warning: MaxPool 'maxpool_0' was excluded but its neighbours quantize its inputs" \
        in weightless.summary()  # DQ -> MaxPool -> Q: runtimes fold it to int8 anyway
    with pytest.raises(QuantOptionError, match=r"'conv_99'.*close names: conv_"):
        quantize_model(model, tmp_path / "q2.onnx", data, QuantConfig(exclude=("conv_99",)))


def test_to_ms_writes_quantized_ops_with_quant_params(quantized, tmp_path):
    """--to-ms writes the QDQ model's units as quantized Lite ops (QUANT_ALL) whose tensors
    carry their quantParams (per output channel for conv weights, int32 biases at input x
    weight scale), explicit QuantDTypeCast steps at the float edges and no Quantize /
    Dequantize carried as Custom: it loads back, exports to an ONNX model onnxruntime runs
    like the QDQ model, and runs on the NPU as an integer program with the same codes."""
    result, model = quantized
    assert result.ms_output is not None and result.ms_output.exists()
    lite = ms_reader.load(result.ms_output)
    ops = {(n.op, n.quant_type) for n in lite.nodes}
    assert ("Conv2DFusion", "QUANT_ALL") in ops and ("QuantDTypeCast", "QUANT_NONE") in ops
    assert not [n for n in lite.nodes if n.op == "Custom"]
    conv = next(n for n in lite.nodes if n.op == "Conv2DFusion")
    x, w, b = (lite.tensors[t] for t in conv.inputs)
    y = lite.tensors[conv.outputs[0]]
    assert (x.dtype, w.dtype, b.dtype, y.dtype) == (np.int8, np.int8, np.int32, np.int8)
    assert len(w.quant_params) == w.data.shape[0] == len(b.quant_params)
    assert all(p.zero_point == 0 for p in w.quant_params) and np.abs(w.data).max() <= 127
    np.testing.assert_allclose([p.scale for p in b.quant_params],
                               [x.quant_params[0].scale * p.scale for p in w.quant_params],
                               rtol=1e-6)
    exported = export_onnx(lite).SerializeToString()
    feeds = {INPUT: samples(1, seed=5)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got.run(None, feeds)[0], want.run(None, feeds)[0])
    from provider.npu.compiler import compile_model
    from provider.npu.executor import Executor
    with Executor(compile_model(lite)) as npu:
        np.testing.assert_array_equal(npu.run([feeds[INPUT]])[0], want.run(None, feeds)[0])
    assert [p.name for p in result.ms_output.parent.iterdir() if p.name.startswith(".")] == []


def test_model_inputs_skip_initializers_of_old_ir_models():
    from provider.zoo import build as zoo

    m = zoo("resnet_block", batch=1)
    assert [i.name for i in model_inputs(m)] == [INPUT]


def test_a_two_input_sum_is_quantized_as_an_add(tmp_path):
    """Older models add residuals with Sum, which onnxruntime's quantizer leaves float:
    preparation writes it as Add, so it becomes an int8 Add the NPU runs on codes."""
    from onnx import TensorProto, helper

    from converters.onnx_import import import_onnx
    from provider.npu.compiler import compile_model

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Sum", ["c", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    source = tmp_path / "sum.onnx"
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=8)  # onnxruntime 1.23 reads up to IR 11
    onnx.save(proto, source)
    result = quantize_model(source, tmp_path / "q.onnx", load_calibration(source, random=4))
    quantize_model(proto, tmp_path / "from_proto.onnx", load_calibration(source, random=4))
    assert [n.op_type for n in proto.graph.node] == ["Conv", "Sum", "Relu"]  # left as given
    assert ("Add", "int8") in {(n.op_type, n.precision) for n in result.nodes}
    program = compile_model(import_onnx(onnx.load(tmp_path / "q.onnx"))[0])
    assert "qadd" in {step.kernel for step in program.steps}
    assert not {"binary", "dequantize"} & {step.kernel for step in program.steps[:-1]}


def test_preparing_leaves_the_working_directory_clean(tmp_path, monkeypatch):
    # the detector's dynamic head defeats symbolic shape inference, which then saves its
    # partial model into the current directory unless preparation runs elsewhere
    from provider.quantize.prepare import prepare

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    (tmp_path / "work").mkdir()
    prepare(build("yolo_detector"), tmp_path / "work")
    assert list(cwd.iterdir()) == []


# ---- command line ---------------------------------------------------------------------------

def test_quantize_cli(model, tmp_path, capsys):
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(model), "-o", str(out), "--random", "3", "--to-ms",
                 "--exclude", "conv_1", "--activations", "uint8"]) == 0
    text = capsys.readouterr().out
    assert "3 calibration samples, minmax, uint8 activations" in text
    assert "excluded by --exclude: conv_1 (Conv)" in text
    assert out.exists() and out.with_suffix(".ms").exists()
    assert main(["quantize", str(model), "-o", str(tmp_path / "x.ms"), "--random", "1"]) == 1
    assert "name it *.onnx" in capsys.readouterr().err
    assert main(["quantize", str(model), "-o", str(out), "--random", "1", "--std", "2"]) == 1
    assert "describe image folders" in capsys.readouterr().err
    assert main(["quantize", str(model), "-o", str(tmp_path / "no" / "q.onnx"), "--random", "1"]) == 1
    assert "no such folder" in capsys.readouterr().err
    assert main(["quantize", str(model), "-o", str(out), "--random", "2", "--method", "entropy"]) == 0
    assert capsys.readouterr().out.startswith("quantized ")  # onnxruntime's prints went to stderr


@pytest.mark.parametrize("name", ["quantize", "accuracy"])
def test_help_has_examples(name, capsys):
    with pytest.raises(SystemExit):
        main([name, "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and f"litenpu {name} model.onnx" in text


def test_without_tqdm_a_hint_replaces_the_bar(model, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    assert main(["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--random", "2"]) == 0
    assert "calibrating 2 samples (pip install 'litenpu[quantize]' for a progress bar)" in \
        capsys.readouterr().err
