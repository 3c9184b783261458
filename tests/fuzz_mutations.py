"""Seed models and seeded mutations of them, for the model-file fuzzer (`fuzz_models.py`).

A mutation is a pure function of (seed bytes, `random.Random`): the same seed model, level
and random state give the same bytes, so a case is replayed from its id alone. Two levels:

- `bytes`: truncation, bit flips, byte splices, zeroed ranges, repeated chunks and huge
  length fields (protobuf length prefixes found by walking the wire format; flatbuffer
  offsets and vector lengths as aligned words), whatever the format;
- `struct`: edits through the format's own object model (the onnx protobuf, our Lite IR via
  `converters.lite.reader`/`writer`, the MindIR protobuf): wrong dtypes, negative or huge
  dims, dangling references, missing weights, bad attribute values, NaN weights, cycles,
  empty graphs, non-UTF-8 names, wrong ops and arities, broken graph I/O.
"""

from __future__ import annotations

import functools
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MODELS = Path(__file__).resolve().parent.parent / "models"
LEVELS = ("bytes", "struct")


@dataclass(frozen=True)
class SeedModel:
    """A valid model to mutate: `name` ends in its format's extension; `side` names files or
    folders that must sit next to it (external weights)."""

    name: str
    load: Callable[[], bytes]
    side: tuple[Path, ...] = ()

    @property
    def ext(self) -> str:
        return Path(self.name).suffix


def _file(path: Path) -> Callable[[], bytes]:
    return path.read_bytes


def _zoo(name: str) -> Callable[[], bytes]:
    def build() -> bytes:
        from provider import zoo

        return zoo.build(name).SerializeToString()

    return build


def _tiny_cnn() -> bytes:
    """Conv/BN/ReLU/pooling/Gemm/Softmax with a symbolic batch: many attributes, small weights."""
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], "conv1", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["bn"], "bn",
                         epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r1"], "relu"),
        helper.make_node("MaxPool", ["r1"], ["p1"], "pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], "dw", kernel_shape=[3, 3], group=4,
                         pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["c2"], ["p2"], "avg", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p2"], ["gap"], "gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], "flatten", axis=1),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], "fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], "softmax", axis=-1),
    ]
    var = numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "var")
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
        [init("w1", 4, 3, 3, 3), init("b1", 4), init("g", 4), init("beta", 4), init("mean", 4),
         var, init("w2", 4, 1, 3, 3), init("wf", 5, 4), init("bf", 5)])
    return _serialized(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _tiny_ops() -> bytes:
    """Shape-driven ops (Reshape, Slice, Gather, Concat, Transpose, ...) fed by int constants."""
    rng = np.random.default_rng(1)

    def const(name: str, values, dtype=np.int64) -> TensorProto:
        return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], "matmul"),
        helper.make_node("Add", ["mm", "bias"], ["add"], "add"),
        helper.make_node("Reshape", ["add", "shape"], ["rs"], "reshape"),
        helper.make_node("Transpose", ["rs"], ["tr"], "transpose", perm=[0, 2, 1, 3]),
        helper.make_node("Slice", ["tr", "starts", "ends", "axes"], ["sl"], "slice"),
        helper.make_node("Gather", ["sl", "idx"], ["ga"], "gather", axis=3),
        helper.make_node("Concat", ["ga", "ga"], ["cc"], "concat", axis=-1),
        helper.make_node("ReduceMean", ["cc"], ["rm"], "reduce", axes=[3], keepdims=1),
        helper.make_node("Mul", ["rm", "scale"], ["mu"], "mul"),
        helper.make_node("Tanh", ["mu"], ["th"], "tanh"),
        helper.make_node("Flatten", ["th"], ["y"], "flatten", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, None])],
        [numpy_helper.from_array(rng.standard_normal((8, 12)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(12).astype(np.float32), "bias"),
         const("shape", [2, 4, 3, 4]), const("starts", [1]), const("ends", [3]),
         const("axes", [2]), const("idx", [0, 2]),
         numpy_helper.from_array(np.float32(0.5), "scale")])
    return _serialized(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def _tiny_rnn() -> bytes:
    """Recurrences Lite has no primitive for (carried as Custom, run by the NPU): an RNN, then
    a reverse GRU resetting before its product, from a given initial state."""
    rng = np.random.default_rng(2)

    def weight(name: str, *shape: int) -> TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.4).astype(np.float32), name)

    nodes = [
        helper.make_node("RNN", ["x", "rw", "rr", "rb"], ["ry"], "rnn", hidden_size=6),
        helper.make_node("Squeeze", ["ry", "axis1"], ["rs"], "squeeze"),
        helper.make_node("GRU", ["rs", "gw", "gr", "", "", "h0"], ["gy", "y_h"], "gru",
                         hidden_size=4, direction="reverse", linear_before_reset=0),
    ]
    graph = helper.make_graph(
        nodes, "tiny_rnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 2, 3]),
         helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, 2, 4])],
        [helper.make_tensor_value_info("gy", TensorProto.FLOAT, [5, 1, 2, 4]),
         helper.make_tensor_value_info("y_h", TensorProto.FLOAT, [1, 2, 4])],
        [weight("rw", 1, 6, 3), weight("rr", 1, 6, 6), weight("rb", 1, 12),
         weight("gw", 1, 12, 6), weight("gr", 1, 12, 4),
         numpy_helper.from_array(np.array([1], np.int64), "axis1")])
    return _serialized(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]))


def _serialized(model: onnx.ModelProto) -> bytes:
    model.ir_version = 8  # what every supported onnxruntime (1.23 included) loads
    return model.SerializeToString()


def seed_models() -> dict[str, SeedModel]:
    """Every seed model by name: zoo and tiny ONNX models, the .ms and .mindir fixtures."""
    seeds = [SeedModel("tiny_cnn.onnx", _tiny_cnn), SeedModel("tiny_ops.onnx", _tiny_ops),
             SeedModel("tiny_rnn.onnx", _tiny_rnn)]
    seeds += [SeedModel(f"zoo/{n}.onnx", _zoo(n))
              for n in ("resnet_block", "transformer_encoder", "mobilenet_v2")]
    seeds += [SeedModel(f"mslite/{p.name}", _file(p)) for p in sorted(MODELS.glob("mslite/*.ms"))]
    for p in sorted(MODELS.glob("mindir/*.mindir")):
        side = tuple(MODELS.glob(f"mindir/{p.stem.removesuffix('_graph')}_variables"))
        seeds.append(SeedModel(f"mindir/{p.name}", _file(p), side))
    return {s.name: s for s in seeds}


@functools.cache
def seed_bytes(name: str) -> bytes:
    return seed_models()[name].load()


def mutate(seed: SeedModel, level: str, rng: random.Random) -> tuple[bytes, list[str]]:
    """The mutated bytes of `seed` and what was done (one entry per mutation applied)."""
    data = seed_bytes(seed.name)
    if level == "bytes":
        return _mutate_bytes(data, seed.ext, rng)
    if level == "struct":
        return STRUCTURAL[seed.ext](data, rng)
    raise ValueError(f"level {level!r}: expected one of {LEVELS}")


# ---- bytes ---------------------------------------------------------------------------------

HUGE = [0, 1, 0x7F, 0x80, 0xFFFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 1 << 40, (1 << 63) - 1,
        (1 << 64) - 1]


def _mutate_bytes(data: bytes, ext: str, rng: random.Random) -> tuple[bytes, list[str]]:
    out = bytearray(data)
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if len(out) < 8:
            break
        kind = rng.choice(["truncate", "flip", "flip", "splice", "zero", "repeat", "huge",
                           "huge"])
        done.append(BYTE_MUTATIONS[kind](out, ext, rng))
    return bytes(out), done


def _truncate(b: bytearray, ext: str, rng: random.Random) -> str:
    n = len(b)
    cut = rng.choice([rng.randrange(n), rng.randrange(min(n, 64)), n - 1 - rng.randrange(min(n, 64))])
    del b[cut:]
    return f"truncate at {cut}/{n}"


def _flip(b: bytearray, ext: str, rng: random.Random) -> str:
    positions = [rng.randrange(len(b)) for _ in range(rng.choice([1, 1, 2, 8]))]
    for p in positions:
        b[p] ^= 1 << rng.randrange(8)
    return f"bit flips at {positions}"


def _splice(b: bytearray, ext: str, rng: random.Random) -> str:
    src, dst, size = rng.randrange(len(b)), rng.randrange(len(b)), rng.randint(1, 64)
    chunk = b[src:src + size]
    if rng.random() < 0.5:
        b[dst:dst + len(chunk)] = chunk
        return f"overwrite {len(chunk)} bytes at {dst} with bytes from {src}"
    b[dst:dst] = chunk
    return f"insert {len(chunk)} bytes from {src} at {dst}"


def _zero(b: bytearray, ext: str, rng: random.Random) -> str:
    start, size = rng.randrange(len(b)), rng.choice([1, 4, 16, 256, 4096])
    end = min(len(b), start + size)
    b[start:end] = bytes(end - start)
    return f"zero bytes {start}..{end}"


def _repeat(b: bytearray, ext: str, rng: random.Random) -> str:
    start, size = rng.randrange(len(b)), rng.choice([2, 8, 64, 512])
    chunk = b[start:start + size]
    times = rng.choice([1, 2, 16])
    b[start:start] = chunk * times
    return f"repeat bytes {start}..{start + len(chunk)} {times} more time(s)"


def _huge(b: bytearray, ext: str, rng: random.Random) -> str:
    """An extreme value in a length field: protobuf length prefixes, flatbuffer words."""
    if ext == ".ms":
        width = rng.choice([2, 4, 4])
        pos = rng.randrange(min(len(b), 1 << 16) - width) & ~(width - 1)
        value = rng.choice(HUGE + [rng.randrange(1 << 32)]) & ((1 << (8 * width)) - 1)
        struct.pack_into("<H" if width == 2 else "<I", b, pos, value)
        return f"u{8 * width} at {pos} = {value:#x}"
    fields = protobuf_lengths(bytes(b))
    if not fields:
        return _flip(b, ext, rng)
    pos, size, length = rng.choice(fields)
    value = rng.choice(HUGE + [length + 1, max(length - 1, 0), length * 2 + 7])
    b[pos:pos + size] = _varint(value)
    return f"protobuf length at {pos} {length} -> {value:#x}"


BYTE_MUTATIONS: dict[str, Callable[[bytearray, str, random.Random], str]] = {
    "truncate": _truncate, "flip": _flip, "splice": _splice, "zero": _zero,
    "repeat": _repeat, "huge": _huge,
}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise ValueError("bad varint")


def protobuf_lengths(data: bytes, limit: int = 20_000) -> list[tuple[int, int, int]]:
    """(position, size, value) of the length prefixes of a protobuf's length-delimited fields,
    nested messages included (payloads that parse as messages are walked too)."""
    found: list[tuple[int, int, int]] = []

    def walk(start: int, end: int, depth: int) -> None:
        pos = start
        local = []
        while pos < end:
            key, pos = _read_varint(data, pos, end)
            wire = key & 7
            if key >> 3 == 0:
                raise ValueError("field 0")
            if wire == 0:
                _, pos = _read_varint(data, pos, end)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                at = pos
                length, pos = _read_varint(data, pos, end)
                if pos + length > end:
                    raise ValueError("overrun")
                local.append((at, pos - at, length, pos))
                pos += length
            else:
                raise ValueError("wire type")
        if pos != end:
            raise ValueError("overrun")
        for at, size, length, payload in local:
            if len(found) >= limit:
                return
            found.append((at, size, length))
            if depth < 12 and length:
                try:
                    sub_start = len(found)
                    walk(payload, payload + length, depth + 1)
                except ValueError:
                    del found[sub_start:]

    try:
        walk(0, len(data), 0)
    except ValueError:
        return []
    return found


def _bad_utf8(data: bytes, names: list[str], rng: random.Random) -> tuple[bytes, str]:
    """Replace one byte of a name everywhere it appears with one that makes it invalid UTF-8."""
    names = [n for n in names if n and n.isascii() and data.count(n.encode()) >= 1]
    if not names:
        return data, "no name to break"
    name = rng.choice(names)
    raw = name.encode()
    k = rng.randrange(len(raw))
    broken = raw[:k] + bytes([rng.choice([0xFF, 0xC3, 0x80, 0xED])]) + raw[k + 1:]
    return data.replace(raw, broken), f"name {name!r} byte {k} made invalid UTF-8"


# ---- structure: ONNX -------------------------------------------------------------------------

BAD_INTS = [0, -1, -7, 3, 1 << 31, -(1 << 31), (1 << 62), 1000003]
BAD_DIMS = [-1, -5, 0, 1 << 31, 1 << 40, 1000003, 1]
BAD_FLOATS = [float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e30]
ONNX_DTYPES = [0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 16, 17, 21, 23, 99, 1 << 20]
OTHER_ONNX_OPS = ["Conv", "Relu", "MatMul", "Reshape", "Softmax", "MaxPool", "Add", "Gemm",
                  "Transpose", "Concat", "FuzzOp", "LayerNormalization", "Resize", "Loop"]


def _onnx_struct(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    model = onnx.ModelProto()
    model.ParseFromString(data)
    done = []
    utf8 = False
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choice(list(ONNX_MUTATIONS) + ["utf8"])
        if kind == "utf8":
            utf8 = True
            continue
        done.append(ONNX_MUTATIONS[kind](model, rng))
    out = model.SerializeToString()
    if utf8:
        g = model.graph
        names = [n.name for n in g.node] + [v.name for v in (*g.input, *g.output)]
        names += [o for n in g.node for o in n.output]
        out, what = _bad_utf8(out, names, rng)
        done.append(what)
    return out, done


def _pick_value(model: onnx.ModelProto, rng: random.Random):
    g = model.graph
    values = [*g.input, *g.output, *g.value_info]
    return rng.choice(values) if values else None


def _onnx_dtype(model: onnx.ModelProto, rng: random.Random) -> str:
    new = rng.choice(ONNX_DTYPES)
    g = model.graph
    if g.initializer and rng.random() < 0.5:
        t = rng.choice(g.initializer)
        old, t.data_type = t.data_type, new
        return f"initializer {t.name!r} data_type {old} -> {new}"
    v = _pick_value(model, rng)
    if v is None:
        return "dtype: no value"
    old, v.type.tensor_type.elem_type = v.type.tensor_type.elem_type, new
    return f"value {v.name!r} elem_type {old} -> {new}"


def _onnx_dims(model: onnx.ModelProto, rng: random.Random) -> str:
    g = model.graph
    dim = rng.choice(BAD_DIMS)
    if g.initializer and rng.random() < 0.4:
        t = rng.choice(g.initializer)
        if t.dims:
            k = rng.randrange(len(t.dims))
            t.dims[k] = dim
            return f"initializer {t.name!r} dim {k} -> {dim}"
    v = _pick_value(model, rng)
    if v is None or not v.type.tensor_type.shape.dim:
        return "dims: no shaped value"
    dims = v.type.tensor_type.shape.dim
    if rng.random() < 0.2:
        dims.add().dim_value = dim
        return f"value {v.name!r} gets an extra dim {dim}"
    k = rng.randrange(len(dims))
    dims[k].dim_value = dim
    return f"value {v.name!r} dim {k} -> {dim}"


def _onnx_dangling(model: onnx.ModelProto, rng: random.Random) -> str:
    nodes = [n for n in model.graph.node if n.input]
    if not nodes:
        return "dangling: no node input"
    n = rng.choice(nodes)
    k = rng.randrange(len(n.input))
    n.input[k] = "fuzz_missing"
    return f"node {n.name!r} input {k} -> 'fuzz_missing'"


def _onnx_missing_init(model: onnx.ModelProto, rng: random.Random) -> str:
    g = model.graph
    if not g.initializer:
        return "missing_init: none"
    k = rng.randrange(len(g.initializer))
    name = g.initializer[k].name
    del g.initializer[k]
    return f"initializer {name!r} removed"


def _onnx_attr(model: onnx.ModelProto, rng: random.Random) -> str:
    A = onnx.AttributeProto
    nodes = [n for n in model.graph.node if n.attribute]
    if not nodes:
        return "attr: none"
    n = rng.choice(nodes)
    a = rng.choice(n.attribute)
    roll = rng.random()
    if roll < 0.1:
        n.attribute.remove(a)
        return f"node {n.name!r} attribute {a.name!r} removed"
    if roll < 0.2:
        a.type = rng.choice([A.FLOAT, A.INT, A.STRING, A.INTS, A.TENSOR, A.GRAPH])
        return f"node {n.name!r} attribute {a.name!r} type -> {a.type}"
    if a.type == A.INT:
        a.i = rng.choice(BAD_INTS)
        return f"node {n.name!r} {a.name} = {a.i}"
    if a.type == A.INTS:
        if a.ints and rng.random() < 0.7:
            k = rng.randrange(len(a.ints))
            a.ints[k] = rng.choice(BAD_INTS)
            return f"node {n.name!r} {a.name}[{k}] = {a.ints[k]}"
        if rng.random() < 0.5:
            del a.ints[:]
            return f"node {n.name!r} {a.name} = []"
        a.ints.append(rng.choice(BAD_INTS))
        return f"node {n.name!r} {a.name} gets an extra value {a.ints[-1]}"
    if a.type == A.FLOAT:
        a.f = rng.choice(BAD_FLOATS)
        return f"node {n.name!r} {a.name} = {a.f}"
    if a.type == A.STRING:
        a.s = rng.choice([b"", b"FUZZ", b"\xff\xfe"])
        return f"node {n.name!r} {a.name} = {a.s!r}"
    if a.type == A.TENSOR and a.t.dims:
        a.t.dims[0] = rng.choice(BAD_DIMS)
        return f"node {n.name!r} {a.name} tensor dim 0 -> {a.t.dims[0]}"
    n.attribute.add().CopyFrom(helper.make_attribute("fuzz", rng.choice(BAD_INTS)))
    return f"node {n.name!r} gets an unknown attribute 'fuzz'"


def _onnx_nan(model: onnx.ModelProto, rng: random.Random) -> str:
    inits = [t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT]
    if not inits:
        return "nan: no float initializer"
    t = rng.choice(inits)
    try:
        array = numpy_helper.to_array(t).copy()
    except ValueError:  # an earlier mutation broke its dims: that file is bad enough
        return f"nan: initializer {t.name!r} no longer decodes"
    if array.size:
        flat = array.reshape(-1)
        picks = [rng.randrange(flat.size) for _ in range(rng.choice([1, 3, flat.size]))]
        flat[picks] = rng.choice([np.nan, np.inf, -np.inf, 3e38])
    t.CopyFrom(numpy_helper.from_array(array, t.name))
    return f"initializer {t.name!r}: NaN/inf/huge values"


def _onnx_cycle(model: onnx.ModelProto, rng: random.Random) -> str:
    nodes = model.graph.node
    if not nodes:
        return "cycle: no nodes"
    i = rng.randrange(len(nodes))
    j = rng.randrange(i, len(nodes))
    if not nodes[i].input or not nodes[j].output:
        return "cycle: node without inputs"
    k = rng.randrange(len(nodes[i].input))
    nodes[i].input[k] = nodes[j].output[0]
    return f"node {nodes[i].name!r} input {k} <- output of node {nodes[j].name!r} (cycle)"


def _onnx_empty(model: onnx.ModelProto, rng: random.Random) -> str:
    g = model.graph
    del g.node[:]
    if rng.random() < 0.5:
        del g.output[:]
        return "graph emptied (no nodes, no outputs)"
    return "graph has no nodes"


def _onnx_op(model: onnx.ModelProto, rng: random.Random) -> str:
    nodes = model.graph.node
    if not nodes:
        return "op: no nodes"
    n = rng.choice(nodes)
    if rng.random() < 0.2:
        n.domain = rng.choice(["com.fuzz", "ai.onnx.ml", "com.microsoft"])
        return f"node {n.name!r} domain -> {n.domain!r}"
    old, n.op_type = n.op_type, rng.choice(OTHER_ONNX_OPS)
    return f"node {n.name!r} op {old} -> {n.op_type}"


def _onnx_opset(model: onnx.ModelProto, rng: random.Random) -> str:
    if not model.opset_import:
        return "opset: none"
    op = model.opset_import[0]
    op.version = rng.choice([0, 1, 6, 9, 99, 1 << 31])
    return f"opset {op.domain or 'ai.onnx'} -> {op.version}"


def _onnx_constant(model: onnx.ModelProto, rng: random.Random) -> str:
    ints = [t for t in model.graph.initializer if t.data_type == TensorProto.INT64]
    if not ints:
        return _onnx_nan(model, rng)
    t = rng.choice(ints)
    try:
        array = numpy_helper.to_array(t).copy()
    except ValueError:  # an earlier mutation broke its dims: that file is bad enough
        return f"int64 initializer {t.name!r} no longer decodes"
    if array.size:
        array.reshape(-1)[rng.randrange(array.size)] = rng.choice(BAD_INTS)
    t.CopyFrom(numpy_helper.from_array(array, t.name))
    return f"int64 initializer {t.name!r} -> {array.tolist()}"


def _onnx_arity(model: onnx.ModelProto, rng: random.Random) -> str:
    nodes = model.graph.node
    if not nodes:
        return "arity: no nodes"
    n = rng.choice(nodes)
    if n.input and rng.random() < 0.5:
        del n.input[-1]
        return f"node {n.name!r} loses its last input"
    if rng.random() < 0.3 and len(n.output):
        n.output.append(f"{n.output[0]}_fuzz_extra")
        return f"node {n.name!r} gets an extra output"
    n.input.append(n.input[0] if n.input else "")
    return f"node {n.name!r} gets an extra input"


def _graph_io(g, roll: float) -> str | None:
    """The I/O mutations ONNX and MindIR graphs share (their protobufs name the fields
    alike); None when `roll` asks for a format's own."""
    if roll < 0.3 and g.input:
        name = g.input[0].name
        del g.input[0]
        return f"graph input {name!r} removed"
    if roll < 0.5 and g.output:
        g.output[0].name = "fuzz_missing_output"
        return "graph output renamed to a value nothing produces"
    return None


def _onnx_io(model: onnx.ModelProto, rng: random.Random) -> str:
    g = model.graph
    roll = rng.random()
    shared = _graph_io(g, roll)
    if shared is not None:
        return shared
    if roll < 0.7 and g.output:
        g.output.add().CopyFrom(g.output[0])
        return "graph output listed twice"
    if g.node and g.node[0].output:
        j = rng.randrange(len(g.node))
        if g.node[j].output:
            g.node[j].output[0] = g.node[0].output[0]
            return f"node {g.node[j].name!r} output renamed to node {g.node[0].name!r}'s (two producers)"
    return "io: nothing to change"


ONNX_MUTATIONS: dict[str, Callable[[onnx.ModelProto, random.Random], str]] = {
    "dtype": _onnx_dtype, "dims": _onnx_dims, "dangling": _onnx_dangling,
    "missing_init": _onnx_missing_init, "attr": _onnx_attr, "attr2": _onnx_attr,
    "nan": _onnx_nan, "cycle": _onnx_cycle, "empty": _onnx_empty, "op": _onnx_op,
    "opset": _onnx_opset, "constant": _onnx_constant, "arity": _onnx_arity, "io": _onnx_io,
}


# ---- structure: .ms (Lite IR) ----------------------------------------------------------------

LITE_TYPE_IDS = [0, 12, 17, 30, 32, 33, 34, 35, 37, 40, 42, 43, 44, 99]


def _lite_struct(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    from converters.errors import LitenpuError
    from converters.lite import reader, writer

    for _ in range(20):  # a mutation the writer cannot express is redrawn
        model = reader.loads(data, source="seed.ms")
        done = []
        utf8 = False
        for _ in range(rng.choice([1, 1, 2, 3])):
            kind = rng.choice(list(LITE_MUTATIONS) + ["utf8"])
            if kind == "utf8":
                utf8 = True
            else:
                done.append(LITE_MUTATIONS[kind](model, rng))
        if rng.random() < 0.5:
            model.subgraphs = []  # rebuilt from the edited lists; else the stale one is kept
            done.append("main subgraph rebuilt")
        try:
            out = writer.dumps(model)
        except LitenpuError:
            continue
        if utf8:
            out, what = _bad_utf8(out, [t.name for t in model.tensors] + [n.name for n in model.nodes], rng)
            done.append(what)
        return out, done
    return data, ["no writable structural mutation found"]


def _lite_dtype(model, rng: random.Random) -> str:
    from converters.lite import dtypes

    t = rng.choice(model.tensors)
    new = rng.choice(LITE_TYPE_IDS)
    if t.data is not None and dtypes.has_numpy(new):
        want = dtypes.to_numpy(new)
        if want.itemsize != t.data.dtype.itemsize:
            return f"dtype: tensor {t.name!r} keeps its type (itemsize differs)"
        t.data = t.data.view(want)
    elif t.data is not None:
        t.data = np.frombuffer(t.data.tobytes(), np.uint8)
    old, t.type_id = t.type_id, new
    return f"tensor {t.name!r} TypeId {old} -> {new}"


def _lite_dims(model, rng: random.Random) -> str:
    t = rng.choice(model.tensors)
    if t.data is not None:
        if t.data.ndim >= 2:
            shape = tuple(reversed(t.data.shape))
            t.data = t.data.reshape(shape)
            t.shape = shape
            return f"constant {t.name!r} reshaped to {list(shape)}"
        return f"dims: constant {t.name!r} kept"
    dim = rng.choice([-1, 0, 1, 1000003, (1 << 31) - 1])
    if not t.shape:
        t.shape = (dim,)
    else:
        k = rng.randrange(len(t.shape))
        t.shape = tuple(dim if i == k else d for i, d in enumerate(t.shape))
    return f"tensor {t.name!r} shape -> {list(t.shape)}"


def _lite_dangling(model, rng: random.Random) -> str:
    from converters.lite.ir import LiteTensor

    nodes = [n for n in model.nodes if n.inputs]
    if not nodes:
        return "dangling: no node input"
    n = rng.choice(nodes)
    k = rng.randrange(len(n.inputs))
    if rng.random() < 0.5:
        n.inputs[k] = model.add_tensor(LiteTensor("fuzz_dangling", 43, (1, 4), node_type=2))
        return f"node {n.name!r} input {k} -> a tensor nothing produces"
    n.inputs[k] = rng.randrange(len(model.tensors))
    return f"node {n.name!r} input {k} -> tensor {n.inputs[k]}"


def _lite_missing_init(model, rng: random.Random) -> str:
    consts = [t for t in model.tensors if t.data is not None]
    if not consts:
        return "missing_init: none"
    t = rng.choice(consts)
    t.data = None
    return f"constant {t.name!r} loses its data"


def _lite_attr(model, rng: random.Random) -> str:
    from converters.lite import ops

    nodes = [n for n in model.nodes if ops.spec(n.op).fields]
    if not nodes:
        return "attr: none"
    n = rng.choice(nodes)
    f = rng.choice(ops.spec(n.op).fields)
    attrs = ops.complete(n.op, n.attrs)
    value = attrs[f.name]
    if f.kind == "int":
        value = rng.choice(BAD_INTS[:6])
    elif f.kind == "float":
        value = rng.choice(BAD_FLOATS)
    elif f.kind == "bool":
        value = not value
    elif f.kind == "enum":
        value = rng.choice(list(ops.enum_members(f.enum)))
    elif f.kind == "ints":
        value = list(value)
        if value and rng.random() < 0.7:
            value[rng.randrange(len(value))] = rng.choice([0, -1, -3, 1 << 31, 1000003])
        elif value and rng.random() < 0.5:
            value = []
        else:
            value.append(rng.choice([0, -1, 7]))
    elif f.kind == "floats":
        value = [rng.choice(BAD_FLOATS)] * max(len(value), 1)
    elif f.kind == "ints2d":
        value = [[-1, 1000003]] if rng.random() < 0.5 else []
    else:
        return f"attr: node {n.name!r} field {f.name} ({f.kind}) kept"
    n.attrs = {**n.attrs, f.name: value}
    kind = f"Activation {attrs['activation_type']}" if n.op == "Activation" else n.op
    return f"node {n.name!r} ({kind}) {f.name} = {value!r}"


def _lite_nan(model, rng: random.Random) -> str:
    consts = [t for t in model.tensors if t.data is not None and t.data.dtype.kind == "f"
              and t.data.size]
    if not consts:
        return "nan: no float constant"
    t = rng.choice(consts)
    data = np.array(t.data)
    flat = data.reshape(-1)
    picks = [rng.randrange(flat.size) for _ in range(rng.choice([1, 3, flat.size]))]
    flat[picks] = rng.choice([np.nan, np.inf, -np.inf, 6e4 if data.dtype == np.float16 else 3e38])
    t.data = data
    return f"constant {t.name!r}: NaN/inf/huge values"


def _lite_cycle(model, rng: random.Random) -> str:
    if not model.nodes:
        return "cycle: no nodes"
    i = rng.randrange(len(model.nodes))
    j = rng.randrange(i, len(model.nodes))
    a, b = model.nodes[i], model.nodes[j]
    if not a.inputs or not b.outputs:
        return "cycle: node without inputs"
    k = rng.randrange(len(a.inputs))
    a.inputs[k] = b.outputs[0]
    return f"node {a.name!r} input {k} <- output of node {b.name!r} (cycle)"


def _lite_empty(model, rng: random.Random) -> str:
    model.nodes = []
    model.subgraphs = []
    if rng.random() < 0.5:
        model.outputs = []
        return "graph emptied (no nodes, no outputs)"
    return "graph has no nodes"


def _lite_op(model, rng: random.Random) -> str:
    from converters.lite import ops

    if not model.nodes:
        return "op: no nodes"
    n = rng.choice(model.nodes)
    old = n.op
    n.op = rng.choice(["Conv2DFusion", "MatMulFusion", "Activation", "Reshape", "Softmax",
                       "MaxPoolFusion", "AddFusion", "Transpose", "Concat", "Custom",
                       rng.choice(list(ops.OPS))])
    n.attrs = {"type": "fuzz", "attr": {}} if n.op == "Custom" else {}
    return f"node {n.name!r} op {old} -> {n.op} (default attributes)"


def _lite_arity(model, rng: random.Random) -> str:
    if not model.nodes:
        return "arity: no nodes"
    n = rng.choice(model.nodes)
    if n.inputs and rng.random() < 0.5:
        n.inputs = n.inputs[:-1]
        return f"node {n.name!r} loses its last input"
    if rng.random() < 0.2:
        n.outputs = []
        return f"node {n.name!r} has no outputs"
    n.inputs = [*n.inputs, rng.randrange(len(model.tensors))]
    return f"node {n.name!r} gets an extra input"


def _lite_io(model, rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.25:
        model.inputs = []
        return "model has no inputs"
    if roll < 0.5:
        model.outputs = [rng.randrange(len(model.tensors))]
        return f"model output -> tensor {model.outputs[0]}"
    if roll < 0.75 and model.inputs:
        model.inputs = [*model.inputs, model.inputs[0]]
        return "model input listed twice"
    consts = [i for i, t in enumerate(model.tensors) if t.data is not None]
    if consts:
        model.inputs = [*model.inputs, rng.choice(consts)]
        return "a constant listed as a model input"
    return "io: nothing to change"


LITE_MUTATIONS = {
    "dtype": _lite_dtype, "dims": _lite_dims, "dangling": _lite_dangling,
    "missing_init": _lite_missing_init, "attr": _lite_attr, "attr2": _lite_attr,
    "nan": _lite_nan, "cycle": _lite_cycle, "empty": _lite_empty, "op": _lite_op,
    "arity": _lite_arity, "io": _lite_io,
}


# ---- structure: MindIR -----------------------------------------------------------------------

def _mindir_struct(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    from converters.mindir._generated import mind_ir_pb2 as pb

    model = pb.ModelProto()
    model.ParseFromString(data)
    done = []
    utf8 = False
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choice(list(MINDIR_MUTATIONS) + ["utf8"])
        if kind == "utf8":
            utf8 = True
        else:
            done.append(MINDIR_MUTATIONS[kind](model, rng))
    out = model.SerializeToString()
    if utf8:
        g = model.graph
        names = [n.name for n in g.node] + [p.name for p in g.parameter] + [v.name for v in g.input]
        out, what = _bad_utf8(out, names, rng)
        done.append(what)
    return out, done


def _tensors(model) -> list:
    g = model.graph
    return [*g.parameter, *(t for v in g.input for t in v.tensor)]


def _mindir_dtype(model, rng: random.Random) -> str:
    tensors = _tensors(model)
    if not tensors:
        return "dtype: no tensor"
    t = rng.choice(tensors)
    old, t.data_type = t.data_type, rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 99])
    return f"tensor {t.name!r} data_type {old} -> {t.data_type}"


def _mindir_dims(model, rng: random.Random) -> str:
    tensors = [t for t in _tensors(model) if t.dims]
    shaped = [a for n in model.graph.node for a in n.attribute if a.name == "shape" and a.tensors]
    if shaped and (not tensors or rng.random() < 0.3):
        t = rng.choice(rng.choice(shaped).tensors)
    elif tensors:
        t = rng.choice(tensors)
    else:
        return "dims: no shaped tensor"
    if not t.dims:
        return "dims: scalar kept"
    k = rng.randrange(len(t.dims))
    t.dims[k] = rng.choice(BAD_DIMS)
    return f"tensor {t.name!r} dim {k} -> {t.dims[k]}"


def _mindir_dangling(model, rng: random.Random) -> str:
    nodes = [n for n in model.graph.node if n.input]
    if not nodes:
        return "dangling: no node input"
    n = rng.choice(nodes)
    k = rng.randrange(len(n.input))
    n.input[k] = "fuzz_missing"
    return f"node {n.name!r} input {k} -> 'fuzz_missing'"


def _mindir_missing_init(model, rng: random.Random) -> str:
    g = model.graph
    if not g.parameter:
        return "missing_init: none"
    k = rng.randrange(len(g.parameter))
    name = g.parameter[k].name
    if rng.random() < 0.5:
        del g.parameter[k]
        return f"parameter {name!r} removed"
    g.parameter[k].ClearField("raw_data")
    return f"parameter {name!r} loses its data"


def _mindir_attr(model, rng: random.Random) -> str:
    from converters.mindir._generated import mind_ir_pb2 as pb

    A = pb.AttributeProto
    attrs = [a for p in model.primitives for a in p.attribute]
    attrs += [a for n in model.graph.node for a in n.attribute if a.name != "shape"]
    if not attrs:
        return "attr: none"
    a = rng.choice(attrs)
    roll = rng.random()
    if roll < 0.15:
        a.type = rng.choice([A.FLOAT, A.INT64, A.STRING, A.TENSORS, A.TUPLE, A.NONE, A.BOOL])
        return f"attribute {a.name!r} type -> {a.type}"
    if a.ints:
        a.ints[rng.randrange(len(a.ints))] = rng.choice(BAD_INTS)
        return f"attribute {a.name!r} ints -> {list(a.ints)}"
    if a.values:
        v = rng.choice(a.values)
        v.i = rng.choice(BAD_INTS)
        return f"attribute {a.name!r} tuple item -> {v.i}"
    if a.HasField("f"):
        a.f = rng.choice(BAD_FLOATS)
        return f"attribute {a.name!r} = {a.f}"
    if a.HasField("s"):
        a.s = rng.choice([b"", b"FUZZ", b"\xff\xfe"])
        return f"attribute {a.name!r} = {a.s!r}"
    a.i = rng.choice(BAD_INTS)
    return f"attribute {a.name!r} = {a.i}"


def _mindir_nan(model, rng: random.Random) -> str:
    params = [p for p in model.graph.parameter if p.data_type == 1 and p.raw_data]
    if not params:
        return "nan: no float parameter"
    p = rng.choice(params)
    data = np.frombuffer(p.raw_data, np.float32).copy()
    picks = [rng.randrange(data.size) for _ in range(rng.choice([1, 3, data.size]))]
    data[picks] = rng.choice([np.nan, np.inf, -np.inf, 3e38])
    p.raw_data = data.tobytes()
    return f"parameter {p.name!r}: NaN/inf/huge values"


def _mindir_cycle(model, rng: random.Random) -> str:
    nodes = [n for n in model.graph.node if n.op_type != "Constant"]
    if len(nodes) < 2:
        return "cycle: too few nodes"
    i = rng.randrange(len(nodes))
    j = rng.randrange(i, len(nodes))
    if not nodes[i].input or not nodes[j].output:
        return "cycle: node without inputs"
    k = rng.randrange(len(nodes[i].input))
    nodes[i].input[k] = nodes[j].output[0]
    return f"node {nodes[i].name!r} input {k} <- output of node {nodes[j].name!r} (cycle)"


def _mindir_empty(model, rng: random.Random) -> str:
    del model.graph.node[:]
    if rng.random() < 0.5:
        del model.graph.output[:]
        return "graph emptied (no nodes, no outputs)"
    return "graph has no nodes"


def _mindir_op(model, rng: random.Random) -> str:
    if model.primitives and rng.random() < 0.5:
        p = rng.choice(model.primitives)
        old, p.op_type = p.op_type, rng.choice(
            ["Conv2D", "ReLU", "MatMul", "Reshape", "Softmax", "MaxPool", "Add", "FuzzPrim",
             "BiasAdd", "Transpose", "Concat", "LayerNorm", ""])
        return f"primitive {p.name!r} op {old} -> {p.op_type}"
    nodes = [n for n in model.graph.node if n.op_type != "Constant"]
    if not nodes:
        return "op: no nodes"
    n = rng.choice(nodes)
    old, n.op_type = n.op_type, rng.choice(["REF::Missing:1", "FuzzPrim", "Constant", "ReLU", ""])
    return f"node {n.name!r} op_type {old} -> {n.op_type!r}"


def _mindir_arity(model, rng: random.Random) -> str:
    nodes = [n for n in model.graph.node if n.op_type != "Constant"]
    if not nodes:
        return "arity: no nodes"
    n = rng.choice(nodes)
    if n.input and rng.random() < 0.5:
        del n.input[-1]
        return f"node {n.name!r} loses its last input"
    if rng.random() < 0.2:
        n.output.append(f"{n.name}_fuzz_extra")
        return f"node {n.name!r} gets a second output"
    n.input.append(n.input[0] if n.input else "fuzz_missing")
    return f"node {n.name!r} gets an extra input"


def _mindir_io(model, rng: random.Random) -> str:
    g = model.graph
    roll = rng.random()
    shared = _graph_io(g, roll)
    if shared is not None:
        return shared
    if roll < 0.7 and g.input:
        del g.input[0].tensor[:]
        return "graph input without a tensor type"
    if g.output and g.parameter:
        g.output[0].name = g.parameter[0].name
        return "graph output is a parameter"
    return "io: nothing to change"


MINDIR_MUTATIONS = {
    "dtype": _mindir_dtype, "dims": _mindir_dims, "dangling": _mindir_dangling,
    "missing_init": _mindir_missing_init, "attr": _mindir_attr, "attr2": _mindir_attr,
    "nan": _mindir_nan, "cycle": _mindir_cycle, "empty": _mindir_empty, "op": _mindir_op,
    "arity": _mindir_arity, "io": _mindir_io,
}

STRUCTURAL: dict[str, Callable[[bytes, random.Random], tuple[bytes, list[str]]]] = {
    ".onnx": _onnx_struct, ".ms": _lite_struct, ".mindir": _mindir_struct,
}
