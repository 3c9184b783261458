"""Convert ONNX models with MindSpore Lite's own converter into the committed `.ms` fixtures.

Opt-in (not run by the tests): needs the Python 3.7 venv with mindspore_lite==2.0.0 that
`tox -e mslite` creates under .tox/mslite-py37 (its wheel ships the converter). Run

    python3 models/mslite/make_fixtures.py

For each model below (the `models/` networks at batch 1, plus small op-coverage graphs)
it writes `<name>.ms` (MindSpore Lite 2.0's converter output, `mslite_convert.py`) and
`<name>.npz` next to this file: `in:<input>` the seeded input as the .ms model takes it
(MindSpore's converter makes 4-D inputs NHWC unless asked for NCHW), `out:<output>`
onnxruntime's outputs for the original ONNX model, and `mslite:<output>` what MindSpore
Lite 2.0's runtime computes from the .ms file on the same input (checked against
onnxruntime here), and `tol:rtol` / `tol:atol` how close the .ms outputs are to the ONNX
model's: 1e-4 / 1e-5, looser for the `_fp16` / `_wq` fixtures converted with float16 /
8-bit quantized weights, the `_fq` ones fully quantized (int8 activations too, calibrated
on seeded random inputs) and the `_none` ones converted without fusions.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import models  # noqa: E402

MSLITE_PYTHON = ROOT / ".tox" / "mslite-py37" / "bin" / "python"
CONVERT = HERE / "mslite_convert.py"
RUN_MS = ROOT / "tests" / "mslite" / "run_ms.py"
OPSET = 17
DYNAMIC_BATCH = 3  # the size fed for a symbolic dim


def _batch_one(name: str) -> onnx.ModelProto:
    """A `models/` network with its symbolic batch fixed to 1 (the converter wants static
    shapes to fuse and lay out the graph)."""
    model = models.build(name)
    for vi in (*model.graph.input, *model.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = 1
    return model


def _rand(rng: np.random.Generator, *shape: int, scale: float = 0.3) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "ops", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def op_cnn() -> onnx.ModelProto:
    """NCHW layers MindSpore's converter fuses and re-lays out: Conv+BN+LeakyRelu,
    dilated depthwise Conv+Sigmoid, Conv+Tanh, channel Concat, per-channel PRelu,
    AveragePool, ConvTranspose, MaxPool, Resize, Add+Relu, InstanceNormalization, Pad, channel Slice, ReduceMean,
    GlobalAveragePool, Gemm with bias, Softmax."""
    rng = np.random.default_rng(11)
    n = helper.make_node
    inits = {
        "w0": _rand(rng, 8, 3, 3, 3), "b0": _rand(rng, 8, scale=0.1),
        "bn_s": 1 + _rand(rng, 8, scale=0.1), "bn_b": _rand(rng, 8, scale=0.1),
        "bn_m": _rand(rng, 8, scale=0.1), "bn_v": 1 + np.abs(_rand(rng, 8, scale=0.2)),
        "w1": _rand(rng, 8, 1, 3, 3), "b1": _rand(rng, 8, scale=0.1),
        "w2": _rand(rng, 8, 8, 1, 1), "b2": _rand(rng, 8, scale=0.1),
        "slope": np.abs(_rand(rng, 16, 1, 1, scale=0.2)),
        "wt": _rand(rng, 16, 4, 3, 3), "bt": _rand(rng, 4, scale=0.1),
        "scales": np.array([1, 1, 2, 2], np.float32),
        "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64),
        "st": np.array([1], np.int64), "en": np.array([3], np.int64),
        "ax1": np.array([1], np.int64),
        "fc_w": _rand(rng, 5, 4), "fc_b": _rand(rng, 5, scale=0.1),
        "in_s": 1 + _rand(rng, 4, scale=0.1), "in_b": _rand(rng, 4, scale=0.1),
    }
    nodes = [
        n("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
          strides=[1, 1], dilations=[1, 1]),
        n("BatchNormalization", ["c0", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"]),
        n("LeakyRelu", ["bn"], ["a"], alpha=0.1),
        n("Conv", ["a", "w1", "b1"], ["c1"], kernel_shape=[3, 3], group=8, dilations=[2, 2],
          strides=[1, 1], pads=[2, 2, 2, 2]),
        n("Sigmoid", ["c1"], ["b"]),
        n("Conv", ["a", "w2", "b2"], ["c2"], kernel_shape=[1, 1], strides=[1, 1],
          dilations=[1, 1], pads=[0, 0, 0, 0]),
        n("Tanh", ["c2"], ["c"]),
        n("Concat", ["b", "c"], ["d"], axis=1),
        n("PRelu", ["d", "slope"], ["e"]),
        n("AveragePool", ["e"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        n("ConvTranspose", ["p", "wt", "bt"], ["f"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
          output_padding=[1, 1], dilations=[1, 1]),
        n("MaxPool", ["f"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Resize", ["mp", "", "scales"], ["up"], mode="nearest"),
        n("Add", ["up", "f"], ["sum"]),
        n("Relu", ["sum"], ["h"]),
        n("InstanceNormalization", ["h", "in_s", "in_b"], ["inorm"], epsilon=1e-5),
        n("Pad", ["h", "pads"], ["padded"]),
        n("Slice", ["padded", "st", "en", "ax1"], ["sl"]),
        n("ReduceMean", ["sl"], ["mean"], axes=[2, 3], keepdims=0),
        n("GlobalAveragePool", ["h"], ["gap"]),
        n("Flatten", ["gap"], ["flat"]),
        n("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["prob"], axis=-1),
    ]
    return _model(nodes, [("x", [1, 3, 16, 16])], ["prob", "mean", "padded", "inorm"], inits)


def op_cnn2() -> onnx.ModelProto:
    """More layouts MindSpore's converter rewrites: SAME_UPPER strided Conv, standalone
    BatchNormalization, per-channel constant Mul/Add, ceil-mode MaxPool, padded AveragePool,
    bilinear Resize (half_pixel) to sizes, LRN, DepthToSpace, Concat over H, channel Softmax,
    ReduceMean with keepdims, Clip, Reshape of an NHWC activation, Transpose."""
    rng = np.random.default_rng(13)
    n = helper.make_node
    inits = {
        "w0": _rand(rng, 8, 3, 3, 3), "b0": _rand(rng, 8, scale=0.1),
        "bn_s": 1 + _rand(rng, 8, scale=0.1), "bn_b": _rand(rng, 8, scale=0.1),
        "bn_m": _rand(rng, 8, scale=0.1), "bn_v": 1 + np.abs(_rand(rng, 8, scale=0.2)),
        "cm": 1 + _rand(rng, 1, 8, 1, 1, scale=0.2), "ca": _rand(rng, 1, 8, 1, 1, scale=0.2),
        "sizes": np.array([1, 8, 7, 7], np.int64), "lo": np.float32(-0.5),
        "hi": np.float32(0.5), "shape": np.array([1, 8, -1], np.int64),
    }
    nodes = [
        n("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], strides=[2, 2],
          dilations=[1, 1], auto_pad="SAME_UPPER"),
        n("BatchNormalization", ["c0", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"]),
        n("Mul", ["bn", "cm"], ["m"]), n("Add", ["m", "ca"], ["a"]),
        n("MaxPool", ["a"], ["mp"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
        # MindSpore Lite's average pool never counts padding: the converter drops
        # count_include_pad=1 (0 converts faithfully).
        n("AveragePool", ["a"], ["ap"], kernel_shape=[3, 3], strides=[1, 1],
          pads=[1, 1, 1, 1]),
        n("Resize", ["mp", "", "", "sizes"], ["up"], mode="linear",
          coordinate_transformation_mode="half_pixel"),
        n("LRN", ["ap"], ["lrn"], size=3, alpha=0.3, beta=0.75, bias=1.0),
        n("DepthToSpace", ["lrn"], ["d2s"], blocksize=2, mode="DCR"),
        n("Concat", ["up", "ap"], ["cat"], axis=2),
        n("Softmax", ["cat"], ["sm"], axis=1),
        n("ReduceMean", ["sm"], ["rm"], axes=[2], keepdims=1),
        n("Clip", ["d2s", "lo", "hi"], ["cl"]),
        n("Reshape", ["a", "shape"], ["flat"]),
        n("Transpose", ["flat"], ["tr"], perm=[0, 2, 1]),
    ]
    return _model(nodes, [("x", [1, 3, 13, 13])], ["rm", "cl", "tr", "sm"], inits)


def op_seq() -> onnx.ModelProto:
    """Non-image ops: MatMul+Add (MatMulFusion with bias), Erf GELU, Split, Tanh,
    HardSigmoid, Transpose, batched MatMul, Gemm (transB), Gather, Greater/Where,
    Neg, Sub/Div/Sqrt/Abs/Pow, ReduceSum/ReduceMax, Clip, LogSoftmax,
    Unsqueeze/Tile/Squeeze."""
    rng = np.random.default_rng(12)
    n = helper.make_node
    inits = {
        "w": _rand(rng, 16, 12), "b": _rand(rng, 12, scale=0.1),
        "sqrt2": np.float32(np.sqrt(2.0)), "one": np.float32(1.0), "half": np.float32(0.5),
        "split": np.array([4, 8], np.int64), "gw": _rand(rng, 6, 16), "gb": _rand(rng, 6),
        "shape2d": np.array([16, 16], np.int64), "idx": np.array([3, 0, 5], np.int64),
        "zero": np.float32(0.0), "two": np.float32(2.0), "lo": np.float32(-0.25),
        "hi": np.float32(0.5), "ax0": np.array([0], np.int64),
        "rep": np.array([2, 1, 1, 1], np.int64), "ax_last": np.array([-1], np.int64),
    }
    nodes = [
        n("MatMul", ["x", "w"], ["mm"]), n("Add", ["mm", "b"], ["lin"]),
        n("Div", ["lin", "sqrt2"], ["g0"]), n("Erf", ["g0"], ["g1"]),
        n("Add", ["g1", "one"], ["g2"]), n("Mul", ["lin", "g2"], ["g3"]),
        n("Mul", ["g3", "half"], ["gelu"]),
        n("Split", ["gelu", "split"], ["s1", "s2"], axis=-1),
        # MindSpore Lite 2.0's converter turns any HardSigmoid into HSIGMOID, i.e. drops
        # alpha/beta for its fixed 1/6 and 0.5: only those values convert faithfully.
        n("Tanh", ["s1"], ["t"]), n("HardSigmoid", ["s1"], ["hs"], alpha=1 / 6, beta=0.5),
        n("Mul", ["t", "hs"], ["th"]),
        n("Transpose", ["s2"], ["s2t"], perm=[0, 2, 1]),
        n("MatMul", ["s2t", "s2"], ["gram"]),
        n("Reshape", ["x", "shape2d"], ["x2"]),
        n("Gemm", ["x2", "gw", "gb"], ["gemm"], transB=1),
        n("Gather", ["x", "idx"], ["ga"], axis=1),
        n("Greater", ["ga", "zero"], ["pos"]), n("Neg", ["ga"], ["neg"]),
        n("Where", ["pos", "ga", "neg"], ["wh"]),
        n("Abs", ["x"], ["ab"]), n("Sqrt", ["ab"], ["sq"]), n("Sub", ["sq", "half"], ["sb"]),
        n("Pow", ["sb", "two"], ["pw"]), n("Div", ["pw", "two"], ["dv"]),
        n("ReduceSum", ["dv", "ax_last"], ["rs"], keepdims=1),
        n("ReduceMax", ["th"], ["rmax"], axes=[1], keepdims=0),
        n("Clip", ["x", "lo", "hi"], ["cl"]),
        n("LogSoftmax", ["cl"], ["lsm"], axis=-1),
        n("Unsqueeze", ["th", "ax0"], ["us"]), n("Tile", ["us", "rep"], ["tl"]),
    ]
    outputs = ["gram", "gemm", "wh", "rs", "rmax", "lsm", "tl"]
    return _model(nodes, [("x", [2, 8, 16])], outputs, inits)


def op_misc() -> onnx.ModelProto:
    """Ops that become Lite primitives with no direct ONNX twin: Sum (Eltwise), Mod, Elu,
    Round, CumSum, GatherND, ScatterND (ScatterNdUpdate), Trilu (Tril), Softplus, Expand
    (BroadcastTo), Reciprocal, Floor; Range and OneHot of constants (folded into constant
    outputs). MindSpore Lite 2.0 has no ONNX Sign or LpNormalization parser, and no CPU
    kernel for ScatterElements."""
    rng = np.random.default_rng(14)
    n = helper.make_node
    inits = {
        "three": np.float32(3.0), "ax": np.array(1, np.int64),
        "gidx": np.array([[0, 1], [2, 3], [1, 0]], np.int64),
        "sidx": np.array([[1], [3]], np.int64), "supd": _rand(rng, 2, 6),
        "r0": np.float32(0.0), "r1": np.float32(6.0), "rd": np.float32(1.5),
        "depth": np.array(5, np.int64), "onoff": np.array([0.0, 1.0], np.float32),
        "oidx": np.array([0, 3, 4, 1], np.int64), "eshape": np.array([2, 4, 6], np.int64),
    }
    nodes = [
        n("Sum", ["x", "y"], ["s"]),
        n("Mod", ["s", "three"], ["md"], fmod=1),
        n("Elu", ["x"], ["el"], alpha=0.7),
        n("Round", ["y"], ["rnd"]),
        n("CumSum", ["x", "ax"], ["cs"]),
        n("GatherND", ["x", "gidx"], ["gnd"]),
        n("ScatterND", ["x", "sidx", "supd"], ["snd"]),
        n("Trilu", ["x"], ["tri"], upper=0),
        n("Range", ["r0", "r1", "rd"], ["rng"]),
        n("OneHot", ["oidx", "depth", "onoff"], ["oh"], axis=-1),
        n("Softplus", ["x"], ["sp"]),
        n("Expand", ["x", "eshape"], ["ex"]),
        n("Reciprocal", ["s"], ["rc"]), n("Floor", ["y"], ["fl"]),
    ]
    outputs = ["md", "el", "rnd", "cs", "gnd", "snd", "tri", "rng", "oh",
               "sp", "ex", "rc", "fl"]
    return _model(nodes, [("x", [4, 6]), ("y", [4, 6])], outputs, inits)


def op_dyn() -> onnx.ModelProto:
    """A symbolic batch through NHWC layers: Conv+Relu, MaxPool, GlobalAveragePool, Flatten,
    Gemm, and a batch-preserving Reshape (0 / -1) into a batched MatMul and Softmax."""
    rng = np.random.default_rng(15)
    n = helper.make_node
    inits = {
        "w": _rand(rng, 6, 3, 3, 3), "b": _rand(rng, 6, scale=0.1),
        "fc_w": _rand(rng, 4, 6), "fc_b": _rand(rng, 4, scale=0.1),
        "shape": np.array([0, 6, -1], np.int64), "mw": _rand(rng, 16, 5),
    }
    nodes = [
        n("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], strides=[1, 1],
          dilations=[1, 1], pads=[1, 1, 1, 1]),
        n("Relu", ["c"], ["r"]),
        n("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        n("GlobalAveragePool", ["mp"], ["gap"]), n("Flatten", ["gap"], ["flat"]),
        n("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
        n("Reshape", ["mp", "shape"], ["seq"]), n("MatMul", ["seq", "mw"], ["mm"]),
        n("Softmax", ["mm"], ["sm"], axis=-1),
    ]
    return _model(nodes, [("x", ["batch", 3, 8, 8])], ["logits", "sm"], inits)


FIXTURES: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    **{name: ((lambda name=name: _batch_one(name)), "NHWC") for name in models.NAMES},
    "op_cnn": (op_cnn, "NHWC"),
    "op_cnn_nchw": (op_cnn, "NCHW"),
    "op_cnn2": (op_cnn2, "NHWC"),
    "op_seq": (op_seq, "NHWC"),
    "op_misc": (op_misc, "NHWC"),
    "op_dyn": (op_dyn, "NHWC"),  # fed a batch of 3
    # the converter's weight_fp16: float32 weights stored as float16
    "op_cnn_fp16": (op_cnn, "NHWC"),
    "op_seq_fp16": (op_seq, "NHWC"),
    # WEIGHT_QUANT: int8 weights with per-channel QuantParams (conv, transposed conv, MatMul
    # A/B); MindSpore Lite 2.0's own runtime fails to load these files (its shared packed
    # weights find no data after dequantizing, and it dequantizes transposed-conv weights
    # along another axis than its converter quantized them), so they have no `mslite:` outputs
    "op_cnn_wq": (op_cnn, "NHWC"),
    "op_seq_wq": (op_seq, "NHWC"),
    # optimize=none: no fusions (FusedBatchNorm, separate activations, Erf GELU); the
    # converter then gives BatchNormalization without an epsilon attribute MindSpore's 1e-4
    # instead of ONNX's 1e-5, hence the looser tolerance against the ONNX model
    "op_cnn_none": (op_cnn, "NHWC"),
    "op_seq_none": (op_seq, "NHWC"),
    # FULL_QUANT (post-training quantization on CALIBRATION_SAMPLES seeded inputs): int8
    # per-channel symmetric weights, int32 biases, int8 activations, QuantDTypeCast around
    # the ops left float (MindSpore keeps Add and pooling float); NCHW inputs, so that the
    # calibration files are the ONNX model's own layout
    "resnet_block_fq": (lambda: _batch_one("resnet_block"), "NCHW"),
    "op_cnn_fq": (op_cnn, "NCHW"),
}
WEIGHT_QUANT_CONFIG = """[common_quant_param]
quant_type=WEIGHT_QUANT
bit_num=8
min_quant_weight_size=0
min_quant_weight_channel=0
"""
FULL_QUANT_CONFIG = """[common_quant_param]
quant_type=FULL_QUANT
bit_num=8

[data_preprocess_param]
calibrate_path={paths}
calibrate_size={count}
input_type=BIN

[full_quant_param]
activation_quant_method=MAX_MIN
bias_correction=true
"""
CALIBRATION_SAMPLES = 4
TOLERANCE = {"_fp16": {"rtol": 1e-2, "atol": 1e-2}, "_wq": {"rtol": 5e-2, "atol": 1e-1},
             "_none": {"rtol": 1e-3, "atol": 1e-3}, "_fq": {"rtol": 0.1, "atol": 0.5}}


def tolerance(name: str) -> dict[str, float]:
    """How close fixture `name`'s .ms outputs are to the original (float32) ONNX model's."""
    for suffix, tol in TOLERANCE.items():
        if name.endswith(suffix):
            return tol
    return {"rtol": 1e-4, "atol": 1e-5}


def _mslite(*args: str, cwd: Path, env: dict | None = None) -> None:
    proc = subprocess.run([str(MSLITE_PYTHON), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)
    if proc.returncode:
        raise RuntimeError(f"MindSpore Lite failed ({' '.join(args)}):\n{proc.stderr[-4000:]}")


def reference(name: str) -> tuple[onnx.ModelProto, dict, dict]:
    """(ONNX model, seeded inputs as the converted .ms takes them, onnxruntime's outputs)."""
    build, input_format = FIXTURES[name]
    model = build()
    rng = np.random.default_rng(0)
    feeds = {vi.name: rng.standard_normal([d.dim_value or DYNAMIC_BATCH
                                           for d in vi.type.tensor_type.shape.dim])
             .astype(np.float32) for vi in model.graph.input}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    ms_feeds = {k: v.transpose(0, 2, 3, 1).copy() if v.ndim == 4 and input_format == "NHWC"
                else v for k, v in feeds.items()}
    return model, ms_feeds, want


def convert(name: str, model: onnx.ModelProto, folder: Path) -> Path:
    """`model` converted by MindSpore Lite's converter into folder/<name>.ms."""
    onnx.save(model, folder / f"{name}.onnx")
    options = [f"input_format={FIXTURES[name][1]}"]
    if name.endswith("_fp16"):
        options.append("weight_fp16=1")
    if name.endswith("_none"):
        options.append("optimize=none")
    env = None
    if name.endswith("_wq"):
        (folder / "quant.cfg").write_text(WEIGHT_QUANT_CONFIG)
        options.append("config=quant.cfg")
    if name.endswith("_fq"):
        (folder / "quant.cfg").write_text(_calibration(model, folder))
        options.append("config=quant.cfg")
        env = _converter_env()
    _mslite(str(CONVERT), f"{name}.onnx", name, *options, cwd=folder, env=env)
    return folder / f"{name}.ms"


def _calibration(model: onnx.ModelProto, folder: Path) -> str:
    """Seeded calibration inputs as raw float32 files, one folder per input; the config."""
    rng = np.random.default_rng(100)
    paths = []
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        where = folder / "calibration" / vi.name
        where.mkdir(parents=True)
        for k in range(CALIBRATION_SAMPLES):
            rng.standard_normal(shape).astype(np.float32).tofile(where / f"{k}.bin")
        paths.append(f"{vi.name}:{where}")
    return FULL_QUANT_CONFIG.format(paths=";".join(paths), count=CALIBRATION_SAMPLES)


def _converter_env() -> dict:
    """The converter's environment for calibration: MindSpore Lite 2.0's wheel fails it
    ("ParseFromArray failed") unless its converter library is preloaded."""
    import os

    lib = subprocess.run([str(MSLITE_PYTHON), "-c", "import mindspore_lite, os; print(os.path."
                          "join(os.path.dirname(mindspore_lite.__file__), 'lib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return {**os.environ, "LD_LIBRARY_PATH": lib,
            "LD_PRELOAD": os.path.join(lib, "libmindspore_converter.so")}


def run_mslite(path: Path, feeds: dict) -> dict:
    """Outputs by name of the .ms file at `path` run by MindSpore Lite 2.0 on `feeds`."""
    np.savez(path.parent / "in.npz", **feeds)
    _mslite(str(RUN_MS), path.name, "in.npz", "out.npz", cwd=path.parent)
    with np.load(path.parent / "out.npz") as z:
        return dict(z)


def make(name: str) -> None:
    """Convert fixture `name` with MindSpore Lite's converter; write <name>.ms and .npz."""
    model, ms_feeds, want = reference(name)
    with tempfile.TemporaryDirectory() as tmp:
        path = convert(name, model, Path(tmp))
        got = {} if name.endswith("_wq") else run_mslite(path, ms_feeds)
        (HERE / path.name).write_bytes(path.read_bytes())
    if got and sorted(got) != sorted(want):
        raise RuntimeError(f"{name}: MindSpore Lite outputs {sorted(got)}, ONNX {sorted(want)}")
    for out, value in want.items() if got else ():
        diff = np.abs(got[out].astype(np.float64) - value).max()
        print(f"{name}: {out} {value.shape} MindSpore Lite vs onnxruntime max |diff| {diff:.2e}")
        np.testing.assert_allclose(got[out], value, err_msg=f"{name}:{out}", **tolerance(name))
    np.savez_compressed(HERE / f"{name}.npz", **{f"in:{k}": v for k, v in ms_feeds.items()},
                        **{f"out:{k}": v for k, v in want.items()},
                        **{f"mslite:{k}": v for k, v in got.items()},
                        **{f"tol:{k}": np.float64(v) for k, v in tolerance(name).items()})


if __name__ == "__main__":
    for fixture in sys.argv[1:] or FIXTURES:
        make(fixture)
