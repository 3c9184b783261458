"""The Program format: round trips, in-place weights from an mmap, every corruption detected."""

import mmap
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.errors import CacheError, InvalidModelError
from provider.npu import program as fmt
from provider.npu.program import FORMAT_VERSION, Program, Slot, Step


def make_program() -> Program:
    """y = relu(x @ w + b) with a scratch tensor in the arena; weights packed at 64 B."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    blob = np.zeros(128, np.uint8)
    blob[: w.nbytes] = w.view(np.uint8).ravel()
    blob[64 : 64 + b.nbytes] = b.view(np.uint8)
    slots = [
        Slot.of("x", "float32", (2, 4), "input"),
        Slot.of("w", "float32", (4, 3), "weight", 0),
        Slot.of("b", np.float32, (3,), "weight", 64),
        Slot.of("t", "float32", (2, 3), "internal", 0),
        Slot.of("y", "float32", (2, 3), "output"),
    ]
    steps = [
        Step("matmul", {"transpose_b": False, "alpha": 1.5, "axes": [0, 1]}, [0, 1], [3]),
        Step("add_relu", {"activation_type": "RELU"}, [3, 2], [4]),
    ]
    return Program(slots, steps, [0], [4], blob.tobytes(), 64, {"enable_fp16": False}, "mlp")


def assert_same_program(a: Program, b: Program) -> None:
    """Everything but the weights' container type is equal."""
    assert a.slots == b.slots
    assert a.steps == b.steps
    assert (a.inputs, a.outputs, a.internal_bytes, a.options, a.name) == (
        b.inputs, b.outputs, b.internal_bytes, b.options, b.name)
    assert a.weights_array().tobytes() == b.weights_array().tobytes()


def test_slot_of_and_sizes():
    p = make_program()
    assert p.slots[2] == Slot("b", "float32", (3,), "weight", 64, 12)
    assert p.weight_bytes == 128
    assert p.io_bytes == 2 * 4 * 4 + 2 * 3 * 4


def test_round_trip_bytes():
    p = make_program()
    q = fmt.from_bytes(fmt.to_bytes(p))
    assert_same_program(p, q)
    assert not q.weights_array().flags.writeable


def test_weights_start_page_aligned_and_views_are_typed():
    data = fmt.to_bytes(make_program())
    (w_off,) = struct.unpack_from("<Q", data, 32)
    assert w_off % fmt.WEIGHTS_ALIGNMENT == 0
    q = fmt.from_bytes(data)
    w = fmt.view_slot(q.weights_array(), q.slots[1])
    assert w.shape == (4, 3) and w.dtype == np.float32
    expected = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_array_equal(w, expected)


def test_save_load_mmap_uses_weights_in_place(tmp_path):
    path = tmp_path / "p.lnp"
    fmt.save(make_program(), path)
    assert [f.name for f in tmp_path.iterdir()] == ["p.lnp"]  # no temp file left behind
    assert path.stat().st_mode & 0o777 == 0o666 & ~fmt._UMASK
    q = fmt.load(path)
    assert_same_program(make_program(), q)
    base = q.weights
    while not isinstance(base, mmap.mmap):  # ndarray.base -> memoryview.obj -> the map
        base = base.obj if isinstance(base, memoryview) else base.base
    whole = np.frombuffer(base, np.uint8)
    assert np.shares_memory(fmt.view_slot(q.weights_array(), q.slots[1]), whole)
    assert fmt.load(path, mmap=False).weights_array().tobytes() == q.weights_array().tobytes()


def test_empty_program_round_trips(tmp_path):
    p = Program([], [], [], [], b"", 0, {}, "empty")
    fmt.save(p, tmp_path / "e")
    q = fmt.load(tmp_path / "e")
    assert_same_program(p, q)
    assert q.weight_bytes == 0


def test_attrs_keep_json_types():
    q = fmt.from_bytes(fmt.to_bytes(make_program()))
    attrs = q.steps[0].attrs
    assert attrs == {"transpose_b": False, "alpha": 1.5, "axes": [0, 1]}
    assert isinstance(attrs["transpose_b"], bool)


def corrupt(data: bytes, at: int) -> bytes:
    buf = bytearray(data)
    buf[at] ^= 0x40
    return bytes(buf)


def header_field(data: bytes, offset: int) -> int:
    return struct.unpack_from("<Q", data, offset)[0]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: b"NOTAPROG" + d[8:], "bad magic"),
        (lambda d: d[:8] + struct.pack("<I", FORMAT_VERSION + 1) + d[12:],
         f"format version {FORMAT_VERSION + 1}"),
        (lambda d: d[:8] + struct.pack("<I", 0) + d[12:], "format version 0"),
        (lambda d: d[:5], "truncated"),
        (lambda d: d[:40], "truncated"),
        (lambda d: d[:-1], "truncated"),
        (lambda d: corrupt(d, 20), "header checksum"),
        (lambda d: corrupt(d, header_field(d, 16) + 5), "metadata checksum"),
        (lambda d: corrupt(d, header_field(d, 32) + 70), "weights checksum"),
        (lambda d: b"", "truncated"),
    ],
)
def test_corruption_is_detected(mutate, message):
    data = mutate(fmt.to_bytes(make_program()))
    with pytest.raises(CacheError, match=message):
        fmt.from_bytes(data)


@pytest.mark.parametrize("version", [1, 2])
def test_files_of_older_versions_still_load(version):
    """Version 2 only added a conv weight order (conv_weights) that version 1 files do not
    use, and version 3 only changed the digests (SHA-256 for BLAKE2b): older files, with
    their BLAKE2b digests, load as they are, verified. (The header CRC covers the version
    field.)"""
    data = bytearray(fmt.to_bytes(make_program()))
    _, _, _, meta_off, meta_size, w_off, w_size, _, _ = fmt._HEADER.unpack_from(data)
    digests = [fmt._digest(bytes(data[meta_off:meta_off + meta_size]), version),
               fmt._digest(bytes(data[w_off:w_off + w_size]), version)]
    assert digests != [fmt._digest(bytes(data[meta_off:meta_off + meta_size])),
                       fmt._digest(bytes(data[w_off:w_off + w_size]))]
    fields = list(fmt._HEADER.unpack_from(data))
    fields[1], fields[-2:] = version, digests
    fmt._HEADER.pack_into(data, 0, *fields)
    crc_at = fmt._HEADER.size
    struct.pack_into("<I", data, crc_at, zlib.crc32(bytes(data[:crc_at])))
    assert fmt.from_bytes(bytes(data), verify=True).steps == make_program().steps
    data[w_off] ^= 0xFF  # and their digests are checked
    with pytest.raises(CacheError, match="weights checksum"):
        fmt.from_bytes(bytes(data), verify=True)


def test_verify_false_skips_only_the_weight_hash():
    data = fmt.to_bytes(make_program())
    flipped = corrupt(data, header_field(data, 32) + 70)
    fmt.from_bytes(flipped, verify=False)  # cache-hit path: the manifest vouches for weights
    with pytest.raises(CacheError, match="metadata checksum"):
        fmt.from_bytes(corrupt(data, header_field(data, 16) + 5), verify=False)


def test_corrupt_file_names_the_path(tmp_path):
    path = tmp_path / "bad.lnp"
    path.write_bytes(b"LNPUPROG")
    with pytest.raises(CacheError, match="bad.lnp.*truncated"):
        fmt.load(path)
    path.write_bytes(b"")
    with pytest.raises(CacheError, match="truncated"):
        fmt.load(path)
    with pytest.raises(CacheError, match="cannot read"):
        fmt.load(tmp_path / "missing.lnp")


def test_failed_save_leaves_no_temp_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "p.lnp"
    fmt.save(make_program(), path)
    before = path.read_bytes()

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fmt.os, "fsync", full_disk)
    with pytest.raises(CacheError, match="No space left"):
        fmt.save(Program([], [], [], [], b"", 0, {}, "other"), path)
    assert [f.name for f in tmp_path.iterdir()] == ["p.lnp"]
    assert path.read_bytes() == before


def test_save_into_missing_directory_is_a_cache_error(tmp_path):
    with pytest.raises(CacheError, match="cannot write"):
        fmt.save(make_program(), tmp_path / "no" / "such" / "p.lnp")


def broken(**changes) -> Program:
    p = make_program()
    for key, value in changes.items():
        setattr(p, key, value)
    return p


@pytest.mark.parametrize(
    "program, message",
    [
        (broken(internal_bytes=10), r"slot 3 \('t'\).*arena"),
        (broken(weights=b"\0" * 64), r"slot 2 \('b'\).*weight blob"),
        (broken(inputs=[4]), "not an input slot"),
        (broken(outputs=[]), "do not match the output slots"),
        (broken(steps=[Step("k", {}, [0], [9])]), "uses slot 9"),
        (broken(steps=[Step("k", {}, [3], [1])]), "writes weight slot 1"),
        (broken(steps=[Step("", {}, [], [])]), "non-empty string"),
        (broken(slots=[Slot("x", "float32", (2,), "input", -1, 4)]), "nbytes 4, expected 8"),
        (broken(slots=[Slot("x", "float32", (2,), "bogus", -1, 8)]), "kind 'bogus'"),
        (broken(slots=[Slot("x", "nope", (2,), "input", -1, 8)]), "unknown dtype"),
        (broken(slots=[Slot("x", "float32", (2,), "input", 0, 8)]), "offset -1"),
        (broken(steps=[Step("k", {"f": object()}, [0], [4])]), "JSON"),
    ],
)
def test_inconsistent_programs_are_rejected(program, message):
    with pytest.raises(InvalidModelError, match=message):
        fmt.to_bytes(program)


def with_metadata(meta: bytes) -> bytes:
    """A Program file whose header points at `meta` (appended), checksums valid: a forgery."""
    out = bytearray(fmt.to_bytes(make_program())) + meta
    struct.pack_into("<QQ", out, 16, len(out) - len(meta), len(meta))
    struct.pack_into("<16s", out, 48, fmt._digest(meta))
    struct.pack_into("<I", out, 80, fmt.zlib.crc32(bytes(out[:80])))
    return bytes(out)


def original_metadata() -> bytes:
    data = fmt.to_bytes(make_program())
    return data[header_field(data, 16) : header_field(data, 16) + header_field(data, 24)]


@pytest.mark.parametrize(
    "meta, message",
    [
        (original_metadata().replace(b'"internal_bytes":64', b'"internal_bytes":10'), "arena"),
        (b"[1, 2]", "inconsistent metadata"),
        (b"{}", "inconsistent metadata: 'slots'"),
        (b"\xff\xfe", "inconsistent metadata"),
        (b"[" * 100_000 + b"]" * 100_000, "inconsistent metadata"),
        (original_metadata().replace(b'"slots":[', b'"slots":[7,'), "inconsistent metadata"),
    ],
    ids=["arena-overflow", "not-an-object", "missing-keys", "not-utf8", "deep-nesting", "bad-slot"],
)
def test_forged_metadata_is_a_cache_error(meta, message):
    with pytest.raises(CacheError, match=message):
        fmt.from_bytes(with_metadata(meta))


ENCODED = fmt.to_bytes(make_program())
META_END = header_field(ENCODED, 16) + header_field(ENCODED, 24)
WEIGHTS_AT = header_field(ENCODED, 32)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(0, META_END - 1), st.integers(WEIGHTS_AT, len(ENCODED) - 1),
                 st.integers(META_END, WEIGHTS_AT - 1)),
       st.integers(1, 255))
def test_property_any_flipped_byte_is_detected_or_harmless(at, xor):
    data = bytearray(ENCODED)
    data[at] ^= xor
    try:
        q = fmt.from_bytes(bytes(data))
    except CacheError:
        return
    assert_same_program(make_program(), q)  # only the zero padding is not checksummed


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(ENCODED) - 1))
def test_property_every_truncation_is_a_cache_error(length):
    with pytest.raises(CacheError):
        fmt.from_bytes(ENCODED[:length])
