"""Nothing is dropped: names, I/O, opsets, producer, metadata, symbolic dims, odd dtypes,
external data; and malformed models raise InvalidModelError naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_roundtrip import assert_close, random_feeds, roundtrip, run

from converters.errors import InvalidModelError
from converters.onnx_import import HEADER_TENSOR, import_onnx


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "main_graph", inputs, outputs, list(inits),
                              doc_string="graph doc")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="unit-test", producer_version="9.9",
                              doc_string="model doc", model_version=3)
    model.ir_version = 8
    helper.set_model_props(model, {"author": "litenpu", "license": "none"})
    return model


def _mlp():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3))
                                .astype(np.float32), "w")
    return _model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                   helper.make_node("Relu", ["h"], ["y"], name="act")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [w])


def test_model_fields_names_and_symbolic_dims_survive_the_ms_round_trip():
    m = _mlp()
    exported, lite, report = roundtrip(m)
    assert report.mapped_count == 2 and not report.custom
    assert (exported.producer_name, exported.producer_version) == ("unit-test", "9.9")
    assert exported.model_version == 3 and exported.doc_string == "model doc"
    assert {p.key: p.value for p in exported.metadata_props} == {"author": "litenpu",
                                                                "license": "none"}
    assert exported.graph.name == "main_graph" and exported.graph.doc_string == "graph doc"
    assert [(o.domain, o.version) for o in exported.opset_import] == [("", 17)]
    assert exported.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert exported.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert [n.name for n in exported.graph.node] == ["mm", "act"]
    assert [t.name for t in exported.graph.initializer] == ["w"]
    feeds = random_feeds(m, dim=5)
    assert_close(run(exported, feeds), run(m, feeds))


def test_header_is_one_unused_uint8_tensor():
    lite, _ = import_onnx(_mlp())
    header = [t for t in lite.tensors if t.name == HEADER_TENSOR]
    assert len(header) == 1 and header[0].data.dtype == np.uint8
    index = lite.tensors.index(header[0])
    assert all(index not in n.inputs for n in lite.nodes)
    assert index not in lite.inputs and index not in lite.outputs


def test_bfloat16_initializer_travels_in_the_header():
    b = helper.make_tensor("b", TensorProto.BFLOAT16, [2], [1.0, 2.0])
    m = _model([helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
                helper.make_node("Add", ["x", "bf"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [b])
    exported, _, report = roundtrip(m)
    assert [c.op for c in report.custom] == ["Cast"]
    feeds = {"x": np.array([0.5, 0.25], np.float32)}
    np.testing.assert_array_equal(run(exported, feeds)[0], [1.5, 2.25])


def test_subgraph_reading_outer_values_is_carried():
    then = helper.make_graph([helper.make_node("Add", ["x", "k"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Sub", ["x", "k"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    k = numpy_helper.from_array(np.array([10.0, 20.0], np.float32), "k0")
    m = _model([helper.make_node("Identity", ["k0"], ["k"]),
                helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
               [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [k])
    exported, lite, _ = roundtrip(m)
    custom = [n for n in lite.nodes if n.op == "Custom"][-1]
    assert {lite.tensors[i].name for i in custom.inputs} == {"c", "x", "k"}
    for cond in (True, False):
        feeds = {"c": np.array(cond), "x": np.array([1.0, 2.0], np.float32)}
        assert_close(run(exported, feeds), run(m, feeds))


def test_external_data_model(tmp_path):
    m = _mlp()
    expected = numpy_helper.to_array(m.graph.initializer[0])
    path = tmp_path / "ext.onnx"
    onnx.save(m, path, save_as_external_data=True, location="ext.bin", size_threshold=0)
    lite, _ = import_onnx(path)
    np.testing.assert_array_equal(lite.tensors[lite.tensor_index("w")].data, expected)


def test_ir_survives_ms_bytes_unchanged_in_structure():
    from converters.lite import reader, writer

    lite, _ = import_onnx(_mlp())
    again = reader.loads(writer.dumps(lite))
    assert [n.op for n in again.nodes] == [n.op for n in lite.nodes]
    assert [t.name for t in again.tensors] == [t.name for t in lite.tensors]


# ---- malformed input ------------------------------------------------------------------

def _bad(nodes, inputs=None, outputs=None, inits=()):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])]
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]
    return _model(nodes, inputs, outputs, inits)


def test_missing_initializer_names_the_node():
    m = _bad([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")])
    with pytest.raises(InvalidModelError, match="adder"):
        import_onnx(m)


def test_cycle_names_a_node():
    m = _bad([helper.make_node("Add", ["x", "b"], ["a"], name="first"),
              helper.make_node("Relu", ["a"], ["b"], name="second"),
              helper.make_node("Relu", ["b"], ["y"], name="third")])
    with pytest.raises(InvalidModelError, match="first|second"):
        import_onnx(m)


def test_unknown_dtype_is_invalid():
    m = _bad([helper.make_node("Relu", ["x"], ["y"], name="r")],
             inputs=[helper.make_tensor_value_info("x", 999, [2])])
    with pytest.raises(InvalidModelError, match="'x'.*'r'.*element type 999"):
        import_onnx(m)


def test_checker_failure_names_the_node():
    m = _bad([helper.make_node("Relu", ["x", "x"], ["y"], name="two_inputs")])
    with pytest.raises(InvalidModelError, match="two_inputs|Relu"):
        import_onnx(m)


def test_view_without_header_keeps_opsets_and_io():
    from dataclasses import replace

    from converters.graph_view import from_onnx

    m = _model([helper.make_node("Relu", ["x"], ["r"]),
                helper.make_node("FastGelu", ["r"], ["y"], domain="com.microsoft")],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    view = replace(from_onnx(m), header=None)  # as an adapter with no ModelProto gives it
    exported, _, _ = roundtrip(view)
    assert {(o.domain, o.version) for o in exported.opset_import} == {("", 17),
                                                                       ("com.microsoft", 1)}
    feeds = random_feeds(m, dim=3)
    assert_close(run(exported, feeds), run(m, feeds))



def test_initializer_of_unknown_type_names_the_node():
    t = onnx.TensorProto(name="w", data_type=999, dims=[2], raw_data=b"12345678")
    m = _bad([helper.make_node("Add", ["x", "w"], ["y"], name="adder")], inits=[t])
    with pytest.raises(InvalidModelError, match="'w'.*'adder'.*999"):
        import_onnx(m)
