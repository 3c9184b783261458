"""The compile cache inside the NPU EP: sessions hit, miss, rebuild and degrade, never wrong.

Models: models/resnet_block.onnx with its batch fixed to 1 (static: compiled in Compile) and
the dynamic-batch MLP of ort_models (compiled per shape at run time). Outputs are compared
with onnxruntime's CPU EP, and a hit's outputs bit for bit with the first session's.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from ort_models import MLP, reference
from test_cache import CORRUPTIONS, _full, _read_only, _under_a_file

import provider
from converters.lite import reader as ms_reader
from provider.cache import CompileCache, entry
from provider.options import InvalidOptionError
from provider.ort import ep as ep_module
from provider.ort import partition_source
from provider.session import InferenceSession

ROOT = Path(__file__).resolve().parent.parent
IMAGE = np.random.default_rng(11).standard_normal((1, 3, 56, 56)).astype(np.float32)


def static_model(name: str = "resnet_block", batch: int = 1) -> bytes:
    """A models/ ONNX file with its symbolic batch dim fixed (all inputs)."""
    model = onnx.load(ROOT / "models" / f"{name}.onnx")
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            dims[0].dim_value = batch
    return model.SerializeToString()


RESNET = static_model()


def dynamic_cnn() -> bytes:
    """models/resnet_block.onnx with a dynamic batch, height and width (one NPU partition,
    compiled per concrete shape at run time)."""
    model = onnx.load(ROOT / "models" / "resnet_block.onnx")
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, name in zip(dims, ("batch", None, "height", "width"), strict=True):
        if name is not None:
            dim.dim_param = name
    return model.SerializeToString()


DYNAMIC = dynamic_cnn()
DYNAMIC_IMAGES = {shape: np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
                  for shape in ((1, 3, 56, 56), (2, 3, 48, 64))}


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    return reference(RESNET, {"image": IMAGE})[0]


class Calls:
    """Counts compile_model calls, and Lite IR the EP made at Compile or after (GetCapability's
    one import of the graph aside): partitions imported from their OrtGraph and partitions
    parsed from an `.ms` image (an EPContext payload) (monkeypatched wrappers)."""

    def __init__(self, monkeypatch):
        self.compile = self.imports = 0
        real_compile, real_import = partition_source.compile_model, ep_module.import_partition
        real_loads = ms_reader.loads

        def counted_compile(*args, **kwargs):
            self.compile += 1
            return real_compile(*args, **kwargs)

        def counted_import(*args, **kwargs):
            self.imports += 1
            return real_import(*args, **kwargs)

        def counted_loads(*args, **kwargs):
            self.imports += 1
            return real_loads(*args, **kwargs)

        monkeypatch.setattr(partition_source, "compile_model", counted_compile)
        monkeypatch.setattr(ep_module, "import_partition", counted_import)
        monkeypatch.setattr(ms_reader, "loads", counted_loads)


def session(model, cache_dir, **options) -> InferenceSession:
    opts = {"cache_dir": str(cache_dir), **options}
    return InferenceSession(model, providers=[("NPUExecutionProvider", opts),
                                              "CPUExecutionProvider"])


def run(sess, image=IMAGE) -> np.ndarray:
    return sess.run(None, {"image": image})[0]


def statuses(sess) -> list[str]:
    return [p.status for p in sess.cache_stats().partitions]


def test_second_session_is_a_hit_with_bit_identical_outputs(tmp_path, monkeypatch, expected):
    calls = Calls(monkeypatch)
    first = session(RESNET, tmp_path)
    # the miss compiles once; Compile imports nothing: it cuts the partition from
    # GetCapability's one import of the graph
    assert (calls.compile, calls.imports) == (1, 0) and statuses(first) == ["miss"]
    assert first._npu_eps[0].counters.imports == 1
    out = run(first)
    np.testing.assert_allclose(out, expected, atol=1e-4, rtol=1e-3)
    second = session(RESNET, tmp_path)
    assert (calls.compile, calls.imports) == (1, 0), "a hit must neither import nor compile"
    assert second._npu_eps[0].counters.compiles == 0
    (stats,) = second.cache_stats().partitions
    assert stats.status == "hit" and stats.compile_seconds == 0 and stats.entry
    assert stats.input_shapes == {"image": (1, 3, 56, 56)}
    # mapped without populate: the weights come in when a kernel reads them
    assert stats.pages_touched is not None and stats.pages_touched < stats.weight_pages
    assert run(second).tobytes() == out.tobytes()
    assert second.cache_stats().path == ""  # bytes, not a file: no CacheSession


def big_matmul() -> bytes:
    """y = x @ W with an 8 MiB W: a Program spanning several 2 MiB page-cache folios."""
    w = np.random.default_rng(5).standard_normal((1024, 2048)).astype(np.float32)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "big",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1024])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2048])],
        [onnx.numpy_helper.from_array(w, "W")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_hit_maps_under_two_percent_of_the_weight_pages(tmp_path):
    """Header and metadata are read, not mapped: a hit maps (almost) no weight page, even
    where one fault would map a whole large page-cache folio."""
    model = big_matmul()
    x = np.random.default_rng(6).standard_normal((1, 1024)).astype(np.float32)
    first = session(model, tmp_path)
    out = first.run(None, {"x": x})[0]
    del first
    hit = session(model, tmp_path)
    (stats,) = hit.cache_stats().partitions
    assert stats.status == "hit" and stats.weight_pages >= 2048
    if stats.pages_touched is None:
        pytest.skip("/proc/self/pagemap is not readable here")
    assert stats.pages_touched < 0.02 * stats.weight_pages, stats
    assert hit.run(None, {"x": x})[0].tobytes() == out.tobytes()
    np.testing.assert_allclose(out, reference(model, {"x": x})[0], atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("change", ["enable_fp16", "cache_version", "shape", "model_name"])
def test_changed_options_or_shapes_miss(tmp_path, monkeypatch, change):
    calls = Calls(monkeypatch)
    base = {"model_name": "resnet"}
    session(RESNET, tmp_path, **base)
    model, options = RESNET, dict(base)
    if change == "shape":
        model = static_model(batch=2)
    elif change == "model_name":
        options["model_name"] = "resnet-v2"
    else:
        options[change] = "1"
    sess = session(model, tmp_path, **options)
    expect = "rebuilt" if change == "cache_version" else "miss"  # same key, other version
    assert statuses(sess) == [expect] and calls.compile == 2
    if change == "cache_version":
        assert "cache_version" in sess.cache_stats().partitions[0].reason
    assert statuses(session(model, tmp_path, **options)) == ["hit"] and calls.compile == 2


def test_changed_weights_miss_with_or_without_model_name(tmp_path):
    """The key always holds the content (the partition's initializers, or the model's
    fingerprint): new weights miss, also under a model_name that only names entries."""
    model = onnx.load_from_string(RESNET)
    weight = next(t for t in model.graph.initializer if len(t.dims) == 4)
    array = onnx.numpy_helper.to_array(weight) * 2
    weight.CopyFrom(onnx.numpy_helper.from_array(array, weight.name))
    changed = model.SerializeToString()
    assert statuses(session(RESNET, tmp_path)) == ["miss"]
    sess = session(changed, tmp_path)
    assert statuses(sess) == ["miss"]
    np.testing.assert_allclose(run(sess), reference(changed, {"image": IMAGE})[0],
                               atol=1e-4, rtol=1e-3)
    assert statuses(session(RESNET, tmp_path, model_name="r")) == ["miss"]
    sess = session(changed, tmp_path, model_name="r")
    assert statuses(sess) == ["miss"]
    np.testing.assert_allclose(run(sess), reference(changed, {"image": IMAGE})[0],
                               atol=1e-4, rtol=1e-3)
    assert statuses(session(changed, tmp_path, model_name="r")) == ["hit"]


def test_dynamic_shapes_each_concrete_shape_is_its_own_key(tmp_path, monkeypatch):
    calls = Calls(monkeypatch)
    feeds = {n: {"x": np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32),
                 "b": np.ones(3, np.float32)} for n in (1, 3)}
    first = session(MLP, tmp_path)
    outs = {n: first.run(None, f)[0] for n, f in feeds.items()}
    assert statuses(first) == ["miss", "miss"] and calls.compile == 2
    second = session(MLP, tmp_path)
    for n, f in feeds.items():
        assert second.run(None, f)[0].tobytes() == outs[n].tobytes()
        np.testing.assert_allclose(outs[n], reference(MLP, f)[0], atol=1e-4, rtol=1e-3)
    assert statuses(second) == ["hit", "hit"] and calls.compile == 2
    assert [p.input_shapes["x"] for p in second.cache_stats().partitions] == [(1, 3), (3, 3)]


def test_cache_options_both_spellings_and_bad_values(tmp_path):
    sess = InferenceSession(RESNET, providers=[("NPUExecutionProvider", {
        "CachePath": str(tmp_path), "ModelName": "r", "CacheVersion": "7"}), "CPUExecutionProvider"])
    assert statuses(sess) == ["miss"]
    (info,) = CompileCache(tmp_path).entries()
    assert (info.model_name, info.cache_version) == ("r", "7")
    with pytest.raises(InvalidOptionError, match="cache_max_bytes.*integer"):
        session(RESNET, tmp_path, cache_max_bytes="lots")
    with pytest.raises(InvalidOptionError, match="CachePath"):
        session(RESNET, tmp_path, cache_path="x")  # the error lists every valid key


# ---- corruption and unwritable caches, through sessions -----------------------------------


def _stale_format(d: Path) -> None:
    manifest = json.loads((d / entry.MANIFEST).read_text())
    manifest["format_version"] -= 1
    del manifest["checksum"]
    (d / entry.MANIFEST).unlink()
    entry._write_manifest(d, manifest)  # a well-formed manifest of an older litenpu


SESSION_CORRUPTIONS = {name: CORRUPTIONS[name] for name in (
    "truncated program", "flipped weight byte", "flipped manifest byte", "deleted program",
    "deleted manifest")}
SESSION_CORRUPTIONS["stale format version"] = (_stale_format, "stale entry: format_version")


@pytest.mark.parametrize("name", SESSION_CORRUPTIONS)
def test_corrupt_entry_is_rebuilt_with_a_logged_reason(tmp_path, caplog, expected, name):
    corrupt, reason = SESSION_CORRUPTIONS[name]
    out = run(session(RESNET, tmp_path))
    (entry_dir,) = [p for p in tmp_path.iterdir()]
    corrupt(entry_dir)
    with caplog.at_level(logging.WARNING, logger="litenpu.cache"):
        sess = session(RESNET, tmp_path)
    (stats,) = sess.cache_stats().partitions
    assert stats.status == "rebuilt" and reason in stats.reason
    assert any(reason in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert run(sess).tobytes() == out.tobytes()
    np.testing.assert_allclose(out, expected, atol=1e-4, rtol=1e-3)
    assert statuses(session(RESNET, tmp_path)) == ["hit"]


@pytest.mark.parametrize("make_dir, reason", [(_under_a_file, "Not a directory"),
                                              (_read_only, "Read-only file system"),
                                              (_full, "No space left on device")])
def test_unwritable_cache_runs_in_memory(tmp_path, monkeypatch, caplog, expected, make_dir,
                                         reason):
    cache_dir = make_dir(tmp_path, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="litenpu.cache"):
        sess = session(RESNET, cache_dir)
    (stats,) = sess.cache_stats().partitions
    assert stats.status == "in-memory" and reason in stats.reason and stats.entry is None
    assert [r for r in caplog.records if reason in r.getMessage()]
    np.testing.assert_allclose(run(sess), expected, atol=1e-4, rtol=1e-3)


# ---- four processes, one cache -------------------------------------------------------------


def _worker(model: bytes, cache_dir: str, barrier, results) -> None:
    try:
        provider.register()
        barrier.wait(timeout=60)
        sess = session(model, cache_dir)
        results.put((statuses(sess), run(sess).tobytes()))
    except BaseException as exc:  # report, never hang the parent
        results.put((["error", repr(exc)], b""))


def test_four_processes_creating_sessions_leave_one_valid_entry(tmp_path, expected):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(RESNET, str(tmp_path), barrier, results))
               for _ in range(4)]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    assert all(s in (["miss"], ["hit"]) for s, _ in outcomes), outcomes
    assert len({out for _, out in outcomes}) == 1
    np.testing.assert_allclose(np.frombuffer(outcomes[0][1], np.float32).reshape(expected.shape),
                               expected, atol=1e-4, rtol=1e-3)
    cache = CompileCache(tmp_path)
    (info,) = cache.entries()
    assert os.listdir(tmp_path) == [info.name]  # no temp or trash left
    cache.verify_entry(info.name)
