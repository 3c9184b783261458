"""Run a checkout's `benchmarks/bench_*.py` scripts as subprocesses and keep their output.

The scripts are not part of the installed package (each room owns its own), so they are
found in a checkout: an explicit directory, else `benchmarks/` in the working directory or
one of its parents. `find_benchmarks` returns None when there is none; the caller says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import provider
from provider.errors import UsageError

PATTERN = "bench_*.py"


@dataclass(frozen=True)
class ScriptResult:
    """One script's run: exit status (None when it timed out), seconds, and its output."""

    name: str
    args: tuple[str, ...]
    returncode: int | None
    seconds: float
    output: str


def find_benchmarks(explicit: Path | None = None, start: Path | None = None) -> Path | None:
    """The benchmarks folder: `explicit` (UsageError if it has no scripts), else the nearest
    `benchmarks/` with bench_*.py scripts at or above `start` (the working directory)."""
    if explicit is not None:
        if not any(explicit.glob(PATTERN)):
            raise UsageError(f"--benchmarks {explicit}: no {PATTERN} scripts there")
        return explicit
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "benchmarks"
        if any(candidate.glob(PATTERN)):
            return candidate
    return None


def script_args(path: Path, quick: bool) -> tuple[str, ...]:
    """`--quick` for scripts that offer it, when a quick run is asked for."""
    return ("--quick",) if quick and '"--quick"' in path.read_text(encoding="utf-8") else ()


def run_script(path: Path, quick: bool, timeout: float) -> ScriptResult:
    """Run one script with the same Python and the same litenpu as this process."""
    args = script_args(path, quick)
    package_root = str(Path(provider.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, str(path), *args], cwd=path.parent.parent,
                              env=env, capture_output=True, text=True, timeout=timeout)
        code, output = done.returncode, done.stdout + (done.stderr if done.returncode else "")
    except subprocess.TimeoutExpired as e:
        code = None
        partial = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        output = partial + f"\n(stopped after {timeout:.0f} s)"
    return ScriptResult(path.name, args, code, time.perf_counter() - start, output.rstrip())


def run_scripts(folder: Path, *, quick: bool, timeout: float, only: list[str] | None = None,
                progress=None) -> list[ScriptResult]:
    """Run every bench_*.py in `folder` (or those whose name contains one of `only`)."""
    results = []
    for path in sorted(folder.glob(PATTERN)):
        if only and not any(word in path.stem for word in only):
            continue
        if progress:
            progress(f"script {path.name}")
        results.append(run_script(path, quick, timeout))
    return results
