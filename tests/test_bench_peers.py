"""`litenpu bench`'s peer column (onnxruntime's OpenVINO EP): how it is found, the printed
reason when it cannot run, the subprocess worker, and the alternating block timing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from provider.bench import peers
from provider.bench.models import measure
from provider.bench.peers import PeerError, VenvPeer, default_venv, find_peer, make_venv
from provider.bench.timing import interleaved_blocks
from provider.cli import main
from provider.zoo import build


@pytest.fixture
def model(tmp_path) -> tuple[Path, dict[str, np.ndarray], np.ndarray]:
    """The transformer zoo model on disk, a seeded feed and onnxruntime CPU's output."""
    path = tmp_path / "transformer_encoder.onnx"
    onnx.save(build("transformer_encoder", batch=1), path)
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = cpu.get_inputs()[0]
    feeds = {meta.name: np.random.default_rng(0).standard_normal(meta.shape).astype(np.float32)}
    return path, feeds, cpu.run(None, feeds)[0]


def test_blocks_alternate_and_add_up_to_runs():
    calls: list[tuple[str, int, int]] = []

    def timer(name):
        def run(settle, size):
            calls.append((name, settle, size))
            return [1.0] * size
        return run

    blocks = interleaved_blocks([timer("a"), timer("b")], runs=12, block=5, settle=2,
                                pause_s=0)
    assert [c[0] for c in calls] == ["a", "b"] * 3
    assert [c[2] for c in calls] == [5, 5, 5, 5, 2, 2] and {c[1] for c in calls} == {2}
    assert [[len(b) for b in mine] for mine in blocks] == [[5, 5, 2], [5, 5, 2]]


def test_bench_without_a_peer_prints_why_and_reports_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnxruntime_ep_openvino", None)  # import fails
    monkeypatch.setenv("LITENPU_PEER_VENV", str(tmp_path / "no-venv"))
    assert main(["bench", "--runs", "1", "--models", "transformer_encoder", "--no-scripts",
                 "-o", str(tmp_path / "out")]) == 0
    reason = ("onnxruntime-ep-openvino is not installed (pip install litenpu[peers]); no "
              f"onnxruntime-openvino venv at {tmp_path / 'no-venv'} (create it with "
              "`litenpu bench --make-peer-venv`, or set LITENPU_PEER_VENV)")
    assert f"bench: OpenVINO EP CPU column skipped: {reason}" in capsys.readouterr().err
    text = (tmp_path / "out" / "README.md").read_text()
    assert f"This run: not measured ({reason})." in text
    row = next(line for line in text.splitlines() if line.startswith("| transformer_encoder |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "n/a" and cells[-1] == "n/a" and float(cells[1]) > 0


def test_no_peers_flag_skips_the_column(tmp_path, capsys):
    assert main(["bench", "--runs", "1", "--models", "transformer_encoder", "--no-scripts",
                 "--no-peers", "-o", str(tmp_path)]) == 0
    assert "OpenVINO EP CPU column skipped: `--no-peers`" in capsys.readouterr().err


def test_plugin_says_why_it_offers_no_device_or_runs(model, tmp_path):
    pytest.importorskip("onnxruntime_ep_openvino", reason="the peers extra is not installed")
    for _ in range(2):  # registration is undone each time: a second search works alike
        peer, reason = peers._plugin()
        if peer is None:
            cpu = next(d.device for d in ort.get_ep_devices()
                       if d.device.type == ort.OrtHardwareDeviceType.CPU)
            assert "registered but offers no OpenVINO CPU device" in reason
            assert (f"id {cpu.vendor_id:#06x}" in reason) == (cpu.vendor_id != peers.INTEL)
            assert not any(d.ep_name == peers.EP for d in ort.get_ep_devices())
            continue
        try:  # an Intel CPU: the plugin runs in this process
            path, feeds, expected = model
            opened = peer.open(path, feeds)
            np.testing.assert_allclose(opened.outputs[0], expected, atol=1e-4)
            assert all(ms > 0 for ms in opened.timer(1, 3))
            del opened  # its session, before the library is unregistered
        finally:
            peer.close()


def test_worker_runs_and_times_a_session_in_a_subprocess(model, tmp_path):
    """The worker protocol, driven with this Python's onnxruntime and its CPU EP."""
    path, feeds, expected = model
    peer = VenvPeer(Path(sys.executable), ep="CPUExecutionProvider")
    try:
        assert "in a subprocess running" in peer.how
        opened = peer.open(path, feeds)
        np.testing.assert_allclose(opened.outputs[0], expected, atol=1e-6)
        (blocks,) = interleaved_blocks([opened.timer], runs=7, block=4, settle=1, pause_s=0)
        assert [len(b) for b in blocks] == [4, 3] and min(map(min, blocks)) > 0
        with pytest.raises(PeerError, match="NoSuchFile|No such file|doesn't exist"):
            peer.open(tmp_path / "missing.onnx", feeds)
        peer.process.kill()
        peer.process.wait()
        with pytest.raises(PeerError, match="worker exited"):
            opened.timer(0, 1)
    finally:
        peer.close()


def test_a_venv_without_the_openvino_ep_is_refused():
    with pytest.raises(PeerError, match="has no OpenVINOExecutionProvider \\(providers: .*CPU"):
        VenvPeer(Path(sys.executable))


def test_failed_venv_creation_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(PeerError, match="creating the OpenVINO EP CPU venv"):
        make_venv(blocker / "venv")
    assert not (blocker / "venv").exists() and blocker.read_text() == "not a folder"


def test_measure_with_the_openvino_peer(model, tmp_path):
    peer, reason = find_peer()
    if peer is None:
        pytest.skip(f"no OpenVINO peer here: {reason} ({default_venv()})")
    try:
        r = measure("transformer_encoder", runs=2, workdir=tmp_path, peer=peer)
    finally:
        peer.close()
    assert r.peer_note == "" and r.peer_run_ms > 0 and r.peer_max_abs_diff < 1e-4
