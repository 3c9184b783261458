"""CLI subcommands, one module each; importing this package registers them all."""
from provider.commands import convert, inspect  # noqa: F401
from provider.commands import cache  # noqa: F401
