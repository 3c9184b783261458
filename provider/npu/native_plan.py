"""An Executor's run as a native plan (`native.Plan`): the Program described to the C data plane.

The plan gets every slot (weights at their addresses, internal tensors at arena offsets), the
Program's segments (native step arrays, and the numpy steps between them) and where runs take
their arena. A run then enters Python only for numpy segments, through `NumpySteps`, which
views the run's slot addresses as arrays. `run_step` is how both paths (this one and the
Executor's own Python loop) run one numpy step, with the same error wrapping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from provider.errors import LitenpuError
from provider.npu import native
from provider.npu.native_steps import NativeRun
from provider.npu.program import Program

__all__ = ["KernelPlan", "run_step", "NumpySteps", "build_plan"]

KernelPlan = list[tuple[Callable, list[int], list[int], dict]]  # (run, inputs, outputs, attrs)


def run_step(program: Program, plan: KernelPlan, number: int, inputs: list[np.ndarray],
             outputs: list[np.ndarray]) -> None:
    """Run numpy step `number`; an error that is not ours names the program and the step."""
    run, _, _, attrs = plan[number]
    try:
        run(inputs, outputs, attrs)
    except LitenpuError:
        raise
    except Exception as exc:
        kernel = program.steps[number].kernel
        raise LitenpuError(f"program {program.name!r} step {number} ({kernel}) failed: "
                           f"{type(exc).__name__}: {exc}") from exc


class NumpySteps:
    """The numpy segments of one plan, run on the slot addresses of a run in progress.

    Every slot is viewed at the address the run gives it, weights read-only (the last view per
    slot is kept while its address stays the same)."""

    def __init__(self, program: Program, plan: KernelPlan):
        self.program, self.plan = program, plan
        self._views: dict[int, tuple[int, np.ndarray]] = {}
        self.calls = 0  # numpy segments run: how often runs of this plan entered Python

    def _view(self, index: int, address: int) -> np.ndarray:
        cached = self._views.get(index)
        if cached is not None and cached[0] == address:
            return cached[1]
        slot = self.program.slots[index]
        view = native.view_at(address, slot.np_dtype, slot.shape, readonly=slot.kind == "weight")
        self._views[index] = (address, view)
        return view

    def __call__(self, first: int, count: int, slots) -> None:
        self.calls += 1
        for number in range(first, first + count):
            _, ins, outs, _ = self.plan[number]
            run_step(self.program, self.plan, number,
                     [self._view(i, slots[i] or 0) for i in ins],
                     [self._view(i, slots[i] or 0) for i in outs])


def build_plan(program: Program, segments: Sequence[int | NativeRun], plan: KernelPlan,
               addresses: Sequence[int], heap: native.Heap,
               arenas: native.ArenaSet, own_arena: int, cores: int
               ) -> tuple[native.Plan, NumpySteps]:
    """The native plan of `program` and the runner of its numpy segments (`addresses`: each
    weight slot's)."""
    slots = [(s.kind, s.nbytes, max(s.offset, 0) if s.kind == "internal" else 0,
              addresses[i] if s.kind == "weight" and s.nbytes else 0, s.name)
             for i, s in enumerate(program.slots)]
    runs: list[tuple[int, int, native.StepArray | None]] = []
    for segment in segments:
        if isinstance(segment, NativeRun):
            runs.append((segment.first, segment.count, segment.steps))
        elif runs and runs[-1][2] is None and runs[-1][0] + runs[-1][1] == segment:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, None)  # consecutive numpy steps: one call
        else:
            runs.append((segment, 1, None))
    numpy = NumpySteps(program, plan)
    uses_numpy = any(steps is None for *_, steps in runs)
    return (native.Plan(slots, program.inputs, program.outputs, runs, heap, arenas, own_arena,
                        cores, numpy if uses_numpy else None), numpy)
