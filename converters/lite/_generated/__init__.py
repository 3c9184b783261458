"""flatc output for schema/*.fbs: regenerate with ../regenerate.sh, never edit by hand."""
