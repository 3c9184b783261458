"""Opt-in (`pytest -m mslite`, `tox -e mslite`): quantized .ms files we write load and run in
the real MindSpore Lite 2.0 runtime.

A QDQ unit imported (a QUANT_ALL node with per-channel int8 weights, int32 bias and int8
activations), re-laid out NHWC (`converters.nhwc.to_nhwc`, what MindSpore Lite's CPU
kernels take), written as .ms and run there gives onnxruntime's codes within one step:
MindSpore Lite requantizes in fixed point, onnxruntime in float32 (measured: 0.08% of a
per-channel conv's codes differ by one, per-tensor convs, dense layers, concatenation and
same-shape adds are equal). Measured, not asserted: its int8 max pooling with padding, its
broadcasting int8 Add, its int8 pooling of a batch of two and its int8 Sigmoid disagree
with onnxruntime by many steps (MindSpore's own converter keeps Add and pooling float), so
whole models are compared against the dequantized float model elsewhere
(tests/test_npu_quant_models.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from quant_cases import build, lsb, run_ort

from converters.lite import writer
from converters.nhwc import to_nhwc
from converters.onnx_import import import_onnx

pytestmark = pytest.mark.mslite

ROOT = Path(__file__).resolve().parents[1]
MSLITE_PYTHON = ROOT / ".tox" / "mslite-py37" / "bin" / "python"
RUN_MS = ROOT / "tests" / "mslite" / "run_ms.py"
# case -> fraction of codes allowed to differ by one step from onnxruntime's
CASES = {"conv": 0.01, "conv_per_tensor": 0.01, "gemm": 0.01, "concat": 0.0,
         "conv_strided_1x1": 0.01}


def run_mslite(model, feeds: dict, tmp_path: Path) -> np.ndarray:
    if not MSLITE_PYTHON.exists():
        pytest.skip(f"no MindSpore Lite venv at {MSLITE_PYTHON} (run `tox -e mslite` once)")
    lite, _ = import_onnx(model)
    nhwc = to_nhwc(lite)
    assert any(n.quant_type == "QUANT_ALL" for n in nhwc.nodes)
    writer.save(nhwc, tmp_path / "q.ms")
    ins = {}
    for t in nhwc.inputs:
        tensor, value = nhwc.tensors[t], feeds[nhwc.tensors[t].name]
        same = list(tensor.shape) == list(value.shape)
        ins[tensor.name] = value if same else np.ascontiguousarray(value.transpose(0, 2, 3, 1))
    np.savez(tmp_path / "in.npz", **ins)
    proc = subprocess.run([str(MSLITE_PYTHON), str(RUN_MS), "q.ms", "in.npz", "out.npz"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(tmp_path / "out.npz") as z:
        (got,) = z.values()
    return got


@pytest.mark.parametrize("case", sorted(CASES))
def test_mindspore_lite_runs_our_quantized_file(case, tmp_path):
    model, feeds = build(case, np.int8, 0)
    want = run_ort(model, feeds)
    got = run_mslite(model, feeds, tmp_path)
    if got.shape != want.shape and got.ndim == 4:
        got = got.transpose(0, 3, 1, 2)
    assert got.dtype == want.dtype and got.shape == want.shape
    fraction, worst = lsb(got, want)
    assert worst <= 1 and fraction <= CASES[case], (fraction, worst)
