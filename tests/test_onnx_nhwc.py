"""converters.nhwc: NCHW layers rewritten to NHWC compute the same outputs, with few
Transposes (NHWC carried through element-wise ops), and the rewrite is pure."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx_roundtrip import (
    LIGHT,
    assert_close,
    random_feeds,
    run,
    with_random_weights,
)

import models
from converters.lite import reader, writer
from converters.nhwc import to_nhwc
from converters.onnx_export import export_onnx
from converters.onnx_import import HEADER_TENSOR, import_onnx


def _nhwc_round_trip(model: onnx.ModelProto):
    lite, _ = import_onnx(model)
    nhwc = to_nhwc(lite)
    nhwc = reader.loads(writer.dumps(nhwc))
    return lite, nhwc, export_onnx(nhwc)


@pytest.mark.parametrize("name", models.NAMES)
def test_models_in_nhwc_compute_the_same(name):
    model = models.build(name)
    lite, nhwc, exported = _nhwc_round_trip(model)
    feeds = random_feeds(model, seed=5, dim=2)
    assert_close(run(exported, feeds), run(model, feeds))
    layers = [n for n in nhwc.nodes if n.attrs.get("format") in ("NCHW", "NHWC")]
    assert all(n.attrs["format"] == "NHWC" for n in layers)
    added = sum(n.op == "Transpose" for n in nhwc.nodes) - sum(n.op == "Transpose"
                                                                for n in lite.nodes)
    assert added <= 2  # one into the NHWC region, one out of it
    assert any(t.name == HEADER_TENSOR for t in nhwc.tensors)


def test_conv_weights_become_ohwi_and_the_source_is_untouched():
    lite, _ = import_onnx(models.build("resnet_block"))
    before = [(n.op, dict(n.attrs), list(n.inputs)) for n in lite.nodes]
    nhwc = to_nhwc(lite)
    assert [(n.op, dict(n.attrs), list(n.inputs)) for n in lite.nodes] == before
    conv = next(n for n in nhwc.nodes if n.op == "Conv2DFusion")
    w = nhwc.tensors[conv.inputs[1]]
    src = lite.tensors[next(n for n in lite.nodes if n.op == "Conv2DFusion").inputs[1]]
    assert w.format == "NHWC"
    np.testing.assert_array_equal(w.data, src.data.transpose(0, 2, 3, 1))
    assert all(src.name != t.name for t in nhwc.tensors)  # the KCHW copy is gone


@pytest.mark.parametrize("stem", ["light_squeezenet", "light_inception_v1"])
def test_light_models_in_nhwc(stem):
    model = with_random_weights(onnx.load(LIGHT / f"{stem}.onnx"))
    _, _, exported = _nhwc_round_trip(model)
    feeds = random_feeds(model, seed=6)
    assert_close(run(exported, feeds), run(model, feeds))


def test_transposed_conv_weights_become_ihwo():
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(3).standard_normal((3, 2, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])], "d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 9, 9])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    _, nhwc, exported = _nhwc_round_trip(model)
    deconv = next(n for n in nhwc.nodes if n.op == "Conv2dTransposeFusion")
    np.testing.assert_array_equal(nhwc.tensors[deconv.inputs[1]].data, w.transpose(0, 2, 3, 1))
    feeds = random_feeds(model, seed=7)
    assert_close(run(exported, feeds), run(model, feeds))


@pytest.mark.slow
def test_backend_cases_of_layout_ops_in_nhwc():
    import test_onnx_backend_nodes as nodes

    from converters.lite import reader, writer

    layout_ops = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
                  "GlobalMaxPool", "BatchNormalization", "InstanceNormalization", "Resize",
                  "LRN"}
    failures, counted = [], 0
    for case in nodes.CASES:
        if nodes._single_op(case) not in layout_ops:
            continue
        model, feeds = nodes.constant_operands(case)
        expected = case.data_sets[0][1]
        if not nodes._reference_ok(model, feeds, expected, case.rtol, case.atol):
            continue
        counted += 1
        try:
            lite, _ = import_onnx(model)
            exported = export_onnx(reader.loads(writer.dumps(to_nhwc(lite))))
            assert_close(run(exported, nodes._named(exported, feeds)), expected, case.rtol,
                         case.atol)
        except Exception as e:  # noqa: BLE001 - collected and listed
            failures.append(f"{case.name}: {type(e).__name__}: {e}")
    assert counted > 100
    assert not failures, "\n".join(failures)
