"""compile_model: arena plan, aliases, in-place steps, output binding edge cases, BatchNorm
and constant folding, fp16 storage bound, capability reasons and errors."""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from npu_oracle import CONV, Graph, assert_matches, pool, rng, run_npu, run_ort
from onnx import helper, numpy_helper

from converters.lite.ir import LiteModel
from converters.onnx_import import import_onnx
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu import capability, planner
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor
from provider.npu.ops import KERNELS, conv_weights, parallel
from provider.npu.program import from_bytes, to_bytes
from provider.options import CompileOptions

F32 = np.float32
def conv_relu_net(r) -> tuple[LiteModel, onnx.ModelProto]:
    """x -> conv -> leaky relu -> reshape -> add(const) -> reshape -> conv, as Lite and as ONNX."""
    w1, b1, w2 = (r.standard_normal(s).astype(F32) * 0.3 for s in ((4, 3, 3, 3), (4,), (2, 4, 3, 3)))
    c = r.standard_normal((4, 36)).astype(F32)
    g = Graph("net")
    x = g.input("x", (1, 3, 6, 6))
    h = g.node("Conv2DFusion", [x, g.const("w1", w1), g.const("b1", b1)], CONV)
    h = g.node("Activation", [h], {"activation_type": "LEAKY_RELU", "alpha": 0.1})
    h = g.node("Reshape", [h, g.const("s1", np.array([1, 4, 36], np.int64))])
    h = g.node("AddFusion", [h, g.const("c", c)], {"activation_type": "NO_ACTIVATION"})
    h = g.node("Reshape", [h, g.const("s2", np.array([1, 4, 6, 6], np.int64))])
    y = g.node("Conv2DFusion", [h, g.const("w2", w2)], CONV)
    lite = g.outputs(y)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h1"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["h1"], ["h2"], alpha=0.1),
             helper.make_node("Reshape", ["h2", "s1"], ["h3"]),
             helper.make_node("Add", ["h3", "c"], ["h4"]),
             helper.make_node("Reshape", ["h4", "s2"], ["h5"]),
             helper.make_node("Conv", ["h5", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"w1": w1, "b1": b1, "s1": np.array([1, 4, 36], np.int64), "c": c,
             "s2": np.array([1, 4, 6, 6], np.int64), "w2": w2}
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", 1, (1, 3, 6, 6))],
                              [helper.make_tensor_value_info("y", 1, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return lite, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

FP16 = CompileOptions(enable_fp16=True)


def internal_slots(program):
    return [(i, s) for i, s in enumerate(program.slots) if s.kind == "internal"]


# ---- arena plan -------------------------------------------------------------------------


def assert_plan_sound(program) -> None:
    """internal_bytes is the touched extent, at most the (64-byte aligned) sum of all
    internal tensors, and tensors share bytes while both are live only as the same buffer
    (alias / in-place pairs) or as a part of a whole (an elided concat's input in its output)."""
    slots = internal_slots(program)
    assert program.internal_bytes == max((s.offset + s.nbytes for _, s in slots), default=0)
    distinct = {s.name: s.nbytes for _, s in slots}
    assert program.internal_bytes <= sum(planner.align_up(n, 64) for n in distinct.values())
    spans = planner.lifetimes([(s.inputs, s.outputs) for s in program.steps], len(program.slots))
    for a, sa in slots:
        for b, sb in slots:
            if a >= b or spans[a] is None or spans[b] is None:
                continue
            overlap_mem = sa.offset < sb.offset + sb.nbytes and sb.offset < sa.offset + sa.nbytes
            overlap_time = spans[a][0] <= spans[b][1] and spans[b][0] <= spans[a][1]
            if overlap_mem and overlap_time:
                inner, outer = (sa, sb) if sa.nbytes <= sb.nbytes else (sb, sa)
                assert outer.offset <= inner.offset and inner.offset + inner.nbytes <= outer.offset + outer.nbytes, (sa, sb)


def test_arena_is_exact_and_live_tensors_never_overlap():
    assert_plan_sound(compile_model(conv_relu_net(rng(0))[0]))


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "act", "reshape", "mul"]), st.integers(0, 99),
                          st.integers(0, 99)), min_size=1, max_size=12),
       st.integers(1, 40), st.lists(st.integers(0, 99), max_size=3))
def test_random_graph_plans_are_sound_and_run_correctly(ops, width, extra_outputs):
    """Random DAGs of elementwise ops and reshapes: sound plan, numpy-exact results."""
    g = Graph("random")
    names, values = [g.input("x", (2, width))], [np.linspace(-1, 1, 2 * width, dtype=F32).reshape(2, width)]
    for op, i, j in ops:
        a = i % len(names)
        same = [k for k in range(len(names)) if values[k].shape == values[a].shape]
        b = same[j % len(same)]
        if op in ("add", "mul"):
            names.append(g.node("AddFusion" if op == "add" else "MulFusion", [names[a], names[b]]))
            values.append(values[a] + values[b] if op == "add" else values[a] * values[b])
        elif op == "act":
            names.append(g.node("Activation", [names[a]], {"activation_type": "TANH"}))
            values.append(np.tanh(values[a]))
        else:
            shape = (width, 2) if values[a].shape == (2, width) else (2, width)
            names.append(g.node("Reshape", [names[a], g.const(f"s{len(names)}", np.array(shape, np.int64))]))
            values.append(values[a].reshape(shape))
    outs = [len(names) - 1, *(k % len(names) for k in extra_outputs)]
    model = g.outputs(*(names[k] for k in outs))
    program = compile_model(model)
    assert_plan_sound(program)
    for got, k in zip(run_npu(model, {"x": values[0]}), outs, strict=True):
        assert_matches(got, values[k], atol=1e-6, rtol=1e-6)


def test_aliases_and_inplace_share_buffers_and_results_match_onnxruntime():
    lite, onnx_model = conv_relu_net(rng(1))
    program = compile_model(lite)
    kernels = [s.kernel for s in program.steps]
    assert kernels == ["conv2d", "activation", "binary", "conv2d"]  # reshapes are aliases
    by_name = {s.name: s for s in program.slots}
    conv_out, relu_out = by_name["Conv2DFusion0_0"], by_name["Activation1_0"]
    assert relu_out.offset == conv_out.offset  # in-place activation
    assert by_name["Reshape2_0"].offset == relu_out.offset  # alias
    assert by_name["AddFusion3_0"].offset == relu_out.offset  # in-place add over the alias
    x = rng(2).standard_normal((1, 3, 6, 6)).astype(F32)
    assert_matches(run_npu(lite, {"x": x})[0], run_ort(onnx_model, {"x": x})[0])


def concat_net(r, case: str) -> onnx.ModelProto:
    """x -> 1x1 conv a, 3x3 conv b -> concat(a, b) on channels -> 1x1 conv -> y, or a
    variant (`case`): "nested" concat(concat(a, b), c); "batch2" two images; "read_after"
    a is also added to the output later; "twice" concat(a, a, b); "output" the concat is
    the graph output; "graph_input" concat(x, a)."""
    n = 2 if case == "batch2" else 1
    w = {k: r.standard_normal(shape).astype(F32) for k, shape in
         {"wa": (4, 3, 1, 1), "wb": (5, 3, 3, 3), "wc": (2, 3, 1, 1)}.items()}
    parts = {"nested": ["ab", "c"], "twice": ["a", "a", "b"], "graph_input": ["x", "a"]}.get(case, ["a", "b"])
    channels = {"a": 4, "b": 5, "c": 2, "x": 3, "ab": 9}
    width = sum(channels[p] for p in parts)
    w["wy"] = r.standard_normal((6, width, 1, 1)).astype(F32)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"]),
             helper.make_node("Conv", ["x", "wb"], ["b"], pads=[1, 1, 1, 1])]
    if case == "nested":
        nodes += [helper.make_node("Conv", ["x", "wc"], ["c"]),
                  helper.make_node("Concat", ["a", "b"], ["ab"], axis=1)]
    nodes.append(helper.make_node("Concat", parts, ["cat"], axis=1))
    outputs = ["cat"]
    if case != "output":
        nodes.append(helper.make_node("Conv", ["cat", "wy"], ["y"]))
        outputs = ["y"]
    if case == "read_after":
        w["wz"] = r.standard_normal((6, 4, 1, 1)).astype(F32)
        nodes += [helper.make_node("Conv", ["a", "wz"], ["z"]), helper.make_node("Add", ["y", "z"], ["yz"])]
        outputs = ["yz"]
    graph = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", 1, (n, 3, 7, 7))],
                              [helper.make_tensor_value_info(o, 1, [None] * 4) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in w.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("case, elided", [
    ("plain", 1), ("nested", 2), ("batch2", 0), ("read_after", 0), ("twice", 0), ("output", 0),
    ("graph_input", 0),
])
def test_concat_inputs_are_computed_in_place_where_they_can_be(case, elided):
    """A concat whose inputs are contiguous slices of its output, each used by nothing after
    it, is no step at all: its producers write into the output's buffer (nested ones too).
    Two images, a later reader, a repeated input, a caller's buffer or a graph input keep
    the copy. Same values as onnxruntime on the native and the numpy kernels either way."""
    model = concat_net(rng(11), case)
    lite, _ = import_onnx(model)
    x = rng(12).standard_normal(tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)).astype(F32)
    program = compile_model(lite, {"x": x.shape})
    concats = sum(s.kernel == "concat" for s in program.steps)
    assert concats == (2 if case == "nested" else 1) - elided
    assert_plan_sound(program)
    if elided:
        slots = {s.name: s for s in program.slots}
        a, b = slots["a"], slots["b"]
        assert a.offset == slots["cat"].offset and b.offset == a.offset + a.nbytes
        if case == "nested":
            assert slots["c"].offset == b.offset + b.nbytes
        assert program.internal_bytes < sum(s.nbytes for _, s in internal_slots(program))
    want = run_ort(model, {"x": x})
    for kernels in (None, KERNELS):
        with Executor(program, pool(), kernels=kernels) as ex:
            for got, expect in zip(ex.run([x]), want, strict=True):
                assert_matches(np.array(got), expect)


def test_arena_reuse_beats_sum_of_tensors():
    g = Graph("chain")
    h = g.input("x", (1, 8, 16, 16))
    for _ in range(6):
        h = g.node("Conv2DFusion", [h, g.const(f"w{len(g.ids)}", np.full((8, 8, 3, 3), 0.01, F32))], CONV)
        h = g.node("Activation", [h], {"activation_type": "SIGMOID"})
    program = compile_model(g.outputs(h))
    total = sum(s.nbytes for _, s in internal_slots(program))
    assert program.internal_bytes < total / 2


# ---- graph outputs ---------------------------------------------------------------------------


def test_output_edge_cases_get_exactly_one_copy():
    g = Graph("outs")
    x = g.input("x", (2, 3))
    k = g.const("k", np.arange(6, dtype=F32).reshape(2, 3))
    s = g.node("AddFusion", [x, k])
    r = g.node("Reshape", [s, g.const("shape", np.array([3, 2], np.int64))])
    t = g.node("MulFusion", [s, s])
    model = g.outputs(x, k, r, s, s, t)
    program = compile_model(model)
    kernels = [st.kernel for st in program.steps]
    assert kernels.count("binary") == 2 and kernels.count("copy") == 4
    xv = rng(3).standard_normal((2, 3)).astype(F32)
    got = run_npu(model, {"x": xv})
    sv = xv + np.arange(6, dtype=F32).reshape(2, 3)
    for g_, w in zip(got, [xv, np.arange(6, dtype=F32).reshape(2, 3), sv.reshape(3, 2), sv, sv, sv * sv],
                     strict=True):
        assert_matches(g_, w)


def test_output_written_in_place_when_also_consumed():
    g = Graph("direct")
    x = g.input("x", (4,))
    a = g.node("Activation", [x], {"activation_type": "RELU"})
    b = g.node("MulFusion", [a, g.const("two", np.array(2.0, F32))])
    program = compile_model(g.outputs(a, b))
    assert [s.kernel for s in program.steps] == ["activation", "binary"]
    assert program.steps[0].outputs == [program.outputs[0]]
    xv = np.array([-1, 2, -3, 4], F32)
    got = run_npu(g.m, {"x": xv})
    assert_matches(got[0], np.maximum(xv, 0))
    assert_matches(got[1], 2 * np.maximum(xv, 0))


# ---- folding -----------------------------------------------------------------------------


def test_batchnorm_folds_into_conv():
    r = rng(4)
    w, b = r.standard_normal((4, 3, 3, 3)).astype(F32), r.standard_normal(4).astype(F32)
    bn = {"s": r.standard_normal(4), "bb": r.standard_normal(4), "m": r.standard_normal(4),
          "v": np.abs(r.standard_normal(4)) + 0.5}
    bn = {k: v.astype(F32) for k, v in bn.items()}
    g = Graph("bn")
    x = g.input("x", (1, 3, 5, 5))
    h = g.node("Conv2DFusion", [x, g.const("w", w), g.const("b", b)], CONV)
    y = g.node("FusedBatchNorm", [h, *(g.const(k, v) for k, v in bn.items())], {"epsilon": 1e-3})
    model = g.outputs(y)
    program = compile_model(model)
    assert [s.kernel for s in program.steps] == ["conv2d"]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["h", "s", "bb", "m", "v"], ["y"], epsilon=1e-3)]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", 1, (1, 3, 5, 5))],
                              [helper.make_tensor_value_info("y", 1, None)],
                              [numpy_helper.from_array(v, k) for k, v in {"w": w, "b": b, **bn}.items()])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    xv = r.standard_normal((1, 3, 5, 5)).astype(F32)
    assert_matches(run_npu(model, {"x": xv})[0], run_ort(onnx_model, {"x": xv})[0])


def test_weight_only_subgraphs_and_shape_chains_fold():
    g = Graph("fold")
    x = g.input("x", ("batch", 3, 4, 4))
    w = g.node("ConstantOfShape", [g.const("ws", np.array([2, 3, 3, 3], np.int64))],
               {"data_type": 43, "value": [0.5]})
    h = g.node("Conv2DFusion", [x, w], CONV)
    shp = g.node("Shape", [h], dtype=np.int64)
    n = g.node("Gather", [shp, g.const("i0", np.array([0], np.int64)), g.const("ax", np.array([0], np.int32))],
               dtype=np.int64)
    tgt = g.node("Concat", [n, g.const("rest", np.array([-1], np.int64))], {"axis": 0}, dtype=np.int64)
    y = g.node("Reshape", [h, tgt])
    model = g.outputs(y)
    assert capability.supported_nodes(model) == dict.fromkeys(range(6))
    program = compile_model(model, {"x": (2, 3, 4, 4)})
    assert [s.kernel for s in program.steps] == ["conv2d", "copy"]
    xv = rng(5).standard_normal((2, 3, 4, 4)).astype(F32)
    onnx_w = np.full((2, 3, 3, 3), 0.5, F32)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "c",
                              [helper.make_tensor_value_info("x", 1, (2, 3, 4, 4))],
                              [helper.make_tensor_value_info("y", 1, None)], [numpy_helper.from_array(onnx_w, "w")])
    want = run_ort(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), {"x": xv})[0]
    got = run_npu(model, {"x": xv})[0]
    assert_matches(got, want.reshape(2, -1))


def test_parameter_free_activations_fuse_into_their_producer():
    r = rng(9)
    w = r.standard_normal((4, 3, 3, 3)).astype(F32)
    g = Graph("fuse")
    x = g.input("x", (1, 3, 5, 5))
    h = g.node("Conv2DFusion", [x, g.const("w", w)], CONV)
    h = g.node("Activation", [h], {"activation_type": "RELU6"})
    s = g.node("AddFusion", [h, h])
    y = g.node("Activation", [s], {"activation_type": "SIGMOID"})
    z = g.node("Activation", [y], {"activation_type": "LEAKY_RELU", "alpha": 0.5})
    model = g.outputs(z)
    program = compile_model(model)
    assert [st.kernel for st in program.steps] == ["conv2d", "binary", "activation"]
    assert program.steps[0].attrs["activation"] == "RELU6"
    assert program.steps[1].attrs["activation"] == "SIGMOID"
    nodes = [helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", 1, (1, 3, 5, 5))],
                              [helper.make_tensor_value_info("h", 1, None)], [numpy_helper.from_array(w, "w")])
    xv = r.standard_normal((1, 3, 5, 5)).astype(F32)
    conv = run_ort(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), {"x": xv})[0]
    sig = 1 / (1 + np.exp(-2 * np.clip(conv, 0, 6)))
    assert_matches(run_npu(model, {"x": xv})[0], sig.astype(F32))


def _silu_model(group: int, k: int, extra_output: bool = False, gate_of_other: bool = False
                ) -> onnx.ModelProto:
    """Conv -> Sigmoid -> Mul (SiLU as exporters write it), 16 channels on 12x12; variants
    where the gate is also a graph output, or gates another tensor than the conv's."""
    r = rng(21)
    w = (r.standard_normal((16, 16 // group, k, k)) * 0.2).astype(F32)
    b = r.standard_normal(16).astype(F32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, group=group),
             helper.make_node("Sigmoid", ["x" if gate_of_other else "c"], ["s"]),
             helper.make_node("Mul", ["s", "c"], ["y"])]  # gate first: either order fuses
    outs = [helper.make_tensor_value_info("y", 1, (2, 16, 12, 12))]
    if extra_output:
        outs.append(helper.make_tensor_value_info("s", 1, (2, 16, 12, 12)))
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", 1, (2, 16, 12, 12))],
                              outs, [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("kernels", ["native", "numpy"])
@pytest.mark.parametrize("group, k", [(1, 3), (1, 1), (16, 3)], ids=["direct", "gemm", "depthwise"])
def test_silu_becomes_the_convs_swish_epilogue(group, k, kernels):
    """x * sigmoid(x) after a conv is one conv step with a SWISH epilogue (rewrites.fuse_swish,
    then fuse_activations), on the direct, GEMM and depthwise kernels, equal to onnxruntime."""
    model = _silu_model(group, k)
    lite, _ = import_onnx(model)
    program = compile_model(lite)
    assert [(st.kernel, st.attrs.get("activation")) for st in program.steps] == [("conv2d", "SWISH")]
    xv = rng(22).standard_normal((2, 16, 12, 12)).astype(F32)
    with Executor(from_bytes(to_bytes(program)), pool(),
                  kernels=KERNELS if kernels == "numpy" else None) as ex:
        if kernels == "native":
            assert ex.native_steps == 1
        got = np.array(ex.run([xv])[0])
    assert_matches(got, run_ort(model, {"x": xv})[0])


@pytest.mark.parametrize("variant", ["extra_output", "gate_of_other"])
def test_a_sigmoid_that_is_not_a_silu_gate_stays(variant):
    """No SWISH when the sigmoid's output is read elsewhere (a graph output) or gates another
    tensor than its own input: the graph keeps its Sigmoid and Mul, with the same values."""
    model = _silu_model(1, 3, **{variant: True})
    lite, _ = import_onnx(model)
    program = compile_model(lite)
    assert all(st.attrs.get("activation") != "SWISH" for st in program.steps)
    assert "binary" in [st.kernel for st in program.steps]
    xv = rng(23).standard_normal((2, 16, 12, 12)).astype(F32)
    for got, want in zip(run_npu(lite, {"x": xv}), run_ort(model, {"x": xv}), strict=True):
        assert_matches(got, want)


def _dense_model(variant: str) -> onnx.ModelProto:
    """x (2, 5, 16) @ W (16, 24) + b, as exporters write a dense layer (the bias first, as
    BERT's do), then Relu; variants: the product first, the product also a graph output, a
    (5, 24) bias (a full matrix, no bias vector), W an input of a symbolic width."""
    r = rng(31)
    w, b = r.standard_normal((16, 24)).astype(F32), r.standard_normal(24).astype(F32)
    b = r.standard_normal((5, 24)).astype(F32) if variant == "matrix_bias" else b
    add = ["p", "b"] if variant == "product_first" else ["b", "p"]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", add, ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    ins = [helper.make_tensor_value_info("x", 1, (2, 5, 16))]
    inits = [numpy_helper.from_array(b, "b")]
    if variant == "weights_input":
        ins.append(helper.make_tensor_value_info("w", 1, (16, "n")))
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    outs = [helper.make_tensor_value_info("y", 1, (2, 5, "n" if variant == "weights_input" else 24))]
    if variant == "product_read":
        outs.append(helper.make_tensor_value_info("p", 1, (2, 5, 24)))
    graph = helper.make_graph(nodes, "dense", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("kernels", ["native", "numpy"])
@pytest.mark.parametrize("variant", ["bias_first", "product_first"])
def test_a_dense_layers_bias_add_joins_its_matmul(variant, kernels):
    """MatMul, Add of a bias vector (either operand order), Relu: one matmul step with the
    bias and the Relu in its epilogue (rewrites.fuse_bias_adds), equal to onnxruntime."""
    model = _dense_model(variant)
    lite, _ = import_onnx(model)
    program = compile_model(lite)
    assert [(st.kernel, st.attrs["activation"], len(st.inputs)) for st in program.steps] == [
        ("matmul", "RELU", 3)]
    xv = rng(32).standard_normal((2, 5, 16)).astype(F32)
    with Executor(from_bytes(to_bytes(program)), pool(),
                  kernels=KERNELS if kernels == "numpy" else None) as ex:
        assert ex.native_steps == (1 if kernels == "native" else 0)
        got = np.array(ex.run([xv])[0])
    assert_matches(got, run_ort(model, {"x": xv})[0])


@pytest.mark.parametrize("variant", ["product_read", "matrix_bias", "weights_input"])
def test_adds_that_are_no_dense_bias_stay(variant):
    """The Add stays a step of its own when the product is read elsewhere (a graph output),
    when what it adds is no vector of the output's width, or when B's width is symbolic
    (a B of a static shape fuses, constant or not); the values equal onnxruntime's."""
    model = _dense_model(variant)
    lite, _ = import_onnx(model)
    feeds = {"x": rng(33).standard_normal((2, 5, 16)).astype(F32)}
    if variant == "weights_input":
        feeds["w"] = rng(34).standard_normal((16, 24)).astype(F32)
    program = compile_model(lite, {k: v.shape for k, v in feeds.items()})
    assert "binary" in [st.kernel for st in program.steps]
    for got, want in zip(run_npu(lite, feeds), run_ort(model, feeds), strict=True):
        assert_matches(got, want)


def test_a_matmul_bias_of_the_wrong_width_is_refused():
    """A MatMulFusion whose bias is no vector of its output's width (a malformed .ms) gets
    InvalidModelError naming the node and the width it needs."""
    g = Graph("bad_bias")
    x = g.input("x", (3, 4))
    y = g.node("MatMulFusion", [x, g.const("w", np.ones((4, 6), F32)), g.const("b", np.ones(5, F32))],
               {"transpose_a": False, "transpose_b": False, "activation_type": "NO_ACTIVATION"})
    with pytest.raises(InvalidModelError, match=r"bias \(5,\), expected \(6,\)"):
        compile_model(g.outputs(y))


def _gelu_model(variant: str) -> onnx.ModelProto:
    """x (2, 6, 32) -> y: an exact GELU as exporters write it, x * 0.5 * (1 + erf(x / sqrt(2))),
    grouped per variant: (x * a) * 0.5 (BERT's), (a * 0.5) * x, a * (x * 0.5), the scale as a
    Mul by 1/sqrt(2); and three that are no GELU: erf's output also a graph output, a divisor
    other than sqrt(2), a 0.5 of shape (1, 1, 1, 1) (which makes y one rank more than x)."""
    c = {"sqrt2": np.float32(np.sqrt(2)), "isqrt2": np.float32(np.sqrt(0.5)),
         "one": np.float32(1), "half": np.float32(0.5), "other": np.float32(1.5)}
    if variant == "rank_raising":
        c["half"] = np.full((1, 1, 1, 1), 0.5, F32)
    scale = (helper.make_node("Mul", ["x", "isqrt2"], ["d"]) if variant == "mul_scale" else
             helper.make_node("Div", ["x", "other" if variant == "other_divisor" else "sqrt2"],
                              ["d"]))
    nodes = [scale, helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["a"])]
    if variant == "half_first":
        nodes += [helper.make_node("Mul", ["a", "half"], ["m"]), helper.make_node("Mul", ["x", "m"], ["y"])]
    elif variant == "x_halved":
        nodes += [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["a", "h"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    outs = [helper.make_tensor_value_info("y", 1, (1, 2, 6, 32) if variant == "rank_raising"
                                          else (2, 6, 32))]
    if variant == "erf_read":
        outs.append(helper.make_tensor_value_info("e", 1, (2, 6, 32)))
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", 1, (2, 6, 32))], outs,
                              [numpy_helper.from_array(np.array(v), k) for k, v in c.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("variant", ["bert", "half_first", "x_halved", "mul_scale"])
def test_an_exported_exact_gelu_is_one_activation(variant):
    """The five nodes of an exported exact GELU, in each grouping, are one native GELU step
    (rewrites.fuse_gelu), equal to onnxruntime."""
    model = _gelu_model(variant)
    lite, _ = import_onnx(model)
    program = compile_model(lite)
    assert [(st.kernel, st.attrs.get("activation_type")) for st in program.steps] == [
        ("activation", "GELU")]
    xv = (rng(35).standard_normal((2, 6, 32)) * 3).astype(F32)
    with Executor(from_bytes(to_bytes(program)), pool()) as ex:
        assert ex.native_steps == 1
        got = np.array(ex.run([xv])[0])
    assert_matches(got, run_ort(model, {"x": xv})[0])


@pytest.mark.parametrize("variant", ["erf_read", "other_divisor", "rank_raising"])
def test_a_near_gelu_stays_as_written(variant):
    """No GELU when an intermediate is read elsewhere, the divisor is not sqrt(2) or a
    constant would raise the rank: the nodes stay steps of their own, with onnxruntime's
    values."""
    model = _gelu_model(variant)
    lite, _ = import_onnx(model)
    program = compile_model(lite)
    assert "unary" in [st.kernel for st in program.steps]
    feeds = {"x": (rng(36).standard_normal((2, 6, 32)) * 3).astype(F32)}
    for got, want in zip(run_npu(lite, feeds), run_ort(model, feeds), strict=True):
        assert_matches(got, want)


def test_residual_add_folds_into_the_conv_that_runs_last(monkeypatch):
    """ResNet's shortcut: relu(conv_c(relu(conv_b(x))) + conv_a(x)) and a plain conv_d(x) +
    conv_e(x): each Add joins the epilogue of the conv computed after the other operand; a
    conv whose output is read twice keeps its Add."""
    r = rng(12)
    ws = {f"w{k}": (r.standard_normal((16, 16, 3, 3)) * 0.1).astype(F32) for k in "abcdef"}
    bs = {f"b{k}": r.standard_normal(16).astype(F32) for k in "ac"}
    g = Graph("residual")
    x = g.input("x", (2, 16, 6, 6))
    consts = {k: g.const(k, v) for k, v in {**ws, **bs}.items()}
    a = g.node("Conv2DFusion", [x, consts["wa"], consts["ba"]], CONV)
    h = g.node("Conv2DFusion", [x, consts["wb"]], {**CONV, "activation_type": "RELU"})
    c = g.node("Conv2DFusion", [h, consts["wc"], consts["bc"]], CONV)
    y1 = g.node("AddFusion", [c, a], {"activation_type": "RELU"})
    d = g.node("Conv2DFusion", [x, consts["wd"]], CONV)
    e = g.node("Conv2DFusion", [x, consts["we"]], CONV)
    y2 = g.node("AddFusion", [d, e])
    f = g.node("Conv2DFusion", [x, consts["wf"]], CONV)
    y3 = g.node("AddFusion", [f, f])
    program = compile_model(g.outputs(y1, y2, y3))
    assert [(st.kernel, st.attrs.get("residual", False), st.attrs.get("activation"))
            for st in program.steps] == [
        ("conv2d", False, "NO_ACTIVATION"), ("conv2d", False, "RELU"), ("conv2d", True, "RELU"),
        ("conv2d", False, "NO_ACTIVATION"), ("conv2d", True, "NO_ACTIVATION"),
        ("conv2d", False, "NO_ACTIVATION"), ("binary", False, "NO_ACTIVATION")]
    assert_plan_sound(program)
    conv = {"pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], **conv),
             helper.make_node("Conv", ["x", "wb"], ["hb"], **conv),
             helper.make_node("Relu", ["hb"], ["h"]),
             helper.make_node("Conv", ["h", "wc", "bc"], ["c"], **conv),
             helper.make_node("Add", ["c", "a"], ["s1"]), helper.make_node("Relu", ["s1"], ["y1"]),
             helper.make_node("Conv", ["x", "wd"], ["d"], **conv),
             helper.make_node("Conv", ["x", "we"], ["e"], **conv),
             helper.make_node("Add", ["d", "e"], ["y2"]),
             helper.make_node("Conv", ["x", "wf"], ["f"], **conv),
             helper.make_node("Add", ["f", "f"], ["y3"])]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", 1, (2, 16, 6, 6))],
                              [helper.make_tensor_value_info(n, 1, None) for n in ("y1", "y2", "y3")],
                              [numpy_helper.from_array(v, k) for k, v in {**ws, **bs}.items()])
    xv = r.standard_normal((2, 16, 6, 6)).astype(F32)
    want = run_ort(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
                   {"x": xv})
    monkeypatch.setattr(parallel, "MIN_US", 0)
    for cores in (1, 2):  # epilogue on the whole output, then per output-channel block
        parallel.set_threads(cores)
        try:
            with Executor(program, pool()) as ex:
                got = ex.run([xv])
        finally:
            parallel.set_threads(1)
        for name, gv, wv in zip(("y1", "y2", "y3"), got, want, strict=True):
            assert_matches(gv, wv, what=f"{name} on {cores} cores")


# ---- fp16 -------------------------------------------------------------------------------------


def test_fp16_storage_bound_per_op_and_end_to_end():
    r = rng(6)
    lite, onnx_model = conv_relu_net(r)
    p32, p16 = compile_model(lite), compile_model(lite, options=FP16)
    assert p16.options["enable_fp16"] and p16.weight_bytes < p32.weight_bytes * 0.6
    assert {p16.slots[i].dtype for i in (*p16.inputs, *p16.outputs)} == {"float32"}
    assert {s.dtype for s in p16.slots if s.kind == "weight" and s.dtype.startswith("float")} == {"float16"}
    x = r.standard_normal((1, 3, 6, 6)).astype(F32)
    want = run_ort(onnx_model, {"x": x})[0]
    got = run_npu(lite, {"x": x}, enable_fp16=True)[0]
    assert got.dtype == F32 and not np.array_equal(got, want)
    assert np.max(np.abs(got - want)) <= 2e-2 * np.max(np.abs(want))
    # one GEMM op: |y16 - y| <= 2**-11 |y| + 2**-10 (|W| @ |x|) + |b| 2**-11
    g = Graph("fc")
    a = g.input("a", (8, 64))
    w, b = r.standard_normal((16, 64)).astype(F32), r.standard_normal(16).astype(F32)
    y = g.node("FullConnection", [a, g.const("w", w), g.const("b", b)], {"has_bias": True})
    av = r.standard_normal((8, 64)).astype(F32)
    exact = av.astype(np.float64) @ w.T.astype(np.float64) + b
    got16 = run_npu(g.outputs(y), {"a": av}, enable_fp16=True)[0]
    bound = 2**-11 * np.abs(exact) + 2**-10 * (np.abs(av) @ np.abs(w.T)) + 2**-11 * np.abs(b) + 1e-6
    assert np.all(np.abs(got16 - exact) <= bound)


# ---- program file round trip -------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 21), st.integers(1, 40))
def test_direct_weight_order_round_trips(g, og, k):
    """The direct kernel's order keeps every float: blocks of 8 (then 4, 2, 1) rows,
    each K-major, and back to the GEMM matrix."""
    gemm = np.arange(g * og * k, dtype=F32).reshape(g, og, k)
    blocked = conv_weights.direct_blocks(gemm)
    assert blocked.shape == gemm.shape and sorted(blocked.ravel()) == sorted(gemm.ravel())
    first, size = conv_weights.direct_row_blocks(og)[-1]
    assert first + size == og and size in (1, 2, 4, 8)
    assert np.array_equal(blocked[0].ravel()[first * k:(first + size) * k],
                          gemm[0, first:first + size].T.ravel())  # K-major block
    assert np.array_equal(conv_weights.gemm_weights(blocked, {"weights": "direct"}), gemm)


@pytest.mark.parametrize("fp16", [False, True])
def test_direct_conv_weights_are_stored_for_the_direct_kernel(fp16):
    """A conv the direct kernel takes is compiled with its weights in that kernel's order
    (fp32 only); both kernel sets give onnxruntime's values from it."""
    r = rng(21)
    w, b = r.standard_normal((13, 8, 3, 3)).astype(F32), r.standard_normal(13).astype(F32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "direct", [helper.make_tensor_value_info("x", 1, (1, 8, 12, 12))],
                              [helper.make_tensor_value_info("y", 1, [None] * 4)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    program = compile_model(import_onnx(model)[0], {"x": (1, 8, 12, 12)}, CompileOptions(fp16))
    (step,) = [s for s in program.steps if s.kernel == "conv2d"]
    stored = program.slots[step.inputs[1]]
    weights = program.weights[stored.offset:stored.offset + stored.nbytes].view(stored.np_dtype).reshape(stored.shape)
    gemm = w.reshape(1, 13, 72).astype(stored.np_dtype)
    if fp16:
        assert "weights" not in step.attrs and np.array_equal(weights, gemm)
        return
    assert step.attrs["weights"] == "direct"
    assert np.array_equal(weights, conv_weights.direct_blocks(gemm))
    x = rng(22).standard_normal((1, 8, 12, 12)).astype(F32)
    want = run_ort(model, {"x": x})[0]
    for kernels in (None, KERNELS):
        with Executor(program, pool(), kernels=kernels) as ex:
            assert_matches(np.array(ex.run([x])[0]), want)


def test_compiled_program_survives_serialization():
    lite, onnx_model = conv_relu_net(rng(7))
    program = from_bytes(to_bytes(compile_model(lite)))
    x = rng(8).standard_normal((1, 3, 6, 6)).astype(F32)
    with Executor(program, pool()) as ex:
        got = np.array(ex.run([x])[0])
    assert_matches(got, run_ort(onnx_model, {"x": x})[0])


# ---- capability and errors ------------------------------------------------------------------


def test_capability_gives_reasons():
    g = Graph("cap")
    x = g.input("x", (1, 3, 4, 4))
    wx = g.input("wx", (2, 3, 3, 3))
    i = g.input("i", (1, 3, 4, 4), np.int64)
    g.node("Rsqrt", [x])
    g.node("Custom", [x], {"type": "onnx:ai.onnx:Foo", "attr": {}})
    g.node("Conv2DFusion", [x, wx], CONV)
    g.node("Activation", [x], {"activation_type": "SELU"})
    g.node("Conv2DFusion", [i, g.const("w", np.zeros((2, 3, 3, 3), np.int64))], CONV, dtype=np.int64)
    g.node("Activation", [x], {"activation_type": "GELU"})
    g.node("MatMulFusion", [g.input("v", (3,)), g.const("m", np.zeros((3, 2), F32))])
    model = g.outputs(x)
    reasons = capability.supported_nodes(model)
    assert "Rsqrt is not in the NPU's set" in reasons[0]
    assert "onnx:ai.onnx:Foo" in reasons[1]
    assert "'wx'" in reasons[2] and "run time" in reasons[2]
    assert "SELU" in reasons[3]
    assert "int64" in reasons[4]
    assert reasons[5] is None and capability.check(model, 5) is None
    assert "rank 1" in reasons[6]
    with pytest.raises(UnsupportedError, match="Rsqrt0"):
        compile_model(model)


def test_shape_errors_name_the_input():
    g = Graph("dyn")
    x = g.input("x", ("n", 3))
    y = g.node("Activation", [x], {"activation_type": "RELU"})
    model = g.outputs(y)
    with pytest.raises(InvalidModelError, match="'x'.*input_shapes"):
        compile_model(model)
    with pytest.raises(InvalidModelError, match="'x'.*does not fit"):
        compile_model(model, {"x": (2, 4)})
    assert compile_model(model, {"x": (5, 3)}).slots[0].shape == (5, 3)
    model.nodes[0].inputs = [7]
    with pytest.raises(InvalidModelError, match="Activation0.*outside"):
        compile_model(model)
    g2 = Graph("bad")
    a = g2.input("a", (2, 3))
    b = g2.input("b", (4, 3))
    with pytest.raises(InvalidModelError, match="do not broadcast"):
        compile_model(g2.outputs(g2.node("AddFusion", [a, b])))


def test_steady_state_runs_allocate_no_tensor_memory():
    """conv, pooling, resize, binary and GEMM steps write into planned views only: what a run
    allocates is numpy's fixed-size ufunc iteration buffer (8192 elements), never a tensor."""
    r = rng(10)
    g = Graph("alloc")
    x = g.input("x", (1, 8, 64, 64))
    h = g.node("Conv2DFusion", [x, g.const("w", r.standard_normal((16, 8, 3, 3)).astype(F32))],
               {**CONV, "activation_type": "RELU"})
    h = g.node("MaxPoolFusion", [h], {"kernel_size": [2, 2], "strides": [2, 2], "pad": [0, 0, 0, 0]})
    h = g.node("Resize", [h], {"method": "LINEAR", "new_height": 64, "new_width": 64,
                               "coordinate_transform_mode": "HALF_PIXEL"})
    h = g.node("AddFusion", [h, g.const("c", np.ones((16, 1, 1), F32))])
    h = g.node("Conv2DFusion", [h, g.const("w2", r.standard_normal((4, 16, 1, 1)).astype(F32))],
               {**CONV, "kernel_size": [1, 1], "pad_list": [0, 0, 0, 0]})
    program = compile_model(g.outputs(h))
    xv = r.standard_normal((1, 8, 64, 64)).astype(F32)
    out = np.empty((1, 4, 64, 64), F32)
    with Executor(program, pool()) as ex:
        ex.run([xv], [out])
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            ex.run([xv], [out])
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    smallest_tensor = 16 * 32 * 32 * 4  # the pooled one, 64 KiB
    assert peak < 48 * 1024 < smallest_tensor, f"a run allocated {peak} bytes"
