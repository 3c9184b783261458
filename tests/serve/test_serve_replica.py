"""`provider.serve` without Ray (the default run): the JSON protocol, a replica's answers
against onnxruntime CPU, its warm start from the compile cache, the bounded load test over
HTTP on 127.0.0.1 (a plain stdlib server holds the replica), and the printed reason when
Ray Serve is absent."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import provider
import provider.serve
from provider.bench.sessions import NPU, cache_options
from provider.serve.load import LoadTestError, load_test
from provider.serve.protocol import decode_request, decode_response, encode_request
from provider.serve.replica import Replica
from provider.zoo import build

INSTALL = "Ray Serve is not installed (pip install litenpu[serve])"


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    """mobilenet_v2 (batch 1) on disk, a compile cache warmed once, seeded requests and
    onnxruntime CPU's outputs for them."""
    folder = tmp_path_factory.mktemp("serve")
    path = folder / "mobilenet_v2.onnx"
    onnx.save(build("mobilenet_v2", batch=1), path)
    options = cache_options(folder / "cache", "mobilenet_v2")
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = cpu.get_inputs()[0]
    feeds = [{meta.name: np.random.default_rng(seed).standard_normal(meta.shape)
              .astype(np.float32)} for seed in range(3)]
    expected = [{cpu.get_outputs()[0].name: cpu.run(None, f)[0]} for f in feeds]
    provider.InferenceSession(str(path), providers=NPU, provider_options=[options, {}]).run(
        None, feeds[0])
    return path, options, feeds, expected


def test_both_forms_round_trip_exactly():
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for form in ("list", "npy"):
        feeds, answer_form = decode_request(encode_request({"x": x}, form), {"x": np.dtype("f4")})
        assert answer_form == form and feeds["x"].dtype == np.float32
        assert np.array_equal(feeds["x"], x)


def test_replica_answers_like_onnxruntime_cpu_and_starts_warm(mobilenet):
    path, options, feeds, expected = mobilenet
    replica = Replica(str(path), options, threads=1, replica_id="r0")
    info = replica.info()
    assert info["replica"] == "r0" and info["providers"][0] == "NPUExecutionProvider"
    assert info["cache"]["warm"] and info["cache"]["path"] == "context-model"
    for form in ("npy", "list"):
        status, body = replica.infer(encode_request(feeds[1], form))
        assert status == 200
        outputs, replica_id = decode_response(body)
        assert replica_id == "r0" and set(outputs) == set(expected[1])
        for name, want in expected[1].items():
            np.testing.assert_allclose(outputs[name], want, atol=1e-4)
            assert isinstance(json.loads(body)["outputs"][name], dict if form == "npy" else list)
    cold = Replica(str(path), {}, threads=1)
    assert cold.info()["cache"]["warm"] is False  # no cache: it compiled
    baseline = Replica(str(path), npu=False)
    assert baseline.info()["providers"] == ["CPUExecutionProvider"] and "cache" not in baseline.info()
    status, body = baseline.infer(encode_request(feeds[2]))
    assert status == 200
    np.testing.assert_array_equal(decode_response(body)[0]["logits"], expected[2]["logits"])


@pytest.mark.parametrize("body, message", [
    (b"{not json", "the request body is not JSON"),
    (b'{"feeds": {}}', "got an object with keys ['feeds']"),
    (b"[1, 2]", "got list"),
    (b'{"inputs": {"img": [1]}}', "unknown input 'img'; the model's inputs are ['image']"),
    (b'{"inputs": {"image": [[1, 2], [3]]}}', "input 'image': expected a nested list of float32"),
    (b'{"inputs": {"image": {"npy": "@@"}}}', "input 'image': expected a nested list"),
    (b'{"inputs": {"image": [1, 2]}}', "input 'image': expected shape [1, 3, 64, 64], got [2]"),
    (b'{"inputs": {}}', "missing input(s) ['image']"),
    (b'{"inputs": {"image": [1]}, "format": "csv"}', "format 'csv': expected one of"),
])
def test_bad_requests_answer_400_naming_the_problem(mobilenet, body, message):
    path, options, _, _ = mobilenet
    status, answer = Replica(str(path), options).infer(body)
    assert status == 400 and message in json.loads(answer)["error"]


def test_an_npy_input_of_another_dtype_is_refused(mobilenet):
    path, options, feeds, _ = mobilenet
    body = encode_request({"image": feeds[0]["image"].astype(np.float64)}, "npy")
    status, answer = Replica(str(path), options).infer(body)
    assert status == 400
    assert "input 'image': expected dtype float32, got float64" in json.loads(answer)["error"]


class _Server:
    """A Replica behind a stdlib HTTP server on 127.0.0.1 (what the Serve proxy does)."""

    def __init__(self, replica: Replica) -> None:
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    status, answer = replica.infer(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_load_test_counts_checks_and_times_every_request(mobilenet):
    path, options, feeds, expected = mobilenet
    server = _Server(Replica(str(path), options, threads=1, replica_id="only"))
    try:
        bodies = [encode_request(f) for f in feeds]
        result = load_test(server.url, bodies, expected, requests=13, concurrency=3)
        assert result.requests == 13 and result.per_replica == {"only": 13}
        assert result.concurrency == 3 and 0 < result.p50_ms <= result.p99_ms
        assert result.requests_per_s > 0 and result.max_abs_diff < 1e-4
        wrong = [expected[1], expected[0], expected[2]]  # answers checked per request
        with pytest.raises(LoadTestError, match="request 0: output 'logits' differs"):
            load_test(server.url, bodies, wrong, requests=3, concurrency=1)
        with pytest.raises(LoadTestError, match="request 0: HTTP 400: .*unknown input 'x'"):
            load_test(server.url, [b'{"inputs": {"x": [1]}}'], expected[:1], requests=2,
                      concurrency=2)
    finally:
        server.close()
    with pytest.raises(LoadTestError, match="ConnectionRefusedError"):
        load_test(server.url, bodies, expected, requests=1, concurrency=1)
    with pytest.raises(ValueError, match="requests=0"):
        load_test(server.url, bodies, expected, requests=0, concurrency=1)


def test_without_ray_serve_says_what_to_install(monkeypatch, capsys, mobilenet, bench_serve):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray...` fails as if absent
    assert provider.serve.ray_serve_missing().startswith(INSTALL)
    with pytest.raises(ImportError, match=r"Ray Serve is not installed \(pip install"):
        provider.serve.deployment(mobilenet[0])
    assert bench_serve.main(["--quick"]) == 0
    assert capsys.readouterr().out.startswith(f"bench_serve: skipped: {INSTALL}")
