"""Our errors across onnxruntime and back: status text out of a callback, typed error in Python.

A callback that fails returns an ORT_EP_FAIL status whose message is `status_text(where,
error)`: "NPUExecutionProvider <callback>: <ExceptionType>: <message>". onnxruntime wraps it
in its own exception (EPFail, Fail, RuntimeError "Error in execution: ..."), which is all a
Python caller would see. `typed_errors()` turns such an exception back into the litenpu
exception the callback raised (same class, same message; DeviceMemoryError with its byte
counts), chained to onnxruntime's. Only data crosses: no exception object (and no traceback
holding a session) is kept anywhere between the callback and the caller.

While a session is created, onnxruntime's own refusals of the model (invalid protobuf or
graph, failed type inference, an op it has no kernel for, a missing file) become
`InvalidModelError` / `UnsupportedError` / `FileNotFoundError` carrying onnxruntime's reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from provider.errors import DeviceMemoryError, InvalidModelError, LitenpuError, UnsupportedError
from provider.ort import EP_NAME

__all__ = ["status_text", "from_status", "raise_typed", "typed_errors", "model_load_errors"]

_OURS = re.compile(rf"{EP_NAME} [\w.]+: (\w+): (.*)", re.S)
_BYTES = {"requested": re.compile(r"requested (\d+) bytes"),
          "available": re.compile(r"(?:largest free block|available) (\d+)")}
# onnxruntime's exception classes raised while it loads a model, and what they mean to a user
_LOAD_ERRORS: dict[str, type[Exception]] = {
    "InvalidProtobuf": InvalidModelError, "InvalidGraph": InvalidModelError,
    "NoModel": InvalidModelError, "InvalidArgument": InvalidModelError,
    "Fail": InvalidModelError, "NotImplemented": UnsupportedError,
    "RuntimeException": InvalidModelError,  # a kernel refused its node (1.23: message lost)
    "NoSuchFile": FileNotFoundError}


def status_text(where: str, error: BaseException) -> str:
    """The message of the status a failed callback returns."""
    return f"{EP_NAME} {where}: {type(error).__name__}: {error}"


def _error_classes() -> dict[str, type[LitenpuError]]:
    """Every litenpu exception class by name (subclasses defined next to their use too)."""
    found: dict[str, type[LitenpuError]] = {}
    stack: list[type[LitenpuError]] = [LitenpuError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.__name__, cls)
        stack.extend(cls.__subclasses__())
    return found


def from_status(message: str) -> LitenpuError | None:
    """The litenpu error a status message carries, or None when it is not one of ours."""
    match = _OURS.search(message)
    if match is None:
        return None
    cls = _error_classes().get(match.group(1))
    if cls is None:
        return None
    text = match.group(2).strip()
    if issubclass(cls, DeviceMemoryError):
        counts = {attr: pattern.search(text) for attr, pattern in _BYTES.items()}
        return cls(text, **{a: int(m.group(1)) if m else 0 for a, m in counts.items()})
    try:
        return cls(text)
    except TypeError:  # a class with another constructor: same type, same message
        error = cls.__new__(cls)
        Exception.__init__(error, text)
        return error


def raise_typed(exc: Exception) -> None:
    """Raise the litenpu error onnxruntime's exception `exc` wraps (chained to it); return
    when it wraps none (the caller re-raises `exc`). Hot paths call this in an `except`."""
    if isinstance(exc, LitenpuError):
        return
    typed = from_status(str(exc))
    if typed is not None:
        raise typed from exc


@contextmanager
def typed_errors() -> Iterator[None]:
    """Re-raise onnxruntime's wrapping of one of our callback errors as that error."""
    try:
        yield
    except Exception as exc:
        raise_typed(exc)
        raise


@contextmanager
def model_load_errors(what: str) -> Iterator[None]:
    """Around session creation: our callback errors typed, and onnxruntime's refusal of the
    model itself as InvalidModelError naming `what`."""
    try:
        with typed_errors():
            yield
    except LitenpuError:
        raise
    except UnicodeDecodeError as exc:  # onnxruntime's message quotes the model's bad bytes
        message = exc.object.decode("utf-8", "replace") if isinstance(exc.object, bytes) else exc
        raise InvalidModelError(f"{what}: onnxruntime cannot load it: {message}") from exc
    except Exception as exc:
        cls = _LOAD_ERRORS.get(type(exc).__name__)
        if cls is None or not type(exc).__module__.startswith("onnxruntime"):
            raise
        raise cls(f"{what}: onnxruntime cannot load it: {exc or type(exc).__name__}") from exc
