"""CacheSession: a warm start loads the stored EPContext model and never parses the source."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ort_models import MLP, reference
from test_cache import _full, _read_only, _under_a_file
from test_ort_cache import (
    DYNAMIC,
    DYNAMIC_IMAGES,
    IMAGE,
    RESNET,
    SESSION_CORRUPTIONS,
    Calls,
)

import provider
from provider.cache import CompileCache, fingerprint
from provider.ort import cache_session, capability
from provider.ort.partition_payload import StoredPartition
from provider.session import InferenceSession


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    return reference(RESNET, {"image": IMAGE})[0]


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "resnet.onnx"
    path.write_bytes(RESNET)
    return path


def session(model, cache_dir, **options) -> InferenceSession:
    opts = {"cache_dir": str(cache_dir), "model_name": "resnet", **options}
    return InferenceSession(model if isinstance(model, bytes) else str(model),
                            providers=[("NPUExecutionProvider", opts), "CPUExecutionProvider"])


def run(sess) -> np.ndarray:
    return sess.run(None, {"image": IMAGE})[0]


@pytest.mark.parametrize("options", [{}, {"disable_ops": "Add"}], ids=["one kernel", "split"])
def test_warm_start_uses_the_stored_context_model(tmp_path, source, expected, options):
    cold = session(source, tmp_path, **options)
    stats = cold.cache_stats()
    assert stats.path == "source" and stats.reason.startswith("stored session entry")
    out = run(cold)
    np.testing.assert_allclose(out, expected, atol=1e-4, rtol=1e-3)
    warm = session(source, tmp_path, **options)
    stats = warm.cache_stats()
    assert stats.path == "context-model" and stats.partitions
    assert {p.status for p in stats.partitions} == {"context"}
    assert run(warm).tobytes() == out.tobytes()
    npu = [p.op_type for p in warm.partition() if p.device == "NPU"]
    assert npu == ["EPContext"] * len(stats.partitions)  # onnxruntime saw the context model


def test_warm_start_does_not_parse_or_read_the_source(tmp_path, source, monkeypatch, expected):
    out = run(session(source, tmp_path))
    calls = Calls(monkeypatch)

    def forbidden(*args, **kwargs):
        raise AssertionError("the unchanged source was parsed or hashed")

    monkeypatch.setattr(onnx, "load", forbidden)
    monkeypatch.setattr(fingerprint, "_mapped_digest", forbidden)  # its memo answers
    warm = session(source, tmp_path)
    assert warm.cache_stats().path == "context-model"
    assert (calls.compile, calls.imports) == (0, 0)
    assert run(warm).tobytes() == out.tobytes()


def test_fingerprint_memo_is_written_after_the_session_is_made(tmp_path, source, monkeypatch):
    """The memo (0.4 ms of a small model's cold creation) is the cache writer's, queued
    until the session exists; a session made right after reads it back, never hashing."""
    memo_dir = tmp_path / fingerprint.MEMO_DIR
    record, writers, during = fingerprint._record, [], []
    create = InferenceSession._create

    def recorded(*args):
        writers.append(threading.current_thread().name)
        record(*args)

    def creating(self, *args):
        during.append(memo_dir.exists())
        create(self, *args)

    monkeypatch.setattr(fingerprint, "_record", recorded)
    monkeypatch.setattr(InferenceSession, "_create", creating)
    session(source, tmp_path)
    monkeypatch.setattr(fingerprint, "_mapped_digest", None)  # a hash would fail
    assert session(source, tmp_path).cache_stats().path == "context-model"
    assert during == [False, True] and len(writers) == 1
    assert writers[0].startswith("litenpu-cache-writer")


def _with_doubled_weights(source: Path) -> bytes:
    """The model at `source` with one conv weight doubled (same size on disk)."""
    model = onnx.load(str(source))
    weight = next(t for t in model.graph.initializer if len(t.dims) == 4)
    array = onnx.numpy_helper.to_array(weight) * 2
    weight.CopyFrom(onnx.numpy_helper.from_array(array, weight.name))
    return model.SerializeToString()


def test_source_replaced_in_place_with_size_and_mtime_restored_is_not_served_stale(
        tmp_path, source):
    """Other weights written into the same file, its size and mtime put back: the inode's
    ctime changed, so the file is hashed again and found to be another model."""
    session(source, tmp_path)
    changed = _with_doubled_weights(source)
    st = source.stat()
    assert len(changed) == st.st_size
    with open(source, "r+b") as f:  # in place: same inode
        f.write(changed)
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    sess = session(source, tmp_path)
    stats = sess.cache_stats()
    assert stats.path == "source" and [p.status for p in stats.partitions] == ["miss"]
    np.testing.assert_allclose(run(sess), reference(changed, {"image": IMAGE})[0],
                               atol=1e-4, rtol=1e-3)


def test_touched_source_with_the_same_content_stays_warm(tmp_path, source):
    """Only the mtime changed: the file is hashed once more and its content recognised."""
    out = run(session(source, tmp_path))
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    warm = session(source, tmp_path)
    assert warm.cache_stats().path == "context-model"
    assert run(warm).tobytes() == out.tobytes()


def test_new_weights_under_the_same_model_name_are_not_served_stale(tmp_path, source):
    """The file changed but kept its model_name: its content fingerprint changed, so neither
    the session entry nor the partition's Program is a hit."""
    session(source, tmp_path)
    changed = _with_doubled_weights(source)
    source.write_bytes(changed)
    sess = session(source, tmp_path)
    stats = sess.cache_stats()
    assert stats.path == "source" and stats.reason.startswith("stored session entry")
    assert [p.status for p in stats.partitions] == ["miss"]
    np.testing.assert_allclose(run(sess), reference(changed, {"image": IMAGE})[0],
                               atol=1e-4, rtol=1e-3)
    warm = session(source, tmp_path)
    assert warm.cache_stats().path == "context-model"
    assert run(warm).tobytes() == run(sess).tobytes()


@pytest.mark.parametrize("given", ["path", "bytes"])
def test_two_models_with_one_model_name_keep_their_own_programs(tmp_path, source, given):
    """Same architecture, other weights, same model_name and cache dir: each model gets its
    own outputs, whether the second one is another file or bytes."""
    other = tmp_path / "other" / "resnet.onnx"
    other.parent.mkdir()
    other.write_bytes(_with_doubled_weights(source))
    first = session(source if given == "path" else source.read_bytes(), tmp_path)
    second = session(other if given == "path" else other.read_bytes(), tmp_path)
    assert [p.status for p in second.cache_stats().partitions] == ["miss"]
    for model, sess in ((source, first), (other, second)):
        np.testing.assert_allclose(run(sess), reference(model.read_bytes(), {"image": IMAGE})[0],
                                   atol=1e-4, rtol=1e-3)
    again = session(source if given == "path" else source.read_bytes(), tmp_path)
    assert run(again).tobytes() == run(first).tobytes()


def test_vanished_partition_entry_falls_back_to_the_source(tmp_path, source, caplog, expected):
    session(source, tmp_path)
    warm = session(source, tmp_path)
    (partition,) = warm.cache_stats().partitions
    shutil.rmtree(partition.entry)
    with caplog.at_level(logging.WARNING, logger="litenpu.cache"):
        sess = session(source, tmp_path)
    stats = sess.cache_stats()
    assert stats.path == "source" and [p.status for p in stats.partitions] == ["miss"]
    assert any("stored EPContext model unusable" in r.getMessage() and "cache entry is gone"
               in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(run(sess), expected, atol=1e-4, rtol=1e-3)
    assert session(source, tmp_path).cache_stats().path == "context-model"


def test_cache_version_or_options_select_another_session_entry(tmp_path, source):
    session(source, tmp_path)
    assert session(source, tmp_path, cache_version="2").cache_stats().path == "source"
    assert session(source, tmp_path, enable_fp16="1").cache_stats().path == "source"
    assert session(source, tmp_path, enable_fp16="1").cache_stats().path == "context-model"


def test_npu_threads_does_not_change_what_is_cached(tmp_path, source, expected):
    """A run-time core count compiles nothing different: the entry is shared."""
    session(source, tmp_path)
    warm = session(source, tmp_path, npu_threads="1")
    assert warm.cache_stats().path == "context-model"
    np.testing.assert_allclose(run(warm), expected, atol=1e-4, rtol=1e-3)


def test_no_cache_session_for_bytes_or_without_model_name(tmp_path, source):
    assert session(RESNET, tmp_path).cache_stats().path == ""
    sess = InferenceSession(str(source), providers=[
        ("NPUExecutionProvider", {"cache_dir": str(tmp_path)}), "CPUExecutionProvider"])
    assert sess.cache_stats().path == "" and sess.cache_stats().partitions[0].status == "miss"


def test_dynamic_shapes_warm_start_compiles_nothing_it_has_seen(tmp_path, monkeypatch):
    """A dynamic partition's EPContext node references its descriptor and Lite IR (a side file
    in the session entry); its Programs per shape come from the cache, keyed alike in cold and
    warm sessions, and the Lite IR is read only for a shape no entry holds."""
    path = tmp_path / "mlp.onnx"
    path.write_bytes(MLP)
    feeds = {n: {"x": np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32),
                 "b": np.ones(3, np.float32)} for n in (1, 4)}
    providers = [("NPUExecutionProvider", {"cache_dir": str(tmp_path / "c"), "model_name": "mlp"}),
                 "CPUExecutionProvider"]
    cold = InferenceSession(str(path), providers=providers)
    outs = {n: cold.run(None, f)[0] for n, f in feeds.items()}
    assert cold.cache_stats().reason.startswith("stored session entry")
    calls = Calls(monkeypatch)
    warm = InferenceSession(str(path), providers=providers)
    assert warm.cache_stats().path == "context-model"
    for n, f in feeds.items():
        assert warm.run(None, f)[0].tobytes() == outs[n].tobytes()
        np.testing.assert_allclose(outs[n], reference(MLP, f)[0], atol=1e-4, rtol=1e-3)
    assert [p.status for p in warm.cache_stats().partitions] == ["hit", "hit"]
    assert (calls.compile, calls.imports) == (0, 0)
    third = {"x": np.ones((7, 3), np.float32), "b": np.ones(3, np.float32)}
    out = warm.run(None, third)[0]
    np.testing.assert_allclose(out, reference(MLP, third)[0], atol=1e-4)
    assert (calls.compile, calls.imports) == (1, 1)  # a new shape: its Lite IR read, compiled
    again = InferenceSession(str(path), providers=providers)
    assert again.run(None, third)[0].tobytes() == out.tobytes()
    assert (calls.compile, calls.imports) == (1, 1)  # ... and stored: a third session maps it


def _dynamic(tmp_path) -> Path:
    """The dynamic-shape CNN as a file (its cache: tmp_path / "cache")."""
    path = tmp_path / "cnn.onnx"
    path.write_bytes(DYNAMIC)
    return path


def dynamic_session(path: Path, **options) -> InferenceSession:
    return session(path, path.parent / "cache", model_name="cnn", **options)


def _runs(sess) -> dict[tuple, np.ndarray]:
    return {shape: sess.run(None, {"image": image})[0] for shape, image in DYNAMIC_IMAGES.items()}


def test_dynamic_cnn_warm_session_maps_every_shape_seen_before(tmp_path, monkeypatch):
    """Counters of the warm session's EP: no Lite IR import (GetCapability's included) and no
    compile for the shapes the cold session ran; outputs bit-identical."""
    path = _dynamic(tmp_path)
    cold = dynamic_session(path)
    outs = _runs(cold)
    (cold_ep,) = cold._npu_eps
    assert (cold_ep.counters.imports, cold_ep.counters.compiles) == (1, 2)
    for shape, image in DYNAMIC_IMAGES.items():
        np.testing.assert_allclose(outs[shape], reference(DYNAMIC, {"image": image})[0],
                                   atol=1e-4, rtol=1e-3)

    def unread(self):
        raise AssertionError("the stored Lite IR was read for a shape the cache holds")

    monkeypatch.setattr(StoredPartition, "image", unread)
    warm = dynamic_session(path)
    assert warm.cache_stats().path == "context-model"
    assert {shape: out.tobytes() for shape, out in _runs(warm).items()} == {
        shape: out.tobytes() for shape, out in outs.items()}
    (ep,) = warm._npu_eps
    assert (ep.counters.imports, ep.counters.compiles) == (0, 0)
    assert [p.status for p in warm.cache_stats().partitions] == ["hit", "hit"]
    assert [p.input_shapes["image"] for p in warm.cache_stats().partitions] == list(DYNAMIC_IMAGES)


def test_dynamic_cnn_new_shape_compiles_once_and_a_third_session_maps_it(tmp_path):
    path = _dynamic(tmp_path)
    dynamic_session(path).run(None, {"image": DYNAMIC_IMAGES[(1, 3, 56, 56)]})
    image = np.random.default_rng(7).standard_normal((3, 3, 40, 40)).astype(np.float32)
    warm = dynamic_session(path)
    out = warm.run(None, {"image": image})[0]
    np.testing.assert_allclose(out, reference(DYNAMIC, {"image": image})[0], atol=1e-4, rtol=1e-3)
    (ep,) = warm._npu_eps
    assert (ep.counters.imports, ep.counters.compiles) == (1, 1)  # the Lite IR read once
    assert [p.status for p in warm.cache_stats().partitions] == ["miss"]
    warm.run(None, {"image": image[:1]})  # another new shape: the Lite IR is kept
    assert (ep.counters.imports, ep.counters.compiles) == (1, 2)
    third = dynamic_session(path)
    assert third.run(None, {"image": image})[0].tobytes() == out.tobytes()
    (ep,) = third._npu_eps
    assert (ep.counters.imports, ep.counters.compiles) == (0, 0)
    shapes = {info.input_shapes for info in CompileCache(tmp_path / "cache").entries()}
    assert shapes == {(), (("image", (1, 3, 56, 56)),), (("image", (3, 3, 40, 40)),),
                      (("image", (1, 3, 40, 40)),)}  # the session entry and one per shape


@pytest.mark.parametrize("name", SESSION_CORRUPTIONS)
def test_corrupt_per_shape_entry_recompiles_that_shape_only(tmp_path, caplog, name):
    """The corruption matrix on one per-shape entry of a warm dynamic session: that shape is
    rebuilt (the Lite IR read for it) with the reason logged; the other shape is mapped."""
    corrupt, reason = SESSION_CORRUPTIONS[name]
    path = _dynamic(tmp_path)
    cold = dynamic_session(path)
    outs = _runs(cold)
    entries = {p.input_shapes["image"]: Path(p.entry) for p in cold.cache_stats().partitions}
    del cold
    bad = (2, 3, 48, 64)
    corrupt(entries[bad])
    with caplog.at_level(logging.WARNING, logger="litenpu.cache"):
        warm = dynamic_session(path)
        got = _runs(warm)
    assert warm.cache_stats().path == "context-model"
    assert {s: o.tobytes() for s, o in got.items()} == {s: o.tobytes() for s, o in outs.items()}
    status = {p.input_shapes["image"]: p for p in warm.cache_stats().partitions}
    assert status[(1, 3, 56, 56)].status == "hit"
    assert status[bad].status == "rebuilt" and reason in status[bad].reason
    assert any(reason in r.getMessage() and str(entries[bad]) in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)
    (ep,) = warm._npu_eps
    assert (ep.counters.imports, ep.counters.compiles) == (1, 1)
    again = dynamic_session(path)
    assert {s: o.tobytes() for s, o in _runs(again).items()} == {
        s: o.tobytes() for s, o in outs.items()}
    assert [p.status for p in again.cache_stats().partitions] == ["hit", "hit"]


def test_cache_max_bytes_counts_per_shape_entries(tmp_path):
    """Per-shape entries are entries like any other: the LRU cap evicts the least recently
    used ones, and an evicted shape is compiled again (from the stored Lite IR) when it comes
    back."""
    path = _dynamic(tmp_path)
    cold = dynamic_session(path)
    _runs(cold)
    cache = CompileCache(tmp_path / "cache")
    sizes = {i.input_shapes: i.size for i in cache.entries()}
    cap = sizes[()] + max(v for k, v in sizes.items() if k)  # the session entry + one shape
    warm = dynamic_session(path, cache_max_bytes=str(cap))
    image = np.random.default_rng(8).standard_normal((1, 3, 32, 32)).astype(np.float32)
    warm.run(None, {"image": image})  # a new shape stored: older entries evicted
    infos = cache.entries()
    assert sum(i.size for i in infos) <= cap
    assert [i.input_shapes for i in infos][-1] == (("image", (1, 3, 32, 32)),)
    (ep,) = warm._npu_eps
    first = DYNAMIC_IMAGES[(1, 3, 56, 56)]
    np.testing.assert_allclose(warm.run(None, {"image": first})[0],
                               reference(DYNAMIC, {"image": first})[0], atol=1e-4, rtol=1e-3)
    assert ep.counters.compiles == 2 and ep.counters.imports == 1


def test_context_model_with_cpu_nodes_is_not_imported_again(tmp_path, source, expected):
    """A warm start of a model split around CPU nodes: GetCapability claims the EPContext nodes
    and leaves the others on CPU without importing the graph."""
    session(source, tmp_path, disable_ops="Add")
    warm = session(source, tmp_path, disable_ops="Add")
    assert warm.cache_stats().path == "context-model"
    (ep,) = warm._npu_eps
    assert (ep.counters.imports, ep.counters.compiles) == (0, 0)
    assert "import" not in ep.counters.seconds
    cpu = [p for p in warm.partition() if p.device == "CPU"]
    assert [p.op_type for p in cpu] == ["Add"] * 4
    assert all("compiled model" in p.reason for p in cpu)
    np.testing.assert_allclose(run(warm), expected, atol=1e-4, rtol=1e-3)


def test_session_entry_holds_context_model_and_source_stat(tmp_path, source):
    sess = session(source, tmp_path)
    entry_dir = Path(sess.cache_stats().reason.split()[-1])
    assert (entry_dir / cache_session.CONTEXT_MODEL).stat().st_size < 4096
    # the Programs stay in the partition entries: the session entry's is an empty one
    assert (entry_dir / "program.lnp").stat().st_size <= 8192
    cache = CompileCache(tmp_path)
    cache.verify_entry(entry_dir.name)
    assert {e.program_name for e in cache.entries()} >= {"CacheSession resnet.onnx"}
    recorded = json.loads((entry_dir / cache_session.SOURCE_STAT).read_text())
    assert recorded == {"path": str(source.resolve()),
                        "fingerprint": fingerprint.file_fingerprint(source), "npu_only": True}


@pytest.mark.parametrize("options, npu_only", [({}, True), ({"disable_ops": "Add"}, False)],
                         ids=["one kernel", "split"])
def test_npu_only_context_model_is_loaded_without_graph_optimisation(
        tmp_path, source, expected, monkeypatch, options, npu_only):
    """A stored EPContext model of our EPContext nodes only is created with onnxruntime's graph
    optimisations off (nothing to optimise) and one intra-op thread (no CPU kernel to run)
    unless the caller sized them, and claimed without reading its graph in full; the
    caller's options keep their settings. A model with CPU nodes keeps the caller's."""
    session(source, tmp_path, **options)
    seen = []
    create = InferenceSession._create

    def spy(self, model, sess_options, kwargs):
        seen.append((sess_options.graph_optimization_level, sess_options.intra_op_num_threads))
        return create(self, model, sess_options, kwargs)

    monkeypatch.setattr(InferenceSession, "_create", spy)
    reads = []
    read_graph = capability.read_graph
    monkeypatch.setattr(capability, "read_graph", lambda *a, **k: reads.append(1) or
                        read_graph(*a, **k))
    mine = ort.SessionOptions()
    mine.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    warm = InferenceSession(str(source), mine, providers=[
        ("NPUExecutionProvider", {"cache_dir": str(tmp_path), "model_name": "resnet", **options}),
        "CPUExecutionProvider"])
    assert warm.cache_stats().path == "context-model"
    assert seen == [(ort.GraphOptimizationLevel.ORT_DISABLE_ALL, 1) if npu_only
                    else (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, 0)]
    assert mine.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert mine.intra_op_num_threads == 0
    assert len(reads) == (0 if npu_only else 1)  # GetCapability read the graph in full
    (ep,) = warm._npu_eps
    assert "assess" not in ep.counters.seconds and ep.counters.imports == 0
    (placement,) = ep.placements
    assert bool(placement.cpu) != npu_only and placement.partitions
    assert set(placement.op_types.values()) >= {"EPContext"}
    np.testing.assert_allclose(run(warm), expected, atol=1e-4, rtol=1e-3)
    sized = ort.SessionOptions()
    sized.intra_op_num_threads = 2  # the caller's own choice stands
    InferenceSession(str(source), sized, providers=[
        ("NPUExecutionProvider", {"cache_dir": str(tmp_path), "model_name": "resnet", **options}),
        "CPUExecutionProvider"])
    assert seen[-1][1] == 2 and sized.intra_op_num_threads == 2


def test_a_moved_cache_directory_stays_warm(tmp_path, source, expected):
    out = run(session(source, tmp_path / "cache"))
    (tmp_path / "cache").rename(tmp_path / "moved")
    warm = session(source, tmp_path / "moved")
    assert warm.cache_stats().path == "context-model"
    assert run(warm).tobytes() == out.tobytes()


def test_callers_own_context_request_or_other_optimization_level(tmp_path, source):
    options = ort.SessionOptions()
    options.add_session_config_entry("ep.context_enable", "1")
    options.add_session_config_entry("ep.context_file_path", str(tmp_path / "mine_ctx.onnx"))
    sess = InferenceSession(str(source), options, providers=[
        ("NPUExecutionProvider", {"cache_dir": str(tmp_path / "c"), "model_name": "r"}),
        "CPUExecutionProvider"])
    assert sess.cache_stats().path == "" and (tmp_path / "mine_ctx.onnx").is_file()
    session(source, tmp_path)
    basic = ort.SessionOptions()
    basic.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    sess = InferenceSession(str(source), basic, providers=[
        ("NPUExecutionProvider", {"cache_dir": str(tmp_path), "model_name": "resnet"}),
        "CPUExecutionProvider"])
    assert sess.cache_stats().path == "source"


@pytest.mark.parametrize("corrupt", ["context model", "source stat"])
def test_bad_session_entry_is_rebuilt(tmp_path, source, caplog, expected, corrupt):
    entry_dir = Path(session(source, tmp_path).cache_stats().reason.split()[-1])
    name = cache_session.CONTEXT_MODEL if corrupt == "context model" else cache_session.SOURCE_STAT
    data = bytearray((entry_dir / name).read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(entry_dir / name, 0o644)  # another program, not litenpu, writes the entry
    (entry_dir / name).write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="litenpu.cache"):
        sess = session(source, tmp_path)
    assert sess.cache_stats().path == "source"
    assert any(name in r.getMessage() and "sha256 mismatch" in r.getMessage()
               for r in caplog.records)
    np.testing.assert_allclose(run(sess), expected, atol=1e-4, rtol=1e-3)
    assert session(source, tmp_path).cache_stats().path == "context-model"


def _worker(source: str, cache_dir: str, barrier, results) -> None:
    try:
        provider.register()
        barrier.wait(timeout=60)
        sess = session(source, cache_dir)
        stats = sess.cache_stats()
        results.put((stats.path, [p.status for p in stats.partitions], run(sess).tobytes()))
    except BaseException as exc:  # report, never hang the parent
        results.put(("error", repr(exc), b""))


def test_four_processes_one_partition_entry_and_one_session_entry(tmp_path, source, expected):
    cache_dir = tmp_path / "cache"
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(str(source), str(cache_dir), barrier, results))
               for _ in range(4)]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    assert all(path in ("source", "context-model") for path, _, _ in outcomes), outcomes
    assert len({out for _, _, out in outcomes}) == 1
    got = np.frombuffer(outcomes[0][2], np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-3)
    cache = CompileCache(cache_dir)
    infos = cache.entries()
    # no temp or trash: the entries and the fingerprint memos
    assert sorted(os.listdir(cache_dir)) == sorted([*(i.name for i in infos), fingerprint.MEMO_DIR])
    assert len(infos) == 2 and {i.program_name.startswith("CacheSession") for i in infos} == {
        True, False}
    for info in infos:
        cache.verify_entry(info.name)
    assert session(source, cache_dir).cache_stats().path == "context-model"


@pytest.mark.parametrize("make_dir", [_under_a_file, _read_only, _full],
                         ids=["under a file", "read-only", "full"])
def test_unwritable_cache_with_a_dynamic_model_runs_in_memory(tmp_path, monkeypatch, make_dir):
    """A dynamic-shape model with cache options on a cache that cannot be written: every
    shape compiles in memory and runs; nothing raises."""
    path = tmp_path / "mlp.onnx"
    path.write_bytes(MLP)
    cache_dir = make_dir(tmp_path, monkeypatch)
    for _ in range(2):
        sess = session(path, cache_dir, model_name="mlp")
        for n in (1, 3):
            feeds = {"x": np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32),
                     "b": np.ones(3, np.float32)}
            np.testing.assert_allclose(sess.run(None, feeds)[0], reference(MLP, feeds)[0],
                                       atol=1e-5, rtol=1e-4)
        assert {p.status for p in sess.cache_stats().partitions} == {"in-memory"}
