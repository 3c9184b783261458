"""The `litenpu` command line: the parser built from the subcommands' table
(`provider.commands.registry`), and one mapping of errors to exit codes for all of them.

Exit codes, the same for every command (`exit_code`): 0 ok; 1 the user's input is at fault
(one line on stderr, no traceback unless --debug); 2 a bug in litenpu (internal error).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys

from provider.commands.registry import COMMANDS
from provider.errors import LitenpuError

EXIT_USER_ERROR = 1
EXIT_INTERNAL_ERROR = 2
# onnxruntime's Python exceptions (Fail, InvalidGraph, InvalidArgument, EPFail, ...) live here.
ORT_ERRORS_MODULE = "onnxruntime.capi.onnxruntime_pybind11_state"
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
LINE_CHARS = 1000  # an error line's length before its middle is cut (--debug shows it all)
_FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def exit_code(error: BaseException) -> int:
    """1 when `error` means the user's input is at fault, 2 when it is a bug in litenpu.

    The user's input is at fault for every LitenpuError, a file that cannot be read or
    written, and every exception onnxruntime raises on a model or feed (it refused what the
    user gave it), except EPFail: that is the NPU EP failing, which is the input's fault
    only when the exception the EP raised (named in the message) is a LitenpuError.
    """
    if isinstance(error, (LitenpuError, *_FILE_ERRORS)) or (
            isinstance(error, OSError) and error.filename):
        return EXIT_USER_ERROR
    if type(error).__module__ != ORT_ERRORS_MODULE:
        return EXIT_INTERNAL_ERROR
    if type(error).__name__ != "EPFail":
        return EXIT_USER_ERROR
    from provider.ort.status import from_status  # onnxruntime's wrapping of our callback error
    return EXIT_USER_ERROR if from_status(str(error)) is not None else EXIT_INTERNAL_ERROR


def error_line(error: BaseException) -> str:
    """`error` as one line, without onnxruntime's status prefixes ("[ONNXRuntimeError] : 1 :
    FAIL : "); an onnxruntime exception is named instead. A message past LINE_CHARS keeps
    its start (what failed) and its end (often the shapes involved), the middle cut out:
    onnxruntime echoes a malformed attribute whole (a Transpose perm of 36,000 values)."""
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", str(error))
    if type(error).__module__ == ORT_ERRORS_MODULE:
        text = f"onnxruntime {type(error).__name__}: {text}"
    line = " ".join(text.split())
    if len(line) <= LINE_CHARS:
        return line
    head, tail = line[:LINE_CHARS * 3 // 4], line[-(LINE_CHARS // 5):]
    return f"{head} ... [{len(line) - len(head) - len(tail)} characters cut] ... {tail}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="litenpu",
        description="onnxruntime NPU execution provider and MindSpore Lite converters",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text, add_args, run in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        add_args(p)
        p.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    _load_commands()
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.debug)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 1
    _quiet_onnxruntime(args.debug)
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers below
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`litenpu inspect m.onnx | head`): not an error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # noqa: BLE001 - the CLI's last line of defence
        if args.debug:
            raise
        code = exit_code(e)
        if code == EXIT_USER_ERROR:
            print(f"litenpu {args.command}: error: {error_line(e)}", file=sys.stderr)
        else:
            print(f"litenpu {args.command}: internal error: {type(e).__name__}: {error_line(e)} "
                  "(rerun with --debug for the traceback)", file=sys.stderr)
        return code


class _OneLineFormatter(logging.Formatter):
    """A log record on one line: its traceback and line breaks dropped (--debug keeps them),
    so a failure the CLI reports on one line is not followed by a logged traceback."""

    def format(self, record: logging.LogRecord) -> str:
        brief = logging.makeLogRecord(record.__dict__)  # other handlers still see it whole
        brief.exc_info = brief.exc_text = brief.stack_info = None
        return " ".join(super().format(brief).split())


def _configure_logging(debug: bool) -> None:
    """WARNING and up (Python warnings included) on stderr, one line each (DEBUG and
    tracebacks with --debug), unless logging is already set up (a test harness, a program
    calling `main`)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter((logging.Formatter if debug else _OneLineFormatter)(LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    logging.captureWarnings(True)  # numpy's RuntimeWarnings too, one line each


def _quiet_onnxruntime(debug: bool) -> None:
    """onnxruntime logs only fatal errors (every other error reaches the CLI as an exception,
    printed on one line); --debug shows its warnings too."""
    import onnxruntime

    from provider import session

    onnxruntime.set_default_logger_severity(2 if debug else 4)
    session.set_default_severity(2 if debug else 4)


def _load_commands() -> None:
    """Import the modules that register subcommands (kept lazy so `import provider` is cheap)."""
    import provider.commands  # noqa: F401


if __name__ == "__main__":
    # `python -m provider.cli` runs this file as __main__, but subcommands register with the
    # importable provider.cli, so dispatch through that module.
    from provider.cli import main as _main

    sys.exit(_main())
