""".ms files written by MindSpore Lite 2.0's own converter (`models/mslite/`, made by
`models/mslite/make_fixtures.py` from the `models/` networks and op-coverage graphs) load
into Lite IR, export to ONNX and reproduce the original ONNX model's onnxruntime outputs
(atol 1e-5 / rtol 1e-4) and MindSpore Lite's own outputs; the NPU session runs them too.

The files carry what only the real converter writes: NHWC activations with OHWI/KHWC
weights, BatchNorm and constant Mul/Add folded into convs, fused activations (RELU, RELU6 on
convs and adds) and standalone ones (LEAKY_RELU, SIGMOID, TANH, GELU, HSIGMOID, HARD_TANH),
MatMulFusion with bias and transposes folded in, LayerNormFusion (epsilon 0, no affine
flag), ReduceFusion (coeff 0), TileFusion, Split and Resize with size inputs, PadFusion,
StridedSlice with axes, InstanceNorm between NHWC/NCHW transposes, LRN (empty
norm_region), Eltwise SUM, Mod, Round, CumSum, GatherNd, ScatterNdUpdate, Tril,
BroadcastTo, constant-folded Range/OneHot outputs, transposes at the graph edge (the `_nchw`
variant), float16 weights feeding float32 kernels (the `_fp16` variants, the converter's
`weight_fp16`), 8-bit per-channel weight quantization of convs, transposed convs and MatMul
operands (the `_wq` variants, which MindSpore Lite 2.0's own runtime fails to load:
compared with the float model within quantization error only), the converter without its
fusions (the `_none` variants: FusedBatchNorm, separate activations, Erf GELU), full
post-training quantization (the `_fq` variants: int8 weights per channel, int32 biases,
int8 activations, QuantDTypeCast around the ops MindSpore keeps float; within one
quantization step of MindSpore Lite's own int8 kernels on 95% of the values, a float
InstanceNorm after them amplifying some differences to a few steps), and a symbolic batch (-1 dims,
`op_dyn`, fed 3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx_roundtrip import run

from converters.lite import reader
from converters.onnx_export import export_onnx

FIXTURES = Path(__file__).resolve().parents[1] / "models" / "mslite"
# The stored original-ONNX outputs were recorded with this onnxruntime; another release sums
# in another order (seen: 1.7e-5 on one of 1024 transformer outputs with 1.23), so a run on a
# different release gets that much more absolute slack against them.
RECORDED_WITH = "1.31."
CROSS_RELEASE_ATOL = 5e-5
NAMES = sorted(p.stem for p in FIXTURES.glob("*.ms"))
NPU = ["NPUExecutionProvider", "CPUExecutionProvider"]


def _reference(name: str) -> tuple[dict, dict, dict, dict]:
    """(inputs as the .ms takes them, original ONNX outputs, MindSpore Lite's outputs (none
    for files its runtime cannot load), tolerance against the original outputs)."""
    with np.load(FIXTURES / f"{name}.npz") as z:
        parts = tuple({k.split(":", 1)[1]: z[k] for k in z.files if k.startswith(prefix)}
                      for prefix in ("in:", "out:", "mslite:", "tol:"))
    return parts[0], parts[1], parts[2], {k: float(v) for k, v in parts[3].items()}


def _lsb(name: str, output: str) -> float:
    """The last quantization step of a fully quantized fixture's output (0 for the others):
    MindSpore Lite's int8 kernels requantize in fixed point, onnxruntime's (and the NPU's)
    in float32, so their codes may differ by one."""
    if not name.endswith("_fq"):
        return 0.0
    model = reader.load(FIXTURES / f"{name}.ms")
    producers = {t: n for n in model.nodes for t in n.outputs}
    tensor = next(i for i, t in enumerate(model.tensors) if t.name == output)
    while not model.tensors[tensor].quant_params and tensor in producers:  # float ops after
        tensor = producers[tensor].inputs[0]                              # the last cast
    return max((p.scale for p in model.tensors[tensor].quant_params), default=0.0)


def _check(name: str, names: list[str], got: list[np.ndarray], want: dict, mslite: dict,
           original: dict, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Outputs against MindSpore Lite's within (rtol, atol) (one quantization step more for
    the fully quantized `_fq` fixtures), and against the original ONNX model's within the
    fixture's tolerance (at least as loose)."""
    floor = atol if ort.__version__.startswith(RECORDED_WITH) else max(atol, CROSS_RELEASE_ATOL)
    original = {"rtol": max(original["rtol"], rtol), "atol": max(original["atol"], floor)}
    assert sorted(names) == sorted(want)
    for out, value in zip(names, got, strict=True):
        assert value.shape == want[out].shape, out
        np.testing.assert_allclose(value, want[out], err_msg=f"{name}:{out}", **original)
        lsb = _lsb(name, out)
        if mslite and lsb:  # one step on 95% of the values; float ops after (InstanceNorm)
            diff = np.abs(value.astype(np.float64) - mslite[out])  # amplify some to a few
            assert np.mean(diff <= lsb * 1.0001 + atol) >= 0.95, f"{name}:{out} vs MindSpore Lite"
            assert diff.max() <= 10 * lsb, f"{name}:{out} vs MindSpore Lite: {diff.max()}"
        elif mslite:
            np.testing.assert_allclose(value, mslite[out], rtol=rtol, atol=atol,
                                       err_msg=f"{name}:{out} vs MindSpore Lite")


def test_fixtures_are_there():
    assert {"mobilenet_v2", "resnet_block", "transformer_encoder", "op_cnn", "op_cnn_nchw",
            "op_cnn2", "op_seq", "op_misc", "op_dyn", "op_cnn_fp16", "op_seq_fp16",
            "op_cnn_wq", "op_seq_wq", "op_cnn_none", "op_seq_none", "op_cnn_fq",
            "resnet_block_fq"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_converter_output_exports_to_onnx_and_matches(name):
    feeds, want, mslite, tol = _reference(name)
    exported = export_onnx(reader.load(FIXTURES / f"{name}.ms"))
    _check(name, [o.name for o in exported.graph.output], run(exported, feeds), want, mslite,
           tol)


@pytest.mark.parametrize("name", NAMES)
def test_converter_output_runs_on_the_npu_session(name):
    import provider

    feeds, want, mslite, tol = _reference(name)
    sess = provider.InferenceSession(str(FIXTURES / f"{name}.ms"), providers=NPU)
    names = [o.name for o in sess.get_outputs()]
    # the NPU's own tolerance (as in tests/test_ort_models.py): float32 sums in another order
    _check(name, names, sess.run(None, feeds), want, mslite, tol, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_converter_output_round_trips_through_our_writer(name):
    """What MindSpore's converter wrote (quant params, float16/int8 weights, NHWC formats,
    version-less header) survives our writer unchanged."""
    from lite_compare import assert_models_equal

    from converters.lite import writer

    model = reader.load(FIXTURES / f"{name}.ms")
    again = reader.loads(writer.dumps(model))
    # MindSpore's converter leaves the version empty (but when calibrating, `_fq`, with its
    # converter library preloaded); our writer stamps its own there
    assert model.version in ("", "MindSpore Lite 2.0.0")
    assert again.version == model.version if model.version else again.version.startswith("litenpu")
    again.version = model.version
    assert_models_equal(again, model)
