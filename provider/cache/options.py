"""Cache provider options: both spellings (ours and MindSpore Lite's) into one CacheOptions.

    cache_dir       / CachePath      directory of the compile cache (no cache when absent)
    model_name      / ModelName      names the model's entries (and its CacheSession entry)
    cache_version   / CacheVersion   validity stamp: entries with another version are rebuilt
    cache_max_bytes                  LRU eviction bound of the cache directory
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provider.errors import CacheError

__all__ = ["CacheOptions", "CacheOptionError", "CACHE_OPTION_KEYS", "normalize_cache_options",
           "default_cache_dir"]

# spelling -> CacheOptions field
CACHE_OPTION_KEYS: dict[str, str] = {
    "cache_dir": "cache_dir",
    "CachePath": "cache_dir",
    "model_name": "model_name",
    "ModelName": "model_name",
    "cache_version": "cache_version",
    "CacheVersion": "cache_version",
    "cache_max_bytes": "max_bytes",
}


class CacheOptionError(CacheError, ValueError):
    """A cache option is unknown, given twice, or has a value of the wrong kind."""


@dataclass(frozen=True)
class CacheOptions:
    """The compile-cache part of the provider options, typed."""

    cache_dir: Path | None = None  # None: compile in memory, no cache
    model_name: str = ""
    cache_version: str = ""
    max_bytes: int | None = None  # None: no eviction


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/litenpu, else ~/.cache/litenpu (the CLI's default)."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "litenpu"


def _max_bytes(spelling: str, raw: Any) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = -1
    if isinstance(raw, bool) or value < 0:
        raise CacheOptionError(f"option {spelling}={raw!r}: expected an integer >= 0 (bytes)")
    return value


def _text(spelling: str, raw: Any) -> str:
    if not isinstance(raw, str):
        raise CacheOptionError(f"option {spelling}={raw!r}: expected a string")
    return raw


def _directory(spelling: str, raw: Any) -> Path:
    if not isinstance(raw, (str, os.PathLike)) or not os.fspath(raw):
        raise CacheOptionError(f"option {spelling}={raw!r}: expected a directory path")
    return Path(raw).expanduser()


_PARSERS = {"cache_dir": _directory, "model_name": _text, "cache_version": _text,
            "max_bytes": _max_bytes}


def normalize_cache_options(options: Mapping[str, Any]) -> CacheOptions:
    """Validate cache options given in either spelling; CacheOptionError names the bad key."""
    unknown = sorted(k for k in options if k not in CACHE_OPTION_KEYS)
    if unknown:
        raise CacheOptionError(f"unknown cache option(s) {', '.join(map(repr, unknown))}; "
                               f"valid options: {', '.join(CACHE_OPTION_KEYS)}")
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for spelling, raw in options.items():
        field = CACHE_OPTION_KEYS[spelling]
        value = _PARSERS[field](spelling, raw)
        if field in values and values[field] != value:
            raise CacheOptionError(f"options {spelled[field]}={options[spelled[field]]!r} and "
                                   f"{spelling}={raw!r} disagree (two spellings of one option)")
        values[field], spelled[field] = value, spelling
    return CacheOptions(**values)
