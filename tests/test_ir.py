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
