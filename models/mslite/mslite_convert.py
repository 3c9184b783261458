"""Convert an ONNX model to .ms with MindSpore Lite's own converter (mindspore_lite 2.0).

Usage: mslite_convert.py MODEL.onnx OUT_PREFIX [NHWC|NCHW]
Writes OUT_PREFIX.ms. The last argument is the converted model's input layout (MindSpore
Lite's default, NHWC, turns 4-D NCHW inputs into NHWC ones; NCHW keeps them as they are).
Runs in the Python 3.7 venv of `tox -e mslite`; kept Python 3.7 compatible.
"""

import sys

import mindspore_lite as mslite


def main(model_path, out_prefix, input_format="NHWC"):
    converter = mslite.Converter()
    converter.save_type = mslite.ModelType.MINDIR_LITE
    converter.input_format = getattr(mslite.Format, input_format)
    converter.convert(mslite.FmkType.ONNX, model_path, out_prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
