"""Whether onnxruntime's CPU integer kernels saturate on this machine.

On x86 CPUs without a VNNI dot product (AVX2, or AVX-512 without VNNI) onnxruntime's u8 x s8
GEMM sums pairs of products in 16 bits (vpmaddubsw), so a pair above 32767 is clipped: its
quantized outputs then drift from the integer result that the NPU computes exactly.
onnxruntime's documented remedy is 7-bit weights (`reduce_range`). The probe runs one
MatMulInteger whose pairs overflow 16 bits and compares it with the exact sum.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import numpy_helper

NOTE = ("onnxruntime's CPU int8 kernels saturate on this CPU (no VNNI: u8 x s8 pairs summed in "
        "16 bits), so its outputs of the quantized model lose accuracy that the NPU keeps; "
        "quantize with reduce_range (7-bit weights) to compare the two like with like")


@functools.cache
def onnxruntime_saturates() -> bool:
    """True when onnxruntime's CPU provider clips u8 x s8 products summed in pairs."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    depth = 4
    weights = numpy_helper.from_array(np.full((depth, 1), 127, np.int8), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["x", "w"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, depth])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": np.full((1, depth), 255, np.uint8)})[0]
    return int(got[0, 0]) != 255 * 127 * depth


def saturates(model: onnx.ModelProto) -> bool:
    """True when onnxruntime's CPU kernels saturate here on `model`: some int8 weight code
    (an int8 initializer of more than one element: not a zero point) is beyond +-64, so two
    of its products with uint8 codes can exceed 16 bits."""
    if not onnxruntime_saturates():
        return False
    return any(init.data_type == onnx.TensorProto.INT8 and np.prod(init.dims) > 1
               and np.abs(numpy_helper.to_array(init).astype(np.int32)).max() > 64
               for init in model.graph.initializer)
