"""Edge values the fuzzer found: infinite or NaN Clip bounds, a NaN Elu alpha, a stride whose
working set the machine cannot hold. Each as onnxruntime CPU gives it, or a typed error."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_models import NPU, make_model, reference

import provider
from provider.errors import DeviceMemoryError
from provider.session import InferenceSession

X = np.array([[-2.0, 0.5, 3.0, 7.0, -0.0, np.nan]], np.float32)


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def _unary(node, inits=()) -> bytes:
    return make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])], inits)


def _on_npu_like_cpu(model: bytes) -> None:
    sess = InferenceSession(model, providers=NPU)
    assert {n.device for n in sess.partition()} == {"NPU"}
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], reference(model, {"x": X})[0])


@pytest.mark.parametrize("lo, hi", [(-0.25, -np.inf), (np.inf, 1.0), (np.nan, 1.0),
                                    (0.0, np.nan), (-np.inf, np.inf)])
def test_clip_bounds_infinite_or_nan(lo, hi):
    inits = [numpy_helper.from_array(np.array(lo, np.float32), "lo"),
             numpy_helper.from_array(np.array(hi, np.float32), "hi")]
    _on_npu_like_cpu(_unary(helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), inits))


@pytest.mark.parametrize("alpha", [np.nan, 0.5])
def test_elu_alpha_reaches_only_the_negative_elements(alpha):
    _on_npu_like_cpu(_unary(helper.make_node("Elu", ["x"], ["y"], alpha=float(alpha))))


def test_a_working_set_beyond_the_machine_is_a_device_memory_error():
    # a dilation of 2**30 padded to fit: the padded input alone is over a terabyte (a
    # stride past the input no longer makes one: it is clamped, the output the same)
    w = numpy_helper.from_array(np.ones((4, 8, 3, 3), np.float32), "w")
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["y"], dilations=[1, 2**30], pads=[1, 2**30, 1, 2**30])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, "h", "w"])], [w])
    sess = InferenceSession(model, providers=NPU)
    with pytest.raises(DeviceMemoryError, match="bytes of memory"):
        sess.run(None, {"x": np.ones((1, 8, 16, 16), np.float32)})


def test_a_partition_input_beyond_any_memory_stays_on_the_cpu_with_the_reason():
    # onnxruntime infers a partition's input shapes: a corrupt pad upstream (a fuzzed .ms
    # MaxPool's 2**62) gave one of 8 x 2**61 floats, and compiling it overflowed the slot
    # table (an untyped OverflowError out of Ep.Compile). Now the input is checked as node
    # outputs are: the node stays on the CPU, its reason naming the input and its size.
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 2**61])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 2**61])])
    sess = InferenceSession(model, providers=NPU)
    (node,) = sess.partition()
    assert node.device == "CPU"
    assert "graph input: 'x' of shape [8, 2305843009213693952] needs" in node.reason
    assert "bytes of memory" in node.reason


def test_compiling_an_input_beyond_any_memory_is_a_device_memory_error():
    from converters.onnx_import import import_onnx
    from provider.npu.compiler import compile_model

    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    lite, _ = import_onnx(onnx.load_from_string(model))
    with pytest.raises(DeviceMemoryError, match=r"graph input: 'x' of shape \[4611686018427387904, 4\]"):
        compile_model(lite, {"x": (2**62, 4)})


def _pool_opset19(op: str, dims: list, out: list) -> bytes:
    # opset 19: onnxruntime's AveragePool-19 crops where a negative padding falls; its
    # AveragePool-11 and its MaxPool (without dilations) refuse the run instead ("padding
    # values must be non-negative")
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], kernel_shape=[1, 1], strides=[3, 1],
                          auto_pad="SAME_UPPER")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model.SerializeToString()


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
@pytest.mark.parametrize("dims, out", [([1, 7, 18, 15], [1, 7, 6, 15]),
                                       (["n", 7, "h", 15], ["n", 7, "oh", 15])])
def test_same_upper_pool_whose_stride_passes_its_kernel_reads_the_rows_onnxruntime_does(
        op, dims, out):
    # a stride of 3 over a kernel of 1 on 18 rows: ceil(18 / 3) windows need 16 rows, and
    # onnxruntime crops one at each end (it reads rows 1, 4, ...) where Lite's SAME pads
    # nothing and reads rows 0, 3, ... (found by a pooling fuzz against onnxruntime): such
    # a pool stays on the CPU, also when the size is not known before the run
    model = _pool_opset19(op, dims, out)
    x = np.random.default_rng(0).standard_normal((1, 7, 18, 15)).astype(np.float32)
    sess = InferenceSession(model, providers=NPU)
    (node,) = sess.partition()
    assert node.device == "CPU" and "SAME_UPPER with stride 3 over kernel 1" in node.reason
    try:
        want = reference(model, {"x": x})[0]
    except ort.capi.onnxruntime_pybind11_state.RuntimeException as refused:
        with pytest.raises(type(refused), match="padding values must be non-negative"):
            sess.run(None, {"x": x})
    else:
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want)


def test_same_upper_pool_with_no_rows_to_crop_stays_on_the_npu():
    # the same stride on 19 rows: 7 windows need exactly 19, nothing is cropped
    model = _pool_opset19("MaxPool", [1, 7, 19, 15], [1, 7, 7, 15])
    x = np.random.default_rng(0).standard_normal((1, 7, 19, 15)).astype(np.float32)
    sess = InferenceSession(model, providers=NPU)
    assert {n.device for n in sess.partition()} == {"NPU"}
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], reference(model, {"x": x})[0])


@pytest.mark.parametrize("node", [helper.make_node("Elu", ["x"], ["y"], alpha=0.5),
                                  helper.make_node("HardSwish", ["x"], ["y"]),
                                  helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
                         ids=["Elu", "HardSwish", "Gelu-tanh"])
def test_activations_of_a_scalar(node):
    # numpy's arithmetic on a 0-d array gives a scalar, and the numpy Elu's out= temporary
    # then failed the run (an op fuzz against onnxruntime)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    model = model.SerializeToString()
    sess = InferenceSession(model, providers=NPU)
    assert {n.device for n in sess.partition()} == {"NPU"}
    for v in (-1.5, 0.0, 2.0):
        x = np.array(v, np.float32)
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], reference(model, {"x": x})[0],
                                   rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("x_shape,slope,y_shape", [
    ([1, 1], [0.5, -2.0], [1, 2]),
    # one value, but of a higher rank than x: the NPU gave x's shape (tests/fuzz_ops.py)
    ([], [0.5], [1]),
    ([3], [[0.5]], [1, 3]),
])
def test_a_prelu_slope_that_widens_its_input_stays_on_the_cpu(x_shape, slope, y_shape):
    # ONNX broadcasts PRelu's slope to x; onnxruntime also runs a slope of (2,) on x of
    # (1, 1), giving (1, 2), which the NPU's in-place kernel failed (an op fuzz)
    slope = numpy_helper.from_array(np.array(slope, np.float32), "s")
    model = make_model([helper.make_node("PRelu", ["x", "s"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], [slope])
    sess = InferenceSession(model, providers=NPU)
    (node,) = sess.partition()
    assert node.device == "CPU" and "widens input" in node.reason
    x = np.full(x_shape, -3.0, np.float32)
    got = sess.run(None, {"x": x})[0]
    assert got.shape == tuple(y_shape)
    np.testing.assert_array_equal(got, reference(model, {"x": x})[0])


@pytest.mark.parametrize("bounds", [[], ["", "hi"], ["lo"]])
def test_a_clip_without_a_bound_clips_infinities_to_the_float_range(bounds):
    # ONNX's absent Clip bound is the type's lowest/highest value: onnxruntime gives
    # -3.4e38 for -inf; the NPU kept -inf (tests/fuzz_ops.py, unary seed 26 case 101)
    consts = [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("lo", -1.0), ("hi", 2.0)) if n in bounds]
    model = make_model([helper.make_node("Clip", ["x", *bounds], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], consts)
    sess = InferenceSession(model, providers=NPU)
    assert {n.device for n in sess.partition()} == {"NPU"}
    x = np.array([-np.inf, np.inf, np.nan, 1.5], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], reference(model, {"x": x})[0])


@pytest.mark.parametrize("a_dims", [[3, 2], ["n", 2], ["b", "n", 2]])
def test_a_matmul_by_a_vector_runs_on_the_npu_whatever_the_sizes_say(a_dims):
    # With A's sizes unknown, a 1-D B was once claimed as is and every run failed ("cannot
    # multiply (3, 2) by (2,)", tests/fuzz_ops.py with symbolic dims); then it stayed on the
    # CPU; now the importer makes B a column (a copy of the initializer) and squeezes it off
    b = numpy_helper.from_array(np.array([0.5, -2.0], np.float32), "b")
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_dims)],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, a_dims[:-1])], [b])
    sess = InferenceSession(model, providers=NPU)
    (node,) = sess.partition()
    assert node.device == "NPU"
    a = np.random.default_rng(0).standard_normal([3, 2] if len(a_dims) == 2 else [4, 3, 2])
    a = a.astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"a": a})[0], reference(model, {"a": a})[0],
                               rtol=1e-6)
