"""`litenpu run`: inputs from .npy/.npz or seeded random, outputs to .npz, NPU vs CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from provider.cli import main

MODEL = str(Path(__file__).resolve().parent.parent / "models" / "transformer_encoder.onnx")


def _cpu(feeds: dict) -> np.ndarray:
    session = ort.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def test_random_inputs_on_npu_match_onnxruntime_cpu(tmp_path, capsys):
    out = tmp_path / "npu.npz"
    assert main(["run", MODEL, "--random", "--seed", "3", "--dim", "batch=2", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "67 of 67 nodes on the NPU" in text and "encoded: float32 [2, 16, 64]" in text
    tokens = np.random.default_rng(3).standard_normal((2, 16, 64)).astype(np.float32)
    np.testing.assert_allclose(np.load(out)["encoded"], _cpu({"tokens": tokens}),
                               atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("form", ["npy", "npz"])
def test_inputs_from_files_npu_and_cpu(tmp_path, capsys, form):
    tokens = np.random.default_rng(7).standard_normal((1, 16, 64)).astype(np.float32)
    if form == "npy":
        np.save(tmp_path / "t.npy", tokens)
        source = ["--input", f"tokens={tmp_path / 't.npy'}"]
    else:
        np.savez(tmp_path / "f.npz", tokens=tokens)
        source = ["--inputs", str(tmp_path / "f.npz")]
    for provider in ("npu", "cpu"):
        assert main(["run", MODEL, *source, "--provider", provider,
                     "-o", str(tmp_path / f"{provider}.npz")]) == 0
    capsys.readouterr()
    expected = _cpu({"tokens": tokens})
    np.testing.assert_array_equal(np.load(tmp_path / "cpu.npz")["encoded"], expected)
    np.testing.assert_allclose(np.load(tmp_path / "npu.npz")["encoded"], expected,
                               atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize(("extra", "message"), [
    ([], "no value for input(s) ['tokens']; give --input"),
    (["--input", "image=x.npy"], "unknown input(s) ['image']"),
    (["--input", "tokens"], "--input 'tokens': expected KEY=VALUE"),
    (["--random", "--dim", "batch=0"], "--dim batch='0': expected a size >= 1"),
    (["--random", "--provider", "cpu", "--option", "enable_fp16=1"], "needs --provider npu"),
    (["--inputs", "garbage.npz"], "not a readable .npy/.npz file"),
    (["--input", "tokens=empty.npy"], "empty.npy: not a readable .npy/.npz file"),
    (["--inputs", "x.npy"], "expected an .npz archive of named arrays"),
    (["--input", "tokens=missing.npy"], "No such file or directory"),
    (["--input", "tokens=bad.npy"], "expected shape"),
])
def test_user_errors_are_one_line_exit_1(tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "x.npy", np.zeros(3, np.float32))
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "garbage.npz").write_bytes(b"not a zip")
    np.save(tmp_path / "bad.npy", np.zeros((3, 3), np.float32))
    assert main(["run", MODEL, *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("litenpu run: error: ") and message in err and err.count("\n") == 1
