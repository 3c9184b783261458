"""Convert an ONNX model to .ms with MindSpore Lite's own converter (mindspore_lite 2.0).

Usage: mslite_convert.py MODEL.onnx OUT_PREFIX [NHWC|NCHW [fp16]]
Writes OUT_PREFIX.ms. NHWC/NCHW is the converted model's input layout (MindSpore Lite's
default, NHWC, turns 4-D NCHW inputs into NHWC ones; NCHW keeps them as they are); `fp16`
stores float32 weights as float16 (the converter's `weight_fp16`).
Runs in the Python 3.7 venv of `tox -e mslite`; kept Python 3.7 compatible.
"""

import sys

import mindspore_lite as mslite


def main(model_path, out_prefix, input_format="NHWC", weights=""):
    converter = mslite.Converter()
    converter.save_type = mslite.ModelType.MINDIR_LITE
    converter.input_format = getattr(mslite.Format, input_format)
    converter.weight_fp16 = weights == "fp16"
    converter.convert(mslite.FmkType.ONNX, model_path, out_prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
