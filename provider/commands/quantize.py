"""`litenpu quantize MODEL -o OUT --calibration DATA`: a float ONNX model to a QDQ int8 model
for the NPU (onnxruntime's quantizer with the NPU configuration), optionally also as `.ms`.

Also the calibration-data arguments `litenpu accuracy` shares (`add_data_args`, `load_data`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from provider.commands.registry import command
from provider.errors import UsageError

EXAMPLES = """examples:
  litenpu quantize model.onnx -o model.int8.onnx --random 8          # smoke test
  litenpu quantize model.onnx -o model.int8.onnx --calibration calib.npz
  litenpu quantize model.onnx -o model.int8.onnx --calibration images/ \\
      --mean 123.675,116.28,103.53 --std 58.395,57.12,57.375 --method percentile
  litenpu quantize model.onnx -o model.int8.onnx --calibration calib.npz --exclude conv_17
  litenpu quantize model.onnx -o model.int8.onnx --calibration calib.npz --to-ms

calibration data: an .npz with one array per input (first axis = samples), a folder of .npy
files (one sample each; one subfolder per input for several inputs), or a folder of images
(pixels in [0, 255], normalised as (pixel - mean) / std per channel).
"""


def add_data_args(p: argparse.ArgumentParser, flag: str, what: str) -> None:
    """The data source arguments: `flag` DATA or --random N, and the image options."""
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(flag, type=Path, metavar="DATA", dest="data",
                        help=f"{what}: an .npz, a folder of .npy files or a folder of images")
    source.add_argument("--random", type=int, metavar="N",
                        help="N seeded random samples instead (a smoke test)")
    p.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")
    images = p.add_argument_group("image folders (need the quantize extra: Pillow)")
    images.add_argument("--mean", metavar="M[,M,M]",
                        help="per-channel mean subtracted from pixels in [0, 255] (default 0)")
    images.add_argument("--std", metavar="S[,S,S]",
                        help="per-channel divisor after the mean (default 1; 255 for [0, 1])")
    images.add_argument("--size", metavar="HxW", help="resize to this (default: the input's)")
    images.add_argument("--layout", choices=["nchw", "nhwc"],
                        help="the input's layout (default nchw)")


def load_data(model, args: argparse.Namespace):
    """The CalibrationData the arguments of `add_data_args` describe, for `model`."""
    from provider.quantize import ImageOptions, load_calibration

    image_args = (args.mean, args.std, args.size, args.layout)
    if args.random is not None and any(a is not None for a in image_args):
        raise UsageError("--mean/--std/--size/--layout describe image folders, not --random")
    images = None
    if any(a is not None for a in image_args):
        images = ImageOptions(mean=_floats(args.mean, "--mean", 0.0),
                              std=_floats(args.std, "--std", 1.0),
                              size=_size(args.size), layout=args.layout or "nchw")
    return load_calibration(model, args.data, random=args.random, seed=args.seed, images=images)


def _add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES
    p.add_argument("model", type=Path, help="float ONNX model")
    p.add_argument("-o", "--output", type=Path, required=True,
                   help="the quantized model (.onnx, QDQ); written atomically")
    add_data_args(p, "--calibration", "calibration samples")
    p.add_argument("--activations", choices=["int8", "uint8"], default="int8",
                   help="activation type (default int8; weights are always int8)")
    p.add_argument("--method", choices=["minmax", "entropy", "percentile"], default="minmax",
                   help="calibration method (default minmax)")
    p.add_argument("--exclude", action="append", default=[], metavar="NODE",
                   help="keep this node float (repeatable); the summary names the nodes")
    p.add_argument("--reduce-range", action="store_true",
                   help="7-bit weights: for a model that must also run exactly on onnxruntime's "
                        "CPU int8 kernels on CPUs without VNNI (they saturate)")
    p.add_argument("--to-ms", action="store_true",
                   help="also write the quantized model as MindSpore Lite .ms beside -o")
    p.add_argument("-q", "--quiet", action="store_true", help="print no summary")


@command("quantize", "quantize a float ONNX model to int8 for the NPU (calibrated, QDQ)", _add_args)
def run(args: argparse.Namespace) -> int:
    from provider.quantize import QuantConfig, quantize_model

    if not args.model.is_file():
        raise FileNotFoundError(f"{args.model}: no such model file")
    config = QuantConfig(activations=args.activations, method=args.method,
                         exclude=tuple(args.exclude), reduce_range=args.reduce_range)
    data = load_data(args.model, args)
    bar = progress_bar(len(data), "calibrating")
    try:
        # onnxruntime's calibrators print their progress: keep stdout for the summary.
        with contextlib.redirect_stdout(sys.stderr):
            result = quantize_model(args.model, args.output, data, config,
                                    ms_output=args.output.with_suffix(".ms") if args.to_ms else None,
                                    progress=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    if not args.quiet:
        print(result.summary())
    return 0


class _Bar:
    """A tqdm bar driven by `update(done, total)` callbacks."""

    def __init__(self, tqdm_bar):
        self._bar = tqdm_bar

    def update(self, done: int, total: int) -> None:
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        self._bar.close()


def progress_bar(total: int, what: str) -> _Bar | None:
    """A progress bar on stderr (tqdm, the quantize extra); without tqdm, a one-line hint."""
    try:
        from tqdm import tqdm
    except ImportError:
        print(f"{what} {total} samples (pip install 'litenpu[quantize]' for a progress bar)",
              file=sys.stderr)
        return None
    return _Bar(tqdm(total=total, desc=what, unit="sample", file=sys.stderr, leave=False,
                     disable=None))  # None: shown on a terminal only


def _floats(text: str | None, flag: str, default: float) -> tuple[float, ...]:
    if text is None:
        return (default,)
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected a number or comma-separated numbers") from None


def _size(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    parts = text.lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if len(dims) == 1:
        dims *= 2
    if len(dims) != 2 or min(dims) < 1:
        raise UsageError(f"--size {text!r}: expected HxW (e.g. 224x224) or one size")
    return dims[0], dims[1]
