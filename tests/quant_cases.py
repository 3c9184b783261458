"""Quantized single-op ONNX models for the integer-kernel tests: QDQ units
(`DequantizeLinear -> op -> QuantizeLinear`) and QOperator nodes with random scales, zero
points and weights (seeded), integer codes in and out; and running them on the NPU
(import, compile, execute) and on onnxruntime's CPU provider (its fused QLinear path and,
with graph optimizations off, its unfused float path)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from converters.onnx_import import import_onnx
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor
from provider.npu.ops import KERNELS
from provider.quantize.saturation import onnxruntime_saturates

OPSET = 19
TYPES = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}
# onnxruntime's fused int8 kernels saturate on x86 CPUs without VNNI (u8 x s8 pairs summed in
# 16 bits; provider.quantize.saturation): comparisons with them there use 7-bit weights, its
# documented remedy, so that they compare the NPU with exact integer results. Comparisons
# with its unfused float path, which is exact everywhere, keep full-range weights. Whole
# models compared with it are quantized with `reduce_range` there.
REDUCE_RANGE = onnxruntime_saturates()
FUSED_WEIGHT_MAX = 64 if REDUCE_RANGE else 127


class Graph:
    """A QDQ model under construction: integer graph inputs, constants, nodes."""

    def __init__(self, rng: np.random.Generator, dtype, weight_max: int = 127):
        self.rng = rng
        self.dtype = np.dtype(dtype)
        self.weight_max = weight_max  # 64: onnxruntime's 7-bit weights (see FUSED_WEIGHT_MAX)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def params(self, lo: float = 0.005, hi: float = 0.2, dtype=None) -> tuple[np.float32, int]:
        info = np.iinfo(dtype or self.dtype)
        scale = np.float32(np.exp(self.rng.uniform(np.log(lo), np.log(hi))))
        zp = int(self.rng.integers(info.min // 2, info.max // 2 + 1)) if info.min < 0 else \
            int(self.rng.integers(64, 192))
        return scale, zp

    def dq(self, q: str, scale, zp, dtype=None, axis: int | None = None) -> str:
        out = self.name("dq")
        zp_arr = np.asarray(zp, dtype or self.dtype)
        kw = {} if axis is None else {"axis": axis}
        self.nodes.append(helper.make_node("DequantizeLinear", [q, self.const(np.asarray(scale, np.float32)),
                                                               self.const(zp_arr)], [out], **kw))
        return out

    def q(self, x: str, scale, zp, out: str | None = None) -> str:
        out = out or self.name("q")
        self.nodes.append(helper.make_node("QuantizeLinear", [x, self.const(np.float32(scale)),
                                                             self.const(np.asarray(zp, self.dtype))], [out]))
        return out

    def input(self, shape, dtype=None) -> tuple[str, np.float32, int]:
        """A graph input of codes with its (scale, zero point); its random feed."""
        dtype = np.dtype(dtype or self.dtype)
        name = self.name("x")
        self.inputs.append(helper.make_tensor_value_info(name, TYPES[dtype], list(shape)))
        info = np.iinfo(dtype)
        self.feeds[name] = self.rng.integers(info.min, info.max + 1, shape).astype(dtype)
        scale, zp = self.params(dtype=dtype)
        return name, scale, zp

    def activation(self, shape, dtype=None) -> str:
        """A dequantized graph input (the float value an op reads)."""
        name, scale, zp = self.input(shape, dtype)
        return self.dq(name, scale, zp, dtype)

    def weight_codes(self, shape, lowest: int = -127) -> np.ndarray:
        """Random int8 weight codes in [lowest, 127], or within +-weight_max when reduced."""
        low, high = (lowest, 127) if self.weight_max == 127 else (-self.weight_max, self.weight_max)
        return self.rng.integers(low, high + 1, shape).astype(np.int8)

    def weight(self, shape, per_channel: bool, axis: int = 0) -> tuple[str, np.ndarray]:
        """Symmetric int8 weights, per tensor or per channel along `axis`, dequantized."""
        w = self.weight_codes(shape)
        count = shape[axis] if per_channel else 1
        scale = np.exp(self.rng.uniform(np.log(0.002), np.log(0.05), count)).astype(np.float32)
        zp = np.zeros(count, np.int8)
        if not per_channel:
            scale, zp = scale[0], zp[0]
        return self.dq(self.const(w, "w"), scale, zp, np.int8, axis if per_channel else None), scale

    def bias(self, count: int, x_scale, w_scale) -> str:
        b = self.rng.integers(-20000, 20000, count).astype(np.int32)
        scale = (np.float32(x_scale) * np.asarray(w_scale, np.float32)).astype(np.float32)
        scale = np.broadcast_to(scale, (count,)).copy()
        return self.dq(self.const(b, "b"), scale, np.zeros(count, np.int32), np.int32, 0)

    def op(self, op_type: str, inputs, domain: str = "", outputs: int = 1, **attrs) -> str:
        outs = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, domain=domain, **attrs))
        return outs[0]

    def model(self, output: str) -> onnx.ModelProto:
        """The model whose output is `output` (typed and shaped by shape inference)."""
        opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
        graph = helper.make_graph(self.nodes, "quant_case", self.inputs, [], self.inits)
        inferred = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=opsets))
        y = next((vi for vi in inferred.graph.value_info if vi.name == output), None)
        if y is None:  # com.microsoft ops: onnx infers no shapes (symbolic dims of rank 4)
            y = helper.make_tensor_value_info(output, TYPES[self.dtype], ["n", "c", "h", "w"])
        graph = helper.make_graph(self.nodes, "quant_case", self.inputs, [y], self.inits)
        m = helper.make_model(graph, opset_imports=opsets)
        m.ir_version = 9
        return m


def run_ort(model: onnx.ModelProto, feeds: dict, optimized: bool = True) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def run_npu(model: onnx.ModelProto, feeds: dict, *, native: bool = True) -> np.ndarray:
    """Import, compile and run on the NPU; every node must be a quantized NPU step."""
    lite, _ = import_onnx(model)
    program = compile_model(lite)
    executor = Executor(program) if native else Executor(program, kernels=KERNELS)
    return executor.run([feeds[lite.tensors[t].name] for t in lite.inputs])[0]


def lsb(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """(fraction of codes that differ, largest difference in codes)."""
    d = np.abs(a.astype(np.int64) - b.astype(np.int64))
    return float((d > 0).mean()) if d.size else 0.0, int(d.max(initial=0))


# ---- the cases: each builds one quantized op on `g` and returns its float output -----------


def conv(g: Graph, *, c=8, o=16, hw=9, k=3, group=1, stride=1, pads=1, per_channel=True,
         relu=False, bias=True, dilation=1):
    x, sx, zx = g.input((1, c, hw, hw))
    xf = g.dq(x, sx, zx)
    w, sw = g.weight((o, c // group, k, k), per_channel)
    inputs = [xf, w] + ([g.bias(o, sx, sw)] if bias else [])
    y = g.op("Conv", inputs, pads=[pads] * 4, strides=[stride, stride], group=group,
             kernel_shape=[k, k], dilations=[dilation, dilation])
    return g.op("Relu", [y]) if relu else y


def gemm(g: Graph, *, m=4, k=32, n=24, per_channel=True, trans_b=1):
    x, sx, zx = g.input((m, k))
    w, sw = g.weight((n, k) if trans_b else (k, n), per_channel, 0 if trans_b else 1)
    return g.op("Gemm", [g.dq(x, sx, zx), w, g.bias(n, sx, sw)], transB=trans_b)


def matmul_const(g: Graph, *, per_channel=False):
    x, sx, zx = g.input((2, 5, 32))
    w, _ = g.weight((32, 12), per_channel, 1)
    return g.op("MatMul", [g.dq(x, sx, zx), w])


def matmul_runtime(g: Graph):
    return g.op("MatMul", [g.activation((2, 5, 16)), g.activation((2, 16, 7))])


def binary(op: str):
    def case(g: Graph):
        return g.op(op, [g.activation((2, 8, 6, 6)), g.activation((1, 8, 1, 6))])
    return case


def silu(g: Graph):
    """x * sigmoid(x) as onnxruntime's quantizer writes it: the Sigmoid quantized on its own."""
    x = g.activation((2, 4, 5, 7))
    scale, zp = g.params(0.003, 0.01)
    s = g.dq(g.q(g.op("Sigmoid", [x]), scale, zp), scale, zp)
    return g.op("Mul", [x, s])


def concat(g: Graph):
    return g.op("Concat", [g.activation((1, 4, 5, 5)), g.activation((1, 6, 5, 5)),
                           g.activation((1, 3, 5, 5))], axis=1)


def pool(op: str, **attrs):
    def case(g: Graph):
        return g.op(op, [g.activation((2, 6, 11, 11))], **attrs)
    return case


def unary(op: str, shape=(2, 3, 7, 9), **attrs):
    def case(g: Graph):
        return g.op(op, [g.activation(shape)], **attrs)
    return case


def resize(mode: str, shape=(1, 4, 5, 6), scale: float = 2):
    def case(g: Graph):
        scales = g.const(np.array([1, 1, scale, scale], np.float32))
        return g.op("Resize", [g.activation(shape), "", scales], mode=mode)
    return case


def conv_transpose(g: Graph):
    x, sx, zx = g.input((1, 6, 5, 5))
    w, sw = g.weight((6, 4, 3, 3), True, 1)
    return g.op("ConvTranspose", [g.dq(x, sx, zx), w], strides=[2, 2], pads=[1, 1, 1, 1])


def clip(g: Graph):
    lo, hi = g.const(np.float32(-0.5)), g.const(np.float32(1.5))
    return g.op("Clip", [g.activation((2, 3, 7, 9)), lo, hi])


CASES = {
    "conv": conv,
    "conv_per_tensor": lambda g: conv(g, per_channel=False),
    "conv_relu": lambda g: conv(g, relu=True),
    "conv_strided_1x1": lambda g: conv(g, k=1, stride=2, pads=0, bias=False),
    # strided convs whose taps read every phase plane (csrc/qconv.c's shifted form)
    "conv_strided_3x3": lambda g: conv(g, c=8, o=20, k=3, stride=2, pads=1, hw=13),
    "conv_strided_3x3_unpadded": lambda g: conv(g, c=5, o=8, k=3, stride=2, pads=0, hw=12),
    "conv_strided_5x5_3": lambda g: conv(g, c=6, o=10, k=5, stride=3, pads=2, hw=14),
    "conv_strided_2x2": lambda g: conv(g, c=7, o=9, k=2, stride=2, pads=0, hw=11),
    "conv_pointwise": lambda g: conv(g, c=6, o=10, k=1, pads=0),
    "conv_dilated": lambda g: conv(g, c=5, o=9, k=3, pads=2, dilation=2, hw=11),
    "conv_depthwise": lambda g: conv(g, c=16, o=16, group=16),
    "conv_depthwise_strided": lambda g: conv(g, c=24, o=24, group=24, stride=2, hw=12, k=5,
                                             pads=2),
    # 20 channels: a block of 16 and a partial one; dilated, on a larger plane
    "conv_depthwise_dilated": lambda g: conv(g, c=20, o=20, group=20, hw=13, dilation=2,
                                             pads=2),
    "conv_grouped": lambda g: conv(g, c=8, o=12, group=4, stride=2),
    "conv_deep": lambda g: conv(g, c=96, o=8, k=3, hw=6),
    "gemm": gemm,
    "gemm_b_not_transposed": lambda g: gemm(g, trans_b=0),
    "gemm_per_tensor": lambda g: gemm(g, per_channel=False),
    # weights over 1 MiB as 16-bit pairs: the AVX2 GEMM passes over its 38 output-channel
    # blocks in parts (16, 16 and the last 6, one of 4 channels), see csrc/qconv.c qgemm
    "gemm_wide": lambda g: gemm(g, m=3, k=4096, n=300),
    "matmul_const": matmul_const,
    "matmul_const_per_column": lambda g: matmul_const(g, per_channel=True),
    "matmul_runtime": matmul_runtime,
    # attention's scores and their product with V: (1, heads, S, D) x (1, heads, D, S)
    "matmul_attention": lambda g: g.op("MatMul", [g.activation((1, 4, 9, 70)),
                                                  g.activation((1, 4, 70, 9))]),
    # one B matrix for every batch, and a batch broadcast along one dim only (numpy's kernel)
    "matmul_runtime_one_b": lambda g: g.op("MatMul", [g.activation((3, 5, 16)),
                                                      g.activation((16, 7))]),
    # one matrix of 40 rows: split in row blocks over the cores
    "matmul_runtime_rows": lambda g: g.op("MatMul", [g.activation((1, 40, 48)),
                                                     g.activation((1, 48, 20))]),
    "matmul_runtime_partial_batch": lambda g: g.op("MatMul", [g.activation((2, 3, 5, 8)),
                                                              g.activation((2, 1, 8, 4))]),
    "add": binary("Add"),
    "mul": binary("Mul"),
    "add_same_shape": lambda g: g.op("Add", [g.activation((2, 8, 6, 6)), g.activation((2, 8, 6, 6))]),
    "mul_same_shape": lambda g: g.op("Mul", [g.activation((2, 8, 6, 6)), g.activation((2, 8, 6, 6))]),
    # big enough to split across tasks (each one's run of elements starts mid-tensor)
    "add_split": lambda g: g.op("Add", [g.activation((2, 16, 48, 48)), g.activation((2, 16, 48, 48))]),
    # one operand repeated along the other's leading dims (a detector's per-anchor scale)
    "add_rows": lambda g: g.op("Add", [g.activation((2, 8, 36)), g.activation((8, 36))]),
    "mul_rows": lambda g: g.op("Mul", [g.activation((1, 36)), g.activation((3, 4, 36))]),
    "silu": silu,
    "concat": concat,
    "maxpool": pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "maxpool_uneven": pool("MaxPool", kernel_shape=[2, 3], strides=[1, 2], pads=[0, 2, 1, 1]),
    "maxpool_ceil": pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    "averagepool": pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "globalaveragepool": pool("GlobalAveragePool"),
    # a window over the whole plane, unpadded (ResNet's last pool): run as a global one
    "averagepool_whole": pool("AveragePool", kernel_shape=[11, 11]),
    "globalmaxpool": pool("GlobalMaxPool"),
    "resize_nearest": resize("nearest"),
    # rows split across tasks mid-plane (a task's first row is made, not copied); 3x: no
    # column doubling
    "resize_nearest_split": resize("nearest", (1, 16, 40, 40)),
    "resize_nearest_3x": resize("nearest", (1, 8, 20, 20), 3),
    "resize_linear": resize("linear"),
    "relu": unary("Relu"),
    "clip": clip,
    "sigmoid": unary("Sigmoid"),
    "tanh": unary("Tanh"),
    "hardswish": unary("HardSwish"),
    "hardsigmoid": unary("HardSigmoid", alpha=1 / 6),
    "leakyrelu": unary("LeakyRelu", alpha=0.1),
    "softmax": unary("Softmax", axis=-1),
    # more lines than the native kernel takes side by side (64): along an inner axis (a
    # detector's box distribution) and over the last axis
    "softmax_inner": unary("Softmax", (2, 5, 9, 17), axis=1),
    "softmax_rows": unary("Softmax", (3, 50, 40), axis=-1),
    "conv_transpose": conv_transpose,
}


def build(case: str, dtype, seed: int, weight_max: int = 127) -> tuple[onnx.ModelProto, dict]:
    """The QDQ model of `case` with activations of `dtype`, and its feeds."""
    g = Graph(np.random.default_rng(seed), dtype, weight_max)
    y = CASES[case](g)
    scale, zp = g.params(0.01, 0.3)
    out = g.q(y, scale, zp, out="y")
    return g.model(out), g.feeds


# ---- QOperator nodes: integer codes in, integer codes out ---------------------------------


def _sz(g: Graph, scale, zp, dtype=None) -> list[str]:
    return [g.const(np.float32(scale)), g.const(np.asarray(zp, dtype or g.dtype))]


def qlinear_conv(g: Graph, *, group=1, c=8, o=16):
    x, sx, zx = g.input((1, c, 9, 9))
    w = g.weight_codes((o, c // group, 3, 3))
    sw = np.exp(g.rng.uniform(np.log(0.002), np.log(0.05), o)).astype(np.float32)
    b = g.rng.integers(-20000, 20000, o).astype(np.int32)
    sy, zy = g.params(0.01, 0.3)
    return g.op("QLinearConv", [x, *_sz(g, sx, zx), g.const(w, "w"), g.const(sw),
                                g.const(np.zeros(o, np.int8)), *_sz(g, sy, zy), g.const(b, "b")],
                pads=[1, 1, 1, 1], group=group)


def qlinear_matmul(g: Graph):
    a, sa, za = g.input((3, 16))
    w = g.weight_codes((16, 8))
    sy, zy = g.params(0.01, 0.3)
    return g.op("QLinearMatMul", [a, *_sz(g, sa, za), g.const(w, "w"), g.const(np.float32(0.01)),
                                  g.const(np.int8(0)), *_sz(g, sy, zy)])


def qlinear_binary(op: str):
    def case(g: Graph):
        a, sa, za = g.input((2, 4, 5, 5))
        b, sb, zb = g.input((2, 4, 5, 5))
        sy, zy = g.params(0.01, 0.3)
        return g.op(op, [a, *_sz(g, sa, za), b, *_sz(g, sb, zb), *_sz(g, sy, zy)],
                    domain="com.microsoft")
    return case


def qlinear_unary(op: str, **attrs):
    def case(g: Graph):
        x, sx, zx = g.input((2, 4, 7, 7))
        sy, zy = g.params(0.01, 0.3)
        return g.op(op, [x, *_sz(g, sx, zx), *_sz(g, sy, zy)], domain="com.microsoft", **attrs)
    return case


def qlinear_concat(g: Graph):
    sy, zy = g.params(0.01, 0.3)
    parts = []
    for c in (3, 5):
        x, sx, zx = g.input((1, c, 4, 4))
        parts += [x, *_sz(g, sx, zx)]
    return g.op("QLinearConcat", [*_sz(g, sy, zy), *parts], domain="com.microsoft", axis=1)


QOPERATOR = {
    "qlinear_conv": qlinear_conv,
    "qlinear_conv_depthwise": lambda g: qlinear_conv(g, group=8, c=8, o=8),
    "qlinear_matmul": qlinear_matmul,
    "qlinear_add": qlinear_binary("QLinearAdd"),
    "qlinear_mul": qlinear_binary("QLinearMul"),
    "qlinear_concat": qlinear_concat,
    "qlinear_global_average_pool": qlinear_unary("QLinearGlobalAveragePool"),
    "qlinear_average_pool": qlinear_unary("QLinearAveragePool", kernel_shape=[3, 3],
                                          strides=[2, 2]),
    "qlinear_sigmoid": qlinear_unary("QLinearSigmoid"),
    "qlinear_leaky_relu": qlinear_unary("QLinearLeakyRelu", alpha=0.2),
    "qlinear_softmax": qlinear_unary("QLinearSoftmax", opset=13, axis=-1),
}


def build_qoperator(case: str, dtype, seed: int,
                    weight_max: int = 127) -> tuple[onnx.ModelProto, dict]:
    """The QOperator model of `case` with activations of `dtype`, and its feeds."""
    g = Graph(np.random.default_rng(seed), dtype, weight_max)
    return g.model(QOPERATOR[case](g)), g.feeds


# ---- whole models ---------------------------------------------------------------------------


def _constants_and_producers(model: onnx.ModelProto) -> tuple[dict[str, np.ndarray], dict]:
    """The graph's initializers as arrays, and the node that writes each value."""
    return ({i.name: numpy_helper.to_array(i) for i in model.graph.initializer},
            {o: n for n in model.graph.node for o in n.output})


def output_scales(model: onnx.ModelProto) -> dict[str, float]:
    """Each graph output's last quantization step: the scale of the DequantizeLinear that
    produces it (or feeds, through float ops, the one that does); for 1-LSB comparisons."""
    inits, producer = _constants_and_producers(model)
    scales = {}
    for out in model.graph.output:
        node, seen = producer.get(out.name), 0
        while node is not None and node.op_type != "DequantizeLinear" and seen < 8:
            node, seen = producer.get(node.input[0]), seen + 1
        if node is not None and node.input[1] in inits:
            scales[out.name] = float(np.max(inits[node.input[1]]))
    return scales


# ops through which a value's error is at most the sum of its inputs' (adds, selects, moves)
_ADDITIVE = {"Add", "Sub", "Relu", "Max", "Min", "Clip", "MaxPool", "AveragePool",
             "GlobalAveragePool", "GlobalMaxPool", "Transpose", "Reshape", "Flatten",
             "Identity", "Concat", "Squeeze", "Unsqueeze"}


def code_slack(model: onnx.ModelProto) -> dict[str, int]:
    """Per graph output made by a QuantizeLinear from float ops that only add, select or
    move values (`_ADDITIVE`): how many codes it may differ from another faithful
    implementation. Each quantized tensor feeding that float segment may be one code off
    (float32 and exact integer sums round a tie either way), so the segment's value may
    differ by the sum of their steps: 1 + floor(sum / the output's step) codes. Outputs not
    listed keep one code."""
    inits, producer = _constants_and_producers(model)
    slack = {}
    for out in model.graph.output:
        quantize = producer.get(out.name)
        if quantize is None or quantize.op_type != "QuantizeLinear" or \
                quantize.input[1] not in inits:
            continue
        total, stack, seen = 0.0, [quantize.input[0]], set()
        while stack:
            name = stack.pop()
            node = producer.get(name)
            if name in seen or name in inits or node is None:  # constants, graph inputs
                continue
            seen.add(name)
            if node.op_type == "DequantizeLinear":
                if node.input[0] not in inits and node.input[1] in inits:
                    total += float(np.max(inits[node.input[1]]))
            elif node.op_type in _ADDITIVE and len(seen) <= 64:
                stack += [i for i in node.input if i]
            else:
                total = 0.0
                break
        if total:
            slack[out.name] = 1 + int(total / float(np.min(inits[quantize.input[1]])))
    return slack


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


# ---- dynamic quantization: DynamicQuantizeLinear, MatMulInteger, ConvInteger -------------


def _float_input(g: Graph, shape, scale: float = 3.0) -> str:
    name = g.name("f")
    g.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
    g.feeds[name] = (g.rng.standard_normal(shape) * scale + g.rng.uniform(-1, 1)).astype(np.float32)
    return name


def dynamic_quantize(g: Graph):
    return g.op("DynamicQuantizeLinear", [_float_input(g, (3, 40))], outputs=3)


def matmul_integer(g: Graph, per_column: bool = False):
    a, _, za = g.input((2, 5, 24), np.uint8)
    w = g.weight_codes((24, 10), lowest=-128)
    zw = g.rng.integers(-5, 6, 10 if per_column else ()).astype(np.int8)
    return g.op("MatMulInteger", [a, g.const(w, "w"), g.const(np.uint8(za)), g.const(zw)])


def conv_integer(g: Graph):
    x, _, zx = g.input((1, 4, 7, 7), np.uint8)
    w = g.rng.integers(0, 256, (6, 4, 3, 3)).astype(np.uint8)
    return g.op("ConvInteger", [x, g.const(w, "w"), g.const(np.uint8(zx)), g.const(np.uint8(128))],
                pads=[1, 1, 1, 1])


DYNAMIC = {
    "dynamic_quantize": dynamic_quantize,
    "matmul_integer": matmul_integer,
    "matmul_integer_per_column": lambda g: matmul_integer(g, per_column=True),
    "conv_integer": conv_integer,
}


def build_dynamic(case: str, seed: int, weight_max: int = 127) -> tuple[onnx.ModelProto, dict]:
    """The dynamic-quantization model of `case` (every output of its node), its feeds."""
    g = Graph(np.random.default_rng(seed), np.uint8, weight_max)
    DYNAMIC[case](g)
    outputs = list(g.nodes[-1].output)
    opsets = [helper.make_opsetid("", OPSET)]
    graph = helper.make_graph(g.nodes, "dynamic_case", g.inputs, [], g.inits)
    inferred = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=opsets))
    infos = {vi.name: vi for vi in inferred.graph.value_info}
    graph = helper.make_graph(g.nodes, "dynamic_case", g.inputs, [infos[o] for o in outputs],
                              g.inits)
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model, g.feeds


def run_npu_all(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """Every output of `model` run on the NPU (numpy kernels)."""
    lite, _ = import_onnx(model)
    with Executor(compile_model(lite), kernels=KERNELS) as executor:
        return [np.array(v) for v in executor.run([feeds[lite.tensors[t].name] for t in lite.inputs])]
