"""The complete ONNX import table (importing the op modules registers their functions)."""

from converters.onnx_ops import (  # noqa: F401
    import_einsum,
    import_math,
    import_nn,
    import_pool,
    import_quant_dynamic,
    import_rnn,
    import_tensor,
)
from converters.onnx_ops.import_base import IMPORTERS

__all__ = ["IMPORTERS"]
