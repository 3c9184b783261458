"""The zoo models on onnxruntime's CPU provider and on the NPU EP, measured in one run.

Per model (batch fixed to 1, the same seeded input for both): median run time with numpy I/O
on each provider and with I/O bound to NPU memory, and on the peer (`provider.bench.peers`)
when there is one, all timed in alternating blocks (`timing.interleaved_blocks`); the speed
ratio paired per turn (`timing.paired_ratio`); session
creation + first run for onnxruntime, the NPU cold and the NPU warm (a second session, built
from the stored EPContext model by the compile cache); CPU<->NPU bytes copied per run; the max
abs difference.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import provider
from provider.bench.peers import Peer, PeerError
from provider.bench.sessions import CPU, cache_options, open_and_run
from provider.bench.timing import interleaved_blocks, paired_ratio, timed_block
from provider.zoo import NAMES, build


@dataclass(frozen=True)
class ModelResult:
    """One zoo model's numbers (milliseconds, bytes)."""

    model: str
    ort_run_ms: float
    npu_run_ms: float
    npu_bound_ms: float
    ort_session_ms: float
    npu_cold_ms: float
    npu_warm_ms: float
    copied_plain: int
    copied_bound: int
    max_abs_diff: float
    speed_ratio: float  # onnxruntime CPU time / NPU time, numpy I/O (> 1: the NPU is faster)
    peer_run_ms: float | None = None  # the peer column; None when it did not run
    peer_max_abs_diff: float | None = None
    peer_note: str = ""  # why the peer did not run this model


def measure(name: str, runs: int, workdir: Path, peer: Peer | None = None) -> ModelResult:
    """Measure zoo model `name` (see the module docstring), with `peer` as one more column."""
    path = workdir / f"{name}.onnx"
    onnx.save(build(name, batch=1), path)
    cpu = ort.InferenceSession(str(path), providers=CPU)
    meta = cpu.get_inputs()[0]
    shape = list(meta.shape)
    feeds = {meta.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    out_name = cpu.get_outputs()[0].name

    start = time.perf_counter()
    expected = ort.InferenceSession(str(path), providers=CPU).run(None, feeds)[0]
    ort_session_ms = (time.perf_counter() - start) * 1e3
    options = cache_options(workdir / "cache", name)
    npu_cold_s = open_and_run(path, options, feeds).total_s
    warm = open_and_run(path, options, feeds)
    npu_warm_s, npu = warm.total_s, warm.session

    before = provider.copy_stats()
    got = npu.run(None, feeds)[0]
    copied_plain = (provider.copy_stats() - before).total_bytes
    x, y = provider.empty(shape), provider.empty(expected.shape)
    provider.view(x)[...] = feeds[meta.name]
    binding = npu.io_binding()
    binding.bind_ortvalue_input(meta.name, x)
    binding.bind_ortvalue_output(out_name, y)
    before = provider.copy_stats()
    npu.run_with_iobinding(binding)
    copied_bound = (provider.copy_stats() - before).total_bytes
    diff = max(float(np.max(np.abs(got - expected))),
               float(np.max(np.abs(provider.view(y) - expected))))

    timers = [timed_block(lambda: cpu.run(None, feeds)), timed_block(lambda: npu.run(None, feeds)),
              timed_block(lambda: npu.run_with_iobinding(binding))]
    peer_diff, peer_note = None, ""
    if peer is not None:
        try:
            opened = peer.open(path, feeds)
            timers.append(opened.timer)
            peer_diff = float(np.max(np.abs(opened.outputs[0] - expected)))
        except PeerError as e:
            peer_note = str(e)
    turns = interleaved_blocks(timers, runs)
    medians = [statistics.median(t for block in blocks for t in block) for blocks in turns]

    return ModelResult(
        model=name, ort_run_ms=medians[0], npu_run_ms=medians[1], npu_bound_ms=medians[2],
        ort_session_ms=ort_session_ms, npu_cold_ms=npu_cold_s * 1e3, npu_warm_ms=npu_warm_s * 1e3,
        copied_plain=copied_plain, copied_bound=copied_bound, max_abs_diff=diff,
        speed_ratio=paired_ratio(turns[0], turns[1]),
        peer_run_ms=medians[3] if len(medians) > 3 else None, peer_max_abs_diff=peer_diff,
        peer_note=peer_note)


def measure_all(names: tuple[str, ...] = NAMES, runs: int = 20,
                progress: Callable[[str], None] | None = None,
                peer: Peer | None = None) -> list[ModelResult]:
    """`measure` every model in `names`, files in a temporary directory."""
    results = []
    with tempfile.TemporaryDirectory(prefix="litenpu-bench-") as tmp:
        for name in names:
            if progress:
                progress(f"model {name}")
            results.append(measure(name, runs, Path(tmp), peer))
            if progress and results[-1].peer_note:
                progress(f"{name}: no peer column: {results[-1].peer_note}")
    return results

