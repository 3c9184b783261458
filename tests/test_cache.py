"""The compile cache: hits and misses, every corrupt entry rebuilt, unwritable caches, LRU.

Programs come from models/resnet_block.onnx (import_onnx + compile_model); outputs are
compared with onnxruntime on seeded inputs, and a cached Program's outputs bit for bit with
the freshly compiled one's.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_oracle import assert_matches, pool, run_ort

from converters.onnx_import import import_onnx
from provider.cache import (
    BadEntry,
    CacheKey,
    CacheStatus,
    CompileCache,
    partition_signature,
)
from provider.cache import entry as entry_mod
from provider.cache.fingerprint import source_fingerprint
from provider.cache.residency import pages_present
from provider.errors import CacheError
from provider.npu import program as fmt
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor
from provider.options import CacheOptions, CompileOptions, InvalidOptionError, NpuOptions

MODEL_PATH = Path(__file__).parent.parent / "models" / "resnet_block.onnx"
MODEL = onnx.load(MODEL_PATH)
LITE, _ = import_onnx(MODEL)
SHAPES = {"image": (1, 3, 56, 56)}
IMAGE = np.random.default_rng(7).standard_normal(SHAPES["image"]).astype(np.float32)


FINGERPRINT = source_fingerprint(MODEL_PATH)


def make_key(shapes=None, fp16: bool = False, model_name: str = "resnet_block") -> CacheKey:
    return CacheKey.build(partition=LITE, input_shapes=shapes or SHAPES,
                          options={"enable_fp16": fp16}, model_name=model_name,
                          fingerprint=FINGERPRINT)


class Compiler:
    """compile_fn for get_or_compile that counts its calls."""

    def __init__(self, shapes=None, fp16: bool = False):
        self.shapes, self.fp16, self.calls = shapes or SHAPES, fp16, 0

    def __call__(self) -> fmt.Program:
        self.calls += 1
        return compile_model(LITE, self.shapes, CompileOptions(self.fp16))


def run(program: fmt.Program, image: np.ndarray = IMAGE) -> np.ndarray:
    with Executor(program, pool()) as ex:
        return np.array(ex.run([image])[0])


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    """The freshly compiled Program's logits, checked against onnxruntime once."""
    got = run(compile_model(LITE, SHAPES))
    assert_matches(got, run_ort(MODEL, {"image": IMAGE})[0], what="resnet_block logits")
    return got


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "litenpu.cache" and r.levelno == logging.WARNING]


# ---- keys and options ----------------------------------------------------------------------


def test_key_identity_and_stamps():
    key = make_key()
    assert key.model_name == "resnet_block" and key.device == "sim"
    assert key.format_version == fmt.FORMAT_VERSION
    assert key.digest == make_key().digest and len(key.digest) == 32
    others = {make_key(shapes={"image": (2, 3, 56, 56)}).digest, make_key(fp16=True).digest,
              make_key(model_name="other").digest}
    assert key.digest not in others and len(others) == 3
    # validity stamps are not part of the name: a new litenpu finds (and replaces) the entry
    stale = dataclasses.replace(key, format_version=0, litenpu_version="0.0.1")
    assert stale.digest == key.digest and stale != key


def test_key_source_is_always_the_content_and_model_name_only_names_it():
    def never():
        raise AssertionError("content must not be computed when a fingerprint is given")

    def make(content, model_name=""):
        return CacheKey.build(partition=LITE, input_shapes=SHAPES, content=content,
                              model_name=model_name)

    assert make(b"weights-a").digest == make(lambda: b"weights-a").digest
    assert make(b"weights-a").digest != make(b"weights-b").digest
    assert make(b"x").source == "sha256:" + hashlib.sha256(b"x").hexdigest()
    assert make(b"x").model_name == ""
    # one model_name, two contents: two entries (a name never stands for the content)
    assert make(b"weights-a", "m").digest != make(b"weights-b", "m").digest
    assert make(b"x", "m").source == make(b"x").source and make(b"x", "m").model_name == "m"
    assert make(b"x", "m").digest != make(b"x").digest
    given = CacheKey.build(partition=LITE, input_shapes=SHAPES, model_name="m",
                           fingerprint="ab" * 32, content=never)
    assert given.source == "sha256:" + "ab" * 32
    with pytest.raises(CacheError, match="content fingerprint or the partition content"):
        CacheKey.build(partition=LITE, input_shapes=SHAPES, model_name="m")


def test_key_rejects_open_dims_and_non_json_options():
    with pytest.raises(CacheError, match="'image'.*concrete"):
        make_key(shapes={"image": (-1, 3, 56, 56)})
    with pytest.raises(CacheError, match="option pool"):
        CacheKey.build(partition=LITE, input_shapes=SHAPES, options={"pool": object()},
                       model_name="m", fingerprint=FINGERPRINT)


def test_partition_signature_names_nodes_and_ops():
    pairs = [(n.name, n.op) for n in LITE.nodes]
    assert partition_signature(pairs) == partition_signature(list(pairs))
    assert partition_signature(pairs) != partition_signature(pairs[:-1])
    assert partition_signature(LITE) != partition_signature(pairs)  # the model adds its I/O


def cache_options(options: dict) -> CacheOptions:
    return NpuOptions.parse(options).cache


def test_options_accept_both_spellings(tmp_path):
    ours = cache_options({"cache_dir": str(tmp_path), "model_name": "m",
                          "cache_version": "2", "cache_max_bytes": "4096"})
    mindspore = cache_options({"CachePath": tmp_path, "ModelName": "m",
                               "CacheVersion": "2", "cache_max_bytes": 4096})
    assert ours == mindspore == CacheOptions(tmp_path, "m", "2", 4096)
    assert cache_options({}) == CacheOptions()
    assert CompileCache.from_options(CacheOptions()) is None
    cache = CompileCache.from_options(ours)
    assert (cache.dir, cache.max_bytes, cache.cache_version) == (tmp_path, 4096, "2")
    assert cache_options({"cache_dir": "~/x"}).cache_dir == Path.home() / "x"


def test_options_errors_name_the_key():
    with pytest.raises(InvalidOptionError) as info:
        cache_options({"cachepath": "/tmp"})
    assert "'cachepath'" in str(info.value)
    assert all(k in str(info.value) for k in ("cache_dir", "CachePath", "ModelName",
                                              "CacheVersion", "cache_max_bytes"))
    with pytest.raises(InvalidOptionError, match="disagree"):
        cache_options({"cache_dir": "/a", "CachePath": "/b"})
    with pytest.raises(InvalidOptionError, match="cache_max_bytes"):
        cache_options({"cache_max_bytes": "-1"})
    with pytest.raises(InvalidOptionError, match="ModelName"):
        cache_options({"ModelName": 3})


# ---- hits and misses -----------------------------------------------------------------------


def test_second_call_is_a_hit_with_identical_outputs(tmp_path, reference):
    cache = CompileCache(tmp_path)
    compiler = Compiler()
    first, miss = cache.get_or_compile(make_key(), compiler)
    assert miss.status is CacheStatus.MISS and compiler.calls == 1
    assert miss.entry == cache.path(make_key()) and miss.compile_seconds > 0
    second, hit = cache.get_or_compile(make_key(), compiler)
    assert hit.status is CacheStatus.HIT and hit.reason == "" and compiler.calls == 1
    assert hit.compile_seconds == 0.0 and hit.load_seconds > 0
    assert hit.describe().startswith("hit: loaded in ") and "compiled" not in hit.describe()
    assert miss.describe().startswith("miss: compiled in ")
    assert np.array_equal(run(first), reference)
    assert np.array_equal(run(second), reference)
    assert cache.get(make_key()) is not None
    cache.verify_entry(make_key())


def test_manifest_records_versions_sizes_and_io(tmp_path):
    cache = CompileCache(tmp_path, cache_version="7")
    path = cache.put(make_key(), compile_model(LITE, SHAPES), extra_files={"ctx.onnx": b"ctx"})
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format_version"] == fmt.FORMAT_VERSION
    assert manifest["cache_version"] == "7" and manifest["model_name"] == "resnet_block"
    assert manifest["key"] == make_key().to_dict()
    assert manifest["inputs"] == [{"name": "image", "dtype": "float32", "shape": [1, 3, 56, 56]}]
    assert manifest["outputs"] == [{"name": "logits", "dtype": "float32", "shape": [1, 10]}]
    files = manifest["files"]
    assert files["program.lnp"]["size"] == (path / "program.lnp").stat().st_size
    assert files["ctx.onnx"]["size"] == 3 and (path / "ctx.onnx").read_bytes() == b"ctx"
    assert sorted(os.listdir(tmp_path)) == [path.name]  # no temp directory left


@pytest.mark.parametrize("change", ["shapes", "options"])
def test_changed_shapes_or_options_miss(tmp_path, change):
    cache = CompileCache(tmp_path)
    cache.get_or_compile(make_key(), Compiler())
    shapes = {"image": (2, 3, 56, 56)} if change == "shapes" else SHAPES
    compiler = Compiler(shapes, fp16=change == "options")
    program, outcome = cache.get_or_compile(make_key(shapes, fp16=change == "options"), compiler)
    assert outcome.status is CacheStatus.MISS and compiler.calls == 1
    assert len(cache.entries()) == 2
    if change == "shapes":
        batch = np.concatenate([IMAGE, IMAGE[:, ::-1]])
        assert_matches(run(program, batch), run_ort(MODEL, {"image": batch})[0])


def test_changed_cache_version_rebuilds_in_place(tmp_path, reference, caplog):
    CompileCache(tmp_path, cache_version="1").get_or_compile(make_key(), Compiler())
    cache = CompileCache(tmp_path, cache_version="2")
    compiler = Compiler()
    program, outcome = cache.get_or_compile(make_key(), compiler)
    assert outcome.status is CacheStatus.REBUILT and compiler.calls == 1
    assert "cache_version '1'" in outcome.reason and any("'2'" in w for w in warnings_of(caplog))
    assert np.array_equal(run(program), reference)
    assert [e.cache_version for e in cache.entries()] == ["2"]


def test_hit_maps_weights_without_reading_them(tmp_path):
    cache = CompileCache(tmp_path)
    cache.put(make_key(), compile_model(LITE, SHAPES))
    program, outcome = cache.get_or_compile(make_key(), Compiler())
    assert outcome.status is CacheStatus.HIT
    assert outcome.weight_pages == -(-program.weight_bytes // os.sysconf("SC_PAGE_SIZE"))
    if outcome.pages_touched is None:
        pytest.skip("/proc/self/pagemap is not readable here")
    # The kernel may map neighbours of the header page (fault-around, large folios); running
    # the program touches every weight page, which the measurement must see.
    assert 0 <= outcome.pages_touched <= outcome.weight_pages
    run(program)
    assert pages_present(program.weights_array()) == outcome.weight_pages


def test_copied_entry_is_verified_once_and_restamped(tmp_path, reference, caplog):
    source = CompileCache(tmp_path / "a")
    source.put(make_key(), compile_model(LITE, SHAPES))
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # new inodes and mtimes
    copy = CompileCache(tmp_path / "b")
    before = json.loads((copy.path(make_key()) / "manifest.json").read_text())
    program, outcome = copy.get_or_compile(make_key(), Compiler())
    assert outcome.status is CacheStatus.HIT and not warnings_of(caplog)
    after = json.loads((copy.path(make_key()) / "manifest.json").read_text())
    assert before["files"]["program.lnp"]["ino"] != after["files"]["program.lnp"]["ino"]
    assert after["files"]["program.lnp"]["ino"] == (copy.path(make_key()) / "program.lnp").stat().st_ino
    assert np.array_equal(run(program), reference)
    copy.verify_entry(make_key())


# ---- every bad entry is rebuilt, never used -------------------------------------------------


def _writable(path: Path) -> Path:
    """An entry file made writable again (litenpu installs them read-only): these tests play
    the part of another program changing the cache behind litenpu's back."""
    os.chmod(path, 0o644)
    return path


def _flip(path: Path, offset: int) -> None:
    with open(_writable(path), "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def _truncate(d: Path) -> None:
    size = (d / "program.lnp").stat().st_size
    os.truncate(_writable(d / "program.lnp"), size // 2)


def _flip_weights(d: Path) -> None:
    _flip(d / "program.lnp", (d / "program.lnp").stat().st_size - 100)


def _flip_metadata(d: Path) -> None:
    _flip(d / "program.lnp", 200)


def _flip_manifest_byte(d: Path) -> None:
    _flip(d / "manifest.json", (d / "manifest.json").stat().st_size // 2)


def _edit_manifest_value(d: Path) -> None:
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["outputs"][0]["shape"] = [1, 11]  # still valid JSON: the checksum catches it
    (d / "manifest.json").write_text(json.dumps(manifest))


def _reformat_manifest(d: Path) -> None:
    manifest = json.loads((d / "manifest.json").read_bytes())
    (d / "manifest.json").write_text(json.dumps(manifest, indent=1))  # same JSON, other bytes


def _delete_program(d: Path) -> None:
    (d / "program.lnp").unlink()


def _delete_manifest(d: Path) -> None:
    (d / "manifest.json").unlink()


def _entry_is_a_file(d: Path) -> None:
    shutil.rmtree(d)
    d.write_bytes(b"not a directory")


def _flip_extra(d: Path) -> None:
    _flip(d / "ctx.onnx", 0)


CORRUPTIONS = {
    "truncated program": (_truncate, "truncated"),
    "flipped weight byte": (_flip_weights, "sha256 mismatch"),
    "flipped metadata byte": (_flip_metadata, "sha256 mismatch"),
    "flipped manifest byte": (_flip_manifest_byte, "manifest"),
    "edited manifest": (_edit_manifest_value, "manifest checksum mismatch"),
    "reformatted manifest": (_reformat_manifest, "manifest was rewritten"),
    "deleted program": (_delete_program, "program.lnp: No such file"),
    "deleted manifest": (_delete_manifest, "manifest unreadable"),
    "entry replaced by a file": (_entry_is_a_file, "manifest unreadable"),
    "flipped extra file": (_flip_extra, "ctx.onnx: content changed"),
}


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_corrupt_entry_is_logged_and_rebuilt(tmp_path, reference, caplog, name):
    corrupt, reason = CORRUPTIONS[name]
    cache = CompileCache(tmp_path)
    cache.put(make_key(), compile_model(LITE, SHAPES), extra_files={"ctx.onnx": b"context"})
    corrupt(cache.path(make_key()))
    assert cache.get(make_key()) is None
    with pytest.raises(BadEntry, match=reason):
        cache.verify_entry(make_key())
    caplog.clear()
    compiler = Compiler()
    program, outcome = cache.get_or_compile(make_key(), compiler)
    assert outcome.status is CacheStatus.REBUILT and compiler.calls == 1
    assert reason in outcome.reason
    assert any(reason in w for w in warnings_of(caplog)), warnings_of(caplog)
    assert np.array_equal(run(program), reference)
    cache.verify_entry(make_key())  # replaced by a good entry ...
    assert cache.get_or_compile(make_key(), compiler)[1].status is CacheStatus.HIT  # ... used
    assert sorted(os.listdir(tmp_path)) == [make_key().digest]


def test_entry_of_the_first_manifest_version_is_stale_not_rewritten(tmp_path, reference, caplog):
    """Manifest version 1 was indented JSON: such an entry is reported stale and rebuilt."""
    cache = CompileCache(tmp_path)
    cache.put(make_key(), compile_model(LITE, SHAPES))
    path = cache.path(make_key()) / entry_mod.MANIFEST
    manifest = json.loads(path.read_bytes())
    del manifest["checksum"]
    manifest["manifest_version"] = 1
    manifest["checksum"] = entry_mod._checksum(manifest)
    path.unlink()
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    with pytest.raises(BadEntry, match="stale entry: manifest_version 1"):
        cache.verify_entry(make_key())
    program, outcome = cache.get_or_compile(make_key(), Compiler())
    assert outcome.status is CacheStatus.REBUILT and "manifest_version 1" in outcome.reason
    assert np.array_equal(run(program), reference)


@pytest.mark.parametrize("field", ["format_version", "litenpu_version"])
def test_stale_entry_is_rebuilt(tmp_path, reference, caplog, monkeypatch, field):
    cache = CompileCache(tmp_path)
    with monkeypatch.context() as m:
        if field == "format_version":  # an older litenpu's entry: manifest and program header
            m.setattr(fmt, "FORMAT_VERSION", fmt.FORMAT_VERSION - 1)
        else:
            m.setattr(entry_mod, "__version__", "0.0.1")
        cache.put(make_key(), compile_model(LITE, SHAPES))
    with pytest.raises(BadEntry, match=f"stale entry: {field}"):
        cache.verify_entry(make_key())
    program, outcome = cache.get_or_compile(make_key(), Compiler())
    assert outcome.status is CacheStatus.REBUILT and f"stale entry: {field}" in outcome.reason
    assert any(field in w for w in warnings_of(caplog))
    assert np.array_equal(run(program), reference)
    cache.verify_entry(make_key())


@settings(max_examples=15, deadline=None)
@given(file=st.sampled_from(["program.lnp", "manifest.json"]), where=st.floats(0, 1),
       bit=st.integers(0, 7))
def test_a_flipped_bit_anywhere_is_rebuilt(reference, file, where, bit):
    with tempfile.TemporaryDirectory() as d:
        cache = CompileCache(d)
        path = cache.put(make_key(), compile_model(LITE, SHAPES)) / file
        offset = min(int(where * path.stat().st_size), path.stat().st_size - 1)
        data = bytearray(path.read_bytes())
        data[offset] ^= 1 << bit
        with open(path, "r+b") as f:  # in place: same inode and size, new mtime
            f.write(data)
        program, outcome = cache.get_or_compile(make_key(), Compiler())
        assert outcome.status is CacheStatus.REBUILT, (file, offset)
        assert np.array_equal(run(program), reference)


def test_tampering_that_restores_mtime_is_caught_by_full_verify(tmp_path):
    """The hit path trusts (size, mtime, inode) and does not hash weights (see entry.py);
    `verify_entry` (litenpu cache verify) hashes every byte."""
    cache = CompileCache(tmp_path)
    path = cache.put(make_key(), compile_model(LITE, SHAPES)) / "program.lnp"
    st = path.stat()
    _flip(path, st.st_size - 100)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.get(make_key()) is not None
    with pytest.raises(BadEntry, match="sha256 mismatch"):
        cache.verify_entry(make_key())


# ---- caches that cannot be written ----------------------------------------------------------


def _under_a_file(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "file").write_bytes(b"")
    return tmp_path / "file" / "cache"  # mkdir: ENOTDIR, even for root


def _chmod_read_only(tmp_path: Path, monkeypatch) -> Path:
    if os.geteuid() == 0:
        pytest.skip("root writes through chmod 0555 (the other cases cover it)")
    (tmp_path / "cache").mkdir(mode=0o555)
    return tmp_path / "cache"


def _read_only(tmp_path: Path, monkeypatch) -> Path:
    def rename(src, dst):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(src))

    monkeypatch.setattr(os, "rename", rename)
    return tmp_path / "cache"


def _full(tmp_path: Path, monkeypatch) -> Path:
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)
    return tmp_path / "cache"


@pytest.mark.parametrize("make_dir, reason", [(_under_a_file, "Not a directory"),
                                              (_chmod_read_only, "Permission denied"),
                                              (_read_only, "Read-only file system"),
                                              (_full, "No space left on device")])
def test_unwritable_cache_compiles_in_memory_with_one_warning(tmp_path, monkeypatch, caplog,
                                                              reference, make_dir, reason):
    cache = CompileCache(make_dir(tmp_path, monkeypatch))
    for shapes in (SHAPES, {"image": (2, 3, 56, 56)}, SHAPES):
        compiler = Compiler(shapes)
        program, outcome = cache.get_or_compile(make_key(shapes), compiler)
        assert outcome.status is CacheStatus.IN_MEMORY and compiler.calls == 1
        assert reason in outcome.reason and outcome.entry is None
        assert outcome.pages_touched is None
        assert outcome.describe() == (f"in-memory: compiled in {outcome.compile_seconds * 1e3:.1f}"
                                      f" ms ({outcome.reason})")
    assert np.array_equal(run(program), reference)
    warnings = warnings_of(caplog)
    assert len(warnings) == 1 and reason in warnings[0] and "in memory" in warnings[0]
    if cache.dir.is_dir():
        assert os.listdir(cache.dir) == []  # nothing half written


def test_read_only_cache_still_serves_hits(tmp_path, monkeypatch, reference):
    cache = CompileCache(tmp_path)
    cache.put(make_key(), compile_model(LITE, SHAPES))

    def utime(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "utime", utime)
    program, outcome = cache.get_or_compile(make_key(), Compiler())
    assert outcome.status is CacheStatus.HIT
    assert np.array_equal(run(program), reference)


def test_bad_entry_in_a_read_only_cache(tmp_path, monkeypatch, caplog, reference):
    cache = CompileCache(tmp_path)
    _truncate(cache.put(make_key(), compile_model(LITE, SHAPES)))
    _read_only(tmp_path, monkeypatch)
    program, outcome = cache.get_or_compile(make_key(), Compiler())
    assert outcome.status is CacheStatus.IN_MEMORY
    assert "truncated" in outcome.reason and "Read-only" in outcome.reason
    assert np.array_equal(run(program), reference)


def test_failed_write_leaves_no_entry_and_no_temp(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError(errno.EIO, "simulated crash in the middle of writing")

    monkeypatch.setattr(entry_mod, "_write_manifest", fail)
    cache = CompileCache(tmp_path)
    with pytest.raises(CacheError, match="simulated crash"):
        cache.put(make_key(), compile_model(LITE, SHAPES))
    assert os.listdir(tmp_path) == []


def test_crashed_writers_temp_dirs_are_cleaned_when_stale(tmp_path):
    old, fresh = tmp_path / ".tmp-deadbeef-x", tmp_path / ".trash-0123-y"
    for d in (old, fresh):
        d.mkdir()
        (d / "program.lnp").write_bytes(b"partial")
    os.utime(old, (os.path.getmtime(old) - 3600,) * 2)
    CompileCache(tmp_path).put(make_key(), compile_model(LITE, SHAPES))
    assert not old.exists() and fresh.exists()


def test_installed_entry_files_are_read_only(tmp_path):
    """Sessions map program.lnp: no one should write an installed entry in place."""
    directory = CompileCache(tmp_path).put(make_key(), compile_model(LITE, SHAPES))
    assert {f.name: f.stat().st_mode & 0o777 for f in directory.iterdir()} == {
        entry_mod.PROGRAM: 0o444, entry_mod.MANIFEST: 0o444, entry_mod.LOWERED: 0o444}


def test_put_rejects_bad_extra_file_names(tmp_path):
    cache = CompileCache(tmp_path)
    for name in ("program.lnp", "lowered.bin", "../x", ".hidden", ""):
        with pytest.raises(CacheError, match="extra file name"):
            cache.put(make_key(), compile_model(LITE, SHAPES), extra_files={name: b"x"})
    assert os.listdir(tmp_path) == []


# ---- eviction ------------------------------------------------------------------------------


def _shapes(batch: int) -> dict:
    return {"image": (batch, 3, 56, 56)}


def test_lru_eviction_keeps_the_cache_under_max_bytes(tmp_path):
    program = compile_model(LITE, SHAPES)
    probe = CompileCache(tmp_path / "probe")
    size = sum(f.stat().st_size for f in probe.put(make_key(), program).iterdir())
    cache = CompileCache(tmp_path / "c", max_bytes=int(2.5 * size))
    a, b, c = (make_key(_shapes(n)) for n in (1, 2, 3))
    cache.get_or_compile(a, Compiler(_shapes(1)))
    cache.get_or_compile(b, Compiler(_shapes(2)))
    assert cache.get_or_compile(a, Compiler(_shapes(1)))[1].status is CacheStatus.HIT  # a used
    cache.get_or_compile(c, Compiler(_shapes(3)))
    names = {e.name for e in cache.entries()}
    assert names == {a.digest, c.digest}  # b was the least recently used
    assert cache.total_bytes() <= cache.max_bytes


def test_eviction_never_removes_the_entry_being_returned(tmp_path, reference):
    cache = CompileCache(tmp_path, max_bytes=1)
    cache.get_or_compile(make_key(_shapes(2)), Compiler(_shapes(2)))
    program, outcome = cache.get_or_compile(make_key(), Compiler())
    assert outcome.status is CacheStatus.MISS
    assert [e.name for e in cache.entries()] == [make_key().digest]
    assert np.array_equal(run(program), reference)


def test_clear_all_or_one_model(tmp_path):
    cache = CompileCache(tmp_path)
    cache.put(make_key(model_name="a"), compile_model(LITE, SHAPES))
    cache.put(make_key(model_name="b"), compile_model(LITE, SHAPES))
    assert cache.clear("a") == 1
    assert [e.model_name for e in cache.entries()] == ["b"]
    assert cache.clear() == 1 and cache.entries() == []
