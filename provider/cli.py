"""The `litenpu` command line.

Each subcommand is a pair of functions (add its arguments, run it) listed in COMMANDS.
Exit codes: 0 ok, 1 user error (one line, no traceback unless --debug), 2 internal error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable

from provider.errors import LitenpuError


class UsageError(LitenpuError, ValueError):
    """A command-line argument is malformed (the CLI prints it on one line, exit code 1)."""


Command = tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMANDS: list[Command] = []


def command(name: str, help: str, add_args: Callable[[argparse.ArgumentParser], None]):
    """Register `run(args) -> exit code` as subcommand `name`."""

    def register(run: Callable[[argparse.Namespace], int]):
        if any(c[0] == name for c in COMMANDS):
            raise ValueError(f"subcommand {name!r} registered twice")
        COMMANDS.append((name, help, add_args, run))
        return run

    return register


def key_values(items: list[str], flag: str) -> dict[str, str]:
    """`KEY=VALUE` arguments of `flag` as a dict; UsageError names a malformed one."""
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        result[key.strip()] = value.strip()
    return result


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
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 1
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers below
        return code
    except (LitenpuError, FileNotFoundError, IsADirectoryError, PermissionError) as e:
        if args.debug:
            raise
        print(f"litenpu {args.command}: error: {e}", file=sys.stderr)
        return 1
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
        print(f"litenpu {args.command}: internal error: {type(e).__name__}: {e} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return 2


def _load_commands() -> None:
    """Import the modules that register subcommands (kept lazy so `import provider` is cheap)."""
    import provider.commands  # noqa: F401


if __name__ == "__main__":
    # `python -m provider.cli` runs this file as __main__, but subcommands register with the
    # importable provider.cli, so dispatch through that module.
    from provider.cli import main as _main

    sys.exit(_main())
