"""The arena planner: hand-written timelines with exact offsets, edge cases, a property test."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.errors import InvalidModelError
from provider.npu.planner import align_up, lifetimes, place


def test_lifetimes_first_and_last_use():
    # step 0: +0 +1 | step 1: 1 -> +2, -1 | step 2: 0, 2 -> +3, -0 -2 -3 ; tensor 4 unused
    steps = [([0], [1]), ([1], [2]), ([0, 2], [3])]
    assert lifetimes(steps, 5) == [(0, 2), (0, 1), (1, 2), (2, 2), None]


def test_lifetimes_empty_and_bad_index():
    assert lifetimes([], 2) == [None, None]
    with pytest.raises(InvalidModelError, match=r"step 1 uses tensor 7"):
        lifetimes([([0], [1]), ([7], [0])], 2)


def test_chain_reuses_dead_buffers():
    # +0 +1 -0 +2 -1 -2  (t0: steps 0..1, t1: 1..2, t2: 2..3)
    offsets, arena = place([(100, 0, 1), (200, 1, 2), (100, 2, 3)])
    # t1 (largest) at 0; t0 overlaps it -> after it at align(200)=256; t2 too, and t0 is dead
    assert offsets == [256, 0, 256]
    assert arena == 356


def test_best_fit_prefers_the_smallest_gap():
    # step 0: +A +B +C +D -A -C | steps 1..9: +E +F with B, D live
    requests = [
        (1000, 0, 0),  # A
        (900, 0, 9),  # B
        (800, 0, 0),  # C
        (700, 0, 9),  # D
        (600, 1, 9),  # E: gaps [0,1024) and [1984,2816); the smaller one fits
        (500, 1, 9),  # F: gaps [0,1024) and [2624,2816); only the first fits
    ]
    offsets, arena = place(requests)
    assert offsets == [0, 1024, 1984, 2816, 1984, 0]
    assert arena == 2816 + 700


def test_alignment_is_respected_and_configurable():
    # +0 +1 +2 (all live together, odd sizes)
    offsets, arena = place([(10, 0, 0), (10, 0, 0), (10, 0, 0)], alignment=16)
    assert offsets == [0, 16, 32]
    assert arena == 42
    offsets, _ = place([(10, 0, 0), (10, 0, 0)])
    assert offsets == [0, 64]


def test_ties_are_broken_by_first_use_then_index():
    # +1 -1 | +0 +2 -2 | -0 : equal sizes; t0 and t2 both start at step 1
    offsets, arena = place([(64, 1, 2), (64, 0, 0), (64, 1, 1)])
    # order: t1 (first=0), t0 (first=1, index 0), t2 -> t0 at 0, t2 at 64
    assert offsets == [0, 0, 64]
    assert arena == 128


def test_edge_cases_empty_zero_sized_single():
    assert place([]) == ([], 0)
    assert place([(0, 0, 3)]) == ([0], 0)
    assert place([(100, 2, 2)]) == ([0], 100)
    # a zero-sized tensor takes no room next to a live one
    assert place([(0, 0, 1), (64, 0, 1)]) == ([0, 0], 64)


@pytest.mark.parametrize(
    "requests, alignment, message",
    [
        ([(-1, 0, 0)], 64, "request 0"),
        ([(8, 3, 2)], 64, "first <= last"),
        ([(8, 0, 0)], 48, "power of two"),
        ([(8, 0, 0)], 0, "power of two"),
    ],
)
def test_bad_requests_are_clear_errors(requests, alignment, message):
    with pytest.raises(InvalidModelError, match=message):
        place(requests, alignment)


def test_align_up():
    assert [align_up(v, 64) for v in (0, 1, 64, 65)] == [0, 64, 64, 128]


requests_strategy = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(0, 20), st.integers(0, 10)).map(
        lambda r: (r[0], r[1], r[1] + r[2])
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(requests_strategy, st.sampled_from([1, 16, 64, 256]))
def test_property_live_tensors_never_overlap(requests, alignment):
    offsets, arena = place(requests, alignment)
    for offset, (nbytes, _, _) in zip(offsets, requests, strict=True):
        assert offset % alignment == 0
        assert offset + nbytes <= arena
    live = [(o, r) for o, r in zip(offsets, requests, strict=True) if r[0] > 0]
    # replay the timeline: at every step, the live tensors' byte ranges are disjoint
    for step in range(max((r[2] for r in requests), default=-1) + 1):
        ranges = sorted((o, o + r[0]) for o, r in live if r[1] <= step <= r[2])
        for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
            assert end <= start
    assert arena == max((o + r[0] for o, r in live), default=0)
    assert arena <= sum(align_up(r[0], alignment) for r in requests)


@settings(max_examples=100, deadline=None)
@given(requests_strategy)
def test_property_arena_at_most_sum_of_sizes(requests):
    requests = [(align_up(n, 64), f, last) for n, f, last in requests]
    _, arena = place(requests)
    assert arena <= sum(n for n, _, _ in requests)


@st.composite
def random_graphs(draw):
    """A topologically ordered graph: each step reads earlier tensors and writes new ones."""
    n_steps = draw(st.integers(1, 25))
    steps, produced, sizes = [], [], []
    for _ in range(n_steps):
        reads = draw(st.lists(st.sampled_from(produced), max_size=3, unique=True)) if produced else []
        writes = list(range(len(sizes), len(sizes) + draw(st.integers(1, 2))))
        sizes += [draw(st.integers(0, 700)) for _ in writes]
        produced += writes
        steps.append((reads, writes))
    return steps, sizes


@settings(max_examples=100, deadline=None)
@given(random_graphs())
def test_property_replaying_the_schedule_reads_what_was_written(graph):
    steps, sizes = graph
    spans = lifetimes(steps, len(sizes))
    requests = [(sizes[t], *spans[t]) for t in range(len(sizes))]
    offsets, arena = place(requests)
    memory = np.full(arena, -1, np.int64)
    for inputs, outputs in steps:
        for t in inputs:  # every input still holds the value its producer wrote
            assert (memory[offsets[t] : offsets[t] + sizes[t]] == t).all()
        for t in outputs:
            memory[offsets[t] : offsets[t] + sizes[t]] = t
