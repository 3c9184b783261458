"""A subprocess peer's worker (see `provider.bench.peers`): one onnxruntime session, held in
a venv of its own, and blocks of its runs timed when asked.

Run by path with that venv's Python: it imports numpy, onnxruntime and, by path,
`timing.py` beside it (standard library only), never litenpu. One JSON request per line on
stdin, one JSON answer per line on stdout; arrays travel in `.npz` files named in them;
whatever the libraries print goes to stderr. Requests:

* `{"op": "hello"}`: the onnxruntime distribution, its version and available providers;
* `{"op": "open", "model", "provider", "options", "feeds", "outputs"}`: a session on the
  model with that provider first (CPU after it), run once on the feeds (an `.npz` file):
  its providers; the outputs are saved in order in the `outputs` `.npz` file;
* `{"op": "block", "settle", "size"}`: `settle` untimed runs, then `size` timed ones (the
  same `timed_block` as in-process timers): the ms of each.

A failed request answers `{"error": "..."}`; end of input ends the worker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import onnxruntime as ort

DISTRIBUTIONS = ("onnxruntime-openvino", "onnxruntime")


def _timing():
    """provider/bench/timing.py, loaded by path (litenpu is not installed in this venv)."""
    spec = importlib.util.spec_from_file_location("litenpu_bench_timing",
                                                  Path(__file__).with_name("timing.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _distribution() -> str:
    for name in DISTRIBUTIONS:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return f"onnxruntime {ort.__version__}"


class Worker:
    """The session and the timer of the model last opened."""

    def __init__(self) -> None:
        self.timed_block = _timing().timed_block
        self.timer = None

    def hello(self) -> dict:
        return {"distribution": _distribution(), "onnxruntime": ort.__version__,
                "providers": ort.get_available_providers()}

    def open(self, model: str, provider: str, options: dict, feeds: str, outputs: str) -> dict:
        self.timer = None
        session_options = ort.SessionOptions()
        session_options.log_severity_level = 3
        session = ort.InferenceSession(model, session_options, providers=[
            (provider, options), "CPUExecutionProvider"])
        with np.load(feeds, allow_pickle=False) as saved:
            arrays = dict(saved)
        np.savez(outputs, *session.run(None, arrays))
        self.timer = self.timed_block(lambda: session.run(None, arrays))
        return {"providers": session.get_providers()}

    def block(self, settle: int, size: int) -> dict:
        if self.timer is None:
            raise RuntimeError("no model is open")
        return {"ms": self.timer(settle, size)}


def main() -> int:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # library output must not mix in
    worker = Worker()
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        try:
            answer = getattr(worker, op)(**request) if op in ("hello", "open", "block") \
                else {"error": f"unknown op {op!r}"}
        except Exception as e:  # noqa: BLE001 - every failure goes back to the caller
            answer = {"error": f"{type(e).__name__}: {e}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
