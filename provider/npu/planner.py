"""Static memory planning for a Program's internal arena: two pure functions.

`lifetimes` turns an execution order into the (first, last) step each tensor is live;
`place` turns (nbytes, first, last) requests into arena offsets. They are separate jobs
(as TFLite's arena planner keeps them) so the compiler can merge aliased tensors
(reshape-like ops, in-place elementwise) into one request between the two calls.

Placement policy (one sort key): requests are placed largest first, ties broken by earlier
first use, then by request index, so the plan is deterministic. Each request goes into the
smallest gap, among the already placed requests whose lifetimes overlap its own, that holds
it at an aligned offset (best fit); failing that, right after the highest such request.
"""

from __future__ import annotations

from collections.abc import Sequence

from provider.errors import InvalidModelError

__all__ = ["lifetimes", "place", "align_up"]


def align_up(value: int, alignment: int) -> int:
    """Round `value` up to a multiple of `alignment` (a power of two)."""
    return (value + alignment - 1) & ~(alignment - 1)


def lifetimes(
    steps: Sequence[tuple[Sequence[int], Sequence[int]]], n_tensors: int
) -> list[tuple[int, int] | None]:
    """First and last step index at which each tensor is read or written (None = unused)."""
    spans: list[tuple[int, int] | None] = [None] * n_tensors
    for index, (inputs, outputs) in enumerate(steps):
        for tensor in (*inputs, *outputs):
            if not 0 <= tensor < n_tensors:
                raise InvalidModelError(
                    f"step {index} uses tensor {tensor}, expected an index in [0, {n_tensors})"
                )
            span = spans[tensor]
            spans[tensor] = (index, index) if span is None else (span[0], index)
    return spans


def _check_requests(requests: Sequence[tuple[int, int, int]], alignment: int) -> None:
    """Reject negative sizes, inverted lifetimes and alignments that are not powers of two."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise InvalidModelError(f"alignment {alignment} is not a positive power of two")
    for index, (nbytes, first, last) in enumerate(requests):
        if nbytes < 0 or first < 0 or last < first:
            raise InvalidModelError(
                f"request {index} = (nbytes={nbytes}, first={first}, last={last}): expected "
                "nbytes >= 0 and 0 <= first <= last"
            )


def _best_offset(nbytes: int, live: list[tuple[int, int]], alignment: int) -> int:
    """Lowest-waste aligned offset for `nbytes` among `live` (offset, nbytes) blocks."""
    best_offset, best_gap = -1, -1
    cursor = 0
    for offset, size in sorted(live):
        gap = offset - cursor
        if gap >= nbytes and (best_gap < 0 or gap < best_gap):
            best_offset, best_gap = cursor, gap
        cursor = max(cursor, align_up(offset + size, alignment))
    return cursor if best_offset < 0 else best_offset


def place(
    requests: Sequence[tuple[int, int, int]], alignment: int = 64
) -> tuple[list[int], int]:
    """Arena offsets for (nbytes, first, last) requests, and the arena size actually touched.

    Two requests whose [first, last] step ranges intersect never share bytes. Zero-sized
    requests get offset 0 and take no space. The arena size is max(offset + nbytes).
    """
    _check_requests(requests, alignment)
    order = sorted(range(len(requests)), key=lambda i: (-requests[i][0], requests[i][1], i))
    offsets = [0] * len(requests)
    placed: list[int] = []
    for index in order:
        nbytes, first, last = requests[index]
        if nbytes == 0:
            continue
        live = [
            (offsets[other], requests[other][0])
            for other in placed
            if requests[other][1] <= last and first <= requests[other][2]
        ]
        offsets[index] = _best_offset(nbytes, live, alignment)
        placed.append(index)
    arena = max((offsets[i] + requests[i][0] for i in placed), default=0)
    return offsets, arena
