"""The Lite op registry: every PrimitiveType member, its union number and its fields.

Derived from `schema/ops.fbs` (parsed by `fbs.py`), so the schema stays the one source of
truth. Attribute values in the IR use plain Python types per field *kind*:

    int / float / bool / str   scalars (floats rounded to the wire's float32/float64)
    enum                       the enum member name ("RELU", "SAME", "NHWC")
    ints / floats              list[int] / list[float]           ([long], [float], ...)
    ints2d                     list[list[int]]                   (Vec2D)
    attrs                      dict[str, bytes]                  ([Attribute], Custom.attr)
"""

from __future__ import annotations

import difflib
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from converters.errors import InvalidModelError, UnsupportedError
from converters.lite import fbs

_INT_RANGES = {
    "byte": (-(1 << 7), (1 << 7) - 1), "ubyte": (0, (1 << 8) - 1),
    "short": (-(1 << 15), (1 << 15) - 1), "ushort": (0, (1 << 16) - 1),
    "int": (-(1 << 31), (1 << 31) - 1), "uint": (0, (1 << 32) - 1),
    "long": (-(1 << 63), (1 << 63) - 1), "ulong": (0, (1 << 64) - 1),
}
_FLOATS = ("float", "double")


@dataclass(frozen=True)
class FieldSpec:
    """One attribute of an op: IR kind, wire scalar type, enum name, default, vtable slot."""

    name: str
    kind: str
    wire: str
    enum: str | None
    default: Any
    slot: int


@dataclass(frozen=True)
class OpSpec:
    """One primitive: its PrimitiveType name and number, and its fields in schema order."""

    name: str
    number: int
    fields: tuple[FieldSpec, ...]

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


def field_kind(schema: fbs.Schema, f: fbs.Field) -> str:
    """The IR kind of a schema field (see module docstring); SchemaError if unsupported."""
    if f.type in schema.enums:
        if not f.vector:
            return "enum"
    elif f.type == "Vec2D" and not f.vector:
        return "ints2d"
    elif f.type == "Attribute" and f.vector:
        return "attrs"
    elif f.type in _INT_RANGES:
        return "ints" if f.vector else "int"
    elif f.type in _FLOATS:
        return "floats" if f.vector else "float"
    elif f.type == "bool":
        return "bools" if f.vector else "bool"
    elif f.type == "string" and not f.vector:
        return "str"
    raise fbs.SchemaError(f"field {f.name}: type {'[' + f.type + ']' if f.vector else f.type} has no IR kind")


def wire_default(schema: fbs.Schema, f: fbs.Field, kind: str) -> Any:
    """The value a reader sees when the field is absent, in IR form."""
    raw = f.default
    if kind == "enum":
        enum = schema.enums[f.type]
        if raw is None:
            raw = "0"
        if raw.lstrip("-").isdigit():
            name = enum.name_of(int(raw))
            if name is None:
                raise fbs.SchemaError(f"field {f.name}: default {raw} is not a {f.type} member")
            return name
        return raw
    if kind == "int":
        return int(raw) if raw is not None else 0
    if kind == "float":
        return round_float(float(raw) if raw is not None else 0.0, f.type)
    if kind == "bool":
        return raw == "true"
    if kind == "str":
        return ""
    if kind == "attrs":
        return {}
    return []


def round_float(value: float, wire: str) -> float:
    """`value` as the wire stores it (float32 fields lose precision; double keeps it)."""
    if wire == "float":
        return struct.unpack("<f", struct.pack("<f", value))[0]
    return float(value)


def _build() -> tuple[dict[str, OpSpec], dict[int, OpSpec]]:
    schema = fbs.schema()
    by_name: dict[str, OpSpec] = {}
    for number, name in enumerate(schema.unions["PrimitiveType"].members, start=1):
        fields = []
        for f in schema.tables[name].fields:
            kind = field_kind(schema, f)
            fields.append(FieldSpec(f.name, kind, f.type, f.type if kind == "enum" else None,
                                    wire_default(schema, f, kind), f.slot))
        by_name[name] = OpSpec(name, number, tuple(fields))
    return by_name, {spec.number: spec for spec in by_name.values()}


OPS, BY_NUMBER = _build()


def spec(op: str) -> OpSpec:
    """The OpSpec of PrimitiveType member `op`; UnsupportedError naming close matches."""
    try:
        return OPS[op]
    except KeyError:
        close = difflib.get_close_matches(op, OPS, n=5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnsupportedError(f"unknown Lite primitive {op!r}{hint}") from None


def op_number(op: str) -> int:
    """The PrimitiveType union number of `op` (its value on the wire)."""
    return spec(op).number


def op_name(number: int) -> str:
    """The PrimitiveType member with union number `number`; UnsupportedError if none."""
    try:
        return BY_NUMBER[number].name
    except KeyError:
        raise UnsupportedError(f"PrimitiveType {number} is not a known Lite primitive "
                               f"(1..{max(BY_NUMBER)})") from None


def enum_members(enum: str) -> dict[str, int]:
    """Member name -> value of a schema enum (Format, ActivationType, PadMode, ...)."""
    return dict(fbs.schema().enums[enum].members)


def check_scalar(wire: str, value: Any, where: str) -> int | float | bool:
    """`value` checked to fit scalar wire type `wire`; InvalidModelError naming `where`."""
    if wire == "bool":
        if isinstance(value, bool | np.bool_):
            return bool(value)
        raise InvalidModelError(f"{where}: expected a bool, got {value!r}")
    if wire in _FLOATS:
        if isinstance(value, int | float | np.number) and not isinstance(value, bool):
            return float(value)
        raise InvalidModelError(f"{where}: expected a number ({wire}), got {value!r}")
    lo, hi = _INT_RANGES[wire]
    if isinstance(value, int | np.integer) and not isinstance(value, bool) and lo <= value <= hi:
        return int(value)
    raise InvalidModelError(f"{where}: expected an integer in [{lo}, {hi}] ({wire}), got {value!r}")


def complete(op: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """`attrs` checked, normalised to wire precision and filled with defaults, in schema order.

    UnsupportedError for an unknown op; InvalidModelError for an unknown field or a value
    of the wrong kind, out of range, or not a member of the field's enum.
    """
    s = spec(op)
    names = {f.name for f in s.fields}
    unknown = sorted(set(attrs) - names)
    if unknown:
        raise InvalidModelError(f"{op}: unknown attribute(s) {', '.join(unknown)}; "
                                f"{op} has: {', '.join(f.name for f in s.fields) or 'none'}")
    out = {}
    for f in s.fields:
        value = attrs[f.name] if f.name in attrs else f.default
        out[f.name] = normalize(f, value, op)
    return out


def normalize(f: FieldSpec, value: Any, where: str) -> Any:
    """`value` as field `f` holds it in the IR; InvalidModelError naming `where` if it can't."""
    def bad(expected: str) -> InvalidModelError:
        return InvalidModelError(f"{where}.{f.name}: expected {expected}, got {value!r}")

    # Vec2D rows hold `long`s; every other integer field names its own wire type.
    int_wire = "long" if f.kind == "ints2d" else f.wire

    def scalar_int(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise bad(f"an integer ({int_wire})")
        lo, hi = _INT_RANGES[int_wire]
        if not lo <= int(v) <= hi:
            raise bad(f"an integer in [{lo}, {hi}] ({int_wire})")
        return int(v)

    def scalar_float(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float | np.number):
            raise bad(f"a number ({f.wire})")
        return round_float(float(v), f.wire)

    kind = f.kind
    if kind == "int":
        return scalar_int(value)
    if kind == "float":
        return scalar_float(value)
    if kind == "bool":
        if not isinstance(value, bool | np.bool_):
            raise bad("a bool")
        return bool(value)
    if kind == "str":
        if not isinstance(value, str):
            raise bad("a str")
        return value
    if kind == "enum":
        members = enum_members(f.enum)
        if not isinstance(value, str) or value not in members:
            raise bad(f"a {f.enum} member name ({', '.join(members)})")
        return value
    if kind == "attrs":
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, bytes | bytearray) for k, v in value.items()):
            raise bad("a dict of str -> bytes")
        return {k: bytes(v) for k, v in value.items()}
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise bad("a list")
    if kind == "ints":
        return [scalar_int(v) for v in value]
    if kind == "floats":
        return [scalar_float(v) for v in value]
    if kind == "bools":
        return [bool(v) for v in value]
    if kind == "ints2d":
        rows = []
        for row in value:
            if isinstance(row, str | bytes) or not hasattr(row, "__iter__"):
                raise bad("a list of lists of integers")
            rows.append([scalar_int(v) for v in row])
        return rows
    raise AssertionError(f"unhandled field kind {kind}")  # kinds come from field_kind()

