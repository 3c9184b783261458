"""A bounded HTTP load test of a `provider.serve` deployment: a fixed number of POSTs with a
fixed number in flight, every answer checked against the expected outputs (onnxruntime CPU
on the same inputs); requests/s, p50/p99 latency and how many each replica answered.

Each of the `concurrency` client threads keeps one HTTP/1.1 connection open. Answers are
kept as received and checked after the timed run, so decoding them takes no CPU from the
replicas while they are measured. Made for loopback targets (`http://127.0.0.1:PORT/`).
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

from provider.errors import LitenpuError
from provider.serve.protocol import decode_response


class LoadTestError(LitenpuError):
    """A request failed, or an answer differs from the expected outputs."""


@dataclass(frozen=True)
class LoadResult:
    """One load test: latencies in ms (request order), seconds of the whole run, answers per
    replica id, and the largest difference from the expected outputs."""

    concurrency: int
    seconds: float
    latencies_ms: list[float]
    per_replica: dict[str, int]
    max_abs_diff: float

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds

    @property
    def p50_ms(self) -> float:
        return float(np.percentile(self.latencies_ms, 50))

    @property
    def p99_ms(self) -> float:
        return float(np.percentile(self.latencies_ms, 99))


def load_test(url: str, bodies: list[bytes], expected: list[dict[str, np.ndarray]], *,
              requests: int, concurrency: int, atol: float = 1e-4,
              timeout_s: float = 60.0) -> LoadResult:
    """POST `requests` requests to `url`, `concurrency` at a time; request i sends
    `bodies[i % len(bodies)]` and must answer `expected[i % len(bodies)]` within `atol`
    (relative to the largest expected value). LoadTestError names the first request that
    failed or differed."""
    if requests < 1 or concurrency < 1 or not bodies or len(bodies) != len(expected):
        raise ValueError(f"load_test: requests={requests}, concurrency={concurrency}, "
                         f"{len(bodies)} bodies, {len(expected)} expected: expected >= 1, "
                         ">= 1 and one expected output per body")
    target = urlsplit(url)
    if target.scheme != "http" or not target.hostname:
        raise ValueError(f"load_test: {url!r} is not an http:// URL")
    local = threading.local()
    connections: list[http.client.HTTPConnection] = []
    answers: list[tuple[int, bytes] | None] = [None] * requests
    latencies = [0.0] * requests

    def send(i: int) -> None:
        connection = getattr(local, "connection", None)
        if connection is None:
            connection = local.connection = http.client.HTTPConnection(
                target.hostname, target.port or 80, timeout=timeout_s)
            connections.append(connection)
        start = time.perf_counter()
        connection.request("POST", target.path or "/", body=bodies[i % len(bodies)],
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answers[i] = (response.status, response.read())
        latencies[i] = (time.perf_counter() - start) * 1e3

    start = time.perf_counter()
    try:
        with ThreadPoolExecutor(concurrency, thread_name_prefix="litenpu-load") as pool:
            list(pool.map(send, range(requests)))
    except (OSError, http.client.HTTPException) as e:
        raise LoadTestError(f"{url}: {type(e).__name__}: {e}") from e
    finally:
        for connection in connections:
            connection.close()
    seconds = time.perf_counter() - start
    per_replica: Counter = Counter()
    worst = 0.0
    for i, (status, body) in enumerate(answers):
        if status != 200:
            raise LoadTestError(f"request {i}: HTTP {status}: {body[:500].decode(errors='replace')}")
        outputs, replica = decode_response(body)
        per_replica[replica] += 1
        want = expected[i % len(bodies)]
        if set(outputs) != set(want):
            raise LoadTestError(f"request {i}: outputs {sorted(outputs)}, expected {sorted(want)}")
        for name, value in want.items():
            got = outputs[name]
            if got.shape != value.shape:
                raise LoadTestError(f"request {i}: output {name!r} has shape {got.shape}, "
                                    f"expected {value.shape}")
            diff = float(np.max(np.abs(got - value))) if value.size else 0.0
            scale = max(1.0, float(np.max(np.abs(value)))) if value.size else 1.0
            if not diff <= atol * scale:  # NaN fails too
                raise LoadTestError(f"request {i}: output {name!r} differs from onnxruntime "
                                    f"CPU by {diff:.3g} (tolerance {atol * scale:.3g})")
            worst = max(worst, diff)
    return LoadResult(concurrency, seconds, latencies, dict(per_replica), worst)
