"""Fork-join over the simulated NPU's compute cores (threads), for kernels with big work.

numpy releases the GIL inside BLAS calls, copies and ufunc loops, so a kernel that splits
its output into independent row blocks can run them on several threads at once. Unlike
OpenBLAS's own threads these do not spin while idle, so a busy neighbour on a shared
machine costs a wake-up, not a stalled GEMM. `set_threads(n)` sets the core count (1, the
default, runs everything inline; call it before running, not during); `blocks(rows, cost_us)`
says how to cut a kernel's rows, and `run(fn, parts)` runs fn(part) for every part and
returns when all are done.

Work is dealt out dynamically: a kernel is cut into a few blocks per core and every thread,
the caller's included, takes the next block until none is left. When a neighbour process
holds a core, the starved thread simply takes fewer blocks, instead of the caller waiting
for a fixed half of the work to crawl through on a shared core.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from provider.npu.native import check_threads

__all__ = ["BLOCKS_PER_CORE", "ELEMENTS_PER_US", "MACS_PER_US", "MIN_US", "blocks", "run",
           "set_threads", "threads"]

T = TypeVar("T")

# Rough single-core speeds, to turn a kernel's work into microseconds: fp32 GEMM multiply-adds
# (~200 GFLOPS with AVX-512) and elements moved by a copy or a ufunc pass (ShuffleNet's
# im2col copies measured ~14 per ns; at 2 per ns its small convs were split at a loss).
MACS_PER_US = 100_000
ELEMENTS_PER_US = 10_000
# A block is worth handing to another thread when it holds at least this much work: waking
# a worker costs ~30-40 us on a VM. Up to BLOCKS_PER_CORE blocks per core even out the load.
MIN_US = 100
BLOCKS_PER_CORE = 3

_DONE = object()  # end of a run's parts
_lock = threading.Lock()
_threads = 1
_pool: ThreadPoolExecutor | None = None


def set_threads(n: int) -> None:
    """Use `n` cores (threads) for large kernels from now on; 1 runs everything inline.

    Meant for a single-threaded BLAS (OPENBLAS_NUM_THREADS=1): OpenBLAS's own threads
    spin-wait and, added to these, oversubscribe the cores (GEMMs then run several times
    slower)."""
    global _threads, _pool
    check_threads(n)
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=True)
            _pool = None
        _threads = n
        if n > 1:
            _pool = ThreadPoolExecutor(n - 1, thread_name_prefix="litenpu-npu")


def threads() -> int:
    """The number of cores large kernels are split over."""
    return _threads


def blocks(rows: int, cost_us: float, align: int = 1) -> list[slice]:
    """Cut range(rows) into up to BLOCKS_PER_CORE slices per core (multiples of `align`
    rows, each worth at least MIN_US of the `cost_us` one-core microseconds); one slice when
    the work is too small to share."""
    if _threads == 1:
        return [slice(0, rows)]
    worth = int(cost_us // MIN_US) if MIN_US > 0 else rows
    n = min(_threads * BLOCKS_PER_CORE, worth, rows // align)
    if n <= 1:
        return [slice(0, rows)]
    step = -(-rows // (n * align)) * align
    return [slice(start, min(start + step, rows)) for start in range(0, rows, step)]


def run(fn: Callable[[T], object], parts: Sequence[T]) -> None:
    """fn(part) for every part, each part once, on up to threads() threads (this one
    included) that take the next part until none is left; the first exception is raised
    after every part has finished (no part still writes afterwards).

    Parts must not call run() themselves (a part waiting on the pool it runs on could wait
    forever); runs from several threads (executors) just share the pool's cores.
    """
    pool = _pool
    if len(parts) == 1 or pool is None:
        for part in parts:
            fn(part)
        return
    queue = iter(parts)
    taking = threading.Lock()

    def drain() -> None:
        while True:
            with taking:
                part = next(queue, _DONE)
            if part is _DONE:
                return
            fn(part)

    helpers = [pool.submit(drain) for _ in range(min(_threads, len(parts)) - 1)]
    error: BaseException | None = None
    try:
        drain()
    except BaseException as exc:  # noqa: BLE001 - re-raised once the helpers are done
        error = exc
    for future in helpers:
        exc = future.exception()
        if error is None and exc is not None:
            error = exc
    if error is not None:
        raise error

