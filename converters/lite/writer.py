"""Lite IR -> .ms file (MindSpore Lite 2.x flatbuffer, file identifier MSL2).

Encoding is driven by the schema (field slots, wire types and defaults come from the
`.fbs` files), so every primitive in the schema is written the same way. What the writer
decides, because MindSpore Lite's runtime depends on it:

- a tensor without data whose `node_type` is 0 (ValueNode) is written as 2 (CNode):
  the runtime treats ValueNode tensors as constants;
- a model without subgraphs gets one main subgraph covering every node and tensor;
- an empty `version` is stamped `PRODUCER`, which ends in a MindSpore Lite version because
  the runtime compares the last five characters against "1.3.0" to spot old files;
- weights are 64-byte aligned inside the file, so mapped views are aligned for kernels.

Empty strings and lists are omitted (as MindSpore's own object-API writer does).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import secrets
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np

from converters.errors import InvalidModelError
from converters.lite import dtypes, fbs, ops
from converters.lite.ir import ExternalData, LiteModel, LiteNode, LiteSubGraph, LiteTensor
from converters.lite.reader import CHECKSUM_PREFIX, IDENTIFIER, VALUE_NODE
from converters.lite.wire import FORMATS

log = logging.getLogger("litenpu.lite")

DATA_ALIGNMENT = 64
SIDE_FILE_SUFFIX = ".msw"
CNODE = 2  # MindSpore NodeType of tensors computed by a node (and graph inputs)


def _producer() -> str:
    try:
        version = importlib.metadata.version("litenpu")
    except importlib.metadata.PackageNotFoundError:
        version = "dev"
    return f"litenpu {version}, MindSpore Lite 2.0.0"


PRODUCER = _producer()

_SLOT_METHODS = {
    "bool": "PrependBoolSlot", "byte": "PrependInt8Slot", "ubyte": "PrependUint8Slot",
    "short": "PrependInt16Slot", "ushort": "PrependUint16Slot", "int": "PrependInt32Slot",
    "uint": "PrependUint32Slot", "long": "PrependInt64Slot", "ulong": "PrependUint64Slot",
    "float": "PrependFloat32Slot", "double": "PrependFloat64Slot",
}


def dumps(model: LiteModel) -> bytes:
    """The .ms image of `model`, every weight inline."""
    return bytes(_encode(model, external={}))


def save(model: LiteModel, path: str | os.PathLike, external_threshold: int | None = None) -> None:
    """Write `model` to `path` atomically.

    Weights larger than `external_threshold` bytes go to the side file `<stem>.msw`
    (referenced by relative location, offset, length and a sha256 checksum) as MindSpore
    Lite does for big models; None keeps every weight inline.
    """
    path = Path(path)
    side = path.with_suffix(SIDE_FILE_SUFFIX)
    external: dict[int, ExternalData] = {}
    tmp_paths: list[Path] = []
    try:
        if external_threshold is not None:
            big = [i for i, t in enumerate(model.tensors)
                   if isinstance(t.data, np.ndarray) and t.data.nbytes > max(external_threshold, 0)]
            if big:
                tmp_side = _temp_path(side)
                tmp_paths.append(tmp_side)
                external = _write_side_file(model, big, tmp_side, side.name)
        image = _encode(model, external)
        tmp_model = _temp_path(path)
        tmp_paths.append(tmp_model)
        with open(tmp_model, "wb") as f:
            f.write(image)
            os.fsync(f.fileno())  # the rename must not outlive the bytes in a crash
        if external:
            os.replace(tmp_paths[0], side)
        os.replace(tmp_model, path)
        tmp_paths.clear()
    finally:
        for p in tmp_paths:
            p.unlink(missing_ok=True)


def _temp_path(target: Path) -> Path:
    """A new, empty file next to `target` (same filesystem, so os.replace is atomic)."""
    while True:
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            with open(tmp, "xb"):  # honours the umask, unlike mkstemp's 0600
                return tmp
        except FileExistsError:
            continue


def _write_side_file(model: LiteModel, indices: list[int], tmp: Path, location: str) -> dict[int, ExternalData]:
    """Write the weights of tensors `indices` to `tmp`, each 64-byte aligned."""
    out = {}
    with open(tmp, "wb") as f:
        offset = 0
        for i in indices:
            raw = _raw_bytes(model.tensors[i], i)
            pad = -offset % DATA_ALIGNMENT
            f.write(b"\0" * pad)
            offset += pad
            f.write(raw)
            digest = CHECKSUM_PREFIX + hashlib.sha256(raw).hexdigest()
            out[i] = ExternalData(location=location, offset=offset, length=raw.nbytes, checksum=digest)
            offset += raw.nbytes
        os.fsync(f.fileno())
    return out


def _raw_bytes(t: LiteTensor, i: int) -> memoryview:
    """A tensor's data as little-endian C-order bytes (checked against type_id and shape)."""
    data = t.data
    if not isinstance(data, np.ndarray):
        raise InvalidModelError(f"tensor {i} ({t.name!r}): data must be a numpy array, "
                                f"got {type(data).__name__}")
    if dtypes.has_numpy(t.type_id):
        want = dtypes.to_numpy(t.type_id)
        if data.dtype.newbyteorder("=") != want:
            raise InvalidModelError(f"tensor {i} ({t.name!r}): data is {data.dtype}, but "
                                    f"type_id {t.type_id} is {want}")
        if t.is_static and tuple(data.shape) != tuple(t.shape):
            raise InvalidModelError(f"tensor {i} ({t.name!r}): data shape {data.shape} != "
                                    f"shape {t.shape}")
        data = np.ascontiguousarray(data, dtype=want.newbyteorder("<"))
    else:
        data = np.ascontiguousarray(data)
    return memoryview(data.reshape(-1).view(np.uint8))


class _Encoder:
    """Builds one MetaGraph with a flatbuffers Builder, table by table from the schema."""

    def __init__(self, size_hint: int):
        self.b = flatbuffers.Builder(size_hint)
        self.schema = fbs.schema()

    def string(self, s: str) -> int | None:
        """A string (None when empty); the reader takes only text without NUL characters."""
        if not s:
            return None
        if not isinstance(s, str) or "\0" in s:
            raise InvalidModelError(f"string {s!r}: expected text without NUL characters")
        return self.b.CreateString(s)

    def numbers(self, values: Any, wire: str) -> int | None:
        arr = np.asarray(values, dtype=FORMATS[wire]).reshape(-1)
        return self.b.CreateNumpyVector(arr) if arr.size else None

    def raw(self, raw: memoryview) -> int:
        """A [ubyte] vector whose payload starts DATA_ALIGNMENT-aligned in the file."""
        b = self.b
        n = raw.nbytes
        b.StartVector(1, n, DATA_ALIGNMENT)
        b.head -= n
        b.Bytes[b.head:b.head + n] = raw
        return b.EndVector()

    def offsets(self, offs: list[int]) -> int | None:
        if not offs:
            return None
        self.b.StartVector(4, len(offs), 4)
        for off in reversed(offs):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def table(self, name: str, values: dict[str, Any], where: str = "") -> int:
        """Table `name` from field values: scalars as wire numbers, other fields as offsets.

        Offsets must already be built (flatbuffers forbids nesting); None means absent.
        """
        fields = self.schema.fields(name)
        slots = max((f.slot + (2 if f.type in self.schema.unions else 1) for f in fields.values()),
                    default=0)
        b = self.b
        b.StartObject(slots)
        for key, value in values.items():
            if value is None:
                continue
            f = fields[key]
            enum = self.schema.enums.get(f.type)
            if f.vector or f.type == "string" or f.type in self.schema.tables:
                b.PrependUOffsetTRelativeSlot(f.slot, value, 0)
            else:
                wire = enum.base if enum else f.type
                value = ops.check_scalar(wire, value, f"{where or name}.{key}")
                getattr(b, _SLOT_METHODS[wire])(f.slot, value, self.schema.raw_default(f))
        return b.EndObject()

    def enum(self, enum: str, name: str, where: str) -> int:
        members = self.schema.enums[enum].members
        if name not in members:
            raise InvalidModelError(f"{where}: {name!r} is not a {enum} member "
                                    f"({', '.join(members)})")
        return members[name]

    # -- ops --------------------------------------------------------------------------------

    def op(self, node: LiteNode, where: str) -> int:
        spec = ops.spec(node.op)
        attrs = ops.complete(node.op, node.attrs)
        values: dict[str, Any] = {}
        for f in spec.fields:
            v = attrs[f.name]
            if f.kind in ("int", "float", "bool"):
                values[f.name] = v
            elif f.kind == "enum":
                values[f.name] = self.enum(f.enum, v, f"{where}.{f.name}")
            elif f.kind == "str":
                values[f.name] = self.string(v)
            elif f.kind in ("ints", "floats", "bools"):
                values[f.name] = self.numbers(v, f.wire)
            elif f.kind == "ints2d":
                values[f.name] = self.vec2d(v) if v else None
            else:  # attrs
                values[f.name] = self.offsets([
                    self.table("Attribute", {"name": self.string(k), "data": self.numbers(np.frombuffer(d, np.uint8), "ubyte")})
                    for k, d in v.items()])
        return self.table(spec.name, values, where)

    def vec2d(self, rows: list[list[int]]) -> int:
        vecs = [self.table("Vec", {"data": self.numbers(row, "long")}) for row in rows]
        return self.table("Vec2D", {"data": self.offsets(vecs)})

    def node(self, node: LiteNode, i: int, n_tensors: int) -> int:
        where = f"node {i} ({node.name!r})"
        _check_indices(node.inputs, n_tensors, f"{where} inputs")
        _check_indices(node.outputs, n_tensors, f"{where} outputs")
        value = self.op(node, where)
        b = self.b  # Primitive holds only the union: its type byte and value slots by hand.
        union = self.schema.fields("Primitive")["value"]
        b.StartObject(union.slot + 2)
        b.PrependUOffsetTRelativeSlot(union.slot + 1, value, 0)
        b.PrependUint8Slot(union.slot, ops.op_number(node.op), 0)
        primitive = b.EndObject()
        return self.table("CNode", {
            "name": self.string(node.name),
            "primitive": primitive,
            "inputIndex": self.numbers(node.inputs, "uint"),
            "outputIndex": self.numbers(node.outputs, "uint"),
            "quantType": self.enum("QuantType", node.quant_type, f"{where}.quant_type"),
            "deviceType": node.device_type,
        }, where)

    # -- tensors ----------------------------------------------------------------------------

    def tensor(self, t: LiteTensor, i: int, data: int | None, external: ExternalData | None) -> int:
        """Tensor table; `data` is its already-built weight vector (None when absent)."""
        where = f"tensor {i} ({t.name!r})"
        ext = None
        if external is not None:
            ext = self.offsets([self.table("ExternalData", {
                "checkSum": self.string(external.checksum),
                "location": self.string(external.location),
                "offset": external.offset,
                "length": external.length,
            })])
        node_type = t.node_type
        if node_type == VALUE_NODE and t.data is None:
            node_type = CNODE
        quant = self.offsets([self.table("QuantParam", {
            "scale": q.scale, "zeroPoint": q.zero_point, "min": q.min, "max": q.max,
            "narrowRange": q.narrow_range, "numBits": q.num_bits, "inited": q.inited,
            "varCorr": q.var_corr, "meanCorr": q.mean_corr, "dstDtype": q.dst_dtype,
            "roundType": q.round_type, "multiplier": q.multiplier,
        }, f"{where}.quant_params[{k}]") for k, q in enumerate(t.quant_params)])
        return self.table("Tensor", {
            "nodeType": node_type,
            "dataType": t.type_id,
            "dims": self.numbers([_dim(d, where) for d in t.shape], "int"),
            "format": self.enum("Format", t.format, f"{where}.format"),
            "data": data,
            "quantParams": quant,
            "quantClusters": self.numbers(t.quant_clusters, "float"),
            "name": self.string(t.name),
            "externalData": ext,
        }, where)

    def subgraph(self, g: LiteSubGraph, n_tensors: int, n_nodes: int) -> int:
        where = f"subgraph {g.name!r}"
        _check_indices(g.inputs, n_tensors, f"{where} inputs")
        _check_indices(g.outputs, n_tensors, f"{where} outputs")
        _check_indices(g.nodes, n_nodes, f"{where} nodes")
        _check_indices(g.tensors, n_tensors, f"{where} tensors")
        return self.table("SubGraph", {
            "name": self.string(g.name),
            "inputIndices": self.numbers(g.inputs, "uint"),
            "outputIndices": self.numbers(g.outputs, "uint"),
            "nodeIndices": self.numbers(g.nodes, "uint"),
            "tensorIndices": self.numbers(g.tensors, "uint"),
        })


def _dim(d: Any, where: str) -> int:
    """A dim as written: symbolic (str) dims become -1 (unknown)."""
    if isinstance(d, str):
        return -1
    if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < -1 or d >= 1 << 31:
        raise InvalidModelError(f"{where}: dim {d!r} must be an int in [-1, 2**31) or a str")
    return int(d)


def _check_indices(indices: list[int], bound: int, what: str) -> None:
    for i in indices:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < bound:
            raise InvalidModelError(f"{what}: index {i!r} out of range [0, {bound})")


def _encode(model: LiteModel, external: dict[int, ExternalData]) -> memoryview:
    """The finished flatbuffer (weights of `external` tensors left out of it)."""
    raws = {i: _raw_bytes(t, i) for i, t in enumerate(model.tensors)
            if t.data is not None and i not in external}
    inline = sum(raw.nbytes for raw in raws.values())
    enc = _Encoder(inline + (DATA_ALIGNMENT + 256) * (len(model.tensors) + 1) + (1 << 16))
    n_t = len(model.tensors)
    _check_indices(model.inputs, n_t, "model inputs")
    _check_indices(model.outputs, n_t, "model outputs")
    # Weights first: the builder fills the buffer back to front, so they land at the end of
    # the file and the tables at its start. Opening a mapped file then touches the metadata
    # pages and one page per weight (its length prefix), not pages shared with weights.
    # Zero-element constants get no vector: the reader rebuilds them from their dims.
    data = {i: enc.raw(raw) for i, raw in raws.items() if raw.nbytes}
    tensors = [enc.tensor(t, i, data.get(i), external.get(i)) for i, t in enumerate(model.tensors)]
    nodes = [enc.node(n, i, n_t) for i, n in enumerate(model.nodes)]
    subgraphs = model.subgraphs or [model.main_subgraph()]
    graphs = [enc.subgraph(g, n_t, len(model.nodes)) for g in subgraphs]
    root = enc.table("MetaGraph", {
        "name": enc.string(model.name),
        "version": enc.string(model.version or PRODUCER),
        "fmkType": model.fmk_type,
        "inputIndex": enc.numbers(model.inputs, "uint"),
        "outputIndex": enc.numbers(model.outputs, "uint"),
        "mempoolSize": model.mempool_size,
        "nodes": enc.offsets(nodes),
        "allTensors": enc.offsets(tensors),
        "subGraph": enc.offsets(graphs),
    }, "model")
    enc.b.Finish(root, file_identifier=IDENTIFIER.encode())
    return memoryview(enc.b.Bytes)[enc.b.Head():]
