"""One cache entry on disk: a directory with `manifest.json`, `program.lnp`, `lowered.bin` (its
steps lowered to the C library's, `native_steps.encode`: a warm Executor reads them instead
of lowering again; when they do not fit this litenpu it lowers, see native_steps) and extra
files.

The manifest records the format and litenpu versions, the cache_version, the key, the I/O
descriptors, and per file its size, sha256 and a *stamp* (mtime_ns, inode). The writer sets
each file's mtime to a back-dated value before fsync, so any later write through the
filesystem (which sets mtime to "now") changes the stamp even within the same clock tick.

Hit path (`open_entry`, cheap): the manifest is read, its own sha256 checked and its bytes
compared with the one form litenpu writes; versions and key compared; every file `stat`ed
(size must match; a changed stamp means the file was written or copied since, and only
then is it hashed in full); the Program mapped with `verify=False` (its header CRC and
metadata digest are still checked; the weight pages are not read). What this does not
catch: media corruption below the filesystem, or a tamperer who restores the mtime with
utime(2). `verify_entry_dir` (`litenpu cache verify`) hashes every byte and catches those.
A sampled hash of a few weight pages was rejected: it reads pages the hit path should not
touch and still misses most single-byte changes.

Sessions map `program.lnp`, so no litenpu operation writes an entry's files after install:
they are created read-only, an entry is replaced by renaming a new directory over its name
and removed by renaming it away and unlinking. A program that truncates a mapped file
anyway faults the processes reading the lost pages (SIGBUS), as truncating a loaded
shared library would; `docs/troubleshooting.md` says so. Surviving that would mean copying
the weights out of the file on every hit, which is what the mapped warm start avoids (102 MB
of ResNet-50 weights: 71 ms read against 2.3 ms mapped, page cache hot).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from provider import __version__
from provider.cache.keys import CacheKey, _canonical, _sha256
from provider.errors import CacheError
from provider.npu import native_steps
from provider.npu import program as fmt
from provider.npu.program import Program

__all__ = ["MANIFEST", "PROGRAM", "MANIFEST_VERSION", "BadEntry", "write_entry", "read_manifest",
           "open_entry", "verify_entry_dir", "restamp"]

MANIFEST = "manifest.json"
PROGRAM = "program.lnp"
LOWERED = "lowered.bin"  # the Program's steps lowered to the C library's (native_steps.encode)
MANIFEST_VERSION = 2  # 2: compact JSON (1 was indented; read as a stale entry)
MAX_MANIFEST_BYTES = 1 << 20
_BACKDATE_NS = 5 * 10**9  # > the coarsest mtime granularity we expect (FAT: 2 s)
_RESERVED = (MANIFEST, PROGRAM, LOWERED)
READ_ONLY = 0o444  # entries are replaced by rename and removed by unlink, never written again
_PARALLEL_HASH_BYTES = 1 << 20  # files from this size on are hashed while they are written


class BadEntry(CacheError):
    """A cache entry that must not be used; the message is the reason."""


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _checksum(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return _sha256(_canonical(body))


def _io(program: Program, indices: list[int]) -> list[dict[str, Any]]:
    return [{"name": program.slots[i].name, "dtype": program.slots[i].dtype,
             "shape": list(program.slots[i].shape)} for i in indices]


def _check_extra_name(name: str) -> None:
    if name in _RESERVED or not name or name != os.path.basename(name) or name.startswith("."):
        raise CacheError(f"extra file name {name!r}: expected a plain file name other than "
                         f"{', '.join(_RESERVED)}")


def _write_file(path: Path, pieces: Sequence[bytes | memoryview], stamp_ns: int) -> dict[str, Any]:
    """Write `pieces` one after the other, back-date, fsync: one file, left read-only; its
    manifest record. A big file's sha256 is computed on another thread while it is written
    (both release the GIL: a 100 MB Program's entry is written ~0.1 s sooner)."""
    digest = hashlib.sha256()

    def hash_all() -> None:
        for piece in pieces:
            digest.update(memoryview(piece).cast("B"))

    hashing = None
    if sum(memoryview(p).nbytes for p in pieces) >= _PARALLEL_HASH_BYTES:
        hashing = threading.Thread(target=hash_all, name="litenpu-cache-sha256")
        hashing.start()
    try:
        with open(path, "xb") as f:
            for piece in pieces:
                f.write(piece)
            f.flush()
            os.fchmod(f.fileno(), READ_ONLY)
            os.utime(f.fileno(), ns=(stamp_ns, stamp_ns))
            os.fsync(f.fileno())
            st = os.fstat(f.fileno())
    finally:
        if hashing is not None:
            hashing.join()
    if hashing is None:
        hash_all()
    return {"size": st.st_size, "sha256": digest.hexdigest(), "mtime_ns": st.st_mtime_ns,
            "ino": st.st_ino}


def _dump(manifest: dict[str, Any]) -> bytes:
    """The manifest's one on-disk form (so any changed byte is detectable, even whitespace):
    compact, so that json's C encoder writes it (every cache hit checks it)."""
    return _canonical(manifest)


def _write_manifest(directory: Path, manifest: dict[str, Any], name: str = MANIFEST) -> None:
    manifest["checksum"] = _checksum(manifest)
    with open(directory / name, "xb") as f:
        f.write(_dump(manifest))
        f.flush()
        os.fchmod(f.fileno(), READ_ONLY)
        os.fsync(f.fileno())


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (new names, renames) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_entry(directory: Path, key: CacheKey, program: Program, cache_version: str,
                extra_files: dict[str, bytes]) -> None:
    """Fill an empty (temporary) directory with a complete, fsynced entry; OSError on failure."""
    for name in extra_files:
        _check_extra_name(name)
    stamp_ns = time.time_ns() - _BACKDATE_NS
    files = {PROGRAM: _write_file(directory / PROGRAM, fmt.encode(program), stamp_ns)}
    lowered = native_steps.encode(program) if program.steps else None
    if lowered is not None:
        files[LOWERED] = _write_file(directory / LOWERED, [lowered], stamp_ns)
    for name, data in extra_files.items():
        files[name] = _write_file(directory / name, [data], stamp_ns)
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "format_version": fmt.FORMAT_VERSION,
        "litenpu_version": __version__,
        "cache_version": cache_version,
        "key": key.to_dict(),
        "digest": key.digest,
        "model_name": key.model_name,
        "program_name": program.name,
        "inputs": _io(program, program.inputs),
        "outputs": _io(program, program.outputs),
        "weight_bytes": program.weight_bytes,
        "internal_bytes": program.internal_bytes,
        "files": files,
        "created": time.time(),
    }
    _write_manifest(directory, manifest)
    fsync_dir(directory)


def read_manifest(directory: Path) -> dict[str, Any]:
    """The entry's manifest, its checksum verified; BadEntry says what is wrong."""
    path = directory / MANIFEST
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise BadEntry(f"manifest unreadable: {exc.strerror or exc}") from exc
    if len(raw) > MAX_MANIFEST_BYTES:
        raise BadEntry(f"manifest larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadEntry(f"manifest is not valid JSON: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("checksum") != _checksum(manifest):
        raise BadEntry("manifest checksum mismatch")
    # (another manifest version's form is not this one's: _check_versions says it is stale)
    if manifest.get("manifest_version") == MANIFEST_VERSION and _dump(manifest) != raw:
        raise BadEntry("manifest was rewritten (not byte-identical to what litenpu wrote)")
    return manifest


def _check_versions(manifest: dict[str, Any]) -> None:
    for field, expected in (("manifest_version", MANIFEST_VERSION),
                            ("format_version", fmt.FORMAT_VERSION),
                            ("litenpu_version", __version__)):
        if manifest.get(field) != expected:
            raise BadEntry(f"stale entry: {field} {manifest.get(field)!r}, this litenpu "
                           f"uses {expected!r}")


def _check_key(manifest: dict[str, Any], key: CacheKey, cache_version: str) -> None:
    if manifest.get("cache_version") != cache_version:
        raise BadEntry(f"cache_version {manifest.get('cache_version')!r}, the cache asks for "
                       f"{cache_version!r}")
    if manifest.get("key") != key.to_dict():
        raise BadEntry(f"entry holds another key {manifest.get('key')!r}")


def _files(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    files = manifest.get("files")
    if not isinstance(files, dict) or PROGRAM not in files:
        raise BadEntry(f"manifest lists no {PROGRAM}")
    return files


def _check_file(directory: Path, name: str, record: dict[str, Any], deep: bool) -> bool:
    """Size (always) and content (when `deep` or the stamp changed); True if the stamp changed."""
    try:
        st = os.stat(directory / name)
    except OSError as exc:
        raise BadEntry(f"{name}: {exc.strerror or exc}") from exc
    if st.st_size != record.get("size"):
        raise BadEntry(f"{name}: {st.st_size} bytes, the manifest says {record.get('size')} "
                       "(truncated or overwritten)")
    moved = (st.st_mtime_ns, st.st_ino) != (record.get("mtime_ns"), record.get("ino"))
    if (deep or moved) and _sha256_file(directory / name) != record.get("sha256"):
        raise BadEntry(f"{name}: content changed since it was written (sha256 mismatch)")
    return moved


def _check_io(manifest: dict[str, Any], program: Program) -> None:
    if (manifest.get("inputs"), manifest.get("outputs")) != (
            _io(program, program.inputs), _io(program, program.outputs)):
        raise BadEntry(f"{PROGRAM}: inputs/outputs differ from the manifest's I/O descriptors")


def _load(directory: Path, verify: bool) -> Program:
    try:
        return fmt.load(directory / PROGRAM, mmap=True, verify=verify)
    except CacheError as exc:
        raise BadEntry(str(exc)) from exc


def open_entry(directory: Path, key: CacheKey, cache_version: str,
               manifest: dict[str, Any] | None = None) -> tuple[Program, bool]:
    """The hit path: (Program mapped without populate, whether the stamps need refreshing).
    `manifest`: the entry's, already read by `read_manifest` (else read here)."""
    if manifest is None:
        manifest = read_manifest(directory)
    _check_versions(manifest)
    _check_key(manifest, key, cache_version)
    moved = [_check_file(directory, name, record, deep=False)
             for name, record in _files(manifest).items()]
    program = _load(directory, verify=False)
    _check_io(manifest, program)
    if LOWERED in manifest["files"]:
        try:
            program.lowered = (directory / LOWERED).read_bytes()
        except OSError as exc:
            raise BadEntry(f"{LOWERED}: cannot read: {exc.strerror or exc}") from exc
    return program, any(moved)


def verify_entry_dir(directory: Path) -> dict[str, Any]:
    """The full check: every file hashed, the Program's weights too; the manifest if sound."""
    manifest = read_manifest(directory)
    _check_versions(manifest)
    for name, record in _files(manifest).items():
        _check_file(directory, name, record, deep=True)
    _check_io(manifest, _load(directory, verify=True))
    return manifest


def restamp(directory: Path, manifest: dict[str, Any] | None = None) -> None:
    """Record the files' current stamps (after a copy whose content was verified); OSError."""
    manifest = dict(manifest if manifest is not None else read_manifest(directory))
    files = {}
    for name, record in manifest["files"].items():
        st = os.stat(directory / name)
        files[name] = {**record, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
    manifest["files"] = files
    tmp = f".{MANIFEST}.{os.getpid()}.{time.monotonic_ns()}"
    try:
        _write_manifest(directory, manifest, tmp)
        os.replace(directory / tmp, directory / MANIFEST)
    finally:
        (directory / tmp).unlink(missing_ok=True)
