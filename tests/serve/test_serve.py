"""Opt-in (`tox -e serve`, `pytest -m serve`): the NPU EP inside Ray Serve on localhost.

One local Ray (2 CPUs, no dashboard, loopback) for the module: a smaller run of
benchmarks/bench_serve.py (1 and 2 replicas, every answer checked against onnxruntime CPU,
every replica warm from the shared compile cache), and what the deployment answers over
HTTP to GET and to bad requests.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import numpy as np
import onnx
import pytest

from provider.bench.sessions import cache_options
from provider.options import InvalidOptionError
from provider.serve import deployment, ray_serve_missing
from provider.serve.protocol import decode_response, encode_request
from provider.zoo import build

pytestmark = pytest.mark.serve


@pytest.fixture(scope="module", autouse=True)
def ray_serve():
    """Skip (saying what to install) without Ray Serve; imported only when these tests run."""
    missing = ray_serve_missing()
    if missing:
        pytest.skip(missing)


@pytest.fixture(scope="module")
def base(bench_serve):
    with bench_serve.local_serve() as url:
        yield url


def test_small_load_test_at_one_and_two_replicas(base, bench_serve, tmp_path):
    rows = bench_serve.run(base, "mobilenet_v2", requests=40, concurrency=4,
                           replica_counts=[1, 2], rounds=1, workdir=tmp_path)
    assert [(r.provider, r.replicas, r.threads) for r in rows] == [
        ("NPU EP", 1, 2), ("onnxruntime CPU", 1, 2), ("NPU EP", 2, 1), ("onnxruntime CPU", 2, 1)]
    for row in rows:
        assert row.warm is (True if row.provider == "NPU EP" else None)
        assert sum(row.per_replica) == 40 and len(row.per_replica) == row.replicas
        assert row.requests_per_s > 0 and 0 < row.percentile_ms(50) <= row.percentile_ms(99)
        assert max(r.max_abs_diff for r in row.rounds) < 1e-4
    text = bench_serve.report(rows)
    assert "same-run ratio" in text and text.count("\nNPU EP") == 2


def _post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_deployment_answers_get_post_and_bad_requests(base, tmp_path):
    from ray import serve

    from provider.serve.app import build_app

    path = tmp_path / "resnet_block.onnx"
    onnx.save(build("resnet_block", batch=1), path)
    options = cache_options(tmp_path / "cache", "resnet_block")
    serve.run(deployment(path, options, name="resnet"), name="resnet", route_prefix="/resnet")
    try:
        with urllib.request.urlopen(f"{base}/resnet", timeout=30) as answer:
            info = json.loads(answer.read())
        assert info["model"] == "resnet_block.onnx"
        assert info["providers"][0] == "NPUExecutionProvider"
        assert info["cache"]["warm"] is False  # the first session on this cache compiled

        import onnxruntime as ort

        cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        meta = cpu.get_inputs()[0]
        x = np.random.default_rng(5).standard_normal(meta.shape).astype(np.float32)
        want = cpu.run(None, {meta.name: x})[0]
        for form in ("list", "npy"):
            status, answer = _post(f"{base}/resnet", encode_request({meta.name: x}, form))
            assert status == 200 and answer["replica"] == info["replica"]
            outputs, _ = decode_response(json.dumps(answer).encode())
            np.testing.assert_allclose(outputs[cpu.get_outputs()[0].name], want, atol=1e-4)
        status, answer = _post(f"{base}/resnet", b'{"inputs": {"nope": [1]}}')
        assert status == 400 and "unknown input 'nope'" in answer["error"]
    finally:
        serve.delete("resnet")
    # Serve's CLI form, flat string arguments: a new replica on the same cache starts warm
    serve.run(build_app({"model_path": str(path), "num_replicas": "1", "threads": "1",
                         **options}), name="built", route_prefix="/built")
    try:
        with urllib.request.urlopen(f"{base}/built", timeout=30) as answer:
            info = json.loads(answer.read())
        assert info["cache"]["warm"] is True and info["cache"]["path"] == "context-model"
    finally:
        serve.delete("built")


def test_deployment_checks_its_arguments_before_ray_starts_replicas(tmp_path):
    from provider.serve.app import build_app

    with pytest.raises(FileNotFoundError, match="missing.onnx: no such file"):
        deployment(tmp_path / "missing.onnx")
    path = tmp_path / "m.onnx"
    onnx.save(build("resnet_block", batch=1), path)
    with pytest.raises(InvalidOptionError):
        deployment(path, {"no_such_option": "1"})
    with pytest.raises(ValueError, match="threads=0"):
        deployment(path, threads=0)
    with pytest.raises(ValueError, match="expected a model_path argument"):
        build_app({"cache_dir": str(tmp_path)})
