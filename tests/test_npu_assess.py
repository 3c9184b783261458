"""capability.assess: for every node of a whole graph, the NPU's static check and, where the
input shapes are known, the op's lowering rule, in one pass and without packing weights.

Against the per-node trial compile it replaces: each node compiled alone (its run-time
inputs with the shapes onnxruntime computes, its compile-time constants with onnxruntime's
values) must be refused exactly when assess refuses it, with assess's reason in the
compiler's message. Crafted graphs show the rule's true reason, what stays unchecked when
shapes are unknown, and that nothing raises.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import onnx
import pytest
from npu_oracle import CONV, Graph, ort_values, randomized, rng

from converters.lite.ir import LiteModel
from converters.onnx_import import import_onnx
from provider import zoo
from provider.errors import InvalidModelError, UnsupportedError
from provider.npu import capability
from provider.npu.compiler import compile_model
from provider.npu.ops import OPS, conv
from provider.npu.ops.common import Packed
from provider.options import CompileOptions

F32 = np.float32
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
FAST_LIGHT = ("light_squeezenet", "light_shufflenet", "light_inception_v1")
SLOW_LIGHT = ("light_resnet50", "light_densenet121", "light_inception_v2", "light_vgg19",
              "light_zfnet512", "light_bvlc_alexnet")


# ---- agreement with the per-node compile ---------------------------------------------------


def static_batch(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every symbolic dim of its graph inputs set to 1 (static shapes)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in out.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.dim_value = 1
    return out


def feeds_for(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng(3).standard_normal(shape).astype(dtype)
    return feeds


def per_node_compile(lite: LiteModel, values: dict[str, np.ndarray], fp16: bool) -> dict[int, str | None]:
    """Each node compiled alone: None, or the compiler's message. Nodes with an input
    onnxruntime has no value for (a tensor the importer made) are left out."""
    consts = capability.compile_time_constants(lite)
    reasons: dict[int, str | None] = {}
    for i, node in enumerate(lite.nodes):
        tensors, inputs, shapes = list(lite.tensors), [], {}
        for t in dict.fromkeys(node.inputs):
            tensor = lite.tensors[t]
            if tensor.data is not None:
                continue
            if tensor.name not in values:
                break
            value = values[tensor.name]
            if t in consts:  # folded at compile time in the whole graph: a constant here
                tensors[t] = dataclasses.replace(tensor, data=value)
            else:
                inputs.append(t)
                shapes[tensor.name] = value.shape
        else:
            one = LiteModel(name=f"{lite.name}/{node.name}", tensors=tensors, nodes=[node],
                            inputs=inputs, outputs=list(node.outputs))
            try:
                compile_model(one, shapes, CompileOptions(fp16))
                reasons[i] = None
            except (UnsupportedError, InvalidModelError) as e:
                reasons[i] = str(e)
    return reasons


def check_agreement(model: onnx.ModelProto, fp16: bool = False) -> None:
    model = static_batch(model)
    lite, _ = import_onnx(model)
    names = {t.name for t in lite.tensors}
    onnx_names = {o for n in model.graph.node for o in n.output} & names
    values = ort_values(model, feeds_for(model), sorted(onnx_names))
    values.update((k, v) for k, v in feeds_for(model).items())
    assessed = capability.assess(lite, CompileOptions(fp16))
    alone = per_node_compile(lite, values, fp16)
    assert len(alone) >= 0.9 * len(lite.nodes), f"only {len(alone)} of {len(lite.nodes)} nodes compared"
    for i, want in alone.items():
        got, node = assessed[i], lite.nodes[i]
        assert (got is None) == (want is None), f"{node.op} {node.name!r}: assess {got!r}, compile {want!r}"
        if got is not None:
            assert got in want, f"{node.name!r}: {got!r} not in {want!r}"


def light(name: str) -> onnx.ModelProto:
    path = os.path.join(LIGHT, f"{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} not shipped with this onnx")
    return onnx.load(path)


@pytest.mark.parametrize("name", zoo.NAMES)
@pytest.mark.parametrize("fp16", [False, True])
def test_assess_agrees_with_per_node_compile_on_zoo_models(name, fp16):
    check_agreement(zoo.build(name, batch=1), fp16)


@pytest.mark.parametrize("name", [*FAST_LIGHT, *(pytest.param(n, marks=pytest.mark.slow) for n in SLOW_LIGHT)])
@pytest.mark.parametrize("weights", ["shipped", "random"])
def test_assess_agrees_with_per_node_compile_on_light_models(name, weights):
    """As shipped the weights come from ConstantOfShape, which both sides fold; a Custom
    softmax stays on CPU and the nodes after it are judged on their declared shapes."""
    model = light(name)
    check_agreement(model if weights == "shipped" else randomized(model))


# ---- crafted cases: the rule's true reason -------------------------------------------------


def test_a_rule_refusal_is_the_nodes_reason():
    """A 5x5 kernel fits no position of a 3x3 input: the static row passes, the conv rule
    refuses with onnxruntime's reason; the nodes around it are judged on their own."""
    r = rng(1)
    g = Graph("big_kernel")
    x = g.input("x", (1, 2, 3, 3))
    h = g.node("Activation", [x], {"activation_type": "RELU"})
    y = g.node("Conv2DFusion", [h, g.const("w", r.standard_normal((4, 2, 5, 5)).astype(F32))],
               {**CONV, "pad_list": [0, 0, 0, 0]})
    model = g.outputs(g.node("Activation", [y], {"activation_type": "RELU"}))
    assert capability.supported_nodes(model) == dict.fromkeys(range(3))
    reasons = capability.assess(model)
    with pytest.raises(InvalidModelError) as e:
        compile_model(model)
    assert reasons == [None, str(e.value), None]
    assert "fits no position" in reasons[1]


def shape_chain(batch) -> LiteModel:
    """x (batch, 6) -> Reshape to [Shape(x)[0], 4]: 6 elements per row do not fit 4."""
    g = Graph("chain")
    x = g.input("x", (batch, 6))
    shp = g.node("Shape", [x], dtype=np.int64)
    n = g.node("Gather", [shp, g.const("i0", np.array([0], np.int64)), g.const("ax", np.array([0], np.int32))],
               dtype=np.int64)
    tgt = g.node("Concat", [n, g.const("four", np.array([4], np.int64))], {"axis": 0}, dtype=np.int64)
    y = g.node("Reshape", [x, tgt])
    return g.outputs(g.node("Activation", [y], {"activation_type": "RELU"}))


def test_values_folded_at_compile_time_reach_the_rules():
    """The reshape target comes from a Shape chain the compiler folds: assess folds it too."""
    reasons = capability.assess(shape_chain(2))
    assert reasons[:3] == [None, None, None]
    assert "cannot reshape (2, 6) to [2, 4]" in reasons[3]
    assert reasons[4] is None  # after a refused node: its output's shape is unknown


def test_unknown_shapes_get_no_shape_dependent_check():
    """With a dynamic batch the chain is compiled per concrete shape at run time."""
    model = shape_chain("batch")
    assert capability.assess(model) == [None] * 5
    with pytest.raises(InvalidModelError, match="cannot reshape"):
        compile_model(model, {"x": (3, 6)})


def test_declared_shapes_after_a_cpu_node_are_used():
    """A node fed by a CPU node (Rsqrt) is judged on the tensor's declared static shape, as
    its partition will be compiled; an undeclared shape () leaves it unchecked."""
    for declared, refused in (((1, 2, 3, 3), True), ((), False)):
        g = Graph("after_cpu")
        x = g.input("x", (1, 2, 3, 3))
        h = g.node("Rsqrt", [x])
        g.m.tensors[g.ids[h]] = dataclasses.replace(g.m.tensors[g.ids[h]], shape=declared)
        y = g.node("MaxPoolFusion", [h], {"kernel_size": [8, 8], "strides": [2, 2], "pad": [0, 0, 0, 0],
                                         "pad_mode": "PAD", "format": "NCHW"})
        reasons = capability.assess(g.outputs(y))
        assert "Rsqrt is not in the NPU's set" in reasons[0]
        assert ("overhangs input (1, 2, 3, 3)" in (reasons[1] or "")) if refused else reasons[1] is None, reasons


def test_concat_and_matmul_mismatches():
    g = Graph("mismatch")
    a, b = g.input("a", (2, 3)), g.input("b", (4, 5))
    g.node("Concat", [a, b], {"axis": 0})
    g.node("MatMulFusion", [a, b])
    g.node("AddFusion", [a, a])
    reasons = capability.assess(g.outputs(a))
    assert "cannot concatenate [(2, 3), (4, 5)] on axis 0" in reasons[0]
    assert "cannot multiply (2, 3) by (4, 5)" in reasons[1]
    assert reasons[2] is None


def test_fp16_storage_is_judged_as_compiled():
    """In fp16 mode a graph input is cast to fp16 storage first; the rules see fp16."""
    g = Graph("fp16")
    x = g.input("x", (1, 2, 4, 4))
    w = g.const("w", rng(2).standard_normal((3, 2, 3, 3)).astype(F32))
    model = g.outputs(g.node("Conv2DFusion", [x, w], CONV))
    assert capability.assess(model, CompileOptions(enable_fp16=True)) == [None]


# ---- never raises --------------------------------------------------------------------------


def test_nothing_escapes_a_node(monkeypatch):
    """A rule crashing, a bad tensor index, an input of a type numpy lacks: each refuses
    only its own node."""
    boom = dataclasses.replace(OPS["Neg"], rule=lambda node, ins, out: 1 // 0)
    monkeypatch.setitem(OPS, "Neg", boom)
    g = Graph("crash")
    x = g.input("x", (2, 2))
    g.node("Neg", [x])
    g.node("Abs", [x])
    s = g.input("s", (2,), np.float32)
    g.m.tensors[g.ids[s]] = dataclasses.replace(g.m.tensors[g.ids[s]], type_id=0)
    g.node("Abs", [s])
    model = g.outputs(x)
    model.nodes.append(dataclasses.replace(model.nodes[1], name="bad", inputs=[99]))
    reasons = capability.assess(model)
    assert reasons[0].startswith("the NPU's lowering of this node failed unexpectedly")
    assert "ZeroDivisionError" not in reasons[0]
    assert reasons[1] is None
    assert "TypeId 0" in reasons[2]
    assert "outside [0, 5)" in reasons[3]


def test_a_cycle_keeps_the_static_reasons():
    g = Graph("cycle")
    x = g.input("x", (2,))
    a = g.node("Neg", [x])
    b = g.node("Abs", [a])
    g.m.nodes[0].inputs = [g.ids[b]]
    g.node("Rsqrt", [x])
    reasons = capability.assess(g.outputs(b))
    assert reasons[:2] == [None, None] and "Rsqrt" in reasons[2]


# ---- no weight packing ---------------------------------------------------------------------


def test_assess_packs_no_weights(monkeypatch):
    """Weights in a kernel's order, pooling divisors, resize maps are made when a Program is
    built, never by assess: counted on ResNet-50 (random weights), whose convs take the
    blocked kernel's order."""
    made, blocked = [], []
    value, direct_blocks, blocked_weights = Packed.value, conv.direct_blocks, conv.blocked_weights
    monkeypatch.setattr(Packed, "value", lambda self: made.append(self) or value(self))
    monkeypatch.setattr(conv, "direct_blocks", lambda gemm: blocked.append(1) or direct_blocks(gemm))
    monkeypatch.setattr(conv, "blocked_weights",
                        lambda gemm, kernel: blocked.append(1) or blocked_weights(gemm, kernel))
    lite, _ = import_onnx(randomized(light("light_resnet50")))
    assert capability.assess(lite) == [None] * len(lite.nodes)
    assert made == [] and blocked == []
    compile_model(lite)
    assert len(made) >= 50 and blocked  # every conv's weights, the final pool's divisors
