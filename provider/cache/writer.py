"""The process's background cache writer: entries are stored while the session already runs.

Storing a compiled Program costs as much as compiling it (ResNet-50: ~170 ms of encoding,
hashing, writing and fsync for 102 MB), and a cold session needs none of it: it runs from
the Program in memory. `submit` queues a write on one thread, in order (so a session entry
is installed after the Program entries it names) and returns a `Pending`. Everything that
reads the cache through `CompileCache` waits for the writes it could see first, so within
the process the cache looks as if the writes were synchronous; other processes see an entry
once it is installed (atomically, as before). The interpreter waits for the queued writes at
exit (the worker is not a daemon), and a session's kernels wait for them when onnxruntime
releases them (so a released session's entries are on disk and its device memory is free);
a process killed before then leaves a temp directory that the next writer removes. A forked
child starts with an empty queue (the parent writes).

While a thread creates a session (`held()`), the writes it queues start only when the
creation is over: on two cores the writer's Python would otherwise take turns with the
compile's for the GIL (measured: a cold light session created 15% slower). Waiting for a
held write (`wait`, `Pending.error`) starts the thread's held writes first, in order.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from provider.errors import CacheError

__all__ = ["Pending", "held", "submit", "wait"]

# .writing: True on the writer thread; .held: the writes this thread holds (inside held())
_state = threading.local()


class Pending:
    """One queued write. `error()` waits for it: None when written, else the CacheError (on
    the writer thread only for a write queued earlier, hence done)."""

    def __init__(self, future: Future):
        self._future = future

    def error(self) -> CacheError | None:
        if getattr(_state, "writing", False) and not self._future.done():
            raise RuntimeError("the cache writer cannot wait for what it writes later")
        _start_held()
        exc = self._future.exception()
        if exc is None or isinstance(exc, CacheError):
            return exc
        return CacheError(f"cache write failed: {type(exc).__name__}: {exc}")


class _Queue:
    def __init__(self) -> None:
        self.lock = threading.RLock()  # a session released by gc inside submit() flushes
        self.pool: ThreadPoolExecutor | None = None
        self.pending: dict[Path, Future] = {}


_queue = _Queue()


def _run(write: Callable[[], None]) -> None:
    _state.writing = True
    try:
        write()
    finally:
        _state.writing = False


def _key(path: Path) -> Path:
    return Path(os.path.abspath(path))


def _run_into(write: Callable[[], None], future: Future) -> None:
    """A held write, run now: its outcome is the Future its Pending was given."""
    try:
        _run(write)
    except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for it
        future.set_exception(exc)
    else:
        future.set_result(None)


def _start(queue: _Queue, call: Callable, *args) -> Future:
    with queue.lock:
        if queue.pool is None:
            queue.pool = ThreadPoolExecutor(1, thread_name_prefix="litenpu-cache-writer")
        return queue.pool.submit(call, *args)


def _start_held(under: Path | None = None) -> None:
    """Queue the writes this thread holds, in the order they were submitted (with `under`:
    only when one of them is `under` or in it)."""
    writes = getattr(_state, "held", None)
    if not writes or (under is not None and not any(_within(e, under) for e, *_ in writes)):
        return
    _state.held = []
    for _, queue, write, future in writes:
        _start(queue, _run_into, write, future)


def _within(entry: Path, under: Path) -> bool:
    return entry == under or entry.parent == under


@contextmanager
def held() -> Iterator[None]:
    """Writes this thread submits inside start when it leaves (see the module docstring)."""
    if getattr(_state, "held", None) is not None:  # nested: the outer one starts them
        yield
        return
    _state.held = []
    try:
        yield
    finally:
        _start_held()
        _state.held = None


def submit(entry: Path, write: Callable[[], None]) -> Pending:
    """Queue `write`, which stores the entry (or file) `entry`, raising CacheError on failure."""
    entry = _key(entry)
    queue = _queue
    with queue.lock:
        holding = getattr(_state, "held", None)
        if holding is not None:
            future: Future = Future()
            future.set_running_or_notify_cancel()
            holding.append((entry, queue, write, future))
        else:
            future = _start(queue, _run, write)
        queue.pending[entry] = future

    def done(f: Future) -> None:
        with queue.lock:
            if queue.pending.get(entry) is f:
                del queue.pending[entry]

    future.add_done_callback(done)
    return Pending(future)


def wait(under: Path) -> None:
    """Until the queued writes of `under` (an entry or file, or everything queued directly in
    that directory) are done (their errors were logged by the writes); at once on the writer
    thread itself."""
    if getattr(_state, "writing", False):
        return
    under = _key(under)
    _start_held(under)
    with _queue.lock:
        futures = [f for p, f in _queue.pending.items() if _within(p, under)]
    for future in futures:
        future.exception()


def _forget_after_fork() -> None:
    global _queue
    _queue = _Queue()
    _state.held = None


os.register_at_fork(after_in_child=_forget_after_fork)
