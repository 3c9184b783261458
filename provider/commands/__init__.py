"""CLI subcommands, one module each; importing this package registers them all."""

from provider.commands import bench, cache, compile, convert, demo, inspect, run  # noqa: F401
