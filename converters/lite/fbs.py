"""A parser for the subset of the FlatBuffers schema language our `.fbs` files use.

The reader, writer and op registry are driven by the schema itself (read once from
`converters/lite/schema/`), so the three `.fbs` files are the single source of truth for
field order, types and defaults; flatc's generated code is checked against the same files.

Supported: `include`, `namespace`, `enum`, `union`, `table` (scalar, string, enum, table
and vector fields, defaults, the `deprecated` attribute), `file_identifier`,
`file_extension`, `root_type`, `//` and `/* */` comments. Not supported: structs, nested
vectors, unions outside tables (we do not use them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# FlatBuffers scalar type names (aliases normalised) -> struct format character.
SCALARS = {
    "bool": "?", "byte": "b", "ubyte": "B", "short": "h", "ushort": "H",
    "int": "i", "uint": "I", "long": "q", "ulong": "Q", "float": "f", "double": "d",
}
_ALIASES = {
    "int8": "byte", "uint8": "ubyte", "int16": "short", "uint16": "ushort", "int32": "int",
    "uint32": "uint", "int64": "long", "uint64": "ulong", "float32": "float",
    "float64": "double",
}

SCHEMA_DIR = Path(__file__).with_name("schema")


class SchemaError(Exception):
    """Our own `.fbs` files are malformed (a bug in litenpu, not in a user's model)."""


@dataclass(frozen=True)
class Field:
    """One table field: `type` is a scalar name, "string", an enum, a table or a union."""

    name: str
    type: str
    vector: bool
    default: str | None
    deprecated: bool
    slot: int


@dataclass(frozen=True)
class Enum:
    name: str
    base: str
    members: dict[str, int]

    def name_of(self, value: int) -> str | None:
        """The member called `value`, or None."""
        for k, v in self.members.items():
            if v == value:
                return k
        return None


@dataclass(frozen=True)
class Table:
    name: str
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Union:
    """A union: member i (1-based) is `members[i - 1]`; 0 is NONE."""

    name: str
    members: tuple[str, ...]


@dataclass
class Schema:
    enums: dict[str, Enum] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    unions: dict[str, Union] = field(default_factory=dict)
    file_identifier: str = ""
    root_type: str = ""

    def raw_default(self, f: Field) -> bool | int | float:
        """The wire value a reader sees when scalar or enum field `f` is absent."""
        enum = self.enums.get(f.type)
        if f.default is None:
            return False if f.type == "bool" else 0
        if enum is not None and f.default in enum.members:
            return enum.members[f.default]
        if f.type == "bool":
            return f.default == "true"
        if f.type in ("float", "double"):
            return float(f.default)
        return int(f.default)

    def fields(self, table: str) -> dict[str, Field]:
        """Field name -> field of `table`."""
        return {f.name: f for f in self.tables[table].fields}


_TOKEN = re.compile(r'\s*(?:(//[^\n]*|/\*.*?\*/)|("(?:[^"\\]|\\.)*")|([A-Za-z_][\w.]*|-?[\d.][\w.+-]*)|(\S))', re.S)


def _tokens(text: str) -> list[str]:
    out = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            break
        pos = m.end()
        if m.group(1) is None:
            out.append(m.group(2) or m.group(3) or m.group(4))
    return out


class _Parser:
    def __init__(self, tokens: list[str], source: str, schema: Schema):
        self.t = tokens
        self.i = 0
        self.source = source
        self.schema = schema

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, expect: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expect is not None and tok != expect):
            raise SchemaError(f"{self.source}: expected {expect or 'a token'}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> list[str]:
        includes = []
        while self.peek() is not None:
            kw = self.take()
            if kw == "include":
                includes.append(self.take().strip('"'))
                self.take(";")
            elif kw in ("namespace", "file_extension", "root_type", "file_identifier"):
                value = self.take().strip('"')
                self.take(";")
                if kw == "root_type":
                    self.schema.root_type = value
                elif kw == "file_identifier":
                    self.schema.file_identifier = value
            elif kw == "enum":
                self.enum()
            elif kw == "union":
                self.union()
            elif kw == "table":
                self.table()
            else:
                raise SchemaError(f"{self.source}: unsupported declaration {kw!r}")
        return includes

    def enum(self) -> None:
        name = self.take()
        self.take(":")
        base = _ALIASES.get(self.take(), self.t[self.i - 1])
        self.take("{")
        members: dict[str, int] = {}
        value = -1
        while self.peek() != "}":
            member = self.take()
            if self.peek() == "=":
                self.take("=")
                value = int(self.take())
            else:
                value += 1
            members[member] = value
            if self.peek() == ",":
                self.take(",")
        self.take("}")
        self.schema.enums[name] = Enum(name, base, members)

    def union(self) -> None:
        name = self.take()
        self.take("{")
        members = []
        while self.peek() != "}":
            members.append(self.take())
            if self.peek() == ",":
                self.take(",")
        self.take("}")
        self.schema.unions[name] = Union(name, tuple(members))

    def table(self) -> None:
        name = self.take()
        self.take("{")
        fields: list[Field] = []
        slot = 0
        while self.peek() != "}":
            fname = self.take()
            self.take(":")
            vector = self.peek() == "["
            if vector:
                self.take("[")
            ftype = self.take()
            ftype = _ALIASES.get(ftype, ftype)
            if vector:
                self.take("]")
            default = None
            if self.peek() == "=":
                self.take("=")
                default = self.take()
            deprecated = False
            if self.peek() == "(":
                self.take("(")
                while self.peek() != ")":
                    deprecated |= self.take() == "deprecated"
                self.take(")")
            self.take(";")
            fields.append(Field(fname, ftype, vector, default, deprecated, slot))
            # A union field occupies two slots: the type byte, then the value.
            slot += 2 if ftype in self.schema.unions else 1
        self.take("}")
        self.schema.tables[name] = Table(name, tuple(fields))


def parse_files(root: Path, directory: Path = SCHEMA_DIR) -> Schema:
    """Parse `root` and everything it includes (included files first)."""
    schema = Schema()
    done: set[Path] = set()

    def visit(path: Path) -> None:
        path = path.resolve()
        if path in done:
            return
        done.add(path)
        tokens = _tokens(path.read_text(encoding="utf-8"))
        # Declarations must precede uses; includes are parsed first so they do.
        includes = [tokens[i + 1].strip('"') for i, tok in enumerate(tokens[:-1]) if tok == "include"]
        for inc in includes:
            visit(path.parent / inc)
        _Parser(tokens, path.name, schema).parse()

    visit(directory / root)
    _check(schema)
    return schema


def _check(schema: Schema) -> None:
    """Every field type and union member must be declared."""
    known = set(SCALARS) | {"string"} | set(schema.enums) | set(schema.tables) | set(schema.unions)
    for table in schema.tables.values():
        for f in table.fields:
            if f.type not in known:
                raise SchemaError(f"table {table.name}: field {f.name} has unknown type {f.type}")
    for union in schema.unions.values():
        for m in union.members:
            if m not in schema.tables:
                raise SchemaError(f"union {union.name}: member {m} is not a table")


_SCHEMA: Schema | None = None


def schema() -> Schema:
    """The parsed `.ms` schema (model.fbs and its includes), parsed once per process."""
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = parse_files(Path("model.fbs"))
    return _SCHEMA
