"""Provider options of the NPU execution provider: one typed, validated dataclass.

Users write them as onnxruntime users do (`provider_options=[{"min_partition_nodes": "2"}]`
or `add_provider_for_devices(devices, {...})`); onnxruntime hands them to the EP as session
config entries `ep.npuexecutionprovider.<key>`. They are parsed once, here, into `NpuOptions`,
and turned back into strings only at the ABI edge. The compile-cache options (`cache_dir`,
`model_name`, `cache_version`, `cache_max_bytes`, or MindSpore Lite's `CachePath`, `ModelName`,
`CacheVersion`) are parsed by `provider.cache.normalize_cache_options` into `NpuOptions.cache`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from provider.cache import CACHE_OPTION_KEYS, CacheOptions, normalize_cache_options
from provider.errors import LitenpuError
from provider.ort import EP_NAME

CONFIG_PREFIX = f"ep.{EP_NAME.lower()}."
MIN_DEVICE_MEMORY = 1 << 20


class InvalidOptionError(LitenpuError, ValueError):
    """A provider option is unknown or has a value of the wrong kind."""


@dataclass(frozen=True)
class NpuOptions:
    """What the NPU execution provider can be told per session."""

    min_partition_nodes: int = 1  # smaller NPU partitions stay on onnxruntime's CPU kernels
    disable_ops: tuple[str, ...] = ()  # ONNX op types never claimed (e.g. ("Conv", "Gemm"))
    enable_fp16: bool = False  # compile NPU programs with fp16 storage between ops
    npu_threads: int = 0  # NPU cores this session's kernels use (0: all the NPU's cores)
    max_shapes: int = 16  # per partition: Programs kept for distinct input shapes (LRU)
    device_memory_bytes: int = 0  # size of the device pool (process-wide; 0: 1 GiB default)
    model_fingerprint: str = ""  # the model's content hash (set by provider.InferenceSession)
    # memory controls (provider/memory_controls.py)
    mem_alloc_outside: bool = False  # the caller supplies weight and internal memory
    internal_memory_group: str = ""  # sessions of one group share one arena, runs serialized
    share_weights: bool = False  # identical weight tensors stored once per process
    cache: CacheOptions = CacheOptions()  # the compile cache (no cache_dir: compile in memory)

    @classmethod
    def valid_keys(cls) -> list[str]:
        """Every option name accepted, both spellings of the cache options included."""
        return [f.name for f in fields(cls) if f.name != "cache"] + list(CACHE_OPTION_KEYS)

    @classmethod
    def parse(cls, options: dict[str, Any] | None) -> NpuOptions:
        """Validate `options` (strings or typed values) into NpuOptions; InvalidOptionError names the bad key."""
        options = dict(options or {})
        unknown = sorted(set(options) - set(cls.valid_keys()))
        if unknown:
            raise InvalidOptionError(
                f"unknown NPUExecutionProvider option(s) {', '.join(map(repr, unknown))}; "
                f"valid options: {', '.join(cls.valid_keys())}")
        values: dict[str, Any] = {}
        for key, raw in options.items():
            if key not in CACHE_OPTION_KEYS:
                values[key] = _PARSERS[key](key, raw)
        if values.get("mem_alloc_outside") and (values.get("internal_memory_group")
                                                or values.get("share_weights")):
            raise InvalidOptionError("option mem_alloc_outside=1 cannot be combined with "
                                     "internal_memory_group or share_weights: the caller's "
                                     "memory is used as given (pass one internal buffer to "
                                     "several sessions to share it)")
        try:
            cache = normalize_cache_options({k: v for k, v in options.items()
                                             if k in CACHE_OPTION_KEYS})
        except ValueError as exc:
            raise InvalidOptionError(str(exc)) from exc
        return cls(**values, cache=cache)

    def to_strings(self) -> dict[str, str]:
        """The options as the strings onnxruntime carries (only those differing from defaults)."""
        default = NpuOptions()
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "cache" and value != getattr(default, f.name):
                out[f.name] = _to_string(value)
        cache = self.cache
        for key, value in (("cache_dir", cache.cache_dir), ("model_name", cache.model_name),
                           ("cache_version", cache.cache_version),
                           ("cache_max_bytes", cache.max_bytes)):
            if value not in (None, ""):
                out[key] = str(value)
        return out


def _to_string(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _int_at_least(minimum: int) -> Callable[[str, Any], int]:
    """Parser of an integer option >= minimum."""
    def parse(key: str, raw: Any) -> int:
        try:
            value = int(raw)
        except (TypeError, ValueError):
            value = minimum - 1
        if isinstance(raw, bool) or value < minimum:
            raise InvalidOptionError(f"option {key}={raw!r}: expected an integer >= {minimum}")
        return value
    return parse


def _op_list(key: str, raw: Any) -> tuple[str, ...]:
    if isinstance(raw, str):
        items = [s.strip() for s in raw.split(",")]
    elif isinstance(raw, (list, tuple, set, frozenset)) and all(isinstance(s, str) for s in raw):
        items = [s.strip() for s in raw]
    else:
        raise InvalidOptionError(f"option {key}={raw!r}: expected op types, comma-separated")
    return tuple(sorted(s for s in items if s))


def _bool(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise InvalidOptionError(f"option {key}={raw!r}: expected true/false (or 1/0)")


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.I)


def _byte_size(key: str, raw: Any) -> int:
    """Bytes as an int or text with an optional binary unit ("512M", "2GiB"); 0 = default."""
    match = _SIZE.match(str(raw)) if not isinstance(raw, bool) else None
    value = int(match.group(1)) * _UNITS[match.group(2).upper()] if match else -1
    if value != 0 and value < MIN_DEVICE_MEMORY:
        raise InvalidOptionError(f"option {key}={raw!r}: expected a size in bytes >= "
                                 f"{MIN_DEVICE_MEMORY} (e.g. 268435456, 256M, 2G), or 0 for "
                                 "the default")
    return value


def _fingerprint(key: str, raw: Any) -> str:
    text = str(raw).strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise InvalidOptionError(f"option {key}={raw!r}: expected a sha256 hex digest "
                                 "(64 hex digits)")
    return text


def _group_name(key: str, raw: Any) -> str:
    if not isinstance(raw, str):
        raise InvalidOptionError(f"option {key}={raw!r}: expected a group name (a string)")
    return raw.strip()


_PARSERS = {"min_partition_nodes": _int_at_least(1), "disable_ops": _op_list, "enable_fp16": _bool,
            "npu_threads": _int_at_least(0), "max_shapes": _int_at_least(1),
            "device_memory_bytes": _byte_size, "model_fingerprint": _fingerprint,
            "mem_alloc_outside": _bool, "internal_memory_group": _group_name,
            "share_weights": _bool}
