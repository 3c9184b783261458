"""`litenpu demo`: the report's numbers (in process) and the console command end to end."""

from __future__ import annotations

import re
import subprocess
import sys

from children import child_env

from provider.demo import preprocess_model, run_demo


def test_quick_demo_report(tmp_path):
    steps: list[str] = []
    report = run_demo(tmp_path, quick=True, progress=steps.append)
    assert report.batch == 1 and report.npu_nodes == report.total_nodes == 44
    assert set(report.files) == {"mobilenet_v2.onnx", "mobilenet_v2.ms", "mobilenet_v2.back.onnx"}
    assert all((tmp_path / name).stat().st_size == size for name, size in report.files.items())
    assert all(diff < 1e-4 for diff in report.max_abs_diff.values()), report.max_abs_diff
    image_bytes, logits_bytes = 3 * 64 * 64 * 4, 10 * 4
    assert report.copied == {"plain run": image_bytes + logits_bytes, "bound run": 0, "chained": 0}
    assert min(report.cold_open_s, report.cold_run_s, report.warm_open_s, report.warm_run_s) > 0
    assert report.device_peak >= report.device_in_use > 0
    assert any(s.startswith("chain") and s.endswith("ms") for s in steps)
    assert report.cache == "warm: built from the cached EPContext model; partition programs: context"
    text = report.format()
    assert "44 of 44 nodes on the NPU" in text and "0 bytes copied" in text


def test_preprocess_model_normalises_per_channel():
    import numpy as np
    import onnxruntime as ort

    shape = [2, 3, 4, 4]
    raw = np.random.default_rng(1).random(shape, dtype=np.float32)
    got = ort.InferenceSession(preprocess_model(shape).SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"raw": raw})[0]
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(got, (raw - mean[:, None, None]) / std[:, None, None], rtol=1e-5)


def test_demo_command_end_to_end(tmp_path):
    env = child_env()
    done = subprocess.run([sys.executable, "-m", "provider.cli", "demo", "--quick",
                           "--workdir", str(tmp_path / "w")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("litenpu demo: mobilenet_v2, batch 1")
    diffs = [float(x) for x in re.findall(r"CPU\| = ([0-9.e+-]+)", out)]
    assert len(diffs) == 3 and max(diffs) < 1e-4
    assert out.count(" 0 bytes copied") == 2
    assert "demo: converting .onnx -> .ms -> .onnx:" in done.stderr
    assert (tmp_path / "w" / "mobilenet_v2.ms").is_file()
