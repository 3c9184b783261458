"""CompileCache: a directory of entries, atomic installs, hit/miss/rebuild, LRU eviction.

Layout of `cache_dir`: one directory per entry, named `CacheKey.digest` (32 hex chars);
`.tmp-*` directories are entries being written, `.trash-*` ones entries being deleted
(both removed by whoever finds them older than STALE_SECONDS: a crashed process's leftovers).
An entry's directory mtime is its "last used" stamp: set on install and on every hit.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provider.cache import entry, writer
from provider.cache.fingerprint import MEMO_DIR
from provider.cache.keys import CacheKey
from provider.cache.records import CacheOutcome, CacheStatus, EntryInfo
from provider.cache.residency import pages_present, pages_spanned
from provider.errors import CacheError
from provider.npu.program import Program
from provider.options import CacheOptions

__all__ = ["CompileCache", "STALE_SECONDS", "default_cache_dir"]

log = logging.getLogger("litenpu.cache")

STALE_SECONDS = 600  # temp/trash directories older than this belong to a crashed process
_ENTRY_NAME = re.compile(r"^[0-9a-f]{32}$")
_INSTALL_ATTEMPTS = 3
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once at import: umask has no getter

_warned_dirs: set[str] = set()
_warned_lock = threading.Lock()


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/litenpu, else ~/.cache/litenpu (the CLI's default)."""
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "litenpu"


@dataclass(frozen=True)
class _Lookup:
    program: Program | None
    problem: str | None  # None: valid (program set) or absent (program None)
    ino: int | None  # the entry directory's inode when one exists


def _dir_bytes(path: Path) -> int:
    try:
        return sum(e.stat().st_size for e in os.scandir(path) if e.is_file(follow_symlinks=False))
    except OSError:
        return 0


def _remove(path: Path) -> None:
    """Delete a directory tree, or a file squatting on an entry's name (best effort)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class CompileCache:
    """A compile cache in `cache_dir` (created on first write).

    `max_bytes` bounds the total size of the entries (least recently used evicted first after
    each install; None: unbounded). `cache_version` is MindSpore Lite's CacheVersion: a
    validity stamp written into every entry, and an entry with another one is rebuilt.
    """

    def __init__(self, cache_dir: str | os.PathLike[str], *, max_bytes: int | None = None,
                 cache_version: str = ""):
        if max_bytes is not None and max_bytes < 0:
            raise CacheError(f"max_bytes {max_bytes}: expected >= 0 or None")
        self.dir = Path(cache_dir).expanduser()
        self.max_bytes = max_bytes
        self.cache_version = cache_version

    @classmethod
    def from_options(cls, options: CacheOptions) -> CompileCache | None:
        """The cache the provider options ask for; None when they give no cache_dir."""
        if options.cache_dir is None:
            return None
        return cls(options.cache_dir, max_bytes=options.max_bytes,
                   cache_version=options.cache_version)

    def path(self, key: CacheKey) -> Path:
        """The entry directory of `key` (extra files stored with put() live in it)."""
        return self.dir / key.digest

    # reading -----------------------------------------------------------------------------

    def has(self, key: CacheKey) -> bool:
        """Whether `key` has an entry (once its queued write is done), sound or not: what a
        lookup would open, without opening it."""
        directory = self.path(key)
        writer.wait(directory)
        return directory.exists()

    def _lookup(self, key: CacheKey) -> _Lookup:
        directory = self.path(key)
        writer.wait(directory)
        try:
            ino = os.stat(directory).st_ino
        except (FileNotFoundError, NotADirectoryError):
            return _Lookup(None, None, None)
        except OSError as exc:
            return _Lookup(None, f"cannot stat the entry: {exc.strerror or exc}", None)
        try:
            program, moved = entry.open_entry(directory, key, self.cache_version)
        except entry.BadEntry as exc:
            return _Lookup(None, str(exc), ino)
        if moved:
            log.info("cache entry %s: files copied or touched, content verified; restamping",
                     directory)
            try:
                entry.restamp(directory)
            except (OSError, CacheError) as exc:
                log.debug("cache entry %s: cannot restamp: %s", directory, exc)
        return _Lookup(program, None, ino)

    def _touch(self, directory: Path) -> None:
        """Mark an entry used now (the LRU order); a read-only cache just keeps its order."""
        now = time.time_ns()
        try:
            os.utime(directory, ns=(now, now))
        except OSError as exc:
            log.debug("cache entry %s: cannot update its last-used time: %s", directory, exc)

    def get(self, key: CacheKey) -> Program | None:
        """The cached Program (mapped, weights not read) or None; a bad entry logs why."""
        found = self._lookup(key)
        if found.problem is not None:
            log.warning("cache entry %s is bad and not used: %s", self.path(key), found.problem)
        if found.program is not None:
            self._touch(self.path(key))
        return found.program

    # writing -----------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Create the cache directory and remove crashed writers' leftovers."""
        self.dir.mkdir(parents=True, exist_ok=True)
        cutoff = time.time() - STALE_SECONDS
        for item in os.scandir(self.dir):
            if item.name.startswith((".tmp-", ".trash-")):
                try:
                    if item.stat(follow_symlinks=False).st_mtime < cutoff:
                        log.info("cache %s: removing stale %s", self.dir, item.name)
                        _remove(Path(item.path))
                except FileNotFoundError:
                    pass

    def _discard(self, directory: Path, expect_ino: int | None = None) -> bool:
        """Remove an entry: renamed away first, so readers never see it half deleted.

        With `expect_ino`, only if the directory is still that one (another process may have
        replaced the bad entry with a good one since we looked).
        """
        try:
            if expect_ino is not None and os.stat(directory).st_ino != expect_ino:
                return False
            trash = self.dir / f".trash-{directory.name}-{secrets.token_hex(4)}"
            os.rename(directory, trash)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:  # a read-only or foreign cache: readers skip the entry anyway
            log.debug("cache entry %s: cannot remove it: %s", directory, exc.strerror or exc)
            return False
        _remove(trash)
        return True

    def discard(self, key: CacheKey) -> bool:
        """Remove the entry of `key` (renamed away first); whether there was one."""
        writer.wait(self.path(key))
        return self._discard(self.path(key))

    def put(self, key: CacheKey, program: Program, *,
            extra_files: dict[str, bytes] | None = None) -> Path:
        """Store `program` (and extra files) as the entry of `key`, atomically; its path.

        The entry is written to a temp directory, fsynced and renamed into place. If another
        process installed a valid entry meanwhile, theirs is kept and ours discarded; a bad
        entry in the way is replaced. CacheError when the cache cannot be written.
        """
        final = self.path(key)
        tmp: Path | None = None
        try:
            self._prepare()
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key.digest[:8]}-", dir=self.dir))
            os.chmod(tmp, 0o777 & ~_UMASK)
            entry.write_entry(tmp, key, program, self.cache_version, dict(extra_files or {}))
            installed = self._install(tmp, final, key)
            entry.fsync_dir(self.dir)
        except OSError as exc:
            raise CacheError(f"cache {self.dir}: cannot store entry {key.digest}: "
                             f"{exc.strerror or exc}") from exc
        finally:
            if tmp is not None and tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        if installed:
            self._touch(final)
            self.evict(protect=(final.name,))
        return final

    def put_later(self, key: CacheKey, program: Program) -> writer.Pending:
        """put() on the background writer (`provider.cache.writer`): the Program is written
        while the caller goes on with it in memory. A failure is logged (one WARNING per
        cache directory) and is the Pending's error()."""
        def write() -> None:
            try:
                self.put(key, program)
            except CacheError as exc:
                self._warn_unwritable(exc, "the session runs from memory")
                raise

        return writer.submit(self.path(key), write)

    def flush(self) -> None:
        """Wait until every entry queued for this cache (by this process) is written."""
        writer.wait(self.dir)

    def _install(self, tmp: Path, final: Path, key: CacheKey) -> bool:
        """Rename `tmp` to `final`; False if a valid entry (another process's) is kept."""
        for _ in range(_INSTALL_ATTEMPTS):
            try:
                os.rename(tmp, final)
                return True
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                    raise  # ENOTDIR: a file squats on the entry's name
            existing = self._lookup(key)
            if existing.program is not None:
                log.debug("cache entry %s: another process stored it first; keeping theirs", final)
                return False
            log.info("cache entry %s: replacing a bad entry (%s)", final, existing.problem)
            self._discard(final, existing.ino)
        raise CacheError(f"cache entry {final}: still taken after {_INSTALL_ATTEMPTS} attempts")

    def _warn_unwritable(self, exc: CacheError, consequence: str = "compiling in memory"
                         ) -> None:
        """One warning per cache directory per process; later failures log at DEBUG."""
        with _warned_lock:
            first = str(self.dir) not in _warned_dirs
            _warned_dirs.add(str(self.dir))
        if first:
            log.warning("%s; %s (later failures of this cache: DEBUG)", exc, consequence)
        else:
            log.debug("%s; %s", exc, consequence)

    def get_or_compile(self, key: CacheKey, compile_fn: Callable[[], Program], *,
                       background: bool = False) -> tuple[Program, CacheOutcome]:
        """The cached Program for `key`, or `compile_fn()` stored and mapped; what happened.

        Never returns a bad entry's Program: a bad entry is logged (WARNING, the reason) and
        rebuilt. When the cache cannot be written, the compiled Program is returned from
        memory (status IN_MEMORY) after one warning per cache directory. `background`: a
        compiled Program is returned from memory at once and stored by the writer; the
        outcome's `written` tells how that went (`CacheOutcome.settled`).
        """
        start = time.perf_counter()
        found = self._lookup(key)
        load_seconds = time.perf_counter() - start
        if found.program is not None:
            self._touch(self.path(key))
            return found.program, _outcome(CacheStatus.HIT, "", 0.0, load_seconds,
                                           found.program, self.path(key))
        if found.problem is not None:
            log.warning("cache entry %s is bad: %s; recompiling", self.path(key), found.problem)
        start = time.perf_counter()
        program = compile_fn()
        compile_seconds = time.perf_counter() - start
        status = CacheStatus.MISS if found.problem is None else CacheStatus.REBUILT
        if background:
            written = self.put_later(key, program)
            return program, _outcome(status, found.problem or "", compile_seconds, 0.0, program,
                                     self.path(key), mapped=False, written=written)
        try:
            final = self.put(key, program)
        except CacheError as exc:
            self._warn_unwritable(exc)
            reason = str(exc) if found.problem is None else f"{found.problem}; {exc}"
            return program, _outcome(CacheStatus.IN_MEMORY, reason, compile_seconds, 0.0,
                                     program, None)
        start = time.perf_counter()
        stored = self._lookup(key)
        load_seconds = time.perf_counter() - start
        if stored.program is None:  # removed or spoiled between our rename and this read
            log.warning("cache entry %s unusable right after writing: %s; using the compiled "
                        "program from memory", final, stored.problem or "gone")
            return program, _outcome(CacheStatus.IN_MEMORY, stored.problem or "entry vanished",
                                     compile_seconds, 0.0, program, None)
        return stored.program, _outcome(status, found.problem or "", compile_seconds,
                                        load_seconds, stored.program, final)

    # maintenance ---------------------------------------------------------------------------

    def _entry_dirs(self) -> list[Path]:
        writer.wait(self.dir)
        try:
            items = list(os.scandir(self.dir))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(Path(i.path) for i in items
                      if _ENTRY_NAME.match(i.name) and i.is_dir(follow_symlinks=False))

    def entries(self) -> list[EntryInfo]:
        """Every entry, least recently used first (manifests read, files not hashed)."""
        infos = []
        for directory in self._entry_dirs():
            try:
                last_used = os.stat(directory).st_mtime
            except FileNotFoundError:
                continue  # evicted meanwhile
            try:
                m: dict[str, Any] = entry.read_manifest(directory)
                problem = None
            except entry.BadEntry as exc:
                m, problem = {}, str(exc)
            created = m.get("created")
            infos.append(EntryInfo(
                directory.name, directory, str(m.get("model_name", "")),
                str(m.get("program_name", "")), str(m.get("cache_version", "")),
                _dir_bytes(directory), float(created) if isinstance(created, (int, float)) else None,
                last_used, problem, _input_shapes(m)))
        return sorted(infos, key=lambda e: (e.last_used, e.name))

    def total_bytes(self) -> int:
        """Bytes of all entries (temp directories not counted)."""
        return sum(_dir_bytes(d) for d in self._entry_dirs())

    def verify_entry(self, name: str | CacheKey) -> None:
        """The full check of one entry (every byte hashed); BadEntry (a CacheError) says why.

        Integrity and format/litenpu versions are checked; the cache_version is not (a CLI
        user checking a cache dir does not know which one the sessions use).
        """
        directory = self.path(name) if isinstance(name, CacheKey) else self.dir / name
        writer.wait(directory)
        entry.verify_entry_dir(directory)

    def clear(self, model_name: str | None = None) -> int:
        """Remove all entries (and the fingerprint memos), or those of one model (ModelName
        or program name); how many entries."""
        removed = 0
        for info in self.entries():
            if model_name is None or model_name in (info.model_name, info.program_name):
                removed += self._discard(info.path)
        if model_name is None and self.dir.is_dir():
            self._prepare()  # and leftovers of crashed writers
            shutil.rmtree(self.dir / MEMO_DIR, ignore_errors=True)  # and fingerprint memos
        return removed

    def evict(self, protect: Iterable[str] = ()) -> list[str]:
        """Remove least recently used entries until the cache fits `max_bytes`; their names."""
        if self.max_bytes is None:
            return []
        keep = set(protect)
        infos = self.entries()
        total = sum(e.size for e in infos)
        evicted = []
        for info in infos:
            if total <= self.max_bytes:
                break
            if info.name in keep:
                continue
            if self._discard(info.path):
                evicted.append(info.name)
                log.info("cache %s: evicted %s (%s, %d bytes, least recently used)", self.dir,
                         info.name, info.model_name or info.program_name, info.size)
            total -= info.size
        if total > self.max_bytes:
            log.info("cache %s: %d bytes in use, over max_bytes %d (the entries in use are "
                     "kept)", self.dir, total, self.max_bytes)
        return evicted


def _input_shapes(manifest: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The input shapes an entry's key names (() when the manifest has none readable)."""
    try:
        return CacheKey.from_dict(manifest["key"]).input_shapes
    except (KeyError, CacheError):
        return ()


def _outcome(status: CacheStatus, reason: str, compile_seconds: float, load_seconds: float,
             program: Program, directory: Path | None, *, mapped: bool = True,
             written: writer.Pending | None = None) -> CacheOutcome:
    """The outcome, measured now (pages mapped when the Program is handed back), and logged."""
    weights = program.weights_array()
    touched = pages_present(weights) if directory is not None and mapped else None
    outcome = CacheOutcome(status, reason, compile_seconds, load_seconds, touched,
                           pages_spanned(weights), directory, written)
    log.info("program %r %s", program.name, outcome.describe())
    return outcome
