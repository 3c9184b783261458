"""Seeded inputs for a model at concrete shapes: how each input is filled, and the shapes of
the cases to run (a dynamic model is run at several). Shared by the family models, the
real-model table in `benchmarks/` and their tests, so every run feeds the same values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

FILLS = ("normal", "uniform", "integers", "mask", "const")


@dataclass(frozen=True)
class Feed:
    """One input: its dtype and how its values are drawn. `normal` is standard normal,
    `uniform` is [low, high), `integers` is [low, high) (token ids), `mask` is an attention
    mask of padded rows (1 for a random length >= 1 along the last axis, then 0), `const` is
    `low`."""

    name: str
    fill: str = "normal"
    dtype: str = "float32"
    low: float = 0.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if self.fill not in FILLS:
            raise ValueError(f"Feed {self.name!r}: fill {self.fill!r} is not one of {FILLS}")

    def make(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """A value of `shape` drawn from `rng`."""
        dtype = np.dtype(self.dtype)
        if self.fill == "normal":
            return rng.standard_normal(shape).astype(dtype)
        if self.fill == "uniform":
            return rng.uniform(self.low, self.high, shape).astype(dtype)
        if self.fill == "integers":
            return rng.integers(int(self.low), int(self.high), shape).astype(dtype)
        if self.fill == "mask":
            lengths = rng.integers(1, shape[-1] + 1, shape[:-1])
            return (np.arange(shape[-1]) < lengths[..., None]).astype(dtype)
        return np.full(shape, self.low, dtype)


@dataclass(frozen=True)
class Inputs:
    """A model's inputs and the concrete shapes to run it at (one dict per case)."""

    feeds: tuple[Feed, ...]
    shapes: tuple[Mapping[str, tuple[int, ...]], ...]

    def __post_init__(self) -> None:
        names = {f.name for f in self.feeds}
        for case in self.shapes:
            if set(case) != names:
                raise ValueError(f"case {dict(case)} does not give a shape for each of "
                                 f"{sorted(names)}")

    def case(self, index: int, seed: int = 0) -> dict[str, np.ndarray]:
        """The feeds of case `index`, drawn from a generator seeded with `seed`."""
        rng = np.random.default_rng(seed)
        shapes = self.shapes[index]
        return {f.name: f.make(tuple(shapes[f.name]), rng) for f in self.feeds}

    def cases(self, seed: int = 0) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        """(label, feeds) of every case."""
        for index in range(len(self.shapes)):
            yield self.label(index), self.case(index, seed)

    def label(self, index: int) -> str:
        """Case `index` by its first input's shape, e.g. `input_ids 2x64`."""
        name = self.feeds[0].name
        return f"{name} {'x'.join(map(str, self.shapes[index][name]))}"
