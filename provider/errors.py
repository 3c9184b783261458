"""The litenpu exception hierarchy (see docs/architecture.md, "Errors")."""

from converters.errors import InvalidModelError, LitenpuError, UnsupportedError

__all__ = [
    "LitenpuError",
    "InvalidModelError",
    "UnsupportedError",
    "CacheError",
    "DeviceMemoryError",
    "BindingError",
    "InputValueError",
    "UsageError",
]


class CacheError(LitenpuError):
    """A compile-cache entry is missing, corrupt or cannot be written."""


class DeviceMemoryError(LitenpuError, MemoryError):
    """The NPU memory pool cannot satisfy an allocation."""

    def __init__(self, message: str, requested: int = 0, available: int = 0):
        super().__init__(message)
        self.requested = requested
        self.available = available


class BindingError(LitenpuError, ValueError):
    """An input/output buffer does not match what the model expects (shape, dtype, size)."""


class InputValueError(BindingError):
    """A run-time input holds a value its op cannot take (an index outside its axis);
    onnxruntime refuses such a run too."""


class UsageError(LitenpuError, ValueError):
    """A command-line argument is malformed (the CLI prints it on one line, exit code 1)."""
