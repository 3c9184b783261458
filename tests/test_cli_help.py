"""`litenpu --help` lists every subcommand; each subcommand's help shows examples; exit codes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from children import child_env

from provider.cli import build_parser, main
from provider.commands.registry import COMMANDS

# The subcommands the quickstart and docs promise (others may add more).
PROMISED = ("bench", "cache", "compile", "convert", "demo", "inspect", "run")


def _help(*argv: str) -> str:
    main([])  # loads the command modules
    parser = build_parser()
    if not argv:
        return parser.format_help()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[argv[0]].format_help()


def test_top_level_help_lists_every_registered_command():
    text = _help()
    assert {name for name, *_ in COMMANDS} >= set(PROMISED)
    for name, *_ in COMMANDS:
        assert f"    {name}" in text, name


@pytest.mark.parametrize("name", PROMISED)
def test_subcommand_help_has_examples(name):
    text = _help(name)
    match = re.search(r"\nexamples?:\n", text)
    assert match and f"litenpu {name}" in text[match.end():]


def test_python_m_provider_cli_registers_subcommands():
    env = child_env()
    done = subprocess.run([sys.executable, "-m", "provider.cli", "--help"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for name in PROMISED:
        assert f"    {name}" in done.stdout


def test_exit_codes(tmp_path, capsys, monkeypatch):
    assert main([]) == 1  # no subcommand: the help, as a usage error
    assert main(["inspect", str(tmp_path / "missing.onnx")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("litenpu inspect: error: ") and err.count("\n") == 1

    def boom(args):
        raise RuntimeError("kaboom")

    parser = build_parser()
    monkeypatch.setattr("provider.cli.build_parser", lambda: parser)
    sub = next(a for a in parser._actions if a.dest == "command")
    sub.choices["demo"].set_defaults(run=boom)
    assert main(["demo"]) == 2
    assert "internal error: RuntimeError: kaboom (rerun with --debug" in capsys.readouterr().err
    with pytest.raises(RuntimeError):
        main(["--debug", "demo"])



def test_a_reader_that_stops_early_is_not_an_error(tmp_path):
    """`litenpu inspect m.ms | head -1`: the closed pipe ends the command quietly, exit 0."""
    model = Path(__file__).resolve().parent.parent / "models" / "mslite" / "resnet_block.ms"
    env = child_env()
    # run outside the checkout: `-m` puts the working directory first on sys.path
    proc = subprocess.Popen([sys.executable, "-m", "provider.cli", "inspect", str(model)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    proc.stdout.close()  # the reader goes away before the command writes
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 0, stderr
    assert "Traceback" not in stderr and "error" not in stderr and "Exception" not in stderr
