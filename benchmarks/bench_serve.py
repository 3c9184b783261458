"""Ray Serve with the NPU EP on localhost: requests/s and p50/p99 latency per replica count,
every answer checked against onnxruntime CPU, beside the same deployment on onnxruntime CPU.

Starts a local Ray (2 CPUs, no dashboard, loopback only, usage stats off) with Serve's HTTP
proxy on 127.0.0.1, builds a zoo model (batch 1) and warms a compile cache once in this
process. For each replica count it deploys `provider.serve.deployment` twice, at /npu (the
NPU EP, every replica on the shared cache_dir: each must start warm, checked through GET)
and at /cpu (`npu=False`: onnxruntime's CPU provider), each replica capped at cpus //
replicas cores. Then rounds alternate between the two: --requests POSTs with --concurrency
in flight (`provider.serve.load`; answers checked against onnxruntime CPU run here on the
same seeded inputs). Prints the median requests/s over rounds, p50/p99 over all requests,
the answers per replica and the same-run ratio, after the model's own run time in this
process (no HTTP) for scale. Exits 0 with the reason when Ray Serve is not installed
(`pip install litenpu[serve]`).

    python benchmarks/bench_serve.py [--model mobilenet_v2] [--requests 200]
        [--concurrency 4] [--replicas 1 2] [--rounds 3] [--quick]
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing leaves this machine

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

import provider  # noqa: E402
from provider.bench.sessions import NPU, cache_options  # noqa: E402
from provider.bench.timing import interleaved_ms  # noqa: E402
from provider.serve import deployment, ray_serve_missing  # noqa: E402
from provider.serve.load import LoadResult, load_test  # noqa: E402
from provider.serve.protocol import encode_request  # noqa: E402
from provider.zoo import NAMES, build  # noqa: E402

CPUS = 2
INPUTS = 8  # distinct seeded inputs, cycled through the requests


@dataclass(frozen=True)
class Row:
    """One provider at one replica count: its rounds and whether every replica started warm."""

    provider: str
    replicas: int
    threads: int
    rounds: list[LoadResult]
    warm: bool | None  # None: no compile cache (onnxruntime CPU)

    @property
    def requests_per_s(self) -> float:
        return statistics.median(r.requests_per_s for r in self.rounds)

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile([t for r in self.rounds for t in r.latencies_ms], q))

    @property
    def per_replica(self) -> list[int]:
        counts: dict[str, int] = {}
        for r in self.rounds:
            for replica, n in r.per_replica.items():
                counts[replica] = counts.get(replica, 0) + n
        return sorted(counts.values(), reverse=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_serve(cpus: int = CPUS) -> Iterator[str]:
    """A local Ray with Serve's HTTP proxy on a free loopback port; its base URL."""
    import ray
    from ray import serve

    port = free_port()
    ray.init(num_cpus=cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level=logging.WARNING)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    logging_config={"log_level": "WARNING"})
        yield f"http://127.0.0.1:{port}"
    finally:
        ray.shutdown()  # ends Serve's controller, proxy and replicas with it


def replica_infos(url: str, replicas: int, attempts: int = 60) -> list[dict]:
    """GET `url` until `replicas` distinct replicas answered (at most `attempts` GETs)."""
    seen: dict[str, dict] = {}
    for _ in range(attempts):
        with urllib.request.urlopen(url, timeout=30) as answer:
            info = json.loads(answer.read())
        seen[info["replica"]] = info
        if len(seen) == replicas:
            break
    return list(seen.values())


def seeded_requests(path: Path) -> tuple[list[bytes], list[dict[str, np.ndarray]]]:
    """INPUTS request bodies on seeded inputs, and onnxruntime CPU's outputs for each."""
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in cpu.get_outputs()]
    bodies, expected = [], []
    for seed in range(INPUTS):
        rng = np.random.default_rng(seed)
        feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in cpu.get_inputs()}
        bodies.append(encode_request(feeds))
        expected.append(dict(zip(names, cpu.run(None, feeds), strict=True)))
    return bodies, expected


def in_process_ms(model: str, workdir: Path, runs: int = 60) -> tuple[float, float]:
    """(NPU EP, onnxruntime CPU) median ms per run of the model in this process, no HTTP:
    what the model itself costs, timed in alternating blocks."""
    path = workdir / f"{model}.onnx"
    onnx.save(build(model, batch=1), path)
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    npu = provider.InferenceSession(str(path), providers=NPU)
    feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)
             for i in cpu.get_inputs()}
    blocks = interleaved_ms([lambda: npu.run(None, feeds), lambda: cpu.run(None, feeds)], runs)
    npu_ms, cpu_ms = (statistics.median(t for block in mine for t in block) for mine in blocks)
    return npu_ms, cpu_ms


def run(base: str, model: str, requests: int, concurrency: int, replica_counts: list[int],
        rounds: int, workdir: Path, progress=print) -> list[Row]:
    """The measurements (see the module docstring) on the running Serve at `base` (its HTTP
    proxy's URL), files in `workdir`."""
    from ray import serve

    path = workdir / f"{model}.onnx"
    onnx.save(build(model, batch=1), path)
    options = cache_options(workdir / "cache", model)
    bodies, expected = seeded_requests(path)
    warmup = provider.InferenceSession(str(path), providers=NPU, provider_options=[options, {}])
    warmup.run(None, {i.name: np.zeros(i.shape, np.float32) for i in warmup.get_inputs()})
    del warmup  # the cache now holds every NPU partition: replicas start warm
    apps = [("NPU EP", True, "npu"), ("onnxruntime CPU", False, "cpu")]
    rows = []
    for replicas in replica_counts:
        threads = max(1, CPUS // replicas)
        for _, npu, app in apps:
            serve.run(deployment(path, options if npu else {}, npu=npu, threads=threads,
                                 num_replicas=replicas, name=app, ray_actor_options={
                                     "num_cpus": CPUS / replicas / len(apps)}),
                      name=app, route_prefix=f"/{app}")
        infos = replica_infos(f"{base}/npu", replicas)
        warm = len(infos) == replicas and all(i["cache"]["warm"] for i in infos)
        for _, _, app in apps:  # untimed: connections, first runs
            load_test(f"{base}/{app}", bodies, expected,
                      requests=2 * replicas * concurrency, concurrency=concurrency)
        results: dict[str, list[LoadResult]] = {app: [] for _, _, app in apps}
        for turn in range(rounds):
            for label, _, app in apps:
                progress(f"{label}, {replicas} replica(s), round {turn + 1}/{rounds}")
                results[app].append(load_test(f"{base}/{app}", bodies, expected,
                                              requests=requests, concurrency=concurrency))
                time.sleep(0.2)
        rows += [Row(label, replicas, threads, results[app], warm if npu else None)
                 for label, npu, app in apps]
        for _, _, app in apps:
            serve.delete(app)
    return rows


def report(rows: list[Row]) -> str:
    """The table and the same-run ratios."""
    lines = [f"{'provider':16s} {'replicas':>8s} {'threads':>7s} {'requests/s':>10s} "
             f"{'p50 ms':>8s} {'p99 ms':>8s}  {'max abs diff':>12s}  warm  answers per replica"]
    for row in rows:
        warm = {None: "-", True: "yes", False: "NO"}[row.warm]
        diff = max(r.max_abs_diff for r in row.rounds)
        lines.append(f"{row.provider:16s} {row.replicas:8d} {row.threads:7d} "
                     f"{row.requests_per_s:10.1f} {row.percentile_ms(50):8.2f} "
                     f"{row.percentile_ms(99):8.2f}  {diff:12.1e}  {warm:4s}  "
                     f"{' + '.join(map(str, row.per_replica))}")
    by = {(r.provider, r.replicas): r for r in rows}
    ratios = [f"{n} replica(s) {by['NPU EP', n].requests_per_s / by['onnxruntime CPU', n].requests_per_s:.2f}x"
              for n in sorted({r.replicas for r in rows})]
    lines.append("same-run ratio, NPU EP requests/s / onnxruntime CPU requests/s: "
                 + ", ".join(ratios))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v2", choices=NAMES)
    parser.add_argument("--requests", type=int, default=200, help="POSTs per round")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds per provider and replica count")
    parser.add_argument("--quick", action="store_true", help="60 requests, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.rounds = 60, 1
    missing = ray_serve_missing()
    if missing:
        print(f"bench_serve: skipped: {missing}")
        return 0
    import ray

    print(f"Ray {ray.__version__} (local: {CPUS} CPUs, no dashboard, loopback), onnxruntime "
          f"{ort.__version__}; {args.model} batch 1; {args.requests} requests per round, "
          f"{args.concurrency} in flight, {args.rounds} alternating round(s); every answer "
          f"checked against onnxruntime CPU on the same seeded input", flush=True)
    with tempfile.TemporaryDirectory(prefix="litenpu-serve-") as tmp:
        npu_ms, cpu_ms = in_process_ms(args.model, Path(tmp))
    print(f"the model in this process, no HTTP: NPU EP {npu_ms:.2f} ms, onnxruntime CPU "
          f"{cpu_ms:.2f} ms per run (medians, alternating blocks)", flush=True)
    with tempfile.TemporaryDirectory(prefix="litenpu-serve-") as tmp, local_serve() as base:
        rows = run(base, args.model, args.requests, args.concurrency, args.replicas,
                   args.rounds, Path(tmp),
                   progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
