"""The on-disk compile cache: compiled NPU Programs keyed by what they depend on.

Use from an execution provider's Compile callback::

    from provider.cache import CacheKey, CompileCache
    from provider.options import NpuOptions

    opts = NpuOptions.parse({"CachePath": "~/.cache/litenpu", "ModelName": "resnet"}).cache
    cache = CompileCache.from_options(opts)          # None when no cache_dir was given
    key = CacheKey.build(partition=lite_partition,    # LiteModel or [(node name, op type)]
                         input_shapes={"image": (1, 3, 56, 56)},
                         options={"enable_fp16": False},
                         model_name=opts.model_name,  # names the entry
                         fingerprint=source_fingerprint("model.onnx"),  # or content=bytes
                         )
    program, outcome = cache.get_or_compile(key, lambda: compile_model(lite, shapes))
    # outcome.status: hit | miss | rebuilt | in-memory; outcome.reason says why

* `CacheKey`: identity = content fingerprint (of the model source, `fingerprint.py`, or of
  the partition), ModelName, partition signature, input shapes, compile options, device;
  validity stamps = Program FORMAT_VERSION and litenpu version. `key.digest` names the
  entry directory. A ModelName names entries; two models never share one.
* `CompileCache(cache_dir, *, max_bytes=None, cache_version="")`: `get(key)`, `put(key,
  program, extra_files=...)` (atomic, race-safe), `put_later` and `flush()` (the background
  writer, `writer.py`), `get_or_compile(key, compile_fn, background=False)`,
  `path(key)` (where extra files live), `discard(key)`, `entries()`, `verify_entry(name)`,
  `clear()`, `evict()`. `cache_version` is MindSpore Lite's CacheVersion: entries written with another
  one are rebuilt in place.
* Bad entries (truncated, changed bytes, deleted files, bad manifest, stale versions) are
  logged on `litenpu.cache` at WARNING with the reason and rebuilt, never used; the hit-path
  checks and their limits are described in `provider.cache.entry`. A cache that cannot be
  written (read-only, full) degrades to an in-memory compile with one warning per directory.
* Provider options (both spellings): cache_dir/CachePath, model_name/ModelName,
  cache_version/CacheVersion, cache_max_bytes, model_fingerprint -> `provider.options`'s
  CacheOptions.
"""

from provider.cache.entry import BadEntry
from provider.cache.fingerprint import source_fingerprint
from provider.cache.keys import CacheKey, PartitionKeys, partition_signature, session_key
from provider.cache.records import (
    CONTEXT,
    OFF,
    CacheOutcome,
    CacheStatus,
    EntryInfo,
    PartitionCacheStats,
)
from provider.cache.store import CompileCache, default_cache_dir

__all__ = [
    "BadEntry",
    "source_fingerprint",
    "CacheKey",
    "PartitionKeys",
    "partition_signature",
    "session_key",
    "CONTEXT",
    "OFF",
    "PartitionCacheStats",
    "default_cache_dir",
    "CacheOutcome",
    "CacheStatus",
    "CompileCache",
    "EntryInfo",
]
