"""The background cache writer: a cold session runs before its entries are written, and
nothing it leaves behind is incomplete or out of order."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from children import child_env
from ort_models import MLP, reference
from test_cache_session import run, session
from test_ort_cache import IMAGE, RESNET

import provider
from provider.cache import CompileCache, entry, writer
from provider.cache.store import CompileCache as Store
from provider.errors import CacheError
from provider.session import InferenceSession


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "resnet.onnx"
    path.write_bytes(RESNET)
    return path


def test_a_cold_session_runs_while_its_program_is_being_written(tmp_path, source, monkeypatch):
    """The Program's write waits for the test; a synchronous write would make the session
    wait for it and time out."""
    release = threading.Event()
    put = Store.put

    def held_put(self, key, program, **kwargs):
        if not release.wait(timeout=60):
            raise AssertionError("the write was waited for")
        return put(self, key, program, **kwargs)

    monkeypatch.setattr(Store, "put", held_put)
    cold = session(source, tmp_path / "cache")
    np.testing.assert_allclose(run(cold), reference(RESNET, {"image": IMAGE})[0],
                               atol=1e-4, rtol=1e-3)
    assert not any((tmp_path / "cache").glob("[0-9a-f]*"))  # nothing installed yet
    release.set()
    stats = cold.cache_stats()  # waits for the writes
    assert [p.status for p in stats.partitions] == ["miss"]
    assert stats.reason.startswith("stored session entry")
    for info in CompileCache(tmp_path / "cache").entries():
        CompileCache(tmp_path / "cache").verify_entry(info.name)
    assert session(source, tmp_path / "cache").cache_stats().path == "context-model"


def test_a_cold_session_starts_its_writes_once_it_is_created(tmp_path, source, monkeypatch):
    creating = threading.Event()
    during: list[bool] = []
    create, put = InferenceSession._create, Store.put

    def timed_create(self, *args, **kwargs):
        creating.set()
        try:
            return create(self, *args, **kwargs)
        finally:
            creating.clear()

    def watched_put(self, key, program, **kwargs):
        during.append(creating.is_set())
        return put(self, key, program, **kwargs)

    monkeypatch.setattr(InferenceSession, "_create", timed_create)
    monkeypatch.setattr(Store, "put", watched_put)
    cold = session(source, tmp_path / "cache")
    assert cold.cache_stats().reason.startswith("stored session entry")
    assert during == [False, False]  # the Program's entry, then the session's


def test_a_process_that_exits_at_once_leaves_complete_entries(tmp_path, source):
    code = ("import provider; provider.register()\n"
            "from provider.session import InferenceSession\n"
            f"InferenceSession({str(source)!r}, providers=[('NPUExecutionProvider', "
            f"{{'cache_dir': {str(tmp_path / 'cache')!r}, 'model_name': 'resnet'}})])\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300, env=child_env(),
                   cwd=tmp_path)
    cache = CompileCache(tmp_path / "cache")
    infos = cache.entries()
    assert len(infos) == 2  # the Program and the session entry
    for info in infos:
        cache.verify_entry(info.name)
    warm = session(source, tmp_path / "cache")
    assert warm.cache_stats().path == "context-model"
    assert [p.status for p in warm.cache_stats().partitions] == ["context"]


def test_no_session_entry_names_a_program_that_was_not_written(tmp_path, source, monkeypatch,
                                                               caplog):
    write = entry.write_entry

    def programs_fail(directory, key, program, *args, **kwargs):
        if program.steps:  # a partition's Program (the session entry's is empty)
            raise OSError(28, "No space left on device")
        return write(directory, key, program, *args, **kwargs)

    monkeypatch.setattr(entry, "write_entry", programs_fail)
    cold = session(source, tmp_path / "cache")
    stats = cold.cache_stats()
    assert [p.status for p in stats.partitions] == ["in-memory"]
    assert "No space left" in stats.partitions[0].reason
    assert stats.reason.startswith("not stored: partition(s)") and "not written" in stats.reason
    assert CompileCache(tmp_path / "cache").entries() == []
    assert "No space left" in caplog.text


def test_releasing_a_session_waits_for_its_writes(tmp_path):
    """A released session's entries are on disk: a dynamic model's per-shape Program, written
    after its first run, included."""
    path = tmp_path / "mlp.onnx"
    path.write_bytes(MLP)
    sess = InferenceSession(str(path), providers=[
        ("NPUExecutionProvider", {"cache_dir": str(tmp_path / "c"), "model_name": "mlp"})])
    sess.run(None, {"x": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32)})
    del sess
    names = {p.name for p in (tmp_path / "c").iterdir()}  # read without the cache's API
    assert len([n for n in names if len(n) == 32]) == 2 and not [n for n in names
                                                                 if n.startswith(".tmp")]


def _child(model: str, cache_dir: str, out) -> None:
    sess = InferenceSession(model, providers=[
        ("NPUExecutionProvider", {"cache_dir": cache_dir, "model_name": "resnet"})])
    out.put(sess.cache_stats().reason)


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
# forking while the writer thread runs is the point of the test (Python 3.12+ warns of it)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_writes_its_own_entries(tmp_path, source):
    parent = session(source, tmp_path / "parent")  # its writes may be under way at the fork
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_child, args=(str(source), str(tmp_path / "child"), out))
    child.start()
    reason = out.get(timeout=300)
    child.join(timeout=60)
    assert child.exitcode == 0 and reason.startswith("stored session entry")
    assert len(CompileCache(tmp_path / "child").entries()) == 2
    assert parent.cache_stats().reason.startswith("stored session entry")


def _recording(entry: Path, log: list, name: str):
    return writer.submit(entry, lambda: log.append(name))


def _in_thread(fn, timeout: float = 30) -> None:
    """fn() on another thread; fails (instead of hanging the run) if it does not return."""
    done = threading.Event()
    errors = []

    def target():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=target, daemon=True).start()
    assert done.wait(timeout), "deadlocked"
    if errors:
        raise errors[0]


def test_held_writes_start_when_the_creation_is_over_in_order(tmp_path):
    def body():
        log: list = []
        with writer.held():
            first = _recording(tmp_path / "a", log, "a")
            second = _recording(tmp_path / "b", log, "b")
            threading.Event().wait(0.2)  # the writer thread would have run them by now
            assert log == []
        third = _recording(tmp_path / "c", log, "c")
        assert (first.error(), second.error(), third.error()) == (None, None, None)
        assert log == ["a", "b", "c"]

    _in_thread(body)


@pytest.mark.parametrize("how", ["wait", "pending"])
def test_waiting_for_a_held_write_starts_it(tmp_path, how):
    def body():
        log: list = []
        with writer.held():
            pending = _recording(tmp_path / "entry" / "x", log, "x")
            if how == "wait":
                writer.wait(tmp_path / "entry")
            else:
                assert pending.error() is None
            assert log == ["x"]
            again = _recording(tmp_path / "entry" / "y", log, "y")  # still held after
            threading.Event().wait(0.2)
            assert log == ["x"]
        assert again.error() is None and log == ["x", "y"]

    _in_thread(body)


def test_a_failing_held_write_is_its_pending_error(tmp_path):
    def fail():
        raise CacheError("disk full")

    def body():
        with writer.held():
            pending = writer.submit(tmp_path / "e", fail)
        assert str(pending.error()) == "disk full"

    _in_thread(body)
