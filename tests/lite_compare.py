"""One comparison helper for Lite IR models, shared by every room's tests.

`assert_models_equal(a, b)` fails with the path of the first difference
("tensors[3] ('w').data", "nodes[0] ('conv').attrs.pad_list"). Node attributes are compared
after `ops.complete`, so an attribute left at its default equals one spelled out. Where a
tensor's bytes live (`external`) is storage, not content: compared only with `storage=True`.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from converters.lite import ops
from converters.lite.ir import LiteModel, LiteNode, LiteTensor

_MODEL_SCALARS = ("name", "version", "fmk_type", "inputs", "outputs", "mempool_size", "subgraphs")
_NODE_FIELDS = ("name", "op", "inputs", "outputs", "quant_type", "device_type")


def assert_models_equal(a: LiteModel, b: LiteModel, *, storage: bool = False) -> None:
    """Fail naming the first field where `a` and `b` differ."""
    for name in _MODEL_SCALARS:
        _same(getattr(a, name), getattr(b, name), name)
    _same(len(a.tensors), len(b.tensors), "len(tensors)")
    for i, (ta, tb) in enumerate(zip(a.tensors, b.tensors, strict=True)):
        assert_tensors_equal(ta, tb, f"tensors[{i}] ({ta.name!r})", storage=storage)
    _same(len(a.nodes), len(b.nodes), "len(nodes)")
    for i, (na, nb) in enumerate(zip(a.nodes, b.nodes, strict=True)):
        assert_nodes_equal(na, nb, f"nodes[{i}] ({na.name!r})")


def assert_tensors_equal(a: LiteTensor, b: LiteTensor, where: str = "tensor", *,
                         storage: bool = False) -> None:
    for f in fields(LiteTensor):
        if f.name == "data" or (f.name == "external" and not storage):
            continue
        _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    _same(a.data is None, b.data is None, f"{where}.data is None")
    if a.data is not None:
        _same(a.data.dtype, b.data.dtype, f"{where}.data.dtype")
        _same(a.data.shape, b.data.shape, f"{where}.data.shape")
        if not np.array_equal(a.data, b.data, equal_nan=a.data.dtype.kind in "fc"):
            raise AssertionError(f"{where}.data: values differ")


def assert_nodes_equal(a: LiteNode, b: LiteNode, where: str = "node") -> None:
    for name in _NODE_FIELDS:
        _same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    attrs_a, attrs_b = ops.complete(a.op, a.attrs), ops.complete(b.op, b.attrs)
    for key in attrs_a:
        _same(attrs_a[key], attrs_b[key], f"{where}.attrs.{key}")


def _same(x, y, where: str) -> None:
    if x != y:
        raise AssertionError(f"{where}: {x!r} != {y!r}")
