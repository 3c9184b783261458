"""The complete ONNX export table (importing the op modules registers their functions)."""

from converters.onnx_ops import (  # noqa: F401
    export_index,
    export_math,
    export_nn,
    export_rnn,
    export_tensor,
)
from converters.onnx_ops.export_base import EXPORTERS

__all__ = ["EXPORTERS"]
