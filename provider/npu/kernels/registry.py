"""The kernel table: registry key -> Kernel, filled by explicit decorators in each family module.

A kernel is called by the executor once per step with preallocated views: `run(inputs,
outputs, attrs)` reads `inputs` (weights are read-only views), writes every element of each
`outputs` view, and returns None. `attrs` is the step's JSON-able dict, already normalised by
the compiler (explicit pads, resolved axes, ...), so kernels do no attribute defaulting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from provider.errors import UnsupportedError

RunFn = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], dict[str, Any]], None]


@dataclass(frozen=True)
class Kernel:
    """One registered kernel: its key, run function, and whether output 0 may alias input 0."""

    name: str
    run: RunFn
    inplace: bool = False


KERNELS: dict[str, Kernel] = {}


def register(name: str, *, inplace: bool = False) -> Callable[[RunFn], RunFn]:
    """Decorator adding `fn` to KERNELS under `name`; a second registration is an error.

    `inplace=True` declares that the kernel is correct when outputs[0] is the same memory as
    inputs[0] (elementwise kernels), which lets the compiler reuse that buffer.
    """

    def deco(fn: RunFn) -> RunFn:
        if name in KERNELS:
            raise ValueError(f"kernel {name!r} is already registered")
        KERNELS[name] = Kernel(name, fn, inplace)
        return fn

    return deco


def get(name: str) -> Kernel:
    """The kernel registered as `name`; UnsupportedError listing the known keys otherwise."""
    try:
        return KERNELS[name]
    except KeyError:
        known = ", ".join(sorted(KERNELS))
        raise UnsupportedError(f"no NPU kernel {name!r}; known kernels: {known}") from None
