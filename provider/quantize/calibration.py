"""Calibration data: samples of a model's inputs, read from .npz, .npy files, images or seeded
random values, and checked against the model's inputs before anything uses them.

A sample is a feeds dict (input name -> array of the input's dtype and shape). Samples are
read when used (an image directory is not decoded twice into memory); the names, the count
and the array ranks are checked when the data set is made, each sample's dtype, shape and
values (NaN, Inf) when it is read, so a bad sample stops calibration before any output
file is written, with a CalibrationError naming the input, the sample and what was expected.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from provider.errors import LitenpuError
from provider.ort.tensors import ORT_TYPE_TO_NUMPY, random_feed

Feeds = dict[str, np.ndarray]


class CalibrationError(LitenpuError, ValueError):
    """Calibration data do not fit the model: names the input or sample and what was expected."""


@dataclass(frozen=True)
class ModelInput:
    """One input of a model as the calibration data must fill it."""

    name: str
    type: str  # onnxruntime's spelling, "tensor(float)"
    shape: tuple[int | str | None, ...]  # ints are fixed, anything else is free

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(ORT_TYPE_TO_NUMPY.get(self.type, np.object_))

    def expected(self) -> str:
        dims = ", ".join(str(d) if isinstance(d, int) and d >= 0 else "?" for d in self.shape)
        return f"{self.dtype} [{dims}]"

    def fits(self, shape: Sequence[int]) -> bool:
        return len(shape) == len(self.shape) and all(
            not isinstance(w, int) or w < 0 or w == s for s, w in zip(shape, self.shape, strict=True))


def model_inputs(model: str | os.PathLike | bytes | onnx.ModelProto) -> list[ModelInput]:
    """The inputs a model's feeds must fill (as onnxruntime sees them: no initializers)."""
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    elif isinstance(model, os.PathLike):
        model = os.fspath(model)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return [ModelInput(i.name, i.type, tuple(i.shape)) for i in session.get_inputs()]


class CalibrationData(Sequence[Feeds]):
    """Samples for a model's inputs; `data[i]` reads and checks sample i (a feeds dict)."""

    def __init__(self, inputs: Sequence[ModelInput], loaders: Sequence[Callable[[], Feeds]],
                 labels: Sequence[str], source: str):
        if not loaders:
            raise CalibrationError(f"{source}: no calibration samples (expected at least one)")
        self.inputs = list(inputs)
        self.source = source
        self._loaders = list(loaders)
        self._labels = list(labels)

    def __len__(self) -> int:
        return len(self._loaders)

    def __getitem__(self, index: int) -> Feeds:  # type: ignore[override]
        feeds = self._loaders[index]()
        check_sample(self.inputs, feeds, f"{self.source}: {self._labels[index]}")
        return feeds

    def __iter__(self) -> Iterator[Feeds]:
        return (self[i] for i in range(len(self)))

    def check_inputs(self, inputs: Sequence[ModelInput]) -> None:
        """CalibrationError unless these data were made for a model with these inputs."""
        want, have = [i.name for i in inputs], [i.name for i in self.inputs]
        if sorted(want) != sorted(have):
            raise CalibrationError(f"{self.source}: the data are for inputs {have}; "
                                   f"the model's inputs are {want}")


def check_sample(inputs: Sequence[ModelInput], feeds: Feeds, where: str) -> None:
    """CalibrationError for a missing/unknown input, wrong dtype or shape, NaN or Inf."""
    known = {i.name for i in inputs}
    unknown = sorted(set(feeds) - known)
    if unknown:
        raise CalibrationError(f"{where}: unknown input(s) {unknown}; the model's inputs are "
                               f"{sorted(known)}")
    for meta in inputs:
        if meta.name not in feeds:
            raise CalibrationError(f"{where}: no value for input {meta.name!r} "
                                   f"(expected {meta.expected()})")
        value = feeds[meta.name]
        if value.dtype != meta.dtype:
            raise CalibrationError(f"{where}: input {meta.name!r} is {value.dtype}, expected "
                                   f"{meta.expected()} (convert with .astype(np.{meta.dtype}))")
        if not meta.fits(value.shape):
            raise CalibrationError(f"{where}: input {meta.name!r} has shape {list(value.shape)}, "
                                   f"expected {meta.expected()}")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            bad = "NaN" if np.isnan(value).any() else "Inf"
            raise CalibrationError(f"{where}: input {meta.name!r} contains {bad} "
                                   "(calibration needs finite values)")


# ---- readers ------------------------------------------------------------------------------

def from_arrays(inputs: Sequence[ModelInput], arrays: dict[str, np.ndarray],
                source: str) -> CalibrationData:
    """Samples along the first axis of one array per input (all with the same count)."""
    known = {i.name for i in inputs}
    unknown = sorted(set(arrays) - known)
    if unknown:
        raise CalibrationError(f"{source}: unknown input(s) {unknown}; the model's inputs are "
                               f"{sorted(known)}")
    counts = {}
    for meta in inputs:
        if meta.name not in arrays:
            raise CalibrationError(f"{source}: no array for input {meta.name!r} (expected "
                                   f"samples x {meta.expected()}, first axis = samples)")
        counts[meta.name] = _sample_count(meta, arrays[meta.name], source)
    if len(set(counts.values())) > 1:
        raise CalibrationError(f"{source}: the inputs have different sample counts {counts}")
    count = next(iter(counts.values()), 0)
    loaders = [_array_sample(inputs, arrays, i) for i in range(count)]
    return CalibrationData(inputs, loaders, [f"sample {i}" for i in range(count)], source)


def _sample_count(meta: ModelInput, array: np.ndarray, source: str) -> int:
    """How many samples `array` holds: (samples, *shape), or (samples, *shape[1:]) stacked
    along a batch axis of size 1; CalibrationError naming the input otherwise."""
    rank = len(meta.shape)
    if array.ndim == rank + 1 or (array.ndim == rank and rank and _batch_of_one(meta)):
        return int(array.shape[0])
    raise CalibrationError(f"{source}: input {meta.name!r} array has shape {list(array.shape)}, "
                           f"expected samples x {meta.expected()} (first axis = samples)")


def _batch_of_one(meta: ModelInput) -> bool:
    first = meta.shape[0]
    return not isinstance(first, int) or first in (1, -1)


def _array_sample(inputs: Sequence[ModelInput], arrays: dict[str, np.ndarray],
                  i: int) -> Callable[[], Feeds]:
    def load() -> Feeds:
        return {m.name: (arrays[m.name][i] if arrays[m.name].ndim == len(m.shape) + 1
                         else arrays[m.name][i:i + 1]) for m in inputs}
    return load


def from_npz(inputs: Sequence[ModelInput], path: Path) -> CalibrationData:
    """An .npz archive with one array per input name, first axis = samples."""
    archive = _np_load(path)
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise CalibrationError(f"{path}: expected an .npz archive with one array per input")
    with archive:
        arrays = {k: archive[k] for k in archive.files}
    return from_arrays(inputs, arrays, str(path))


def from_npy_dir(inputs: Sequence[ModelInput], folder: Path) -> CalibrationData:
    """A folder of .npy files, one sample each: directly in it for a one-input model, or in
    one subfolder per input name (matched by sorted file name)."""
    subdirs = {p.name: p for p in folder.iterdir() if p.is_dir()}
    if any(m.name in subdirs for m in inputs):
        files = {}
        for meta in inputs:
            if meta.name not in subdirs:
                raise CalibrationError(f"{folder}: no subfolder {meta.name!r} of .npy files for "
                                       f"input {meta.name!r} (expected {meta.expected()})")
            files[meta.name] = sorted(subdirs[meta.name].glob("*.npy"))
        counts = {k: len(v) for k, v in files.items()}
        if len(set(counts.values())) > 1:
            raise CalibrationError(f"{folder}: the inputs' subfolders hold different numbers of "
                                   f".npy files {counts}")
    else:
        if len(inputs) != 1:
            raise CalibrationError(f"{folder}: the model has inputs {[m.name for m in inputs]}; "
                                   "put each input's .npy files in a subfolder named after it")
        files = {inputs[0].name: sorted(folder.glob("*.npy"))}
    count = len(next(iter(files.values())))
    loaders = [_npy_sample(inputs, files, i) for i in range(count)]
    labels = [", ".join(str(f[i].relative_to(folder)) for f in files.values()) for i in range(count)]
    return CalibrationData(inputs, loaders, labels, str(folder))


def _npy_sample(inputs: Sequence[ModelInput], files: dict[str, list[Path]],
                i: int) -> Callable[[], Feeds]:
    def load() -> Feeds:
        feeds = {}
        for meta in inputs:
            array = _np_load(files[meta.name][i])
            if not isinstance(array, np.ndarray):
                raise CalibrationError(f"{files[meta.name][i]}: expected a .npy array")
            # One sample may leave out a batch axis of size 1.
            if array.ndim == len(meta.shape) - 1 and _batch_of_one(meta):
                array = array[None]
            feeds[meta.name] = array
        return feeds
    return load


def random_data(inputs: Sequence[ModelInput], count: int, seed: int = 0) -> CalibrationData:
    """`count` samples of seeded random values (a smoke test, not a calibration)."""
    if count < 1:
        raise CalibrationError(f"random calibration: {count} samples (expected at least one)")
    rng = np.random.default_rng(seed)
    samples = [{m.name: random_feed(m, {}, rng) for m in inputs} for _ in range(count)]
    return CalibrationData(inputs, [lambda s=s: s for s in samples],
                           [f"sample {i}" for i in range(count)], f"{count} random samples")


def _np_load(path: Path) -> Any:
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError) as e:
        raise CalibrationError(f"{path}: not a readable .npy/.npz file ({e})") from None
