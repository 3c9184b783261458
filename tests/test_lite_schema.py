"""The schema, flatc's generated code and our schema-driven codec agree with each other
and with released MindSpore Lite (union numbers, enum values, file identifier)."""

from __future__ import annotations

import filecmp
import importlib
import shutil
import subprocess
from pathlib import Path

import flatbuffers
import numpy as np
import pytest
from lite_compare import assert_models_equal
from test_lite_roundtrip import model_with, non_default

from converters.lite import fbs, ops, reader, writer
from converters.lite._generated import MetaGraph as gen_metagraph
from converters.lite._generated import PrimitiveType as gen_primitive_type

LITE = Path(__file__).resolve().parents[1] / "converters" / "lite"

# Released MindSpore Lite (2.0.0 .. 2.7.0) union numbers; a renumbering breaks real files.
ANCHORS = {
    "Activation": 2, "AddFusion": 5, "AvgPoolFusion": 17, "Concat": 31, "Conv2DFusion": 35,
    "FullConnection": 67, "Gather": 69, "MatMulFusion": 89, "MaxPoolFusion": 92,
    "MulFusion": 99, "Reshape": 119, "Resize": 120, "Softmax": 138, "Transpose": 162,
    "Custom": 191,
    # Entries past 213 are where an unreleased snapshot renumbered: pin the release.
    "TensorScatterAdd": 213, "SparseFillEmptyRows": 214, "ScatterElements": 217,
    "AdamWeightDecay": 220, "FillV2": 221,
}


def test_union_numbers_match_released_mindspore_lite():
    assert {name: ops.op_number(name) for name in ANCHORS} == ANCHORS
    assert len(ops.OPS) == 221


def test_enum_values_match_mindspore():
    assert ops.enum_members("Format")["NHWC"] == 1
    assert ops.enum_members("Format")["NC4HW4"] == 13
    assert ops.enum_members("ActivationType")["RELU6"] == 3
    assert ops.enum_members("ActivationType")["GELU"] == 19
    assert ops.enum_members("PadMode") == {"PAD": 0, "SAME": 1, "VALID": 2}
    assert ops.enum_members("ReduceMode")["ReduceSum"] == 4
    assert fbs.schema().file_identifier == reader.IDENTIFIER == "MSL2"
    assert fbs.schema().root_type == "MetaGraph"


def test_generated_code_agrees_with_the_registry():
    generated = {k: v for k, v in vars(gen_primitive_type.PrimitiveType).items()
                 if not k.startswith("_") and k != "NONE"}
    assert generated == {name: s.number for name, s in ops.OPS.items()}
    for name, enum in fbs.schema().enums.items():
        cls = getattr(importlib.import_module(f"converters.lite._generated.{name}"), name)
        assert {k: v for k, v in vars(cls).items() if not k.startswith("_")} == enum.members


@pytest.mark.skipif(shutil.which("flatc") is None, reason="flatc not installed")
def test_generated_code_is_current(tmp_path):
    subprocess.run(["sh", str(LITE / "regenerate.sh"), str(tmp_path)], check=True)
    committed = LITE / "_generated"
    names = sorted(p.name for p in committed.glob("*.py"))
    assert names == sorted(p.name for p in tmp_path.glob("*.py"))
    match, mismatch, errors = filecmp.cmpfiles(committed, tmp_path, names, shallow=False)
    assert not mismatch and not errors, f"stale generated code: {mismatch + errors}"


def _ir_value(spec_field: ops.FieldSpec, value):
    """An object-API attribute as the IR holds it."""
    if spec_field.kind == "enum":
        members = ops.enum_members(spec_field.enum)
        return next(k for k, v in members.items() if v == value)
    if spec_field.kind == "str":
        return (value or b"").decode()
    if spec_field.kind in ("ints", "floats", "bools"):
        return [] if value is None else np.asarray(value).tolist()
    if spec_field.kind == "ints2d":
        return [] if value is None else [np.asarray(v.data if v.data is not None else []).tolist()
                                         for v in value.data or []]
    if spec_field.kind == "attrs":
        return {a.name.decode(): bytes(np.asarray(a.data if a.data is not None else [], np.uint8))
                for a in value or []}
    if spec_field.kind == "float":
        return ops.round_float(value, spec_field.wire)
    return value


@pytest.mark.parametrize("op", sorted(ops.OPS))
def test_flatc_code_reads_what_our_writer_wrote(op):
    spec = ops.spec(op)
    attrs = {f.name: non_default(f) for f in spec.fields}
    image = writer.dumps(model_with(op, attrs))
    assert gen_metagraph.MetaGraph.MetaGraphBufferHasIdentifier(image, 0)
    graph = gen_metagraph.MetaGraphT.InitFromObj(gen_metagraph.MetaGraph.GetRootAs(image))
    primitive = graph.nodes[0].primitive
    assert primitive.valueType == spec.number
    # Object-API attributes follow the schema's field order (names are camelCased by flatc).
    values = list(vars(primitive.value).values())
    got = {f.name: _ir_value(f, v) for f, v in zip(spec.fields, values, strict=True)}
    assert got == ops.complete(op, attrs)
    w = graph.allTensors[1]
    assert w.dataType == 43 and list(w.dims) == [3, 4]
    assert w.quantParams[0].numBits == 4 and w.quantParams[0].zeroPoint == -3


def test_our_reader_reads_what_flatc_code_wrote():
    m = model_with("Conv2DFusion", {"kernel_size": [3, 3], "pad_mode": "SAME", "group": 2})
    graph = gen_metagraph.MetaGraphT.InitFromObj(gen_metagraph.MetaGraph.GetRootAs(writer.dumps(m)))
    b = flatbuffers.Builder(0)
    b.Finish(graph.Pack(b), file_identifier=b"MSL2")
    back = reader.loads(bytes(b.Output()))
    assert_models_equal(back, reader.loads(writer.dumps(m)))
