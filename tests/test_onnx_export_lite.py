"""Lite IR as MindSpore Lite's own converter writes it (NHWC layers, OHWI weights, fused
activations, MatMulFusion / FullConnection with bias, ScaleFusion, ...) exported to ONNX
and run by onnxruntime, against numpy references of MindSpore Lite's semantics."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_roundtrip import run

from converters.errors import UnsupportedError
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from converters.onnx_export import export_onnx

rng = np.random.default_rng(11)


class Lite:
    """A tiny builder for MindSpore-style Lite graphs in tests."""

    def __init__(self):
        self.m = LiteModel(name="ms_style", fmk_type=3)

    def act(self, name, shape, fmt="NHWC", dtype=np.float32):
        return self.m.add_tensor(LiteTensor.of(name, dtype, shape, format=fmt))

    def const(self, name, value, fmt="NHWC"):
        value = np.asarray(value)
        return self.m.add_tensor(LiteTensor.of(name, value.dtype, value.shape, value, format=fmt))

    def node(self, op, attrs, inputs, out_shape, fmt="NHWC", dtype=np.float32):
        out = self.act(f"{op}_{len(self.m.nodes)}", out_shape, fmt, dtype)
        self.m.add_node(LiteNode(f"n{len(self.m.nodes)}", op, attrs, inputs, [out]))
        return out

    def run(self, inputs, outputs, feeds):
        self.m.inputs, self.m.outputs = inputs, outputs
        self.m.finalize_subgraph()
        return run(export_onnx(self.m), feeds)


def conv_nhwc(x, w_ohwi, bias, stride, pads, group):
    """MindSpore Lite's NHWC convolution: pads = [top, bottom, left, right]."""
    t, b, left, r = pads
    x = np.pad(x, ((0, 0), (t, b), (left, r), (0, 0)))
    n, h, wd, c = x.shape
    k, kh, kw, cg = w_ohwi.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    y = np.zeros((n, oh, ow, k), np.float64)
    per = k // group
    for g in range(group):
        xs = x[..., g * cg:(g + 1) * cg]
        ws = w_ohwi[g * per:(g + 1) * per]
        for i in range(oh):
            for j in range(ow):
                patch = xs[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
                y[:, i, j, g * per:(g + 1) * per] = np.einsum("nhwc,khwc->nk", patch, ws)
    return (y + bias).astype(np.float32)


def test_nhwc_conv_depthwise_and_fused_relu6():
    b = Lite()
    x = b.act("x", (1, 6, 6, 4))
    w1 = rng.standard_normal((8, 3, 3, 4)).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    conv = dict(format="NHWC", kernel_size=[3, 3], stride=[1, 1], dilation=[1, 1],
                pad_mode="PAD", pad_list=[1, 1, 1, 1], group=1, in_channel=4, out_channel=8,
                activation_type="RELU6")
    y1 = b.node("Conv2DFusion", conv, [x, b.const("w1", w1), b.const("b1", b1)], (1, 6, 6, 8))
    w2 = rng.standard_normal((8, 3, 3, 1)).astype(np.float32)
    dw = dict(conv, stride=[2, 2], pad_list=[0, 1, 0, 1], group=8, in_channel=8,
              activation_type="NO_ACTIVATION")
    y2 = b.node("Conv2DFusion", dw, [y1, b.const("w2", w2), b.const("b2", np.zeros(8, np.float32))],
                (1, 3, 3, 8))
    xv = rng.standard_normal((1, 6, 6, 4)).astype(np.float32)
    got = b.run([x], [y2], {"x": xv})[0]
    ref1 = np.clip(conv_nhwc(xv, w1, b1, 1, [1, 1, 1, 1], 1), 0, 6)
    ref2 = conv_nhwc(ref1, w2, 0, 2, [0, 1, 0, 1], 8)
    np.testing.assert_allclose(got, ref2, rtol=1e-4, atol=1e-5)


def test_nhwc_max_pool_ceil_and_global_average():
    b = Lite()
    x = b.act("x", (1, 5, 5, 2))
    pool = dict(kernel_size=[2, 2], strides=[2, 2], pad=[0, 0, 0, 0], pad_mode="PAD",
                round_mode="CEIL", format="NHWC", activation_type="NO_ACTIVATION")
    p = b.node("MaxPoolFusion", pool, [x], (1, 3, 3, 2))
    g = b.node("AvgPoolFusion", dict(format="NHWC", **{"global": True}), [p], (1, 1, 1, 2))
    xv = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    got_p, got_g = b.run([x], [p, g], {"x": xv})
    padded = np.pad(xv, ((0, 0), (0, 1), (0, 1), (0, 0)), constant_values=-np.inf)
    ref = padded.reshape(1, 3, 2, 3, 2, 2).max(axis=(2, 4))
    np.testing.assert_allclose(got_p, ref)
    np.testing.assert_allclose(got_g, ref.mean(axis=(1, 2), keepdims=True), rtol=1e-5)


def test_full_connection_use_axis_and_matmul_fusion_with_bias():
    b = Lite()
    x = b.act("x", (2, 3, 2, 2), fmt="NCHW")
    w = rng.standard_normal((5, 12)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    fc = b.node("FullConnection", dict(has_bias=True, use_axis=True, axis=1,
                                       activation_type="RELU"),
                [x, b.const("w", w), b.const("b", bias)], (2, 5), fmt="NCHW")
    a3 = b.act("a3", (2, 4, 5), fmt="NCHW")
    w3 = rng.standard_normal((6, 5)).astype(np.float32)
    b3 = rng.standard_normal(6).astype(np.float32)
    mm = b.node("MatMulFusion", dict(transpose_a=False, transpose_b=True,
                                     activation_type="NO_ACTIVATION"),
                [a3, b.const("w3", w3), b.const("b3", b3)], (2, 4, 6), fmt="NCHW")
    xv = rng.standard_normal((2, 3, 2, 2)).astype(np.float32)
    av = rng.standard_normal((2, 4, 5)).astype(np.float32)
    got_fc, got_mm = b.run([x, a3], [fc, mm], {"x": xv, "a3": av})
    np.testing.assert_allclose(got_fc, np.maximum(xv.reshape(2, 12) @ w.T + bias, 0),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_mm, av @ w3.T + b3, rtol=1e-4, atol=1e-5)


def test_scale_bias_add_and_elementwise_extras():
    b = Lite()
    x = b.act("x", (2, 3, 4), fmt="NCHW")
    s = rng.standard_normal(3).astype(np.float32)
    o = rng.standard_normal(3).astype(np.float32)
    scaled = b.node("ScaleFusion", dict(axis=1, activation_type="NO_ACTIVATION"),
                    [x, b.const("s", s), b.const("o", o)], (2, 3, 4), fmt="NCHW")
    bias = rng.standard_normal(4).astype(np.float32)
    biased = b.node("BiasAdd", dict(format="NHWC"), [scaled, b.const("bias", bias)], (2, 3, 4))
    sq = b.node("SquaredDifference", {}, [biased, x], (2, 3, 4))
    r = b.node("Rsqrt", {}, [b.node("Square", {}, [sq], (2, 3, 4))], (2, 3, 4))
    st = b.node("Stack", dict(axis=-1), [x, r], (2, 3, 4, 2))
    prod = b.node("Eltwise", dict(mode="PROD"), [x, x, x], (2, 3, 4))
    xv = rng.standard_normal((2, 3, 4)).astype(np.float32) + 3
    got_st, got_prod = b.run([x], [st, prod], {"x": xv})
    ref_b = xv * s[:, None] + o[:, None] + bias
    ref_r = 1 / np.sqrt(((ref_b - xv) ** 2) ** 2)
    np.testing.assert_allclose(got_st, np.stack([xv, ref_r], axis=-1), rtol=1e-4)
    np.testing.assert_allclose(got_prod, xv ** 3, rtol=1e-5)


def test_non_onnx_custom_and_unknown_ops_are_named():
    b = Lite()
    x = b.act("x", (2,), fmt="NCHW")
    y = b.node("Custom", {"type": "MyVendorOp", "attr": {}}, [x], (2,))
    with pytest.raises(UnsupportedError, match="MyVendorOp"):
        b.run([x], [y], {})
    b = Lite()
    x = b.act("x", (2,), fmt="NCHW")
    y = b.node("Attention", {}, [x], (2,))
    with pytest.raises(UnsupportedError, match="Attention.*exportable"):
        b.run([x], [y], {})


def test_malformed_ir_is_invalid_model_naming_the_node():
    from converters.errors import InvalidModelError

    b = Lite()
    x = b.act("x", (1, 4, 4, 1))
    y = b.node("Conv2DFusion", dict(format="NHWC", kernel_size=[1, 1]), [x], (1, 4, 4, 1))
    with pytest.raises(InvalidModelError, match="'n0' .Conv2DFusion. is malformed"):
        b.run([x], [y], {})
    b = Lite()
    x = b.act("x", (2,), fmt="NCHW")
    b.m.add_node(LiteNode("dangling", "Neg", {}, [x], [7]))
    with pytest.raises(InvalidModelError, match="'dangling'.*\\[7\\]"):
        b.run([x], [x], {})


def test_not_equal_ones_like_zeros_like():
    b = Lite()
    x = b.act("x", (2, 3), fmt="NCHW")
    k = b.act("k", (3,), fmt="NCHW", dtype=np.int32)
    ref = np.array([0.5, -1.0, 2.0], np.float32)
    ne = b.node("NotEqual", {}, [x, b.const("ref", ref)], (2, 3), fmt="NCHW", dtype=np.bool_)
    ones = b.node("OnesLike", {}, [x], (2, 3), fmt="NCHW")
    zeros = b.node("ZerosLike", {}, [k], (3,), fmt="NCHW", dtype=np.int32)
    xv = np.array([[0.5, 1.0, 2.0], [0.0, -1.0, -2.0]], np.float32)
    got_ne, got_ones, got_zeros = b.run([x, k], [ne, ones, zeros],
                                        {"x": xv, "k": np.array([4, 5, 6], np.int32)})
    np.testing.assert_array_equal(got_ne, xv != ref)
    assert got_ones.dtype == np.float32 and got_zeros.dtype == np.int32
    np.testing.assert_array_equal(got_ones, np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(got_zeros, np.zeros(3, np.int32))


def test_fast_gelu_activation_and_fused():
    """MindSpore's FastGeLU: x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|))."""
    b = Lite()
    x = b.act("x", (3, 5), fmt="NCHW")
    fg = b.node("Activation", {"activation_type": "FAST_GELU"}, [x], (3, 5), fmt="NCHW")
    fused = b.node("AddFusion", {"activation_type": "FAST_GELU"}, [x, x], (3, 5), fmt="NCHW")
    xv = (rng.standard_normal((3, 5)) * 4).astype(np.float32)
    got, got_fused = b.run([x], [fg, fused], {"x": xv})

    def fast_gelu(v):
        v = v.astype(np.float64)
        return v / (1 + np.exp(-1.702 * np.abs(v))) * np.exp(0.851 * (v - np.abs(v)))

    np.testing.assert_allclose(got, fast_gelu(xv), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_fused, fast_gelu(2 * xv), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size_input,out_hw", [
    (np.array([2.0, 2.0], np.float32), (8, 6)),          # (H, W) scales, as MindSpore's converter writes
    (np.array([1, 8, 6, 1], np.int32), (8, 6)),          # NHWC sizes
    (np.array([1.0, 1.5, 1.5, 1.0], np.float32), (6, 5)),  # NHWC scales: round(4*1.5), round(3*1.5)
])
def test_resize_takes_its_size_from_a_second_input(size_input, out_hw):
    b = Lite()
    x = b.act("x", (1, 4, 3, 2))
    attrs = dict(format="NHWC", method="NEAREST", coordinate_transform_mode="ASYMMETRIC",
                 nearest_mode="FLOOR")
    y = b.node("Resize", attrs, [x, b.const("size", size_input)], (1, *out_hw, 2))
    xv = rng.standard_normal((1, 4, 3, 2)).astype(np.float32)
    got = b.run([x], [y], {"x": xv})[0]
    oh, ow = out_hw
    rows = np.floor(np.arange(oh) * 4 / oh).astype(int)
    cols = np.floor(np.arange(ow) * 3 / ow).astype(int)
    np.testing.assert_array_equal(got, xv[:, rows][:, :, cols])


def test_split_sizes_from_an_input():
    b = Lite()
    x = b.act("x", (2, 7), fmt="NCHW")
    outs = [b.act(f"s{i}", (2, n), fmt="NCHW") for i, n in enumerate((3, 4))]
    b.m.add_node(LiteNode("split", "Split", {"output_num": 2, "size_splits": [], "axis": -1},
                          [x, b.const("sizes", np.array([3, 4], np.int32))], outs))
    xv = rng.standard_normal((2, 7)).astype(np.float32)
    got = b.run([x], outs, {"x": xv})
    np.testing.assert_array_equal(got[0], xv[:, :3])
    np.testing.assert_array_equal(got[1], xv[:, 3:])


def test_reduce_coeff_applies_only_with_reduce_to_end():
    b = Lite()
    x = b.act("x", (2, 3, 4), fmt="NCHW")
    axes = b.const("axes", np.array([1], np.int32))
    # MindSpore's converter writes coeff 0 on plain reductions: MindSpore Lite ignores it.
    mean = b.node("ReduceFusion", dict(mode="ReduceMean", keep_dims=False, coeff=0.0), [x, axes],
                  (2, 4), fmt="NCHW")
    to_end = b.node("ReduceFusion", dict(mode="ReduceSum", keep_dims=True, reduce_to_end=True,
                                         coeff=2.5), [x, axes], (2, 1, 1), fmt="NCHW")
    xv = rng.standard_normal((2, 3, 4)).astype(np.float32)
    got_mean, got_to_end = b.run([x], [mean, to_end], {"x": xv})
    np.testing.assert_allclose(got_mean, xv.mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_to_end, 2.5 * xv.sum(axis=(1, 2), keepdims=True), rtol=1e-5)


def _layer_norm(v, axis, eps):
    axes = tuple(range(axis, v.ndim))
    mean = v.mean(axis=axes, keepdims=True)
    return (v - mean) / np.sqrt(((v - mean) ** 2).mean(axis=axes, keepdims=True) + eps)


def test_layer_norm_as_mindspore_lite_computes_it():
    b = Lite()
    x = b.act("x", (2, 3, 4), fmt="NCHW")
    g, beta = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    # MindSpore's converter: elementwise_affine False, gamma/beta present, epsilon 0.
    conv_style = b.node("LayerNormFusion", dict(begin_norm_axis=-1, begin_params_axis=-1,
                                                elementwise_affine=False, epsilon=0.0),
                        [x, b.const("g", g), b.const("b", beta)], (2, 3, 4), fmt="NCHW")
    plain = b.node("LayerNormFusion", dict(begin_norm_axis=1, epsilon=1e-5), [x], (2, 3, 4),
                   fmt="NCHW")
    # normalised over axes 1.., gamma/beta only over the last axis
    wide = b.node("LayerNormFusion", dict(begin_norm_axis=1, begin_params_axis=2,
                                          elementwise_affine=True, epsilon=1e-5),
                  [x, b.const("g2", g), b.const("b2", beta)], (2, 3, 4), fmt="NCHW")
    xv = rng.standard_normal((2, 3, 4)).astype(np.float32)
    got_conv, got_plain, got_wide = b.run([x], [conv_style, plain, wide], {"x": xv})
    np.testing.assert_allclose(got_conv, _layer_norm(xv, 2, 0.0) * g + beta, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_plain, _layer_norm(xv, 1, 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_wide, _layer_norm(xv, 1, 1e-5) * g + beta, rtol=1e-4,
                               atol=1e-5)


def test_mod_floor_mod_floor_div_as_mindspore_lite():
    """Mod is C fmod; FloorMod/FloorDiv floor (Python's % and //), for floats and int32."""
    b = Lite()
    xf, yf = b.act("xf", (6,), fmt="NCHW"), b.act("yf", (6,), fmt="NCHW")
    xi = b.act("xi", (6,), fmt="NCHW", dtype=np.int32)
    yi = b.act("yi", (6,), fmt="NCHW", dtype=np.int32)
    outs = [b.node(op, {}, [x, y], (6,), fmt="NCHW", dtype=dt)
            for op in ("Mod", "FloorMod", "FloorDiv")
            for x, y, dt in ((xf, yf, np.float32), (xi, yi, np.int32))]
    fv = np.array([7.5, -7.5, 7.5, -7.5, 3.0, -0.5], np.float32)
    gv = np.array([2.0, 2.0, -2.0, -2.0, 1.5, 4.0], np.float32)
    iv = np.array([7, -7, 7, -7, 6, -1], np.int32)
    jv = np.array([2, 2, -2, -2, 3, 4], np.int32)
    got = b.run([xf, yf, xi, yi], outs, {"xf": fv, "yf": gv, "xi": iv, "yi": jv})
    want = [np.fmod(fv, gv), np.fmod(iv, jv), fv - np.floor(fv / gv) * gv, iv % jv,
            np.floor(fv / gv), iv // jv]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_unary_extras_round_log1p_is_finite_elu_leaky_relu_addn_select():
    b = Lite()
    x = b.act("x", (7,), fmt="NCHW")
    rnd = b.node("Round", {}, [x], (7,), fmt="NCHW")
    fin = b.node("IsFinite", {}, [x], (7,), fmt="NCHW", dtype=np.bool_)
    elu = b.node("Elu", {"alpha": 0.7}, [x], (7,), fmt="NCHW")
    lrelu = b.node("LeakyRelu", {"negative_slope": 0.2}, [x], (7,), fmt="NCHW")
    addn = b.node("AddN", {}, [x, x, x], (7,), fmt="NCHW")
    sel = b.node("Select", {}, [fin, x, addn], (7,), fmt="NCHW")
    p = b.act("p", (3,), fmt="NCHW")
    l1p = b.node("Log1p", {}, [p], (3,), fmt="NCHW")
    xv = np.array([1.4, -2.6, 0.0, np.inf, -np.inf, np.nan, 3.2], np.float32)
    pv = np.array([0.0, 1e-7, 3.0], np.float32)
    got = b.run([x, p], [rnd, fin, elu, lrelu, addn, sel, l1p], {"x": xv, "p": pv})
    np.testing.assert_array_equal(got[0], np.round(xv))
    np.testing.assert_array_equal(got[1], np.isfinite(xv))
    finite = np.isfinite(xv)
    np.testing.assert_allclose(got[2][finite], np.where(xv > 0, xv, 0.7 * (np.exp(xv) - 1))[finite],
                               rtol=1e-6)
    np.testing.assert_allclose(got[3][finite], np.where(xv > 0, xv, 0.2 * xv)[finite], rtol=1e-6)
    np.testing.assert_array_equal(got[4], 3 * xv)
    np.testing.assert_array_equal(got[5], np.where(np.isfinite(xv), xv, 3 * xv))
    np.testing.assert_allclose(got[6], np.log1p(pv), rtol=1e-6)


def test_gather_scatter_nd_triangles_cum_sum():
    b = Lite()
    x = b.act("x", (4, 5), fmt="NCHW")
    gidx = b.const("gidx", np.array([[0, 1], [3, 4]], np.int32))
    gnd = b.node("GatherNd", {}, [x, gidx], (2,), fmt="NCHW")
    upd = rng.standard_normal((2, 5)).astype(np.float32)
    snu = b.node("ScatterNdUpdate", {}, [x, b.const("sidx", np.array([[2], [0]], np.int32)),
                                         b.const("upd", upd)], (4, 5), fmt="NCHW")
    # TF/MindSpore ScatterNd sums updates that hit the same place
    snd = b.node("ScatterNd", {}, [b.const("didx", np.array([[1], [1], [3]], np.int32)),
                                   b.const("dupd", upd[[0, 1, 0]]),
                                   b.const("dshape", np.array([4, 5], np.int32))],
                 (4, 5), fmt="NCHW")
    tril = b.node("Tril", {}, [x, b.const("k", np.array(1, np.int32))], (4, 5), fmt="NCHW")
    triu = b.node("Triu", {}, [x], (4, 5), fmt="NCHW")
    cs = b.node("CumSum", {"exclusive": True, "reverse": True},
                [x, b.const("axis", np.array(1, np.int32))], (4, 5), fmt="NCHW")
    xv = rng.standard_normal((4, 5)).astype(np.float32)
    got = b.run([x], [gnd, snu, snd, tril, triu, cs], {"x": xv})
    np.testing.assert_array_equal(got[0], xv[[0, 3], [1, 4]])
    want_snu = xv.copy()
    want_snu[[2, 0]] = upd
    np.testing.assert_array_equal(got[1], want_snu)
    want_snd = np.zeros((4, 5), np.float32)
    want_snd[1], want_snd[3] = upd[0] + upd[1], upd[0]
    np.testing.assert_allclose(got[2], want_snd, rtol=1e-6)
    np.testing.assert_array_equal(got[3], np.tril(xv, 1))
    np.testing.assert_array_equal(got[4], np.triu(xv))
    rev = np.cumsum(xv[:, ::-1], axis=1)[:, ::-1]
    np.testing.assert_allclose(got[5], rev - xv, rtol=1e-5, atol=1e-6)


def test_reverse_slice_fusion_unstack():
    b = Lite()
    x = b.act("x", (3, 4, 5), fmt="NCHW")
    rev = b.node("ReverseV2", {"axis": [0, 2]}, [x], (3, 4, 5), fmt="NCHW")
    sl = b.node("SliceFusion", {"axes": [1, 2]},
                [x, b.const("begin", np.array([1, 2], np.int32)),
                 b.const("size", np.array([2, -1], np.int32))], (3, 2, 3), fmt="NCHW")
    parts = [b.act(f"u{i}", (3, 5), fmt="NCHW") for i in range(4)]
    b.m.add_node(LiteNode("unstack", "Unstack", {"axis": 1}, [x], parts))
    xv = rng.standard_normal((3, 4, 5)).astype(np.float32)
    got = b.run([x], [rev, sl, *parts], {"x": xv})
    np.testing.assert_array_equal(got[0], xv[::-1, :, ::-1])
    np.testing.assert_array_equal(got[1], xv[:, 1:3, 2:])
    for i in range(4):
        np.testing.assert_array_equal(got[2 + i], xv[:, i])


def test_range_one_hot_fill_size_rank():
    b = Lite()
    x = b.act("x", (2, 3), fmt="NCHW")
    start = b.act("start", (1,), fmt="NCHW")
    rng_in = b.node("Range", {}, [start, b.const("limit", np.array([2.0], np.float32)),
                                  b.const("delta", np.array([0.5], np.float32))],
                    (-1,), fmt="NCHW")
    rng_attr = b.node("Range", {"d_type": 34, "start": 3, "limit": 11, "delta": 3}, [], (3,),
                      fmt="NCHW", dtype=np.int32)
    idx = b.act("idx", (4,), fmt="NCHW", dtype=np.int32)
    oh = b.node("OneHot", {"axis": -1}, [idx, b.const("depth", np.array(5, np.int32)),
                                         b.const("on", np.array(2.0, np.float32)),
                                         b.const("off", np.array(-1.0, np.float32))],
                (4, 5), fmt="NCHW")
    fill = b.node("Fill", {}, [b.const("v", np.array([1.5], np.float32)),
                               b.const("fshape", np.array([2, 2], np.int32))], (2, 2), fmt="NCHW")
    size = b.node("Size", {}, [x], (), fmt="NCHW", dtype=np.int32)
    rank = b.node("Rank", {}, [x], (), fmt="NCHW", dtype=np.int32)
    feeds = {"x": np.zeros((2, 3), np.float32), "start": np.array([0.5], np.float32),
             "idx": np.array([0, 4, 2, 2], np.int32)}
    got = b.run([x, start, idx], [rng_in, rng_attr, oh, fill, size, rank], feeds)
    np.testing.assert_allclose(got[0], [0.5, 1.0, 1.5])
    assert got[1].dtype == np.int32
    np.testing.assert_array_equal(got[1], [3, 6, 9])
    np.testing.assert_array_equal(got[2], np.where(np.eye(5)[[0, 4, 2, 2]] == 1, 2.0, -1.0))
    np.testing.assert_array_equal(got[3], np.full((2, 2), 1.5, np.float32))
    assert got[4].dtype == np.int32 and got[4] == 6 and got[5] == 2


def test_float16_weights_of_float32_kernels_are_widened():
    """MindSpore's `weight_fp16` conversion stores weights as float16 and MindSpore Lite
    widens them for its float32 kernels; float16 activations keep float16 constants."""
    b = Lite()
    x = b.act("x", (1, 4, 4, 2))
    w = rng.standard_normal((3, 1, 1, 2)).astype(np.float16)
    conv = dict(format="NHWC", kernel_size=[1, 1], stride=[1, 1], dilation=[1, 1],
                pad_mode="PAD", pad_list=[0, 0, 0, 0], group=1, in_channel=2, out_channel=3)
    y = b.node("Conv2DFusion", conv, [x, b.const("w", w), b.const("bias", np.ones(3, np.float16))],
               (1, 4, 4, 3))
    gt = b.node("Greater", {}, [y, b.const("zero", np.float16(0.5))], (1, 4, 4, 3),
                dtype=np.bool_)
    h = b.act("h", (3,), fmt="NCHW", dtype=np.float16)
    h2 = b.node("AddFusion", {}, [h, b.const("k", np.full(3, 0.25, np.float16))], (3,),
                fmt="NCHW", dtype=np.float16)
    xv = rng.standard_normal((1, 4, 4, 2)).astype(np.float32)
    got_y, got_gt, got_h2 = b.run([x, h], [y, gt, h2],
                                  {"x": xv, "h": np.array([1, 2, 3], np.float16)})
    ref = conv_nhwc(xv, w.astype(np.float32), 1.0, 1, [0, 0, 0, 0], 1)
    assert got_y.dtype == np.float32 and got_h2.dtype == np.float16
    np.testing.assert_allclose(got_y, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_gt, ref > 0.5)
    np.testing.assert_array_equal(got_h2, np.array([1.25, 2.25, 3.25], np.float16))


def test_weight_quantized_matmul_and_conv_are_dequantized():
    """QUANT_WEIGHT nodes: per-channel (q - zp) * scale * var_corr + mean_corr along the
    op's channel axis (B's columns without transpose_b, conv axis 0), per-tensor (q - zp) *
    scale; an out-of-range var_corr counts as 1, as in MindSpore Lite's weight decoder."""
    from converters.lite.ir import QuantParam

    b = Lite()
    a = b.act("a", (2, 4), fmt="NCHW")
    q = rng.integers(-127, 128, (4, 3)).astype(np.int8)
    params = [QuantParam(scale=0.02, zero_point=3, var_corr=1.01, mean_corr=-0.001),
              QuantParam(scale=0.05, zero_point=-2, var_corr=11.0, mean_corr=0.0),
              QuantParam(scale=0.01, zero_point=0)]
    w = b.m.add_tensor(LiteTensor.of("w", np.int8, (4, 3), q, format="NCHW",
                                     quant_params=params))
    mm = b.node("MatMulFusion", {"transpose_b": False}, [a, w], (2, 3), fmt="NCHW")
    b.m.nodes[-1].quant_type = "QUANT_WEIGHT"
    x = b.act("x", (1, 3, 3, 2))
    qc = rng.integers(-127, 128, (2, 1, 1, 2)).astype(np.int8)
    wc = b.m.add_tensor(LiteTensor.of("wc", np.int8, qc.shape, qc, format="NHWC",
                                      quant_params=[QuantParam(scale=0.1, zero_point=1)]))
    conv = dict(format="NHWC", kernel_size=[1, 1], stride=[1, 1], dilation=[1, 1],
                pad_mode="PAD", pad_list=[0, 0, 0, 0], group=1, in_channel=2, out_channel=2)
    y = b.node("Conv2DFusion", conv, [x, wc], (1, 3, 3, 2))
    b.m.nodes[-1].quant_type = "QUANT_WEIGHT"
    av = rng.standard_normal((2, 4)).astype(np.float32)
    xv = rng.standard_normal((1, 3, 3, 2)).astype(np.float32)
    got_mm, got_y = b.run([a, x], [mm, y], {"a": av, "x": xv})
    scale = np.array([0.02, 0.05, 0.01])
    zp, var, mean = np.array([3, -2, 0]), np.array([1.01, 1.0, 1.0]), np.array([-0.001, 0, 0])
    w_ref = (q - zp) * scale * var + mean
    np.testing.assert_allclose(got_mm, av @ w_ref, rtol=1e-5, atol=1e-6)
    ref_y = conv_nhwc(xv, ((qc.astype(np.float32) - 1) * 0.1).astype(np.float32), 0, 1,
                      [0, 0, 0, 0], 1)
    np.testing.assert_allclose(got_y, ref_y, rtol=1e-5, atol=1e-6)


def test_weight_quant_params_that_fit_no_axis_are_invalid():
    from converters.errors import InvalidModelError
    from converters.lite.ir import QuantParam

    b = Lite()
    a = b.act("a", (2, 4), fmt="NCHW")
    w = b.m.add_tensor(LiteTensor.of("w", np.int8, (4, 3), np.zeros((4, 3), np.int8),
                                     format="NCHW", quant_params=[QuantParam()] * 2))
    b.node("MatMulFusion", {}, [a, w], (2, 3), fmt="NCHW")
    b.m.nodes[-1].quant_type = "QUANT_WEIGHT"
    with pytest.raises(InvalidModelError, match="'w': 2 quant params do not match axis 1"):
        b.run([a], [b.m.nodes[-1].outputs[0]], {})


def test_lrn_with_the_empty_norm_region_mindspore_writes():
    """MindSpore's converter leaves norm_region empty; MindSpore Lite normalises across
    channels: y = x / (bias + alpha * sum of x^2 over channels c-r..c+r)^beta."""
    b = Lite()
    x = b.act("x", (1, 2, 2, 5))
    attrs = {"depth_radius": 1, "bias": 1.0, "alpha": 0.3, "beta": 0.75, "norm_region": ""}
    y = b.node("LRN", attrs, [x], (1, 2, 2, 5))
    xv = rng.standard_normal((1, 2, 2, 5)).astype(np.float32)
    got = b.run([x], [y], {"x": xv})[0]
    sq = np.pad(xv.astype(np.float64) ** 2, ((0, 0), (0, 0), (0, 0), (1, 1)))
    window = sum(sq[..., i:i + 5] for i in range(3))
    np.testing.assert_allclose(got, xv / (1.0 + 0.3 * window) ** 0.75, rtol=1e-5, atol=1e-6)


def test_float16_constants_of_onnx_nodes_carried_as_custom_stay_float16():
    from onnx import TensorProto, helper, numpy_helper

    from converters.onnx_import import import_onnx

    target = numpy_helper.from_array(np.zeros(1, np.float16), "target")
    graph = helper.make_graph(
        [helper.make_node("CastLike", ["x", "target"], ["y"])], "castlike",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3])], [target])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    lite, report = import_onnx(model)
    assert report.custom, "CastLike is expected to travel as Custom"
    got = run(export_onnx(lite), {"x": np.array([1.5, -2.0, 3.25], np.float32)})[0]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.array([1.5, -2.0, 3.25], np.float16))


@pytest.mark.parametrize("op", ["MaxPoolFusion", "AvgPoolFusion"])
@pytest.mark.parametrize("known", [True, False])
def test_same_pool_whose_stride_passes_its_kernel_keeps_lite_rows(op, known):
    # MindSpore Lite pads a SAME pool nothing where ceil(18 / 3) windows need only 16 of 18
    # rows, reading rows 0, 3, ...; under onnxruntime SAME_UPPER is a negative padding there
    # (its pools refuse the run, or crop and read rows 1, 4, ...). With the size known the
    # export writes Lite's pads explicitly.
    b = Lite()
    x = b.act("x", (1, 18, 7, 2) if known else (1, -1, -1, 2))
    pool = dict(format="NHWC", kernel_size=[1, 1], strides=[3, 2], pad=[0, 0, 0, 0],
                pad_mode="SAME", round_mode="CEIL", activation_type="NO_ACTIVATION")
    p = b.node(op, pool, [x], (1, 6, 4, 2))
    feeds = {"x": rng.standard_normal((1, 18, 7, 2)).astype(np.float32)}
    if known:
        (y,) = b.run([x], [p], feeds)
        np.testing.assert_array_equal(y, feeds["x"][:, ::3, ::2, :])
    else:  # without the size it stays SAME_UPPER (the documented limit; what onnxruntime
        # then does varies by version)
        b.m.inputs, b.m.outputs = [x], [p]
        b.m.finalize_subgraph()
        (node,) = [n for n in export_onnx(b.m).graph.node if n.op_type.endswith("Pool")]
        assert {a.name: a.s for a in node.attribute if a.name == "auto_pad"} == {
            "auto_pad": b"SAME_UPPER"}


def _dilated_conv_nchw(x, w, stride, dilation, pads):
    """A float64 reference: pads = [top, bottom, left, right]."""
    t, b, left, r = pads
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (left, r)))
    k, _, kh, kw = w.shape
    oh = (x.shape[2] - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (x.shape[3] - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    y = np.zeros((x.shape[0], k, oh, ow))
    for i in range(kh):
        for j in range(kw):
            rows = x[:, :, i * dilation[0]:, j * dilation[1]:][:, :, ::stride[0], ::stride[1]]
            y += np.einsum("nchw,kc->nkhw", rows[:, :, :oh, :ow], w[:, :, i, j])
    return y


@pytest.mark.parametrize("stride", [[1, 1], [2, 2]])
def test_same_conv_with_dilation_runs_under_onnxruntime(stride):
    # onnxruntime refuses SAME_UPPER with dilations (a fuzzed .ms file's dilated conv ran on
    # the NPU only); with the size known the export writes Lite's SAME pads explicitly:
    # ceil(size / stride) outputs, the dilated window's need split with the extra at the end
    b = Lite()
    x = b.act("x", (1, 2, 9, 8), fmt="NCHW")
    w = b.const("w", rng.standard_normal((3, 2, 3, 3)).astype(np.float32), fmt="NCHW")
    conv = dict(format="NCHW", kernel_size=[3, 3], stride=stride, dilation=[2, 2],
                pad_mode="SAME", pad_list=[0, 0, 0, 0], group=1, in_channel=2, out_channel=3,
                activation_type="NO_ACTIVATION")
    out = (1, 3, -(-9 // stride[0]), -(-8 // stride[1]))
    y = b.node("Conv2DFusion", conv, [x, w], out, fmt="NCHW")
    feeds = {"x": rng.standard_normal((1, 2, 9, 8)).astype(np.float32)}
    (got,) = b.run([x], [y], feeds)
    pads = {1: [2, 2, 2, 2], 2: [2, 2, 1, 2]}[stride[0]]  # rows: 9 -> 4 or 5; cols: 8 -> 3 or 4
    want = _dilated_conv_nchw(feeds["x"], b.m.tensors[w].data, stride, [2, 2], pads)
    assert got.shape == out
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("crop, ok", [(-2, True), (-5, False), (-2**31, False)])
def test_a_pad_that_crops_an_axis_below_zero_is_an_invalid_model(crop, ok):
    # a fuzzed .ms file's PadFusion cropped 2**31 rows of a 4-row axis: onnxruntime aborted
    # the process building the session (a Slice after it clamps with its bounds swapped);
    # the export refuses it, naming the node and the axis
    from converters.errors import InvalidModelError  # noqa: PLC0415

    b = Lite()
    x = b.act("x", (1, 4, 3), fmt="NCHW")
    pads = b.const("pads", np.array([[0, 0], [crop, 0], [1, 1]], np.int32), fmt="NCHW")
    y = b.node("PadFusion", {"padding_mode": "CONSTANT", "constant_value": 0.0}, [x, pads],
               (1, max(4 + crop, 0), 5), fmt="NCHW")
    feeds = {"x": rng.standard_normal((1, 4, 3)).astype(np.float32)}
    if ok:
        (got,) = b.run([x], [y], feeds)
        np.testing.assert_array_equal(got, np.pad(feeds["x"][:, 2:], ((0, 0), (0, 0), (1, 1))))
        return
    with pytest.raises(InvalidModelError, match=rf"'n0' \(PadFusion\): paddings {crop}, 0 of "
                                                r"axis 1 \(size 4\) leave -?\d+ elements"):
        b.run([x], [y], feeds)


@pytest.mark.parametrize("perm, ok", [(np.array([1.0, 0.0], np.float32), True),
                                      (np.array([np.inf, 0.0], np.float32), False),
                                      (np.array([np.nan, 0.0], np.float32), False),
                                      (np.array([0.5, 0.0], np.float32), False),
                                      (np.array([2.0 ** 70, 0.0], np.float64), False)])
def test_integer_operands_given_as_floats_must_hold_integers(perm, ok):
    # a fuzzed .ms file's Transpose took a float weight as its perm: inf became an untyped
    # OverflowError (convert, inspect and sessions), NaN an untyped ValueError, 0.5 a perm
    # nobody wrote; only floats that are integers are read as such
    from converters.errors import InvalidModelError  # noqa: PLC0415

    b = Lite()
    x = b.act("x", (2, 3), fmt="NCHW")
    y = b.node("Transpose", {}, [x, b.const("perm", perm, fmt="NCHW")], (3, 2), fmt="NCHW")
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32)}
    if ok:
        np.testing.assert_array_equal(b.run([x], [y], feeds)[0], feeds["x"].T)
        return
    with pytest.raises(InvalidModelError, match=r"'n0' \(Transpose\): perm: float\d+ value "
                                                r".* is not an integer"):
        b.run([x], [y], feeds)
