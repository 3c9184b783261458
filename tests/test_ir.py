import dataclasses

import numpy as np
import pytest

from converters.errors import UnsupportedError
from converters.lite import dtypes
from converters.lite.ir import LiteModel, LiteNode, LiteTensor


def test_typeid_numbers_match_mindspore():
    assert dtypes.from_numpy(np.float32) == 43
    assert dtypes.from_numpy("int32") == 34
    assert dtypes.from_numpy(np.float16) == 42
    assert dtypes.to_numpy(35) == np.int64


def test_unknown_typeid_is_a_clear_error():
    with pytest.raises(UnsupportedError, match="TypeId 17"):
        dtypes.to_numpy(17)
    with pytest.raises(UnsupportedError, match="complex64"):
        dtypes.from_numpy(np.complex64)


def test_model_building_and_main_subgraph():
    m = LiteModel(name="g")
    x = m.add_tensor(LiteTensor.of("x", np.float32, (1, "n")))
    w = m.add_tensor(LiteTensor.of("w", np.float32, (2,), np.ones(2, np.float32)))
    y = m.add_tensor(LiteTensor.of("y", np.float32, (1, "n")))
    m.add_node(LiteNode("add", "AddFusion", {}, [x, w], [y]))
    m.inputs, m.outputs = [x], [y]
    m.finalize_subgraph()
    assert m.subgraphs[0].nodes == [0] and m.subgraphs[0].tensors == [0, 1, 2]
    assert m.tensor_index("y") == 2
    assert m.tensors[w].is_const and not m.tensors[x].is_const
    assert not m.tensors[x].is_static


def test_with_data_is_replace_of_the_data_alone():
    tensor = LiteTensor.of("w", np.int8, (2,), np.zeros(2, np.int8), format="NHWC",
                           quant_clusters=[1.0])
    data = np.ones(2, np.int8)
    copy, expected = tensor.with_data(data), dataclasses.replace(tensor, data=data)
    for field in dataclasses.fields(LiteTensor):  # (3.13's __eq__ compares arrays by field)
        mine, theirs = getattr(copy, field.name), getattr(expected, field.name)
        assert mine is theirs or mine == theirs, field.name
    assert copy is not tensor and copy.data is data and not tensor.data.any()


def test_cut_keeps_only_the_tensors_its_nodes_use_reindexed():
    m = LiteModel(name="g")
    t = [m.add_tensor(LiteTensor.of(n, np.float32, (2,))) for n in "abcde"]
    w = m.add_tensor(LiteTensor.of("w", np.float32, (2,), np.ones(2, np.float32)))
    m.add_node(LiteNode("n0", "Abs", {}, [t[0]], [t[1]]))
    m.add_node(LiteNode("n1", "AddFusion", {"x": 1}, [t[1], w], [t[2]]))
    m.add_node(LiteNode("n2", "Neg", {}, [t[2]], [t[3]]))
    part = m.cut([1, 2], [t[1]], [t[3]], name="p")
    assert part.name == "p" and [n.name for n in part.nodes] == ["n1", "n2"]
    assert [x.name for x in part.tensors] == ["b", "d", "w", "c"]
    assert part.inputs == [0] and part.outputs == [1]
    assert [(n.inputs, n.outputs) for n in part.nodes] == [([0, 2], [3]), ([3], [1])]
    assert part.tensors[2] is m.tensors[w]  # shared, not copied
    assert m.nodes[1].inputs == [t[1], w]  # the source model is untouched


def test_onnx_import_records_where_each_node_and_value_went():
    from onnx import TensorProto, helper, numpy_helper

    from converters.onnx_import import import_onnx

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Identity", ["r"], ["i"], name="ident"),
         helper.make_node("Add", ["i", "k"], ["y"], name="add")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "k")])
    lite, report = import_onnx(helper.make_model(graph))
    assert [[lite.nodes[i].name for i in r] for r in report.origins] == [["relu"], [], ["add"]]
    assert report.values["i"] == report.values["r"]  # Identity is an alias of its input
    assert lite.tensors[report.initializers["k"]].name == "k"
    assert {"x", "r", "i", "k", "y"} <= set(report.values)
