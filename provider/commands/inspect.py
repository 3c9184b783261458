"""`litenpu inspect MODEL`: what a model file holds (I/O, ops, weights, producer).

One summariser per file format, chosen by extension in SUMMARIZERS; each returns the
format-neutral `ModelSummary`, so adding a format is one function and one table entry.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from converters.lite import reader
from converters.lite.summary import ModelSummary, format_summary, summarize
from provider.cli import command
from provider.errors import UnsupportedError


def _summarize_ms(path: Path) -> ModelSummary:
    return summarize(reader.load(path, lazy=True))


SUMMARIZERS: dict[str, Callable[[Path], ModelSummary]] = {
    ".ms": _summarize_ms,
}


def summarize_file(path: Path) -> ModelSummary:
    """The summary of a model file, by extension; UnsupportedError lists what is known."""
    try:
        summarizer = SUMMARIZERS[path.suffix.lower()]
    except KeyError:
        known = ", ".join(sorted(SUMMARIZERS))
        raise UnsupportedError(f"{path}: cannot inspect {path.suffix or 'extensionless'} "
                               f"files (known: {known})") from None
    return summarizer(path)


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", type=Path, help="model file (.ms)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


@command("inspect", "show a model's inputs, outputs, ops, weights and producer", _add_args)
def run(args: argparse.Namespace) -> int:
    summary = summarize_file(args.model)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        print(format_summary(summary, str(args.model)))
    return 0
