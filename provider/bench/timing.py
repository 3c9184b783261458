"""Timing helpers shared by the benchmark scripts and `litenpu bench`.

Only the standard library: a peer's worker process (`provider.bench.peer_worker`, run in
another venv without litenpu) loads this file by path to time its runs the same way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

BlockTimer = Callable[[int, int], list[float]]
"""`timer(settle, size)`: `settle` untimed calls, then `size` timed ones; their ms."""


def best_of(fn: Callable[[], object], repeat: int, number: int) -> float:
    """Best mean seconds per call over `repeat` rounds of `number` calls (least disturbed round)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def timed_block(fn: Callable[[], object]) -> BlockTimer:
    """A BlockTimer that calls `fn` in this process, timing each call on its own."""
    def timer(settle: int, size: int) -> list[float]:
        for _ in range(settle):
            fn()
        spent = []
        for _ in range(size):
            start = time.perf_counter()
            fn()
            spent.append((time.perf_counter() - start) * 1e3)
        return spent
    return timer


def interleaved_blocks(timers: list[BlockTimer], runs: int, block: int = 5, settle: int = 2,
                       pause_s: float = 0.1) -> list[list[list[float]]]:
    """Per timer, its blocks of wall times in ms (`runs` in all): the timers take turns in
    blocks of `settle` + `block` runs with a pause after each block, and the first `settle`
    runs of a block are not kept. Both onnxruntime's pool threads and the NPU's cores
    spin-wait for a while after a run (a core stays busy): the pause keeps one side's
    spinning out of the other's runs. On a VM the first runs after a pause also pay for
    waking the vCPUs and refilling the caches, which costs a small model twice its run
    time: the settle runs keep that out of every side's times alike. Short blocks, many
    turns: a neighbour's burst of load lands on every side of some turns, not on one side's
    only block. A timer may run in another process (a peer's worker), timing its own calls."""
    blocks: list[list[list[float]]] = [[] for _ in timers]
    done = 0
    while done < runs:
        size = min(block, runs - done)
        for timer, mine in zip(timers, blocks, strict=True):
            mine.append(timer(settle, size))
            time.sleep(pause_s)
        done += size
    return blocks


def interleaved_ms(fns: list[Callable[[], object]], runs: int, block: int = 5, settle: int = 2,
                   pause_s: float = 0.1) -> list[list[list[float]]]:
    """`interleaved_blocks` of functions called in this process."""
    return interleaved_blocks([timed_block(fn) for fn in fns], runs, block, settle, pause_s)


def paired_ratio(ort_blocks: list[list[float]], npu_blocks: list[list[float]]) -> float:
    """onnxruntime time / NPU time, as the median over turns of each turn's ratio of block
    medians: the two blocks of a turn ran a fraction of a second apart, so the host's
    speed, which drifts by tens of percent over seconds on a shared VM, cancels out."""
    return statistics.median(statistics.median(o) / statistics.median(n)
                             for o, n in zip(ort_blocks, npu_blocks, strict=True))
