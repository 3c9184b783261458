"""Calibration samples from a folder of images (Pillow, the `quantize` extra).

Each image is read as RGB (or grayscale for a one-channel input), resized to the input's
height and width, and normalised per channel as `(pixel - mean) / std` with pixels in
[0, 255] (the convention of NPU toolkits: ImageNet is mean 123.675,116.28,103.53 and
std 58.395,57.12,57.375; inputs in [0, 1] are std 255).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from provider.quantize.calibration import CalibrationData, CalibrationError, Feeds, ModelInput
from provider.quantize.optional import require

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
LAYOUTS = ("nchw", "nhwc")


@dataclass(frozen=True)
class ImageOptions:
    """How images become input tensors: per-channel mean/std (one value or one per channel),
    (height, width) (default: the input's), and the input's layout."""

    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    size: tuple[int, int] | None = None
    layout: str = "nchw"

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise CalibrationError(f"image layout {self.layout!r}: expected one of "
                                   f"{', '.join(LAYOUTS)}")
        if any(s == 0 for s in self.std):
            raise CalibrationError(f"image std {list(self.std)}: every value must be non-zero")
        if self.size is not None and (len(self.size) != 2 or min(self.size) < 1):
            raise CalibrationError(f"image size {self.size}: expected (height, width) >= 1")


def from_images(inputs: Sequence[ModelInput], folder: Path,
                options: ImageOptions) -> CalibrationData:
    """One sample per image file in `folder` (sorted by name) for a one-input image model."""
    require("PIL.Image", "quantize", "reading calibration images")
    if len(inputs) != 1 or len(inputs[0].shape) != 4 or inputs[0].dtype.kind != "f":
        raise CalibrationError(f"{folder}: images calibrate a model with one float input of rank "
                               f"4; the model's inputs are "
                               f"{[f'{m.name}: {m.expected()}' for m in inputs]}")
    meta = inputs[0]
    channel_axis = 1 if options.layout == "nchw" else 3
    channels = meta.shape[channel_axis]
    if channels not in (1, 3):
        raise CalibrationError(f"input {meta.name!r} {meta.expected()}: with layout "
                               f"{options.layout}, images need 1 or 3 channels on axis "
                               f"{channel_axis} (try --layout {'nhwc' if channel_axis == 1 else 'nchw'})")
    size = options.size if options.size is not None else _model_size(meta, options.layout)
    for name, values in (("mean", options.mean), ("std", options.std)):
        if len(values) not in (1, channels):
            raise CalibrationError(f"image {name} {list(values)}: expected 1 or {channels} values "
                                   f"for input {meta.name!r}")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    loaders = [_image_sample(meta, f, size, channels, options) for f in files]
    return CalibrationData(inputs, loaders, [f.name for f in files], str(folder))


def _model_size(meta: ModelInput, layout: str) -> tuple[int, int]:
    dims = meta.shape[2:4] if layout == "nchw" else meta.shape[1:3]
    if not all(isinstance(d, int) and d > 0 for d in dims):
        raise CalibrationError(f"input {meta.name!r} {meta.expected()} has no fixed height and "
                               "width: give the image size (--size HxW)")
    return int(dims[0]), int(dims[1])


def _image_sample(meta: ModelInput, path: Path, size: tuple[int, int], channels: int,
                  options: ImageOptions) -> Callable[[], Feeds]:
    def load() -> Feeds:
        image_module = require("PIL.Image", "quantize", "reading calibration images")
        try:
            with image_module.open(path) as image:
                image = image.convert("RGB" if channels == 3 else "L")
                image = image.resize((size[1], size[0]), image_module.BILINEAR)
                pixels = np.asarray(image, dtype=np.float32).reshape(size[0], size[1], channels)
        except (OSError, ValueError) as e:
            raise CalibrationError(f"{path}: not a readable image ({e})") from None
        mean = np.asarray(options.mean, dtype=np.float32)
        std = np.asarray(options.std, dtype=np.float32)
        pixels = (pixels - mean) / std
        if options.layout == "nchw":
            pixels = pixels.transpose(2, 0, 1)
        return {meta.name: np.ascontiguousarray(pixels[None], dtype=meta.dtype)}
    return load
