"""The NPU's integer kernels against onnxruntime's CPU provider on the same quantized node:
every QDQ unit and QOperator node of `quant_cases`, int8 and uint8 activations, per-tensor
and per-channel weights, random scales and zero points (seeded). Outputs are equal code for
code, to onnxruntime's fused (QLinear*) path and to its unfused float path, except Softmax:
onnxruntime's fused QLinearSoftmax and its own unfused DequantizeLinear -> Softmax ->
QuantizeLinear differ by 1 LSB on ~8% of the codes (QLinearSoftmax, its table of
exponentials: ~15%); the NPU computes the unfused path (equal to it) and is within 1 LSB of
the fused one on at most 15% (20%). Malformed quantization
is an InvalidModelError naming the tensor."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from quant_cases import (
    CASES,
    DYNAMIC,
    FUSED_WEIGHT_MAX,
    QOPERATOR,
    build,
    build_dynamic,
    build_qoperator,
    lsb,
    run_npu,
    run_npu_all,
    run_ort,
)

from converters.errors import InvalidModelError
from converters.onnx_import import import_onnx
from provider.npu.compiler import compile_model

DTYPES = (np.int8, np.uint8)
SEEDS = (0, 1, 2)
# (fraction of codes allowed to differ by 1 LSB from onnxruntime's fused path)
FUSED_DIFFERS = {"softmax": 0.15, "softmax_inner": 0.15, "softmax_rows": 0.15,
                 "qlinear_softmax": 0.2}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_qdq_unit_matches_onnxruntime(case, dtype):
    for seed in SEEDS:
        model, feeds = build(case, dtype, seed)
        got = run_npu(model, feeds, native=False)
        unfused = run_ort(model, feeds, optimized=False)
        fused = run_ort(model, feeds)
        assert got.dtype == np.dtype(dtype) and got.shape == fused.shape
        assert lsb(got, unfused) == (0.0, 0), (case, seed)
        if FUSED_WEIGHT_MAX != 127:  # onnxruntime's fused kernels saturate on this CPU
            model, feeds = build(case, dtype, seed, FUSED_WEIGHT_MAX)
            got, fused = run_npu(model, feeds, native=False), run_ort(model, feeds)
        fraction, worst = lsb(got, fused)
        allowed = FUSED_DIFFERS.get(case, 0.0)
        assert worst <= (1 if allowed else 0) and fraction <= allowed, (case, seed, fraction)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", sorted(QOPERATOR))
def test_qoperator_node_matches_onnxruntime(case, dtype):
    for seed in SEEDS:
        model, feeds = build_qoperator(case, dtype, seed, FUSED_WEIGHT_MAX)
        fraction, worst = lsb(run_npu(model, feeds, native=False), run_ort(model, feeds))
        allowed = FUSED_DIFFERS.get(case, 0.0)
        assert worst <= (1 if allowed else 0) and fraction <= allowed, (case, seed, fraction)


def test_every_unit_is_one_quantized_lite_node():
    """DQ -> Conv -> Relu -> Q (five ONNX nodes with the weight and bias DQs) is one
    Conv2DFusion[QUANT_ALL] with RELU fused; its tensors carry their quantParams."""
    model, _ = build("conv_relu", np.uint8, 0)
    lite, report = import_onnx(model)
    assert [(n.op, n.quant_type) for n in lite.nodes] == [("Conv2DFusion", "QUANT_ALL")]
    node = lite.nodes[0]
    assert node.attrs["activation_type"] == "RELU"
    x, w, b = (lite.tensors[t] for t in node.inputs)
    assert (x.dtype, w.dtype, b.dtype) == (np.uint8, np.int8, np.int32)
    assert len(x.quant_params) == 1 and len(w.quant_params) == len(b.quant_params) == 16
    assert all(origin == [0] for origin in report.origins)  # every ONNX node is the unit


def _malformed(edit) -> onnx.ModelProto:
    model, _ = build("conv", np.int8, 0)
    edit(model)
    return model


def _set(model: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    for i, init in enumerate(model.graph.initializer):
        if init.name == name:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(value, name))


def _weight_dq(model: onnx.ModelProto):
    return next(n for n in model.graph.node
                if n.op_type == "DequantizeLinear" and n.input[0].startswith("w"))


@pytest.mark.parametrize("edit, message", [
    (lambda m: _set(m, _weight_dq(m).input[1], np.zeros(16, np.float32)), "scale 0.0"),
    (lambda m: _set(m, _weight_dq(m).input[1], -np.ones(16, np.float32)), "scale -1.0"),
    (lambda m: _set(m, _weight_dq(m).input[1], np.full(16, np.nan, np.float32)), "scale nan"),
    (lambda m: _set(m, _weight_dq(m).input[1], np.ones(3, np.float32)), "3 quantization scales"),
    (lambda m: _weight_dq(m).attribute[0].CopyFrom(onnx.helper.make_attribute("axis", 5)),
     "axis 5 out of range"),
])
def test_malformed_quantization_names_the_tensor(edit, message):
    model = _malformed(edit)
    weight = _weight_dq(model).input[0]
    with pytest.raises(InvalidModelError, match=f"tensor '{weight}'.*{message}"):
        import_onnx(model)


def test_malformed_quant_params_of_a_lite_model_name_the_tensor():
    """.ms files carry quantParams as numbers: a zero point outside the type or a bad
    scale is refused when the graph is compiled, naming the tensor."""
    model, _ = build("conv", np.int8, 0)
    for field, value, message in (("zero_point", 300, "zero point"), ("scale", 0.0, "scale 0.0"),
                                  ("scale", float("inf"), "scale inf")):
        lite, _ = import_onnx(model)
        x = lite.tensors[lite.nodes[0].inputs[0]]
        setattr(x.quant_params[0], field, value)
        with pytest.raises(InvalidModelError, match=f"tensor '{x.name}'.*{message}"):
            compile_model(lite)


# ---- export: a quantized Lite graph back to QDQ ONNX --------------------------------------

@pytest.mark.parametrize("case", sorted(CASES) + sorted(QOPERATOR))
def test_export_restores_an_equivalent_qdq_graph(case):
    """Lite -> ONNX writes every QUANT_ALL node as DequantizeLinear -> op -> QuantizeLinear:
    onnxruntime computes the same codes from it as from the source model, and importing it
    again gives the same quantized nodes (Resize's output size comes back computed from its
    input's Shape, a float Resize between explicit quantize / dequantize steps)."""
    from converters.onnx_export import export_onnx

    for dtype in DTYPES:
        model, feeds = (build if case in CASES else build_qoperator)(case, dtype, 0)
        lite, _ = import_onnx(model)
        back = export_onnx(lite)
        assert {n.op_type for n in back.graph.node} >= {"QuantizeLinear"}
        assert lsb(run_ort(back, feeds), run_ort(model, feeds)) == (0.0, 0)
        if case.startswith("resize"):
            continue
        again, _ = import_onnx(back)
        quantized = [(n.op, n.quant_type) for n in again.nodes if n.quant_type == "QUANT_ALL"]
        assert quantized == [(n.op, n.quant_type) for n in lite.nodes if n.quant_type == "QUANT_ALL"]


# ---- native kernels (csrc/qconv.c, qeltwise.c) against the numpy ones -----------------------

@pytest.fixture(params=["auto", "avx2", "portable"])
def int8_path(request):
    """The integer GEMM's code path: the CPU's best (VNNI where it has it), the AVX2 one
    forced (x86 CPUs without VNNI) and the portable C one (every other CPU)."""
    from provider.npu import native

    if native.library() is None:
        pytest.skip("the native library is not built")
    taken = native.set_int8_path(request.param)
    yield taken
    native.set_int8_path("auto")


@pytest.mark.parametrize("case", sorted(CASES) + sorted(QOPERATOR))
def test_native_integer_kernels_equal_the_numpy_ones(case, int8_path):
    for dtype in DTYPES:
        model, feeds = (build if case in CASES else build_qoperator)(case, dtype, 1)
        native_out = run_npu(model, feeds, native=True)
        assert lsb(native_out, run_npu(model, feeds, native=False)) == (0.0, 0), (case, int8_path)


@pytest.mark.parametrize("case", ["conv_depthwise", "conv_depthwise_strided",
                                  "conv_depthwise_dilated"])
@pytest.mark.parametrize("bound", [-1, 0, 1 << 20], ids=["auto", "per-channel", "blocks"])
def test_native_depthwise_forms_equal_the_numpy_kernel(case, bound):
    """The int8 depthwise conv's two native forms, blocks of 16 channels (small planes; 20
    channels: a partial block) and one channel at a time, give numpy's codes exactly."""
    from provider.npu import native

    if native.library() is None:
        pytest.skip("the native library is not built")
    try:
        assert native.set_qdw_block_pixels(bound) == (bound if bound >= 0 else 784)
        for dtype in DTYPES:
            model, feeds = build(case, dtype, 2)
            got = run_npu(model, feeds, native=True)
            assert lsb(got, run_npu(model, feeds, native=False)) == (0.0, 0), (case, dtype)
    finally:
        native.set_qdw_block_pixels(-1)


def test_an_int8_silu_is_one_table_with_the_two_steps_codes(monkeypatch):
    """x * sigmoid(x) from a QDQ model (a table step and a multiply) compiles to one table
    step (provider.npu.code_tables) whose codes are the two steps' own, and onnxruntime's."""
    from provider.npu import compiler

    for dtype in DTYPES:
        for seed in SEEDS:
            model, feeds = build("silu", dtype, seed)
            assert [s.kernel for s in compile_model(import_onnx(model)[0]).steps] == ["qlut"]
            one_table = [run_npu(model, feeds, native=native) for native in (False, True)]
            with monkeypatch.context() as m:
                m.setattr(compiler, "fuse_code_tables", lambda b, steps: steps)
                assert sorted(s.kernel for s in compile_model(import_onnx(model)[0]).steps) \
                    == ["qlut", "qmul"]
                two_steps = run_npu(model, feeds, native=False)
            for got in one_table:
                assert lsb(got, two_steps) == (0.0, 0), (dtype, seed)
            assert lsb(two_steps, run_ort(model, feeds, optimized=False)) == (0.0, 0)


def test_native_steps_cover_the_integer_gemms(int8_path):
    """Convs (depthwise, grouped, pointwise and dilated too), dense layers, casts, tables,
    adds, concats, max pooling and softmaxes of a QDQ model run on the C library."""
    from provider.npu import native_steps

    for case, kernel in (("conv_grouped", "qconv2d"), ("conv_depthwise", "qconv2d"),
                         ("gemm", "qdense"), ("sigmoid", "qlut"), ("add", None),
                         ("concat", "qconcat"), ("maxpool", "qmax_pool"),
                         ("add_same_shape", "qadd"), ("mul_same_shape", "qmul"),
                         ("add_rows", "qadd"), ("mul_rows", "qmul"),
                         ("conv_pointwise", "qconv2d"), ("conv_dilated", "qconv2d"),
                         ("globalaveragepool", "qglobal_pool"),
                         ("averagepool_whole", "qglobal_pool"),
                         ("resize_nearest", "qresize_nearest"), ("softmax_inner", "qwrap"),
                         ("softmax_rows", "qwrap"), ("matmul_runtime", "qmatmul"),
                         ("matmul_attention", "qmatmul"), ("matmul_runtime_one_b", "qmatmul"),
                         ("matmul_runtime_rows", "qmatmul"),
                         ("matmul_runtime_partial_batch", "qmatmul")):
        model, _ = build(case, np.int8, 0)
        program = compile_model(import_onnx(model)[0])
        assert kernel is None or kernel in {step.kernel for step in program.steps}, case
        for i, step in enumerate(program.steps):
            if kernel is None or step.kernel == kernel:
                # the cases that broadcast in ways the C kernels do not: numpy's kernel
                broadcast = case in ("add", "matmul_runtime_partial_batch")
                assert (native_steps.lower(program, i) is None) == broadcast, (case, step.kernel)


def test_the_quantizer_quantizes_exactly_the_ops_with_integer_kernels():
    """provider.quantize's op list is the importer's foldable set, and a QDQ unit of every
    op in it becomes a quantized node the NPU runs (the cases cover them all)."""
    from provider.npu.capability import supported_nodes
    from provider.quantize import NPU_INT8_OPS

    covered = {}
    for case in CASES:
        model, _ = build(case, np.int8, 0)
        lite, _ = import_onnx(model)
        ops = {n.op_type for n in model.graph.node} - {"QuantizeLinear", "DequantizeLinear"}
        assert all(n.quant_type == "QUANT_ALL" for n in lite.nodes), case
        assert not any(supported_nodes(lite).values()), case
        covered.update(dict.fromkeys(ops, case))
    assert NPU_INT8_OPS <= set(covered), sorted(NPU_INT8_OPS - set(covered))


# ---- dynamic quantization -------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(DYNAMIC))
def test_dynamic_quantization_matches_onnxruntime(case):
    """DynamicQuantizeLinear (codes, scale and zero point from the data), MatMulInteger and
    ConvInteger (int32 sums, zero points per tensor or per column) equal onnxruntime's."""
    for seed in SEEDS:
        model, feeds = build_dynamic(case, seed, FUSED_WEIGHT_MAX)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for got, want in zip(run_npu_all(model, feeds), session.run(None, feeds), strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
