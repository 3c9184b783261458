"""A voice-activity-style speech RNN with a dynamic batch and length: raw audio through a
Conv1d front end (two strided 1-D convs with Relu), a GRU and an LSTM whose initial states
are model inputs and whose last states are outputs (a streaming VAD carries them from one
chunk to the next), then a linear layer and a Sigmoid per frame.

Inputs `audio` [batch, samples] (a multiple of 4), `gru_state` [1, batch, HIDDEN],
`lstm_state` [2, batch, HIDDEN] (h then c) -> `speech` [batch, samples / 4],
`gru_state_out`, `lstm_state_out` (the same shapes as the states).
"""

from __future__ import annotations

import onnx

from provider.zoo._builder import GraphBuilder, tensor
from provider.zoo.inputs import Feed, Inputs

CHANNELS, HIDDEN = 32, 32

INPUTS = Inputs(
    (Feed("audio", "uniform", low=-1.0), Feed("gru_state", "uniform", low=-0.5, high=0.5),
     Feed("lstm_state", "uniform", low=-0.5, high=0.5)),
    tuple({"audio": (batch, samples), "gru_state": (1, batch, HIDDEN),
           "lstm_state": (2, batch, HIDDEN)} for batch, samples in ((1, 256), (2, 1024))))


def _conv1d(b: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int) -> str:
    w = b.weight((cout, cin, k), name="conv1d_w")
    bias = b.weight((cout,), scale=0.1, name="conv1d_b")
    return b.op("Relu", [b.op("Conv", [x, w, bias], kernel_shape=[k], strides=[stride],
                              pads=[k // 2, k // 2])])


def build() -> onnx.ModelProto:
    b = GraphBuilder("speech_rnn", seed=15)
    h = b.op("Unsqueeze", ["audio", b.ints([1], "axes")])  # [batch, 1, samples]
    h = _conv1d(b, _conv1d(b, h, 1, 16, 5, 2), 16, CHANNELS, 3, 2)
    frames = b.op("Transpose", [h], perm=[2, 0, 1])  # [time, batch, CHANNELS]
    y, gru_h = b.rnn("GRU", frames, CHANNELS, HIDDEN, initial=["gru_state"])
    h0, c0 = b.op("Split", ["lstm_state", b.ints([1, 1], "split")], n_out=2, axis=0)
    y, lstm_h, lstm_c = b.rnn("LSTM", b.op("Squeeze", [y, b.ints([1], "axes")]), HIDDEN, HIDDEN,
                              initial=[h0, c0])
    logits = b.dense(b.op("Squeeze", [y, b.ints([1], "axes")]), HIDDEN, 1)  # [time, batch, 1]
    speech = b.op("Sigmoid", [b.op("Transpose", [b.op("Squeeze", [logits, b.ints([2], "axes")])],
                                   perm=[1, 0])])
    b.rename(speech, "speech")
    b.rename(gru_h, "gru_state_out")
    b.rename(b.op("Concat", [lstm_h, lstm_c], axis=0), "lstm_state_out")
    return b.model(
        [tensor("audio", ["batch", "samples"]), tensor("gru_state", [1, "batch", HIDDEN]),
         tensor("lstm_state", [2, "batch", HIDDEN])],
        [tensor("speech", ["batch", "frames"]), tensor("gru_state_out", [1, "batch", HIDDEN]),
         tensor("lstm_state_out", [2, "batch", HIDDEN])],
        doc="Speech RNN (VAD-style): Conv1d front end + GRU + LSTM with states "
            "(litenpu family model)")
