"""`litenpu bench`: zoo models vs onnxruntime, checkout scripts, Markdown report and plots."""

from __future__ import annotations

import pytest

from provider.bench import machine
from provider.bench.models import measure
from provider.bench.scripts import find_benchmarks, script_args
from provider.cli import main
from provider.errors import UsageError

FAKE = '''import sys
from pathlib import Path
print("fake benchmark", " ".join(sys.argv[1:]))
Path("docs/benchmarks").mkdir(parents=True, exist_ok=True)
Path("docs/benchmarks/fake.md").write_text("fake")
if "--quick" in sys.argv:  # the runner passes "--quick" to scripts that mention it
    pass
'''


def _checkout(tmp_path):
    bench = tmp_path / "repo" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "bench_fake.py").write_text(FAKE)
    (bench / "bench_broken.py").write_text("import sys\nprint('partial')\nsys.exit(3)\n")
    (bench / "helper.py").write_text("raise SystemExit('not a benchmark')\n")
    return bench


def test_find_benchmarks_walks_up_and_checks_explicit_dirs(tmp_path):
    bench = _checkout(tmp_path)
    (bench.parent / "deep" / "er").mkdir(parents=True)
    assert find_benchmarks(start=bench.parent / "deep" / "er") == bench
    assert find_benchmarks(start=tmp_path) is None
    with pytest.raises(UsageError, match="no bench_\\*.py scripts"):
        find_benchmarks(tmp_path)
    assert script_args(bench / "bench_fake.py", quick=True) == ("--quick",)
    assert script_args(bench / "bench_broken.py", quick=True) == ()
    assert script_args(bench / "bench_fake.py", quick=False) == ()


def test_measure_matches_onnxruntime_and_binding_copies_nothing(tmp_path):
    r = measure("transformer_encoder", runs=1, workdir=tmp_path)
    assert r.max_abs_diff < 1e-4
    assert r.copied_plain == 2 * 16 * 64 * 4 and r.copied_bound == 0
    assert min(r.ort_run_ms, r.npu_run_ms, r.npu_bound_ms, r.npu_cold_ms, r.npu_warm_ms) > 0
    assert r.speed_ratio == r.ort_run_ms / r.npu_run_ms


def test_machine_description_names_cpu_cores_load_blas_versions():
    info = machine.describe()
    for key in ("CPU", "vector extensions", "cores", "load average (1/5/15 min)", "BLAS threads",
                "onnxruntime", "numpy", "litenpu", "Python"):
        assert info[key], key


def test_bench_command_writes_report_with_scripts(tmp_path, monkeypatch, capsys):
    bench = _checkout(tmp_path)
    monkeypatch.chdir(bench.parent)
    code = main(["bench", "--quick", "--runs", "1", "--models", "transformer_encoder"])
    assert code == 1  # bench_broken.py failed, and the command says so
    captured = capsys.readouterr()
    assert "1 script(s) failed: bench_broken.py" in captured.err
    text = (bench.parent / "docs" / "benchmarks" / "README.md").read_text()
    assert "| cores |" in text and "| BLAS threads |" in text
    assert text.count("\n| transformer_encoder |") == 1
    assert "### `bench_fake.py --quick` (exit 0," in text and "fake benchmark --quick" in text
    assert "### `bench_broken.py` (exit 3," in text and "partial" in text
    assert "helper.py" not in text
    assert "Files the scripts wrote next to this report: `fake.md`." in text


def test_bench_without_checkout_says_scripts_are_unavailable(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--runs", "1", "--models", "none", "-o", "out"]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    assert "Not available: the `benchmarks/bench_*.py` scripts live in a litenpu checkout" in text
    assert main(["bench", "--models", "vgg"]) == 1
    assert "--models: unknown ['vgg']" in capsys.readouterr().err


def test_plots_are_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    assert main(["bench", "--runs", "1", "--models", "resnet_block", "--no-scripts",
                 "-o", str(tmp_path)]) == 0
    for name in ("latency.png", "sessions.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name})" in (tmp_path / "README.md").read_text()


@pytest.mark.slow
def test_session_create_benchmark_runs_every_mode_against_the_ep_as_it_is(tmp_path):
    """benchmarks/bench_session_create.py drives the EP's internals (its floor replaces
    GetCapability and Compile with an EP that does nothing): one run of every mode on a zoo
    model, each in its own process, with the script's own checks (outputs against onnxruntime,
    no import or compile on a warm start)."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_session_create.py"
    spec = importlib.util.spec_from_file_location("bench_session_create", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (path,) = bench.models(tmp_path, ["resnet_block"]).values()
    row = bench.bench_model("resnet_block", path, tmp_path, 1)
    for mode in ("ort", "nocache", "cold", "warm", "floor"):
        assert row[mode] > 0, mode
