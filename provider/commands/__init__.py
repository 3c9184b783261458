"""CLI subcommands, one module each; importing this package registers them all."""

from provider.commands import (  # noqa: F401
    accuracy,
    bench,
    cache,
    compile,
    convert,
    demo,
    inspect,
    quantize,
    run,
)
