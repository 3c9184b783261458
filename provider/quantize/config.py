"""The NPU's quantization configuration: which ops are quantized and how, as onnxruntime's
`quantize_static` arguments.

QDQ format, int8 weights (symmetric; per output channel on Conv / ConvTranspose, per tensor
elsewhere), int8 or uint8 activations, a calibration method, and only the op types the NPU
has int8 kernels for: every other node stays float, and so do the nodes the user excludes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType

from converters.onnx_ops.import_quant import FOLDABLE
from provider.errors import LitenpuError

# The op types with NPU int8 kernels: the ops whose QDQ units the importer folds into
# quantized Lite ops (converters.onnx_ops.import_quant.FOLDABLE, the one place the set is
# written; tests/test_npu_quant.py runs a unit of each on the NPU's integer kernels). The
# quantizer quantizes these and nothing else, and reports every other node as "no int8
# kernel on the NPU"; Relu and Clip after a conv or GEMM fold into its output range.
NPU_INT8_OPS: frozenset[str] = frozenset(FOLDABLE)

# The weight axis that holds the output channels, for the ops with per-channel weights.
PER_CHANNEL_AXIS: dict[str, int] = {"Conv": 0, "ConvTranspose": 1}

ACTIVATION_TYPES: dict[str, QuantType] = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
METHODS: dict[str, CalibrationMethod] = {
    "minmax": CalibrationMethod.MinMax,
    "entropy": CalibrationMethod.Entropy,
    "percentile": CalibrationMethod.Percentile,
}


class QuantOptionError(LitenpuError, ValueError):
    """A quantization option is not one of the accepted values (names it and lists them)."""


@dataclass(frozen=True)
class QuantConfig:
    """How to quantize: activation type ("int8" / "uint8"), calibration method ("minmax",
    "entropy", "percentile"), the node names to keep float, and `reduce_range`: 7-bit
    weights, for models that must also run exactly on onnxruntime's CPU provider where its
    int8 kernels saturate (`saturation.onnxruntime_saturates`); the NPU needs no such thing."""

    activations: str = "int8"
    method: str = "minmax"
    exclude: tuple[str, ...] = field(default_factory=tuple)
    reduce_range: bool = False

    def __post_init__(self):
        if self.activations not in ACTIVATION_TYPES:
            raise QuantOptionError(f"activations {self.activations!r}: expected one of "
                                   f"{', '.join(ACTIVATION_TYPES)}")
        if self.method not in METHODS:
            raise QuantOptionError(f"calibration method {self.method!r}: expected one of "
                                   f"{', '.join(METHODS)}")
        object.__setattr__(self, "exclude", tuple(self.exclude))

    def check_nodes(self, model: onnx.ModelProto) -> None:
        """QuantOptionError for an excluded name that is no node of `model` (with close names)."""
        import difflib

        names = [n.name for n in model.graph.node]
        for name in self.exclude:
            if name not in names:
                close = difflib.get_close_matches(name, names, n=5)
                hint = f"; close names: {', '.join(close)}" if close else \
                    "; `litenpu inspect` lists the nodes"
                raise QuantOptionError(f"--exclude {name!r}: no node of that name in the model{hint}")

    def static_arguments(self, model: onnx.ModelProto) -> dict[str, Any]:
        """Keyword arguments of onnxruntime's `quantize_static` for `model` (the model that
        will be quantized: per-channel overrides name its weight initializers)."""
        initializers = {i.name for i in model.graph.initializer}
        per_channel = {node.input[1]: [{"axis": PER_CHANNEL_AXIS[node.op_type]}]
                       for node in model.graph.node
                       if node.op_type in PER_CHANNEL_AXIS and len(node.input) > 1
                       and node.input[1] in initializers and node.name not in self.exclude}
        return {
            "quant_format": QuantFormat.QDQ,
            "op_types_to_quantize": sorted(NPU_INT8_OPS),
            "nodes_to_exclude": list(self.exclude),
            "per_channel": False,  # per channel only where overridden: Conv / ConvTranspose
            "activation_type": ACTIVATION_TYPES[self.activations],
            "weight_type": QuantType.QInt8,
            "calibrate_method": METHODS[self.method],
            "reduce_range": self.reduce_range,
            "extra_options": {"TensorQuantOverrides": per_channel, "WeightSymmetric": True},
        }

