"""CLI subcommands, one module each; importing this package registers them all."""
