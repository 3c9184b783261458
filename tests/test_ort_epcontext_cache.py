"""EPContext models with several NPU partitions, embedded or referencing cache entries.

resnet_block (batch 1) with `disable_ops=Add` runs its four residual Adds on CPU between five
NPU partitions: every partition must round-trip, not only the first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ort_models import STATIC, reference
from test_ort_cache import IMAGE, RESNET, Calls

import provider
from provider.cli import main
from provider.errors import InvalidModelError
from provider.ort import epcontext
from provider.session import InferenceSession

SPLIT = {"disable_ops": "Add"}  # five NPU partitions with CPU Adds between them


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "resnet.onnx"
    path.write_bytes(RESNET)
    return path


def compile_context(source: Path, out: Path, *, embed: bool, **options: str) -> list[onnx.NodeProto]:
    sess_options = ort.SessionOptions()
    sess_options.add_provider_for_devices(provider.ep_devices(), options)
    ort.ModelCompiler(sess_options, str(source),
                      embed_compiled_data_into_model=embed).compile_to_file(str(out))
    return [n for n in onnx.load(str(out)).graph.node if n.op_type == epcontext.OP_TYPE]


def entry_of(model: Path, node: onnx.NodeProto) -> Path:
    """The cache entry an EPContext node references (relative to the model's directory)."""
    return model.parent / {a.name: a for a in node.attribute}["ep_cache_context"].s.decode()


def npu_session(model, **options) -> InferenceSession:
    return InferenceSession(str(model), providers=[("NPUExecutionProvider", options),
                                                   "CPUExecutionProvider"])


@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "cache entries"])
def test_every_partition_round_trips(tmp_path, source, monkeypatch, embed):
    cache = tmp_path / "cache"
    out = tmp_path / "ctx.onnx"
    nodes = compile_context(source, out, embed=embed, cache_dir=str(cache), **SPLIT)
    assert len(nodes) == 5
    for node in nodes:
        attrs = {a.name: a for a in node.attribute}
        assert attrs["source"].s == b"NPUExecutionProvider"
        assert attrs["embed_mode"].i == int(embed)
        payload = attrs["ep_cache_context"].s
        if embed:
            assert payload.startswith(b"LNPUPROG")
        else:  # the partition's cache entry, relative to the context model
            assert Path(payload.decode()).parent == Path("cache")
    calls = Calls(monkeypatch)
    sess = npu_session(out, **SPLIT)
    assert (calls.compile, calls.imports) == (0, 0)
    stats = sess.cache_stats().partitions
    assert [s.status for s in stats] == ["context"] * 5
    assert all((s.entry is None) == embed for s in stats)
    expected = reference(RESNET, {"image": IMAGE})[0]
    got = sess.run(None, {"image": IMAGE})[0]
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-3)
    direct = npu_session(source, **SPLIT).run(None, {"image": IMAGE})[0]
    np.testing.assert_allclose(got, direct, atol=1e-5, rtol=1e-5)  # compile-time graph
    # optimizations may differ between ModelCompiler and a session: not always bit-identical


@pytest.mark.parametrize("layout", ["cache in the model's folder", "cache beside it"])
def test_model_moved_with_its_cache_still_loads(tmp_path, source, layout):
    project = tmp_path / "project"
    out = project / "ctx.onnx" if layout.endswith("folder") else project / "models" / "ctx.onnx"
    out.parent.mkdir(parents=True)
    nodes = compile_context(source, out, embed=False, cache_dir=str(project / "cache"), **SPLIT)
    prefix = b"cache/" if layout.endswith("folder") else b"../cache/"
    assert all({a.name: a for a in n.attribute}["ep_cache_context"].s.startswith(prefix)
               for n in nodes)
    moved = tmp_path / "elsewhere"
    project.rename(moved)
    got = npu_session(moved / out.relative_to(project), **SPLIT).run(None, {"image": IMAGE})[0]
    np.testing.assert_allclose(got, reference(RESNET, {"image": IMAGE})[0], atol=1e-4, rtol=1e-3)


def test_side_files_of_every_partition_move_with_the_model(tmp_path, source):
    """Embed mode 0 without a cache: one side file per partition, named relative to the model."""
    out = tmp_path / "project" / "ctx.onnx"
    out.parent.mkdir()
    nodes = compile_context(source, out, embed=False, **SPLIT)
    files = sorted(f.name for f in out.parent.iterdir() if f.suffix == epcontext.FILE_SUFFIX)
    assert len(files) == 5 == len(nodes)
    assert sorted({a.name: a for a in n.attribute}["ep_cache_context"].s.decode()
                  for n in nodes) == files
    (tmp_path / "project").rename(tmp_path / "moved")
    got = npu_session(tmp_path / "moved" / "ctx.onnx", **SPLIT).run(None, {"image": IMAGE})[0]
    np.testing.assert_allclose(got, reference(RESNET, {"image": IMAGE})[0], atol=1e-4, rtol=1e-3)


def test_a_cache_far_from_the_model_is_referenced_by_absolute_path(tmp_path, source):
    out = tmp_path / "a" / "b" / "ctx.onnx"
    out.parent.mkdir(parents=True)
    (node,) = compile_context(source, out, embed=False, cache_dir=str(tmp_path / "cache"))
    payload = {a.name: a for a in node.attribute}["ep_cache_context"].s.decode()
    assert Path(payload).parent == (tmp_path / "cache").resolve()
    assert epcontext.entry_reference(Path(payload), "") == payload  # no model path: absolute


def test_an_absolute_reference_of_older_models_still_loads(tmp_path, source):
    out = tmp_path / "ctx.onnx"
    compile_context(source, out, embed=False, cache_dir=str(tmp_path / "cache"))
    model = onnx.load(str(out))
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.name == "ep_cache_context":
                attr.s = str((out.parent / attr.s.decode()).resolve()).encode()
    onnx.save(model, str(out))
    np.testing.assert_allclose(npu_session(out).run(None, {"image": IMAGE})[0],
                               reference(RESNET, {"image": IMAGE})[0], atol=1e-4, rtol=1e-3)


def test_full_model_is_one_npu_kernel_in_a_tiny_model(tmp_path, source):
    out = tmp_path / "ctx.onnx"
    (node,) = compile_context(source, out, embed=False, cache_dir=str(tmp_path / "cache"))
    assert len(onnx.load(str(out)).graph.node) == 1  # onnxruntime parses one node
    assert out.stat().st_size < 4096 < source.stat().st_size
    sess = npu_session(out)
    assert len(sess.cache_stats().partitions) == 1
    np.testing.assert_allclose(sess.run(None, {"image": IMAGE})[0],
                               reference(RESNET, {"image": IMAGE})[0], atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("remove", ["entry", "program"])
def test_vanished_cache_entry_names_the_missing_file(tmp_path, source, remove):
    out = tmp_path / "ctx.onnx"
    nodes = compile_context(source, out, embed=False, cache_dir=str(tmp_path / "cache"), **SPLIT)
    entry_dir = entry_of(out, nodes[2])
    if remove == "entry":
        shutil.rmtree(entry_dir)
        missing = entry_dir / "manifest.json"
    else:
        (entry_dir / "program.lnp").unlink()
        missing = Path("program.lnp")
    with pytest.raises(Exception, match=str(missing).replace(".", r"\.")) as info:
        npu_session(out, **SPLIT)
    assert str(entry_dir) in str(info.value) and nodes[2].name in str(info.value)


def test_open_cache_entry_rejects_a_foreign_entry(tmp_path, source):
    """An entry directory renamed to another entry's name is not trusted."""
    out = tmp_path / "ctx.onnx"
    first, second = compile_context(source, out, embed=False, cache_dir=str(tmp_path / "c"),
                                    **SPLIT)[:2]
    a, b = (entry_of(out, n) for n in (first, second))
    shutil.rmtree(b)
    shutil.copytree(a, b)
    with pytest.raises(InvalidModelError, match="holds key"):
        epcontext.open_cache_entry(b, "p1")


def test_cli_compile_writes_a_context_model(tmp_path, source, capsys):
    cache, out = tmp_path / "cache", tmp_path / "out" / "r_ctx.onnx"
    assert main(["compile", str(source), "-o", str(out), "--cache-dir", str(cache),
                 "--option", "disable_ops=Add"]) == 0
    printed = capsys.readouterr().out
    assert "5 NPU partition(s)" in printed and str(cache.resolve()) in printed
    sess = npu_session(out, **SPLIT)
    np.testing.assert_allclose(sess.run(None, {"image": IMAGE})[0],
                               reference(RESNET, {"image": IMAGE})[0], atol=1e-4, rtol=1e-3)
    assert main(["compile", str(source), "--embed", "-q"]) == 0  # default -o beside the model
    assert (source.parent / "resnet_ctx.onnx").stat().st_size > source.stat().st_size // 2
    assert main(["compile", str(source), "-o", str(source), "--embed"]) == 1
    assert "overwrite the source" in capsys.readouterr().err
    ms_model = tmp_path / "m.ms"
    ms_model.write_bytes(b"")
    assert main(["compile", str(ms_model)]) == 1
    assert "convert it first" in capsys.readouterr().err


def test_without_a_cache_embed_mode_0_writes_a_side_file(tmp_path):
    """Embed mode 0 without a cache entry keeps the side-file form."""
    src = tmp_path / "static.onnx"
    src.write_bytes(STATIC)
    out = tmp_path / "ctx.onnx"
    (node,) = compile_context(src, out, embed=False)
    assert {a.name: a for a in node.attribute}["ep_cache_context"].s.endswith(b".lnpu")
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(npu_session(out).run(None, {"x": x})[0], np.maximum(x, 0) + 1)


def test_loading_a_context_model_marks_its_entries_used(tmp_path, source):
    """LRU eviction goes by an entry's mtime: a context model's entries are touched on load."""
    out = tmp_path / "ctx.onnx"
    nodes = compile_context(source, out, embed=False, cache_dir=str(tmp_path / "cache"), **SPLIT)
    entries = [entry_of(out, n) for n in nodes]
    for directory in entries:
        os.utime(directory, (1_000_000, 1_000_000))
    npu_session(out, **SPLIT)
    assert all(d.stat().st_mtime > 1_000_000 for d in entries)
