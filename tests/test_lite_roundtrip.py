"""IR -> .ms -> IR is the identity: every primitive in the schema, quant params, external data."""

from __future__ import annotations

import os

import numpy as np
import pytest
from lite_compare import assert_models_equal

from converters.errors import InvalidModelError, UnsupportedError
from converters.lite import ops, reader, writer
from converters.lite.ir import LiteModel, LiteNode, LiteTensor, QuantParam
from converters.lite.ops import FieldSpec

CNODE = 2  # MindSpore NodeType of an activation tensor


def non_default(f: FieldSpec) -> object:
    """A valid value for field `f` that differs from its default."""
    if f.kind == "int":
        return 7 if f.default != 7 else 8
    if f.kind == "float":
        return 1.5 if f.default != 1.5 else 2.25
    if f.kind == "bool":
        return not f.default
    if f.kind == "str":
        return f"s_{f.name}"
    if f.kind == "enum":
        return next(m for m in ops.enum_members(f.enum) if m != f.default)
    if f.kind == "ints":
        return [1, 2, 3] if f.wire.startswith("u") else [1, -2, 3]
    if f.kind == "floats":
        return [0.5, -1.25]
    if f.kind == "bools":
        return [True, False]
    if f.kind == "ints2d":
        return [[1, 2], [], [-3, 4]]
    return {"a": b"\x00\x01\xff", "empty": b""}


def model_with(op: str, attrs: dict) -> LiteModel:
    """x -> op(x, w) -> y, with a float32 weight and one of each quant feature."""
    m = LiteModel(name=f"m_{op}", version="test 1.0.0", fmk_type=3, mempool_size=5)
    x = m.add_tensor(LiteTensor.of("x", np.float32, (1, 3, "n"), node_type=CNODE, format="NHWC"))
    rng = np.random.default_rng(0)
    w = m.add_tensor(LiteTensor.of(
        "w", np.float32, (3, 4), rng.standard_normal((3, 4)).astype(np.float32),
        quant_params=[QuantParam(scale=0.1, zero_point=-3, min=-1.5, max=2.5, narrow_range=False,
                                 num_bits=4, inited=True, var_corr=0.5, mean_corr=0.25,
                                 dst_dtype=43, round_type=2, multiplier=0)],
        quant_clusters=[0.5, 1.5]))
    i8 = m.add_tensor(LiteTensor.of("idx", np.int64, (2,), np.array([5, -7], np.int64)))
    y = m.add_tensor(LiteTensor.of("y", np.float32, (1, 4, -1), node_type=CNODE))
    m.add_node(LiteNode("n0", op, attrs, [x, w, i8], [y], quant_type="QUANT_WEIGHT", device_type=1))
    m.inputs, m.outputs = [x], [y]
    return m.finalize_subgraph()


def expected(m: LiteModel) -> LiteModel:
    """What reading back gives: symbolic dims are written as -1."""
    for t in m.tensors:
        t.shape = tuple(-1 if isinstance(d, str) else d for d in t.shape)
    return m


@pytest.mark.parametrize("op", sorted(ops.OPS))
def test_every_primitive_round_trips_with_non_default_attrs(op):
    attrs = {f.name: non_default(f) for f in ops.spec(op).fields}
    m = model_with(op, attrs)
    back = reader.loads(writer.dumps(m))
    assert_models_equal(back, expected(model_with(op, attrs)))
    assert back.nodes[0].attrs == ops.complete(op, attrs)


def test_defaults_are_filled_on_read():
    back = reader.loads(writer.dumps(model_with("Conv2DFusion", {})))
    assert back.nodes[0].attrs == ops.complete("Conv2DFusion", {})
    assert back.nodes[0].attrs["pad_mode"] == "PAD"


def test_external_data_round_trip(tmp_path):
    m = model_with("MatMulFusion", {"transpose_b": True})
    path = tmp_path / "model.ms"
    writer.save(m, path, external_threshold=16)
    assert sorted(os.listdir(tmp_path)) == ["model.ms", "model.msw"]
    for lazy in (True, False):
        back = reader.load(path, lazy=lazy)
        assert_models_equal(back, expected(model_with("MatMulFusion", {"transpose_b": True})))
        w = back.tensors[1]
        assert w.external.location == "model.msw"
        assert w.external.length == 48 and w.external.offset % writer.DATA_ALIGNMENT == 0
        assert w.external.checksum.startswith("sha256:")
        assert not w.data.flags.writeable
        assert back.tensors[2].external is None  # 16 bytes: not above the threshold


def test_external_checksum_is_verified_when_reading_eagerly(tmp_path):
    path = tmp_path / "model.ms"
    writer.save(model_with("AddFusion", {}), path, external_threshold=0)
    side = tmp_path / "model.msw"
    raw = bytearray(side.read_bytes())
    raw[0] ^= 0xFF
    side.write_bytes(bytes(raw))
    reader.load(path, lazy=True)  # lazy: bounds only, pages untouched
    with pytest.raises(InvalidModelError, match="checksum"):
        reader.load(path, lazy=False)


def test_lazy_load_maps_weights_read_only_and_aligned(tmp_path):
    path = tmp_path / "m.ms"
    writer.save(model_with("AddFusion", {}), path)
    back = reader.load(path)
    w = back.tensors[1].data
    assert not w.flags.writeable
    assert w.ctypes.data % writer.DATA_ALIGNMENT == 0
    assert back.version == "test 1.0.0"


def test_empty_version_is_stamped_with_a_mindspore_comparable_producer():
    m = model_with("AddFusion", {})
    m.version = ""
    back = reader.loads(writer.dumps(m))
    assert back.version.startswith("litenpu ")
    assert back.version[-5:] >= "1.3.0"  # MindSpore Lite compares the last five characters


def test_activation_written_as_cnode_and_main_subgraph_added():
    m = LiteModel()
    x = m.add_tensor(LiteTensor.of("x", np.float32, (2,)))
    y = m.add_tensor(LiteTensor.of("y", np.float32, (2,)))
    m.add_node(LiteNode("r", "Activation", {"activation_type": "RELU"}, [x], [y]))
    m.inputs, m.outputs = [x], [y]
    back = reader.loads(writer.dumps(m))
    assert [t.node_type for t in back.tensors] == [CNODE, CNODE]
    assert len(back.subgraphs) == 1 and back.subgraphs[0].nodes == [0]


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "m.ms"
    path.write_bytes(b"old")
    bad = model_with("AddFusion", {})
    bad.nodes[0].inputs = [99]
    with pytest.raises(InvalidModelError, match="index 99"):
        writer.save(bad, path, external_threshold=0)
    assert path.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["m.ms"]


@pytest.mark.parametrize("mutate, error, match", [
    (lambda m: m.nodes[0].attrs.update(bogus=1), InvalidModelError, "bogus"),
    (lambda m: setattr(m.nodes[0], "op", "Conv2D"), UnsupportedError, "Conv2DFusion"),
    (lambda m: m.nodes[0].attrs.update(activation_type="RELU7"), InvalidModelError, "ActivationType"),
    (lambda m: setattr(m.tensors[1], "data", np.zeros((3, 4), np.float64)), InvalidModelError, "float64"),
    (lambda m: setattr(m.tensors[1], "data", np.zeros((4, 3), np.float32)), InvalidModelError, "shape"),
    (lambda m: setattr(m.tensors[0], "format", "NWHC"), InvalidModelError, "Format"),
    (lambda m: setattr(m.tensors[0], "shape", (1, -2)), InvalidModelError, "dim"),
    (lambda m: setattr(m.nodes[0], "quant_type", "INT8"), InvalidModelError, "QuantType"),
    (lambda m: setattr(m.tensors[1], "quant_params", [QuantParam(num_bits=1 << 40)]), InvalidModelError, r"quant_params\[0\]\.numBits"),
])
def test_writer_rejects_bad_ir(mutate, error, match):
    m = model_with("AddFusion", {})
    mutate(m)
    with pytest.raises(error, match=match):
        writer.dumps(m)


def test_tensors_numpy_cannot_hold_keep_type_id_and_raw_bytes():
    m = model_with("AddFusion", {})
    raw = np.frombuffer(b"\x03\x00\x00\x00abc", np.uint8)
    m.tensors.append(LiteTensor("vocab", type_id=12, shape=(1,), data=raw))
    back = reader.loads(writer.dumps(m))
    t = back.tensors[-1]
    assert t.type_id == 12 and t.shape == (1,)
    assert t.data.dtype == np.uint8 and t.data.tobytes() == raw.tobytes()
    with pytest.raises(UnsupportedError, match="TypeId 12"):
        _ = t.dtype


def test_zero_element_constants_stay_constants(tmp_path):
    m = model_with("AddFusion", {})
    m.tensors.append(LiteTensor.of("roi", np.float32, (0,), np.zeros(0, np.float32)))
    m.tensors.append(LiteTensor.of("e", np.int64, (2, 0), np.zeros((2, 0), np.int64)))
    writer.save(m, tmp_path / "m.ms", external_threshold=-1)
    for back in (reader.loads(writer.dumps(m)), reader.load(tmp_path / "m.ms")):
        assert_models_equal(back, expected(m))
