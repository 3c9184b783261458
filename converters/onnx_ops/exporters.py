"""The complete ONNX export table (importing the op modules registers their functions)."""

from converters.onnx_ops import export_index, export_math, export_nn, export_tensor  # noqa: F401
from converters.onnx_ops.export_base import EXPORTERS

__all__ = ["EXPORTERS"]
