"""The complete ONNX import table (importing the op modules registers their functions)."""

from converters.onnx_ops import import_math, import_nn, import_rnn, import_tensor  # noqa: F401
from converters.onnx_ops.import_base import IMPORTERS

__all__ = ["IMPORTERS"]
