"""The Program: what the NPU compiler produces and the executor runs, and its file format.

A Program is static: every slot has a concrete dtype and shape, weights are packed into one
blob, internal tensors have arena offsets planned at compile time (`planner.place`).

File format (little endian), version `FORMAT_VERSION` (older `READABLE_VERSIONS` load too):

    header  magic "LNPUPROG", u32 format version, u32 reserved (0),
            u64 metadata offset, u64 metadata size, u64 weights offset, u64 weights size,
            16-byte digest of the metadata, 16-byte digest of the weights (version 3: the
            first 16 bytes of SHA-256, which CPUs hash in hardware, ~4x faster than BLAKE2b
            on a 100 MB Program; versions 1 and 2: BLAKE2b),
            u32 CRC-32 of all preceding header bytes
    metadata  UTF-8 JSON (never pickle: a tampered cache file must not run code)
    padding   zeros up to `WEIGHTS_ALIGNMENT` (a page), so an mmap of the file sees the
              weights page-aligned and the executor uses them in place
    weights   the blob; slot offsets are relative to its start

`load(path)` maps the file read-only (no populate: pages come in when a kernel touches
them) and the Program's `weights` is a uint8 view of that map. The header and metadata are
read with pread, not through the map: on filesystems with large page-cache folios one fault
maps a whole folio (up to 2 MiB), which would count weight pages as touched. Every defect (bad magic,
unknown version, truncation, checksum mismatch, inconsistent metadata) raises
`CacheError` naming the source; `verify=False` skips hashing the weights (the cache-hit
path, where the entry's manifest already vouches for them), never the metadata.

Note for JSON round trips: tuples inside `Step.attrs` come back as lists.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap as _mmap
import os
import struct
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from provider.errors import CacheError, InvalidModelError

__all__ = [
    "MAGIC",
    "FORMAT_VERSION",
    "WEIGHTS_ALIGNMENT",
    "SLOT_KINDS",
    "Slot",
    "Step",
    "Program",
    "view_slot",
    "encode",
    "to_bytes",
    "from_bytes",
    "save",
    "load",
]

MAGIC = b"LNPUPROG"
FORMAT_VERSION = 4
# Version 2 adds conv steps whose weights are stored in the direct kernel's order (attrs
# "weights": "direct", see ops/conv_weights.py); a version 1 file has none and reads the same.
# Version 3 digests with SHA-256 (see above); its contents are version 2's. Version 4 adds
# conv steps stored in the blocked kernel's order ("weights": "blocked"), which a version 3
# reader would run as GEMM matrices.
READABLE_VERSIONS = (1, 2, 3, 4)
WEIGHTS_ALIGNMENT = 4096
SLOT_KINDS = ("input", "output", "weight", "internal")

_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once at import: umask has no getter

_PREFIX = struct.Struct("<8sII")
_HEADER = struct.Struct("<8sII4Q16s16s")
_HEADER_SIZE = _HEADER.size + 4  # + CRC-32

Blob = bytes | bytearray | memoryview | np.ndarray


class Slot(NamedTuple):
    """One tensor of a Program: where it lives (weight blob, arena, or bound I/O). A named
    tuple, immutable: made at 0.3 us where a frozen dataclass took 2 us (a detector's
    Program has 350 slots, read on every warm session's first run)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str
    offset: int
    nbytes: int

    @classmethod
    def of(cls, name: str, dtype: Any, shape: Sequence[int], kind: str, offset: int = -1) -> Slot:
        """A slot with a normalised dtype name and `nbytes` computed from dtype and shape."""
        dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        return cls(name, _NAMES.get(dt) or dt.name, shape, kind, offset,
                   math.prod(shape) * dt.itemsize)

    @property
    def np_dtype(self) -> np.dtype:
        """The slot's dtype as a numpy dtype."""
        return _DTYPES.get(self.dtype) or np.dtype(self.dtype)


@dataclass
class Step:
    """One kernel call: registry key, JSON-able attributes, input/output slot indices."""

    kernel: str
    attrs: dict[str, Any]
    inputs: list[int]
    outputs: list[int]


@dataclass
class Program:
    """A compiled NPU subgraph: slots, steps, packed weights and the arena size."""

    slots: list[Slot]
    steps: list[Step]
    inputs: list[int]
    outputs: list[int]
    weights: Blob = b""
    internal_bytes: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    # its steps lowered to the C library's, as a cache entry stored them (native_steps.encode);
    # not part of the Program file
    lowered: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def weight_bytes(self) -> int:
        """Size of the packed weight blob."""
        return memoryview(self.weights).nbytes

    @property
    def input_names(self) -> list[str]:
        """Graph input names in order."""
        return [self.slots[i].name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Graph output names in order."""
        return [self.slots[i].name for i in self.outputs]

    @property
    def io_bytes(self) -> int:
        """Bytes of all graph inputs and outputs together."""
        return sum(self.slots[i].nbytes for i in (*self.inputs, *self.outputs))

    def weights_array(self) -> np.ndarray:
        """The weight blob as a flat uint8 array (no copy; read-only when the blob is)."""
        if isinstance(self.weights, np.ndarray):
            return self.weights.reshape(-1).view(np.uint8)
        return np.frombuffer(self.weights, dtype=np.uint8)

    def validate(self) -> None:
        """Raise InvalidModelError naming the first inconsistency between slots, steps and sizes."""
        _validate(self)


def view_slot(region: np.ndarray, slot: Slot) -> np.ndarray:
    """The slot's typed array inside a flat uint8 `region` (weight blob or arena), no copy."""
    flat = region[slot.offset : slot.offset + slot.nbytes]
    return flat.view(slot.np_dtype).reshape(slot.shape)


# the dtypes Programs hold, by name: looked up per slot on every load and Executor
_DTYPES = {name: np.dtype(name) for name in (
    "float32", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
    "int64", "uint64", "bool")}
_NAMES = {dt: name for name, dt in _DTYPES.items()}  # numpy computes dtype.name per call


def _validate_slot(index: int, slot: Slot, weight_bytes: int, internal_bytes: int) -> None:
    """Check one slot's kind, dtype, shape, size and placement."""
    _, dtype, shape, kind, offset, nbytes = slot
    if kind not in SLOT_KINDS:
        raise InvalidModelError(f"{_where(index, slot)}: kind {kind!r}, expected one of {SLOT_KINDS}")
    dt = _DTYPES.get(dtype) if isinstance(dtype, str) else None
    if dt is None:
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise InvalidModelError(f"{_where(index, slot)}: unknown dtype {dtype!r}") from exc
    if dt.hasobject or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise InvalidModelError(f"{_where(index, slot)}: dtype {dtype!r} shape {shape} not concrete")
    expected = math.prod(shape) * dt.itemsize
    if nbytes != expected:
        raise InvalidModelError(f"{_where(index, slot)}: nbytes {nbytes}, expected {expected}")
    if kind == "input" or kind == "output":
        if offset != -1:
            raise InvalidModelError(f"{_where(index, slot)}: I/O slots have offset -1, got {offset}")
        return
    limit = weight_bytes if kind == "weight" else internal_bytes
    if offset < 0 or offset + nbytes > limit or offset % dt.itemsize:
        region = "weight blob" if kind == "weight" else "arena"
        raise InvalidModelError(
            f"{_where(index, slot)}: [{offset}, {offset + nbytes}) is not an "
            f"{dt.itemsize}-byte aligned range inside the {limit}-byte {region}"
        )


def _where(index: int, slot: Slot) -> str:
    return f"slot {index} ({slot.name!r})"


def _validate_io(program: Program, attr: str) -> None:
    """Graph inputs (outputs) are distinct slots of kind input (output), all of them listed."""
    kind = attr[:-1]
    indices = getattr(program, attr)
    for i in indices:
        if not 0 <= i < len(program.slots) or program.slots[i].kind != kind:
            raise InvalidModelError(f"program {attr} lists slot {i}, which is not an {kind} slot")
    declared = [i for i, s in enumerate(program.slots) if s.kind == kind]
    if sorted(indices) != declared:
        raise InvalidModelError(f"program {attr} {indices} do not match the {kind} slots {declared}")


def _validate(program: Program) -> None:
    """See Program.validate."""
    if program.internal_bytes < 0:
        raise InvalidModelError(f"internal_bytes {program.internal_bytes} is negative")
    weight_bytes = program.weight_bytes
    for index, slot in enumerate(program.slots):
        _validate_slot(index, slot, weight_bytes, program.internal_bytes)
    _validate_io(program, "inputs")
    _validate_io(program, "outputs")
    n = len(program.slots)
    for index, step in enumerate(program.steps):
        if not isinstance(step.kernel, str) or not step.kernel:
            raise InvalidModelError(f"step {index}: kernel must be a non-empty string")
        for i in (*step.inputs, *step.outputs):
            if not 0 <= i < n:
                raise InvalidModelError(f"step {index} ({step.kernel}) uses slot {i}, have {n}")
        for i in step.outputs:
            if program.slots[i].kind in ("input", "weight"):
                raise InvalidModelError(
                    f"step {index} ({step.kernel}) writes {program.slots[i].kind} slot {i}"
                )


def _metadata(program: Program) -> bytes:
    """The JSON metadata of a Program (everything but the weights)."""
    doc = {
        "name": program.name,
        "options": program.options,
        "internal_bytes": program.internal_bytes,
        "inputs": list(program.inputs),
        "outputs": list(program.outputs),
        "slots": [[s.name, s.dtype, list(s.shape), s.kind, s.offset, s.nbytes] for s in program.slots],
        "steps": [[s.kernel, s.attrs, list(s.inputs), list(s.outputs)] for s in program.steps],
    }
    try:
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidModelError(f"program {program.name!r}: metadata is not JSON-able: {exc}") from exc


def _digest(data: Blob, version: int = FORMAT_VERSION) -> bytes:
    """The 16-byte digest a file of format `version` records for a bytes-like object."""
    if version >= 3:
        return hashlib.sha256(data).digest()[:16]
    return hashlib.blake2b(data, digest_size=16).digest()


def encode(program: Program) -> tuple[bytes, bytes, memoryview]:
    """Header, metadata + padding, and the weights (a view, not a copy), ready to be written
    one after the other: the file `to_bytes` would return, without joining 100 MB."""
    program.validate()
    meta = _metadata(program)
    weights = memoryview(program.weights_array())
    meta_offset = _HEADER_SIZE
    weights_offset = -(-(meta_offset + len(meta)) // WEIGHTS_ALIGNMENT) * WEIGHTS_ALIGNMENT
    header = _HEADER.pack(
        MAGIC, FORMAT_VERSION, 0, meta_offset, len(meta), weights_offset, weights.nbytes,
        _digest(meta), _digest(weights),
    )
    header += struct.pack("<I", zlib.crc32(header))
    padding = bytes(weights_offset - meta_offset - len(meta))
    return header, meta + padding, weights


def to_bytes(program: Program) -> bytes:
    """Serialize a Program (validated first) to the litenpu Program format."""
    header, meta, weights = encode(program)
    return b"".join((header, meta, weights))


def _check_header(buf: memoryview, source: str, size: int | None = None
                  ) -> tuple[int, int, int, int, int, bytes, bytes]:
    """Validate magic, version, header checksum and section bounds; return the header fields
    (version first).

    `buf` holds at least the header; `size` is the whole file's (default: `buf`'s) size.
    """
    size = buf.nbytes if size is None else size
    if buf.nbytes < _PREFIX.size:
        raise CacheError(f"{source}: truncated: {size} bytes, not even a header")
    magic, version, _ = _PREFIX.unpack_from(buf)
    if magic != MAGIC:
        raise CacheError(f"{source}: bad magic {bytes(magic)!r}, not a litenpu Program ({MAGIC!r})")
    if version not in READABLE_VERSIONS:
        raise CacheError(
            f"{source}: format version {version}, this litenpu reads versions {READABLE_VERSIONS}"
        )
    if buf.nbytes < _HEADER_SIZE:
        raise CacheError(f"{source}: truncated: {size} bytes, header needs {_HEADER_SIZE}")
    (crc,) = struct.unpack_from("<I", buf, _HEADER.size)
    if zlib.crc32(buf[: _HEADER.size]) != crc:
        raise CacheError(f"{source}: header checksum mismatch")
    _, _, _, meta_off, meta_size, w_off, w_size, meta_digest, w_digest = _HEADER.unpack_from(buf)
    end = max(meta_off + meta_size, w_off + w_size)
    if end > size:
        raise CacheError(f"{source}: truncated: {size} bytes, header promises {end}")
    if w_off % 64:
        raise CacheError(f"{source}: weights offset {w_off} is not 64-byte aligned")
    return version, meta_off, meta_size, w_off, w_size, meta_digest, w_digest


def _program_from_doc(doc: dict[str, Any], weights: np.ndarray) -> Program:
    """Build a Program from decoded metadata (KeyError/TypeError/ValueError on a bad shape)."""
    return Program(
        slots=[Slot(str(n), str(d), tuple(map(int, sh)), str(k), int(o), int(nb))
               for n, d, sh, k, o, nb in doc["slots"]],
        steps=[Step(str(k), dict(a), list(map(int, ins)), list(map(int, outs)))
               for k, a, ins, outs in doc["steps"]],
        inputs=list(map(int, doc["inputs"])),
        outputs=list(map(int, doc["outputs"])),
        weights=weights,
        internal_bytes=int(doc["internal_bytes"]),
        options=dict(doc["options"]),
        name=str(doc["name"]),
    )


def from_bytes(buf: Blob | _mmap.mmap, *, verify: bool = True, source: str = "<bytes>") -> Program:
    """Decode a Program; its weights are a read-only view of `buf` (no copy)."""
    view = memoryview(buf).cast("B")
    version, meta_off, meta_size, w_off, w_size, meta_digest, w_digest = _check_header(view, source)
    return _decode(version, view[meta_off : meta_off + meta_size], buf, w_off, w_size,
                   meta_digest, w_digest, verify, source)


def _decode(version: int, meta: Blob, buf: Blob | _mmap.mmap, w_off: int, w_size: int,
            meta_digest: bytes, w_digest: bytes, verify: bool, source: str) -> Program:
    """The Program of checked header fields: metadata verified, weights a view of `buf`."""
    if _digest(meta, version) != meta_digest:
        raise CacheError(f"{source}: metadata checksum mismatch")
    if w_size:
        weights = np.frombuffer(buf, dtype=np.uint8, count=w_size, offset=w_off)
    else:
        weights = np.empty(0, dtype=np.uint8)
    weights.flags.writeable = False
    if verify and _digest(weights, version) != w_digest:
        raise CacheError(f"{source}: weights checksum mismatch")
    try:
        program = _program_from_doc(json.loads(bytes(meta)), weights)
        program.validate()
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        raise CacheError(f"{source}: inconsistent metadata: {exc}") from exc
    return program


def save(program: Program, path: str | os.PathLike[str]) -> None:
    """Write a Program atomically: a temp file in the same directory, fsynced, then renamed."""
    header, meta, weights = encode(program)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".program-", dir=directory)
    except OSError as exc:
        raise CacheError(f"{path}: cannot write: {exc}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)  # as open() would, not mkstemp's 0600
            for part in (header, meta, weights):
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        os.unlink(tmp)
        if isinstance(exc, OSError):
            raise CacheError(f"{path}: cannot write: {exc}") from exc
        raise


def load(path: str | os.PathLike[str], mmap: bool = True, *, verify: bool = True) -> Program:
    """Read a Program file; with `mmap` the weights stay in the read-only file mapping."""
    source = os.fspath(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not mmap or size == 0:
                return from_bytes(f.read(), verify=verify, source=source)
            head = memoryview(os.pread(f.fileno(), _HEADER_SIZE, 0))
            version, meta_off, meta_size, w_off, w_size, meta_digest, w_digest = _check_header(
                head, source, size)
            meta = os.pread(f.fileno(), meta_size, meta_off)
            data = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ)
    except OSError as exc:
        raise CacheError(f"{path}: cannot read: {exc}") from exc
    return _decode(version, meta, data, w_off, w_size, meta_digest, w_digest, verify, source)
