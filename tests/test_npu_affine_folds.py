"""Constant scales and shifts folded into the convs around them (provider/npu/affine_folds.py)
and the hard swish written as Add, Clip, Mul and Div recognised as one activation
(rewrites.fuse_hardswish): the compiled steps, and the values against onnxruntime on the
native and the numpy kernels. Models are built from code, as PaddleOCR's exporter writes
its MobileNet blocks."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from npu_oracle import assert_matches, pool, rng, run_ort
from onnx import helper, numpy_helper

from converters.onnx_import import import_onnx
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor
from provider.npu.ops import KERNELS
from provider.npu.program import from_bytes, to_bytes

F32 = np.float32
C, HW = 8, (6, 10)


class Net:
    """An ONNX graph written node by node; every tensor name is unique."""

    def __init__(self, seed: int = 0):
        self.r = rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.n = 0

    def name(self) -> str:
        self.n += 1
        return f"t{self.n}"

    def const(self, value) -> str:
        name = self.name()
        self.inits[name] = np.asarray(value, F32)
        return name

    def op(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name()
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(self, x: str, c_in: int, c_out: int, k: int, group: int = 1, pad: int = 0) -> str:
        w = (self.r.standard_normal((c_out, c_in // group, k, k)) * 0.3).astype(F32)
        b = self.r.standard_normal(c_out).astype(F32)
        return self.op("Conv", [x, self.const(w), self.const(b)], group=group, pads=[pad] * 4)

    def affine(self, x: str, scale, shift) -> str:
        return self.op("Add", [self.op("Mul", [self.const(scale), x]), self.const(shift)])

    def hardswish(self, x: str, mul_order: int = 1) -> str:
        s = self.op("Add", [x, self.const(3.0)])
        r = self.op("Clip", [s, self.const(0.0), self.const(6.0)])
        return self.op("Div", [self.op("Mul", [x, r][::mul_order]), self.const(6.0)])

    def model(self, outputs: list[str], shape=(2, C, *HW)) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "net", [helper.make_tensor_value_info("x", 1, shape)], [],
            [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
        model.graph.output.extend(inferred[o] for o in outputs)
        return model


def steps(model: onnx.ModelProto) -> list[tuple[str, str | None]]:
    program = compile_model(import_onnx(model)[0])
    return [(s.kernel, s.attrs.get("op") or s.attrs.get("activation")) for s in program.steps]


def check(model: onnx.ModelProto, shape=(2, C, *HW)) -> None:
    """The compiled model equals onnxruntime, on the native kernels and on numpy's."""
    x = rng(1).standard_normal(shape).astype(F32)
    want = run_ort(model, {"x": x})
    program = from_bytes(to_bytes(compile_model(import_onnx(model)[0])))
    for kernels in (None, KERNELS):
        with Executor(program, pool(), kernels=kernels) as ex:
            got = [np.array(o) for o in ex.run([x])]
        for g, w in zip(got, want, strict=True):
            scale = float(np.abs(w[np.isfinite(w)]).max(initial=1.0))
            assert_matches(g, w, rtol=1e-4, atol=1e-4 * max(1.0, scale))


def lcnet_block(net: Net, x: str) -> str:
    """PP-LCNet's block: a 1x1 conv and a padded 3x3 depthwise conv, each followed by a
    learnable scale and shift, a hard swish and another scale and shift."""
    h = net.affine(net.conv(x, C, C, 1), 1.7, 0.4)
    h = net.affine(net.hardswish(h), 0.3, -0.2)
    h = net.affine(net.conv(h, C, C, 3, group=C, pad=1), 2.1, 0.9)
    h = net.affine(net.hardswish(h, mul_order=-1), 0.6, 0.1)
    return net.conv(h, C, C, 1)


def test_a_mobilenet_block_of_seventeen_nodes_runs_in_four_steps():
    """The scale and shift after each conv fold into it, each hard swish becomes its conv's
    epilogue, and the scale and shift before the unpadded 1x1 conv fold into that conv; the
    pair before the padded depthwise conv (a padding zero is not shifted) is one pass."""
    net = Net(2)
    model = net.model([lcnet_block(net, "x")])
    assert steps(model) == [("conv2d", "HSWISH"), ("scale_shift", "NO_ACTIVATION"),
                            ("conv2d", "HSWISH"), ("conv2d", "NO_ACTIVATION")]
    check(model)


@pytest.mark.parametrize("shift_op", ["Add", "Sub"])
def test_a_scale_then_a_shift_is_one_pass_with_the_same_roundings(shift_op):
    """Mul then Add / Sub by per-channel constants on a tensor no conv takes: one scale_shift
    step, equal to onnxruntime's two nodes bit for bit (same two roundings)."""
    net = Net(8)
    h = net.op("Relu", ["x"])
    h = net.op("Mul", [net.const(net.r.uniform(0.5, 2.0, (1, C, 1, 1))), h])
    model = net.model([net.op(shift_op, [h, net.const(net.r.standard_normal((C, 1, 1)))])])
    assert steps(model) == [("activation", None), ("scale_shift", "NO_ACTIVATION")]
    x = rng(9).standard_normal((2, C, *HW)).astype(F32)
    program = compile_model(import_onnx(model)[0])
    with Executor(program, pool()) as ex:
        np.testing.assert_array_equal(np.array(ex.run([x])[0]), run_ort(model, {"x": x})[0])


def test_a_shift_with_its_own_activation_stays_apart():
    net = Net(10)
    h = net.op("Mul", [net.op("Tanh", ["x"]), net.const(1.5)])
    model = net.model([net.op("Relu", [net.op("Add", [h, net.const(0.25)])])])
    assert ("scale_shift", "NO_ACTIVATION") not in steps(model)
    check(model)


@pytest.mark.parametrize("ops", [("Sub", "Div"), ("Div", "Add"), ("Mul", "Sub")])
def test_per_channel_constants_fold_into_the_conv_before(ops):
    net = Net(3)
    h = net.conv("x", C, C, 3, pad=1)
    for op in ops:
        c = net.r.uniform(0.5, 2.0, (1, C, 1, 1)).astype(F32)
        h = net.op(op, [h, net.const(c)])
    model = net.model([net.op("Relu", [h])])
    assert steps(model) == [("conv2d", "RELU")]
    check(model)


@pytest.mark.parametrize("group", [1, 2])
def test_per_channel_constants_fold_into_an_unpadded_conv_after(group):
    net = Net(4)
    h = net.op("Relu", ["x"])
    h = net.op("Mul", [h, net.const(net.r.uniform(0.5, 2.0, (C, 1, 1)))])
    h = net.op("Sub", [h, net.const(net.r.standard_normal((1, C, 1, 1)))])
    model = net.model([net.conv(h, C, 4, 3, group=group)])
    assert steps(model) == [("activation", None), ("conv2d", "NO_ACTIVATION")]
    check(model)


def test_what_does_not_fold_stays_and_keeps_its_values():
    """A conv read twice, a shift before a padded conv, a constant divided by x and a
    per-channel constant that widens its operand to the channels keep their nodes."""
    net = Net(5)
    a = net.conv("x", C, C, 1)
    shared = net.op("Mul", [a, net.const(2.0)])  # a is also an output: no fold
    padded = net.conv(net.op("Add", [net.op("Relu", ["x"]), net.const(0.5)]), C, C, 3, pad=1)
    inverse = net.op("Div", [net.const(3.0), net.conv("x", C, C, 1)])
    plane = net.op("ReduceMean", ["x"], axes=[1], keepdims=1)  # (2, 1, H, W)
    wide = net.op("Mul", [plane, net.const(net.r.uniform(0.5, 2.0, (1, C, 1, 1)))])
    widened = net.conv(wide, C, C, 1)
    model = net.model([a, shared, padded, inverse, widened])
    kinds = steps(model)
    assert kinds.count(("binary", "mul")) == 2 and ("binary", "div") in kinds
    assert ("binary", "add") in kinds
    check(model)


@pytest.mark.parametrize("variant", ["intermediate_output", "not_three", "not_six", "rank_raising"])
def test_a_near_hard_swish_stays_as_written(variant):
    """No HSWISH for other constants, an intermediate read elsewhere, or a 6 of shape
    (1, 1, 1, 1, 1), which makes the result of the rank-4 x rank 5 (one Activation kept x's
    rank: a wrong output shape)."""
    net = Net(6)
    x = net.op("Relu", ["x"])
    s = net.op("Add", [x, net.const(2.0 if variant == "not_three" else 3.0)])
    r = net.op("Clip", [s, net.const(0.0), net.const(6.0)])
    m = net.op("Mul", [x, r])
    six = np.full((1, 1, 1, 1, 1), 6.0, F32) if variant == "rank_raising" else 6.0
    y = net.op("Div", [m, net.const(5.0 if variant == "not_six" else six)])
    model = net.model([y, m] if variant == "intermediate_output" else [y])
    assert all(a != "HSWISH" for _, a in steps(model))
    check(model)


def test_a_hard_swish_on_a_tensor_read_elsewhere_is_one_activation():
    net = Net(7)
    x = net.op("Relu", ["x"])
    model = net.model([net.hardswish(x), net.op("Neg", [x])])
    assert ("activation", None) in steps(model)
    assert not any(k == "binary" for k, _ in steps(model))
    check(model)


def test_a_division_by_a_zero_constant_stays_as_written():
    """Folding 1/0 into the weights would turn the conv's exact zeros into NaN: the Div
    stays, and its infinities are onnxruntime's."""
    net = Net(11)
    c = np.ones((1, C, 1, 1), F32)
    c[0, 3] = 0.0
    model = net.model([net.op("Div", [net.conv("x", C, C, 1), net.const(c)])])
    assert ("binary", "div") in steps(model)
    check(model)
