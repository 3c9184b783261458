"""Feeds and bindings checked against a session's input and output metadata: a wrong name,
dtype or shape is a `BindingError` naming the input or output and what the model expects.

`check_feeds` names what is wrong with a `run()` feed once onnxruntime has refused it;
`CheckedIOBinding` (what `InferenceSession.io_binding()` returns) checks each buffer when it
is bound, and binds outputs to NPU memory (`bind_npu_output`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from provider import exit_gate
from provider.errors import BindingError
from provider.ort.tensors import ORT_TYPE_TO_NUMPY, bind_output


class CheckedIOBinding(ort.IOBinding):
    """IOBinding that rejects mismatched buffers with BindingError, plus `bind_npu_output`."""

    def __init__(self, session: ort.InferenceSession):
        super().__init__(session)
        self._inputs = {i.name: i for i in session.get_inputs()}
        self._outputs = {o.name: o for o in session.get_outputs()}

    def __del__(self, _free=exit_gate.free) -> None:
        _free(self)  # frees its NPU outputs (and may hold the session)

    def bind_ortvalue_input(self, name: str, ortvalue: ort.OrtValue) -> None:
        _check(self._inputs, "input", name, ORT_TYPE_TO_NUMPY.get(ortvalue.data_type()), ortvalue.shape())
        super().bind_ortvalue_input(name, ortvalue)

    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        _check(self._inputs, "input", name, arr_on_cpu.dtype, arr_on_cpu.shape)
        super().bind_cpu_input(name, arr_on_cpu)

    def bind_ortvalue_output(self, name: str, ortvalue: ort.OrtValue) -> None:
        _check(self._outputs, "output", name, ORT_TYPE_TO_NUMPY.get(ortvalue.data_type()), ortvalue.shape())
        super().bind_ortvalue_output(name, ortvalue)

    def bind_npu_output(self, name: str) -> None:
        """Let onnxruntime allocate output `name` in NPU memory at run time."""
        if name not in self._outputs:
            raise BindingError(f"unknown output {name!r}; outputs are {list(self._outputs)}")
        bind_output(self, name)


def check_feeds(inputs: Sequence, feeds: dict) -> None:
    """BindingError for an unknown or missing input or a feed of the wrong dtype/shape."""
    metas = {i.name: i for i in inputs}
    unknown = [n for n in feeds if n not in metas]
    if unknown:
        raise BindingError(f"unknown input(s) {unknown}; the model's inputs are {list(metas)}")
    missing = [n for n in metas if n not in feeds]
    if missing:
        raise BindingError(f"missing input(s) {missing}; the model's inputs are {list(metas)}")
    for name, value in feeds.items():
        if not str(metas[name].type).startswith("tensor("):
            continue  # a sequence or map input: onnxruntime alone judges those
        if isinstance(value, ort.OrtValue):
            _check(metas, "input", name, ORT_TYPE_TO_NUMPY.get(value.data_type()), value.shape())
        elif isinstance(value, (np.ndarray, np.generic)):
            _check(metas, "input", name, value.dtype, value.shape)
        elif not isinstance(value, (list, tuple, int, float, complex)):
            raise BindingError(f"input {name!r}: a {type(value).__name__} is not a tensor; "
                               "feed a numpy array, a list or an OrtValue")
        else:  # a list or Python scalar: onnxruntime converts it to the input's dtype
            try:
                shape = np.shape(value)
            except ValueError:
                raise BindingError(f"input {name!r}: a ragged sequence is not a tensor") from None
            _check(metas, "input", name, ORT_TYPE_TO_NUMPY.get(metas[name].type), shape)


def _check(metas: dict, kind: str, name: str, dtype, shape: Sequence[int]) -> None:
    """BindingError unless `name` is a model input/output and dtype/shape fit its metadata."""
    meta = metas.get(name)
    if meta is None:
        raise BindingError(f"unknown {kind} {name!r}; the model's {kind}s are {list(metas)}")
    expected = ORT_TYPE_TO_NUMPY.get(meta.type)
    if expected is not None and (dtype is None or np.dtype(dtype) != np.dtype(expected)):
        got = np.dtype(dtype) if dtype is not None else "a non-tensor value"
        raise BindingError(f"{kind} {name!r}: expected dtype {np.dtype(expected)}, got {got}")
    want, shape = list(meta.shape), list(shape)
    fixed = [isinstance(w, int) and w >= 0 for w in want]
    if len(want) == len(shape) and all(s == w for s, w, f in zip(shape, want, fixed, strict=True) if f):
        return
    spec = [w if f else "?" for w, f in zip(want, fixed, strict=True)]
    size = int(np.prod([w for w, f in zip(want, fixed, strict=True) if f]))
    small = " (buffer too small)" if kind == "output" and int(np.prod(shape)) < size else ""
    raise BindingError(f"{kind} {name!r}: expected shape {spec}, got {shape}{small}")
