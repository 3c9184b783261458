"""Content fingerprints of model files: every byte a model is made of, external data included."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import convert_model_to_external_data

from provider.cache import fingerprint


def _external_model(folder: Path, where: str) -> Path:
    """A model whose one big tensor lives in `weights.bin`: a graph initializer, a Constant
    node's attribute, or an initializer of an If branch (a nested graph)."""
    big = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
    if where == "initializer":
        graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y],
                                  [big])
    elif where == "attribute":
        graph = helper.make_graph([helper.make_node("Constant", [], ["w"], value=big),
                                   helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y])
    else:
        branch = helper.make_graph([helper.make_node("Add", ["x", "w"], ["yb"])], "b", [],
                                   [helper.make_tensor_value_info("yb", TensorProto.FLOAT,
                                                                  [64, 64])], [big])
        cond = numpy_helper.from_array(np.array(True), "c")
        graph = helper.make_graph(
            [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
            "g", [x], [y], [cond])
    model = helper.make_model(graph)
    convert_model_to_external_data(model, location="weights.bin", size_threshold=1024,
                                   convert_attribute=True)
    path = folder / "model.onnx"
    onnx.save_model(model, path)
    return path


@pytest.mark.parametrize("big", [False, True], ids=["searched", "walked"])
@pytest.mark.parametrize("where", ["initializer", "attribute", "branch"])
def test_onnx_external_data_is_part_of_the_fingerprint(tmp_path, monkeypatch, where, big):
    """Found by the search of a small file and by the walk of a big one (here: any)."""
    if big:
        monkeypatch.setattr(fingerprint, "_SCAN_FILE_BELOW", 0)
    path = _external_model(tmp_path, where)
    before = fingerprint.file_fingerprint(path)
    weights = tmp_path / "weights.bin"
    data = bytearray(weights.read_bytes())
    data[100] ^= 1
    weights.write_bytes(data)
    assert fingerprint.file_fingerprint(path) != before


def test_a_file_that_is_not_onnx_is_its_own_bytes(tmp_path):
    """Bytes that merely look like an external-data entry name no file."""
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x0a\x08location\x12\x0bweights.bin" + os.urandom(64))
    (tmp_path / "weights.bin").write_bytes(b"x")
    before = fingerprint.file_fingerprint(path)
    (tmp_path / "weights.bin").write_bytes(b"y")
    assert fingerprint.file_fingerprint(path) == before


def test_a_model_without_the_word_location_is_not_walked(tmp_path, monkeypatch):
    """No external-data entry can exist without its key's bytes: the field walk is skipped."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    path = tmp_path / "model.onnx"
    onnx.save_model(helper.make_model(graph), path)
    before = fingerprint.file_fingerprint(path)

    def walked():
        raise AssertionError("walked a model that names no external file")

    monkeypatch.setattr(fingerprint, "_walk_table", walked)
    assert fingerprint.file_fingerprint(path) == before


def test_a_big_model_is_walked_not_searched(tmp_path, monkeypatch):
    """Past a few MB a search of every byte costs more than the walk (ResNet-50: 31 ms vs
    0.5 ms): the walk runs even without the word `location`, and finds nothing."""
    path = _external_model(tmp_path, "initializer")
    onnx.save_model(onnx.load(path), path)  # the weights back inside: no external file
    walks = []
    table = fingerprint._walk_table
    monkeypatch.setattr(fingerprint, "_walk_table", lambda: walks.append(1) or table())
    searched = fingerprint.file_fingerprint(path)
    assert walks == []
    monkeypatch.setattr(fingerprint, "_SCAN_FILE_BELOW", 0)
    assert fingerprint.file_fingerprint(path) == searched and walks == [1]
