"""Per-op ONNX -> Lite mappings: the Lite primitive chosen, its attributes, opset forms,
and onnxruntime agreement after the round trip."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_roundtrip import assert_close, random_feeds, roundtrip, run

from converters.onnx_import import import_onnx

F = TensorProto.FLOAT


def model_of(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    opsets = [helper.make_opsetid("", opset), *extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8 if opset >= 9 else 3
    return _with_output_shapes(model)


def _with_output_shapes(model):
    """Fill graph outputs declared without a shape from shape inference (onnx.checker
    wants them)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output)}
    for out in model.graph.output:
        if not out.type.tensor_type.HasField("shape"):
            out.type.CopyFrom(known[out.name].type)
    return model


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def check(model, expect_ops: list[str], feeds=None):
    """Map without Custom to `expect_ops`, and match onnxruntime after the round trip."""
    lite, report = import_onnx(model)
    assert not report.custom, report.custom
    assert [n.op for n in lite.nodes] == expect_ops
    feeds = feeds or random_feeds(model, seed=1)
    exported, _, _ = roundtrip(model)
    assert_close(run(exported, feeds), run(model, feeds))
    return lite


rng = np.random.default_rng(7)
W = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)


def test_conv_maps_to_conv2dfusion_with_mindspore_fields():
    m = model_of([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 2, 0, 1],
                                   strides=[2, 1])],
                 [vi("x", [1, 3, 8, 8])], [vi("y", None)],
                 {"w": W, "b": np.arange(4, dtype=np.float32)})
    lite = check(m, ["Conv2DFusion"])
    a = lite.nodes[0].attrs
    assert a["format"] == "NCHW" and a["pad_mode"] == "PAD"
    assert a["pad_list"] == [1, 0, 2, 1]  # top, bottom, left, right
    assert (a["in_channel"], a["out_channel"], a["group"]) == (3, 4, 1)
    assert a["kernel_size"] == [3, 3] and a["stride"] == [2, 1]


def test_depthwise_conv_same_upper():
    w = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    m = model_of([helper.make_node("Conv", ["x", "w"], ["y"], group=3, auto_pad="SAME_UPPER")],
                 [vi("x", [1, 3, 7, 7])], [vi("y", None)], {"w": w})
    a = check(m, ["Conv2DFusion"]).nodes[0].attrs
    assert a["pad_mode"] == "SAME" and a["group"] == 3 and a["in_channel"] == 3


def test_gemm_transb_is_full_connection_else_matmul_fusion():
    b = rng.standard_normal((5, 4)).astype(np.float32)
    c = rng.standard_normal(5).astype(np.float32)
    m = model_of([helper.make_node("Gemm", ["x", "b", "c"], ["y"], transB=1)],
                 [vi("x", [2, 4])], [vi("y", [2, 5])], {"b": b, "c": c})
    assert check(m, ["FullConnection"]).nodes[0].attrs["has_bias"] is True
    m = model_of([helper.make_node("Gemm", ["x", "b", "c"], ["y"], transA=1)],
                 [vi("x", [5, 2])], [vi("y", [2, 4])], {"b": b, "c": c[:4]})
    assert check(m, ["MatMulFusion"]).nodes[0].attrs["transpose_a"] is True


def test_gemm_alpha_beta_and_any_c_map_to_a_product_then_a_sum():
    b = rng.standard_normal((4, 3)).astype(np.float32)
    c = rng.standard_normal((2, 1)).astype(np.float32)
    gemm = helper.make_node("Gemm", ["x", "b", "c"], ["y"], alpha=2.0, beta=0.5)
    # constant B and C take their factors at import: B stays a weight
    m = model_of([gemm], [vi("x", [2, 4])], [vi("y", [2, 3])], {"b": b, "c": c})
    lite = check(m, ["MatMulFusion", "AddFusion"])
    weight = lite.tensors[lite.nodes[0].inputs[1]].data
    assert weight is not None and np.array_equal(weight, 2 * b)
    # run-time B and C: both factors are nodes
    m = model_of([gemm], [vi("x", [2, 4]), vi("b", [4, 3]), vi("c", [2, 1])], [vi("y", [2, 3])])
    check(m, ["MulFusion", "MatMulFusion", "MulFusion", "AddFusion"])
    # beta 0: C is not read; a [1, n] C is no bias vector
    m = model_of([helper.make_node("Gemm", ["x", "b", "c"], ["y"], beta=0.0)],
                 [vi("x", [2, 4])], [vi("y", [2, 3])], {"b": b, "c": c})
    check(m, ["MatMulFusion"])
    m = model_of([helper.make_node("Gemm", ["x", "b", "c"], ["y"])],
                 [vi("x", [2, 4])], [vi("y", [2, 3])], {"b": b, "c": rng.standard_normal((1, 3)).astype(np.float32)})
    check(m, ["MatMulFusion", "AddFusion"])


def test_gemm_with_alpha_on_integers_is_custom():
    m = model_of([helper.make_node("Gemm", ["x", "b"], ["y"], alpha=2.0)],
                 [vi("x", [2, 4], TensorProto.INT32)], [vi("y", [2, 3], TensorProto.INT32)],
                 {"b": np.ones((4, 3), np.int32)})
    lite, report = import_onnx(m)
    assert [n.op for n in lite.nodes] == ["Custom"]
    assert "alpha" in report.custom[0].reason


def test_prelu_per_channel_and_shared():
    slope = rng.standard_normal((3, 1, 1)).astype(np.float32)
    m = model_of([helper.make_node("PRelu", ["x", "s"], ["y"])],
                 [vi("x", [2, 3, 4, 4])], [vi("y", None)], {"s": slope})
    assert check(m, ["PReLUFusion"]).nodes[0].attrs["channel_shared"] is False
    m = model_of([helper.make_node("PRelu", ["x", "s"], ["y"])],
                 [vi("x", [2, 3, 4, 4])], [vi("y", None)], {"s": np.array([0.2], np.float32)})
    assert check(m, ["PReLUFusion"]).nodes[0].attrs["channel_shared"] is True


def test_layer_norm_opset17():
    g = rng.standard_normal(6).astype(np.float32)
    m = model_of([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-3)],
                 [vi("x", [2, 5, 6])], [vi("y", None)], {"g": g, "b": g * 0.5})
    a = check(m, ["LayerNormFusion"]).nodes[0].attrs
    assert a["begin_norm_axis"] == -1 and a["elementwise_affine"] is True


@pytest.mark.parametrize("to", [TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64])
def test_cast_target_is_a_typeid_input(to):
    m = model_of([helper.make_node("Cast", ["x"], ["y"], to=to)],
                 [vi("x", [3, 4])], [vi("y", None, to)])
    lite = check(m, ["Cast"])
    to_tensor = lite.tensors[lite.nodes[0].inputs[1]]
    expected = {TensorProto.FLOAT16: 42, TensorProto.INT32: 34, TensorProto.INT64: 35}[to]
    assert to_tensor.data.tolist() == [expected]


@pytest.mark.parametrize("lo,hi,op", [(0.0, 6.0, "Activation"), (-1.0, 0.5, "Clip")])
def test_clip_relu6_or_clip_in_both_opset_forms(lo, hi, op):
    for opset in (6, 13):
        if opset < 11:
            node = helper.make_node("Clip", ["x"], ["y"], min=lo, max=hi)
            inits = {}
        else:
            node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
            inits = {"lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        m = model_of([node], [vi("x", [2, 8])], [vi("y", [2, 8])], inits, opset=opset)
        check(m, [op])


def test_split_squeeze_reduce_attribute_forms_before_opset13():
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 3]),
             helper.make_node("ReduceMean", ["b"], ["c"], axes=[1], keepdims=1),
             helper.make_node("Squeeze", ["c"], ["d"], axes=[1])]
    m = model_of(nodes, [vi("x", [2, 4, 3])], [vi("a", None), vi("d", None)], opset=11)
    check(m, ["Split", "ReduceFusion", "Squeeze"])


def test_softmax_before_13_over_trailing_dims_flattens_them():
    m = model_of([helper.make_node("Softmax", ["x"], ["y"], axis=2)],
                 [vi("x", [2, 3, 4])], [vi("y", None)], opset=11)
    check(m, ["Softmax"])
    m = model_of([helper.make_node("Softmax", ["x"], ["y"], axis=1)],
                 [vi("x", [2, 3, 4])], [vi("y", None)], opset=11)
    check(m, ["Shape", "Reshape", "Softmax", "Reshape"])
    m = model_of([helper.make_node("Relu", ["x"], ["r"]),
                  helper.make_node("LogSoftmax", ["r"], ["y"], axis=-2)],
                 [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], opset=11)
    check(m, ["Activation", "Shape", "Reshape", "LogSoftmax", "Reshape"])  # axis -2 of rank 3


def test_slice_pad_topk_old_attribute_forms():
    nodes = [helper.make_node("Slice", ["x"], ["s"], starts=[1], ends=[3], axes=[1]),
             helper.make_node("Pad", ["s"], ["p"], pads=[0, 1, 0, 2], value=1.5),
             helper.make_node("TopK", ["p"], ["v", "i"], k=2)]
    m = model_of(nodes, [vi("x", [2, 5])],
                 [vi("v", None), vi("i", None, TensorProto.INT64)], opset=9)
    check(m, ["StridedSlice", "PadFusion", "TopKFusion"])


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
def test_cum_sum_maps_with_an_int32_axis_and_runs_on_the_npu(exclusive, reverse):
    import provider

    axis = {"axis": np.array(-1, np.int64)}
    m = model_of([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive,
                                   reverse=reverse)], [vi("x", [2, 5])], [vi("y", None)], axis,
                 opset=14)
    lite = check(m, ["CumSum"])
    assert lite.nodes[0].attrs == {"exclusive": bool(exclusive), "reverse": bool(reverse)}
    assert lite.tensors[lite.nodes[0].inputs[1]].data.dtype == np.int32
    sess = provider.InferenceSession(m.SerializeToString(),
                                     providers=["NPUExecutionProvider", "CPUExecutionProvider"])
    assert {n.device for n in sess.partition()} == {"NPU"}
    feeds = random_feeds(m, seed=2)
    assert_close(sess.run(None, feeds), run(m, feeds))


def test_resize_scales_become_static_size():
    scales = np.array([1, 1, 2, 2], np.float32)
    m = model_of([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")],
                 [vi("x", [1, 2, 3, 4])], [vi("y", None)], {"s": scales}, opset=13)
    a = check(m, ["Resize"]).nodes[0].attrs
    assert (a["new_height"], a["new_width"], a["method"]) == (6, 8, "LINEAR")
    assert a["coordinate_transform_mode"] == "HALF_PIXEL"


def test_identity_and_dropout_and_constants():
    c = numpy_helper.from_array(np.array([2.0], np.float32))
    nodes = [helper.make_node("Constant", [], ["c"], value=c),
             helper.make_node("Identity", ["x"], ["i"]),
             helper.make_node("Dropout", ["i"], ["d"]),
             helper.make_node("Mul", ["d", "c"], ["y"])]
    m = model_of(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], opset=13)
    lite = check(m, ["MulFusion"])  # Identity and Dropout alias their input away
    assert lite.tensors[lite.nodes[0].inputs[1]].data.tolist() == [2.0]
    assert lite.tensors[lite.nodes[0].inputs[0]].name == "x"
    kept = model_of([helper.make_node("Dropout", ["x"], ["y"], ratio=0.25)],
                    [vi("x", [2, 3])], [vi("y", [2, 3])], opset=11)
    assert check(kept, ["Dropout"]).nodes[0].attrs == {"keep_prob": 0.75}


def test_constant_of_shape_and_expand_tile_where():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["z"],
                              value=numpy_helper.from_array(np.array([3], np.int64))),
             helper.make_node("Expand", ["x", "e"], ["xe"]),
             helper.make_node("Tile", ["x", "r"], ["t"]),
             helper.make_node("Greater", ["x", "t"], ["g"]),
             helper.make_node("Where", ["g", "x", "xe"], ["w"])]
    m = model_of(nodes, [vi("x", [2, 3])],
                 [vi("z", None, TensorProto.INT64), vi("w", None)],
                 {"e": np.array([2, 3], np.int64), "r": np.array([1, 1], np.int64)})
    check(m, ["Shape", "ConstantOfShape", "BroadcastTo", "TileFusion", "Greater", "Where"])


def test_gelu_opset20_and_hard_swish():
    nodes = [helper.make_node("Gelu", ["x"], ["g"], approximate="tanh"),
             helper.make_node("HardSwish", ["g"], ["y"])]
    m = model_of(nodes, [vi("x", [4, 5])], [vi("y", None)], opset=20)
    lite = check(m, ["Activation", "Activation"])
    assert lite.nodes[0].attrs == {"activation_type": "GELU", "approximate": True}
    assert lite.nodes[1].attrs["activation_type"] == "HSWISH"


def test_pools_global_and_ceil():
    nodes = [helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[3, 3], strides=[2, 2],
                              ceil_mode=1),
             helper.make_node("AveragePool", ["m"], ["a"], kernel_shape=[2, 2], pads=[1, 1, 0, 0]),
             helper.make_node("GlobalAveragePool", ["a"], ["y"])]
    m = model_of(nodes, [vi("x", [1, 2, 9, 9])], [vi("y", None)])
    lite = check(m, ["MaxPoolFusion", "AvgPoolFusion", "AvgPoolFusion"])
    assert lite.nodes[0].attrs["round_mode"] == "CEIL"
    assert lite.nodes[2].attrs["global"] is True


def test_unknown_domain_and_unknown_op_are_custom_and_restored():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Gelu", ["r"], ["g"], domain="com.microsoft"),
             helper.make_node("Shrink", ["g"], ["y"], bias=0.1, lambd=0.2)]
    m = model_of(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], opset=18,
                 extra_opsets=[helper.make_opsetid("com.microsoft", 1)])
    lite, report = import_onnx(m)
    kinds = [n.attrs.get("type") for n in lite.nodes]
    assert kinds == [None, "onnx:com.microsoft:Gelu", "onnx:ai.onnx:Shrink"]
    assert {c.op for c in report.custom} == {"Gelu", "Shrink"}
    exported, _, _ = roundtrip(m)
    assert [n.op_type for n in exported.graph.node] == ["Relu", "Gelu", "Shrink"]
    assert exported.graph.node[1].domain == "com.microsoft"
    feeds = random_feeds(m)
    assert_close(run(exported, feeds), run(m, feeds))


def test_fused_activation_is_exported_after_the_op():
    from converters.onnx_export import export_onnx

    lite, _ = import_onnx(model_of([helper.make_node("Conv", ["x", "w"], ["y"])],
                                   [vi("x", [1, 3, 5, 5])], [vi("y", None)], {"w": W}))
    lite.nodes[0].attrs["activation_type"] = "RELU6"
    exported = export_onnx(lite)
    assert [n.op_type for n in exported.graph.node] == ["Conv", "Clip"]
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32) * 4
    conv = model_of([helper.make_node("Conv", ["x", "w"], ["c"]),
                     helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
                    [vi("x", [1, 3, 5, 5])], [vi("y", None)],
                    {"w": W, "lo": np.float32(0), "hi": np.float32(6)})
    assert_close(run(exported, {"x": x}), run(conv, {"x": x}))



@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space_and_gather_elements(mode):
    idx = np.array([[[[0, 1]]]], np.int64).repeat(2, axis=1)
    nodes = [helper.make_node("DepthToSpace", ["x"], ["d"], blocksize=2, mode=mode),
             helper.make_node("SpaceToDepth", ["d"], ["s"], blocksize=2),
             helper.make_node("GatherElements", ["s", "i"], ["y"], axis=3),
             helper.make_node("LpNormalization", ["y"], ["z"], axis=1, p=1)]
    m = model_of(nodes, [vi("x", [1, 8, 2, 3])], [vi("z", None)], {"i": idx}, opset=13)
    check(m, ["DepthToSpace", "SpaceToDepth", "GatherD", "LpNormalization"])


def test_a_mapping_that_breaks_falls_back_to_custom(caplog):
    from converters.graph_view import from_onnx

    m = model_of([helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)],
                 [vi("x", [1, 4, 2, 2])], [vi("y", [1, 1, 4, 4])])
    view = from_onnx(m)
    node = view.nodes[0]
    broken = type(node)(node.name, node.op_type, node.domain, node.inputs, node.outputs, {},
                        _proto=node.proto())  # as if an adapter lost the attribute
    from dataclasses import replace

    lite, report = import_onnx(replace(view, nodes=(broken,)))
    assert [n.op for n in lite.nodes] == ["Custom"]
    assert "mapping failed unexpectedly" in report.custom[0].reason
    assert "KeyError" not in report.custom[0].reason  # the reason is for users; the log says how
    assert "KeyError" in caplog.text and "carried as Custom" in caplog.text


def test_an_attribute_out_of_any_range_falls_back_to_custom():
    """Gather's axis stored as int32: an axis of 2**62 overflows instead of mapping."""
    m = model_of([helper.make_node("Gather", ["x", "i"], ["y"], axis=1 << 62)],
                 [vi("x", [2, 3])], [vi("y", None)], {"i": np.array([0], np.int64)})
    lite, report = import_onnx(from_onnx_unchecked(m))
    assert [n.op for n in lite.nodes] == ["Custom"]
    assert "mapping failed unexpectedly" in report.custom[0].reason


def from_onnx_unchecked(model):
    """The view of a model onnx.checker would refuse (as the NPU EP sees such graphs)."""
    from converters.graph_view import from_onnx

    return from_onnx(model, check=False, infer_shapes=False)


@pytest.mark.parametrize("op, attrs, reason", [
    ("Conv", {"kernel_shape": [5, 3]}, "kernel_shape=[5, 3] does not match the weight's [3, 3]"),
    ("Conv", {"group": -(1 << 31)}, "group=-2147483648 for 4 output channels"),
    ("Conv", {"group": 3}, "group=3 for 4 output channels"),
    ("Conv", {"strides": [0, 1]}, "strides=[0, 1]: expected 2 values >= 1"),
    ("Conv", {"pads": [1, -1, 1, 1]}, "pads=[1, -1, 1, 1]: expected 4 values >= 0"),
    ("ConvTranspose", {"strides": [2, 2], "output_padding": [0, 2]},
     "output_padding=[0, 2]: expected 2 values in [0, max(stride, dilation)) = [0, [2, 2])"),
    ("MaxPool", {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]},
     "a pooling pad must be smaller than the kernel"),
    ("AveragePool", {"kernel_shape": [0, 2]}, "kernel_shape=[0, 2]: expected 2 values >= 1"),
])
def test_window_attributes_onnx_forbids_stay_custom(op, attrs, reason):
    """onnxruntime refuses these nodes; on the NPU they ran (or ran wrong): now they are
    carried as Custom, so onnxruntime reports them as it does without the NPU."""
    inputs = ["x", "w"] if op.startswith("Conv") else ["x"]
    weights = {"w": W[:, :1].repeat(4, axis=1)} if op.startswith("Conv") else {}
    m = model_of([helper.make_node(op, inputs, ["y"], **attrs)], [vi("x", [1, 4, 8, 8])],
                 [vi("y", None)], weights)
    lite, report = import_onnx(from_onnx_unchecked(m))
    assert [n.op for n in lite.nodes] == ["Custom"]
    assert reason in report.custom[0].reason


def test_the_npu_does_not_run_a_node_onnxruntime_refuses():
    """ConvTranspose with output_padding >= stride used to run on the NPU (a (1, 2, 9, 109)
    result); now it stays with onnxruntime's CPU kernel, as without the NPU."""
    import onnxruntime as ort

    import provider

    w = numpy_helper.from_array(W[:3, :2], "w")
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", kernel_shape=[3, 3],
                            strides=[2, 2], output_padding=[0, 100])
    graph = helper.make_graph([node], "g", [vi("x", [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", F, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # onnxruntime 1.23 loads up to IR 11
    data = model.SerializeToString()
    feeds = {"x": np.ones((1, 3, 4, 4), np.float32)}
    npu = provider.InferenceSession(data, providers=["NPUExecutionProvider", "CPUExecutionProvider"])
    [placement] = npu.partition()
    assert placement.device == "CPU" and "output_padding=[0, 100]" in placement.reason

    def outcome(session):
        try:
            return session.run(None, feeds)[0]
        except Exception as e:  # noqa: BLE001 - onnxruntime's refusal, compared below
            return str(e)

    want = outcome(ort.InferenceSession(data, providers=["CPUExecutionProvider"]))
    if isinstance(want, str):  # onnxruntime 1.23's kernel runs it, reading past its buffers
        got = outcome(npu)
        assert isinstance(got, str) and "must be less than" in want and "must be less than" in got
