"""Recurrent layers on the NPU through the whole path (real_ops.py: an ONNX model -> the NPU
EP, every node on the NPU, one session across several input shapes, against onnxruntime
CPU, and ONNX -> Lite -> .ms -> Lite -> ONNX against the original): LSTM and GRU as Lite
states them (directions, sequence lengths, initial states, absent outputs), and the forms
Lite cannot state, carried as Custom and run by the NPU (ONNX RNN, GRU resetting before its
product, reverse with sequence lengths)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx_roundtrip import assert_close
from real_ops import NPU, F, check, model_of, randn, registered  # noqa: F401

import provider
from converters.lite import writer
from converters.onnx_import import import_onnx
from provider.npu.ops.common import InputValueError

# ---- LSTM / GRU ----------------------------------------------------------------------------


def rnn_model(op: str, *, hidden=5, size=3, direction="forward", bias=True, lengths=False,
              states=False, outputs=("y", "y_h", "y_c"), seed=0, **attrs) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if direction == "bidirectional" else 1
    inits = {"W": randn(rng, dirs, gates * hidden, size, scale=0.5),
             "R": randn(rng, dirs, gates * hidden, hidden, scale=0.5)}
    if bias:
        inits["B"] = randn(rng, dirs, 2 * gates * hidden, scale=0.3)
    names = ["x", "W", "R", "B" if bias else "", "lens" if lengths else ""]
    inputs = [helper.make_tensor_value_info("x", F, ["T", "N", size])]
    if lengths:
        inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, ["N"]))
    if states:
        for s in ("h0", "c0")[:2 if op == "LSTM" else 1]:
            names.append(s)
            inputs.append(helper.make_tensor_value_info(s, F, [dirs, "N", hidden]))
    while names[-1] == "":
        names.pop()
    count = 3 if op == "LSTM" else 2
    outs = [o if o in outputs else "" for o in ("y", "y_h", "y_c")[:count]]
    while outs[-1] == "":
        outs.pop()
    shapes = {"y": ["T", dirs, "N", hidden], "y_h": [dirs, "N", hidden], "y_c": [dirs, "N", hidden]}
    node = helper.make_node(op, names, outs, name="rnn", hidden_size=hidden, direction=direction,
                            **attrs)
    return model_of([node], inputs, [helper.make_tensor_value_info(o, F, shapes[o]) for o in outs if o],
                    inits)


def rnn_feeds(model: onnx.ModelProto, steps: int, batch: int, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else {"T": steps, "N": batch}[d.dim_param]
                for d in vi.type.tensor_type.shape.dim]
        if vi.name == "lens":
            feeds[vi.name] = rng.integers(0, steps + 1, size=dims).astype(np.int32)
            feeds[vi.name][0] = steps
        else:
            feeds[vi.name] = randn(rng, *dims)
    return feeds


RNN_CASES = {
    "lstm": dict(op="LSTM"),
    "lstm_bidirectional_states": dict(op="LSTM", direction="bidirectional", states=True),
    "lstm_no_bias_lengths": dict(op="LSTM", bias=False, lengths=True),
    "lstm_bidirectional_lengths": dict(op="LSTM", direction="bidirectional", lengths=True, states=True),
    "lstm_only_final_state": dict(op="LSTM", outputs=("y_h",)),
    "lstm_only_cell": dict(op="LSTM", outputs=("y_c",), direction="bidirectional"),
    "gru": dict(op="GRU", linear_before_reset=1),
    "gru_bidirectional_states": dict(op="GRU", direction="bidirectional", states=True,
                                     linear_before_reset=1),
    "gru_lengths": dict(op="GRU", lengths=True, linear_before_reset=1, direction="bidirectional"),
    "gru_only_state": dict(op="GRU", outputs=("y_h",), linear_before_reset=1, bias=False),
    # reverse: the forward layer between two ReverseV2 on the time axis
    "lstm_reverse_states": dict(op="LSTM", direction="reverse", states=True),
    "lstm_reverse_only_final_state": dict(op="LSTM", direction="reverse", outputs=("y_h",)),
    "gru_reverse": dict(op="GRU", direction="reverse", linear_before_reset=1),
}


@pytest.mark.parametrize("name", RNN_CASES)
def test_rnn_matches_onnxruntime_on_the_npu_and_through_ms(name):
    model = rnn_model(**RNN_CASES[name])
    check(model, [rnn_feeds(model, t, n, seed=t) for t, n in ((1, 1), (7, 3), (12, 2))],
          atol=1e-5)


# Forms Lite cannot state travel as Custom (the importer's reason is kept); the NPU runs these
CUSTOM_RNN_CASES = {
    "rnn": dict(op="RNN"),
    "rnn_relu_bidirectional_states": dict(op="RNN", activations=["Relu", "Relu"],
                                          direction="bidirectional", states=True),
    "rnn_reverse_lengths_states": dict(op="RNN", direction="reverse", lengths=True, states=True),
    "rnn_only_final_state": dict(op="RNN", outputs=("y_h",), bias=False),
    "gru_reset_before": dict(op="GRU"),
    "gru_reset_before_bidirectional_lengths": dict(op="GRU", direction="bidirectional",
                                                   lengths=True, states=True),
    "gru_reset_before_only_final_state": dict(op="GRU", outputs=("y_h",)),
    "gru_reverse_lengths": dict(op="GRU", direction="reverse", lengths=True,
                                linear_before_reset=1),
    "lstm_reverse_lengths": dict(op="LSTM", direction="reverse", lengths=True),
}


@pytest.mark.parametrize("name", CUSTOM_RNN_CASES)
def test_rnn_forms_lite_cannot_state_run_on_the_npu_as_custom(name):
    model = rnn_model(**CUSTOM_RNN_CASES[name])
    check(model, [rnn_feeds(model, t, n, seed=t) for t, n in ((1, 1), (7, 3), (12, 2))],
          atol=1e-5, ms=False)


@pytest.mark.parametrize("op", ["RNN", "LSTM"])
def test_a_partition_imported_at_compile_keeps_its_attributes(monkeypatch, op):
    """When no GetCapability import holds a partition, Compile imports it alone, from its
    nodes read in full (the bidirectional layers fail otherwise); a carried recurrence the
    NPU runs (RNN) is no reason to refuse it there either."""
    from provider.ort.capability import ImportedGraph

    monkeypatch.setattr(ImportedGraph, "partition", lambda *args: None)
    model = rnn_model(op, direction="bidirectional")
    npu = check(model, [rnn_feeds(model, 5, 2)], ms=False)
    assert npu._npu_eps[0].counters.imports == 2  # GetCapability's, then Compile's


def test_a_custom_rnn_runs_on_the_npu_from_a_ms_file(tmp_path):
    """The .ms file carries the GRU as Custom (MindSpore Lite's GRU resets after the
    product); litenpu's session runs it whole on the NPU."""
    model = rnn_model("GRU", direction="bidirectional", states=True)
    lite, report = import_onnx(model)
    assert [c.op for c in report.custom] == ["GRU"]
    path = tmp_path / "gru.ms"
    path.write_bytes(writer.dumps(lite))
    npu = provider.InferenceSession(str(path), providers=NPU)
    assert [p.device for p in npu.partition()] == ["NPU"]
    cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = rnn_feeds(model, 9, 2)
    assert_close(npu.run(None, feeds), cpu.run(None, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case,why", [
    (dict(op="LSTM", clip=2.0), "clip=2.0"),
    (dict(op="LSTM", activations=["Sigmoid", "Tanh", "Relu"]), "activations"),
    (dict(op="RNN", activations=["Sigmoid"]), "activations=['Sigmoid']"),
])
def test_rnn_forms_lite_cannot_state_stay_on_cpu_saying_why(case, why):
    model = rnn_model(**case)
    npu = check(model, [rnn_feeds(model, 4, 2)], on_npu=False, ms=False)
    [rnn] = [p for p in npu.partition() if p.name == "rnn"]
    assert rnn.device == "CPU" and why in rnn.reason


def test_rnn_sequence_length_beyond_the_sequence_is_refused_per_run():
    model = rnn_model("LSTM", lengths=True)
    npu = provider.InferenceSession(model.SerializeToString(), providers=NPU)
    feeds = rnn_feeds(model, 3, 2)
    feeds["lens"][1] = 4
    with pytest.raises(InputValueError, match=r"sequence_lens \[3, 4\] outside \[0, 3\]"):
        npu.run(None, feeds)
