"""provider.zoo: the packaged model builders (models/ holds their committed .onnx files)."""

from __future__ import annotations

import pytest

from provider.zoo import NAMES, build


def _dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.mark.parametrize("name", NAMES)
def test_batch_fixes_the_symbolic_dim_only(name):
    free, fixed = build(name), build(name, batch=3)
    assert _dims(free.graph.input[0])[0] == "batch"
    assert _dims(fixed.graph.input[0]) == [3, *_dims(free.graph.input[0])[1:]]
    assert _dims(fixed.graph.output[0]) == [3, *_dims(free.graph.output[0])[1:]]
    assert fixed.graph.initializer == free.graph.initializer  # same seeded weights


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="known: mobilenet_v2, resnet_block, transformer_encoder"):
        build("vgg")
