"""The compile cache as the NPU EP uses it: partition keys (no conversion) and per-kernel stats.

A static partition's `CacheKey` is built straight from the OrtGraph contents, before and
instead of importing it: its node names and op types, its content (the model's fingerprint
combined with the partition's structure, or, when no fingerprint was given, a sha256 over
the partition's nodes and the bytes of its initializers), the provider's `model_name`
(MindSpore Lite's ModelName: it names entries, it never stands for the content), the input
shapes and the compile options (`enable_fp16`, the onnxruntime version).
A dynamic partition is imported at Compile anyway (its Programs come per concrete shape at run
time, each shape its own key) and is keyed by its Lite IR: node names and Lite ops, and the
sha256 of its `.ms` image (weights included). That image is also what its EPContext node
holds, so a dynamic partition restored from an EPContext model finds the Programs compiled
before.
Every Program a kernel gets is recorded as a `PartitionCacheStats` (what
`InferenceSession.cache_stats()` lists).
"""

from __future__ import annotations

import hashlib
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


def partition_fingerprint(contents: OrtGraphContents, *, weights: bool = True) -> str:
    """sha256 hex of a partition's content: nodes (ops, attributes, wiring) and initializers
    (their bytes, or with `weights=False` only their names, dtypes and shapes)."""
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
        value = contents.initializers[name]
        if weights:
            _hash_value(digest, value)
        else:
            digest.update(f"{value.dtype.str}:{value.shape};".encode())
    return digest.hexdigest()


def _within(source: str, structure: str) -> str:
    """The content digest of a partition cut from a model whose content is `source`."""
    return hashlib.sha256(f"{source}:{structure}".encode()).hexdigest()


@dataclass(frozen=True)
class PartitionKeys:
    """Makes the cache keys of one partition, one per input-shape combination.

    The content part is always there: the model's fingerprint (`model_fingerprint`, set by
    `provider.InferenceSession`) combined with the partition's structure, or, without it,
    a hash of the partition with its weights. `model_name` only names the entries."""

    nodes: tuple[tuple[str, str], ...]  # (node name, op type)
    model_name: str
    fingerprint: str  # content digest of the partition
    options: tuple[tuple[str, Any], ...]  # what else the Program depends on

    @classmethod
    def of_lite(cls, lite: LiteModel, image: bytes, *, model_name: str,
                options: dict[str, Any]) -> PartitionKeys:
        """Keys of a partition held as Lite IR; `image` is its `.ms` bytes (hashed: the same
        bytes whether the partition was just imported or read back from an EPContext node)."""
        return cls(tuple((n.name, n.op) for n in lite.nodes), model_name,
                   hashlib.sha256(image).hexdigest(), tuple(sorted(options.items())))

    @classmethod
    def of(cls, contents: OrtGraphContents, *, model_name: str, model_fingerprint: str,
           options: dict[str, Any]) -> PartitionKeys:
        """Read what the keys need from the partition (its weights hashed only without the
        model's fingerprint)."""
        fingerprint = (_within(model_fingerprint, partition_fingerprint(contents, weights=False))
                       if model_fingerprint else partition_fingerprint(contents))
        return cls(tuple((n.view.name, n.view.op_type) for n in contents.nodes), model_name,
                   fingerprint, tuple(sorted(options.items())))

    def key(self, shapes: dict[str, tuple[int, ...]]) -> CacheKey:
        """The key of this partition compiled for `shapes` (no import, no compile)."""
        return CacheKey.build(partition=self.nodes, input_shapes=shapes,
                              options=dict(self.options), model_name=self.model_name,
                              fingerprint=self.fingerprint)
