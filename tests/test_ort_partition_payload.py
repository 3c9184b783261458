"""The payload of a dynamic-shape partition: a descriptor read alone, the Lite IR on demand."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ort_models import MLP, npu_session_options

import provider
from converters.lite import writer as ms_writer
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from provider.cache import PartitionKeys
from provider.errors import InvalidModelError
from provider.ort.partition_payload import (
    MAGIC,
    PartitionDescriptor,
    StoredPartition,
    TensorInfo,
    pack,
)
from provider.session import InferenceSession


def _lite() -> LiteModel:
    tensors = [LiteTensor.of("x", "float32", ("N", 3)),
               LiteTensor.of("w", "float32", (3,), np.arange(3, dtype=np.float32)),
               LiteTensor.of("y", "float32", ("N", 3))]
    return LiteModel(name="p", tensors=tensors, inputs=[0], outputs=[2],
                     nodes=[LiteNode("add", "AddFusion", {}, [0, 1], [2])])


DESCRIPTOR = PartitionDescriptor.of(_lite(), "ab" * 32)
IMAGE = ms_writer.dumps(_lite())
PAYLOAD = pack(DESCRIPTOR, IMAGE)


def test_descriptor_names_the_partition_and_its_io():
    assert DESCRIPTOR.nodes == (("add", "AddFusion"),)
    assert DESCRIPTOR.inputs == (TensorInfo("x", "float32", ("N", 3)),)
    assert DESCRIPTOR.outputs == (TensorInfo("y", "float32", ("N", 3)),)
    assert PartitionDescriptor.from_json(json.loads(json.dumps(DESCRIPTOR.to_json()))) == DESCRIPTOR


def test_keys_are_the_partitions_keys():
    options = {"enable_fp16": False}
    keys = DESCRIPTOR.keys(model_name="m", options=options)
    assert keys == PartitionKeys.of([("add", "AddFusion")], model_name="m",
                                    fingerprint="ab" * 32, options=options)
    assert keys.key({"x": (2, 3)}).digest != keys.key({"x": (4, 3)}).digest


def test_round_trip_in_memory():
    stored = StoredPartition.from_bytes(PAYLOAD, "p")
    assert stored.descriptor == DESCRIPTOR and stored.image() == IMAGE


def test_a_file_is_read_head_first_and_its_image_only_on_demand(tmp_path):
    """The head is checked when opened; the image's bytes only when read."""
    path = tmp_path / "p.lnpu"
    spoiled = bytearray(PAYLOAD)
    spoiled[-1] ^= 0xFF
    path.write_bytes(bytes(spoiled))
    stored = StoredPartition.open(str(path), "p")
    assert stored.descriptor == DESCRIPTOR
    with pytest.raises(InvalidModelError, match="changed since its header was written"):
        stored.image()
    stored.close()


def test_the_open_file_is_read_even_after_it_is_replaced(tmp_path):
    path = tmp_path / "p.lnpu"
    path.write_bytes(PAYLOAD)
    stored = StoredPartition.open(str(path), "p")
    other = tmp_path / "other"
    other.write_bytes(b"x" * len(PAYLOAD))
    os.replace(other, path)  # renamed over (how litenpu itself replaces files)
    assert stored.image() == IMAGE
    stored.close()
    with pytest.raises(InvalidModelError, match="closed"):
        stored.image()


def test_a_file_rewritten_in_place_is_refused(tmp_path):
    path = tmp_path / "p.lnpu"
    path.write_bytes(PAYLOAD)
    stored = StoredPartition.open(str(path), "p")
    with open(path, "r+b") as f:
        f.seek(len(PAYLOAD) - 8)
        f.write(bytes(b ^ 0xFF for b in PAYLOAD[-8:]))
    with pytest.raises(InvalidModelError, match="sha256 mismatch"):
        stored.image()
    stored.close()


def _with_header(header: bytes) -> bytes:
    return MAGIC + struct.pack("<I", len(header)) + header + IMAGE


@pytest.mark.parametrize("data, reason", [
    (MAGIC + b"\x01", "not an NPU partition payload"),
    (MAGIC + struct.pack("<I", 1 << 30), "partition header of"),
    (MAGIC + struct.pack("<I", 100) + b"{}", "header cut short"),
    (_with_header(b"not json"), "bad partition header"),
    (_with_header(json.dumps({"version": 99, "image": {"bytes": 1, "sha256": ""}}).encode()),
     "version 99"),
    (_with_header(json.dumps({"version": 1, "image": {"bytes": len(IMAGE), "sha256": ""},
                              "partition": {"nodes": []}}).encode()), "bad partition descriptor"),
    (PAYLOAD[:-1], "its header describes"),
], ids=["no length", "huge header", "short header", "not JSON", "other version",
        "no descriptor", "truncated image"])
def test_bad_payloads_name_what_is_wrong(tmp_path, data, reason):
    with pytest.raises(InvalidModelError, match=reason):
        StoredPartition.from_bytes(data, "p")
    path = tmp_path / "p.lnpu"
    path.write_bytes(data)
    with pytest.raises(InvalidModelError, match=reason):
        StoredPartition.open(str(path), "p")


def test_a_file_of_another_kind_is_left_to_the_caller(tmp_path):
    path = tmp_path / "p.lnpu"
    path.write_bytes(IMAGE)  # a bare .ms image
    assert StoredPartition.open(str(path), "p") is None
    with pytest.raises(InvalidModelError, match="No such file"):
        StoredPartition.open(str(tmp_path / "missing.lnpu"), "p")


def test_io_check_names_both_sides():
    DESCRIPTOR.check_io(["x"], ["y"], "p")
    with pytest.raises(InvalidModelError, match=r"inputs \['x'\] and outputs \['y'\], the node "
                                                r"\['x'\] and \['z'\]"):
        DESCRIPTOR.check_io(["x"], ["z"], "p")


@pytest.fixture
def context_model(tmp_path):
    provider.register()
    source, out = tmp_path / "mlp.onnx", tmp_path / "mlp_ctx.onnx"
    source.write_bytes(MLP)
    ort.ModelCompiler(npu_session_options(), str(source),
                      embed_compiled_data_into_model=False).compile_to_file(str(out))
    attrs = {a.name: a for a in onnx.load(str(out)).graph.node[0].attribute}
    return out, tmp_path / attrs["ep_cache_context"].s.decode()


def test_session_refuses_a_side_file_changed_under_it(context_model):
    """A session reads the Lite IR when a new shape comes; a side file rewritten in place
    since the session started is an error naming the file, not another model's result."""
    out, side = context_model
    sess = InferenceSession(str(out), providers=["NPUExecutionProvider"])
    data = side.read_bytes()
    with open(side, "r+b") as f:
        f.seek(len(data) - 4)
        f.write(bytes(b ^ 0xFF for b in data[-4:]))
    feeds = {"x": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32)}
    with pytest.raises(InvalidModelError, match=f"{side.name}.*sha256 mismatch"):
        sess.run(None, feeds)


def test_session_on_a_truncated_side_file_fails_to_load(context_model):
    out, side = context_model
    os.truncate(side, side.stat().st_size - 1)
    with pytest.raises(InvalidModelError, match="its header describes"):
        InferenceSession(str(out), providers=["NPUExecutionProvider"])
