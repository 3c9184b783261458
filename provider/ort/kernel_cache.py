"""The compile cache as the NPU EP uses it: partition keys (no conversion) and per-kernel stats.

A static partition's `CacheKey` is built straight from the OrtGraph contents, before and
instead of importing it: its node names and op types, the provider's `model_name` (MindSpore
Lite's ModelName), else a sha256 over the partition's nodes (ops, attributes, wiring) and the
bytes of its initializers; plus the input shapes and the compile options (`enable_fp16`).
A dynamic partition is imported at Compile anyway (its Programs come per concrete shape at run
time, each shape its own key) and is keyed by its Lite IR: node names and Lite ops, and the
sha256 of its `.ms` image without a model name. That is also what its EPContext node holds,
so a dynamic partition restored from an EPContext model finds the Programs compiled before.
Every Program a kernel gets is recorded as a `PartitionCacheStats` (what
`InferenceSession.cache_stats()` lists).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from converters.lite.ir import LiteModel
from provider.cache import CacheKey, CacheOutcome
from provider.ort.graph import OrtGraphContents

__all__ = ["PartitionCacheStats", "PartitionKeys", "partition_fingerprint"]

# statuses besides CacheStatus values: "context" (built from an EPContext node), "off" (no cache)
CONTEXT, OFF = "context", "off"


@dataclass(frozen=True)
class PartitionCacheStats:
    """Where one NPU partition's Program came from and what that cost."""

    partition: str  # the fused node's name
    input_shapes: dict[str, tuple[int, ...]]
    status: str  # hit | miss | rebuilt | in-memory | context | off
    reason: str  # why a miss was rebuilt / kept in memory ('' when nothing went wrong)
    load_seconds: float  # entry lookup + mapping (hit, context) or mapping the new entry
    compile_seconds: float  # import + compile (0 on a hit or from a context)
    pages_touched: int | None  # weight pages mapped into this process when handed over
    weight_pages: int
    entry: str | None  # the cache entry directory (None: in memory)

    @classmethod
    def of(cls, partition: str, shapes: dict[str, tuple[int, ...]],
           outcome: CacheOutcome) -> PartitionCacheStats:
        """The record of one get_or_compile outcome."""
        return cls(partition, dict(shapes), outcome.status.value, outcome.reason,
                   outcome.load_seconds, outcome.compile_seconds, outcome.pages_touched,
                   outcome.weight_pages, str(outcome.entry) if outcome.entry else None)


def _hash_value(digest: Any, value: Any) -> None:
    """Feed an attribute value into `digest` unambiguously (arrays by dtype, shape, bytes)."""
    if isinstance(value, np.ndarray):
        digest.update(f"array:{value.dtype.str}:{value.shape}:".encode())
        digest.update(np.ascontiguousarray(value).tobytes() if value.dtype != object
                      else repr(value.tolist()).encode())
    elif isinstance(value, (list, tuple)):
        digest.update(f"list:{len(value)}:".encode())
        for item in value:
            _hash_value(digest, item)
    else:
        digest.update(f"{type(value).__name__}:{value!r};".encode())


def partition_fingerprint(contents: OrtGraphContents) -> str:
    """sha256 hex of a partition's content: nodes (ops, attributes, wiring) and initializers."""
    digest = hashlib.sha256()
    for node in contents.nodes:
        view = node.view
        digest.update(repr((view.name, view.domain, view.op_type, view.inputs,
                            view.outputs)).encode())
        for name in sorted(view.attrs):
            digest.update(f"attr:{name}=".encode())
            _hash_value(digest, view.attrs[name])
    for name in sorted(contents.initializers):
        digest.update(f"init:{name}=".encode())
        _hash_value(digest, contents.initializers[name])
    return digest.hexdigest()


@dataclass(frozen=True)
class PartitionKeys:
    """Makes the cache keys of one partition, one per input-shape combination."""

    nodes: tuple[tuple[str, str], ...]  # (node name, op type)
    model_name: str
    fingerprint: str  # partition_fingerprint(...) ('' when model_name is given)
    enable_fp16: bool

    @classmethod
    def of_lite(cls, lite: LiteModel, image: Callable[[], bytes], *, model_name: str,
                enable_fp16: bool) -> PartitionKeys:
        """Keys of a partition held as Lite IR; `image()` gives its `.ms` bytes (hashed only
        without a model name)."""
        return cls(tuple((n.name, n.op) for n in lite.nodes), model_name,
                   "" if model_name else hashlib.sha256(image()).hexdigest(), enable_fp16)

    @classmethod
    def of(cls, contents: OrtGraphContents, *, model_name: str, enable_fp16: bool
           ) -> PartitionKeys:
        """Read what the keys need from the partition (hashed only without a model name)."""
        return cls(tuple((n.view.name, n.view.op_type) for n in contents.nodes), model_name,
                   "" if model_name else partition_fingerprint(contents), enable_fp16)

    def key(self, shapes: dict[str, tuple[int, ...]]) -> CacheKey:
        """The key of this partition compiled for `shapes` (no import, no compile)."""
        return CacheKey.build(partition=self.nodes, input_shapes=shapes,
                              options={"enable_fp16": self.enable_fp16},
                              model_name=self.model_name, content=self.fingerprint.encode())
