"""Whole quantized models through onnxruntime with the NPU EP: models quantized the NPU way
(QDQ, `provider.quantize`) and with onnxruntime's QOperator format run on the NPU as integer
programs: every node in at most two partitions, the outputs within 1 LSB (the output's last
quantization step) of onnxruntime CPU on the same quantized model, and as close to the fp32
model's outputs as onnxruntime's (cosine similarity, within 1e-4: the rare 1-LSB
differences of onnxruntime's float path for int8 activations move it either way)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from npu_oracle import randomized
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from quant_cases import REDUCE_RANGE, cosine, output_scales

import provider
from provider.quantize import QuantConfig, load_calibration, quantize_model
from provider.session import InferenceSession
from provider.zoo import build

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
NPU = ["NPUExecutionProvider", "CPUExecutionProvider"]
# Fraction of outputs within one step of onnxruntime's: 99%, or as measured where a step's
# difference upstream is more frequent: the detector's many table activations (SiLU:
# onnxruntime's approximate float Sigmoid; 99.05% with onnxruntime 1.32) and ShuffleNet, whose
# residual Sums are quantized as Adds: a one-step difference in one branch reaches the
# output through the later adds (97.8% with onnxruntime 1.32, 95.2% with 1.23, every
# difference within 8 steps; the cosine to the float model stays at onnxruntime's, which the
# test checks too). On a CPU without VNNI (reduce_range, 7-bit weights) ShuffleNet measured
# 94.2% with onnxruntime 1.32 (AVX2 EPYC): onnxruntime's fused path agrees with its own exact
# unfused one on 94.1% there, the NPU (native and numpy alike) on 96.8%.
WITHIN = {"yolo_detector_int8": 0.98, "light_shufflenet": 0.93 if REDUCE_RANGE else 0.95}
# (model, format, activations); the light models get seeded random weights
MODELS = [
    ("resnet_block", "qdq", "int8"),
    ("resnet_block", "qdq", "uint8"),
    ("mobilenet_v2", "qdq", "int8"),
    ("light_squeezenet", "qdq", "int8"),
    ("light_squeezenet", "qoperator", "uint8"),
    ("light_shufflenet", "qdq", "uint8"),
    ("resnet_block", "qoperator", "int8"),
    ("yolo_detector_int8", "zoo", "int8"),
    pytest.param("light_resnet50", "qdq", "int8", marks=pytest.mark.slow),
    pytest.param("light_resnet50", "qoperator", "uint8", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def float_model(name: str) -> onnx.ModelProto:
    """A zoo model at batch 1, or a light model with seeded random weights and without its
    final Softmax (the logits are compared: a softmax of random logits is near one-hot, and
    onnxruntime 1.23 and 1.32 disagree on the opset-11 QLinearSoftmax the QOperator form
    ends with)."""
    if name.startswith("light_"):
        path = os.path.join(LIGHT, f"{name}.onnx")
        if not os.path.exists(path):
            pytest.skip(f"{path} not shipped with this onnx")
        return without_final_softmax(randomized(onnx.load(path)))
    return build(name, batch=1)


def without_final_softmax(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = model.graph
    last = graph.node[-1]
    if last.op_type == "Softmax" and list(last.output) == [o.name for o in graph.output]:
        del graph.node[-1]
        del graph.output[:]
        inferred = onnx.shape_inference.infer_shapes(model)
        graph.output.extend(vi for vi in inferred.graph.value_info if vi.name == last.input[0])
    return model


class _Reader(CalibrationDataReader):
    def __init__(self, samples):
        self._it = iter(list(samples))

    def get_next(self):
        return next(self._it, None)


def _static(model: onnx.ModelProto, shape) -> onnx.ModelProto:
    """`model` with its input's symbolic dims fixed (its shape arithmetic then folds)."""
    for dim, value in zip(model.graph.input[0].type.tensor_type.shape.dim, shape, strict=True):
        dim.ClearField("dim_param")
        dim.dim_value = value
    return model


def quantized(name: str, fmt: str, activations: str, folder) -> tuple[str, str]:
    if fmt == "zoo":  # the zoo's int8 QDQ detector and its float original, at 1x3x64x64
        source, target = os.path.join(folder, "float.onnx"), os.path.join(folder, f"{name}.onnx")
        onnx.save(_static(build(name.removesuffix("_int8")), (1, 3, 64, 64)), source)
        onnx.save(_static(build(name), (1, 3, 64, 64)), target)
        return source, target
    source = os.path.join(folder, f"{name}.onnx")
    onnx.save(float_model(name), source)
    target = os.path.join(folder, f"{name}.{fmt}.{activations}.onnx")
    data = load_calibration(source, random=4, seed=0)
    if fmt == "qdq":
        quantize_model(source, target, data,
                       QuantConfig(activations=activations, reduce_range=REDUCE_RANGE))
    else:
        quantize_static(source, target, _Reader(data), quant_format=QuantFormat.QOperator,
                        per_channel=True, weight_type=QuantType.QInt8, reduce_range=REDUCE_RANGE,
                        activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8)
    return source, target


@pytest.mark.parametrize("name, fmt, activations", MODELS)
def test_quantized_model_runs_as_one_integer_program(name, fmt, activations, tmp_path, capsys):
    source, target = quantized(name, fmt, activations, tmp_path)
    model = onnx.load(target)
    sess = InferenceSession(target, providers=NPU)
    placement = sess.placement_summary()
    cpu = [p for p in sess.partition() if p.device != "NPU"]
    assert not cpu, [(p.name, p.reason) for p in cpu]
    assert 1 <= placement.partitions <= 2, sess.partition_summary()
    summary = sess.partition_summary()
    rng = np.random.default_rng(7)
    weights = {i.name for i in model.graph.initializer}  # old IR: initializers listed as inputs
    feeds = {vi.name: rng.standard_normal([d.dim_value or 1 for d in vi.type.tensor_type.shape.dim])
             .astype(np.float32) for vi in model.graph.input if vi.name not in weights}
    got = sess.run(None, feeds)
    want = ort.InferenceSession(target, providers=["CPUExecutionProvider"]).run(None, feeds)
    fp32 = ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feeds)
    scales = output_scales(model)
    for out, g, w, f in zip(model.graph.output, got, want, fp32, strict=True):
        lsb = scales[out.name]
        within = float(np.mean(np.abs(g - w) <= lsb * 1.0001))
        assert within >= WITHIN.get(name, 0.99), (out.name, within)
        assert np.abs(g - w).max() <= 8 * lsb  # rare flips propagate a few steps at most
        c_npu, c_ort = cosine(g, f), cosine(w, f)
        assert c_npu >= c_ort - 1e-4, (c_npu, c_ort)
        with capsys.disabled():
            print(f"\n{name} {fmt} {activations}: {summary.splitlines()[0]}; within 1 LSB of "
                  f"onnxruntime: {within:.4%}; cosine to fp32: NPU {c_npu:.6f}, "
                  f"onnxruntime {c_ort:.6f}")


def test_dynamic_quantized_transformer_runs_on_the_npu(tmp_path, capsys):
    """onnxruntime's quantize_dynamic on the zoo's transformer encoder (DynamicQuantizeLinear
    -> MatMulInteger -> Cast -> Mul by the scales): one partition, the integer products
    exact, so the output is onnxruntime's up to the float ops' rounding."""
    from onnxruntime.quantization import quantize_dynamic

    source, target = tmp_path / "encoder.onnx", tmp_path / "encoder.dynamic.onnx"
    onnx.save(build("transformer_encoder", batch=1), source)
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8,
                     reduce_range=REDUCE_RANGE)
    ops = {n.op_type for n in onnx.load(target).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    sess = InferenceSession(str(target), providers=NPU)
    placement = sess.placement_summary()
    assert placement.partitions == 1 and not [p for p in sess.partition() if p.device != "NPU"]
    feeds = {"tokens": np.random.default_rng(3).standard_normal((1, 16, 64)).astype(np.float32)}
    got = sess.run(None, feeds)[0]
    want = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    fp32 = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    c_npu, c_ort = cosine(got, fp32), cosine(want, fp32)
    assert c_npu >= c_ort - 1e-6
    with capsys.disabled():
        print(f"\ndynamic transformer_encoder: {sess.partition_summary().splitlines()[0]}; max "
              f"difference {float(np.abs(got - want).max()):.2e}; cosine to fp32: NPU {c_npu:.6f}, "
              f"onnxruntime {c_ort:.6f}")


def test_mindspore_full_quant_file_runs_as_integer_ops_on_the_npu():
    """A .ms MindSpore Lite 2.0's converter quantized (FULL_QUANT, models/mslite/
    resnet_block_fq.ms): its int8 convs and dense layer come back as QDQ units through the
    ONNX export, fold into integer ops again, and the whole graph is one NPU partition."""
    from pathlib import Path

    from converters.lite import reader
    from converters.onnx_export import export_onnx
    from converters.onnx_import import import_onnx

    path = Path(__file__).resolve().parents[1] / "models" / "mslite" / "resnet_block_fq.ms"
    lite = reader.load(path)
    assert sum(n.quant_type == "QUANT_ALL" for n in lite.nodes) >= 11
    again, _ = import_onnx(export_onnx(lite))
    quantized = [n.op for n in again.nodes if n.quant_type == "QUANT_ALL"]
    assert quantized.count("Conv2DFusion") == 10 and "FullConnection" in quantized
    sess = InferenceSession(str(path), providers=NPU)
    assert sess.placement_summary().partitions == 1
    assert not [p for p in sess.partition() if p.device != "NPU"]


def test_int8_weights_take_a_quarter_of_the_device_memory(tmp_path):
    """The Program stores int8 weights (int32 biases): memory_info() of the int8 session
    shows about a quarter of the fp32 session's weight bytes."""
    source, target = quantized("resnet_block", "qdq", "int8", tmp_path)
    feeds = {"image": np.random.default_rng(0).standard_normal((1, 3, 56, 56)).astype(np.float32)}
    weights = {}
    for label, path in (("int8", target), ("fp32", source)):
        sess = InferenceSession(path, providers=NPU)
        sess.run(None, feeds)
        weights[label] = sess.memory_info().weights
    assert 0 < weights["int8"] * 3.5 < weights["fp32"], weights
