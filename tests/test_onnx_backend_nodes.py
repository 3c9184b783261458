"""ONNX backend node test cases through ONNX -> Lite IR -> .ms -> IR -> ONNX.

Each case's model is converted and run by onnxruntime; its outputs must equal the case's
expected outputs. Cases onnxruntime itself cannot run (or gets wrong) are not counted.
Two variants: the cases as shipped (every operand a graph input, so most parameters are
not constant and many nodes travel as Custom), and "constant operands", where parameter
inputs (axes, pads, scales, ...) become initializers so the exact Lite mappings are used.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import onnx
import pytest
from onnx_roundtrip import assert_close, roundtrip, run

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    CASES = [c for c in collect_testcases() if c.data_sets]

# Operand positions that are parameters (attribute-like) for ops with an exact mapping.
PARAMETER_INPUTS = {
    "Clip": (1, 2), "Split": (1,), "Slice": (1, 2, 3, 4), "Squeeze": (1,), "Unsqueeze": (1,),
    "Pad": (1, 2, 3), "Resize": (1, 2, 3), "ReduceMean": (1,), "ReduceSum": (1,),
    "ReduceMax": (1,), "ReduceMin": (1,), "Dropout": (1, 2), "PRelu": (1,), "TopK": (1,),
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Conv": (1, 2), "ConvTranspose": (1, 2),
    "Gemm": (1, 2), "BatchNormalization": (1, 2, 3, 4), "LayerNormalization": (1, 2),
    "InstanceNormalization": (1, 2), "LSTM": (1, 2, 3),
}
# Ops the importer must map exactly (no Custom) in at least one constant-operand case
# (the shipped LayerNormalization cases all read Mean/InvStdDev, every PRelu case has a
# non-channel slope and onnxruntime runs none of the Cast cases' opset, so those three are
# checked in test_onnx_ops.py instead).
REQUIRED = set(PARAMETER_INPUTS) - {"LayerNormalization", "PRelu"} | {
    "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Erf", "Neg", "Abs", "Relu",
    "LeakyRelu", "Sigmoid", "Tanh", "HardSwish", "Gelu", "Softmax", "LogSoftmax", "MaxPool",
    "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Concat", "Flatten", "Transpose",
    "Gather", "Shape", "Where", "Equal", "Less", "Greater", "ArgMax",
    "ConstantOfShape"} - {"ConvTranspose"}
MIN_PASS_RATE = 0.95
# Element types MindSpore has no TypeId for: such cases travel as Custom by design.
EXOTIC = re.compile(r"INT2|INT4|FLOAT4|FLOAT8|BFLOAT16|STRING|E4M3|E5M2|E8M0")


def _single_op(case) -> str | None:
    nodes = case.model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else None


def constant_operands(case):
    """The case's model with its parameter inputs turned into initializers."""
    op = _single_op(case)
    positions = PARAMETER_INPUTS.get(op, ())
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    inputs, _ = case.data_sets[0]
    node = model.graph.node[0]
    keep_inputs, feeds = [], []
    for vi, value in zip(list(model.graph.input), inputs, strict=False):
        pos = list(node.input).index(vi.name) if vi.name in node.input else -1
        if pos in positions and isinstance(value, np.ndarray | np.generic):
            model.graph.initializer.append(
                onnx.numpy_helper.from_array(np.asarray(value), vi.name))
        else:
            keep_inputs.append(vi)
            feeds.append(value)
    del model.graph.input[:]
    model.graph.input.extend(keep_inputs)
    return model, feeds


def _reference_ok(model, feeds, outputs, rtol, atol) -> bool:
    """Whether onnxruntime runs the original model and matches the expected outputs."""
    try:
        got = run(model, _named(model, feeds))
        assert_close(got, outputs, rtol, atol)
    except Exception:  # noqa: BLE001 - any failure means the case is not countable
        return False
    return True


def _named(model, feeds) -> dict:
    inits = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in inits]
    return dict(zip(names, feeds, strict=False))


# Older onnxruntimes (1.23 on Python 3.10) stop below the opsets the newest cases are
# written at; an op whose semantics did not change still runs at one of these.
FALLBACK_OPSETS = (23, 21)


def runnable(case, model, feeds):
    """`model`, or a copy at a lower default-domain opset, that onnxruntime runs to the
    expected outputs; None when there is none (the case is then not counted)."""
    _, outputs = case.data_sets[0]
    if _reference_ok(model, feeds, outputs, case.rtol, case.atol):
        return model
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    for lower in FALLBACK_OPSETS:
        if lower >= opset:
            continue
        older = onnx.ModelProto()
        older.CopyFrom(model)
        for o in older.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = lower
        older.ir_version = min(older.ir_version, 10)
        if _reference_ok(older, feeds, outputs, case.rtol, case.atol):
            return older
    return None


def check_case(case, model, feeds) -> tuple[str, str, list]:
    """'pass' / 'fail' (with reason) / 'skip' (onnxruntime cannot run the original)."""
    _, outputs = case.data_sets[0]
    model = runnable(case, model, feeds)
    if model is None:
        return "skip", "onnxruntime cannot run the original", []
    try:
        exported, _, report = roundtrip(model)
        assert_close(run(exported, _named(exported, feeds)), outputs, case.rtol, case.atol)
    except Exception as e:  # noqa: BLE001 - collected and listed below
        return "fail", f"{type(e).__name__}: {str(e)[:200]}", []
    return "pass", "", report.custom


def _sweep(cases, variant, per_op: int | None = None
           ) -> tuple[int, int, list[str], dict[str, list]]:
    """Check cases (at most `per_op` countable ones per op); (passed, counted, failures,
    Custom nodes of each passing case)."""
    passed, failures, custom = 0, [], {}
    counted: dict[str | None, int] = {}
    for case in cases:
        op = _single_op(case)
        if per_op is not None and (counted.get(op, 0) >= per_op or EXOTIC.search(case.name)):
            continue
        model, feeds = variant(case)
        status, why, carried = check_case(case, model, feeds)
        if status == "skip":
            continue
        counted[op] = counted.get(op, 0) + 1
        if status == "pass":
            passed += 1
            custom[case.name] = carried
        else:
            failures.append(f"{case.name}: {why}")
    return passed, sum(counted.values()), failures, custom


def _as_shipped(case):
    return case.model, case.data_sets[0][0]


def _report(passed: int, counted: int, failures: list[str]) -> None:
    print(f"\n{passed}/{counted} backend node cases pass "
          f"({100 * passed / max(counted, 1):.1f} %)")
    for line in failures:
        print("  FAIL", line)


def test_required_ops_map_exactly_fast_subset():
    cases = [c for c in CASES if _single_op(c) in REQUIRED]
    passed, counted, failures, custom = _sweep(cases, constant_operands, per_op=3)
    _report(passed, counted, failures)
    assert not failures
    mapped_ops = {_single_op(c) for c in cases if c.name in custom and not custom[c.name]}
    assert REQUIRED <= mapped_ops, f"never mapped exactly: {sorted(REQUIRED - mapped_ops)}"


@pytest.mark.slow
def test_all_backend_node_cases_as_shipped():
    passed, counted, failures, _ = _sweep(CASES, _as_shipped)
    _report(passed, counted, failures)
    assert counted > 1000
    assert passed / counted >= MIN_PASS_RATE


@pytest.mark.slow
def test_all_backend_node_cases_with_constant_operands():
    cases = [c for c in CASES if _single_op(c) in REQUIRED | {"ConvTranspose"}]
    passed, counted, failures, _ = _sweep(cases, constant_operands)
    _report(passed, counted, failures)
    assert passed / counted >= MIN_PASS_RATE
