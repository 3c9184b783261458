"""Fresh interpreters for the tests: a child imports the same built `provider` package as
the test process (installed by tox, or built in place), never the unbuilt source tree that
its working directory may hold."""

from __future__ import annotations

import os
from pathlib import Path

import provider

PACKAGE_ROOT = str(Path(provider.__file__).resolve().parent.parent)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child interpreter: this one's, with the package root first."""
    return {**os.environ, "PYTHONPATH": PACKAGE_ROOT, **extra}
