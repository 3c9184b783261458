"""EPContext models: NPU partitions compiled once, saved in ONNX, loaded without compiling."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ort_models import MLP, NPU, STATIC, npu_session_options, reference

import provider
from provider.ort import epcontext, partition_source
from provider.ort.partition_payload import StoredPartition
from provider.session import InferenceSession

RNG = np.random.default_rng(3)


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def _context_nodes(path) -> list[onnx.NodeProto]:
    return [n for n in onnx.load(str(path)).graph.node if n.op_type == "EPContext"]


def _no_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("compiled although the EPContext model holds the Program")

    monkeypatch.setattr(partition_source, "compile_model", refuse)


def test_model_compiler_embeds_the_program_and_loading_compiles_nothing(tmp_path, monkeypatch):
    source, out = tmp_path / "static.onnx", tmp_path / "static_ctx.onnx"
    source.write_bytes(STATIC)
    ort.ModelCompiler(npu_session_options(), str(source), embed_compiled_data_into_model=True).compile_to_file(str(out))
    (node,) = _context_nodes(out)
    attrs = {a.name: a for a in node.attribute}
    assert node.domain == epcontext.DOMAIN and attrs["source"].s == b"NPUExecutionProvider"
    assert attrs["embed_mode"].i == 1 and attrs["ep_cache_context"].s.startswith(b"LNPUPROG")
    _no_compiling(monkeypatch)
    sess = InferenceSession(str(out), providers=NPU)
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x, 0) + 1, rtol=1e-6)
    assert [p.device for p in sess.partition()] == ["NPU"]


def test_session_options_route_writes_a_side_file(tmp_path):
    source, out = tmp_path / "static.onnx", tmp_path / "ctx" / "static_ctx.onnx"
    out.parent.mkdir()
    source.write_bytes(STATIC)
    ort.InferenceSession(str(source), npu_session_options(**{
        "ep.context_enable": "1", "ep.context_file_path": str(out), "ep.context_embed_mode": "0"}))
    (node,) = _context_nodes(out)
    file_name = {a.name: a for a in node.attribute}["ep_cache_context"].s.decode()
    assert (out.parent / file_name).read_bytes().startswith(b"LNPUPROG")
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    sess = ort.InferenceSession(str(out), npu_session_options())
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x, 0) + 1, rtol=1e-6)


def _mlp_feeds(batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    return {"x": rng.standard_normal((batch, 3)).astype(np.float32),
            "b": rng.standard_normal(3).astype(np.float32)}


@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "side file"])
def test_dynamic_partition_is_saved_as_descriptor_and_lite_ir(tmp_path, embed):
    """The payload starts with the partition's descriptor; with a compile cache, a second
    session on the context model maps every shape it has seen without reading the Lite IR."""
    source, out = tmp_path / "mlp.onnx", tmp_path / "mlp_ctx.onnx"
    source.write_bytes(MLP)
    ort.ModelCompiler(npu_session_options(), str(source),
                      embed_compiled_data_into_model=embed).compile_to_file(str(out))
    (node,) = _context_nodes(out)
    payload = {a.name: a for a in node.attribute}["ep_cache_context"].s
    if not embed:
        payload = (tmp_path / payload.decode()).read_bytes()
    stored = StoredPartition.from_bytes(payload, "mlp")
    assert payload.startswith(b"LNPUPART") and stored.image()[4:8] == b"MSL2"
    assert [t.name for t in stored.descriptor.inputs] == ["x", "b"]
    assert [n for n, _ in stored.descriptor.nodes] == ["add", "relu", "matmul", "scale"]
    cache = {"cache_dir": str(tmp_path / "cache")}
    first = InferenceSession(str(out), providers=[("NPUExecutionProvider", cache)])
    outs = {n: first.run(None, _mlp_feeds(n))[0] for n in (1, 3)}
    for n, got in outs.items():
        np.testing.assert_allclose(got, reference(MLP, _mlp_feeds(n))[0], atol=1e-4, rtol=1e-3)
    assert (first._npu_eps[0].counters.imports, first._npu_eps[0].counters.compiles) == (1, 2)
    second = InferenceSession(str(out), providers=[("NPUExecutionProvider", cache)])
    for n, got in outs.items():
        assert second.run(None, _mlp_feeds(n))[0].tobytes() == got.tobytes()
    assert (second._npu_eps[0].counters.imports, second._npu_eps[0].counters.compiles) == (0, 0)


def test_bare_lite_ir_payload_of_earlier_versions_still_loads(tmp_path):
    """An EPContext node whose payload is a bare `.ms` image (no descriptor) is read in full
    and compiled per shape, keyed by its content."""
    source, out = tmp_path / "mlp.onnx", tmp_path / "mlp_ctx.onnx"
    source.write_bytes(MLP)
    ort.ModelCompiler(npu_session_options(), str(source),
                      embed_compiled_data_into_model=True).compile_to_file(str(out))
    model = onnx.load(str(out))
    attr = next(a for a in model.graph.node[0].attribute if a.name == "ep_cache_context")
    attr.s = StoredPartition.from_bytes(attr.s, "mlp").image()
    onnx.save(model, str(out))
    cache = {"cache_dir": str(tmp_path / "cache")}
    for expected_compiles in (1, 0):
        sess = InferenceSession(str(out), providers=[("NPUExecutionProvider", cache)])
        np.testing.assert_allclose(sess.run(None, _mlp_feeds(2))[0],
                                   reference(MLP, _mlp_feeds(2))[0], atol=1e-4, rtol=1e-3)
        assert sess._npu_eps[0].counters.compiles == expected_compiles
