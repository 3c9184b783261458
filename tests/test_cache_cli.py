"""`litenpu cache ls|verify|clear` on a cache with good and bad entries."""

from __future__ import annotations

from test_cache import LITE, SHAPES, _flip_weights, make_key

from provider.cache import CompileCache, default_cache_dir
from provider.cli import main
from provider.npu.compiler import compile_model


def _cache(tmp_path, *names: str) -> CompileCache:
    cache = CompileCache(tmp_path, cache_version="3")
    for name in names:
        cache.put(make_key(model_name=name), compile_model(LITE, SHAPES))
    return cache


def test_ls_lists_name_version_size_and_times(tmp_path, capsys):
    cache = _cache(tmp_path, "alpha", "beta")
    assert main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for info in cache.entries():
        line = next(line for line in out.splitlines() if line.startswith(info.name))
        assert f"{info.model_name}@3" in line and "KiB" in line and line.count("-") >= 4
    assert "2 entries" in out


def test_verify_names_the_bad_entry_and_exits_1(tmp_path, capsys):
    cache = _cache(tmp_path, "good", "bad")
    assert main(["cache", "verify", "--cache-dir", str(tmp_path)]) == 0
    assert "2 of 2 entries ok" in capsys.readouterr().out
    _flip_weights(cache.path(make_key(model_name="bad")))
    assert main(["cache", "verify", "--cache-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    bad = make_key(model_name="bad").digest
    assert f"BAD  {bad} (bad@3): program.lnp: content changed" in out
    assert f"ok   {make_key(model_name='good').digest} (good@3)" in out


def test_clear_one_model_then_all(tmp_path, capsys):
    cache = _cache(tmp_path, "alpha", "beta", "gamma")
    assert main(["cache", "clear", "--model", "beta", "--cache-dir", str(tmp_path)]) == 0
    assert "removed 1 entries of model 'beta'" in capsys.readouterr().out
    assert sorted(e.model_name for e in cache.entries()) == ["alpha", "gamma"]
    assert main(["cache", "clear", "--cache-dir", str(tmp_path)]) == 0
    assert cache.entries() == []


def test_default_cache_dir_follows_xdg(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "litenpu"
    assert main(["cache", "ls"]) == 0
    assert f"0 entries, 0 B in {tmp_path / 'litenpu'}" in capsys.readouterr().out
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir().parts[-2:] == (".cache", "litenpu")
