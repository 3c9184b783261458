"""The op tables: lookup by opset picks the newest version not above it; duplicates fail."""

import pytest

from converters.onnx_ops.exporters import EXPORTERS
from converters.onnx_ops.importers import IMPORTERS
from converters.onnx_ops.registry import OpTable


def test_lookup_picks_newest_version_at_or_below_the_opset():
    table = OpTable("t")
    table.register("Op", since=1)(lambda: "v1")
    table.register("Op", since=13)(lambda: "v13")
    assert table.lookup("Op", 12)() == "v1"
    assert table.lookup("Op", 13)() == "v13"
    assert table.lookup("Op", 20)() == "v13"
    assert table.lookup("Other", 20) is None


def test_op_newer_than_the_opset_is_not_found():
    table = OpTable("t")
    table.register("Gelu", since=20)(lambda: None)
    assert table.lookup("Gelu", 17) is None


def test_duplicate_registration_is_an_error():
    table = OpTable("t")
    table.register("Op", since=7)(lambda: None)
    with pytest.raises(ValueError, match="'Op' since opset 7 registered twice"):
        table.register("Op", since=7)(lambda: None)


def test_real_tables_cover_the_required_ops():
    required = ("Conv ConvTranspose Gemm MatMul Add Sub Mul Div Pow Sqrt Exp Erf Neg Abs Relu "
                "LeakyRelu PRelu Sigmoid Tanh HardSigmoid HardSwish Gelu Clip Softmax LogSoftmax "
                "MaxPool AveragePool GlobalAveragePool GlobalMaxPool BatchNormalization "
                "LayerNormalization InstanceNormalization Concat Split Slice Reshape Flatten "
                "Squeeze Unsqueeze Transpose Pad Resize ReduceMean ReduceSum ReduceMax ReduceMin "
                "Gather Cast Shape Expand Tile Where Equal Less Greater ArgMax TopK Identity "
                "Dropout Constant ConstantOfShape").split()
    assert not [op for op in required if IMPORTERS.lookup(op) is None]
    assert {"Conv2DFusion", "FullConnection", "MatMulFusion", "Activation"} <= set(EXPORTERS.ops())
