"""Interpreter exit while daemon threads run sessions: the calls in flight finish first, later
ones from other threads wait for the process to end.

onnxruntime's Python binding releases the GIL for a run, and our callbacks release it in
their native calls. If the interpreter is finalizing when such a thread wants the GIL back,
CPython 3.10-3.13 ends the thread with a forced unwind through onnxruntime's C++ frames,
which aborts the process ("terminate called without an active exception"; plain
onnxruntime sessions do the same). At exit, before finalization, `drain` stops new calls
and waits for those in flight (at most EXIT_WAIT_S). A call made inside one in flight (a
callback during a run or a session's creation) goes on, or the exit would wait for it; so does
a callback on a thread Python did not start (onnxruntime's own pool threads serve only calls
already let in); the main thread is never stopped (a user's atexit handler may still run a
session).

The hot path is a list append and pop (a run's cost is counted in microseconds); what the
exit needs to know beyond that is found only at exit, from the thread's frames.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

EXIT_WAIT_S = 30.0  # a call still going after this long is left to its fate

calls: list[None] = []  # one item per gated call in progress (append/pop are atomic)
closing = False  # set by `drain`
_GATED: set = set()  # code objects of the functions that gate their calls
_F = TypeVar("_F", bound=Callable)


def gated(fn: _F) -> _F:
    """Declare that `fn` gates its call into onnxruntime: `enter`/`leave`, or inline (on a
    run's path, without two Python calls): `calls.append(None)`, `hold_if_late()` when
    `closing`, and `calls.pop()` however the call ends."""
    _GATED.add(fn.__code__)
    return fn


# The gate's functions take the module's objects as defaults: a session that lives until the
# interpreter's last teardown (held by a reference cycle or another module's global) is freed
# after this module's globals became None.


def enter(_calls: list = calls) -> None:
    """Before a call into onnxruntime (or a callback from it); pair with `leave`."""
    _calls.append(None)
    if closing:
        hold_if_late()


def leave(_calls: list = calls) -> None:
    """After the call `enter` announced, however it ended."""
    _calls.pop()


def in_flight() -> int:
    """Gated calls in progress now."""
    return len(calls)


def hold_if_late() -> None:
    """A call that starts after `drain`: another Python thread's outermost call waits for the
    end of the process (it never returns); a call inside one in flight goes on, and so does a
    callback on onnxruntime's own threads (a node its parallel executor or thread pool runs
    for a call let in: held, it kept that call, and the exit, waiting for good)."""
    thread = threading.current_thread()
    # a thread Python did not start appears as a _DummyThread (no public name for it)
    if (thread is threading.main_thread() or isinstance(thread, threading._DummyThread)
            or _gated_frames() > 1):
        return
    calls.pop()
    threading.Event().wait()


def _gated_frames() -> int:
    """Gated calls on this thread's stack (the one starting now included)."""
    count, frame = 0, sys._getframe(1)
    while frame is not None:
        count += frame.f_code in _GATED
        frame = frame.f_back
    return count


@gated
def free(owner: object, _enter: Callable = enter, _leave: Callable = leave) -> None:
    """Drop `owner`'s attributes as one gated call (from its `__del__`): they hold onnxruntime
    objects whose C++ destructors call back into the NPU EP (a session releases its partitions,
    EP and allocator; a binding its NPU outputs; the node descriptions `get_inputs` returned
    keep the session alive). Freed outside the gate, a daemon thread between two of those
    callbacks let the exit go on, then unwound through the destructor when it wanted the GIL
    back (an abort)."""
    _enter()
    try:
        vars(owner).clear()
    finally:
        _leave()


def drain() -> None:
    """Stop new calls from other threads; wait for the calls in flight (run at exit)."""
    global closing
    closing = True
    deadline = time.monotonic() + EXIT_WAIT_S
    while calls and time.monotonic() < deadline:
        time.sleep(0.001)


# weakref.finalize's exit hook walks its registry, which a daemon thread's session changes
# (dictionary changed size during iteration): registered first, it runs after `drain`.
weakref.finalize(drain, lambda: None).atexit = False
atexit.register(drain)
os.register_at_fork(after_in_child=calls.clear)  # the parent's other threads are not here
