"""int8 on the NPU: quantized models as integer Programs, against fp32 and onnxruntime.

For each model (the light ResNet-50 / SqueezeNet / MobileNetV2 with seeded random weights,
and zoo models): the fp32 model is quantized the NPU way (`provider.quantize`, QDQ, int8
weights per channel, int8 activations, calibrated on seeded random inputs), then four
contenders run the same seeded input, interleaved in blocks (`provider.bench.timing`):

    NPU int8   the QDQ model in an InferenceSession with the NPU EP (QDQ units folded into
               integer ops)
    NPU fp32   the fp32 model, likewise
    ORT QDQ    onnxruntime CPU on the QDQ model (its QLinear kernels)
    ORT fp32   onnxruntime CPU on the fp32 model

Printed per model: median and 10th-90th percentile of each, the same-run ratios (median
over turns of each turn's ratio of block medians: NPU int8 vs NPU fp32, NPU int8 vs ORT
QDQ; > 1 means NPU int8 is faster), the device weight bytes int8 vs fp32 (memory_info), the
placement through the EP (partitions, NPU nodes / total), and the accuracy: fraction of NPU int8
outputs within 1 LSB (of the output's last quantization scale) of ORT QDQ's, and the cosine
similarity of NPU int8 and of ORT QDQ to the fp32 model's outputs.

    python3 benchmarks/bench_int8.py [--runs 40] [--threads 2]
        [--models resnet50 squeezenet mobilenet resnet_block yolo_detector]
"""

from __future__ import annotations

from blas_env import DROPPED_ENV  # isort: skip  (first: before numpy loads)

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from bench_npu_vs_ort import LIGHT, as_constants, flat, spread  # noqa: E402
from npu_oracle import randomized  # noqa: E402
from quant_cases import cosine, output_scales  # noqa: E402
from test_npu_quant_models import without_final_softmax  # noqa: E402

import provider  # noqa: E402
from provider.bench.timing import interleaved_ms, paired_ratio  # noqa: E402
from provider.npu import native  # noqa: E402
from provider.quantize import QuantConfig, load_calibration, quantize_model  # noqa: E402
from provider.quantize.saturation import NOTE as saturation_note  # noqa: E402
from provider.quantize.saturation import onnxruntime_saturates  # noqa: E402
from provider.session import InferenceSession  # noqa: E402
from provider.zoo import build  # noqa: E402

DEFAULT = ["resnet50", "squeezenet", "mobilenet", "resnet_block", "yolo_detector"]


def float_model(name: str) -> onnx.ModelProto:
    """The fp32 model: a light model with random weights (its final Softmax dropped: the
    logits are compared, and an opset-8 Softmax has no Lite primitive), models/<name>_v2.onnx
    or a zoo one at batch 1 (a symbolic image size fixed to 256x256)."""
    light = os.path.join(LIGHT, f"light_{name}.onnx")
    if os.path.exists(light):
        return without_final_softmax(as_constants(randomized(onnx.load(light))))
    if name == "mobilenet":
        return onnx.load(os.path.join(ROOT, "models", "mobilenet_v2.onnx"))
    model = build(name, batch=1)
    for dim, size in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], (256, 256), strict=False):
        if not dim.dim_value:  # a detector's symbolic image size: fixed (its shape ops fold)
            dim.ClearField("dim_param")
            dim.dim_value = size
    return model


def bench(name: str, runs: int, threads: int, folder: str) -> None:
    fp32 = float_model(name)
    fp32_path = os.path.join(folder, f"{name}.onnx")
    onnx.save(fp32, fp32_path)
    qdq_path = os.path.join(folder, f"{name}_int8.onnx")
    quantize_model(fp32_path, qdq_path, load_calibration(fp32_path, random=8), QuantConfig())
    qdq = onnx.load(qdq_path)
    vi = fp32.graph.input[0]
    shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    npu_q = InferenceSession(qdq_path, providers=["NPUExecutionProvider", "CPUExecutionProvider"])
    npu_f = InferenceSession(fp32_path, providers=["NPUExecutionProvider", "CPUExecutionProvider"])
    ort_q = ort.InferenceSession(qdq.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    ort_f = ort.InferenceSession(fp32.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {vi.name: x}
    got_q, got_f = npu_q.run(None, feeds), npu_f.run(None, feeds)
    blocks = interleaved_ms([lambda: npu_q.run(None, feeds), lambda: npu_f.run(None, feeds),
                             lambda: ort_q.run(None, feeds), lambda: ort_f.run(None, feeds)], runs)
    want_q = ort_q.run(None, {vi.name: x})
    want_f = ort_f.run(None, {vi.name: x})
    scales = output_scales(qdq)
    names = [o.name for o in qdq.graph.output]
    within = [float(np.mean(np.abs(g - w) <= scales.get(n, 0.0) * 1.0001))
              for g, w, n in zip(got_q, want_q, names, strict=True)]
    cos_npu = min(cosine(g, f) for g, f in zip(got_q, want_f, strict=True))
    cos_ort = min(cosine(w, f) for w, f in zip(want_q, want_f, strict=True))
    cos_npu_fp32 = min(cosine(g, f) for g, f in zip(got_f, want_f, strict=True))
    labels = ["NPU int8", "NPU fp32", "ORT QDQ ", "ORT fp32"]
    print(f"\n== {name}: {len(qdq.graph.node)} QDQ nodes; NPU int8: "
          f"{npu_q.partition_summary().splitlines()[0]}")
    print(f"   NPU fp32: {npu_f.partition_summary().splitlines()[0]}")
    for label, b in zip(labels, blocks, strict=True):
        print(f"   {label} {spread(flat(b))}")
    print(f"   NPU int8 vs NPU fp32: {paired_ratio(blocks[1], blocks[0]):.2f}x   "
          f"NPU int8 vs ORT QDQ: {paired_ratio(blocks[2], blocks[0]):.2f}x   "
          f"NPU fp32 vs ORT fp32: {paired_ratio(blocks[3], blocks[1]):.2f}x")
    wq, wf = npu_q.memory_info().weights, npu_f.memory_info().weights
    print(f"   weight bytes: int8 {wq:,} vs fp32 {wf:,} ({wf / max(wq, 1):.2f}x smaller)")
    print(f"   accuracy: NPU int8 within 1 LSB of ORT QDQ on {min(within):.4%} of outputs; cosine to "
          f"fp32: NPU int8 {cos_npu:.6f}, ORT QDQ {cos_ort:.6f} (NPU fp32 {cos_npu_fp32:.6f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=DEFAULT)
    args = parser.parse_args()
    native.set_threads(args.threads)
    provider.register()
    print(f"int8 GEMM path: {native.set_int8_path()}; cores: {args.threads}; dropped env: "
          f"{DROPPED_ENV or 'none'}; load average {os.getloadavg()[0]:.2f}")
    if onnxruntime_saturates():  # 'ORT QDQ' then times, and compares with, clipped sums
        print(f"note: {saturation_note}")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            bench(name, args.runs, args.threads, folder)


if __name__ == "__main__":
    main()
