"""kernels.parallel: how work is cut into per-core blocks, and fork-join error handling."""

from __future__ import annotations

import threading
import time

import pytest

from provider.npu.kernels import parallel


@pytest.fixture
def cores():
    """Set the core count for one test; back to 1 (inline) afterwards."""
    yield parallel.set_threads
    parallel.set_threads(1)


def test_one_core_is_one_block_whatever_the_work():
    assert parallel.threads() == 1
    assert parallel.blocks(1000, 1e9) == [slice(0, 1000)]


def test_blocks_cover_the_rows_once_in_aligned_slices(cores):
    cores(3)
    parts = parallel.blocks(100, 1e9, align=8)
    assert parts == [slice(0, 40), slice(40, 80), slice(80, 100)]
    assert parallel.blocks(7, 1e9) == [slice(0, 3), slice(3, 6), slice(6, 7)]


def test_small_work_or_few_rows_is_not_split(cores):
    cores(2)
    assert parallel.blocks(1000, parallel.MIN_US - 1) == [slice(0, 1000)]
    assert parallel.blocks(12, 1e9, align=8) == [slice(0, 12)]
    assert len(parallel.blocks(1000, 2 * parallel.MIN_US)) == 2


def test_run_uses_other_threads_and_waits_for_all(cores):
    cores(2)
    seen: dict[int, str] = {}

    def part(i: int) -> None:
        time.sleep(0.01 * i)
        seen[i] = threading.current_thread().name

    parallel.run(part, [0, 1, 2])
    assert sorted(seen) == [0, 1, 2]
    assert seen[0] == threading.current_thread().name
    assert seen[1].startswith("litenpu-npu")


def test_run_raises_the_first_error_after_every_part_finished(cores):
    cores(2)
    done = []

    def part(i: int) -> None:
        if i == 0:
            raise KeyError("inline part")
        time.sleep(0.02)
        done.append(i)

    with pytest.raises(KeyError, match="inline part"):
        parallel.run(part, [0, 1])
    assert done == [1]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_set_threads_rejects_non_positive_ints(bad):
    with pytest.raises(ValueError, match="positive int"):
        parallel.set_threads(bad)
