"""Where the package's compiled C libraries are (built by setup.py as extension modules)."""

from __future__ import annotations

import importlib.machinery
import os


def built_library(directory: str, stem: str) -> str | None:
    """Path of `<directory>/<stem><platform suffix>` as setuptools builds it, or None."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(directory, stem + suffix)
        if os.path.exists(path):
            return path
    return None
