"""Convert an ONNX (or MindIR) model to .ms with MindSpore Lite's own converter (mindspore_lite
2.0).

Usage: mslite_convert.py MODEL OUT_PREFIX [fmk=ONNX|MINDIR] [input_format=NHWC|NCHW]
                         [weight_fp16=1] [optimize=none] [config=FILE.cfg]
Writes OUT_PREFIX.ms. fmk is the source format (ONNX by default); input_format is the converted model's input layout (MindSpore Lite's
default, NHWC, turns 4-D NCHW inputs into NHWC ones; NCHW keeps them as they are);
weight_fp16=1 stores float32 weights as float16; optimize=none turns the converter's fusions
off (BatchNorm, activations and GELU stay separate nodes); config passes a converter config file
(e.g. `[common_quant_param]` for weight quantization).
Runs in the Python 3.7 venv of `tox -e mslite`; kept Python 3.7 compatible.
"""

import sys

import mindspore_lite as mslite


def main(model_path, out_prefix, *options):
    opts = dict(option.split("=", 1) for option in options)
    converter = mslite.Converter()
    converter.save_type = mslite.ModelType.MINDIR_LITE
    converter.input_format = getattr(mslite.Format, opts.get("input_format", "NHWC"))
    converter.weight_fp16 = opts.get("weight_fp16") == "1"
    converter.optimize = opts.get("optimize", "general")
    converter.convert(getattr(mslite.FmkType, opts.get("fmk", "ONNX")), model_path, out_prefix,
                      config_file=opts.get("config", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
