"""Where calibration data come from: `load_calibration` picks the reader for an .npz file, a
folder of .npy files or of images, or seeded random samples (`provider.quantize.calibration`
and `provider.quantize.images` read them)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import onnx

from provider.quantize.calibration import (
    CalibrationData,
    CalibrationError,
    ModelInput,
    from_npy_dir,
    from_npz,
    model_inputs,
    random_data,
)
from provider.quantize.images import IMAGE_SUFFIXES, ImageOptions, from_images

__all__ = ["load_calibration"]


def load_calibration(model: str | os.PathLike | bytes | onnx.ModelProto | Sequence[ModelInput],
                     source: str | os.PathLike | None = None, *, random: int | None = None,
                     seed: int = 0, images: ImageOptions | None = None) -> CalibrationData:
    """Calibration data for `model` (or its inputs) from `source`: an .npz file, a folder of
    .npy files, or a folder of images (read with `images`, default ImageOptions()); or, with
    `random=N` and no source, N seeded random samples."""
    inputs = (list(model) if isinstance(model, Sequence) and not isinstance(model, (str, bytes))
              else model_inputs(model))
    if (source is None) == (random is None):
        raise CalibrationError("give calibration data (an .npz file or a folder of .npy files "
                               "or images) or a number of random samples, not both")
    if source is None:
        return random_data(inputs, random, seed)
    path = Path(source)
    if path.is_file():
        if path.suffix.lower() != ".npz":
            raise CalibrationError(f"{path}: expected an .npz file or a folder of .npy files "
                                   "or images")
        return from_npz(inputs, path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such calibration file or folder")
    if any(p.suffix.lower() in IMAGE_SUFFIXES for p in path.iterdir()):
        return from_images(inputs, path, images if images is not None else ImageOptions())
    if images is not None:
        raise CalibrationError(f"{path}: image options given, but the folder holds no images "
                               f"({', '.join(sorted(IMAGE_SUFFIXES))})")
    return from_npy_dir(inputs, path)
