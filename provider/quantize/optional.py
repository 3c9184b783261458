"""Optional dependencies of the quantization workflow: import them or say which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from provider.errors import LitenpuError


class MissingExtraError(LitenpuError, ImportError):
    """A feature needs a package from one of litenpu's optional extras."""


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """`module` imported, or MissingExtraError naming `purpose` and the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(f"{purpose} needs the {module.split('.')[0]!r} package: "
                                f"pip install 'litenpu[{extra}]'") from None


def available(module: str) -> bool:
    """Whether `module` can be imported (for features that work less well without it)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
