"""`litenpu convert IN -o OUT`: convert a model file; formats chosen by extension."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from converters.convert import LAYOUTS, READERS, WRITERS, convert
from provider.commands.registry import command

# Below this many nodes a conversion is quick enough that a progress line is only noise.
PROGRESS_MIN_NODES = 500


EXAMPLES = """examples:
  litenpu convert model.onnx -o model.ms                 # ONNX -> MindSpore Lite
  litenpu convert model.onnx -o model.ms --layout nhwc   # for MindSpore Lite's own CPU runtime
  litenpu convert model.ms -o model.onnx                 # and back
  litenpu convert net.mindir -o net.onnx                 # MindSpore MindIR -> ONNX
"""


def _add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES
    p.add_argument("model", type=Path,
                   help=f"source model ({', '.join(sorted(READERS))})")
    p.add_argument("-o", "--output", type=Path, required=True,
                   help=f"destination ({', '.join(sorted(WRITERS))}); written atomically")
    p.add_argument("--layout", choices=[x.lower() for x in LAYOUTS], default="nchw",
                   help="nhwc: rewrite NCHW layers to NHWC, as MindSpore Lite's own CPU "
                        "runtime needs (default nchw: keep the layout; the NPU takes NCHW)")
    p.add_argument("-q", "--quiet", action="store_true", help="print no summary")


class _ProgressLine:
    """A one-line `converting: done/total nodes` display on a terminal's stderr."""

    def __init__(self, stream):
        self.stream = stream
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if total < PROGRESS_MIN_NODES:
            return
        self.stream.write(f"\rconverting: {done}/{total} nodes")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


@command("convert", f"convert a model file (from {', '.join(sorted(READERS))} "
         f"to {', '.join(sorted(WRITERS))})", _add_args)
def run(args: argparse.Namespace) -> int:
    progress = _ProgressLine(sys.stderr) if sys.stderr.isatty() else None
    try:
        report = convert(args.model, args.output, progress=progress,
                         layout=args.layout.upper())
    finally:
        if progress is not None:
            progress.close()
    if not args.quiet:
        print(report.summary())
    return 0
