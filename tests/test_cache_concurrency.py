"""Four processes compiling one key into one cache at once: all succeed, one valid entry."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest
from test_cache import LITE, SHAPES, Compiler, _truncate, make_key, run

from provider.cache import CacheStatus, CompileCache
from provider.npu.compiler import compile_model

WORKERS = 4


def _worker(cache_dir: str, barrier, results) -> None:
    """Wait for every worker, then get_or_compile with a compile slow enough to overlap."""
    compiler = Compiler()

    def slow_compile():
        time.sleep(0.2)  # every worker looks up before anyone installs
        return compiler()

    try:
        barrier.wait(timeout=60)
        program, outcome = CompileCache(cache_dir).get_or_compile(make_key(), slow_compile)
        results.put((outcome.status.value, outcome.reason, run(program).tobytes()))
    except BaseException as exc:  # report, never hang the parent
        results.put(("error", repr(exc), b""))


@pytest.mark.parametrize("start", ["empty cache", "bad entry"])
def test_four_processes_one_key_one_entry(tmp_path, start):
    cache = CompileCache(tmp_path)
    if start == "bad entry":
        _truncate(cache.put(make_key(), compile_model(LITE, SHAPES)))
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(str(tmp_path), barrier, results))
               for _ in range(WORKERS)]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    assert all(status != "error" for status, _, _ in outcomes), outcomes
    statuses = {status for status, _, _ in outcomes}
    expected = CacheStatus.MISS.value if start == "empty cache" else CacheStatus.REBUILT.value
    assert statuses <= {expected, CacheStatus.HIT.value} and expected in statuses
    reference = run(compile_model(LITE, SHAPES)).tobytes()
    assert all(out == reference for _, _, out in outcomes)
    assert os.listdir(tmp_path) == [make_key().digest]  # no temp or trash left
    cache.verify_entry(make_key())
    program, outcome = cache.get_or_compile(make_key(), Compiler())
    assert outcome.status is CacheStatus.HIT
    assert run(program).tobytes() == reference
