"""C callbacks written in Python: exception-proof wrappers and deliberate lifetimes.

Every function onnxruntime may call goes through `status_callback` (OrtStatus*-returning:
an exception becomes an ORT_EP_FAIL status carrying the message) or `value_callback` (plain
return: an exception is logged and a safe default returned). Nothing escapes into C, where
ctypes would print it and return NULL, which onnxruntime reads as success. Each call is
counted by `provider.exit_gate`: the interpreter's exit waits for a daemon thread's callback
(its native calls release the GIL) instead of unwinding it through onnxruntime's frames.

ctypes function objects and every buffer whose address is handed to onnxruntime must outlive
every call onnxruntime can make, including the calls of a session that is only freed while the
interpreter exits; `keep` holds them for the life of the process.
"""

from __future__ import annotations

import ctypes as C
import logging
from collections.abc import Callable
from typing import TypeVar

from provider import exit_gate
from provider.errors import LitenpuError
from provider.ort import abi
from provider.ort.status import status_text

log = logging.getLogger("litenpu.ort")

_ORT: abi.Ort | None = None
_T = TypeVar("_T")


def keep(obj: _T) -> _T:
    """Keep `obj`, and everything it refers to, alive for the life of the process: it (or
    an address inside it) was handed to C.

    A reference no Python object holds: at exit the interpreter collects the cycles of the
    torn-down modules and clears their functions; a session freed in that collection (one
    a user's module global holds, e.g. beside a logging handler of theirs) makes onnxruntime
    call back into our thunks, which must not have been cleared first (that crashed the
    process). The garbage collector never frees an object with a reference it cannot see,
    nor anything reachable from it.
    """
    C.pythonapi.Py_IncRef(C.py_object(obj))
    return obj


def set_ort(ort: abi.Ort) -> None:
    """Record the onnxruntime tables negotiated in CreateEpFactories (one runtime per process)."""
    global _ORT
    _ORT = ort


def ort() -> abi.Ort:
    """The negotiated onnxruntime tables; only valid once onnxruntime has loaded the EP."""
    if _ORT is None:
        raise RuntimeError("onnxruntime has not loaded the NPU execution provider library yet")
    return _ORT


def address(cfunc) -> int:
    """Address of a ctypes function object, to store in a function table."""
    return C.cast(cfunc, C.c_void_p).value


def _log_failure(where: str, error: BaseException, logger: logging.Logger = log) -> None:
    """Log a failed callback: our own errors (bad input) in one line, anything else with its
    traceback. Callbacks still run while the interpreter tears module globals down at exit:
    the thunks bind what they call, and swallow a failure to report."""
    if isinstance(error, LitenpuError):
        logger.info("NPUExecutionProvider %s: %s: %s", where, type(error).__name__, error)
    else:
        logger.error("NPUExecutionProvider %s failed: %s: %s", where, type(error).__name__,
                     error, exc_info=error)


def error_status(where: str, error: BaseException) -> int | None:
    """An ORT_EP_FAIL status describing `error` raised in callback `where`."""
    _log_failure(where, error)
    if _ORT is None:
        return None
    return _ORT.status(abi.ORT_EP_FAIL, status_text(where, error))


def status_callback(prototype, where: str) -> Callable[[Callable], object]:
    """Decorator: `fn(*args) -> None` as an OrtStatus*-returning C function (kept alive)."""

    def wrap(fn: Callable) -> object:
        def thunk(*args, _error_status=error_status, _enter=exit_gate.enter,
                  _leave=exit_gate.leave):
            _enter()
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - nothing may escape into C
                try:
                    return _error_status(where, e)
                except BaseException:  # noqa: BLE001 - interpreter teardown: no one to tell
                    return None
            finally:
                _leave()
            return None

        return keep(prototype(exit_gate.gated(thunk)))

    return wrap


def value_callback(prototype, where: str, default=None) -> Callable[[Callable], object]:
    """Decorator: `fn(*args) -> value` as a C function returning `default` on an exception."""

    def wrap(fn: Callable) -> object:
        def thunk(*args, _log_failure=_log_failure, _enter=exit_gate.enter,
                  _leave=exit_gate.leave):
            _enter()
            try:
                return fn(*args)
            except BaseException as e:  # noqa: BLE001 - nothing may escape into C
                try:
                    _log_failure(where, e)
                except BaseException:  # noqa: BLE001 - interpreter teardown: no one to tell
                    pass
                return default
            finally:
                _leave()

        return keep(prototype(exit_gate.gated(thunk)))

    return wrap


class CString:
    """A NUL-terminated buffer at a stable address, for `const char*` returns."""

    def __init__(self, text: str):
        self._buf = C.create_string_buffer(text.encode())
        self.address: int = C.addressof(self._buf)
