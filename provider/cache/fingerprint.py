"""Content fingerprints of model sources: what makes a cache entry belong to one model.

`source_fingerprint(source, memo_dir)` is a sha256 hex digest of everything the model is made
of: the bytes given, or a file's bytes together with its external weight files (ONNX
`external_data` locations, the `.msw` files a `.ms` names, a `.mindir`'s `*_variables`
folder). Two models share cache entries only when this digest is equal, whatever their
`model_name` (which only names entries).

Hashing is cheap but not free (a 100 MB model: ~40 ms over 16 MiB chunks hashed on up to 4
threads, then a hash of the chunk digests). For a file, the digest is recorded in
`memo_dir` with the stat of every file hashed (size, mtime_ns, inode, ctime_ns): while
those are unchanged the recorded digest is returned without reading the files. A file
replaced in place keeps neither its inode's ctime nor, usually, its mtime, so it is hashed
again; restoring the mtime with utime(2) cannot restore the ctime.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import re
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["source_fingerprint", "bytes_fingerprint", "file_fingerprint", "MEMO_DIR",
           "MemoCheck", "verify_memos"]

log = logging.getLogger("litenpu.cache")

MEMO_DIR = "sources"  # under the cache directory
CHUNK = 16 << 20
_THREADS = max(1, min(4, os.cpu_count() or 1))
# an ONNX StringStringEntryProto {key: "location", value: <len><path>}
_ONNX_LOCATION = re.compile(rb"\n\x08location\x12")


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
    while at < len(data) and shift < 64:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            break
        shift += 7
    return value, at


def _onnx_external(data: mmap.mmap, base: Path) -> Iterable[Path]:
    for match in _ONNX_LOCATION.finditer(data):
        length, start = _varint(data, match.end())
        if 0 < length < 4096:
            yield base / os.fsdecode(data[start:start + length])


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


def file_fingerprint(path: str | os.PathLike[str], memo_dir: Path | None = None) -> str:
    """The digest of a model file and its external weight files (memoised in `memo_dir`)."""
    path = Path(os.path.abspath(path))
    memo = _memo_path(memo_dir, path) if memo_dir is not None else None
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
        _record(memo, files, fingerprint)
    return fingerprint


def source_fingerprint(source: Any, memo_dir: Path | None = None) -> str:
    """The digest of a model source as `InferenceSession` takes it: a path or bytes."""
    if isinstance(source, (str, os.PathLike)):
        return file_fingerprint(source, memo_dir)
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
