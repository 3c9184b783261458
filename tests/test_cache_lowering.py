"""A cache entry's stored lowering (`lowered.bin`): a hit's Executor reads its native steps
instead of lowering the Program again, gets the same steps and the same outputs bit for bit,
and any stored lowering that does not fit (corrupt, truncated, another library's, another
Program's, a step that is not this Program's) is lowered again, logged, with the same outputs.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from npu_oracle import pool

from converters.onnx_import import import_onnx
from provider.cache import CacheKey, CompileCache
from provider.cache import entry as entry_mod
from provider.npu import native, native_steps
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor
from provider.npu.native_steps import NativeRun

pytestmark = pytest.mark.skipif(native.library() is None, reason="needs the native library")

MODEL = onnx.load(Path(__file__).parent.parent / "models" / "resnet_block.onnx")
LITE, _ = import_onnx(MODEL)
SHAPES = {"image": (1, 3, 56, 56)}
IMAGE = np.random.default_rng(11).standard_normal(SHAPES["image"]).astype(np.float32)
HEADER = struct.Struct("<8sIII16sI")  # native_steps' lowered.bin header


def key() -> CacheKey:
    return CacheKey.build(partition=LITE, input_shapes=SHAPES, options={},
                          model_name="resnet_block", fingerprint="ab" * 32)


def run(program) -> np.ndarray:
    with Executor(program, pool()) as ex:
        return np.array(ex.run([IMAGE])[0])


def as_bytes(segments) -> list:
    """Segments comparable by value: numpy step numbers, native runs as their first step and
    their steps' bytes."""
    return [(s.first, [bytes(s.steps[i]) for i in range(len(s.steps))])
            if isinstance(s, NativeRun) else s for s in segments]


def fresh_segments(program) -> list:
    program.lowered = None
    return native_steps.segments(program)


@pytest.fixture
def stored(tmp_path):
    """(the cache, the entry's directory, the freshly compiled Program's outputs)."""
    cache = CompileCache(tmp_path)
    program = compile_model(LITE, SHAPES)
    expected = run(program)
    return cache, cache.put(key(), program), expected


def test_a_hit_runs_the_stored_lowering_without_lowering(stored):
    cache, directory, expected = stored
    assert (directory / entry_mod.LOWERED).stat().st_mode & 0o777 == 0o444
    hit = cache.get(key())
    assert hit.lowered == (directory / entry_mod.LOWERED).read_bytes()
    lowered, read = native_steps.stats.lowered, native_steps.stats.read
    got = run(hit)
    assert (native_steps.stats.lowered, native_steps.stats.read) == (lowered, read + 1)
    assert got.tobytes() == expected.tobytes()
    assert as_bytes(native_steps.segments(cache.get(key()))) == as_bytes(
        fresh_segments(cache.get(key())))


def mixed():
    """A Lite graph whose Program has a numpy step between native ones: conv + Relu, a
    Sign (no native kernel), conv; and its input shapes."""
    rng = np.random.default_rng(12)
    weights = [onnx.numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), name)
               for name in ("w1", "w2")]
    nodes = [onnx.helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1] * 4),
             onnx.helper.make_node("Relu", ["c"], ["r"]),
             onnx.helper.make_node("Sign", ["r"], ["s"]),
             onnx.helper.make_node("Conv", ["s", "w2"], ["y"], pads=[1] * 4)]
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(nodes, "mixed", [value("x", onnx.TensorProto.FLOAT, [1, 4, 6, 6])],
                                   [value("y", onnx.TensorProto.FLOAT, [1, 4, 6, 6])], weights)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    return import_onnx(model)[0], {"x": (1, 4, 6, 6)}


def test_numpy_steps_keep_their_places_in_a_stored_lowering():
    """A Program with numpy steps between native runs."""
    lite, shapes = mixed()
    program = compile_model(lite, shapes)
    fresh = native_steps.segments(program)
    assert any(not isinstance(s, NativeRun) for s in fresh)
    assert any(isinstance(s, NativeRun) for s in fresh)
    blob = native_steps.encode(program)
    again = compile_model(lite, shapes)
    again.lowered = blob
    read = native_steps.stats.read
    assert as_bytes(native_steps.segments(again)) == as_bytes(fresh)
    assert native_steps.stats.read == read + 1


def _with_crc(blob: bytes, body: bytes) -> bytes:
    """blob's header over a new body, with the body's checksum."""
    fields = list(HEADER.unpack_from(blob))
    fields[-1] = zlib.crc32(body)
    return HEADER.pack(*fields) + body


def _edit_step(blob: bytes, word: int, value: int) -> bytes:
    """The first native step's int64 `word` (0: op, 1..: slots) set to value, checksummed."""
    _, _, step_bytes, count, _, _ = HEADER.unpack_from(blob)
    body = bytearray(blob[HEADER.size:])
    first = count  # the first native step's bytes start after the flags
    struct.pack_into("<q", body, first + 8 * word, value)
    return _with_crc(blob, bytes(body))


def _other_abi(blob: bytes) -> bytes:
    fields = list(HEADER.unpack_from(blob))
    fields[4] = bytes(16)
    return HEADER.pack(*fields) + blob[HEADER.size:]


def _other_program(blob: bytes) -> bytes:
    return native_steps.encode(compile_model(*mixed()))


BAD = {
    "a flipped byte": lambda b: b[:-5] + bytes([b[-5] ^ 0x40]) + b[-4:],
    "truncated": lambda b: b[: len(b) // 2],
    "empty": lambda b: b"",
    "another magic": lambda b: b"NOTLOWER" + b[8:],
    "another library": _other_abi,
    "another Program": _other_program,
    "an unknown op": lambda b: _edit_step(b, 0, 9999),
    "a slot out of range": lambda b: _edit_step(b, 1, 10**6),
    "a flag that is not 0 or 1": lambda b: _with_crc(b, bytes([7]) + b[HEADER.size + 1:]),
}


@pytest.mark.parametrize("damage", list(BAD), ids=str)
def test_a_stored_lowering_that_does_not_fit_is_lowered_again(damage, caplog):
    """The Executor lowers the Program again, says why, and computes the same outputs."""
    program = compile_model(LITE, SHAPES)
    expected = run(program)
    program.lowered = BAD[damage](native_steps.encode(program))
    lowered = native_steps.stats.lowered
    with caplog.at_level(logging.INFO, logger="litenpu.npu"):
        got = run(program)
    assert native_steps.stats.lowered == lowered + len(program.steps)
    assert "stored lowering is not used" in caplog.text
    assert got.tobytes() == expected.tobytes()


def test_an_entry_whose_lowering_was_damaged_in_place_runs_lowered_again(stored, caplog):
    """A byte changed with the file's stamp kept (the hit path hashes no file then): the
    entry is used, its lowering is not."""
    cache, directory, expected = stored
    path = directory / entry_mod.LOWERED
    st = path.stat()
    os.chmod(path, 0o644)
    path.write_bytes(BAD["a flipped byte"](path.read_bytes()))
    os.chmod(path, 0o444)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    hit = cache.get(key())
    assert hit is not None and hit.lowered is not None
    with caplog.at_level(logging.INFO, logger="litenpu.npu"):
        assert run(hit).tobytes() == expected.tobytes()
    assert "stored lowering is not used" in caplog.text


def test_without_the_native_library_no_lowering_is_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "library", lambda: None)
    directory = CompileCache(tmp_path).put(key(), compile_model(LITE, SHAPES))
    assert not (directory / entry_mod.LOWERED).exists()
