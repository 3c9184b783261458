"""A session is created from the first processor, off those onnxruntime pins its spinning
intra-op workers to (provider.ort.pinned_pool)."""

from __future__ import annotations

import os

import onnxruntime as ort
import pytest
from test_ort_cache import RESNET
from test_ort_one_pass import npu_session

from provider.ort import pinned_pool

linux_cpus = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2
    or 0 not in os.sched_getaffinity(0), reason="needs sched_setaffinity, processor 0 and another")


def _processor() -> int:
    """The processor the calling thread last ran on (/proc/thread-self/stat field 39)."""
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def _move_to(cpu: int) -> None:
    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    os.sched_setaffinity(0, mask)


def test_onnxruntime_pins_workers_only_with_its_default_pool():
    options = ort.SessionOptions()
    assert pinned_pool.pins_workers(options)
    options.add_session_config_entry(pinned_pool.SPINNING_KEY, "1")
    assert pinned_pool.pins_workers(options)
    sized = ort.SessionOptions()
    sized.intra_op_num_threads = 2
    assert not pinned_pool.pins_workers(sized)
    still = ort.SessionOptions()
    still.add_session_config_entry(pinned_pool.SPINNING_KEY, "0")
    assert not pinned_pool.pins_workers(still)
    placed = ort.SessionOptions()
    placed.add_session_config_entry(pinned_pool.AFFINITY_KEY, "1")
    assert not pinned_pool.pins_workers(placed)


@linux_cpus
def test_to_first_cpu_moves_the_thread_and_keeps_its_mask():
    """Once its mask is whole again the scheduler may move the thread at any time (it did once
    in a full run of the suite on a busy host): three tries to see it on processor 0 right
    after the call, each starting from the last processor."""
    mask = os.sched_getaffinity(0)
    seen = []
    for _ in range(3):
        _move_to(max(mask))
        before = _processor()
        assert pinned_pool.to_first_cpu()
        seen.append((before, _processor()))
        assert os.sched_getaffinity(0) == mask
        if seen[-1] == (max(mask), 0):
            break
    assert seen[-1] == (max(mask), 0), seen


@linux_cpus
def test_to_first_cpu_leaves_a_thread_barred_from_processor_0_where_it_is():
    mask = os.sched_getaffinity(0)
    others = mask - {0}
    os.sched_setaffinity(0, others)
    try:
        assert not pinned_pool.to_first_cpu()
        assert os.sched_getaffinity(0) == others and _processor() != 0
    finally:
        os.sched_setaffinity(0, mask)


def _calls(monkeypatch) -> list:
    calls, real = [], pinned_pool.to_first_cpu
    monkeypatch.setattr(pinned_pool, "to_first_cpu", lambda: calls.append(1) or real())
    return calls


def test_a_session_with_onnxruntimes_default_pool_is_created_from_the_first_cpu(monkeypatch):
    calls = _calls(monkeypatch)
    npu_session(RESNET)
    assert calls == [1]


def test_a_session_whose_pool_the_caller_sized_is_created_where_it_is(monkeypatch):
    calls = _calls(monkeypatch)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    from provider.session import InferenceSession

    InferenceSession(RESNET, options, providers=["NPUExecutionProvider", "CPUExecutionProvider"])
    assert calls == []
