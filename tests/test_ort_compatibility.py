"""Compiled-model compatibility: the info onnxruntime stores in EPContext models, its verdict
through onnxruntime's own API, and context models this session must not run as they are."""

import json
import struct

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.capi import onnxruntime_pybind11_state as C
from ort_models import NPU, STATIC, npu_session_options

import provider
from provider.errors import InvalidModelError
from provider.npu import program as npu_program
from provider.options import CompileOptions
from provider.ort import EP_NAME, compatibility, epcontext
from provider.session import InferenceSession

KEY = f"ep_compatibility_info.{EP_NAME}"
X = np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def compile_static(tmp_path, **options: str):
    source, out = tmp_path / "static.onnx", tmp_path / "static_ctx.onnx"
    source.write_bytes(STATIC)
    sess_options = ort.SessionOptions()
    sess_options.add_provider_for_devices(provider.ep_devices(), options)
    ort.ModelCompiler(sess_options, str(source),
                      embed_compiled_data_into_model=True).compile_to_file(str(out))
    return out


def verdict(info: str):
    """onnxruntime's answer: OrtEpFactory::ValidateCompiledModelCompatibilityInfo."""
    return C.get_model_compatibility_for_ep_devices(provider.ep_devices(), info)


def test_model_compiler_stores_the_compatibility_info(tmp_path):
    out = compile_static(tmp_path)
    metadata = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert metadata[KEY] == compatibility.info(CompileOptions())
    stamp = json.loads(metadata[KEY][len(compatibility.PREFIX):])
    assert stamp == {"device": "sim", "format_version": npu_program.FORMAT_VERSION,
                     "litenpu_version": provider.__version__, "options": {"enable_fp16": False}}
    assert verdict(metadata[KEY]) == C.OrtCompiledModelCompatibility.EP_SUPPORTED_OPTIMAL
    if not hasattr(C, "get_compatibility_info_from_model"):
        pytest.skip(f"onnxruntime {ort.__version__} cannot read it from a model file")
    assert C.get_compatibility_info_from_model(str(out), EP_NAME) == metadata[KEY]


STAMP = json.loads(compatibility.info(CompileOptions())[len(compatibility.PREFIX):])
OLDER_FORMAT = min(npu_program.READABLE_VERSIONS)
OPTIMAL, PREFER, UNSUPPORTED = (compatibility.OPTIMAL, compatibility.PREFER_RECOMPILATION,
                                compatibility.UNSUPPORTED)
STATUS = {OPTIMAL: C.OrtCompiledModelCompatibility.EP_SUPPORTED_OPTIMAL,
          PREFER: C.OrtCompiledModelCompatibility.EP_SUPPORTED_PREFER_RECOMPILATION,
          UNSUPPORTED: C.OrtCompiledModelCompatibility.EP_UNSUPPORTED}
CHANGES = {
    "another format this litenpu reads": ({"format_version": OLDER_FORMAT}, PREFER),
    "a format it cannot read": ({"format_version": 99}, UNSUPPORTED),
    "another litenpu": ({"litenpu_version": "0.0.1"}, PREFER),
    "an option added since": ({"options": {}}, PREFER),
    "an option it does not know": ({"options": {"enable_fp16": False, "int4": True}},
                                   UNSUPPORTED),
    "an option value it cannot read": ({"options": {"enable_fp16": "maybe"}}, UNSUPPORTED),
    "another device": ({"device": "npu2"}, UNSUPPORTED),
    "fp16 Programs": ({"options": {"enable_fp16": True}}, OPTIMAL),
}


@pytest.mark.parametrize("change", CHANGES)
def test_onnxruntime_reports_the_verdict(change):
    fields, expected = CHANGES[change]
    if change == "another format this litenpu reads" and OLDER_FORMAT == npu_program.FORMAT_VERSION:
        pytest.skip("this litenpu reads one Program format only")
    info = compatibility.PREFIX + json.dumps({**STAMP, **fields})
    assert compatibility.validate(info).status == expected
    assert verdict(info) == STATUS[expected]


@pytest.mark.parametrize("info", ["", "QNNExecutionProvider;version=1", "litenpu:{not json",
                                  'litenpu:{"device": "sim"}'])
def test_strings_not_ours_are_unsupported(info):
    assert verdict(info) == C.OrtCompiledModelCompatibility.EP_UNSUPPORTED


def test_a_program_of_another_format_errors_clearly(tmp_path):
    out = compile_static(tmp_path)
    model = onnx.load(str(out))
    (node,) = [n for n in model.graph.node if n.op_type == epcontext.OP_TYPE]
    (attr,) = [a for a in node.attribute if a.name == "ep_cache_context"]
    attr.s = attr.s[:8] + struct.pack("<I", 99) + attr.s[12:]  # the header's format version
    onnx.save(model, str(out))
    with pytest.raises(Exception, match=r"format version 99, this litenpu reads versions"):
        InferenceSession(str(out), providers=NPU)
    with pytest.raises(Exception, match=r"format version 99"):  # plain onnxruntime too
        ort.InferenceSession(str(out), npu_session_options())


def test_a_context_model_runs_only_with_the_options_it_was_compiled_with(tmp_path):
    out = compile_static(tmp_path, enable_fp16="1")
    metadata = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert metadata[KEY] == compatibility.info(CompileOptions(enable_fp16=True))
    with pytest.raises(InvalidModelError, match=r"compiled with compile options "
                                                r"\{'enable_fp16': True\}; this session "
                                                r"compiles with \{'enable_fp16': False\}"):
        InferenceSession(str(out), providers=NPU)
    sess = InferenceSession(str(out), providers=[(EP_NAME, {"enable_fp16": "1"})])
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], np.maximum(X, 0) + 1, rtol=1e-3)
