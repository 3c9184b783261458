"""Reading .ms files: real MindSpore Lite 1.5 files, and malformed files that must fail cleanly."""

from __future__ import annotations

import os
from pathlib import Path

import flatbuffers
import numpy as np
import pytest
from lite_compare import assert_models_equal
from test_lite_roundtrip import model_with

from converters.errors import InvalidModelError
from converters.lite import reader, writer
from converters.lite._generated import MetaGraph as gen_metagraph
from converters.lite.ir import LiteTensor
from provider.bench.process_memory import mapped_rss

SHARED = Path(os.environ.get("LITENPU_SHARED", Path(__file__).resolve().parents[2] / "shared"))
REAL = SHARED / "data" / "ms"

LENET_OPS = ["Conv2DFusion", "Activation", "MaxPoolFusion", "Conv2DFusion", "Activation",
             "MaxPoolFusion", "Transpose", "Reshape", "MatMulFusion", "Activation",
             "MatMulFusion", "Activation", "MatMulFusion"]
FACE_OPS = ["Conv2DFusion", "MaxPoolFusion", "Activation"] * 3 + [
    "Conv2DFusion", "Transpose", "FullConnection", "Activation", "FullConnection", "Softmax"]


def real(name: str) -> Path:
    path = REAL / name
    if not path.exists():
        pytest.skip(f"{path} not available (set LITENPU_SHARED)")
    return path


@pytest.mark.parametrize("name, inputs, outputs, op_list, n_weights", [
    ("lite_lenet_tod_infer.ms", [("inputs0", (2, 32, 32, 1))],
     [("Default/network-WithLossCell/_backbone-LeNet5/fc3-Dense/BiasAdd-op121", (2, 10))],
     LENET_OPS, 10),
    ("oh_ml_face_isface.ms", [("data", (1, 48, 48, 3))], [("prob", (1, 2))], FACE_OPS, 13),
])
def test_real_mindspore_lite_files(name, inputs, outputs, op_list, n_weights):
    m = reader.load(real(name))
    assert [(m.tensors[i].name, m.tensors[i].shape) for i in m.inputs] == inputs
    assert [(m.tensors[i].name, m.tensors[i].shape) for i in m.outputs] == outputs
    assert all(m.tensors[i].dtype == np.float32 for i in m.inputs + m.outputs)
    assert [n.op for n in m.nodes] == op_list
    assert m.version == "MindSpore Lite 1.5.0"
    assert sum(t.is_const for t in m.tensors) == n_weights
    conv = m.nodes[0]
    assert conv.attrs["format"] == "NHWC" and len(conv.attrs["kernel_size"]) == 2
    w = m.tensors[conv.inputs[1]]
    assert w.data.shape == w.shape and not w.data.flags.writeable
    assert len(m.subgraphs) == 1 and m.subgraphs[0].nodes == list(range(len(m.nodes)))
    # ... and survive our writer unchanged.
    assert_models_equal(reader.loads(writer.dumps(m)), m)


def test_eager_and_lazy_reads_agree():
    path = real("oh_ml_face_isface.ms")
    assert_models_equal(reader.load(path, lazy=False), reader.load(path, lazy=True))


# -- malformed files, built with flatc's object API so only one thing is wrong at a time --

def packed(mutate) -> bytes:
    """A valid model packed by flatc's generated code after `mutate(MetaGraphT)`."""
    image = writer.dumps(model_with("MatMulFusion", {}))
    graph = gen_metagraph.MetaGraphT.InitFromObj(gen_metagraph.MetaGraph.GetRootAs(image))
    mutate(graph)
    b = flatbuffers.Builder(0)
    b.Finish(graph.Pack(b), file_identifier=b"MSL2")
    return bytes(b.Output())


def _set(obj, **kw):
    for k, v in kw.items():
        setattr(obj, k, v)


@pytest.mark.parametrize("mutate, match", [
    (lambda g: _set(g, inputIndex=[9]), r"model inputs: index 9 out of range"),
    (lambda g: _set(g.nodes[0], outputIndex=[4]), r"node 0 \('n0'\) outputs: index 4"),
    (lambda g: _set(g.subGraph[0], nodeIndices=[1]), r"subgraph 0 .* nodes: index 1"),
    (lambda g: _set(g.allTensors[1], dims=[3, -4]), r"tensor 1 \('w'\) has negative dim -4"),
    (lambda g: _set(g.allTensors[1], dims=[3, 5]), r"shorter than dims \[3, 5\]"),
    (lambda g: _set(g.allTensors[1], dims=[3, 2]), r"longer than dims"),
    (lambda g: _set(g.allTensors[1], dims=[-1, 4]), r"holds data but has unknown dims"),
    (lambda g: _set(g.allTensors[1], dims=[1] * 65), r"rank 65"),
    (lambda g: _set(g.allTensors[1], format=77), r"Tensor.format = 77 is not a Format member"),
    (lambda g: _set(g.nodes[0].primitive, valueType=250), r"PrimitiveType 250 is not a known"),
    (lambda g: _set(g.nodes[0], primitive=None), r"node 0 \('n0'\) has no primitive"),
    (lambda g: _set(g.allTensors[1], weightQuantCompressType=3), r"compressed weights \(FSE\)"),
])
def test_defects_are_named(mutate, match):
    with pytest.raises(InvalidModelError, match=match):
        reader.loads(packed(mutate), source="bad.ms")


def test_names_with_a_nul_are_invalid_and_never_written():
    """onnxruntime's C API would cut the name short at the NUL (two values read as one)."""
    with pytest.raises(InvalidModelError, match=r"Tensor.name 'w\\x00x' contains a NUL"):
        reader.loads(packed(lambda g: _set(g.allTensors[1], name=b"w\0x")), source="bad.ms")
    model = model_with("MatMulFusion", {})
    for name in ("w\0x", b"w\xffx"):
        model.tensors[1].name = name
        with pytest.raises(InvalidModelError, match="expected text without NUL"):
            writer.dumps(model)


def test_external_location_must_stay_inside_the_model_folder(tmp_path):
    path = tmp_path / "m.ms"
    writer.save(model_with("AddFusion", {}), path, external_threshold=0)
    image = path.read_bytes()
    graph = gen_metagraph.MetaGraphT.InitFromObj(gen_metagraph.MetaGraph.GetRootAs(image))
    for location in (b"../m.msw", str(tmp_path / "m.msw").encode(), b"missing.msw"):
        graph.allTensors[1].externalData[0].location = location
        b = flatbuffers.Builder(0)
        b.Finish(graph.Pack(b), file_identifier=b"MSL2")
        path.write_bytes(bytes(b.Output()))
        with pytest.raises(InvalidModelError, match="m.ms: tensor 1 .*(inside the model|cannot open)"):
            reader.load(path)


def test_external_data_past_the_end_of_the_side_file(tmp_path):
    path = tmp_path / "m.ms"
    writer.save(model_with("AddFusion", {}), path, external_threshold=0)
    side = tmp_path / "m.msw"
    side.write_bytes(side.read_bytes()[:10])
    with pytest.raises(InvalidModelError, match="runs past the end of m.msw"):
        reader.load(path)
    with pytest.raises(InvalidModelError, match="needs the model's folder"):
        reader.loads(path.read_bytes())


@pytest.mark.parametrize("data, match", [
    (b"", "too short"),
    (b"\x00" * 7, "too short"),
    (b"\x08\x00\x00\x00TFL3\x00\x00\x00\x00", "identifier is b'TFL3'"),
    (b"\xff\xff\xff\x7fMSL2", "outside the 8-byte file"),
])
def test_not_a_model(data, match):
    with pytest.raises(InvalidModelError, match=match):
        reader.loads(data, source="x.ms")


def test_truncations_fail_cleanly():
    """Every cut fails, except cuts into the unreferenced alignment padding at the end."""
    image = writer.dumps(model_with("Conv2DFusion", {"kernel_size": [3, 3]}))
    whole = reader.loads(image)
    loaded = []
    for cut in range(len(image)):
        try:
            model = reader.loads(image[:cut])
        except InvalidModelError:
            continue
        assert_models_equal(model, whole)
        loaded.append(cut)
    assert all(cut > len(image) - writer.DATA_ALIGNMENT for cut in loaded)


def test_empty_file_on_disk(tmp_path):
    (tmp_path / "e.ms").write_bytes(b"")
    with pytest.raises(InvalidModelError, match=r"e\.ms: 0 bytes"):
        reader.load(tmp_path / "e.ms")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_lazy_open_pages_in_metadata_only(tmp_path):
    m = model_with("AddFusion", {})
    rng = np.random.default_rng(0)
    for i in range(8):
        m.tensors.append(LiteTensor.of(f"big{i}", np.float32, (512, 1024),
                                       rng.standard_normal((512, 1024), np.float32)))
    path = tmp_path / "big.ms"
    writer.save(m, path)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # cold, as a model not just written
    os.close(fd)
    model = reader.load(path)
    size = path.stat().st_size
    assert mapped_rss(path) < 0.02 * size
    total = sum(float(t.data.sum()) for t in model.tensors if t.is_const)
    assert np.isfinite(total) and mapped_rss(path) > 0.9 * size
