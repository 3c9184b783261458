"""The quantization workflow end to end: `quantize_model` then `accuracy_report`, per model.

For each model (zoo models at batch 1; the light SqueezeNet / ShuffleNet / ResNet-50 with
seeded random weights, compared on their logits) the fp32 model is quantized the NPU way
(QDQ, int8 weights per channel, int8 activations, MinMax, calibrated on seeded random
inputs), and the accuracy report runs other seeded inputs through the fp32 model and
through the quantized model on onnxruntime CPU and on the NPU. Printed per model: the
quantize time, and for the first output the int8-on-NPU cosine, SNR and top-1 agreement
against fp32, onnxruntime CPU's cosine on the same int8 model, and the worst layer's SNR.

    python3 benchmarks/bench_quantize.py [--models resnet_block mobilenet_v2 ...] [--samples 8]
"""

from __future__ import annotations

from blas_env import DROPPED_ENV  # isort: skip  (first: before numpy loads)

import argparse  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402

import onnx  # noqa: E402
from bench_int8 import float_model as light_model  # noqa: E402

import provider  # noqa: E402
from provider.quantize import QuantConfig, accuracy_report, load_calibration, quantize_model  # noqa: E402
from provider.quantize.saturation import NOTE, onnxruntime_saturates  # noqa: E402
from provider.zoo import build  # noqa: E402

DEFAULT = ["resnet_block", "mobilenet_v2", "transformer_encoder", "light_squeezenet",
           "light_shufflenet", "light_resnet50"]


def float_model(name: str) -> onnx.ModelProto:
    if name.startswith("light_"):
        return light_model(name.removeprefix("light_"))
    return build(name, batch=1)


def bench(name: str, samples: int, folder: str) -> None:
    source, target = os.path.join(folder, f"{name}.onnx"), os.path.join(folder, f"{name}.q.onnx")
    onnx.save(float_model(name), source)
    result = quantize_model(source, target, load_calibration(source, random=samples, seed=0),
                            QuantConfig())
    report = accuracy_report(source, target, load_calibration(source, random=samples, seed=1))
    out, worst = report.outputs[0], report.sorted_layers("snr")[0]
    top1 = "n/a" if out.npu.top1 is None else f"{out.npu.top1:.2f}"
    print(f"{name:20s} quantize {result.seconds:5.2f} s ({samples} samples)   NPU int8 vs fp32: "
          f"cosine {out.npu.cosine:.5f}, SNR {out.npu.snr_db:5.1f} dB, top-1 {top1}   "
          f"onnxruntime CPU int8 cosine {out.cpu.cosine:.5f}   worst layer "
          f"{worst.metrics.snr_db:5.1f} dB ({worst.op_type})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT)
    parser.add_argument("--samples", type=int, default=8, help="calibration and evaluation "
                        "samples each (the light models: half, they are 224x224)")
    parser.add_argument("--quick", action="store_true", help="2 samples each")
    args = parser.parse_args()
    provider.register()
    print(f"dropped env: {DROPPED_ENV or 'none'}")
    if onnxruntime_saturates():
        print(f"note: {NOTE}")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            samples = 2 if args.quick else args.samples
            bench(name, max(2, samples // 2) if name.startswith("light_") else samples, folder)


if __name__ == "__main__":
    main()
