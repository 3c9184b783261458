"""The ops real models need (issue 18), each through the whole path (real_ops.py: an ONNX
model -> the NPU EP, every node on the NPU, one session across several input shapes,
against onnxruntime CPU, and ONNX -> Lite -> .ms -> Lite -> ONNX against the original).
Window ops (1-D, counted pads, output_shape, SAME_LOWER) are test_npu_real_windows.py.

Range / Size / shape chains folded per shape, GatherND, run-time Gather indices, IsNaN /
IsInf, HardSigmoid of any alpha/beta, Gemm of any alpha/beta/C, Round / Sign / Selu /
ThresholdedRelu / Celu / Mod / Mean / n-ary Sum, ReduceL1 / ReduceLogSum /
ReduceLogSumExp, PRelu of a run-time or any-axis slope, MatMul by a vector, Pad with
negative pads and in edge mode, ArgMax/ArgMin of the last tie, GatherElements, ScatterND,
ScatterElements, Einsum as transposes and one MatMul, LRN,
LpNormalization, Trilu (a causal mask per length), Split of an uneven dimension, Reshape
allowzero, Resize with scales of a run-time size and PyTorch's pytorch_half_pixel, int64
index arithmetic and Cast of non-finite values.

Recurrent layers are test_npu_real_recurrent.py. Long (over ~400 lines) by design, for now:
one short test per form; split further by family (index and shape, element-wise) when it
next grows."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_roundtrip import assert_close
from real_ops import I64, NPU, F, check, check_reference, model_of, randn, registered  # noqa: F401

import provider
from provider.npu.ops.common import InputValueError

# ---- 1-D convolution and pooling -------------------------------------------------------------


@pytest.mark.parametrize("node,reason", [
    (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[5, 5], strides=[1, 2],
                      auto_pad="SAME_UPPER", count_include_pad=1), "auto_pad=SAME_UPPER"),
    (helper.make_node("Celu", ["x"], ["y"], alpha=-1.0), "not positive"),
    (helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[3, 3],
                      output_shape=[10, 9]), "unknown size"),
    # found by fuzz_models (a mutated .ms): onnxruntime's running sum makes it all NaN
    (helper.make_node("LRN", ["x"], ["y"], size=3, alpha=float("inf")), "non-finite"),
    (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                      pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1), "unknown size"),
])
def test_forms_the_decompositions_do_not_cover_stay_on_the_cpu(node, reason):
    """Found by the op fuzzer: SAME pads counted in the average (the pads depend on the
    size), counted pads with ceil_mode on a size known at run time only (whether ONNX drops
    the last window depends on it) and a negative Celu alpha (alpha * Elu(x / alpha) is
    then wrong for x > 0)."""
    rng = np.random.default_rng(12)
    model = model_of([node], [helper.make_tensor_value_info("x", F, [1, 3, "H", 8])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"w": randn(rng, 3, 2, 3, 3)} if "w" in node.input else {})
    npu = check(model, [{"x": randn(rng, 1, 3, 9, 8)}], on_npu=False, ms=False)
    [placed] = npu.partition()
    assert placed.device != "NPU" and reason in placed.reason, placed


# ---- shape chains, Range, Size, Gather / GatherND ---------------------------------------------


def test_shape_chain_with_range_expand_and_reshape_folds_per_shape():
    """positions = Range(0, Shape(x)[1]) * Size(x) (int64 arithmetic), expanded to x's shape,
    added to x after a Reshape whose target is built from Shape: all folded per shape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["len"], axis=0),
        helper.make_node("Range", ["zero", "len", "step"], ["pos"]),
        helper.make_node("Size", ["x"], ["size"]),
        helper.make_node("Mul", ["pos", "size"], ["scaled"]),
        helper.make_node("Equal", ["scaled", "zero"], ["first"]),
        helper.make_node("Where", ["first", "size", "scaled"], ["picked"]),
        helper.make_node("Cast", ["picked"], ["posf"], to=F),
        helper.make_node("Unsqueeze", ["posf", "axes12"], ["column"]),
        helper.make_node("Expand", ["column", "s"], ["grid"]),
        helper.make_node("Slice", ["s", "zero1", "two1"], ["nl"]),
        helper.make_node("Concat", ["nl", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], allowzero=1),
        helper.make_node("Reshape", ["grid", "target"], ["gflat"]),
        helper.make_node("Add", ["flat", "gflat"], ["y"]),
    ]
    inits = {"one": np.array(1, np.int64), "zero": np.array(0, np.int64),
             "step": np.array(1, np.int64), "zero1": np.array([0], np.int64),
             "two1": np.array([2], np.int64), "minus1": np.array([-1], np.int64),
             "axes12": np.array([1, 2], np.int64)}
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, ["N", "L", 2, 3])],
                     [helper.make_tensor_value_info("y", F, None)], inits)
    rng = np.random.default_rng(5)
    npu = check(model, [{"x": randn(rng, n, length, 2, 3)} for n, length in ((1, 4), (2, 7), (1, 4))])
    assert len({p.partition for p in npu.partition()}) == 1


def test_reshape_allowzero_maps_when_the_target_has_no_zero_only():
    x = helper.make_tensor_value_info("x", F, [2, 3, 4])
    y = helper.make_tensor_value_info("y", F, None)
    fine = model_of([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)], [x], [y],
                    {"s": np.array([6, -1], np.int64)})
    check(fine, [{"x": randn(np.random.default_rng(6), 2, 3, 4)}])
    empty = model_of([helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)],
                     [helper.make_tensor_value_info("x", F, [0, 3])], [y],
                     {"s": np.array([3, 0], np.int64)})
    npu = check(empty, [{"x": np.zeros((0, 3), np.float32)}], on_npu=False, ms=False)
    assert "allowzero=1 with a 0" in npu.partition()[0].reason


def test_embedding_gather_reads_run_time_indices_and_checks_them():
    rng = np.random.default_rng(7)
    model = model_of([helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)],
                     [helper.make_tensor_value_info("ids", I64, ["N", "L"])],
                     [helper.make_tensor_value_info("y", F, None)], {"table": randn(rng, 10, 4)})
    npu = check(model, [{"ids": rng.integers(-10, 10, size=(n, length))}
                        for n, length in ((1, 5), (3, 2))])
    with pytest.raises(InputValueError, match=r"Gather: index 10 is outside \[-10, 10\)"):
        npu.run(None, {"ids": np.array([[1, 10]], np.int64)})


@pytest.mark.parametrize("constant", [True, False])
def test_gather_nd(constant):
    rng = np.random.default_rng(8)
    idx = np.array([[[0, 1], [2, -1]], [[1, 0], [-3, 2]]], np.int64)
    inputs = [helper.make_tensor_value_info("x", F, [3, 4, 5])]
    if not constant:
        inputs.append(helper.make_tensor_value_info("i", I64, [2, 2, 2]))
    model = model_of([helper.make_node("GatherND", ["x", "i"], ["y"])], inputs,
                     [helper.make_tensor_value_info("y", F, None)], {"i": idx} if constant else {})
    feeds = {"x": randn(rng, 3, 4, 5)} | ({} if constant else {"i": idx})
    check(model, [feeds])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_reads_run_time_indices_and_checks_them(axis):
    """Negative indices wrap; the index may be smaller than the data off the axis (ONNX);
    an index out of range is the run's error, naming the op."""
    rng = np.random.default_rng(14)
    model = model_of([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)],
                     [helper.make_tensor_value_info("x", F, ["A", 4, 5]),
                      helper.make_tensor_value_info("i", I64, ["B", "C", "D"])],
                     [helper.make_tensor_value_info("y", F, None)])
    x = randn(rng, 3, 4, 5)
    dim = x.shape[axis]
    npu = check(model, [{"x": x, "i": rng.integers(-dim, dim, size=shape)}
                        for shape in ((3, 4, 5), (2, 3, 4), (1, 1, 1))])
    bad = np.zeros((1, 1, 1), np.int64) + dim
    with pytest.raises(InputValueError, match=rf"GatherElements: index {dim} is outside"):
        npu.run(None, {"x": x, "i": bad})


@pytest.mark.parametrize("data_shape,index_shape", [((4, 5, 6), (2, 1)), ((4, 5, 6), (3, 2)),
                                                     ((1, 30, 7), (2, 4, 3)), ((6,), (4, 1))])
def test_scatter_nd_replaces_slices_at_run_time_indices_and_checks_them(data_shape, index_shape):
    """ScatterND without a reduction (YOLOv5's in-place head assignments, transformer caches):
    constant and run-time index tuples, negatives wrapping; an index out of range is the
    run's error, naming the op."""
    rng = np.random.default_rng(15)
    k = index_shape[-1]
    update_shape = [*index_shape[:-1], *data_shape[k:]]
    model = model_of([helper.make_node("ScatterND", ["x", "i", "u"], ["y"])],
                     [helper.make_tensor_value_info("x", F, data_shape),
                      helper.make_tensor_value_info("i", I64, index_shape),
                      helper.make_tensor_value_info("u", F, update_shape)],
                     [helper.make_tensor_value_info("y", F, data_shape)], opset=13)
    x = randn(rng, *data_shape)

    def index() -> np.ndarray:  # distinct tuples: ONNX leaves repeated ones unspecified
        flat = rng.permutation(int(np.prod(data_shape[:k])))[:int(np.prod(index_shape[:-1]))]
        tuples = np.stack(np.unravel_index(flat, data_shape[:k]), -1).reshape(index_shape)
        return tuples - np.array(data_shape[:k]) * rng.integers(0, 2, index_shape)  # negatives

    npu = check(model, [{"x": x, "i": index(), "u": randn(rng, *update_shape)} for _ in range(3)])
    bad = index()
    bad.reshape(-1, k)[-1, -1] = data_shape[k - 1]
    with pytest.raises(InputValueError, match=rf"ScatterND: index {data_shape[k - 1]} is outside"):
        npu.run(None, {"x": x, "i": bad, "u": randn(rng, *update_shape)})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_writes_run_time_indices_in_order_and_checks_them(axis):
    """torch's scatter_ (no reduction): the index may be smaller than the data off the axis
    and longer on it, negatives wrap, a repeated place keeps its last update as onnxruntime
    writes them; an index out of range is the run's error, naming the op."""
    rng = np.random.default_rng(16)
    model = model_of([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis)],
                     [helper.make_tensor_value_info("x", F, [3, 4, 5]),
                      helper.make_tensor_value_info("i", I64, ["A", "B", "C"]),
                      helper.make_tensor_value_info("u", F, ["A", "B", "C"])],
                     [helper.make_tensor_value_info("y", F, [3, 4, 5])], opset=13)
    x = randn(rng, 3, 4, 5)
    dim = x.shape[axis]
    shapes = [[3, 4, 5], [2, 3, 4], [1, 1, 1]]
    for shape in shapes:
        shape[axis] = 2 * dim  # every place on the axis written twice or more
    npu = check(model, [{"x": x, "i": rng.integers(-dim, dim, size=shape),
                         "u": randn(rng, *shape)} for shape in shapes])
    bad = np.zeros((1, 1, 1), np.int64) + dim
    with pytest.raises(InputValueError, match=rf"ScatterElements: index {dim} is outside"):
        npu.run(None, {"x": x, "i": bad, "u": randn(rng, 1, 1, 1)})


@pytest.mark.parametrize("equation,shapes", [
    ("bhqd,bhkd->bhqk", [("B", 3, "Q", 4), ("B", 3, 6, 4)]),  # attention scores
    ("bhqk,bhkd->bhqd", [("B", 3, "Q", 6), ("B", 3, 6, 4)]),  # attention-weighted values
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output: "ik"
    ("ibnd,jbnd->bnij", [("Q", 2, 3, 4), (6, 2, 3, 4)]),  # Transformer-XL's scores
    ("bqd,bd->bq", [(2, 5, 4), (2, 4)]),  # no right label
    ("d,kd->k", [(4,), (6, 4)]),  # no left label, no batch
])
def test_einsum_contractions_map_to_one_matmul(equation, shapes):
    """Two-operand Einsum with one contracted label: transposes around one MatMul, dynamic
    batch and sequence lengths included."""
    rng = np.random.default_rng(17)
    model = model_of([helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)],
                     [helper.make_tensor_value_info(n, F, list(s)) for n, s in zip("ab", shapes, strict=True)],
                     [helper.make_tensor_value_info("y", F, None)], opset=12)
    sizes = {"B": 2, "Q": 5}
    check(model, [{n: randn(rng, *[sizes.get(d, d) * k if isinstance(d, str) else d for d in s])
                   for n, s in zip("ab", shapes, strict=True)} for k in (1, 2)], atol=1e-5)


@pytest.mark.parametrize("equation,why", [("ij,jk,kl->il", "3 operand(s)"),
                                          ("ii->i", "1 operand(s)"),
                                          ("bcd,bcd->b", "more than transposes and one MatMul"),
                                          ("...ij,...jk->...ik", "an ellipsis")])
def test_einsum_forms_needing_more_stay_on_cpu_saying_why(equation, why):
    terms = equation.split("->")[0].split(",")
    shapes = {"ij": [3, 4], "jk": [4, 5], "kl": [5, 2], "ii": [3, 3], "bcd": [2, 3, 4],
              "...ij": [2, 3, 4], "...jk": [2, 4, 5]}
    names = [f"x{i}" for i in range(len(terms))]
    model = model_of([helper.make_node("Einsum", names, ["y"], equation=equation)],
                     [helper.make_tensor_value_info(n, F, shapes[t]) for n, t in zip(names, terms, strict=True)],
                     [helper.make_tensor_value_info("y", F, None)], opset=12)
    rng = np.random.default_rng(18)
    npu = check(model, [{n: randn(rng, *shapes[t]) for n, t in zip(names, terms, strict=True)}], on_npu=False,
                ms=False)
    [node] = npu.partition()
    assert node.device == "CPU" and why in node.reason, node.reason


def test_lrn_and_lp_normalization():
    """LRN across channels (AlexNet / GoogLeNet exports) and LpNormalization with p 1 and 2
    along any axis; a zero norm gives 0, an infinite one 0 or NaN, as onnxruntime's do (no
    inf into LRN: onnxruntime's running window sum carries its inf - inf = NaN on to later
    channels)."""
    rng = np.random.default_rng(15)
    nodes = [helper.make_node("LRN", ["x"], ["lrn"], size=5, alpha=1e-3, beta=0.75, bias=2.0),
             helper.make_node("LRN", ["x"], ["lrn3"], size=3),
             helper.make_node("LpNormalization", ["z"], ["l2"], axis=1, p=2),
             helper.make_node("LpNormalization", ["z"], ["l1"], axis=-1, p=1)]
    model = model_of(nodes, [helper.make_tensor_value_info(n, F, ["N", 7, 3, 4]) for n in "xz"],
                     [helper.make_tensor_value_info(n.output[0], F, None) for n in nodes])
    x, z = randn(rng, 1, 7, 3, 4, scale=5.0), randn(rng, 1, 7, 3, 4)
    x[0, :, 0, 0] = z[0, :, 0, 0] = z[0, 2, 1, :] = 0.0
    z[0, 3, 2, 1] = np.inf
    check(model, [{"x": randn(rng, 2, 7, 3, 4, scale=5.0), "z": randn(rng, 2, 7, 3, 4)},
                  {"x": x, "z": z}])


@pytest.mark.parametrize("dim,parts", [(7, 3), (10, 4)])
def test_split_into_num_outputs_of_an_uneven_dimension(dim, parts):
    """Opset 18: chunks of ceil(dim / parts), the last smaller (one that would be empty,
    4 in 3, stays on the CPU: onnxruntime 1.23 refuses it, 1.32 makes it)."""
    names = [f"part{i}" for i in range(parts)]
    model = model_of([helper.make_node("Split", ["x"], names, axis=1, num_outputs=parts)],
                     [helper.make_tensor_value_info("x", F, ["N", dim])],
                     [helper.make_tensor_value_info(n, F, None) for n in names], opset=18)
    check(model, [{"x": randn(np.random.default_rng(17), n, dim)} for n in (1, 3)])


def test_trilu_and_a_causal_mask_per_sequence_length():
    """Trilu upper/lower, k absent, positive or negative, over batched float / int64 / bool
    data; and a decoder's causal mask built from the input's shape (ConstantOfShape, then
    Trilu), folded per sequence length."""
    rng = np.random.default_rng(16)
    k = {"kp": np.array(1, np.int64), "kn": np.array(-2, np.int64)}
    nodes = [helper.make_node("Trilu", ["x"], ["upper"]),
             helper.make_node("Trilu", ["x", "kp"], ["lower"], upper=0),
             helper.make_node("Trilu", ["i", "kn"], ["ints"]),
             helper.make_node("Trilu", ["b", "kp"], ["bools"], upper=0),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Slice", ["shape", "one", "three"], ["square"]),
             helper.make_node("ConstantOfShape", ["square"], ["ones"],
                              value=numpy_helper.from_array(np.array([1.0], np.float32))),
             helper.make_node("Trilu", ["ones"], ["causal"], upper=0),
             helper.make_node("Mul", ["x", "causal"], ["masked"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, ["N", "L", "L"]),
                             helper.make_tensor_value_info("i", I64, [2, 3, 5]),
                             helper.make_tensor_value_info("b", TensorProto.BOOL, [4, 6])],
                     [helper.make_tensor_value_info(n, t, None) for n, t in
                      (("upper", F), ("lower", F), ("ints", I64), ("bools", TensorProto.BOOL),
                       ("masked", F))],
                     {**k, "one": np.array([1], np.int64), "three": np.array([3], np.int64)})
    check(model, [{"x": randn(rng, n, length, length), "i": rng.integers(-9, 9, (2, 3, 5)),
                   "b": rng.random((4, 6)) < 0.5} for n, length in ((1, 4), (2, 7))])


def test_isnan_isinf_and_hardsigmoid_of_any_alpha_beta():
    x = np.array([[np.nan, np.inf, -np.inf, 0.0, -3.0, 2.5, 7.0, -0.2]], np.float32)
    nodes = [helper.make_node("IsNaN", ["x"], ["nan"]),
             helper.make_node("IsInf", ["x"], ["inf"]),
             helper.make_node("IsInf", ["x"], ["pos"], detect_negative=0),
             helper.make_node("IsInf", ["x"], ["neg"], detect_positive=0),
             helper.make_node("HardSigmoid", ["x"], ["hs"], alpha=0.3, beta=0.4),
             helper.make_node("HardSigmoid", ["x"], ["hs6"], alpha=1 / 6, beta=0.5)]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, [1, 8])],
                     [helper.make_tensor_value_info(n, TensorProto.BOOL, None)
                      for n in ("nan", "inf", "pos", "neg")]
                     + [helper.make_tensor_value_info(n, F, None) for n in ("hs", "hs6")])
    check(model, [{"x": x}])


@pytest.mark.parametrize("constant", [True, False])
def test_gemm_of_any_alpha_beta_and_c_runs_whole_on_the_npu(constant):
    """C of every broadcastable shape, scaled products, transposes: B and C constant (their
    factors folded at import) or fed at run time (scaled on the NPU)."""
    rng = np.random.default_rng(5)
    cases = [(dict(alpha=0.5, beta=2.0, transA=1), [6, 3], [6, 4], [3, 1]),
             (dict(alpha=-1.3, transB=1), [3, 6], [4, 6], [1, 4]),
             (dict(beta=0.7), [3, 6], [6, 4], [3, 4]),
             (dict(alpha=3.0), [3, 6], [6, 4], [4]),
             (dict(beta=0.0), [3, 6], [6, 4], [1])]
    for attrs, a_shape, b_shape, c_shape in cases:
        b, c = randn(rng, *b_shape), randn(rng, *c_shape)
        inputs = [helper.make_tensor_value_info("a", F, a_shape)]
        if not constant:
            inputs += [helper.make_tensor_value_info("b", F, b_shape),
                       helper.make_tensor_value_info("c", F, c_shape)]
        model = model_of([helper.make_node("Gemm", ["a", "b", "c"], ["y"], **attrs)], inputs,
                         [helper.make_tensor_value_info("y", F, None)],
                         {"b": b, "c": c} if constant else {})
        feeds = {"a": randn(rng, *a_shape)} | ({} if constant else {"b": b, "c": c})
        check(model, [feeds])


def test_round_sign_selu_thresholded_relu_mean_and_sum():
    """Ties round to even (natively as in numpy); -inf and NaN below the threshold give 0."""
    x = np.array([[0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -np.inf, np.nan, 3.7, -1.2, 0.0, 2.0]],
                 np.float32)
    rng = np.random.default_rng(3)
    b, c = randn(rng, 1, 12), randn(rng, 3, 1)
    nodes = [helper.make_node("Round", ["x"], ["round"]),
             helper.make_node("Sign", ["x"], ["sign"]),
             helper.make_node("Selu", ["x"], ["selu"]),
             helper.make_node("Selu", ["x"], ["selu2"], alpha=1.5, gamma=0.5),
             helper.make_node("ThresholdedRelu", ["x"], ["thr"], alpha=0.7),
             helper.make_node("Mean", ["x", "b", "c"], ["mean"]),
             helper.make_node("Sum", ["x", "b", "c"], ["sum"]),
             helper.make_node("Sum", ["x"], ["sum1"])]
    outs = ["round", "sign", "selu", "selu2", "thr", "mean", "sum", "sum1"]
    model = model_of(nodes, [helper.make_tensor_value_info(n, F, [r, 12]) for n, r in
                             (("x", 1), ("b", 1))] + [helper.make_tensor_value_info("c", F, [3, 1])],
                     [helper.make_tensor_value_info(n, F, None) for n in outs])
    check(model, [{"x": x, "b": b, "c": c}])


def test_mish_runs_on_the_npu_as_softplus_tanh_and_a_product():
    """ONNX's Mish (opset 18) has no Lite activation: it imports as three Lite nodes, each
    native, and matches onnxruntime on special values and a spread."""
    x = np.array([[0.5, -1.5, 25.0, -30.0, -90.0, 100.0, np.inf, -np.inf, np.nan, 0.0, -0.0,
                   1e-7]], np.float32)
    model = model_of([helper.make_node("Mish", ["x"], ["y"])],
                     [helper.make_tensor_value_info("x", F, ["n", 12])],
                     [helper.make_tensor_value_info("y", F, None)], opset=18)
    check(model, [{"x": x}, {"x": randn(np.random.default_rng(6), 3, 12, scale=4.0)}])


def test_prelu_of_any_slope_and_celu():
    """A run-time slope and one that varies along the last axis (not a channel's) decompose;
    non-finite values and signed zeros go through as ONNX defines them (onnx's reference;
    onnxruntime 1.23 gives NaN for PRelu of an infinity, 1.32 agrees with the reference)."""
    x = np.array([[0.5, -1.5, 2.5, -0.5, -np.inf, np.inf, np.nan, 0.0, -0.0, 3.7, -1.2, -2.0]],
                 np.float32)
    rng = np.random.default_rng(5)
    infinite = np.full((1, 12), np.inf, np.float32)  # inf * slope where x >= 0 is not x
    nodes = [helper.make_node("PRelu", ["x", "s"], ["run_time"]),
             helper.make_node("PRelu", ["x", "w"], ["along_last"]),
             helper.make_node("Celu", ["x"], ["celu"]),
             helper.make_node("Celu", ["x"], ["celu3"], alpha=0.3)]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, ["n", 12]),
                             helper.make_tensor_value_info("s", F, [1, 12])],
                     [helper.make_tensor_value_info(n.output[0], F, None) for n in nodes],
                     {"w": randn(rng, 12)})
    check(model, [{"x": np.nan_to_num(x, posinf=0, neginf=0), "s": randn(rng, 1, 12)},
                  {"x": randn(rng, 3, 12, scale=3.0), "s": randn(rng, 1, 12)}])
    # (no zeros against an infinite slope: the reference gives 0 * inf = NaN there, where
    # ONNX's definition and onnxruntime 1.32 give x = 0, as the NPU does)
    check_reference(model, [{"x": x, "s": randn(rng, 1, 12)},
                            {"x": np.where(x == 0, np.float32(1), x), "s": infinite}])


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("keep", [0, 1])
def test_reductions_lite_has_no_mode_for(op, keep):
    """Composed of Abs / Log / Exp and the reductions Lite has. LogSumExp shifts by the
    maximum (no overflow at 30 * N(0, 1)); along the last axis, a row of -inf gives -inf,
    one holding +inf gives +inf, one holding NaN NaN, as onnxruntime's kernel does."""
    rng = np.random.default_rng(8)
    x = randn(rng, 2, 3, 5, scale=30.0)
    if op == "ReduceLogSum":
        x = np.abs(x)
    odd = x.copy()
    odd[0, 0, :], odd[0, 1, 0], odd[1, 2, 1], odd[1, 1, :] = -np.inf, np.inf, np.nan, 0.0
    for axes, cases in (([2], [x, odd]), ([0, 2], [x]), (None, [x])):
        node = helper.make_node(op, ["x"] + (["axes"] if axes else []), ["y"], keepdims=keep)
        model = model_of([node], [helper.make_tensor_value_info("x", F, ["n", 3, 5])],
                         [helper.make_tensor_value_info("y", F, None)],
                         {"axes": np.array(axes, np.int64)} if axes else {}, opset=18)
        check(model, [{"x": case} for case in cases])


def test_reductions_over_no_axes_with_noop_keep_their_elementwise_part():
    """noop_with_empty_axes=1 and no axes: nothing is reduced, but onnxruntime still squares
    (ReduceSumSquare), takes |x| (ReduceL1 / L2) or log x (ReduceLogSum); the others copy
    their input (inside the graph too: an alias would leave the node nothing to place).
    onnx's reference is the oracle: onnxruntime 1.23 cannot run these."""
    ops = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
           "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]
    nodes = [helper.make_node(op, ["x"], [op], noop_with_empty_axes=1) for op in ops]
    nodes += [helper.make_node("ReduceMean", ["x"], ["inside"], noop_with_empty_axes=1),
              helper.make_node("Neg", ["inside"], ["negated"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, ["n", 3])],
                     [helper.make_tensor_value_info(n, F, None) for n in [*ops, "negated"]],
                     opset=18)
    x = np.array([[-2.0, 3.0, 0.0], [0.5, -0.25, 7.0]], np.float32)
    check_reference(model, [{"x": x}, {"x": randn(np.random.default_rng(18), 4, 3)}])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_mod_floor_and_c_fmod(dtype):
    a = np.array([7, -7, 7, -7, 0, 5, -3, 11], dtype)
    b = np.array([3, 3, -3, -3, 2, -5, 4, 1], dtype)
    if dtype == np.float32:
        a, b = a + np.float32(0.25), b * np.float32(1.5)
    nodes = [helper.make_node("Mod", ["a", "b"], ["fmod"], fmod=1)]
    if dtype != np.float32:  # ONNX: fmod=0 is for integers only
        nodes.append(helper.make_node("Mod", ["a", "b"], ["floor"]))
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = model_of(nodes, [helper.make_tensor_value_info(n, elem, [8]) for n in "ab"],
                     [helper.make_tensor_value_info(n.output[0], elem, None) for n in nodes])
    check(model, [{"a": a, "b": b}])


@pytest.mark.parametrize("constant", [True, False])
def test_matmul_with_a_vector_operand_runs_on_the_npu(constant):
    """A 1-D A is a row, a 1-D B a column, and the product drops that dim again; symbolic
    dims compile per shape at run time (a constant column viewing onnxruntime's initializer
    read garbage there)."""
    rng = np.random.default_rng(11)
    for a_shape, b_shape in ((["N", "M", 6], [6]), ([6], [2, 6, "P"]), ([6], [6])):
        b = randn(rng, *[4 if d == "P" else d for d in b_shape])
        inputs = [helper.make_tensor_value_info("a", F, a_shape)]
        if not constant:
            inputs.append(helper.make_tensor_value_info("b", F, b_shape))
        elif "P" in b_shape:
            continue  # a constant has no symbolic dim
        model = model_of([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs,
                         [helper.make_tensor_value_info("y", F, None)], {"b": b} if constant else {})
        cases = [{"a": randn(rng, *[{"N": n, "M": m}.get(d, d) for d in a_shape])}
                 for n, m in ((1, 3), (2, 5))]
        check(model, [c | ({} if constant else {"b": b}) for c in cases])


@pytest.mark.parametrize("pads", [[0, -1, 2, 0, 1, -2], [3, 0, 0, -4, 0, 0], [-1, -1, -1, 0, 0, 0],
                                  [-2, 0, 1, 0, 0, -1]], ids=str)
def test_pad_with_negative_pads_crops_on_the_npu(pads):
    """A negative pad crops what the padding made, so a crop may eat the other end's pad
    (x of 3 rows, pads 3 and -4: two rows of the constant). The oracle is numpy: onnxruntime
    1.23 (py310) reads out of bounds here."""
    x = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    model = model_of([helper.make_node("Pad", ["x", "pads", "v"], ["y"])],
                     [helper.make_tensor_value_info("x", F, ["A", 4, 5])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"pads": np.array(pads, np.int64), "v": np.array(7.0, np.float32)})
    sess = provider.InferenceSession(model.SerializeToString(), providers=NPU)
    assert {p.device for p in sess.partition()} == {"NPU"}
    begin, end = np.array(pads).reshape(2, 3)
    padded = np.pad(x, list(zip(np.maximum(begin, 0), np.maximum(end, 0), strict=True)),
                    constant_values=7.0)
    want = padded[tuple(slice(max(-b, 0), padded.shape[d] - max(-e, 0))
                        for d, (b, e) in enumerate(zip(begin, end, strict=True)))]
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


@pytest.mark.parametrize("pads", [[0, 2, 1, 1, 0, 3], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
                         ids=str)
def test_pad_in_edge_mode_repeats_the_border_on_the_npu(pads):
    """Lite's PadFusion has no edge mode: per axis, a Concat of the border slices."""
    model = model_of([helper.make_node("Pad", ["x", "pads"], ["y"], mode="edge")],
                     [helper.make_tensor_value_info("x", F, [2, "H", "W"])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"pads": np.array(pads, np.int64)})
    sess = provider.InferenceSession(model.SerializeToString(), providers=NPU)
    assert {p.device for p in sess.partition()} == {"NPU"}
    for shape in ((2, 3, 4), (2, 1, 6)):
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        want = np.pad(x, list(zip(pads[:3], pads[3:], strict=True)), mode="edge")
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_argmax_argmin_select_last_index_take_the_last_tie(keepdims):
    x = np.array([[[1, 3, 3, 2], [5, 5, 0, 5], [-1, -1, -1, -1]],
                  [[np.inf, 0, np.inf, 1], [2, -np.inf, 2, -np.inf], [0, 1, 2, 3]]], np.float32)
    nodes = [helper.make_node(op, ["x"], [f"{op}{axis}"], axis=axis, keepdims=keepdims,
                              select_last_index=1)
             for op in ("ArgMax", "ArgMin") for axis in (-1, 1, 0)]
    outputs = [helper.make_tensor_value_info(n.output[0], I64, None) for n in nodes]
    check(model_of(nodes, [helper.make_tensor_value_info("x", F, [2, 3, 4])], outputs),
          [{"x": x}])
    # counted back from the axis' end: its size must be known
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, ["N", 3, 4])], outputs)
    npu = check(model, [{"x": x}, {"x": x[:1]}], on_npu=False, ms=False)
    cpu = [p.reason for p in npu.partition() if p.device == "CPU"]
    assert len(cpu) == 2 and all("along an axis of unknown size" in r for r in cpu), cpu


def test_resize_by_whole_scales_of_a_run_time_size():
    rng = np.random.default_rng(9)
    model = model_of([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")],
                     [helper.make_tensor_value_info("x", F, ["N", 2, "H", "W"])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"scales": np.array([1, 1, 2, 3], np.float32)})
    check(model, [{"x": randn(rng, 1, 2, 3, 4)}, {"x": randn(rng, 2, 2, 5, 2)}])


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_resize_pytorch_half_pixel_is_half_pixel_off_size_one(mode):
    """PyTorch exports align_corners=False as pytorch_half_pixel; it samples 0 on an output
    axis of size 1 (half_pixel samples the middle): such a resize stays on the CPU, the
    others run on the NPU, with run-time whole scales (an input axis of 1 included) and with
    static sizes."""
    rng = np.random.default_rng(11)
    kw = dict(mode=mode, coordinate_transformation_mode="pytorch_half_pixel")
    model = model_of([helper.make_node("Resize", ["x", "", "scales"], ["y"], **kw)],
                     [helper.make_tensor_value_info("x", F, ["N", 2, "H", "W"])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"scales": np.array([1, 1, 2, 3], np.float32)})
    check(model, [{"x": randn(rng, 1, 2, 3, 4)}, {"x": randn(rng, 2, 2, 1, 5)}])
    for sizes, on_npu in (([1, 2, 9, 4], True), ([1, 2, 1, 4], False)):
        model = model_of([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **kw)],
                         [helper.make_tensor_value_info("x", F, [1, 2, 5, 7])],
                         [helper.make_tensor_value_info("y", F, None)],
                         {"sizes": np.array(sizes, np.int64)})
        npu = check(model, [{"x": randn(rng, 1, 2, 5, 7)}], on_npu=on_npu, ms=on_npu)
        if not on_npu:
            [placed] = npu.partition()
            assert placed.device != "NPU" and "size of 1" in placed.reason, placed


def test_int64_and_bool_elementwise_on_index_tensors():
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"]),
             helper.make_node("Add", ["m", "a"], ["s"]),
             helper.make_node("Div", ["s", "b"], ["d"]),
             helper.make_node("Equal", ["d", "a"], ["e"]),
             helper.make_node("Not", ["e"], ["ne"]),
             helper.make_node("And", ["ne", "e"], ["none"]),
             helper.make_node("Where", ["ne", "d", "a"], ["y"])]
    i64 = [helper.make_tensor_value_info(n, I64, ["N"]) for n in ("a", "b")]
    model = model_of(nodes, i64, [helper.make_tensor_value_info("y", I64, None),
                                  helper.make_tensor_value_info("none", TensorProto.BOOL, None)])
    rng = np.random.default_rng(10)
    check(model, [{"a": rng.integers(-50, 50, 6), "b": rng.integers(1, 9, 6)} for _ in range(2)])


def test_cast_of_non_finite_floats_to_integers_is_quiet_and_matches_onnxruntime(capfd):
    x = np.array([-np.inf, np.inf, np.nan, 3e9, -7.9, 300.5], np.float32)
    outs = {"i64": I64, "i32": TensorProto.INT32}
    model = model_of([helper.make_node("Cast", ["x"], [n], to=t) for n, t in outs.items()],
                     [helper.make_tensor_value_info("x", F, [6])],
                     [helper.make_tensor_value_info(n, t, None) for n, t in outs.items()])
    capfd.readouterr()
    check(model, [{"x": x}])
    assert capfd.readouterr().err == ""


# ---- the ONNX backend node cases of these ops, on the NPU --------------------------------------

# case -> input positions made initializers (the NPU takes weights as constants)
BACKEND_CASES = {
    "test_lstm_defaults": (1, 2), "test_lstm_with_initial_bias": (1, 2, 3),
    "test_lstm_bidirectional": (1, 2), "test_gathernd_example_float32": (),
    "test_gathernd_example_int32": (), "test_hardsigmoid": (), "test_hardsigmoid_default": (),
    "test_hardsigmoid_example": (), "test_isinf": (), "test_isinf_negative": (),
    "test_isinf_positive": (), "test_isnan": (), "test_size": (), "test_size_example": (),
    "test_range_float_type_positive_delta_expanded": (),
    "test_range_int32_type_negative_delta_expanded": (),
}


def _backend_case(name: str):
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return next(c for c in collect_testcases() if c.name == name)


@pytest.mark.parametrize("name", BACKEND_CASES)
def test_backend_node_case_runs_on_the_npu(name):
    case = _backend_case(name)
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    model.ir_version = min(model.ir_version, 8)  # onnxruntime 1.23 reads IR <= 11; these
    for o in model.opset_import:                  # ops mean the same at opset 17
        if o.domain in ("", "ai.onnx"):
            o.version = min(o.version, 17)
    inputs, expected = case.data_sets[0]
    node = model.graph.node[0]
    feeds, keep = {}, []
    for vi, value in zip(list(model.graph.input), inputs, strict=True):
        value = np.asarray(value)
        if len(model.graph.node) == 1 and list(node.input).index(vi.name) in BACKEND_CASES[name]:
            model.graph.initializer.append(numpy_helper.from_array(value, vi.name))
        else:
            keep.append(vi)
            feeds[vi.name] = value
    del model.graph.input[:]
    model.graph.input.extend(keep)
    npu = provider.InferenceSession(model.SerializeToString(), providers=NPU)
    assert_close(npu.run(None, feeds), expected, rtol=case.rtol, atol=max(case.atol, 1e-6))
    on_npu = [p for p in npu.partition() if p.device == "NPU"]
    assert on_npu, [(p.name, p.reason) for p in npu.partition()]


# ---- forms exporters write: pre-13 Softmax, Shape start/end, run-time Slice ends, Identity ----


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [1, 2])
def test_pre13_softmax_over_the_trailing_dims(op, axis):
    rng = np.random.default_rng(11)
    model = model_of([helper.make_node(op, ["x"], ["y"], axis=axis)],
                     [helper.make_tensor_value_info("x", F, ["N", 3, 4, "W"])],
                     [helper.make_tensor_value_info("y", F, None)], opset=11)
    check(model, [{"x": randn(rng, n, 3, 4, w)} for n, w in ((1, 5), (2, 3))])


def test_shape_start_end_slice_with_run_time_ends_and_identity_to_an_output():
    nodes = [helper.make_node("Shape", ["x"], ["head"], end=-2),
             helper.make_node("Shape", ["x"], ["tail"], start=1, end=10),
             helper.make_node("Shape", ["x"], ["last"], start=-1),
             helper.make_node("ReduceProd", ["tail"], ["inner"], keepdims=1),
             helper.make_node("Concat", ["head", "inner"], ["dims"], axis=0),
             helper.make_node("Reshape", ["x", "dims"], ["r"]),
             helper.make_node("Div", ["last", "two"], ["half"]),
             helper.make_node("Slice", ["r", "zero", "half", "one"], ["y"]),
             helper.make_node("Identity", ["y"], ["z"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", F, ["N", 2, "W"])],
                     [helper.make_tensor_value_info(n, F, None) for n in ("y", "z")],
                     {"zero": np.array([0], np.int64), "one": np.array([1], np.int64),
                      "two": np.array([2], np.int64)}, opset=18)
    rng = np.random.default_rng(12)
    check(model, [{"x": randn(rng, n, 2, w)} for n, w in ((1, 4), (3, 6))])


@pytest.mark.parametrize("operand", ["axes", "steps"])
def test_slice_with_constant_bounds_and_run_time_axes_or_steps_reads_them(operand):
    """Constant starts/ends beside axes or steps computed at run time: the importer took
    them for absent (axes 0.., steps 1) and computed another slice; found by fuzzing a .ms
    file whose steps were rewired to an activation. Such a Slice now stays on the CPU and
    reads its operands."""
    values = {"axes": np.array([1], np.int64), "steps": np.array([2], np.int64)}
    inputs = ["x", "s", "e", "axes", "steps"]
    model = model_of([helper.make_node("Slice", inputs, ["y"])],
                     [helper.make_tensor_value_info("x", F, [4, 6]),
                      helper.make_tensor_value_info(operand, I64, [1])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"s": np.array([1], np.int64), "e": np.array([5], np.int64),
                      **{k: v for k, v in values.items() if k != operand}}, opset=13)
    x = randn(np.random.default_rng(19), 4, 6)
    npu = check(model, [{"x": x, operand: values[operand]}], on_npu=False, ms=False)
    [node] = npu.partition()
    assert node.device == "CPU" and f"{operand} ('{operand}') is not a constant" in node.reason


@pytest.mark.parametrize("op,attrs,shape", [
    ("SpaceToDepth", dict(blocksize=2), (2, 3, 4, 6)),
    ("DepthToSpace", dict(blocksize=2, mode="DCR"), (1, 8, 3, 2)),
    ("DepthToSpace", dict(blocksize=2, mode="CRD"), (2, 8, 2, 3)),
])
def test_space_depth_rearrangements(op, attrs, shape):
    model = model_of([helper.make_node(op, ["x"], ["y"], **attrs)],
                     [helper.make_tensor_value_info("x", F, shape)],
                     [helper.make_tensor_value_info("y", F, None)])
    check(model, [{"x": randn(np.random.default_rng(13), *shape)}])


def _slice_with_steps(steps: np.ndarray) -> onnx.ModelProto:
    """x[:, 1:3] with these steps, as given (onnx's shape inference refuses some)."""
    operands = {"s": np.array([1], np.int64), "e": np.array([3], np.int64),
                "a": np.array([1], np.int64), "st": steps}
    return helper.make_model(helper.make_graph(
        [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="cut")], "g",
        [helper.make_tensor_value_info("x", F, [4, 6])],
        [helper.make_tensor_value_info("y", F, [4, 2])],
        [numpy_helper.from_array(v, k) for k, v in operands.items()]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _stays_with_onnxruntime(model: onnx.ModelProto, feeds: dict, reason: str,
                            error: str) -> None:
    """The model's one node stays on the CPU with `reason` in its placement, and a run
    raises onnxruntime's own error (matching `error`), of the class plain onnxruntime
    raises on the same feeds."""
    sess = provider.InferenceSession(model.SerializeToString(), providers=[
        "NPUExecutionProvider", "CPUExecutionProvider"])
    [node] = sess.partition()
    assert node.device == "CPU" and reason in node.reason, node.reason
    with pytest.raises(Exception, match=error) as npu_error:
        sess.run(None, feeds)
    with pytest.raises(type(npu_error.value)):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, feeds)


def _all_on_npu(model: onnx.ModelProto) -> provider.InferenceSession:
    """A session of `model` whose every node the NPU took."""
    sess = provider.InferenceSession(model.SerializeToString(), providers=[
        "NPUExecutionProvider", "CPUExecutionProvider"])
    assert {n.device for n in sess.partition()} == {"NPU"}, sess.partition_summary()
    return sess


@pytest.mark.parametrize("steps", [np.array(1, np.int64), np.array([[1]], np.int64)])
def test_slice_with_malformed_operands_stays_with_onnxruntime(steps):
    """A Slice whose constant operands are not 1-D (a fuzzed .ms file's StridedSlice
    exported with a 0-d steps) ran on the NPU where onnxruntime refuses it: it now stays on
    the CPU, and the run raises onnxruntime's own error."""
    _stays_with_onnxruntime(_slice_with_steps(steps), {"x": randn(np.random.default_rng(3), 4, 6)},
                            "(ONNX takes 1-D operands)", "Slice")


def test_slice_with_operands_of_different_lengths_is_carried_as_custom():
    """onnxruntime refuses to load such a Slice; the converter carries it as Custom with
    the reason instead of a StridedSlice that would slice something else."""
    from converters.onnx_import import import_onnx  # noqa: PLC0415

    lite, report = import_onnx(_slice_with_steps(np.array([1, 1], np.int64)))
    assert [n.op for n in lite.nodes] == ["Custom"]
    [custom] = report.custom
    assert "operands of different lengths: starts 1, ends 1, axes 1, steps 2" in custom.reason


def test_trilu_with_a_k_of_several_values_stays_with_onnxruntime():
    """A Trilu whose k holds 8 values (a fuzzed .ms file's PReLU turned Triu, its slope as
    k) ran on the NPU with k's first value where onnxruntime refuses it: it now stays on the
    CPU, and the run raises onnxruntime's own error."""
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Trilu", ["x", "k"], ["y"], name="tri")], "g",
        [helper.make_tensor_value_info("x", F, [4, 6])],
        [helper.make_tensor_value_info("y", F, [4, 6])],
        [numpy_helper.from_array(np.arange(8, dtype=np.int64).reshape(8, 1), "k")]),
        opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    _stays_with_onnxruntime(model, {"x": randn(np.random.default_rng(4), 4, 6)},
                            "k of shape [8, 1]; one value expected",
                            "k should be a 1-D or 0-D tensor")


def _one_value_cases():
    """(op, its inputs' facts, the position of the one-value parameter, its name) for every
    rule that reads a single value from a constant operand."""
    from provider.npu.ops.common import TensorInfo  # noqa: PLC0415

    f32, i64 = np.dtype(np.float32), np.dtype(np.int64)
    x = TensorInfo((4, 6), f32)

    def k(v):
        return TensorInfo(np.shape(v), np.asarray(v).dtype, np.asarray(v))

    return [
        ("Triu", [x, k(np.array([1, 2]))], 1, "k"),
        ("Clip", [x, k(np.array([0.0, 1.0], np.float32))], 1, "min"),
        ("Clip", [x, k(np.array(0.0, np.float32)), k(np.zeros((1, 2), np.float32))], 2, "max"),
        ("Gather", [x, TensorInfo((2,), i64), k(np.array([0, 1]))], 2, "axis"),
        ("GatherD", [x, k(np.array([[1]] * 2)), TensorInfo((4, 6), i64)], 1, "dim"),
        ("Cast", [x, k(np.array([43, 43]))], 1, "target TypeId"),
        ("Range", [k(np.array(0)), k(np.array([5, 6])), k(np.array(1))], 1, "limit"),
    ]


@pytest.mark.parametrize("op,ins,position,name", _one_value_cases(),
                         ids=[f"{c[0]}-{c[3]}" for c in _one_value_cases()])
def test_a_parameter_of_several_values_is_refused(op, ins, position, name):
    """A constant parameter that must be one value (an axis, a bound, a diagonal, a target
    type) but holds several is refused with its shape, as onnxruntime refuses it, instead of
    running with its first element; one value of any rank is accepted."""
    from converters.lite.ir import LiteNode  # noqa: PLC0415
    from provider.errors import InvalidModelError  # noqa: PLC0415
    from provider.npu.ops import lower  # noqa: PLC0415
    from provider.npu.ops.common import TensorInfo  # noqa: PLC0415

    node = LiteNode("n", op, {}, list(range(len(ins))), [len(ins)])
    shape = list(ins[position].value.shape)
    with pytest.raises(InvalidModelError, match=re.escape(f"{name} of shape {shape}; one value")):
        lower(node, ins, [None])
    one = ins[position].value.reshape(-1)[:1].reshape((1,) * ins[position].value.ndim)
    ins[position] = TensorInfo(one.shape, one.dtype, one)
    lower(node, ins, [None])


@pytest.mark.parametrize("bias_shape, on_npu", [((3, 8), False), ((1,), True), ((4, 1), True)])
def test_layer_norm_parameters_must_broadcast_to_the_normalised_dims(bias_shape, on_npu):
    """A fuzzed .ms file's LayerNorm took a (128, 64) weight as its bias over 64 normalised
    values: onnxruntime refuses it at run time, the NPU ran the graph. It now stays with
    onnxruntime; a bias that broadcasts ((1,), or (4, 1) over (4, 8)) runs on the NPU, as
    the ONNX spec's Mul/Add compute it (onnxruntime 1.32 agrees; 1.23 refuses those too)."""
    rng = np.random.default_rng(9)
    scale = rng.standard_normal(8).astype(np.float32)
    bias = rng.standard_normal(bias_shape).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=1, name="ln")], "g",
        [helper.make_tensor_value_info("x", F, [2, 4, 8])],
        [helper.make_tensor_value_info("y", F, [2, 4, 8])],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(bias, "b")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = randn(rng, 2, 4, 8)
    if not on_npu:
        _stays_with_onnxruntime(model, {"x": x}, "does not broadcast to the normalised dims [4, 8]",
                                "LayerNormalization")
        return
    sess = _all_on_npu(model)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=(1, 2), keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=(1, 2), keepdims=True)
    want = (x64 - mean) / np.sqrt(var + 1e-5) * scale + bias
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c_shape, on_npu", [((3,), False), ((5, 3), False), ((1, 3, 5), False),
                                             ((2, 5), False), ((1,), True), ((5,), True),
                                             ((3, 1), True), ((1, 5), True), ((3, 5), True)])
def test_gemm_c_must_broadcast_to_the_product(c_shape, on_npu):
    """A fuzzed .ms file's FC multiplied x by itself transposed, keeping its bias of 5
    values: onnxruntime's Gemm refuses a C that does not broadcast to (M, N), the NPU summed
    it numpy's way into a wider output. Such a Gemm now stays with onnxruntime; a C that
    broadcasts runs on the NPU, as onnxruntime computes it. Here (M, N) = (3, 5)."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    c = rng.standard_normal(c_shape).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, beta=0.5, name="gemm")],
        "g", [helper.make_tensor_value_info("x", F, [3, 4])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = randn(rng, 3, 4)
    if not on_npu:
        _stays_with_onnxruntime(model, {"x": x}, "does not broadcast to the product's (M, N)",
                                "Gemm")
        return
    sess = _all_on_npu(model)
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
