"""The table of `litenpu` subcommands: each command module registers itself with `@command`.

A subcommand is a pair of functions (add its arguments, run it). The registry imports no
command; `provider/commands/__init__.py` imports them all, and `provider.cli` builds the
parser from the table.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from provider.errors import UsageError

__all__ = ["Command", "COMMANDS", "command", "key_values"]

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
