"""CLI subcommands, one module each; importing this package registers them all."""
from provider.commands import inspect  # noqa: F401
