"""`litenpu cache ls|verify|clear` on a cache with good and bad entries."""

from __future__ import annotations

from test_cache import LITE, SHAPES, _flip_weights, make_key

from provider.cache import CacheKey, CompileCache, default_cache_dir
from provider.cli import main
from provider.npu.compiler import compile_model
from provider.npu.program import Program


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
        assert " image=1x3x56x56 " in line  # the input shapes the entry's Program is for
    assert "2 entries" in out


def test_ls_shows_one_entry_per_shape_and_none_for_shapeless_entries(tmp_path, capsys):
    cache = _cache(tmp_path, "alpha")
    cache.put(make_key(shapes={"image": (2, 3, 48, 64)}, model_name="alpha"),
              compile_model(LITE, SHAPES))  # ls reads the key, not the Program
    session_key = CacheKey.build(partition=[("m.onnx", "CacheSession")], input_shapes={},
                                 fingerprint="ab", model_name="alpha")
    cache.put(session_key, Program([], [], [], [], name="CacheSession m.onnx"))
    assert main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    shapes = sorted(line.split()[2] for line in out.splitlines()[1:-1])
    assert shapes == ["-", "image=1x3x56x56", "image=2x3x48x64"]
    assert "3 entries" in out


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


def test_verify_deep_rehashes_recorded_model_files(tmp_path, capsys):
    """A recorded fingerprint that no longer matches its file (the file changed without its
    stat changing) is reported, exits 1, and is dropped so the next session re-hashes it."""
    import json

    from provider.cache.fingerprint import MEMO_DIR, file_fingerprint

    models = [tmp_path / "a.onnx", tmp_path / "b.onnx"]
    for i, model in enumerate(models):
        model.write_bytes(bytes([i]) * 1000)
    memo_dir = tmp_path / "cache" / MEMO_DIR
    truth = [file_fingerprint(m, memo_dir) for m in models]
    assert main(["cache", "verify", "--deep", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "2 of 2 recorded model fingerprints ok" in capsys.readouterr().out
    memo = next(p for p in memo_dir.iterdir() if json.loads(p.read_text())["fingerprint"]
                == truth[1])
    memo.write_text(json.dumps({**json.loads(memo.read_text()), "fingerprint": "0" * 64}))
    assert file_fingerprint(models[1], memo_dir) == "0" * 64  # the stat shortcut trusts it
    assert main(["cache", "verify", "--deep", "--cache-dir", str(tmp_path / "cache")]) == 1
    out = capsys.readouterr().out
    assert f"changed source {models[1]}: content differs" in out
    assert f"ok      source {models[0]}" in out
    assert file_fingerprint(models[1], memo_dir) == truth[1]
    assert main(["cache", "clear", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert not memo_dir.exists()
