"""Content fingerprints of model sources: what makes a cache entry belong to one model.

`source_fingerprint(source, memo_dir)` is a sha256 hex digest of everything the model is made
of: the bytes given, or a file's bytes together with its external weight files (ONNX
`external_data` locations, the `.msw` files a `.ms` names, a `.mindir`'s `*_variables`
folder). Two models share cache entries only when this digest is equal, whatever their
`model_name` (which only names entries).

Hashing is cheap but not free (a 100 MB model: ~40 ms over 16 MiB chunks hashed on up to 4
threads, then a hash of the chunk digests). An ONNX file's external files are found by
walking the messages that can hold tensors, skipping the weights (~5 ms for ResNet-50's 100
MB where a byte scan took 60 ms). For a file, the digest is recorded in
`memo_dir` with the stat of every file hashed (size, mtime_ns, inode, ctime_ns): while
those are unchanged the recorded digest is returned without reading the files. A file
replaced in place keeps neither its inode's ctime nor, usually, its mtime, so it is hashed
again; restoring the mtime with utime(2) cannot restore the ctime.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import mmap
import os
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provider.cache import writer

__all__ = ["source_fingerprint", "bytes_fingerprint", "file_fingerprint", "MEMO_DIR",
           "MemoCheck", "verify_memos"]

log = logging.getLogger("litenpu.cache")

MEMO_DIR = "sources"  # under the cache directory
CHUNK = 16 << 20
_THREADS = max(1, min(4, os.cpu_count() or 1))
_FIND_BELOW = 1 << 16  # messages smaller than this are searched for "location" before a walk
_SCAN_FILE_BELOW = 4 << 20  # files smaller than this are searched whole before any walk


def _chunk_digests(data: memoryview) -> list[bytes]:
    chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)] or [data]
    if len(chunks) == 1 or _THREADS == 1:
        return [hashlib.sha256(c).digest() for c in chunks]
    with ThreadPoolExecutor(_THREADS) as pool:  # hashlib releases the GIL on big buffers
        return list(pool.map(lambda c: hashlib.sha256(c).digest(), chunks))


def bytes_fingerprint(data: bytes | bytearray | memoryview) -> str:
    """The digest of a model given as bytes (a hash of its 16 MiB chunks' sha256s)."""
    view = memoryview(data).cast("B")
    digest = hashlib.sha256(f"litenpu-source:{len(view)}:".encode())
    for chunk in _chunk_digests(view):
        digest.update(chunk)
    return digest.hexdigest()


def _mapped_digest(path: Path, scan=None) -> tuple[str, list[Path]]:
    """(digest of the file, what `scan(mapping)` finds in it), reading the file once."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return bytes_fingerprint(b""), []
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                return bytes_fingerprint(view), list(scan(mapped)) if scan else []
            finally:
                view.release()


def _varint(data: mmap.mmap, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]  # IndexError past the end: a malformed file
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift >= 64:
            raise ValueError("varint longer than 10 bytes")


def _children(descriptor) -> dict[int, Any]:
    return {f.number: f.message_type for f in descriptor.fields if f.message_type is not None}


@functools.cache
def _walk_table() -> dict[str, dict[int, Any]]:
    """Per ONNX message that can hold a TensorProto, the fields that lead to one (numbers
    from onnx's own descriptors)."""
    import onnx  # noqa: PLC0415 - only ONNX files need it

    table = {message.DESCRIPTOR.full_name: _children(message.DESCRIPTOR)
             for message in (onnx.ModelProto, onnx.TrainingInfoProto, onnx.FunctionProto,
                             onnx.GraphProto, onnx.NodeProto, onnx.AttributeProto,
                             onnx.SparseTensorProto)}
    tensor = onnx.TensorProto.DESCRIPTOR
    table[tensor.full_name] = {tensor.fields_by_name["external_data"].number:
                               onnx.StringStringEntryProto.DESCRIPTOR}
    return table


def _fields(data: mmap.mmap, start: int, end: int) -> Iterable[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field of the message at
    data[start:end]; other fields are skipped."""
    at = start
    while at < end:
        tag, at = _varint(data, at)
        kind = tag & 7
        if kind == 0:
            _, at = _varint(data, at)
        elif kind == 1:
            at += 8
        elif kind == 5:
            at += 4
        elif kind == 2:
            length, at = _varint(data, at)
            if at + length > end:
                raise ValueError("field runs past its message")
            yield tag >> 3, at, at + length
            at += length
        else:
            raise ValueError(f"wire type {kind}")
    if at != end:
        raise ValueError("message ends inside a field")


def _onnx_locations(data: mmap.mmap) -> list[bytes]:
    """The `location` of every external tensor of an ONNX model, found by walking the
    messages that can hold tensors (graphs, nodes' attributes, functions, training info) and
    skipping everything else, weights included, and any small message without the word
    `location` in it: a few thousand fields, not the file's bytes. A small file is searched
    for that word first (a file without it names no external file): the search costs ~0.3 ms
    per MB, a walk ~0.1-0.7 ms for the zoo's graphs, so a big file is walked at once
    (ResNet-50's 102 MB: a 31 ms search, a 0.5 ms walk)."""
    if len(data) < _SCAN_FILE_BELOW and data.find(b"location") < 0:
        return []
    walk = _walk_table()
    found: list[bytes] = []
    stack = [("onnx.ModelProto", 0, len(data))]
    while stack:
        name, start, end = stack.pop()
        if name == "onnx.StringStringEntryProto":
            entry = {number: data[a:b] for number, a, b in _fields(data, start, end)}
            if entry.get(1) == b"location" and 2 in entry:
                found.append(entry[2])
            continue
        children = walk.get(name, {})
        stack += [(children[number].full_name, a, b)
                  for number, a, b in _fields(data, start, end) if number in children
                  and (b - a > _FIND_BELOW or data.find(b"location", a, b) >= 0)]
    return found


def _onnx_external(data: mmap.mmap, base: Path) -> Iterable[Path]:
    """The external data files an ONNX model names; none when the file is not ONNX (its own
    bytes are all its content then)."""
    try:
        locations = _onnx_locations(data)
    except (ValueError, IndexError):
        return []
    return [base / os.fsdecode(location) for location in locations if 0 < len(location) < 4096]


def _external_files(path: Path, data: mmap.mmap) -> Iterable[Path]:
    """The weight files beside `path` that its bytes refer to."""
    base = path.parent
    if path.suffix == ".mindir":
        folder = base / f"{path.stem.removesuffix('_graph')}_variables"
        return folder.iterdir() if folder.is_dir() else []
    if path.suffix == ".ms":
        return [p for p in base.glob("*.msw") if data.find(os.fsencode(p.name)) >= 0]
    return _onnx_external(data, base)


def _stat(path: Path) -> dict[str, Any]:
    st = os.stat(path)
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ino": st.st_ino, "ctime_ns": st.st_ctime_ns}


def _memo_path(memo_dir: Path, path: Path) -> Path:
    return memo_dir / (hashlib.sha256(os.fsencode(path)).hexdigest()[:32] + ".json")


def _recalled(memo: Path) -> str | None:
    """The recorded digest when every file it covers still has its recorded stat."""
    try:
        record = json.loads(memo.read_text())
        files = record["files"]
        if all(_stat(Path(f["path"])) == f for f in files):
            return str(record["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _record(memo: Path, files: list[dict[str, Any]], fingerprint: str) -> None:
    """Write the memo atomically; a cache directory we cannot write just keeps no memo."""
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=memo.parent)
        with os.fdopen(fd, "w") as f:
            json.dump({"files": files, "fingerprint": fingerprint}, f)
        os.replace(tmp, memo)
    except OSError as exc:
        log.debug("no fingerprint memo in %s: %s", memo.parent, exc)


def file_fingerprint(path: str | os.PathLike[str], memo_dir: Path | None = None, *,
                     record_later: bool = False) -> str:
    """The digest of a model file and its external weight files (memoised in `memo_dir`;
    with `record_later`, the memo is written by the cache writer, off the caller's time:
    0.4 ms of a small model's cold session, most of it creating the memo directory)."""
    path = Path(os.path.abspath(path))
    memo = _memo_path(memo_dir, path) if memo_dir is not None else None
    if memo is not None:
        writer.wait(memo.parent)  # a memo this process queued (`record_later`) is read back
    if memo is not None and (known := _recalled(memo)) is not None:
        return known
    before = _stat(path)
    main, found = _mapped_digest(path, lambda data: _external_files(path, data))
    externals = sorted({p for p in found if p.is_file()})
    digest = hashlib.sha256(main.encode())
    for ext in externals:
        digest.update(f"\0{os.path.relpath(ext, path.parent)}\0".encode())
        digest.update(_mapped_digest(ext)[0].encode())
    fingerprint = digest.hexdigest()
    files = [before, *(_stat(e) for e in externals)]
    if memo is not None and _stat(path) == before:  # not changing while we read it
        if record_later:
            # queued under the memo folder: the cache's flush and clear wait for it
            writer.submit(memo.parent, lambda: _record(memo, files, fingerprint))
        else:
            _record(memo, files, fingerprint)
    return fingerprint


def source_fingerprint(source: Any, memo_dir: Path | None = None, *,
                       record_later: bool = False) -> str:
    """The digest of a model source as `InferenceSession` takes it: a path or bytes."""
    if isinstance(source, (str, os.PathLike)):
        return file_fingerprint(source, memo_dir, record_later=record_later)
    return bytes_fingerprint(source)


@dataclass(frozen=True)
class MemoCheck:
    """One recorded fingerprint re-checked by `verify_memos`."""

    path: str  # the model file
    status: str  # "ok" | "changed" (content differs from the record; memo removed) | "gone"
    detail: str = ""


def verify_memos(memo_dir: Path) -> list[MemoCheck]:
    """Re-hash every model file recorded in `memo_dir`, ignoring the stat shortcut (what
    `litenpu cache verify --deep` runs). A record whose file now hashes differently is
    removed, so the next session hashes it again; a vanished file's record too."""
    checks = []
    for memo in sorted(memo_dir.glob("*.json")) if memo_dir.is_dir() else []:
        try:
            record = json.loads(memo.read_text())
            path = Path(record["files"][0]["path"])
            recorded = str(record["fingerprint"])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            memo.unlink(missing_ok=True)
            checks.append(MemoCheck(memo.name, "changed", f"unreadable record removed: {exc}"))
            continue
        try:
            current = file_fingerprint(path)
        except OSError as exc:
            memo.unlink(missing_ok=True)
            checks.append(MemoCheck(str(path), "gone", exc.strerror or str(exc)))
            continue
        if current == recorded:
            checks.append(MemoCheck(str(path), "ok"))
        else:
            memo.unlink(missing_ok=True)
            checks.append(MemoCheck(str(path), "changed",
                                    "content differs from its record (its stat did not change "
                                    "with it); the record is removed"))
    return checks
