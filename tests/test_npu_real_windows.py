"""Window ops as real exports write them, each through the whole path (see real_ops.py):
1-D convolution and pooling as 2-D ones of height 1, average pooling that counts its pads,
ConvTranspose with output_shape, and SAME_LOWER convs and pools (SAME pads counted in an
average too), whose pads are derived at import from the static input size."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from real_ops import NPU, F, check, check_reference, model_of, randn, registered  # noqa: F401

import provider


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3], pads=[1, 1]),
    dict(kernel_shape=[5], strides=[2], pads=[2, 1], dilations=[1]),
    dict(kernel_shape=[3], dilations=[2], group=2),
    dict(kernel_shape=[4], strides=[2], auto_pad="SAME_UPPER"),
])
def test_conv1d_runs_as_a_2d_conv_of_height_1(attrs):
    rng = np.random.default_rng(3)
    group = attrs.get("group", 1)
    w = randn(rng, 6, 4 // group, attrs["kernel_shape"][0], scale=0.3)
    model = model_of([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)],
                     [helper.make_tensor_value_info("x", F, ["N", 4, "L"])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"w": w, "b": randn(rng, 6)})
    check(model, [{"x": randn(rng, n, 4, length)} for n, length in ((1, 9), (2, 16))])


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ("AveragePool", dict(kernel_shape=[2], strides=[2])),
    ("MaxPool", dict(kernel_shape=[2], ceil_mode=1, strides=[2])),
    ("AveragePool", dict(kernel_shape=[3], strides=[2], pads=[1, 2], count_include_pad=1)),
])
def test_pool1d(op, attrs):
    rng = np.random.default_rng(4)
    model = model_of([helper.make_node(op, ["x"], ["y"], **attrs)],
                     [helper.make_tensor_value_info("x", F, ["N", 3, "L"])],
                     [helper.make_tensor_value_info("y", F, None)])
    check(model, [{"x": randn(rng, n, 3, length)} for n, length in ((1, 8), (2, 11))])


@pytest.mark.parametrize("attrs,shapes", [
    (dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), ["N", 3, "H", "W"]),  # AvgPool2d(3, 1, 1)
    (dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 2, 1]), ["N", 3, "H", "W"]),
    (dict(kernel_shape=[2, 2], strides=[2, 2]), ["N", 3, "H", "W"]),  # no pads: none counted
    # ceil_mode: a last window that would start in the end padding is dropped (static sizes)
    (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), [1, 3, 7, 9]),
    (dict(kernel_shape=[2, 4], strides=[3, 3], pads=[1, 0, 1, 1], ceil_mode=1), [2, 4, 2, 18]),
    (dict(kernel_shape=[2, 5], strides=[3, 3], pads=[1, 2, 1, 4], ceil_mode=1), [2, 3, 9, 6]),
])
def test_average_pool_counting_the_pads(attrs, shapes):
    """count_include_pad=1 (PyTorch's default) divides by the whole window, pads included:
    a zero Pad, then the pool without pads (rounding down where ONNX drops a window)."""
    rng = np.random.default_rng(6)
    model = model_of([helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=1,
                                       **attrs)],
                     [helper.make_tensor_value_info("x", F, shapes)],
                     [helper.make_tensor_value_info("y", F, None)])
    check(model, [{"x": randn(rng, *shape)} for shape in
                  ([(1, 3, 7, 9), (2, 3, 8, 8)] if "N" in shapes else [shapes])])


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], strides=[2, 2], output_shape=[10, 9]),  # odd total: start
    dict(kernel_shape=[3, 2], strides=[2, 3], output_shape=[9, 10], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[4, 3], strides=[2, 2], dilations=[2, 1], output_shape=[12, 9],
         output_padding=[1, 1], auto_pad="SAME_LOWER"),
])
def test_conv_transpose_output_shape_becomes_its_pads(attrs):
    """Keras / TensorFlow exports state the output size; the pads it implies are derived
    at import (the odd one at the end only for SAME_UPPER, as onnxruntime places it)."""
    rng = np.random.default_rng(13)
    model = model_of([helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)],
                     [helper.make_tensor_value_info("x", F, [2, 3, 5, 4])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"w": randn(rng, 3, 2, *attrs["kernel_shape"])})
    check(model, [{"x": randn(rng, 2, 3, 5, 4)}])


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[2, 3]),  # odd totals: the extra pad at the start
    dict(kernel_shape=[3, 3], strides=[2, 2]),
    dict(kernel_shape=[2, 2], strides=[1, 2], group=3),
])
def test_conv_same_lower_becomes_its_pads(attrs):
    """TensorFlow's SAME_LOWER (Lite's SAME puts the odd pad at the end): explicit pads from
    the static input size, the odd one at the start."""
    rng = np.random.default_rng(14)
    group = attrs.get("group", 1)
    model = model_of([helper.make_node("Conv", ["x", "w", "b"], ["y"], auto_pad="SAME_LOWER",
                                       **attrs)],
                     [helper.make_tensor_value_info("x", F, [2, 3, 7, 8])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"w": randn(rng, 6, 3 // group, *attrs["kernel_shape"]), "b": randn(rng, 6)})
    check(model, [{"x": randn(rng, 2, 3, 7, 8)}])


def test_dilated_conv_same_lower_matches_the_reference():
    """onnxruntime refuses dilation with SAME pads; ONNX defines them (the dilated kernel's
    extent), and the NPU computes what onnx's reference does."""
    rng = np.random.default_rng(15)
    model = model_of([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER",
                                       dilations=[2, 2])],
                     [helper.make_tensor_value_info("x", F, [1, 3, 7, 8])],
                     [helper.make_tensor_value_info("y", F, None)],
                     {"w": randn(rng, 4, 3, 2, 3)})
    check_reference(model, [{"x": randn(rng, 1, 3, 7, 8)}])


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_LOWER")),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER", ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="SAME_LOWER")),
    ("AveragePool", dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="SAME_LOWER",
                         count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[5, 5], strides=[1, 2], auto_pad="SAME_UPPER",
                         count_include_pad=1)),
])
def test_same_pools_become_their_pads(op, attrs):
    """SAME_LOWER pools, and averages that count SAME pads, take the explicit pads the
    static input size implies."""
    rng = np.random.default_rng(16)
    model = model_of([helper.make_node(op, ["x"], ["y"], **attrs)],
                     [helper.make_tensor_value_info("x", F, [2, 3, 9, 8])],
                     [helper.make_tensor_value_info("y", F, None)])
    check(model, [{"x": randn(rng, 2, 3, 9, 8)}])


@pytest.mark.parametrize("node,shape,reason", [
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], auto_pad="SAME_LOWER"),
     [1, 3, "H", 8], "unknown size"),
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1], strides=[3, 3],
                      auto_pad="SAME_LOWER"), [1, 3, 7, 8], "crops the input"),
])
def test_same_lower_forms_without_exact_pads_stay_on_the_cpu(node, shape, reason):
    """An unknown size (the pads depend on it) and a stride past its kernel (onnxruntime
    crops the input with negative pads) stay on the CPU, saying why."""
    model = model_of([node], [helper.make_tensor_value_info("x", F, shape)],
                     [helper.make_tensor_value_info("y", F, None)])
    npu = provider.InferenceSession(model.SerializeToString(), providers=NPU)
    [placed] = npu.partition()
    assert placed.device != "NPU" and reason in placed.reason, placed
