"""Quantize -> run on the NPU -> accuracy report, end to end for the zoo models and the light
SqueezeNet, with small calibration sets; the report's per-layer SNRs checked against an
independent computation (onnxruntime's own QDQ debugging helpers and numpy).
"""

from __future__ import annotations

import json
import math
import os
import re
import time

import numpy as np
import onnx
import pytest
from npu_oracle import randomized
from onnxruntime.quantization import qdq_loss_debug
from quant_cases import REDUCE_RANGE

from provider.cli import main
from provider.quantize import (
    CalibrationData,
    QuantConfig,
    accuracy_report,
    load_calibration,
    quantize_model,
    saturation,
)
from provider.quantize.metrics import Accumulator, looks_like_classes, snr_db
from provider.quantize.prepare import prepare
from provider.zoo import build

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["mobilenet_v2", "resnet_block", "transformer_encoder", "light_squeezenet"]
SAMPLES = {"light_squeezenet": 4}  # a 224x224 model: fewer samples keep the run fast


def float_model(name: str) -> onnx.ModelProto:
    if name.startswith("light_"):
        path = os.path.join(LIGHT, f"{name}.onnx")
        if not os.path.exists(path):
            pytest.skip(f"{path} not shipped with this onnx")
        return randomized(onnx.load(path))
    return build(name, batch=1)


@pytest.fixture(scope="module", params=MODELS)
def quantized(request, tmp_path_factory):
    """(name, float path, quantized path, QuantizeResult, evaluation data) per model."""
    name = request.param
    folder = tmp_path_factory.mktemp(name)
    source = folder / f"{name}.onnx"
    onnx.save(float_model(name), source)
    count = SAMPLES.get(name, 8)
    calibration = load_calibration(source, random=count, seed=0)
    result = quantize_model(source, folder / f"{name}.int8.onnx", calibration,
                            QuantConfig(reduce_range=REDUCE_RANGE))
    evaluation = load_calibration(source, random=count, seed=1)  # not the calibration samples
    return name, source, folder / f"{name}.int8.onnx", result, evaluation


@pytest.fixture(scope="module")
def report(quantized):
    _, source, output, _, evaluation = quantized
    return accuracy_report(source, output, evaluation)


def test_quantized_model_runs_on_the_npu_close_to_fp32(quantized, report, capsys):
    name, _, _, result, _ = quantized
    assert result.count("int8") >= 10
    assert report.placement.startswith("NPUExecutionProvider: ")
    npu_nodes = int(re.match(r"NPUExecutionProvider: (\d+) of", report.placement).group(1))
    assert npu_nodes >= 1
    for out in report.outputs:
        assert out.npu.cosine > 0.99, (name, out)
        assert out.cpu.cosine > 0.99, (name, out)
        assert out.npu_vs_cpu.cosine > 0.999, (name, out)  # the NPU runs the same int8 model
        assert out.npu.snr_db > 15.0, (name, out)
        if out.npu.top1 is not None:
            assert out.npu.top1 >= 0.75, (name, out)
    with capsys.disabled():
        top1 = [o.npu.top1 for o in report.outputs]
        print(f"\n{name}: quantized in {result.seconds:.2f} s; int8 NPU vs fp32 cosine "
              f"{min(o.npu.cosine for o in report.outputs):.5f}, top-1 {top1}; "
              f"{report.placement.splitlines()[0]}")


def test_layer_snrs_agree_with_onnxruntimes_qdq_debugger(quantized, report, tmp_path):
    """Independently: onnxruntime's qdq_loss_debug collects every tensor of the float and the
    quantized model (CPU, no graph optimisation) and pairs float with dequantized values."""
    _, source, output, _, evaluation = quantized
    reference = prepare(source, tmp_path)
    float_debug, quant_debug = tmp_path / "float_debug.onnx", tmp_path / "quant_debug.onnx"
    qdq_loss_debug.modify_model_output_intermediate_tensors(str(reference), str(float_debug))
    qdq_loss_debug.modify_model_output_intermediate_tensors(str(output), str(quant_debug))
    matching = qdq_loss_debug.create_activation_matching(
        qdq_loss_debug.collect_activations(str(quant_debug), _Reader(evaluation)),
        qdq_loss_debug.collect_activations(str(float_debug), _Reader(evaluation)))
    assert len(report.layers) >= 10 and not report.unmatched
    for layer in report.layers:
        match = matching[layer.tensor.removesuffix("_QuantizeLinear_Input")]
        want = np.concatenate([np.ravel(x) for x in match["float"]]).astype(np.float64)
        got = np.concatenate([np.ravel(x) for x in match["post_qdq"]]).astype(np.float64)
        expected = 10 * math.log10(np.sum(want ** 2) / np.sum((want - got) ** 2))
        # 0.5 dB: room for NPU integer kernels that round differently from the float
        # simulation of QDQ (today both agree to ~1e-4 dB).
        assert layer.metrics.snr_db == pytest.approx(expected, abs=0.5), layer.tensor
    ordered = report.sorted_layers("snr")
    assert [x.metrics.snr_db for x in ordered] == sorted(x.metrics.snr_db for x in report.layers)


class _Reader:
    """The evaluation samples as onnxruntime's debugging helpers read them (an iterable)."""

    def __init__(self, data: CalibrationData):
        self._samples = iter(list(data))

    def __iter__(self):
        return self._samples


def test_report_text_json_and_plot(quantized, report, tmp_path):
    _, source, output, _, _ = quantized
    text = report.to_text(limit=5)
    assert report.placement.splitlines()[0] in text
    assert "int8 NPU vs fp32" in text and "per layer:" in text
    payload = json.loads(report.to_json())
    assert len(payload["layers"]) == len(report.layers)
    assert payload["outputs"][0]["npu"]["cosine"] == report.outputs[0].npu.cosine
    pytest.importorskip("matplotlib", reason="--plot needs the bench extra")
    from provider.quantize.plot import plot_layer_snr

    path = plot_layer_snr(report, tmp_path / "snr.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["snr.png"]


def test_accuracy_cli_json(tmp_path, capsys):
    source = tmp_path / "resnet_block.onnx"
    onnx.save(build("resnet_block", batch=1), source)
    assert main(["quantize", str(source), "-o", str(tmp_path / "q.onnx"), "--random", "4",
                 "-q"]) == 0
    capsys.readouterr()
    assert main(["accuracy", str(source), str(tmp_path / "q.onnx"), "--random", "3", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["samples"] == 3 and payload["outputs"][0]["name"] == "logits"
    assert payload["outputs"][0]["npu"]["top1"] is not None
    # full-range weights: where onnxruntime's CPU kernels saturate, the report says so
    assert payload["notes"] == ([saturation.NOTE] if saturation.onnxruntime_saturates() else [])
    assert main(["quantize", str(source), "-o", str(tmp_path / "r.onnx"), "--random", "4",
                 "--reduce-range", "-q"]) == 0
    capsys.readouterr()
    assert main(["accuracy", str(source), str(tmp_path / "r.onnx"), "--random", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == []
    assert main(["accuracy", str(source), str(tmp_path / "q.onnx"), "--random", "2",
                 "--sort", "graph", "--layers", "3"]) == 0
    out = capsys.readouterr().out
    assert "graph order, 3 shown" in out and "NPUExecutionProvider:" in out


def test_metrics_against_hand_computed_values():
    ref = np.array([[3.0, 4.0], [0.0, 1.0]], dtype=np.float32)
    got = np.array([[3.0, 3.0], [0.0, 2.0]], dtype=np.float32)
    acc = Accumulator(classes=True)
    acc.add(ref, got)
    m = acc.metrics()
    assert m.snr_db == pytest.approx(10 * math.log10(26 / 2))
    assert m.cosine == pytest.approx(23 / math.sqrt(26 * 22))
    assert m.max_abs == 1.0 and m.top1 == 0.5  # sample 0: argmax 1 vs 0; sample 1 agrees
    assert snr_db(1.0, 0.0) == math.inf
    assert looks_like_classes((1, 1000, 1, 1)) and looks_like_classes((4, 10))
    assert not looks_like_classes((1, 16, 64)) and not looks_like_classes((1, 1))


def test_quantize_is_quick_on_a_zoo_model(tmp_path):
    """Not a benchmark: a sanity bound far above the ~0.3 s it takes, so a regression that
    makes quantization re-run preprocessing per sample (or similar) shows."""
    source = tmp_path / "m.onnx"
    onnx.save(build("resnet_block", batch=1), source)
    start = time.perf_counter()
    quantize_model(source, tmp_path / "q.onnx", load_calibration(source, random=4),
                   QuantConfig(method="entropy"))
    assert time.perf_counter() - start < 60
