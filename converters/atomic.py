"""All-or-nothing file writes: a reader never sees a half-written model or result file.

The writer fills a path in a new folder next to the destination (the same filesystem, so
the final rename is atomic); only a block that succeeds renames it over the destination.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A path (not yet existing) for the block to write; renamed over `path` when the block
    succeeds, removed with its folder when it raises."""
    path = Path(path)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        tmp = folder / path.name
        yield tmp
        os.replace(tmp, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
