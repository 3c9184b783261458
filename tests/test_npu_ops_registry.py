"""The NPU's op table (`provider.npu.ops`): one definition per Lite primitive, kernels and
native lowerings by key; duplicates rejected, failed lookups listing what exists, and the
pieces consistent with each other and with capability's published table."""

from __future__ import annotations

import numpy as np
import pytest

from converters.lite.ir import LiteNode
from provider.errors import LitenpuError, UnsupportedError
from provider.npu import capability, native
from provider.npu.ops import KERNELS, NATIVE, OPS, get, lower, op_def, register
from provider.npu.ops.common import FLOAT, Lowered, Packed, TensorInfo
from provider.npu.ops.registry import define
from provider.npu.ops.registry import native as native_lowering

F32 = np.dtype(np.float32)


def _rule(node, ins, out_types) -> Lowered:
    return Lowered("unary", {"op": "neg"}, [0], [(ins[0].shape, ins[0].dtype)])


def test_a_second_definition_is_an_error_and_registers_nothing():
    before = dict(OPS)
    with pytest.raises(ValueError, match="Conv2DFusion"):
        define("NotAnOpYet", "Conv2DFusion", dtypes=FLOAT)(_rule)
    assert OPS == before  # the new name was not registered either
    with pytest.raises(ValueError, match="conv2d"):
        register("conv2d")(lambda i, o, a: None)
    before = dict(NATIVE)
    with pytest.raises(ValueError, match="concat"):
        native_lowering("not_a_kernel_yet", "concat")(lambda ins, outs, attrs, b: False)
    assert NATIVE == before


def test_failed_lookups_list_what_exists():
    with pytest.raises(UnsupportedError, match="no NPU op 'Rsqrt'.*Conv2DFusion.*MaxPoolFusion"):
        op_def("Rsqrt")
    with pytest.raises(UnsupportedError, match="no NPU kernel 'rsqrt'.*conv2d.*max_pool"):
        get("rsqrt")
    with pytest.raises(UnsupportedError, match="node 'n': no NPU op 'Rsqrt'; known ops: .*Conv2DFusion"):
        lower(LiteNode("n", "Rsqrt", {}, [0], [1]), [TensorInfo((1,), F32)], [F32])


def test_every_primitive_has_a_rule_whose_kernels_exist():
    assert len(OPS) >= 60
    for name, d in OPS.items():
        assert d.key == name and name.startswith(d.op) and callable(d.rule), name
        assert d.rule.__module__.startswith("provider.npu.ops."), name
        missing = [k for k in d.kernels if k not in KERNELS]
        assert not missing, f"{name}: kernels {missing} are not registered"
    declared = {k for d in OPS.values() for k in d.kernels}
    # every kernel is some rule's, except the copy the compiler inserts for graph outputs
    assert set(KERNELS) - declared == {"copy"}


def test_every_native_lowering_is_of_a_numpy_kernel_and_a_native_op():
    for key, lowering in NATIVE.items():
        assert key in KERNELS and lowering.kernel == key
        assert lowering.op in native.OPS, (key, lowering.op)


def test_a_rule_may_only_emit_the_kernels_it_declares(monkeypatch):
    """lower() checks every step a rule makes against its definition (a family's drift
    between rule and table fails the first model that uses it)."""
    node = LiteNode("n", "Neg", {}, [0], [1])
    assert lower(node, [TensorInfo((2,), F32)], [F32]).kernel == "unary"
    monkeypatch.setitem(OPS, "Neg", OPS["Neg"].__class__(
        "Neg", lambda n, i, o: Lowered("binary", {}, [0], [((2,), F32)]), FLOAT, kernels=("unary",)))
    with pytest.raises(LitenpuError, match="emitted kernel 'binary'.*unary"):
        lower(node, [TensorInfo((2,), F32)], [F32])


def test_packed_operands_are_checked_against_their_declaration():
    assert Packed((2,), F32, lambda: np.zeros(2, F32)).value().shape == (2,)
    with pytest.raises(LitenpuError, match="float64.*declared float32"):
        Packed((2,), F32, lambda: np.zeros(2)).value()


def test_capability_docstring_holds_the_generated_table():
    """capability's table is generated from the op definitions; its docstring's copy must
    be the current one (paste `capability.table()` there after changing an op's row)."""
    table = capability.table()
    assert table in capability.__doc__
    for name in OPS:
        assert f" {name}," in table or f" {name} |" in table, name
