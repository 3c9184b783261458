"""EPContext models: NPU partitions compiled once, saved in ONNX, loaded without compiling."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ort_models import MLP, NPU, STATIC, npu_session_options, reference

import provider
from provider.ort import compute, epcontext
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

    monkeypatch.setattr(compute, "compile_model", refuse)


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


def test_dynamic_partition_is_saved_as_lite_ir_and_compiled_per_shape(tmp_path):
    source, out = tmp_path / "mlp.onnx", tmp_path / "mlp_ctx.onnx"
    source.write_bytes(MLP)
    ort.ModelCompiler(npu_session_options(), str(source), embed_compiled_data_into_model=True).compile_to_file(str(out))
    (node,) = _context_nodes(out)
    assert {a.name: a for a in node.attribute}["ep_cache_context"].s[4:8] == b"MSL2"
    sess = InferenceSession(str(out), providers=NPU)
    for batch in (1, 3):
        feeds = {"x": RNG.standard_normal((batch, 3)).astype(np.float32),
                 "b": RNG.standard_normal(3).astype(np.float32)}
        np.testing.assert_allclose(sess.run(None, feeds)[0], reference(MLP, feeds)[0],
                                   atol=1e-4, rtol=1e-3)
