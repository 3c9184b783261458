#!/bin/sh
# Regenerate converters/lite/_generated/ from schema/*.fbs with flatc's Python object API.
#
# Usage: converters/lite/regenerate.sh [OUTPUT_DIR]   (default: converters/lite/_generated)
#
# The schema's namespace is `converters.lite._generated`, so flatc's absolute imports
# (`import converters.lite._generated.X`) resolve inside this package. flatc also writes
# empty __init__.py files for every namespace level (converters/, converters/lite/), which
# would clobber ours: it runs in a scratch directory and only the leaf modules are copied.
# Pinned to flatc 2.0.8 (Debian flatbuffers-compiler); its output is committed and must not
# be edited by hand. tests/test_lite_schema.py regenerates into a temp dir and diffs.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/_generated"}
flatc=${FLATC:-flatc}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

"$flatc" --python --gen-object-api --no-warnings -o "$scratch" \
    "$here/schema/model.fbs" "$here/schema/ops.fbs" "$here/schema/ops_types.fbs"

# flatc 2.0.8 names object-API locals after the lower-cased table name without escaping
# Python keywords: table `Assert` yields a local called `assert` (a SyntaxError). Rename
# that one identifier; every other line is flatc's verbatim.
sed -i 's/\bassert\b/assert_/g' "$scratch"/converters/lite/_generated/Assert.py

mkdir -p "$out"
rm -f "$out"/*.py
cp "$scratch"/converters/lite/_generated/*.py "$out"/
printf '%s\n' '"""flatc output for schema/*.fbs: regenerate with ../regenerate.sh, never edit by hand."""' \
    > "$out/__init__.py"
