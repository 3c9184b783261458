"""Property test: random chains of mapped ops survive ONNX -> IR -> .ms -> IR -> ONNX with
onnxruntime giving the same outputs as on the original model."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx_roundtrip import assert_close, roundtrip, run

UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf", "Exp", "HardSwish", "Softsign"]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min"]


@st.composite
def chains(draw):
    rank = draw(st.integers(2, 4))
    shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    steps = draw(st.lists(st.sampled_from(["unary", "binary", "transpose", "softmax", "reduce",
                                           "concat", "clip"]), min_size=1, max_size=6))
    seed = draw(st.integers(0, 2**16))
    return shape, steps, seed, draw(st.randoms(use_true_random=False))


def _build(shape, steps, seed, rnd):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    cur, cur_shape = "x", list(shape)
    for i, step in enumerate(steps):
        out = f"v{i}"
        rank = len(cur_shape)
        if step == "unary":
            nodes.append(helper.make_node(rnd.choice(UNARY), [cur], [out]))
        elif step == "binary":
            # A constant operand broadcast from the right over a random suffix of dims.
            k = rnd.randint(0, rank)
            c = (rng.standard_normal(cur_shape[rank - k:]) + 2.5).astype(np.float32)
            inits.append(numpy_helper.from_array(c, f"c{i}"))
            nodes.append(helper.make_node(rnd.choice(BINARY), [cur, f"c{i}"], [out]))
        elif step == "transpose":
            perm = list(range(rank))
            rnd.shuffle(perm)
            nodes.append(helper.make_node("Transpose", [cur], [out], perm=perm))
            cur_shape = [cur_shape[p] for p in perm]
        elif step == "softmax":
            nodes.append(helper.make_node("Softmax", [cur], [out], axis=rnd.randint(-rank, rank - 1)))
        elif step == "reduce":
            axes = sorted(rnd.sample(range(rank), rnd.randint(1, rank)))
            a = numpy_helper.from_array(np.array(axes, np.int64), f"axes{i}")
            inits.append(a)
            nodes.append(helper.make_node("ReduceSum", [cur, f"axes{i}"], [out], keepdims=1))
            cur_shape = [1 if d in axes else s for d, s in enumerate(cur_shape)]
        elif step == "concat":
            axis = rnd.randint(0, rank - 1)
            nodes.append(helper.make_node("Concat", [cur, cur], [out], axis=axis))
            cur_shape[axis] *= 2
        else:
            lo = numpy_helper.from_array(np.array(-0.5, np.float32), f"lo{i}")
            hi = numpy_helper.from_array(np.array(rnd.choice([0.5, 6.0]), np.float32), f"hi{i}")
            inits += [lo, hi]
            nodes.append(helper.make_node("Clip", [cur, f"lo{i}", f"hi{i}"], [out]))
        cur = out
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, cur_shape)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, rng.standard_normal(shape).astype(np.float32)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_random_chains_round_trip(chain):
    model, x = _build(*chain)
    exported, _, report = roundtrip(model)
    assert not report.custom, report.custom
    assert_close(run(exported, {"x": x}), run(model, {"x": x}))
