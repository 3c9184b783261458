"""Op tables: conversion functions keyed by op name and the opset version they start at."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable)


class Unmappable(Exception):
    """Raised by an import function when this node has no exact Lite mapping (-> Custom)."""


class OpTable(Generic[F]):
    """Functions registered per (op, since_version); lookup picks the newest <= opset."""

    def __init__(self, kind: str):
        self.kind = kind
        self._table: dict[str, list[tuple[int, F]]] = {}

    def register(self, *ops: str, since: int = 1) -> Callable[[F], F]:
        """Decorator: register `fn` for each op from opset `since`; duplicates are an error."""

        def add(fn: F) -> F:
            for op in ops:
                versions = self._table.setdefault(op, [])
                if any(v == since for v, _ in versions):
                    raise ValueError(f"{self.kind}: {op!r} since opset {since} registered twice")
                bisect.insort(versions, (since, fn), key=lambda e: e[0])
            return fn

        return add

    def lookup(self, op: str, opset: int = 10**6) -> F | None:
        """The function for `op` at `opset`, None if the op is unknown or only newer."""
        found = None
        for since, fn in self._table.get(op, ()):
            if since <= opset:
                found = fn
        return found

    def ops(self) -> list[str]:
        return sorted(self._table)
