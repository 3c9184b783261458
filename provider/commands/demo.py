"""`litenpu demo`: build, convert, run on the NPU, bind, chain, and report (provider.demo)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from provider.commands.registry import command

EXAMPLES = """examples:
  litenpu demo                    # MobileNetV2, batch 8, files in a temporary directory
  litenpu demo --quick            # batch 1 (a few seconds; what the tests run)
  litenpu demo --workdir out/     # keep the .onnx/.ms files and the compile cache in out/
"""


def _add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES
    p.add_argument("--quick", action="store_true", help="smaller batch: a few seconds")
    p.add_argument("--workdir", type=Path, default=None,
                   help="where the model files and compile cache go (default: a temporary "
                        "directory, removed afterwards)")


class _Progress:
    """Step messages on stderr: one rewritten line on a terminal, finished steps otherwise."""

    def __init__(self, stream):
        self.stream = stream
        self.tty = stream.isatty()

    def __call__(self, message: str) -> None:
        if self.tty:
            self.stream.write(f"\r\x1b[Kdemo: {message}")
        elif not message.endswith("..."):
            self.stream.write(f"demo: {message}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


@command("demo", "convert a model to .ms and run it on the NPU: placement, accuracy, "
         "copies, cold vs warm sessions, device memory", _add_args)
def run(args: argparse.Namespace) -> int:
    from provider.demo import run_demo  # imports onnxruntime: only when the demo runs

    progress = _Progress(sys.stderr)
    try:
        if args.workdir is not None:
            report = run_demo(args.workdir, quick=args.quick, progress=progress)
        else:
            with tempfile.TemporaryDirectory(prefix="litenpu-demo-") as tmp:
                report = run_demo(Path(tmp), quick=args.quick, progress=progress)
    finally:
        progress.close()
    print(report.format())
    return 0
