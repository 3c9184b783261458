"""The op registry: lookups, defaults and the checks `complete` applies to IR attributes."""

from __future__ import annotations

import numpy as np
import pytest

from converters.errors import InvalidModelError, UnsupportedError
from converters.lite import ops


def test_lookups_both_ways():
    assert ops.op_number("Conv2DFusion") == 35 and ops.op_name(35) == "Conv2DFusion"
    assert all(ops.op_name(s.number) == name for name, s in ops.OPS.items())
    with pytest.raises(UnsupportedError, match=r"PrimitiveType 0 .*\(1\.\.221\)"):
        ops.op_name(0)
    with pytest.raises(UnsupportedError, match="did you mean MatMulFusion"):
        ops.spec("MatMul")


def test_fields_carry_kind_enum_and_schema_default():
    conv = ops.spec("Conv2DFusion")
    assert [f.name for f in conv.fields][:3] == ["format", "kernel_size", "stride"]
    assert conv.field("pad_mode") == ops.FieldSpec("pad_mode", "enum", "PadMode", "PadMode", "PAD", 4)
    assert conv.field("kernel_size").kind == "ints" and conv.field("kernel_size").wire == "long"
    assert ops.spec("ArgMaxFusion").field("top_k").default == 1
    assert ops.spec("Activation").field("approximate").default is False
    assert ops.spec("PadFusion").field("paddings").kind == "ints2d"
    assert ops.spec("Custom").field("attr").kind == "attrs"


def test_complete_fills_defaults_in_schema_order_and_normalises():
    attrs = ops.complete("ExpFusion", {"shift": np.float64(0.1), "base": 2})
    assert list(attrs) == ["base", "scale", "shift"]
    assert attrs == {"base": 2.0, "scale": 1.0, "shift": float(np.float32(0.1))}
    assert ops.complete("Transpose", {}) == {}
    got = ops.complete("Conv2DFusion", {"kernel_size": np.array([3, 3]), "group": np.int64(2)})
    assert got["kernel_size"] == [3, 3] and type(got["group"]) is int
    assert ops.complete("Custom", {"type": "onnx::X", "attr": {"a": bytearray(b"1")}})["attr"] == {"a": b"1"}


@pytest.mark.parametrize("op, attrs, match", [
    ("Conv2DFusion", {"kernel": [3]}, r"unknown attribute\(s\) kernel; Conv2DFusion has: format, kernel_size"),
    ("Conv2DFusion", {"pad_mode": 1}, r"pad_mode: expected a PadMode member name \(PAD, SAME, VALID\)"),
    ("Conv2DFusion", {"group": 1.5}, r"group: expected an integer \(long\)"),
    ("Conv2DFusion", {"group": True}, r"group: expected an integer"),
    ("Conv2DFusion", {"kernel_size": 3}, r"kernel_size: expected a list"),
    ("Conv2DFusion", {"kernel_size": [1 << 63]}, r"expected an integer in \["),
    ("Activation", {"approximate": 1}, r"approximate: expected a bool"),
    ("Custom", {"type": b"x"}, r"type: expected a str"),
    ("Custom", {"attr": {"a": "text"}}, r"attr: expected a dict of str -> bytes"),
    ("PadFusion", {"paddings": [1, 2]}, r"paddings: expected a list of lists"),
])
def test_complete_rejects_bad_values(op, attrs, match):
    with pytest.raises(InvalidModelError, match=match):
        ops.complete(op, attrs)
