""".ms file -> Lite IR.

The file is untrusted: every offset and length is checked (see `wire.py`) and every index,
dim and data size is validated before it is used; any defect raises InvalidModelError
naming the file and what is wrong. `load` maps the file: constant tensors' `data` are
read-only numpy views into the map, so weight pages are only read when the values are.

Tensors whose TypeId numpy cannot hold (strings, tensor lists, ...) keep their `type_id`
and get their raw bytes as a flat uint8 array (no shape check is possible for them).
External weights (`Tensor.externalData`) are resolved relative to the model file's folder,
as MindSpore Lite does, and mapped the same way.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np

from converters.errors import InvalidModelError
from converters.lite import dtypes, fbs, ops
from converters.lite.ir import (
    ExternalData,
    LiteModel,
    LiteNode,
    LiteSubGraph,
    LiteTensor,
    QuantParam,
)
from converters.lite.wire import Buffer, Table

log = logging.getLogger("litenpu.lite")

IDENTIFIER = "MSL2"
# Sanity limits: far above any real model, far below what would exhaust memory.
MAX_ENTRIES = 1 << 20
MAX_RANK = 64
CHECKSUM_PREFIX = "sha256:"
VALUE_NODE = 0  # MindSpore NodeType of constant tensors


def load(path: str | os.PathLike, lazy: bool = True) -> LiteModel:
    """Read a .ms file; `lazy` maps it (weights paged in on use), else reads it whole."""
    path = Path(path)
    with open(path, "rb") as f:
        if not lazy:
            return _Decoder(Buffer(f.read(), str(path)), path.parent, lazy).model()
        data = _map(f)
    with _random_access(data):
        return _Decoder(Buffer(data, str(path)), path.parent, lazy).model()


def _map(f) -> Any:
    """A read-only map of open file `f` (empty bytes for an empty file: mmap refuses those)."""
    if os.fstat(f.fileno()).st_size == 0:
        return b""
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


@contextlib.contextmanager
def _random_access(data: Any):
    """While parsing, ask the kernel not to read ahead: a metadata fault must not pull in
    the weights next to it. Sequential readahead is restored for reading weights."""
    advise = isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_RANDOM")
    if advise:
        data.madvise(mmap.MADV_RANDOM)
    try:
        yield
    finally:
        if advise:
            data.madvise(mmap.MADV_NORMAL)


def loads(data: bytes, source: str = "<bytes>", base_dir: str | os.PathLike | None = None) -> LiteModel:
    """Read a .ms image held in memory; external weights need `base_dir` to resolve."""
    return _Decoder(Buffer(bytes(data), source), None if base_dir is None else Path(base_dir),
                    lazy=False).model()


@functools.cache
def _fields(table: str) -> dict[str, fbs.Field]:
    return fbs.schema().fields(table)


class _Decoder:
    """One decoding pass over one buffer (holds the side files it has mapped)."""

    def __init__(self, buf: Buffer, base_dir: Path | None, lazy: bool):
        self.buf = buf
        self.base_dir = base_dir
        self.lazy = lazy
        self.side_files: dict[str, Any] = {}
        self.schema = fbs.schema()

    def error(self, defect: str) -> InvalidModelError:
        return self.buf.error(defect)

    # -- generic field access by schema name -------------------------------------------

    def get(self, tab: Table, name: str) -> Any:
        """A scalar or enum field of `tab` (enums as the member *name*, floats as stored)."""
        f = _fields(tab.name)[name]
        enum = self.schema.enums.get(f.type)
        wire = enum.base if enum else f.type
        value = tab.scalar(f.slot, wire, self.schema.raw_default(f), name)
        if wire in ("float", "double"):
            return ops.round_float(value, wire)
        if enum is None:
            return value
        member = enum.name_of(value)
        if member is None:
            raise self.error(f"{tab.name}.{name} = {value} is not a {enum.name} member")
        return member

    def numbers(self, tab: Table, name: str) -> np.ndarray:
        f = _fields(tab.name)[name]
        return tab.numbers(f.slot, f.type, name)

    def string(self, tab: Table, name: str) -> str:
        return tab.string(_fields(tab.name)[name].slot, name) or ""

    def tables(self, tab: Table, name: str) -> list[Table]:
        f = _fields(tab.name)[name]
        return tab.tables(f.slot, f.type, name, MAX_ENTRIES)

    def indices(self, tab: Table, name: str, bound: int, what: str) -> list[int]:
        """An index vector, each entry checked to be < `bound`."""
        values = self.numbers(tab, name)
        if values.size and int(values.max()) >= bound:
            bad = int(values[values >= bound][0])
            raise self.error(f"{what}: index {bad} out of range (only {bound} available)")
        return values.tolist()

    # -- the model ----------------------------------------------------------------------

    def model(self) -> LiteModel:
        root = self.buf.root(IDENTIFIER, "MetaGraph")
        if self.get(root, "obfuscate"):
            log.warning("%s: model is marked obfuscated; reading it as is", self.buf.source)
        tensors = [self.tensor(t, i) for i, t in enumerate(self.tables(root, "allTensors"))]
        n_t = len(tensors)
        nodes = [self.node(n, i, n_t) for i, n in enumerate(self.tables(root, "nodes"))]
        subgraphs = [self.subgraph(s, i, n_t, len(nodes)) for i, s in enumerate(self.tables(root, "subGraph"))]
        return LiteModel(
            name=self.string(root, "name"),
            version=self.string(root, "version"),
            fmk_type=self.get(root, "fmkType"),
            tensors=tensors,
            nodes=nodes,
            inputs=self.indices(root, "inputIndex", n_t, "model inputs"),
            outputs=self.indices(root, "outputIndex", n_t, "model outputs"),
            subgraphs=subgraphs,
            mempool_size=self.get(root, "mempoolSize"),
        )

    def subgraph(self, tab: Table, i: int, n_tensors: int, n_nodes: int) -> LiteSubGraph:
        name = self.string(tab, "name")
        what = f"subgraph {i} ({name!r})"
        return LiteSubGraph(
            name=name,
            inputs=self.indices(tab, "inputIndices", n_tensors, f"{what} inputs"),
            outputs=self.indices(tab, "outputIndices", n_tensors, f"{what} outputs"),
            nodes=self.indices(tab, "nodeIndices", n_nodes, f"{what} nodes"),
            tensors=self.indices(tab, "tensorIndices", n_tensors, f"{what} tensors"),
        )

    def node(self, tab: Table, i: int, n_tensors: int) -> LiteNode:
        name = self.string(tab, "name")
        what = f"node {i} ({name!r})"
        prim = tab.table(_fields("CNode")["primitive"].slot, "Primitive", "primitive")
        if prim is None:
            raise self.error(f"{what} has no primitive")
        union = _fields("Primitive")["value"]
        number = prim.scalar(union.slot, "ubyte", 0, "value_type")
        try:
            spec = ops.BY_NUMBER[number]
        except KeyError:
            raise self.error(f"{what}: PrimitiveType {number} is not a known primitive "
                             f"(1..{max(ops.BY_NUMBER)})") from None
        value = prim.table(union.slot + 1, spec.name, "value")
        return LiteNode(
            name=name,
            op=spec.name,
            attrs=self.attrs(value, spec) if value is not None else ops.complete(spec.name, {}),
            inputs=self.indices(tab, "inputIndex", n_tensors, f"{what} inputs"),
            outputs=self.indices(tab, "outputIndex", n_tensors, f"{what} outputs"),
            quant_type=self.get(tab, "quantType"),
            device_type=self.get(tab, "deviceType"),
        )

    def attrs(self, tab: Table, spec: ops.OpSpec) -> dict[str, Any]:
        """An op table's fields in IR form (see ops.py for the kinds)."""
        out: dict[str, Any] = {}
        for f in spec.fields:
            if f.kind in ("int", "float", "bool", "enum"):
                value = self.get(tab, f.name)
            elif f.kind == "str":
                value = self.string(tab, f.name)
            elif f.kind in ("ints", "floats", "bools"):
                value = self.numbers(tab, f.name).tolist()
            elif f.kind == "ints2d":
                vec2d = tab.table(f.slot, "Vec2D", f.name)
                rows = [] if vec2d is None else self.tables(vec2d, "data")
                value = [self.numbers(row, "data").tolist() for row in rows]
            else:  # attrs
                value = {}
                for a in self.tables(tab, f.name):
                    key = self.string(a, "name")
                    if key in value:
                        raise self.error(f"{spec.name}.{f.name}: attribute {key!r} appears twice")
                    value[key] = self.numbers(a, "data").tobytes()
            out[f.name] = value
        return out

    def tensor(self, tab: Table, i: int) -> LiteTensor:
        name = self.string(tab, "name")
        what = f"tensor {i} ({name!r})"
        dims = self.numbers(tab, "dims")
        if dims.size > MAX_RANK:
            raise self.error(f"{what} has rank {dims.size} (limit {MAX_RANK})")
        if dims.size and int(dims.min()) < -1:
            raise self.error(f"{what} has negative dim {int(dims.min())} (only -1 = unknown)")
        shape = tuple(int(d) for d in dims)
        compress = self.get(tab, "weightQuantCompressType")
        if compress != "NONE" or self.get(tab, "enableHuffmanCode"):
            raise self.error(f"{what} holds compressed weights ({compress}), which litenpu "
                             "cannot decode")
        type_id = self.get(tab, "dataType")
        external = self.external(tab, what)
        node_type = self.get(tab, "nodeType")
        data = self.numbers(tab, "data")
        if data.size == 0 and external is not None:
            data = self.external_bytes(external, what)
        # A constant with a 0 in its static dims has no bytes to store, yet is a constant.
        empty_const = (node_type == VALUE_NODE and dtypes.has_numpy(type_id) and shape
                       and min(shape) == 0)
        return LiteTensor(
            name=name,
            type_id=type_id,
            shape=shape,
            data=self.typed(data, type_id, shape, what) if data.size or empty_const else None,
            format=self.get(tab, "format"),
            node_type=node_type,
            quant_params=[self.quant_param(q) for q in self.tables(tab, "quantParams")],
            quant_clusters=self.numbers(tab, "quantClusters").tolist(),
            external=external,
        )

    def typed(self, raw: np.ndarray, type_id: int, shape: tuple[int, ...], what: str) -> np.ndarray:
        """Raw bytes as an array of the tensor's dtype and shape (checked sizes)."""
        if not dtypes.has_numpy(type_id):
            return raw
        dtype = dtypes.to_numpy(type_id)
        if any(d < 0 for d in shape):
            raise self.error(f"{what} holds data but has unknown dims {list(shape)}")
        expected = math.prod(shape) * dtype.itemsize
        if raw.size != expected:
            short = "shorter" if raw.size < expected else "longer"
            raise self.error(f"{what}: data is {raw.size} bytes, {short} than dims {list(shape)} "
                             f"x {dtype.itemsize}-byte {dtype} = {expected}")
        return raw.view(dtype.newbyteorder("<")).reshape(shape)

    def quant_param(self, tab: Table) -> QuantParam:
        return QuantParam(
            scale=self.get(tab, "scale"), zero_point=self.get(tab, "zeroPoint"),
            min=self.get(tab, "min"), max=self.get(tab, "max"),
            narrow_range=self.get(tab, "narrowRange"), num_bits=self.get(tab, "numBits"),
            inited=self.get(tab, "inited"),
            var_corr=self.get(tab, "varCorr"), mean_corr=self.get(tab, "meanCorr"),
            dst_dtype=self.get(tab, "dstDtype"), round_type=self.get(tab, "roundType"),
            multiplier=self.get(tab, "multiplier"),
        )

    # -- external weights ---------------------------------------------------------------

    def external(self, tab: Table, what: str) -> ExternalData | None:
        entries = self.tables(tab, "externalData")
        if not entries:
            return None
        if len(entries) > 1:
            raise self.error(f"{what} has {len(entries)} externalData entries (MindSpore Lite "
                             "supports exactly one)")
        e = entries[0]
        return ExternalData(location=self.string(e, "location"), offset=self.get(e, "offset"),
                            length=self.get(e, "length"), checksum=self.string(e, "checkSum"))

    def external_bytes(self, ext: ExternalData, what: str) -> np.ndarray:
        """The external bytes of a tensor as a read-only uint8 view (checked bounds)."""
        if self.base_dir is None:
            raise self.error(f"{what} keeps its data in {ext.location!r}; reading it needs the "
                             "model's folder (use load(path) or loads(..., base_dir=...))")
        rel = Path(ext.location)
        if not ext.location or rel.is_absolute() or ".." in rel.parts:
            raise self.error(f"{what}: external data location {ext.location!r} must be a "
                             "relative path inside the model's folder")
        if ext.offset < 0 or ext.length < 0:
            raise self.error(f"{what}: external data offset {ext.offset} / length {ext.length} "
                             "must be >= 0")
        side = self.side_file(ext.location, what)
        if ext.offset + ext.length > len(side):
            raise self.error(f"{what}: external data [{ext.offset}, +{ext.length}) runs past the "
                             f"end of {ext.location} ({len(side)} bytes)")
        raw = np.frombuffer(side, np.uint8, ext.length, ext.offset)
        if not self.lazy and ext.checksum.startswith(CHECKSUM_PREFIX):
            digest = CHECKSUM_PREFIX + hashlib.sha256(raw).hexdigest()
            if digest != ext.checksum:
                raise self.error(f"{what}: checksum of {ext.location} bytes does not match")
        return raw

    def side_file(self, location: str, what: str) -> Any:
        if location not in self.side_files:
            path = self.base_dir / location
            try:
                with open(path, "rb") as f:
                    self.side_files[location] = _map(f) if self.lazy else f.read()
            except OSError as e:
                raise self.error(f"{what}: cannot open external data file {path}: "
                                 f"{e.strerror}") from None
        return self.side_files[location]

