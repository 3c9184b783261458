"""Cache keys: what a compiled Program depends on, and the directory name it is stored under.

The one place keys are built: `CacheKey.build` (any Program), `PartitionKeys` (an NPU
partition's Program per input shape) and `session_key` (a CacheSession's stored EPContext
model).

Identity fields (they name the entry: `CacheKey.digest`): the source (a content
fingerprint, always), the model name, the partition signature, the input shapes, the compile
options and the device. Validity stamps
(recorded in the entry's manifest and checked on every hit, but not part of the name): the
Program `FORMAT_VERSION` and the litenpu version. A newer litenpu thus finds the old entry
under the same name, sees it is stale, and replaces it instead of leaving it to eviction.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from converters.lite.ir import LiteModel
from provider import __version__
from provider.errors import CacheError
from provider.npu.program import FORMAT_VERSION

__all__ = ["CacheKey", "partition_signature", "PartitionKeys", "session_key", "within",
           "lite_digest"]

DIGEST_CHARS = 32  # 128 bits of sha256: the entry's directory name

Content = bytes | bytearray | memoryview
Partition = LiteModel | Sequence[tuple[str, str]]


def _sha256(data: Content) -> str:
    return hashlib.sha256(memoryview(data).cast("B")).hexdigest()


def _canonical(doc: Any) -> bytes:
    """JSON with sorted keys and no whitespace: the same document always hashes the same."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def partition_signature(partition: Partition) -> str:
    """A short hash of a partition's node names and op types (and its I/O tensor names)."""
    if isinstance(partition, LiteModel):
        nodes = [[n.name, n.op] for n in partition.nodes]
        io = [[partition.tensors[t].name for t in partition.inputs],
              [partition.tensors[t].name for t in partition.outputs]]
    else:
        nodes = [[str(name), str(op)] for name, op in partition]
        io = []
    return _sha256(_canonical({"nodes": nodes, "io": io}))[:DIGEST_CHARS]


def _shapes(input_shapes: Mapping[str, Sequence[int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Input shapes sorted by name; every dim a concrete int >= 0."""
    out = []
    for name, shape in sorted(input_shapes.items()):
        dims = tuple(shape)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise CacheError(f"cache key: input {name!r} has shape {list(dims)}, expected "
                             "concrete dims (ints >= 0)")
        out.append((str(name), dims))
    return tuple(out)


def _options(options: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Compile options as sorted (name, JSON value) pairs."""
    out = []
    for name, value in sorted(options.items()):
        try:
            out.append((str(name), json.dumps(value, sort_keys=True)))
        except (TypeError, ValueError) as exc:
            raise CacheError(f"cache key: compile option {name}={value!r} is not JSON-able: "
                             f"{exc}") from exc
    return tuple(out)


@dataclass(frozen=True)
class CacheKey:
    """Everything a cached Program depends on; build one with `CacheKey.build`."""

    source: str  # "sha256:<content fingerprint of the model or the partition>"
    model_name: str  # names the entry (MindSpore Lite's ModelName); never replaces `source`
    partition: str  # partition_signature(...)
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...]
    options: tuple[tuple[str, str], ...]  # (name, JSON value), sorted
    device: str = "sim"
    format_version: int = FORMAT_VERSION
    litenpu_version: str = __version__

    @classmethod
    def build(cls, *, partition: Partition, input_shapes: Mapping[str, Sequence[int]],
              options: Mapping[str, Any] | None = None, model_name: str = "",
              fingerprint: str = "", content: Content | Callable[[], Content] | None = None,
              device: str = "sim") -> CacheKey:
        """The key of one partition compiled for `input_shapes` with `options`.

        The source is the content: `fingerprint` (a hex digest of what the partition is made
        from, e.g. `provider.cache.fingerprint.source_fingerprint` of the model), else the
        sha256 of `content` (bytes, or a callable producing them, e.g. the serialized
        partition with its weights). `model_name` only names the entry: two models under
        one name never share entries.
        """
        if fingerprint:
            source = f"sha256:{fingerprint}"
        elif content is not None:
            data = content() if callable(content) else content
            source = f"sha256:{_sha256(data)}"
        else:
            raise CacheError("cache key: give the content fingerprint or the partition "
                             "content to hash")
        return cls(source, model_name, partition_signature(partition), _shapes(input_shapes),
                   _options(options or {}), device)

    def identity(self) -> dict[str, Any]:
        """The fields that name the entry (everything but the validity stamps)."""
        doc = self.to_dict()
        del doc["format_version"], doc["litenpu_version"]
        return doc

    @property
    def digest(self) -> str:
        """The entry's directory name: a hex sha256 prefix of the identity fields."""
        return _sha256(_canonical(self.identity()))[:DIGEST_CHARS]

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> CacheKey:
        """The key `to_dict` wrote (as in a manifest); CacheError when fields are missing."""
        try:
            return cls(str(doc["source"]), str(doc["model_name"]), str(doc["partition"]),
                       tuple((str(n), tuple(int(d) for d in s)) for n, s in doc["input_shapes"]),
                       tuple((str(n), str(v)) for n, v in doc["options"]), str(doc["device"]),
                       int(doc["format_version"]), str(doc["litenpu_version"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CacheError(f"cache key {doc!r}: not a CacheKey document ({exc})") from exc

    def to_dict(self) -> dict[str, Any]:
        """The key as plain JSON-able data (tuples become lists), as stored in the manifest."""
        return json.loads(json.dumps(asdict(self)))


@dataclass(frozen=True)
class PartitionKeys:
    """Makes the cache keys of one NPU partition, one per input-shape combination.

    `fingerprint` is the partition's content digest (the model's fingerprint combined with
    the partition's structure, or a hash of the partition with its weights); `model_name`
    only names the entries; `options` is everything else the Program depends on (the
    compile options, the onnxruntime version)."""

    nodes: tuple[tuple[str, str], ...]  # (node name, op type)
    model_name: str
    fingerprint: str
    options: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, nodes: Sequence[tuple[str, str]], *, model_name: str, fingerprint: str,
           options: Mapping[str, Any]) -> PartitionKeys:
        return cls(tuple((str(n), str(op)) for n, op in nodes), model_name, fingerprint,
                   tuple(sorted(options.items())))

    def key(self, shapes: Mapping[str, Sequence[int]]) -> CacheKey:
        """The key of this partition compiled for `shapes` (no import, no compile)."""
        return CacheKey.build(partition=self.nodes, input_shapes=shapes,
                              options=dict(self.options), model_name=self.model_name,
                              fingerprint=self.fingerprint)


def session_key(source: str, *, fingerprint: str, model_name: str,
                options: Mapping[str, Any]) -> CacheKey:
    """The key of a CacheSession's entry: the model file (by path and content fingerprint)
    and what shapes its partitions and Programs (`options`)."""
    return CacheKey.build(partition=[(source, "CacheSession")], input_shapes={},
                          options=options, model_name=model_name, fingerprint=fingerprint)


def within(source: str, structure: str) -> str:
    """The content digest of a partition cut from a model whose content digest is `source`,
    given a digest of the partition's structure."""
    return hashlib.sha256(f"{source}:{structure}".encode()).hexdigest()


def lite_digest(lite: LiteModel, *, weights: bool = True) -> str:
    """sha256 hex of a Lite (sub)graph's content: nodes (ops, attributes, wiring), tensors
    (names, types, shapes) and the bytes of its constants (with `weights=False`, only their
    dtypes and shapes: when the model's own fingerprint stands for the bytes)."""
    digest = hashlib.sha256()
    for node in lite.nodes:
        digest.update(repr((node.name, node.op, list(node.inputs), list(node.outputs),
                            node.quant_type)).encode())
        for name in sorted(node.attrs):
            digest.update(f"attr:{name}=".encode())
            _hash_value(digest, node.attrs[name])
    for tensor in lite.tensors:
        digest.update(repr((tensor.name, tensor.type_id, tuple(tensor.shape))).encode())
        if tensor.data is not None:
            _hash_value(digest, tensor.data) if weights else digest.update(
                f"const:{tensor.data.dtype.str}:{tensor.data.shape};".encode())
    digest.update(repr((list(lite.inputs), list(lite.outputs))).encode())
    return digest.hexdigest()


def _hash_value(digest: Any, value: Any) -> None:
    """Feed a value into `digest` unambiguously (arrays by dtype, shape, bytes)."""
    if isinstance(value, np.ndarray):
        digest.update(f"array:{value.dtype.str}:{value.shape}:".encode())
        digest.update(np.ascontiguousarray(value).tobytes() if value.dtype != object
                      else repr(value.tolist()).encode())
    elif isinstance(value, (list, tuple)):
        digest.update(f"list:{len(value)}:".encode())
        for item in value:
            _hash_value(digest, item)
    elif isinstance(value, dict):
        digest.update(f"dict:{len(value)}:".encode())
        for key in sorted(value):
            digest.update(f"{key}=".encode())
            _hash_value(digest, value[key])
    else:
        digest.update(f"{type(value).__name__}:{value!r};".encode())
