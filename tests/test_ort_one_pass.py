"""One pass from model to Program: GetCapability imports the graph once and asks the device's
own rules; Compile cuts each partition out of that import and compiles it once per shape."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_models import make_model, reference
from test_ort_cache import IMAGE, RESNET

import provider
from provider.errors import UnsupportedError
from provider.npu.ops import OPS
from provider.npu.program import Program
from provider.ort import capability, compute
from provider.ort.capability import group
from provider.session import InferenceSession


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def npu_session(model: bytes, **options) -> InferenceSession:
    return InferenceSession(model, providers=[("NPUExecutionProvider", options),
                                              "CPUExecutionProvider"])


def test_n_partitions_one_import_n_compiles_and_none_on_a_warm_hit(tmp_path):
    options = {"disable_ops": "Add", "cache_dir": str(tmp_path)}  # five NPU partitions
    cold = npu_session(RESNET, **options)
    (ep,) = cold._npu_eps
    partitions = len({n.partition for n in cold.partition() if n.device == "NPU"})
    assert partitions == 5
    assert (ep.counters.imports, ep.counters.compiles) == (1, partitions)
    warm = npu_session(RESNET, **options)
    assert {p.status for p in warm.cache_stats().partitions} == {"hit"}
    assert (warm._npu_eps[0].counters.imports, warm._npu_eps[0].counters.compiles) == (1, 0)
    np.testing.assert_allclose(warm.run(None, {"image": IMAGE})[0],
                               reference(RESNET, {"image": IMAGE})[0], atol=1e-4, rtol=1e-3)


def _spy(monkeypatch, module, name: str) -> list:
    """Record the calls of module.name (still made)."""
    calls, real = [], getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_a_graph_the_npu_takes_whole_is_compiled_by_get_capability(monkeypatch):
    assessed = _spy(monkeypatch, capability, "assess")
    read = _spy(monkeypatch, compute, "read_graph")
    validated = _spy(monkeypatch, Program, "validate")
    sess = npu_session(RESNET)
    (ep,) = sess._npu_eps
    assert {n.device for n in sess.partition()} == {"NPU"}
    assert (ep.counters.imports, ep.counters.compiles) == (1, 1)
    assert (assessed, read) == ([], [])  # the compile answered for every node; Compile adopted it
    assert len(validated) == 1  # by the compiler; its Executor trusts it
    (kernel,) = ep.kernels.values()
    (compiled,) = kernel._programs.values()
    assert compiled.executor.program.name == kernel.name  # named as Compile names its Programs
    assert [p.status for p in sess.cache_stats().partitions] == ["off"]
    np.testing.assert_allclose(sess.run(None, {"image": IMAGE})[0],
                               reference(RESNET, {"image": IMAGE})[0], atol=1e-4, rtol=1e-3)
    clone = sess.clone()  # its family holds the Program: nothing compiled again
    assert clone._npu_eps[0].counters.compiles == 0
    np.testing.assert_array_equal(clone.run(None, {"image": IMAGE})[0],
                                  sess.run(None, {"image": IMAGE})[0])


def test_a_whole_graph_compiled_by_get_capability_fills_the_cache_and_is_not_compiled_on_a_hit(
        monkeypatch, tmp_path):
    assessed = _spy(monkeypatch, capability, "assess")
    cold = npu_session(RESNET, cache_dir=str(tmp_path))
    assert [p.status for p in cold.cache_stats().partitions] == ["miss"]
    assert (cold._npu_eps[0].counters.compiles, assessed) == (1, [])
    assert cold.cache_stats().partitions[0].compile_seconds > 0  # GetCapability's compile
    expected = cold.run(None, {"image": IMAGE})[0]
    del cold
    validated = _spy(monkeypatch, Program, "validate")
    warm = npu_session(RESNET, cache_dir=str(tmp_path))  # the entry exists: mapped, not compiled
    assert [p.status for p in warm.cache_stats().partitions] == ["hit"]
    assert len(validated) == 1  # when the entry's Program was read
    assert warm._npu_eps[0].counters.compiles == 0
    np.testing.assert_array_equal(warm.run(None, {"image": IMAGE})[0], expected)


def test_a_whole_graph_with_an_input_no_node_reads_is_adopted(monkeypatch):
    """The fused node has only the inputs its nodes read (old models list unused ones)."""
    assessed = _spy(monkeypatch, capability, "assess")
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("a", "x", "b")]
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
                       info, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    sess = npu_session(model)
    assert (sess._npu_eps[0].counters.compiles, assessed) == (1, [])
    feeds = {n: np.full((2, 3), k - 1, np.float32) for k, n in enumerate(("a", "x", "b"))}
    np.testing.assert_array_equal(sess.run(None, feeds)[0], reference(model, feeds)[0])


@pytest.mark.parametrize("error", [UnsupportedError("refused by the test's rule"),
                                   RuntimeError("a bug of the rule")], ids=["refusal", "bug"])
def test_a_whole_graph_a_rule_refuses_is_assessed_node_by_node(monkeypatch, error):
    def refuse(node, ins, out_types):
        raise error

    monkeypatch.setitem(OPS, "Neg", dataclasses.replace(OPS["Neg"], rule=refuse))
    assessed = _spy(monkeypatch, capability, "assess")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    model = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                        helper.make_node("Neg", ["r"], ["n"], name="neg"),
                        helper.make_node("Relu", ["n"], ["y"], name="relu2")], [x], [y])
    sess = npu_session(model)
    where = {n.name: n for n in sess.partition()}
    assert len(assessed) == 1
    expected = str(error) if isinstance(error, UnsupportedError) else "a litenpu bug"
    assert where["neg"].device == "CPU" and expected in where["neg"].reason
    assert where["relu"].device == where["relu2"].device == "NPU"
    assert sess._npu_eps[0].counters.compiles == 2  # the two partitions, each once
    feeds = {"x": np.arange(-4, 4, dtype=np.float32).reshape(2, 4)}
    np.testing.assert_array_equal(sess.run(None, feeds)[0], reference(model, feeds)[0])


def test_dynamic_shapes_compile_once_per_shape():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
                       [x], [y])
    sess = npu_session(model)
    (ep,) = sess._npu_eps
    for n in (1, 3, 1, 3, 2):
        feeds = {"x": np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)}
        np.testing.assert_array_equal(sess.run(None, feeds)[0], reference(model, feeds)[0])
    assert (ep.counters.imports, ep.counters.compiles) == (1, 3)


@pytest.mark.parametrize("whole", [True, False])
def test_a_dynamic_graph_the_npu_takes_whole_is_not_read_again_by_compile(monkeypatch, whole):
    """GetCapability hands Compile the whole graph's cut, its weights copied (onnxruntime's
    are views it frees), so Compile does not read the graph again to find its partition; a
    graph split between NPU and CPU is still found by reading it."""
    read = _spy(monkeypatch, compute, "read_graph")
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4]) for n in ("a", "x")]
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 8, "w")
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["m"]),
                        helper.make_node("Relu", ["m"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
                       info, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], [w])
    sess = npu_session(model, **({} if whole else {"disable_ops": "Neg"}))
    (ep,) = sess._npu_eps
    assert (len(read), ep.counters.imports) == (0 if whole else 1, 1)
    (kernel,) = ep.kernels.values()
    constants = [t.data for t in kernel.source._lite.tensors if t.data is not None]
    assert constants and all(c.flags.owndata for c in constants)
    for n in (1, 3, 1):
        feeds = {k: np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
                 for k in ("a", "x")}
        np.testing.assert_allclose(sess.run(None, feeds)[0], reference(model, feeds)[0],
                                   rtol=1e-6, atol=1e-6)
    assert ep.counters.compiles == 2


def _shape_chain(split: bool) -> bytes:
    """y = expand(x, concat(shape(x)[0], 4)): the target shape is computed from Shape, which
    the NPU folds per concrete shape, unless a CPU node (`split`) cuts the chain."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
             helper.make_node("Concat", ["n1", "four"], ["target"], name="concat", axis=0),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Expand", ["r", "target"], ["y"], name="expand")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([4], np.int64), "four")]
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits)


@pytest.mark.parametrize("split", [False, True], ids=["chain on the NPU", "chain cut"])
def test_a_value_only_its_partition_can_fold(split):
    model = _shape_chain(split)
    sess = npu_session(model, **({"disable_ops": "Unsqueeze"} if split else {}))
    where = {n.name: n for n in sess.partition()}
    if split:  # the shape reaches Expand from the CPU: computed at run time
        assert where["expand"].device == "CPU"
        assert "computed at run time in its partition" in where["expand"].reason
    else:  # folded per concrete shape: one partition with the shape arithmetic in it
        assert {n.device for n in where.values()} == {"NPU"}
        assert {n.partition for n in where.values()} == {0}
    for n in (2, 5):
        feeds = {"x": np.arange(n, dtype=np.float32).reshape(n, 1) - 1}
        np.testing.assert_array_equal(sess.run(None, feeds)[0], reference(model, feeds)[0])


def test_group_counts_values_a_control_flow_body_reads():
    # 0:S a -> 1:CPU If (its body reads a) -> 2:S reads 1's output: fusing 0 and 2 would
    # make a cycle through 1, which onnxruntime refuses to fuse
    ins = [["x"], ["cond", "a"], ["b"]]  # the If's body reads `a`: an implicit input
    outs = [["a"], ["b"], ["c"]]
    assert group(ins, outs, [True, False, True]) == [[0], [2]]


SLOWER = 0.06


def test_counters_split_a_creation_into_disjoint_stages(monkeypatch):
    """Each stage's seconds are its own: Compile's `kernel` leaves out the compiles it ran
    (five partitions compiled in Compile, each made 60 ms slower here: far more than the
    rest of Compile takes, even on a loaded machine)."""
    from provider.ort import partition_source  # noqa: PLC0415

    real = partition_source.compile_model

    def slow(*args, **kwargs):
        time.sleep(SLOWER)
        return real(*args, **kwargs)

    monkeypatch.setattr(partition_source, "compile_model", slow)
    start = time.perf_counter()
    sess = npu_session(RESNET, disable_ops="Add")
    wall = time.perf_counter() - start
    seconds = sess._npu_eps[0].counters.seconds
    assert {"read", "import", "assess", "compile", "kernel"} <= set(seconds)
    assert seconds["compile"] >= 5 * SLOWER
    assert 0 <= seconds["kernel"] < SLOWER
    assert sum(seconds.values()) <= wall
