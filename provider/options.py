"""Provider options of the NPU execution provider: one typed tree, parsed once at the door.

Users write them as onnxruntime users do (`provider_options=[{"min_partition_nodes": "2"}]`,
`add_provider_for_devices(devices, {...})`); `NpuOptions.parse` validates them once into

    NpuOptions
      placement  PlacementOptions  which nodes the NPU claims
      compile    CompileOptions    what the compiler takes; Programs record it, cache keys hash it
      runtime    RuntimeOptions    how runs use the device (cores, per-shape Programs kept)
      memory     MemoryOptions     where weights and arenas live
      cache      CacheOptions      the compile cache

An unknown key, a value of the wrong kind or two options that exclude each other raise
`InvalidOptionError` naming the key and what is accepted. `OPTIONS` is the one table of
keys: parsing, `valid_keys()`, `to_strings()` (the strings onnxruntime carries, only at the
ABI edge) and the user guide's table all come from it. `provider.InferenceSession` hands the
parsed tree to the EP as is; only sessions built by plain onnxruntime code give the EP
strings, which it parses here, once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from provider.errors import LitenpuError

__all__ = ["InvalidOptionError", "PlacementOptions", "CompileOptions", "DEFAULT_COMPILE",
           "PERF_MODES", "RuntimeOptions",
           "MemoryOptions", "CacheOptions", "NpuOptions", "Option", "OPTIONS",
           "MIN_DEVICE_MEMORY"]

MIN_DEVICE_MEMORY = 1 << 20


class InvalidOptionError(LitenpuError, ValueError):
    """A provider option is unknown, given twice, or has a value of the wrong kind."""


@dataclass(frozen=True)
class PlacementOptions:
    """Which nodes the NPU claims."""

    min_partition_nodes: int = 1  # smaller NPU partitions stay on onnxruntime's CPU kernels
    disable_ops: tuple[str, ...] = ()  # ONNX op types never claimed (e.g. ("Conv", "Gemm"))


@dataclass(frozen=True)
class CompileOptions:
    """What a Program depends on besides its graph and input shapes: the compiler's input,
    recorded in the Program and hashed into cache keys."""

    enable_fp16: bool = False  # fp16 storage between ops, fp32 accumulation

    def as_dict(self) -> dict[str, Any]:
        """Plain values by name (what a Program records and a cache key hashes)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_COMPILE = CompileOptions()


PERF_MODES = ("default", "low_power", "high_performance")


@dataclass(frozen=True)
class RuntimeOptions:
    """How runs use the device; nothing here changes what is compiled."""

    npu_threads: int = 0  # NPU cores this session's kernels use (0: all the NPU's cores)
    max_shapes: int = 16  # per partition: Programs kept for distinct input shapes (LRU)
    npu_perf_mode: str = "default"  # one of PERF_MODES; runs may ask for another
    profile_file_prefix: str | None = None  # the EP's own trace file of NPU steps (profiling)
    concurrent_runs: int = 0  # per partition: runs in progress at once (0: the CPUs, <= 8)

    def cores(self, mode: str | None = None) -> int:
        """NPU cores a run in performance `mode` (default: `npu_perf_mode`) may use, 0 for
        all: high_performance all of them, low_power one, default `npu_threads`."""
        mode = self.npu_perf_mode if mode is None else mode
        return {"high_performance": 0, "low_power": 1}.get(mode, self.npu_threads)


@dataclass(frozen=True)
class MemoryOptions:
    """Where a session's weights and arenas live (see provider.npu.session_memory)."""

    mem_alloc_outside: bool = False  # the caller supplies weight and internal memory
    internal_memory_group: str = ""  # sessions of one group share one arena, runs serialized
    share_weights: bool = False  # identical weight tensors stored once per process
    device_memory_bytes: int = 0  # size of the device pool (process-wide; 0: the default)


@dataclass(frozen=True)
class CacheOptions:
    """The compile cache (no cache_dir: compile in memory)."""

    cache_dir: Path | None = None
    model_name: str = ""  # names the model's entries (MindSpore Lite's ModelName)
    cache_version: str = ""  # validity stamp: entries with another one are rebuilt
    max_bytes: int | None = None  # LRU bound of the cache directory (None: unbounded)
    model_fingerprint: str = ""  # the model's content digest (set by InferenceSession)


# ---- value parsers: (key as the user spelled it, raw value) -> typed value -------------------


def _int_at_least(minimum: int) -> Callable[[str, Any], int]:
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


def _choice(values: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        text = raw.strip().lower() if isinstance(raw, str) else raw
        if text not in values:
            raise InvalidOptionError(f"option {key}={raw!r}: expected one of {', '.join(values)}")
        return text
    return parse


def _name(what: str) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        if not isinstance(raw, str):
            raise InvalidOptionError(f"option {key}={raw!r}: expected {what} (a string)")
        return raw.strip()
    return parse


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.I)


def _byte_size(key: str, raw: Any) -> int:
    """Bytes as an int or text with an optional binary unit ("512M", "2GiB"); 0: default."""
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


def _directory(key: str, raw: Any) -> Path:
    if not isinstance(raw, (str, os.PathLike)) or not os.fspath(raw):
        raise InvalidOptionError(f"option {key}={raw!r}: expected a directory path")
    return Path(raw).expanduser()


def _max_bytes(key: str, raw: Any) -> int:
    return _int_at_least(0)(key, raw)


# ---- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One provider option: its key(s), where it lands in the tree, its parser, its meaning."""

    key: str
    group: str  # NpuOptions field
    field: str  # field of that group
    parse: Callable[[str, Any], Any]
    default: str  # as the user guide shows it
    doc: str
    aliases: tuple[str, ...] = ()  # MindSpore Lite's spellings


OPTIONS: tuple[Option, ...] = (
    Option("min_partition_nodes", "placement", "min_partition_nodes", _int_at_least(1), "1",
           "NPU partitions smaller than this stay on onnxruntime's CPU kernels"),
    Option("disable_ops", "placement", "disable_ops", _op_list, "(none)",
           "comma-separated ONNX op types the NPU never takes, e.g. `Conv,Gemm`"),
    Option("enable_fp16", "compile", "enable_fp16", _bool, "false",
           "compile with fp16 storage between ops (fp32 accumulation)"),
    Option("npu_threads", "runtime", "npu_threads", _int_at_least(0), "0 (all the NPU's cores)",
           "at most this many of the NPU's cores run this session's kernels; not part of "
           "cache keys"),
    Option("max_shapes", "runtime", "max_shapes", _int_at_least(1), "16",
           "per NPU partition, Programs kept for distinct input shapes; a new shape beyond it "
           "evicts the least recently used one (its memory returns to the pool; it "
           "recompiles, or maps from the cache, when it comes back)"),
    Option("npu_perf_mode", "runtime", "npu_perf_mode", _choice(PERF_MODES), "default",
           "`default` (runs use `npu_threads` cores), `low_power` (one core) or "
           "`high_performance` (all the NPU's cores); a run can ask for another through its "
           "run options, a session through its dynamic options (see "
           "[performance modes](#performance-modes))"),
    Option("profile_file_prefix", "runtime", "profile_file_prefix", _name("a file path prefix"),
           "(none)", "record every NPU step of every run and write them to the EP's own trace "
           "file `<prefix>_<date>_<time>.json` when the session ends (see "
           "[profiling](#profiling)); for onnxruntime without the EP profiler hook (1.23), "
           "where `provider.InferenceSession` sets it from `enable_profiling`"),
    Option("concurrent_runs", "runtime", "concurrent_runs", _int_at_least(0),
           "0 (the CPUs this process may use, at most 8)",
           "per NPU partition, runs of one session (or its threads) that can be in progress "
           "at once, each in an arena of its own taken when needed; further runs wait for one"),
    Option("mem_alloc_outside", "memory", "mem_alloc_outside", _bool, "false",
           "the caller supplies weight and internal memory (see "
           "[memory controls](#memory-controls))"),
    Option("internal_memory_group", "memory", "internal_memory_group", _name("a group name"),
           "(none)", "sessions naming the same group share one arena; their runs are serialized"),
    Option("share_weights", "memory", "share_weights", _bool, "false",
           "identical weight tensors are stored once per process"),
    Option("device_memory_bytes", "memory", "device_memory_bytes", _byte_size, "0 (1 GiB)",
           "size of the NPU's memory pool, e.g. `512M`, `2G`; one pool per process: the "
           "largest size any session asks for wins"),
    Option("cache_dir", "cache", "cache_dir", _directory, "(none: compile in memory)",
           "directory of the compile cache", ("CachePath",)),
    Option("model_name", "cache", "model_name", _name("a model name"), "(none)",
           "names the model's cache entries and enables warm sessions from the cache; two "
           "models under one name never share entries (the key always holds the content)",
           ("ModelName",)),
    Option("cache_version", "cache", "cache_version", _name("a version"), "(none)",
           "validity stamp: entries written with another version are rebuilt",
           ("CacheVersion",)),
    Option("cache_max_bytes", "cache", "max_bytes", _max_bytes, "(no bound)",
           "least-recently-used entries are evicted above this size"),
    Option("model_fingerprint", "cache", "model_fingerprint", _fingerprint, "(computed)",
           "the model's content digest (sha256 hex) keying its cache entries; "
           "`provider.InferenceSession` computes it from the file (memoised by its stat in the "
           "cache) or bytes; give it only if you know it"),
)
_BY_KEY: dict[str, Option] = {k: o for o in OPTIONS for k in (o.key, *o.aliases)}


@dataclass(frozen=True)
class NpuOptions:
    """Everything the NPU execution provider can be told per session (see module docstring)."""

    placement: PlacementOptions = field(default_factory=PlacementOptions)
    compile: CompileOptions = field(default_factory=CompileOptions)
    runtime: RuntimeOptions = field(default_factory=RuntimeOptions)
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    cache: CacheOptions = field(default_factory=CacheOptions)

    @staticmethod
    def valid_keys() -> list[str]:
        """Every option key accepted, MindSpore Lite's spellings included."""
        return list(_BY_KEY)

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> NpuOptions:
        """Validate `options` (strings or typed values); InvalidOptionError names the bad key."""
        options = dict(options or {})
        unknown = sorted(k for k in options if k not in _BY_KEY)
        if unknown:
            raise InvalidOptionError(
                f"unknown NPUExecutionProvider option(s) {', '.join(map(repr, unknown))}; "
                f"valid options: {', '.join(cls.valid_keys())}")
        groups: dict[str, dict[str, Any]] = {f.name: {} for f in fields(cls)}
        spelled: dict[str, str] = {}
        for key, raw in options.items():
            option = _BY_KEY[key]
            value = option.parse(key, raw)
            values = groups[option.group]
            if option.field in values and values[option.field] != value:
                first = spelled[option.key]
                raise InvalidOptionError(f"options {first}={options[first]!r} and {key}={raw!r} "
                                         "disagree (two spellings of one option)")
            values[option.field], spelled[option.key] = value, key
        memory = groups["memory"]
        if memory.get("mem_alloc_outside") and (memory.get("internal_memory_group")
                                                or memory.get("share_weights")):
            raise InvalidOptionError("option mem_alloc_outside=1 cannot be combined with "
                                     "internal_memory_group or share_weights: the caller's "
                                     "memory is used as given (pass one internal buffer to "
                                     "several sessions to share it)")
        types = {f.name: f.default_factory for f in fields(cls)}  # type: ignore[misc]
        return cls(**{name: replace(types[name](), **values) for name, values in groups.items()})

    def to_strings(self) -> dict[str, str]:
        """The options as onnxruntime carries them: strings, only those off their default."""
        default = NpuOptions()
        out = {}
        for option in OPTIONS:
            value = getattr(getattr(self, option.group), option.field)
            if value != getattr(getattr(default, option.group), option.field):
                out[option.key] = _to_string(value)
        return out


def _to_string(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
