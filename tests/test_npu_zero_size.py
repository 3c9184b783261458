"""Zero-size dimensions on the reference NPU, on its native and on its numpy kernels.

Any dimension may be 0, as in onnxruntime: an empty batch, an empty spatial axis where the
op allows one, a pool output no window fits, 0 channels, a 0-length reduction or GEMM
axis. Each case runs through `provider.InferenceSession` with the NPU EP (every node on the
NPU, native kernels) and as a compiled Program on both kernel sets (`Executor` with the
native kernels, every step of a `native` case on them; and with the numpy `KERNELS` table);
outputs must match onnxruntime's CPU EP in shape, dtype and values. Where onnxruntime
refuses a shape, compiling raises InvalidModelError naming the node and the shapes.

The oracle runs with graph optimizations off: those are onnxruntime's kernels. (1.23's
NCHWc rewrite of Conv drops the bias of a conv with 0 input channels and refuses one with 0
output channels; its kernels, like 1.32's with or without the rewrite, do neither.) Where
a release leaves its output uninitialized (1.23's Conv with 0 input channels, on about one
run in three), onnx's reference evaluator, which computes the specification, is the oracle.

A crash in a native kernel (a SIGFPE for the empty batch of a pool used to take the whole
process down) is checked in a child process too, for one small CNN, with the native and
with the numpy kernels (`LITENPU_NATIVE=0` only works before the library loads).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from npu_oracle import assert_matches, pool
from onnx import helper, numpy_helper
from ort_models import NPU, f32, make_model

import provider
from converters.onnx_import import import_onnx
from provider.errors import InvalidModelError
from provider.npu import native
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor
from provider.npu.memory import default_pool
from provider.npu.ops import KERNELS
from provider.npu.program import Program, from_bytes, to_bytes
from provider.session import InferenceSession

F32 = np.float32
# An empty tensor has nothing to compute: no kernel may warn of a mean of nothing, say.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


# ---- cases -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A model, its feeds, and whether every step of its Program runs natively."""

    id: str
    model: bytes
    feeds: dict[str, np.ndarray] = field(repr=False)
    native: bool = False


def _randn(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


def graph(id: str, nodes, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray],
          rank: int, *, native: bool = False, static: bool = False) -> Case:
    """A case: `nodes` (made with helper.make_node) reading `feeds` (symbolic dims unless
    `static`) and `consts`, writing float32 "y" of rank `rank`."""
    inputs = [f32(k, list(v.shape) if static else [f"{k}{i}" for i in range(v.ndim)])
              for k, v in feeds.items()]
    model = make_model(nodes, inputs, [f32("y", [f"y{i}" for i in range(rank)])],
                       [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return Case(id, model, feeds, native)


def one(id: str, op: str, shape: tuple[int, ...], consts: dict[str, np.ndarray] | None = None, *,
        rank: int | None = None, native: bool = False, inputs: list[str] | None = None,
        static: bool = False, **attrs) -> Case:
    """A one-node case named `id`: `op` on x of `shape` (seeded), with constant inputs."""
    consts = consts or {}
    node = helper.make_node(op, inputs or ["x", *consts], ["y"], name=id, **attrs)
    return graph(id, [node], {"x": _randn(1, *shape)}, consts, len(shape) if rank is None else rank,
                 native=native, static=static)


W8 = _randn(2, 8, 3, 3, 3)
B8 = np.arange(8, dtype=F32)
W64 = _randn(3, 64, 64, 3, 3) * F32(0.05)
W16 = _randn(4, 16, 16, 3, 3) * F32(0.1)
WDW = _randn(5, 16, 1, 3, 3)
FC = _randn(6, 8, 5)


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def concat(id: str, a: tuple[int, ...], b: tuple[int, ...], axis: int) -> Case:
    node = helper.make_node("Concat", ["x", "z"], ["y"], name=id, axis=axis)
    return graph(id, [node], {"x": _randn(7, *a), "z": _randn(8, *b)}, {}, len(a), native=True)


def mobilenet_block(id: str, n: int) -> Case:
    """Expand 1x1 -> depthwise 3x3 -> project 1x1 + residual: the channels-last tensor
    between the first two convs, and a residual add fused into the last conv's epilogue."""
    nodes = [helper.make_node("Conv", ["x", "we"], ["e"], name=f"{id}_expand"),
             helper.make_node("Relu", ["e"], ["er"]),
             helper.make_node("Conv", ["er", "wd"], ["d"], name=f"{id}_dw", group=16, pads=[1] * 4),
             helper.make_node("Clip", ["d", "lo", "hi"], ["dr"]),
             helper.make_node("Conv", ["dr", "wp"], ["p"], name=f"{id}_project"),
             helper.make_node("Add", ["p", "x"], ["y"])]
    consts = {"we": _randn(9, 16, 8, 1, 1), "wd": WDW, "wp": _randn(10, 8, 16, 1, 1),
              "lo": np.array(0, F32), "hi": np.array(6, F32)}
    return graph(id, nodes, {"x": _randn(11, n, 8, 6, 6)}, consts, 4, native=True)


def concat_of_convs(id: str, n: int) -> Case:
    """A conv with 8 output channels and one with none, concatenated: the compiler computes
    both straight into their slices of the output (one of them 0 bytes)."""
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name=f"{id}_a", pads=[1] * 4),
             helper.make_node("Conv", ["x", "wb"], ["b"], name=f"{id}_b"),
             helper.make_node("Concat", ["a", "b"], ["y"], name=id, axis=1)]
    consts = {"wa": W8, "wb": np.zeros((0, 3, 1, 1), F32)}
    return graph(id, nodes, {"x": _randn(12, n, 3, 6, 6)}, consts, 4, native=True)


def cnn() -> bytes:
    """conv -> relu -> maxpool -> avgpool -> global pool -> flatten -> gemm, any N, H, W."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["m"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("AveragePool", ["m"], ["a"], name="avgpool", kernel_shape=[3, 3]),
             helper.make_node("GlobalAveragePool", ["a"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc")]
    return make_model(nodes, [f32("x", ["N", 3, "H", "W"])], [f32("y", ["N", 5])],
                      [numpy_helper.from_array(W8, "w"), numpy_helper.from_array(FC, "fc")])


CNN = cnn()
CNN_INPUT = (0, 3, 48, 160)  # an OCR recogniser's empty batch


CASES = [
    # conv: im2col (shifted stride-1 form, strided phases), pointwise, direct, 0 channels
    one("conv_batch0", "Conv", (0, 3, 8, 8), {"w": W8, "b": B8}, pads=[1] * 4, native=True),
    one("conv_stride2_batch0", "Conv", (0, 3, 9, 9), {"w": W8}, strides=[2, 2], native=True),
    one("conv_1x1_batch0", "Conv", (0, 3, 8, 8), {"w": W8[:, :, :1, :1].copy()}, native=True),
    one("conv_direct_batch0", "Conv", (0, 64, 28, 28), {"w": W64}, pads=[1] * 4, native=True),
    one("conv_0_input_channels", "Conv", (1, 0, 8, 8), {"w": np.zeros((8, 0, 3, 3), F32), "b": B8},
        native=True),
    one("conv_0_input_channels_big_plane", "Conv", (1, 0, 112, 112),
        {"w": np.zeros((8, 0, 3, 3), F32), "b": B8}, pads=[1] * 4, native=True),
    one("conv_0_output_channels", "Conv", (1, 3, 8, 8), {"w": np.zeros((0, 3, 3, 3), F32)},
        native=True),
    one("conv_empty_height_padded", "Conv", (1, 3, 0, 8), {"w": W8, "b": B8}, pads=[2, 1, 2, 1],
        native=True),
    # a stride-2 phase that starts below the last input row (a 1-row image)
    one("conv_direct_one_row_stride2", "Conv", (1, 16, 1, 28), {"w": W16}, strides=[2, 2],
        pads=[0, 1, 2, 1], native=True),
    one("dwconv_batch0", "Conv", (0, 16, 8, 8), {"w": WDW}, group=16, pads=[1] * 4, native=True),
    one("dwconv_large_plane_batch0", "Conv", (0, 16, 32, 32), {"w": WDW}, group=16, pads=[1] * 4,
        native=True),
    one("dwconv_large_plane_one_row_stride2", "Conv", (1, 16, 1, 600), {"w": WDW}, group=16,
        strides=[2, 2], pads=[0, 1, 2, 1], native=True),
    mobilenet_block("mobilenet_block_batch0", 0),
    concat_of_convs("concat_of_convs_one_empty", 1),
    concat_of_convs("concat_of_convs_batch0", 0),
    one("conv_transpose_batch0", "ConvTranspose", (0, 3, 4, 4), {"w": _randn(13, 3, 2, 3, 3)}),
    # pooling: empty batch, outputs no window fits (onnxruntime rounds span / stride toward
    # 0: a window up to a stride longer than the input still makes one output)
    one("maxpool_batch0", "MaxPool", (0, 3, 8, 8), kernel_shape=[3, 3], strides=[2, 2], native=True),
    one("avgpool_batch0", "AveragePool", (0, 3, 8, 8), kernel_shape=[3, 3], native=True),
    one("avgpool_padded_batch0", "AveragePool", (0, 3, 8, 8), kernel_shape=[3, 3], pads=[1] * 4,
        native=True),
    one("avgpool_whole_plane_batch0", "AveragePool", (0, 3, 4, 4), kernel_shape=[4, 4], native=True),
    one("global_avgpool_batch0", "GlobalAveragePool", (0, 3, 8, 8), native=True),
    one("global_maxpool_batch0", "GlobalMaxPool", (0, 3, 8, 8), native=True),
    one("global_avgpool_batch0_empty_plane", "GlobalAveragePool", (0, 3, 0, 0), native=True),
    one("avgpool_window_too_tall", "AveragePool", (1, 3, 2, 8), kernel_shape=[3, 3], native=True),
    one("avgpool_window_too_tall_stride2", "AveragePool", (1, 3, 2, 8), kernel_shape=[5, 3],
        strides=[2, 1], native=True),
    one("avgpool_window_too_wide_stride2", "AveragePool", (1, 3, 4, 8), kernel_shape=[3, 10],
        strides=[1, 2], native=True),
    one("maxpool_window_too_tall_ceil", "MaxPool", (1, 3, 2, 8), kernel_shape=[3, 3], ceil_mode=1,
        native=True),
    one("maxpool_window_overhangs_stride2", "MaxPool", (1, 3, 2, 8), kernel_shape=[3, 3],
        strides=[2, 2], native=True),
    one("avgpool_window_overhangs_stride2", "AveragePool", (1, 3, 2, 8), kernel_shape=[3, 3],
        strides=[2, 2], native=True),
    # GEMMs
    one("gemm_batch0", "Gemm", (0, 8), {"w": FC, "b": np.ones(5, F32)}, native=True),
    one("matmul_batch0", "MatMul", (0, 8), {"w": FC}, native=True),
    one("matmul_k0", "MatMul", (4, 0), {"w": np.zeros((0, 5), F32)}, native=True),
    one("gemm_k0_bias", "Gemm", (4, 0), {"w": np.zeros((0, 5), F32), "b": np.arange(5, dtype=F32)},
        native=True),
    one("matmul_n0", "MatMul", (4, 8), {"w": np.zeros((8, 0), F32)}, native=True),
    one("batched_matmul_batch0", "MatMul", (0, 4, 8), {"w": FC}),
    # softmax
    one("softmax_batch0", "Softmax", (0, 10), native=True),
    one("logsoftmax_batch0", "LogSoftmax", (0, 10), native=True),
    one("softmax_empty_axis", "Softmax", (3, 0), native=True),
    one("softmax_axis1_batch0", "Softmax", (0, 4, 5), axis=1),
    # data movement
    concat("concat_batch0", (0, 3, 4), (0, 2, 4), 1),
    concat("concat_one_part_empty", (2, 0, 4), (2, 3, 4), 1),
    concat("concat_all_parts_empty", (2, 0, 4), (2, 0, 4), 1),
    concat("concat_empty_inner_axis", (2, 3, 0), (2, 5, 0), 1),
    one("transpose_batch0", "Transpose", (0, 3, 4), perm=[2, 0, 1], native=True),
    one("transpose_empty_middle", "Transpose", (2, 0, 4, 5), perm=[0, 2, 3, 1], native=True),
    one("transpose_empty_last", "Transpose", (2, 3, 0), perm=[2, 1, 0], native=True),
    one("reshape_batch0", "Reshape", (0, 3, 4), {"s": i64(0, 12)}, rank=2),
    one("reshape_minus_one_batch0", "Reshape", (0, 3, 4), {"s": i64(-1, 12)}, rank=2),
    one("flatten_batch0", "Flatten", (0, 3, 4, 4), rank=2),
    one("slice_to_empty", "Slice", (2, 5), {"st": i64(2), "en": i64(2), "ax": i64(1)}),
    one("pad_batch0", "Pad", (0, 3), {"p": i64(0, 1, 0, 1)}),
    one("pad_of_empty", "Pad", (2, 0), {"p": i64(0, 1, 0, 1)}),
    one("tile_batch0", "Tile", (0, 3), {"r": i64(2, 2)}),
    one("resize_nearest_batch0", "Resize", (0, 3, 4, 4), {"scales": np.array([1, 1, 2, 2], F32)},
        inputs=["x", "", "scales"], mode="nearest", static=True),
    one("resize_linear_batch0", "Resize", (0, 3, 4, 4), {"scales": np.array([1, 1, 2, 2], F32)},
        inputs=["x", "", "scales"], mode="linear", static=True),
    # elementwise
    one("relu_batch0", "Relu", (0, 3, 4), native=True),
    one("leaky_relu_batch0", "LeakyRelu", (0, 3, 4), native=True),
    one("clip_batch0", "Clip", (0, 3, 4), {"lo": np.array(0, F32), "hi": np.array(6, F32)},
        native=True),
    one("sigmoid_batch0", "Sigmoid", (0, 3, 4)),
    one("add_batch0", "Add", (0, 3, 4), {"one": np.ones((3, 4), F32)}),
    one("mul_broadcast_empty", "Mul", (2, 0, 4), {"two": np.full((1, 4), 2, F32)}),
    one("exp_empty", "Exp", (0,)),
    one("batchnorm_batch0", "BatchNormalization", (0, 3, 4, 4),
        {k: np.full(3, v, F32) for k, v in (("s", 2), ("b", 1), ("m", 0), ("v", 1))}),
    # reductions over nothing: onnxruntime's identities (0, -inf, inf, 1), not numpy's NaN
    one("reduce_mean_batch0", "ReduceMean", (0, 3, 4), axes=[2]),
    *(one(f"{op.lower()}_over_empty_axis", op, (2, 0, 4), axes=[1])
      for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL2")),
    one("reducesum_over_empty_axis", "ReduceSum", (2, 0, 4), {"axes": i64(1)}),
]
CNN_CASE = Case("cnn_batch0", CNN, {"x": np.zeros(CNN_INPUT, F32)}, native=True)
CASES.append(CNN_CASE)

# Shapes onnxruntime refuses: (case, what the message must say besides the node and input)
REFUSED = [
    (one("conv_window_does_not_fit", "Conv", (1, 3, 2, 8), {"w": W8}), "fits no position"),
    (one("conv_empty_height", "Conv", (1, 3, 0, 8), {"w": W8}), "fits no position"),
    (one("dwconv_window_does_not_fit", "Conv", (1, 16, 2, 300), {"w": WDW}, group=16),
     "fits no position"),
    (one("maxpool_empty_channels", "MaxPool", (1, 0, 8, 8), kernel_shape=[3, 3]),
     "only the batch"),
    (one("avgpool_empty_height", "AveragePool", (1, 3, 0, 8), kernel_shape=[3, 3], pads=[1] * 4),
     "only the batch"),
    (one("global_avgpool_empty_plane", "GlobalAveragePool", (1, 3, 0, 0)), "only the batch"),
    (one("maxpool_window_two_strides_too_tall", "MaxPool", (1, 3, 2, 8), kernel_shape=[7, 3],
         strides=[2, 1]), "overhangs"),
    (one("conv_transpose_pads_eat_the_output", "ConvTranspose", (1, 3, 1, 1),
         {"w": _randn(14, 3, 2, 3, 3)}, pads=[2] * 4), "leave output"),
]


def _ids(cases) -> list[str]:
    return [c.id for c in cases]


# onnxruntime releases whose CPU kernels leave these cases' outputs uninitialized
UNINITIALIZED = {"conv_0_input_channels": ("1.23.",), "conv_0_input_channels_big_plane": ("1.23.",)}


def reference(case: Case) -> list[np.ndarray]:
    """onnxruntime's CPU kernels (graph optimizations off: see the module docstring)."""
    if ort.__version__.startswith(UNINITIALIZED.get(case.id, ())):
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(onnx.load_from_string(case.model)).run(None, case.feeds)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4  # the refused cases log an error besides raising it
    sess = ort.InferenceSession(case.model, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, case.feeds)


def program_of(case: Case) -> Program:
    """The case's Program for its feeds' shapes, after a round trip through the file format."""
    lite, _ = import_onnx(onnx.load_from_string(case.model))
    shapes = {k: v.shape for k, v in case.feeds.items()}
    return from_bytes(to_bytes(compile_model(lite, shapes)))


def assert_all_match(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_matches(g, w, atol=1e-4, rtol=1e-4, what=what)


# ---- through onnxruntime ---------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_session_matches_onnxruntime(case):
    sess = InferenceSession(case.model, providers=NPU)
    got = sess.run(None, case.feeds)
    assert [p.device for p in sess.partition()] == ["NPU"] * len(sess.partition())
    assert_all_match(got, reference(case), case.id)


# ---- the Program on each kernel set ------------------------------------------------------------


@pytest.mark.parametrize("kernels", ["native", "numpy"])
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_program_matches_onnxruntime_on_both_kernel_sets(case, kernels):
    program = program_of(case)
    with Executor(program, pool(), kernels=KERNELS if kernels == "numpy" else None) as ex:
        if kernels == "native" and case.native and native.library() is not None:
            assert ex.native_steps == len(program.steps), [s.kernel for s in program.steps]
        got = [np.array(r) for r in ex.run([case.feeds[n] for n in ex.input_names])]
    assert_all_match(got, reference(case), f"{case.id} on the {kernels} kernels")


def test_zero_size_tensors_take_no_arena_bytes():
    program = program_of(CNN_CASE)
    internal = [s for s in program.slots if s.kind == "internal"]
    assert internal and all(s.nbytes == 0 for s in internal)
    assert program.internal_bytes == 0


# ---- shapes onnxruntime refuses ----------------------------------------------------------------


@pytest.mark.parametrize("case, says", REFUSED, ids=_ids(c for c, _ in REFUSED))
def test_shapes_onnxruntime_refuses_raise_a_typed_error(case, says):
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error types vary
        reference(case)
    with pytest.raises(InvalidModelError, match=says) as info:
        program_of(case)
    assert f"node {case.id!r}" in str(info.value)
    assert str(case.feeds["x"].shape) in str(info.value)
    sess = InferenceSession(case.model, providers=NPU)
    with pytest.raises(InvalidModelError, match=says):  # the NPU's error, typed through ORT
        sess.run(None, case.feeds)


# ---- a crash would be a signal: in a child process ---------------------------------------------


CHILD = """
import sys
import numpy as np
import provider
from provider.npu import native
provider.register()
sess = provider.InferenceSession(sys.argv[1], providers=["NPUExecutionProvider", "CPUExecutionProvider"])
(y,) = sess.run(None, {"x": np.zeros(tuple(int(d) for d in sys.argv[2].split(",")), np.float32)})
print(y.shape, y.dtype, native.library() is not None)
"""


@pytest.mark.parametrize("native_kernels", [True, False], ids=["native", "LITENPU_NATIVE=0"])
def test_cnn_on_an_empty_batch_in_a_child_process(native_kernels, tmp_path):
    path = tmp_path / "cnn.onnx"
    path.write_bytes(CNN)
    home = str(Path(provider.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": home}
    env.pop("LITENPU_NATIVE", None)
    if not native_kernels:
        env["LITENPU_NATIVE"] = "0"
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), ",".join(map(str, CNN_INPUT))],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"  # < 0: a signal
    (want,) = reference(CNN_CASE)
    uses_native = native_kernels and native.library() is not None
    assert done.stdout.strip().splitlines()[-1] == f"{want.shape} {want.dtype} {uses_native}"


# ---- device memory ---------------------------------------------------------------------------


def test_device_memory_is_back_after_the_session_is_gone():
    gc.collect()
    before = default_pool().stats().in_use
    sess = InferenceSession(CNN, providers=NPU)
    for shape in (CNN_INPUT, (2, 3, 12, 20), (0, 3, 8, 8)):  # a Program per shape
        (y,) = sess.run(None, {"x": np.zeros(shape, F32)})
        assert y.shape == (shape[0], 5)
    assert default_pool().stats().in_use > before
    del sess
    gc.collect()
    assert default_pool().stats().in_use == before
