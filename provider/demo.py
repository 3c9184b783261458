"""`litenpu demo`: the main job end to end on a zoo model, with a short report.

Steps: build MobileNetV2 (provider.zoo, batch fixed), convert it to `.ms` and back to `.onnx`, open the
`.ms` with the NPU execution provider twice (cold, then warm: from the compile cache when the
EP has the `cache_dir` option, otherwise just a second session), run it with numpy feeds and
with I/O bound to NPU OrtValues, chain a preprocessing model into it on the device, and
compare every output with onnxruntime's CPU provider on the same seeded input.

`run_demo` does the work and returns a `DemoReport`; the CLI prints `report.format()`.
Progress of the slow steps goes to the `progress` callback (the CLI writes it to stderr).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import provider
from converters.convert import convert
from provider.bench.sessions import CPU, NPU, cache_options, open_and_run
from provider.npu.memory import default_pool
from provider.zoo import build

log = logging.getLogger("litenpu.demo")

MODEL = "mobilenet_v2"
# ImageNet-style per-channel normalisation done by the chained preprocessing model.
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)

Progress = Callable[[str], None]


@dataclass
class DemoReport:
    """What the demo measured; `format()` is the text the CLI prints."""

    model: str
    batch: int
    files: dict[str, int] = field(default_factory=dict)  # file name -> bytes
    placement: str = ""
    npu_nodes: int = 0
    total_nodes: int = 0
    cache: str = ""  # where the warm session's program came from
    cold_open_s: float = 0.0
    cold_run_s: float = 0.0  # first run of the cold session
    warm_open_s: float = 0.0
    warm_run_s: float = 0.0
    max_abs_diff: dict[str, float] = field(default_factory=dict)  # run kind -> vs CPU
    copied: dict[str, int] = field(default_factory=dict)  # run kind -> CPU<->NPU bytes
    device_in_use: int = 0
    device_peak: int = 0
    device_capacity: int = 0
    seconds: float = 0.0

    def format(self) -> str:
        """The report as a few aligned lines of text."""
        mib = 2**20
        lines = [f"litenpu demo: {self.model}, batch {self.batch}",
                 "  files:       " + ", ".join(f"{n} ({b / 1024:.0f} KiB)"
                                              for n, b in self.files.items()),
                 f"  placement:   {self.placement.splitlines()[0] if self.placement else '-'}"]
        lines += [f"               {line.strip()}" for line in self.placement.splitlines()[1:]]
        lines.append(f"  sessions:    cold: open {self.cold_open_s * 1e3:.0f} ms + first run "
                     f"{self.cold_run_s * 1e3:.0f} ms; warm: open {self.warm_open_s * 1e3:.0f} ms "
                     f"+ first run {self.warm_run_s * 1e3:.0f} ms")
        lines.append(f"               ({self.cache})")
        for kind, diff in self.max_abs_diff.items():
            lines.append(f"  {kind + ':':12s} max |NPU - onnxruntime CPU| = {diff:.2e}, "
                         f"{self.copied[kind]} bytes copied CPU<->NPU")
        lines.append(f"  device:      {self.device_in_use / mib:.1f} MiB in use, peak "
                     f"{self.device_peak / mib:.1f} MiB of {self.device_capacity / mib:.0f} MiB")
        lines.append(f"  done in {self.seconds:.1f} s")
        return "\n".join(lines)


def preprocess_model(shape: list[int]) -> onnx.ModelProto:
    """raw [N, 3, H, W] -> image = (raw - MEAN) / STD: a second model to chain on the device."""
    graph = helper.make_graph(
        [helper.make_node("Sub", ["raw", "mean"], ["centered"], name="sub_mean"),
         helper.make_node("Div", ["centered", "std"], ["image"], name="div_std")],
        "preprocess",
        [helper.make_tensor_value_info("raw", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(MEAN, "mean"), numpy_helper.from_array(STD, "std")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="litenpu-demo")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def run_demo(workdir: Path, *, quick: bool = False, progress: Progress | None = None) -> DemoReport:
    """Run every demo step with files under `workdir`; the measurements as a DemoReport."""
    start = time.perf_counter()
    say = progress or (lambda _msg: None)
    workdir.mkdir(parents=True, exist_ok=True)
    batch = 1 if quick else 8
    report = DemoReport(MODEL, batch)

    with _step(say, f"building {MODEL}"):
        onnx_path = workdir / f"{MODEL}.onnx"
        onnx.save(build(MODEL, batch), onnx_path)
    with _step(say, "converting .onnx -> .ms -> .onnx"):
        ms_path, back_path = workdir / f"{MODEL}.ms", workdir / f"{MODEL}.back.onnx"
        convert(onnx_path, ms_path)
        convert(ms_path, back_path)
    report.files = {p.name: p.stat().st_size for p in (onnx_path, ms_path, back_path)}

    in_name, out_name = "image", "logits"
    shape = [batch, 3, 64, 64]
    raw = np.random.default_rng(0).random(shape, dtype=np.float32)
    image = (raw - MEAN) / STD
    expected = ort.InferenceSession(str(onnx_path), providers=CPU).run(None, {in_name: image})[0]

    cache_dir = workdir / "cache"
    options = cache_options(cache_dir, MODEL)
    with _step(say, "cold session + first run (convert .ms, partition, compile)"):
        cold = open_and_run(ms_path, options, {in_name: image})
        report.cold_open_s, report.cold_run_s = cold.open_s, cold.first_run_s
        # The placement of the model itself (a warm session runs the cached EPContext model).
        report.placement = cold.session.partition_summary()
        nodes = cold.session.partition()
        del cold  # its NPU memory goes back to the pool before the warm session
    with _step(say, "warm session + first run"):
        warm = open_and_run(ms_path, options, {in_name: image})
    session = warm.session
    report.warm_open_s, report.warm_run_s = warm.open_s, warm.first_run_s
    report.cache = _cache_summary(session)
    report.total_nodes = len(nodes)
    report.npu_nodes = sum(n.device == "NPU" for n in nodes)

    with _step(say, "plain run (numpy in, numpy out)"):
        before = provider.copy_stats()
        got = session.run(None, {in_name: image})[0]
        report.copied["plain run"] = (provider.copy_stats() - before).total_bytes
    report.max_abs_diff["plain run"] = _max_diff(got, expected)

    with _step(say, "bound run (I/O in NPU memory)"):
        x, y = provider.empty(shape), provider.empty(expected.shape)
        provider.view(x)[...] = image  # writing the view is the upload: no copy
        binding = session.io_binding()
        binding.bind_ortvalue_input(in_name, x)
        binding.bind_ortvalue_output(out_name, y)
        before = provider.copy_stats()
        session.run_with_iobinding(binding)
        report.copied["bound run"] = (provider.copy_stats() - before).total_bytes
    report.max_abs_diff["bound run"] = _max_diff(provider.view(y), expected)

    with _step(say, "chain: preprocess -> classifier on the NPU"):
        pre = provider.InferenceSession(preprocess_model(shape).SerializeToString(), providers=NPU)
        x_raw, mid, y2 = provider.empty(shape), provider.empty(shape), provider.empty(expected.shape)
        provider.view(x_raw)[...] = raw
        first, second = pre.io_binding(), session.io_binding()
        first.bind_ortvalue_input("raw", x_raw)
        first.bind_ortvalue_output("image", mid)
        second.bind_ortvalue_input(in_name, mid)
        second.bind_ortvalue_output(out_name, y2)
        before = provider.copy_stats()
        pre.run_with_iobinding(first)
        session.run_with_iobinding(second)
        report.copied["chained"] = (provider.copy_stats() - before).total_bytes
    report.max_abs_diff["chained"] = _max_diff(provider.view(y2), expected)

    stats = default_pool().stats()
    report.device_in_use, report.device_peak = stats.in_use, stats.peak
    report.device_capacity = stats.capacity
    report.seconds = time.perf_counter() - start
    return report


def _cache_summary(session: provider.InferenceSession) -> str:
    """How the warm session got its NPU programs, from its cache_stats()."""
    stats = session.cache_stats()
    statuses = ", ".join(sorted({p.status for p in stats.partitions})) or "none"
    how = {"context-model": "built from the cached EPContext model",
           "source": "model parsed again"}.get(stats.path, "no compile cache")
    return f"warm: {how}; partition programs: {statuses}"


def _max_diff(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(got, np.float64) - expected)))


@contextmanager
def _step(say: Progress, what: str) -> Iterator[None]:
    """Report `what` before and its duration after; logged at DEBUG too."""
    say(f"{what} ...")
    t = time.perf_counter()
    yield
    elapsed = time.perf_counter() - t
    say(f"{what}: {elapsed * 1e3:.0f} ms")
    log.debug("%s took %.3f s", what, elapsed)
