"""ops.parallel: how work is cut into blocks, and the dynamic fork-join that runs them."""

from __future__ import annotations

import threading

import pytest

from provider.npu.ops import parallel


@pytest.fixture
def cores():
    """Set the core count for one test; back to 1 (inline) afterwards."""
    yield parallel.set_threads
    parallel.set_threads(1)


def test_one_core_is_one_block_whatever_the_work():
    assert parallel.threads() == 1
    assert parallel.blocks(1000, 1e9) == [slice(0, 1000)]


def test_blocks_cover_the_rows_once_in_aligned_slices(cores):
    cores(2)
    per = parallel.BLOCKS_PER_CORE * 2
    parts = parallel.blocks(100, 1e9, align=8)
    assert len(parts) <= per and all(p.start % 8 == 0 for p in parts)
    assert [i for p in parts for i in range(p.start, p.stop)] == list(range(100))
    seven = parallel.blocks(7, 1e9)
    assert 1 < len(seven) <= per and [i for p in seven for i in range(p.start, p.stop)] == list(range(7))


def test_small_work_or_few_rows_is_not_split(cores):
    cores(2)
    assert parallel.blocks(1000, parallel.MIN_US - 1) == [slice(0, 1000)]
    assert parallel.blocks(12, 1e9, align=8) == [slice(0, 12)]
    assert len(parallel.blocks(1000, 2 * parallel.MIN_US)) == 2


def test_run_runs_parts_concurrently_each_once(cores):
    """Part 0 waits for part 1: only a second thread taking part 1 lets it finish."""
    cores(2)
    started = threading.Event()
    ran: list[int] = []

    def part(i: int) -> None:
        if i == 0:
            assert started.wait(10), "part 1 never ran alongside part 0"
        else:
            started.set()
        ran.append(i)

    parallel.run(part, [0, 1])
    parallel.run(part, [1, 0])
    assert sorted(ran) == [0, 0, 1, 1]
    many: list[int] = []
    parallel.run(many.append, list(range(50)))
    assert sorted(many) == list(range(50))


def test_run_raises_the_first_error_after_every_part_finished(cores):
    cores(2)
    release = threading.Event()
    done = []

    def part(i: int) -> None:
        if i == 0:
            release.set()
            raise KeyError("part 0")
        release.wait(10)
        done.append(i)

    with pytest.raises(KeyError, match="part 0"):
        parallel.run(part, [0, 1, 2, 3])
    assert sorted(done) == [1, 2, 3]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_set_threads_rejects_non_positive_ints(bad):
    with pytest.raises(ValueError, match="positive int"):
        parallel.set_threads(bad)
