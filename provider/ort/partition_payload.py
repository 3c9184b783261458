"""A dynamic-shape partition as an EPContext node stores it: a small descriptor, then its Lite IR.

Layout: `MAGIC` (8 bytes), the header's length (uint32, little endian), the header (canonical
JSON: the partition's `PartitionDescriptor` and the image's size and sha256), then the `.ms`
image. A session reads the head only: the descriptor gives the partition's compile cache key
for any input shapes (`PartitionDescriptor.keys`), so a shape whose Program is in the cache is
mapped without reading, let alone parsing, the Lite IR. `StoredPartition.image()` reads the
image (checked against the recorded size and sha256) only to compile a shape no entry holds.
A side file is kept open (one descriptor) for that: replacing or deleting it afterwards does not
change what the session compiles, and a file rewritten in place is refused by the checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from converters.lite import dtypes
from converters.lite.ir import LiteModel
from provider.cache import PartitionKeys
from provider.errors import InvalidModelError

__all__ = ["MAGIC", "TensorInfo", "PartitionDescriptor", "StoredPartition", "pack", "is_payload"]

MAGIC = b"LNPUPART"
VERSION = 1
_LENGTH = struct.Struct("<I")
_HEAD = len(MAGIC) + _LENGTH.size
MAX_HEADER_BYTES = 16 << 20  # a partition of ~100k nodes; anything longer is not ours


@dataclass(frozen=True)
class TensorInfo:
    """One partition input or output: name, numpy dtype name, declared shape (-1 or a name
    for a dim known only at run time)."""

    name: str
    dtype: str
    shape: tuple[int | str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TensorInfo:
        shape = doc["shape"]
        if not isinstance(shape, list) or not all(isinstance(d, (int, str)) for d in shape):
            raise TypeError(f"shape {shape!r}")
        return cls(str(doc["name"]), str(doc["dtype"]), tuple(shape))


@dataclass(frozen=True)
class PartitionDescriptor:
    """What names a partition's Programs: its content digest and nodes (the cache key's
    identity besides shapes and options), and its inputs and outputs."""

    fingerprint: str  # content digest (provider.cache.keys: within / lite_digest)
    nodes: tuple[tuple[str, str], ...]  # (node name, op type)
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]

    @classmethod
    def of(cls, lite: LiteModel, fingerprint: str) -> PartitionDescriptor:
        """The descriptor of a partition's Lite IR whose content digest is `fingerprint`."""
        def infos(indices: Sequence[int]) -> tuple[TensorInfo, ...]:
            return tuple(TensorInfo(lite.tensors[i].name, _dtype_name(lite.tensors[i].type_id),
                                    tuple(lite.tensors[i].shape)) for i in indices)

        return cls(fingerprint, tuple((n.name, n.op) for n in lite.nodes), infos(lite.inputs),
                   infos(lite.outputs))

    def keys(self, *, model_name: str, options: Mapping[str, Any]) -> PartitionKeys:
        """The partition's cache keys (one per input shapes) for these entry names and options."""
        return PartitionKeys.of(self.nodes, model_name=model_name, fingerprint=self.fingerprint,
                                options=options)

    def check_io(self, inputs: Sequence[str], outputs: Sequence[str], where: str) -> None:
        """InvalidModelError unless the node's inputs and outputs are the described ones (in
        any order: Programs bind them by name)."""
        described = ([t.name for t in self.inputs], [t.name for t in self.outputs])
        if (sorted(described[0]), sorted(described[1])) != (sorted(inputs), sorted(outputs)):
            raise InvalidModelError(
                f"EPContext node {where}: its partition has inputs {described[0]} and outputs "
                f"{described[1]}, the node {list(inputs)} and {list(outputs)}")

    def to_json(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "nodes": [list(n) for n in self.nodes],
                "inputs": [t.to_json() for t in self.inputs],
                "outputs": [t.to_json() for t in self.outputs]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PartitionDescriptor:
        return cls(str(doc["fingerprint"]), tuple((str(n), str(op)) for n, op in doc["nodes"]),
                   tuple(TensorInfo.from_json(t) for t in doc["inputs"]),
                   tuple(TensorInfo.from_json(t) for t in doc["outputs"]))


def _dtype_name(type_id: int) -> str:
    try:
        return dtypes.to_numpy(type_id).name
    except Exception:  # noqa: BLE001 - a type numpy lacks is still described
        return f"typeid:{type_id}"


def pack(descriptor: PartitionDescriptor, image: bytes) -> bytes:
    """The payload of a partition: head, descriptor, Lite IR image."""
    header = json.dumps({"version": VERSION, "partition": descriptor.to_json(),
                         "image": {"bytes": len(image), "sha256": hashlib.sha256(image).hexdigest()}},
                        sort_keys=True, separators=(",", ":")).encode()
    return b"".join((MAGIC, _LENGTH.pack(len(header)), header, image))


def is_payload(data: bytes | memoryview) -> bool:
    """Whether `data` starts like a partition payload."""
    return bytes(data[:len(MAGIC)]) == MAGIC


def _header(head: bytes, read, where: str) -> tuple[dict[str, Any], int]:
    """(header document, offset of the image) from the payload's first bytes."""
    if len(head) < _HEAD or head[:len(MAGIC)] != MAGIC:
        raise InvalidModelError(f"{where}: not an NPU partition payload (expected {MAGIC!r} "
                                "and a header length)")
    (length,) = _LENGTH.unpack_from(head, len(MAGIC))
    if length > MAX_HEADER_BYTES:
        raise InvalidModelError(f"{where}: partition header of {length} bytes (at most "
                                f"{MAX_HEADER_BYTES})")
    raw = read(_HEAD, length)
    if len(raw) != length:
        raise InvalidModelError(f"{where}: partition header cut short ({len(raw)} of {length} "
                                "bytes)")
    try:
        doc = json.loads(raw)
        if doc.get("version") != VERSION:
            raise ValueError(f"version {doc.get('version')!r}, this litenpu reads {VERSION}")
        int(doc["image"]["bytes"]), str(doc["image"]["sha256"])
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidModelError(f"{where}: bad partition header: {exc}") from exc
    return doc, _HEAD + length


class StoredPartition:
    """A partition payload: its descriptor (read at once) and its Lite IR image (read on demand,
    from the bytes held or the file kept open)."""

    def __init__(self, doc: dict[str, Any], read, size: int, offset: int, where: str,
                 fd: int | None = None):
        try:
            self.descriptor = PartitionDescriptor.from_json(doc["partition"])
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidModelError(f"{where}: bad partition descriptor: {exc}") from exc
        self.where = where
        self.image_bytes, self.image_sha256 = int(doc["image"]["bytes"]), str(doc["image"]["sha256"])
        if offset + self.image_bytes != size:
            raise InvalidModelError(f"{where}: partition payload of {size} bytes, its header "
                                    f"describes {offset + self.image_bytes}")
        self._read, self._offset = read, offset
        self._lock = threading.Lock()
        self._closer = weakref.finalize(self, os.close, fd) if fd is not None else None

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> StoredPartition:
        """The payload held in memory (an embedded `ep_cache_context`)."""
        view = memoryview(data)

        def read(offset: int, size: int) -> bytes:
            return bytes(view[offset:offset + size])

        doc, offset = _header(bytes(view[:_HEAD]), read, where)
        return cls(doc, read, len(view), offset, where)

    @classmethod
    def open(cls, path: str, where: str) -> StoredPartition | None:
        """The payload in file `path`, its head read and the file kept open; None when the file
        holds something else (then read it whole). InvalidModelError when it cannot be read."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise InvalidModelError(f"EPContext file {path!r} of the NPU partition: {exc}") from exc
        try:
            head = os.pread(fd, _HEAD, 0)
            if not is_payload(head):
                os.close(fd)
                return None
            doc, offset = _header(head, lambda o, n: os.pread(fd, n, o), f"{where} ({path})")
            return cls(doc, lambda o, n: os.pread(fd, n, o), os.fstat(fd).st_size, offset,
                       f"{where} ({path})", fd)
        except BaseException:
            os.close(fd)
            raise

    def image(self) -> bytes:
        """The partition's `.ms` image, read now and checked against the header."""
        with self._lock:
            if self._closer is not None and not self._closer.alive:
                raise InvalidModelError(f"{self.where}: the partition payload was closed")
            try:
                data = self._read(self._offset, self.image_bytes)
            except OSError as exc:
                raise InvalidModelError(f"{self.where}: cannot read the partition's Lite IR: "
                                        f"{exc}") from exc
        if len(data) != self.image_bytes or hashlib.sha256(data).hexdigest() != self.image_sha256:
            raise InvalidModelError(f"{self.where}: the partition's Lite IR changed since its "
                                    "header was written (size or sha256 mismatch)")
        return data

    def close(self) -> None:
        """Close the file kept open (if any); image() is refused afterwards."""
        if self._closer is not None:
            self._closer()
