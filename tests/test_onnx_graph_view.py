import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import provider
from converters.errors import InvalidModelError
from converters.graph_view import from_onnx, load_onnx
from converters.onnx_import import import_onnx


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             producer_name="t")


def test_view_of_small_graph_has_symbolic_shapes_and_inferred_types():
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    m = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
         helper.make_node("Relu", ["y"], ["z"], name="r")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 3])],
        [w])
    v = from_onnx(m)
    assert [n.op_type for n in v.nodes] == ["MatMul", "Relu"]
    assert v.inputs[0].shape == ("n", 2) and v.inputs[0].dtype == np.float32
    assert v.value_info["y"].shape == ("n", 3)
    np.testing.assert_array_equal(v.initializers["w"], np.arange(6).reshape(2, 3))
    assert not v.initializers["w"].flags.writeable  # a view over raw_data, not a copy
    assert v.opset == {"": 17}
    assert v.header.producer_name == "t" and len(v.header.graph.node) == 0
    assert v.nodes[0].proto().name == "mm"


def test_attrs_are_plain_python_values():
    t = numpy_helper.from_array(np.array([1.5], np.float32))
    m = _model([helper.make_node("Constant", [], ["c"], value=t),
                helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0]),
                helper.make_node("LeakyRelu", ["y"], ["z"], alpha=0.5)],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
               [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 2]),
                helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])])
    v = from_onnx(m)
    assert v.nodes[1].attrs["perm"] == [1, 0]
    assert v.nodes[2].attrs["alpha"] == 0.5
    np.testing.assert_array_equal(v.nodes[0].attrs["value"], [1.5])


def test_unsorted_nodes_are_sorted_when_unchecked():
    m = _model([helper.make_node("Relu", ["y"], ["z"], name="second"),
                helper.make_node("Relu", ["x"], ["y"], name="first")],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
               [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    assert [n.name for n in from_onnx(m, check=False).nodes] == ["first", "second"]


def test_cycle_names_a_node():
    m = _model([helper.make_node("Add", ["x", "b"], ["a"], name="n1"),
                helper.make_node("Relu", ["a"], ["b"], name="n2")],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])])
    with pytest.raises(InvalidModelError, match="n1|n2"):
        from_onnx(m, check=False)


def test_missing_input_names_the_node():
    m = _model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="adder")],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    with pytest.raises(InvalidModelError, match="adder"):
        from_onnx(m, check=False)
    with pytest.raises(InvalidModelError, match="checker"):
        from_onnx(m)


def test_outer_scope_values_of_subgraphs_are_implicit_inputs():
    then = helper.make_graph([helper.make_node("Identity", ["a"], ["o"])], "then", [],
                             [helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])])
    other = helper.make_graph([helper.make_node("Identity", ["b"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", TensorProto.FLOAT, [1])])
    m = _model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
               [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                helper.make_tensor_value_info("a", TensorProto.FLOAT, [1]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    node = from_onnx(m).nodes[0]
    assert sorted(node.implicit_inputs) == ["a", "b"]
    assert isinstance(node.attrs["then_branch"], onnx.GraphProto)


def test_external_data_is_resolved(tmp_path):
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")
    m = _model([helper.make_node("Add", ["x", "w"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])], [w])
    path = tmp_path / "m.onnx"
    onnx.save(m, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    v = from_onnx(path)
    np.testing.assert_array_equal(v.initializers["w"], np.arange(4096, dtype=np.float32))


def test_garbage_file_is_invalid_model(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\xff\xfe not a protobuf")
    with pytest.raises(InvalidModelError, match="bad.onnx"):
        from_onnx(path)


def test_missing_external_data_is_invalid_model(tmp_path):
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32), "w")
    m = _model([helper.make_node("Add", ["x", "w"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])], [w])
    path = tmp_path / "m.onnx"
    onnx.save(m, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(InvalidModelError, match=r"m.onnx: not a readable ONNX model.*w.bin"):
        load_onnx(path)
    with pytest.raises(FileNotFoundError):
        load_onnx(tmp_path / "absent.onnx")


def _relu_neg_sub(first: str, second: str) -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], [first], name="relu"),
                   helper.make_node("Neg", ["x"], [second], name="neg"),
                   helper.make_node("Sub", [first, second], ["y"], name="sub")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])


@pytest.mark.parametrize("broken, match", [
    (b"t\xffa", r"NodeProto.output is not valid UTF-8"),  # protobuf keeps it as bytes
    (b"t\x00a", r"NodeProto.output 't\\x00a' contains a NUL"),
])
def test_names_that_are_not_utf8_or_hold_a_nul_are_invalid(tmp_path, broken, match):
    path = tmp_path / "m.onnx"
    path.write_bytes(_relu_neg_sub("t_a", "t_b").SerializeToString().replace(b"t_a", broken))
    with pytest.raises(InvalidModelError, match=match):
        from_onnx(path)


def test_a_value_written_twice_is_invalid():
    """Two writers of one name (what onnxruntime's EP graph shows when names differ only
    after a NUL) would silently rewire the readers."""
    with pytest.raises(InvalidModelError, match=r"value 't' is written by node 'neg' \(Neg\) "
                                                r"and by another node"):
        import_onnx(from_onnx(_relu_neg_sub("t", "t"), check=False))
    shadow = _model([helper.make_node("Relu", ["x"], ["x"], name="r")],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])])
    with pytest.raises(InvalidModelError, match="by a graph input or initializer"):
        import_onnx(from_onnx(shadow, check=False))


def test_names_that_differ_after_a_nul_never_give_wrong_numbers():
    """onnxruntime keeps 't\0a' and 't\0b' apart; the EP reads both as 't'. The NPU used to
    return zeros for relu(x) - neg(x); now GetCapability's import refuses the graph, whose
    nodes stay on CPU with that reason, and the numbers are onnxruntime's."""
    model = _relu_neg_sub("t\0a", "t\0b")
    model.ir_version = 8  # onnxruntime 1.23 loads up to IR 11
    data = model.SerializeToString()
    x = np.array([[1, -2, 3], [-4, 5, -6]], np.float32)
    session = provider.InferenceSession(data, providers=["NPUExecutionProvider",
                                                         "CPUExecutionProvider"])
    assert {n.device for n in session.partition()} == {"CPU"}
    assert all("value 't' is written by node" in n.reason for n in session.partition())
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.maximum(x, 0) + x)


def test_node_proto_is_rebuilt_from_fields_when_the_source_has_none():
    from converters.graph_view import NodeView

    node = NodeView("n", "Pad", "", ("x", "p", ""), ("y",),
                    {"mode": "reflect", "k": [np.ones(2, np.float32)], "t": np.zeros(3)})
    proto = node.proto()
    assert list(proto.input) == ["x", "p", ""] and proto.name == "n"
    attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
    assert attrs["mode"] == b"reflect"
    np.testing.assert_array_equal(numpy_helper.to_array(attrs["k"][0]), [1, 1])
    np.testing.assert_array_equal(numpy_helper.to_array(attrs["t"]), [0, 0, 0])
