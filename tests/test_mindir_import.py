"""MindIR -> Lite IR: structure of the converted fixtures, external weights, hostile input.

The fixtures in models/mindir/ were exported by MindSpore 2.10.0, the `*_ms20` ones by 2.0.0
(models/mindir/make_fixtures.py); the small graphs built here with our own mind_ir.proto cover
the 1.x spelling and the errors.
"""

from __future__ import annotations

import pathlib
import shutil
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from converters.errors import InvalidModelError, LitenpuError, UnsupportedError
from converters.lite import ops as lite_ops
from converters.mindir import import_mindir
from converters.mindir._generated import mind_ir_pb2 as pb

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "models" / "mindir"
FIXTURE_FILES = {
    "lenet5": "lenet5.mindir",
    "lenet5_ext": "lenet5_ext_graph.mindir",
    "mobilenetv2_block": "mobilenetv2_block.mindir",
    "encoder_layer": "encoder_layer.mindir",
    "op_zoo": "op_zoo.mindir",
    "op_variants": "op_variants.mindir",
    "op_extras": "op_extras.mindir",
    "modern_ops": "modern_ops.mindir",
    "encoder_layer_dynamic": "encoder_layer_dynamic.mindir",  # batch exported as -1
    # MindSpore 2.0.0 exports: primitive arguments as primitive attributes, short parameter names
    "lenet5_ms20": "lenet5_ms20.mindir",
    "mobilenetv2_block_ms20": "mobilenetv2_block_ms20.mindir",
}
A = pb.AttributeProto
F32 = pb.TensorProto.FLOAT


# -- building MindIR graphs by hand ------------------------------------------------------------
def attr(name: str, value) -> pb.AttributeProto:
    """An AttributeProto spelled as MindSpore 2.x writes it (tuple items in repeated fields)."""
    a = A(name=name)
    if value is None:
        a.type = A.NONE
    elif isinstance(value, bool):
        a.type, a.i = A.BOOL, int(value)
    elif isinstance(value, int):
        a.type, a.i = A.INT64, value
    elif isinstance(value, float):
        a.type, a.f = A.FLOAT, value
    elif isinstance(value, str):
        a.type, a.s = A.STRING, value.encode()
    elif isinstance(value, tuple):
        a.type = A.TUPLE
        for v in value:
            item = a.values.add()
            item.CopyFrom(attr("", v)) if isinstance(v, tuple) else item.MergeFrom(_item(v))
    elif isinstance(value, np.ndarray):
        a.type = A.TENSORS
        a.tensors.append(tensor("value0", value))
    else:
        raise TypeError(value)
    return a


def _item(v) -> pb.AttributeProto:
    if isinstance(v, float):
        return A(type=A.FLOAT, floats=[v])
    return A(type=A.BOOL if isinstance(v, bool) else A.INT64, ints=[int(v)])


_DTYPES = {np.dtype("float32"): pb.TensorProto.FLOAT, np.dtype("int32"): pb.TensorProto.INT32,
           np.dtype("int64"): pb.TensorProto.INT64}


def tensor(name: str, data: np.ndarray) -> pb.TensorProto:
    return pb.TensorProto(name=name, dims=data.shape, data_type=_DTYPES[data.dtype],
                          raw_data=np.ascontiguousarray(data).tobytes())


class GraphMaker:
    """A 2.x-style MindIR graph: REF:: nodes, primitives, Constant nodes, parameters."""

    def __init__(self, name: str = "g") -> None:
        self.model = pb.ModelProto(producer_name="test", little_endian=True, mind_ir_version=3)
        self.g = self.model.graph
        self.g.name = name
        self.count = 0

    def full(self, short: str) -> str:
        return f"{self.g.name}:{short}"

    def input(self, short: str, shape, dtype=F32) -> str:
        v = self.g.input.add(name=self.full(short))
        v.tensor.add(dims=shape, data_type=dtype)
        return v.name

    def param(self, short: str, data: np.ndarray) -> str:
        self.g.parameter.append(tensor(self.full(short), data))
        return self.full(short)

    def const(self, value) -> str:
        self.count += 1
        name = f"ValueNode_{self.count}"
        self.g.node.add(output=[name], name=name, op_type="Constant", attribute=[attr("value", value)])
        return name

    def op(self, prim: str, inputs, shape=None, attrs=None, dtype=F32, ref: bool = True) -> str:
        """Add a node; `ref=False` writes the 1.x spelling (primitive name + attributes on the node)."""
        self.count += 1
        out = self.full(f"{prim}_{self.count}")
        node = self.g.node.add(input=inputs, output=[out], name=out)
        extra = [attr(k, v) for k, v in (attrs or {}).items()]
        if ref:
            prim_name = f"{prim}:{self.count}"
            self.model.primitives.add(name=prim_name, op_type=prim, attribute=extra)
            node.op_type = "REF::" + prim_name
        else:
            node.op_type = prim
            node.attribute.extend(extra)
        if shape is not None:
            node.attribute.append(A(name="shape", type=A.TENSORS, tensors=[pb.TensorProto(dims=shape, data_type=dtype)]))
        return out

    def output(self, name: str) -> None:
        self.g.output.add(name=name)

    def bytes(self) -> bytes:
        return self.model.SerializeToString()


def fixture_model(name: str) -> pb.ModelProto:
    return pb.ModelProto.FromString((FIXTURES / FIXTURE_FILES[name]).read_bytes())


def op_counts(model) -> Counter:
    return Counter(n.op for n in model.nodes)


# -- the MindSpore-exported fixtures -------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(FIXTURE_FILES))
def test_fixture_nodes_are_valid_lite_ops_without_plumbing(name):
    model, report = import_mindir(FIXTURES / FIXTURE_FILES[name])
    for node in model.nodes:
        lite_ops.complete(node.op, node.attrs)  # names/enums as ops.fbs spells them
    assert not {"Load", "UpdateState", "Depend", "MakeTuple", "TupleGetItem"} & set(op_counts(model))
    assert report.removed  # Load per parameter read, Depend, MakeTuple of the outputs, ...
    assert report.custom == [] and report.producer == "MindSpore"
    assert report.model_version == ("2.0.0" if name.endswith("_ms20") else "2.10.0")
    assert [model.tensors[i].name for i in model.inputs] == ["x"]
    assert model.subgraphs and model.subgraphs[0].nodes == list(range(len(model.nodes)))
    produced = {o for n in model.nodes for o in n.outputs}
    for n in model.nodes:
        for i in n.inputs:
            assert i in produced or i in model.inputs or model.tensors[i].is_const, (n.name, i)


def test_lenet_dense_layers_fuse_matmul_and_bias():
    model, report = import_mindir(FIXTURES / "lenet5.mindir")
    assert op_counts(model) == Counter({"Activation": 4, "MatMulFusion": 3, "Conv2DFusion": 2,
                                        "MaxPoolFusion": 2, "Flatten": 1})
    assert report.mapped == Counter({"ReLU": 4, "MatMul": 3, "BiasAdd": 3, "Conv2D": 2, "MaxPool": 2, "Flatten": 1})
    fc1 = next(n for n in model.nodes if n.op == "MatMulFusion")
    assert fc1.attrs["transpose_b"] is True and fc1.attrs["transpose_a"] is False
    weight, bias = (model.tensors[i] for i in fc1.inputs[1:])
    assert weight.name == "fc1.weight" and weight.shape == (120, 400) and bias.shape == (120,)
    conv = next(n for n in model.nodes if n.op == "Conv2DFusion")
    assert conv.attrs == {"format": "NCHW", "kernel_size": [5, 5], "stride": [1, 1], "dilation": [1, 1],
                          "pad_mode": "VALID", "pad_list": [0, 0, 0, 0], "group": 1, "in_channel": 1,
                          "out_channel": 6, "activation_type": "NO_ACTIVATION"}
    pool = next(n for n in model.nodes if n.op == "MaxPoolFusion")
    assert pool.attrs["kernel_size"] == [2, 2] and pool.attrs["strides"] == [2, 2]


def test_mobilenet_batchnorm_relu6_and_depthwise():
    model, _ = import_mindir(FIXTURES / "mobilenetv2_block.mindir")
    counts = op_counts(model)
    assert counts["FusedBatchNorm"] == 7 and counts["Conv2DFusion"] == 7
    bn = next(n for n in model.nodes if n.op == "FusedBatchNorm")
    assert len(bn.inputs) == 5 and all(model.tensors[i].is_const for i in bn.inputs[1:])
    assert bn.attrs["epsilon"] == pytest.approx(1e-5)
    relu6 = [n for n in model.nodes if n.op == "Activation"]
    assert len(relu6) == 5 and {n.attrs["activation_type"] for n in relu6} == {"RELU6"}
    depthwise = [n for n in model.nodes if n.op == "Conv2DFusion" and n.attrs["group"] > 1]
    assert [(n.attrs["group"], n.attrs["in_channel"], n.attrs["out_channel"]) for n in depthwise] == [(64, 64, 64), (96, 96, 96)]
    reduce = next(n for n in model.nodes if n.op == "ReduceFusion")
    assert reduce.attrs["mode"] == "ReduceMean" and model.tensors[reduce.inputs[1]].data.tolist() == [2, 3]


def test_encoder_constant_inputs_become_attributes_or_int_tensors():
    model, _ = import_mindir(FIXTURES / "encoder_layer.mindir")
    bmm = [n for n in model.nodes if n.op == "MatMulFusion" and len(n.inputs) == 2]
    assert [n.attrs["transpose_b"] for n in bmm] == [True, False]  # q @ k^T, p @ v
    ln = next(n for n in model.nodes if n.op == "LayerNormFusion")
    assert ln.attrs["begin_norm_axis"] == 1 and ln.attrs["epsilon"] == pytest.approx(1e-7)
    transpose = next(n for n in model.nodes if n.op == "Transpose")
    perm = model.tensors[transpose.inputs[1]]
    assert perm.data.dtype == np.int32 and perm.data.tolist() == [0, 2, 1, 3]
    assert next(n for n in model.nodes if n.op == "Softmax").attrs == {"axis": [-1]}
    gelu = next(n for n in model.nodes if n.op == "Activation")
    assert gelu.attrs == {"activation_type": "GELU", "approximate": True}


def test_op_zoo_has_every_output_and_no_custom():
    model, report = import_mindir(FIXTURES / "op_zoo.mindir")
    assert len(model.outputs) == 10
    assert report.mapped["FastGeLU"] == 1 and report.mapped["ResizeBilinearV2"] == 1
    resize = {n.attrs["method"]: n.attrs for n in model.nodes if n.op == "Resize"}
    assert resize["LINEAR"]["coordinate_transform_mode"] == "HALF_PIXEL"
    assert resize["NEAREST"]["coordinate_transform_mode"] == "ASYMMETRIC"
    assert resize["NEAREST"]["nearest_mode"] == "FLOOR"


@pytest.mark.parametrize("name", ["lenet5", "mobilenetv2_block"])
def test_mindspore_2_0_and_2_10_spellings_give_the_same_lite_graph(name):
    """2.0 keeps arguments on the primitive, 2.10 feeds them as constants: same net, same IR."""
    new, _ = import_mindir(FIXTURES / f"{name}.mindir")
    old, _ = import_mindir(FIXTURES / f"{name}_ms20.mindir")
    def graph(m):
        return [(n.op, n.attrs, [m.tensors[i].shape for i in n.inputs]) for n in m.nodes]

    def weights(m):
        return {t.name: t.data for t in m.tensors if t.is_const and "/" not in t.name}

    assert graph(old) == graph(new)
    old_w, new_w = weights(old), weights(new)
    assert old_w.keys() == new_w.keys()
    for key, data in old_w.items():  # same seeded weights under the same names
        np.testing.assert_array_equal(data, new_w[key], err_msg=key)


# -- external weights -------------------------------------------------------------------------
def test_external_weights_load_and_match_inline_export():
    ext, report = import_mindir(FIXTURES / "lenet5_ext_graph.mindir")
    inline, _ = import_mindir(FIXTURES / "lenet5.mindir")
    assert report.external_files == ["lenet5_ext_variables/data_0"]
    weights = {t.name: t.data for t in inline.tensors if t.is_const}
    ext_weights = {t.name: t.data for t in ext.tensors if t.is_const}
    assert weights.keys() == ext_weights.keys() and len(weights) == 8
    for name, data in weights.items():  # same seeded weights, exported two ways
        np.testing.assert_array_equal(ext_weights[name], data, err_msg=name)


@pytest.fixture
def ext_copy(tmp_path) -> pathlib.Path:
    shutil.copy(FIXTURES / "lenet5_ext_graph.mindir", tmp_path)
    shutil.copytree(FIXTURES / "lenet5_ext_variables", tmp_path / "lenet5_ext_variables")
    for p in [tmp_path / "lenet5_ext_graph.mindir", *tmp_path.glob("lenet5_ext_variables/*")]:
        p.chmod(0o644)
    return tmp_path


def test_external_byte_order_mismatch_names_the_tensor(ext_copy):
    data = ext_copy / "lenet5_ext_variables" / "data_0"
    raw = bytearray(data.read_bytes())
    raw[0] = 0  # written on a big-endian machine
    data.write_bytes(bytes(raw))
    with pytest.raises(InvalidModelError, match=r"tensor 'conv1\.weight'.*big-endian"):
        import_mindir(ext_copy / "lenet5_ext_graph.mindir")


def test_external_truncated_file_names_the_tensor(ext_copy):
    data = ext_copy / "lenet5_ext_variables" / "data_0"
    data.write_bytes(data.read_bytes()[:20000])  # conv1, conv2, fc1.bias fit; fc1.weight does not
    with pytest.raises(InvalidModelError, match=r"tensor 'fc1\.weight'.*truncated"):
        import_mindir(ext_copy / "lenet5_ext_graph.mindir")


def test_external_missing_file_and_escaping_location(ext_copy):
    model = pb.ModelProto.FromString((ext_copy / "lenet5_ext_graph.mindir").read_bytes())
    with pytest.raises(InvalidModelError, match=r"tensor 'conv1\.weight'.*load the model from its path"):
        import_mindir(model.SerializeToString())
    assert import_mindir(model.SerializeToString(), base_dir=ext_copy)[0].nodes
    model.graph.parameter[0].external_data.location = "../../etc/passwd"
    with pytest.raises(InvalidModelError, match=r"outside the model directory"):
        import_mindir(model.SerializeToString(), base_dir=ext_copy)
    model.graph.parameter[0].external_data.location = "lenet5_ext_variables/missing"
    with pytest.raises(InvalidModelError, match=r"tensor 'conv1\.weight': cannot read external data"):
        import_mindir(model.SerializeToString(), base_dir=ext_copy)


def test_external_location_with_a_nul_is_invalid_model(ext_copy):
    model = pb.ModelProto.FromString((ext_copy / "lenet5_ext_graph.mindir").read_bytes())
    model.graph.parameter[0].external_data.location = "lenet5_ext_variables/data\0_0"
    with pytest.raises(InvalidModelError, match=r"tensor 'conv1\.weight'.*contains a NUL"):
        import_mindir(model.SerializeToString(), base_dir=ext_copy)


def test_names_with_a_nul_are_invalid_model():
    """onnxruntime's C API would cut the name short at the NUL (two values read as one)."""
    model = fixture_model("lenet5")
    model.graph.node[1].name = "conv\0one"
    with pytest.raises(InvalidModelError, match=r"NodeProto.name 'conv\\x00one' contains a NUL"):
        import_mindir(model.SerializeToString())


def test_external_length_must_match_the_tensor(ext_copy):
    model = pb.ModelProto.FromString((ext_copy / "lenet5_ext_graph.mindir").read_bytes())
    model.graph.parameter[0].external_data.length = 4
    with pytest.raises(InvalidModelError, match=r"tensor 'conv1\.weight'.*needs 600 bytes"):
        import_mindir(model.SerializeToString(), base_dir=ext_copy)


# -- hostile input ------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"\x0a\xff\xff\xff\xff", b"not a mindir file at all", b""])
def test_malformed_protobuf_is_invalid_model(data):
    with pytest.raises(InvalidModelError):
        import_mindir(data)


def test_truncated_file_is_invalid_model():
    data = (FIXTURES / "lenet5.mindir").read_bytes()
    with pytest.raises(InvalidModelError, match="not a MindIR"):
        import_mindir(data[: len(data) // 2])


def test_missing_file_is_invalid_model(tmp_path):
    with pytest.raises(InvalidModelError, match="cannot read"):
        import_mindir(tmp_path / "absent.mindir")


def test_ref_to_missing_primitive_names_node_and_primitive():
    model = fixture_model("lenet5")
    keep = [p for p in model.primitives if p.name != "Conv2D:4"]
    del model.primitives[:]
    model.primitives.extend(keep)
    with pytest.raises(InvalidModelError, match=r"node '.*output:3'.*primitive 'Conv2D:4'.*not in ModelProto.primitives"):
        import_mindir(model.SerializeToString())


def test_cyclic_graph_is_invalid_model():
    gm = GraphMaker()
    x = gm.input("x", [2])
    # a = x + b ; b = a * a : each node waits for the other
    gm.g.node.add(input=[x, "g:b"], output=["g:a"], name="g:a", op_type="REF::Add:1")
    gm.g.node.add(input=["g:a", "g:a"], output=["g:b"], name="g:b", op_type="REF::Mul:2")
    gm.model.primitives.add(name="Add:1", op_type="Add")
    gm.model.primitives.add(name="Mul:2", op_type="Mul")
    gm.output("g:b")
    with pytest.raises(InvalidModelError, match=r"cycle through node\(s\) 'g:a', 'g:b'"):
        import_mindir(gm.bytes())


def test_undefined_input_and_duplicate_output_are_invalid():
    gm = GraphMaker()
    x = gm.input("x", [2])
    y = gm.op("ReLU", [x, "g:nowhere"], [2])
    gm.output(y)
    with pytest.raises(InvalidModelError, match=r"input 'g:nowhere' is not defined"):
        import_mindir(gm.bytes())
    gm = GraphMaker()
    x = gm.input("x", [2])
    y = gm.op("ReLU", [x], [2])
    gm.g.node.add(input=[x], output=[y], name="twice", op_type=gm.g.node[0].op_type)
    gm.output(y)
    with pytest.raises(InvalidModelError, match="defined twice"):
        import_mindir(gm.bytes())


def test_raw_data_size_mismatch_names_the_parameter():
    gm = GraphMaker()
    x = gm.input("x", [2, 3])
    w = gm.param("w", np.ones((3, 4), np.float32))
    gm.g.parameter[0].raw_data = b"\0" * 7
    gm.output(gm.op("MatMul", [x, w], [2, 4]))
    with pytest.raises(InvalidModelError, match=r"parameter 'w'.*7 bytes"):
        import_mindir(gm.bytes())


def test_big_endian_model_is_rejected():
    model = fixture_model("lenet5")
    model.little_endian = False
    with pytest.raises(InvalidModelError, match="big-endian"):
        import_mindir(model.SerializeToString())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_corrupted_bytes_raise_only_litenpu_errors(data):
    """Flip bytes of a real (small) MindIR: the import succeeds or raises a LitenpuError."""
    raw = bytearray((FIXTURES / "op_zoo.mindir").read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    try:
        import_mindir(bytes(raw))
    except LitenpuError:
        pass


# -- 2.x details, 1.x spelling, Custom ------------------------------------------------------------
def test_training_only_outputs_and_training_mode_are_unsupported():
    gm = GraphMaker()
    x = gm.input("x", [1, 2, 3, 3])
    stats = [gm.param(k, np.ones(2, np.float32)) for k in ("gamma", "beta", "mean", "var")]
    bn = gm.op("BatchNorm", [x, *stats, gm.const(False), gm.const(1e-5), gm.const(0.1), gm.const(0)])
    gm.output(gm.op("TupleGetItem", [bn, gm.const(1)], [2]))
    with pytest.raises(UnsupportedError, match="output 1 of .* exists only in training"):
        import_mindir(gm.bytes())
    gm.g.node[0].attribute[0].i = 1  # is_training=True
    with pytest.raises(UnsupportedError, match="training mode"):
        import_mindir(gm.bytes())


def test_unknown_primitive_becomes_custom_with_serialized_attributes():
    gm = GraphMaker()
    x = gm.input("x", [2, 3])
    y = gm.op("MySpecialOp", [x, gm.const((1, 2))], [2, 3], attrs={"alpha": 0.5, "mode": "fast"})
    gm.output(y)
    model, report = import_mindir(gm.bytes())
    (node,) = model.nodes
    assert node.op == "Custom" and node.attrs["type"] == "mindir:MySpecialOp"
    assert node.inputs == [model.inputs[0]]
    assert A.FromString(node.attrs["attr"]["alpha"]).f == 0.5
    assert A.FromString(node.attrs["attr"]["mode"]).s == b"fast"
    assert [v.ints[0] for v in A.FromString(node.attrs["attr"]["input:1"]).values] == [1, 2]
    assert [(c.op, c.reason) for c in report.custom] == [("MySpecialOp", "no Lite mapping for this primitive")]
    lite_ops.complete(node.op, node.attrs)


def test_mindir_1x_spelling_reads_attributes_from_the_node():
    gm = GraphMaker()
    x = gm.input("x", [2, 3])
    w = gm.param("w", np.ones((4, 3), np.float32))
    mm = gm.op("MatMul", [x, w], [2, 4], attrs={"transpose_a": False, "transpose_b": True}, ref=False)
    sm = gm.op("Softmax", [mm], [2, 4], attrs={"axis": (1,)}, ref=False)
    gm.output(sm)
    model, report = import_mindir(gm.bytes())
    assert [(n.op, n.attrs) for n in model.nodes] == [
        ("MatMulFusion", {"transpose_a": False, "transpose_b": True, "activation_type": "NO_ACTIVATION"}),
        ("Softmax", {"axis": [1]})]
    assert report.mapped == Counter({"MatMul": 1, "Softmax": 1})


def test_sub_graph_calls_are_unsupported():
    gm = GraphMaker()
    x = gm.input("x", [2])
    gm.model.functions.add(name="inner")
    gm.g.node.add(input=[x], output=["g:y"], name="g:y", op_type="REF::inner")
    gm.output("g:y")
    with pytest.raises(UnsupportedError, match="sub-graph 'inner'"):
        import_mindir(gm.bytes())


def test_undecodable_constant_fails_only_when_a_converter_needs_it():
    gm = GraphMaker()
    x = gm.input("x", [2, 3])
    odd = gm.const(0)
    gm.g.node[0].attribute[0].type = A.DICT  # a constant litenpu cannot decode
    gm.output(gm.op("MyOp", [x, odd], [2, 3]))  # Custom keeps it serialized
    model, _ = import_mindir(gm.bytes())
    assert A.FromString(model.nodes[0].attrs["attr"]["input:1"]).type == A.DICT
    gm.output(gm.op("Softmax", [x, odd], [2, 3]))
    with pytest.raises(UnsupportedError, match="DICT"):
        import_mindir(gm.bytes())


def test_op_variants_fuse_conv_bias_and_keep_same_padding():
    model, report = import_mindir(FIXTURES / "op_variants.mindir")
    (conv,) = [n for n in model.nodes if n.op == "Conv2DFusion"]
    assert len(conv.inputs) == 3 and model.tensors[conv.inputs[2]].shape == (6,)
    assert report.mapped["BiasAdd"] == 1 and "BiasAdd" not in op_counts(model)
    assert conv.attrs["pad_mode"] == "SAME" and conv.attrs["stride"] == [2, 2]
    pools = [n.attrs for n in model.nodes if n.op in ("MaxPoolFusion", "AvgPoolFusion")]
    assert [p["pad_mode"] for p in pools] == ["SAME", "SAME"]
    nearest = sorted((n.attrs["coordinate_transform_mode"], n.attrs["nearest_mode"])
                     for n in model.nodes if n.op == "Resize" and n.attrs["method"] == "NEAREST")
    assert nearest == [("ALIGN_CORNERS", "ROUND_HALF_UP"), ("HALF_PIXEL", "ROUND_HALF_UP")]


_SWAP_PRIMS = ["Conv2D", "MatMul", "Split", "Concat", "StridedSlice", "Pad", "Reshape", "TupleGetItem",
               "MakeTuple", "Load", "ResizeBilinearV2", "BatchNorm", "LayerNorm", "Cast", "Unknown"]
_ODD_VALUES = [A(type=A.INT64, i=1 << 40), A(type=A.TUPLE, values=[A(type=A.FLOAT, floats=[0.5])]),
               A(type=A.UMONAD), A(type=A.NONE), A(type=A.STRING, s=b"same"), A(type=A.BOOL, i=1),
               A(type=A.TUPLE), A(type=A.INT64, i=-7)]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_structural_mutations_raise_only_litenpu_errors(data):
    """Rewire inputs, swap primitives, replace constants: success or a LitenpuError, nothing else."""
    model = fixture_model(data.draw(st.sampled_from(["op_zoo", "op_variants", "encoder_layer"])))
    nodes = model.graph.node
    names = [n.output[0] for n in nodes] + [p.name for p in model.graph.parameter]
    for _ in range(data.draw(st.integers(1, 4))):
        node = nodes[data.draw(st.integers(0, len(nodes) - 1))]
        kind = data.draw(st.sampled_from(["rewire", "drop_input", "swap_prim", "odd_constant"]))
        if kind == "rewire" and node.input:
            node.input[data.draw(st.integers(0, len(node.input) - 1))] = data.draw(st.sampled_from(names))
        elif kind == "drop_input" and node.input:
            del node.input[data.draw(st.integers(0, len(node.input) - 1))]
        elif kind == "swap_prim" and node.op_type.startswith("REF::"):
            prim = next(p for p in model.primitives if p.name == node.op_type[5:])
            prim.op_type = data.draw(st.sampled_from(_SWAP_PRIMS))
        elif kind == "odd_constant" and node.op_type == "Constant":
            node.attribute[0].CopyFrom(data.draw(st.sampled_from(_ODD_VALUES)))
            node.attribute[0].name = "value"
    try:
        import_mindir(model.SerializeToString())
    except LitenpuError:
        pass


def test_deeply_nested_output_tuples_flatten_without_recursion():
    gm = GraphMaker()
    x = gm.input("x", [2])
    value = gm.op("ReLU", [x], [2])
    for _ in range(3000):  # deeper than Python's recursion limit
        value = gm.op("MakeTuple", [value])
    gm.output(value)
    model, report = import_mindir(gm.bytes())
    assert model.outputs == [model.nodes[0].outputs[0]] and report.removed["MakeTuple"] == 3000


def test_dynamic_batch_stays_unknown():
    model, _ = import_mindir(FIXTURES / "encoder_layer_dynamic.mindir")
    assert model.tensors[model.inputs[0]].shape == (-1, 8, 32)
    assert model.tensors[model.outputs[0]].shape == (-1, 8, 32)


def test_nhwc_and_unknown_pad_mode_are_reported():
    model = fixture_model("lenet5")
    conv = next(p for p in model.primitives if p.op_type == "Conv2D")
    fmt = next(a for a in conv.attribute if a.name == "format")
    fmt.s = b"NHWC"
    with pytest.raises(UnsupportedError, match="data format NHWC; only NCHW"):
        import_mindir(model.SerializeToString())
    fmt.s = b"NCHW"
    next(a for a in conv.attribute if a.name == "pad_mode").s = b"reflect"
    with pytest.raises(InvalidModelError, match="pad_mode 'reflect' is not one of"):
        import_mindir(model.SerializeToString())


def test_dims_whose_product_overflows_int64_are_invalid():
    gm = GraphMaker()
    x = gm.input("x", [2])
    w = gm.param("w", np.ones(2, np.float32))
    del gm.g.parameter[0].dims[:]
    gm.g.parameter[0].dims.extend([1 << 62, 1 << 62, 2])  # wraps to 0 elements in int64
    gm.g.parameter[0].raw_data = b""
    gm.output(gm.op("Add", [x, w], [2]))
    with pytest.raises(InvalidModelError, match="parameter 'w'"):
        import_mindir(gm.bytes())
