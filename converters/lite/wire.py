"""Bounds-checked access to an untrusted flatbuffer.

The flatbuffers Python runtime (and flatc's generated accessors) trust every offset they
follow. Here every offset, vtable, vector length and string is checked against the buffer
before it is used, so a malformed file raises InvalidModelError naming the file and the
defect, never IndexError/struct.error, and never allocates more than the file can hold.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from converters.errors import InvalidModelError
from converters.lite import fbs

# struct formats of the flatbuffers scalar types (little-endian, unaligned reads).
FORMATS = {name: "<" + code for name, code in fbs.SCALARS.items()}
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")


class Buffer:
    """A flatbuffer being read: the bytes (bytes, mmap or memoryview) plus the file's name."""

    def __init__(self, data: Any, source: str):
        self.data = data
        self.size = len(data)
        self.source = source

    def error(self, defect: str) -> InvalidModelError:
        return InvalidModelError(f"{self.source}: {defect}")

    def check(self, pos: int, size: int, what: str) -> None:
        """Raise unless bytes [pos, pos + size) lie inside the buffer."""
        if pos < 0 or size < 0 or pos + size > self.size:
            raise self.error(f"{what} at byte {pos} (+{size}) lies outside the "
                             f"{self.size}-byte file")

    def unpack(self, fmt: struct.Struct | str, pos: int, what: str) -> Any:
        fmt = fmt if isinstance(fmt, struct.Struct) else struct.Struct(fmt)
        self.check(pos, fmt.size, what)
        return fmt.unpack_from(self.data, pos)[0]

    def root(self, identifier: str, name: str) -> Table:
        """The root table, after checking the 4-byte file identifier."""
        if self.size < 8:
            raise self.error(f"{self.size} bytes is too short for a flatbuffer")
        found = bytes(self.data[4:8])
        if found != identifier.encode():
            raise self.error(f"file identifier is {found!r}, expected {identifier!r} "
                             "(not a MindSpore Lite 2.x .ms file)")
        return self.table(self.unpack(_U32, 0, "root offset"), name)

    def table(self, pos: int, name: str) -> Table:
        """The table of type `name` starting at `pos` (vtable checked)."""
        self.check(pos, 4, f"{name} table")
        vtable = pos - self.unpack(_I32, pos, f"{name} vtable offset")
        self.check(vtable, 4, f"{name} vtable")
        vt_size = self.unpack(_U16, vtable, f"{name} vtable size")
        obj_size = self.unpack(_U16, vtable + 2, f"{name} object size")
        if vt_size < 4 or vt_size % 2:
            raise self.error(f"{name} table at byte {pos} has a malformed vtable (size {vt_size})")
        self.check(vtable, vt_size, f"{name} vtable")
        if obj_size < 4:
            raise self.error(f"{name} table at byte {pos} has object size {obj_size} < 4")
        self.check(pos, obj_size, f"{name} table")
        return Table(self, pos, vtable, vt_size, obj_size, name)


class Table:
    """One table: field reads by vtable slot, each checked against the table and buffer."""

    __slots__ = ("buf", "pos", "vtable", "vt_size", "obj_size", "name")

    def __init__(self, buf: Buffer, pos: int, vtable: int, vt_size: int, obj_size: int, name: str):
        self.buf = buf
        self.pos = pos
        self.vtable = vtable
        self.vt_size = vt_size
        self.obj_size = obj_size
        self.name = name

    def _field(self, slot: int, size: int, what: str) -> int | None:
        """Absolute position of the field in `slot`, or None when absent."""
        entry = 4 + 2 * slot
        if entry + 2 > self.vt_size:
            return None
        off = _U16.unpack_from(self.buf.data, self.vtable + entry)[0]
        if off == 0:
            return None
        if off + size > self.obj_size:
            raise self.buf.error(f"{self.name}.{what} (byte {self.pos + off}) lies outside its "
                                 f"{self.obj_size}-byte table")
        return self.pos + off

    def scalar(self, slot: int, wire: str, default: Any, what: str) -> Any:
        fmt = FORMATS[wire]
        pos = self._field(slot, struct.calcsize(fmt), what)
        if pos is None:
            return default
        return struct.unpack_from(fmt, self.buf.data, pos)[0]

    def _target(self, slot: int, what: str) -> int | None:
        """Where the uoffset in `slot` points, or None when the field is absent."""
        pos = self._field(slot, 4, what)
        if pos is None:
            return None
        return pos + _U32.unpack_from(self.buf.data, pos)[0]

    def vector(self, slot: int, elem_size: int, what: str) -> tuple[int, int] | None:
        """(first element position, element count) of a vector field, or None when absent."""
        start = self._target(slot, what)
        if start is None:
            return None
        count = self.buf.unpack(_U32, start, f"{self.name}.{what} length")
        if count * elem_size > self.buf.size - start - 4:
            raise self.buf.error(f"{self.name}.{what}: vector of {count} x {elem_size} bytes at "
                                 f"byte {start} runs past the end of the {self.buf.size}-byte file")
        return start + 4, count

    def numbers(self, slot: int, wire: str, what: str) -> np.ndarray:
        """A vector of scalars as a (read-only) numpy array; empty when absent."""
        dtype = np.dtype(FORMATS[wire])
        vec = self.vector(slot, dtype.itemsize, what)
        if vec is None:
            return np.zeros(0, dtype)
        start, count = vec
        return np.frombuffer(self.buf.data, dtype, count, start)

    def string(self, slot: int, what: str) -> str | None:
        vec = self.vector(slot, 1, what)
        if vec is None:
            return None
        start, count = vec
        try:
            text = bytes(self.buf.data[start:start + count]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.buf.error(f"{self.name}.{what} is not valid UTF-8 ({e.reason})") from None
        if "\0" in text:
            # Names reach onnxruntime's C API, which would cut them at the NUL.
            raise self.buf.error(f"{self.name}.{what} {text!r} contains a NUL character")
        return text

    def table(self, slot: int, name: str, what: str) -> Table | None:
        target = self._target(slot, what)
        return None if target is None else self.buf.table(target, name)

    def tables(self, slot: int, name: str, what: str, limit: int) -> list[Table]:
        """A vector of tables; at most `limit` elements (guards against absurd counts)."""
        vec = self.vector(slot, 4, what)
        if vec is None:
            return []
        start, count = vec
        if count > limit:
            raise self.buf.error(f"{self.name}.{what} has {count} entries (limit {limit})")
        offsets = np.frombuffer(self.buf.data, "<u4", count, start).astype(np.int64)
        positions = offsets + start + 4 * np.arange(count, dtype=np.int64)
        return [self.buf.table(int(p), name) for p in positions]
