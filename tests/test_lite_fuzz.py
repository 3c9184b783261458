"""Fuzzing the .ms reader: mutated valid files either load or raise InvalidModelError.

Mutations: bit flips, truncation, splices (a chunk copied over another place), and
offset/length corruption (a 16/32-bit word overwritten with an extreme value). Whatever
loads must also be writable again (or rejected with InvalidModelError).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lite_reader import REAL
from test_lite_roundtrip import model_with

from converters.errors import InvalidModelError
from converters.lite import reader, writer


def _seeds() -> list[bytes]:
    seeds = [
        writer.dumps(model_with("Conv2DFusion", {"kernel_size": [3, 3], "pad_list": [1, 1, 1, 1]})),
        writer.dumps(model_with("Custom", {"type": "onnx::Foo", "attr": {"k": b"v"}})),
        writer.dumps(model_with("PadFusion", {"paddings": [[0, 0], [1, 2]]})),
    ]
    lenet = REAL / "lite_lenet_tod_infer.ms"
    if lenet.exists():
        seeds.append(lenet.read_bytes())
    return seeds


SEEDS = _seeds()
EXTREMES = [0, 1, 3, 4, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF]


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "splice", "word"]))
        n = len(data)
        if n < 8:
            break
        pos = draw(st.integers(0, n - 1))
        if kind == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "splice":
            src = draw(st.integers(0, n - 1))
            size = draw(st.integers(1, 64))
            chunk = data[src:src + size]
            data[pos:pos + len(chunk)] = chunk
        else:
            width = draw(st.sampled_from([2, 4]))
            pos = min(pos, n - width) & ~(width - 1)
            value = draw(st.sampled_from(EXTREMES) | st.integers(0, 0xFFFF_FFFF))
            struct.pack_into("<H" if width == 2 else "<I", data, pos, value & (0xFFFF if width == 2 else 0xFFFF_FFFF))
    return bytes(data)


def check(data: bytes) -> None:
    try:
        model = reader.loads(data, source="fuzz.ms")
    except InvalidModelError:
        return
    try:
        writer.dumps(model)
    except InvalidModelError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_files_only_raise_invalid_model_error(data):
    check(data)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_files_only_raise_invalid_model_error_long(data):
    check(data)
