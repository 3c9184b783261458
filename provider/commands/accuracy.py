"""`litenpu accuracy FLOAT QUANTIZED --data DATA`: what quantization costs, per output and per
quantized tensor, with the quantized model running on the NPU.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from provider.commands.quantize import add_data_args, load_data
from provider.commands.registry import command, key_values
from provider.errors import UsageError

EXAMPLES = """examples:
  litenpu accuracy model.onnx model.int8.onnx --random 8
  litenpu accuracy model.onnx model.int8.onnx --data calib.npz --layers 10
  litenpu accuracy model.onnx model.int8.onnx --data images/ --std 255 --plot snr.png
  litenpu accuracy model.onnx model.int8.onnx --data calib.npz --json > report.json
"""


def _add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES
    p.add_argument("float_model", type=Path, help="the float ONNX model")
    p.add_argument("quantized_model", type=Path, help="its quantized (QDQ) ONNX model")
    add_data_args(p, "--data", "the samples to compare on")
    p.add_argument("--sort", choices=["snr", "graph"], default="snr",
                   help="per-layer order: worst SNR first (default) or graph order")
    p.add_argument("--layers", type=int, metavar="N", help="show only the first N layers")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--plot", type=Path, metavar="OUT.png",
                   help="write a plot of SNR per layer (needs the bench extra: matplotlib)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an NPU provider option (repeatable)")


@command("accuracy", "compare a quantized model (on the NPU) with its float model, per output "
         "and per layer", _add_args)
def run(args: argparse.Namespace) -> int:
    from provider.quantize import accuracy_report

    if args.layers is not None and args.layers < 1:
        raise UsageError(f"--layers {args.layers}: expected a count >= 1")
    for path in (args.float_model, args.quantized_model):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such model file")
    if args.plot is not None:
        from provider.quantize.optional import require

        require("matplotlib", "bench", "--plot")  # fail before the long part
    data = load_data(args.quantized_model, args)
    report = accuracy_report(args.float_model, args.quantized_model, data,
                             npu_options=key_values(args.option, "--option"))
    print(report.to_json() if args.json else report.to_text(args.sort, args.layers))
    if args.plot is not None:
        from provider.quantize.plot import plot_layer_snr

        plot_layer_snr(report, args.plot)
        if not args.json:
            print(f"wrote {args.plot}")
    return 0
