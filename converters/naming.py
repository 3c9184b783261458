"""Unique value and node names, shared by the ONNX importer and exporter."""

from __future__ import annotations


def unique_name(base: str, taken: set[str]) -> str:
    """`base`, or the first of `base_1`, `base_2`, ... not in `taken`; added to `taken`."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
