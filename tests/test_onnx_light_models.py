"""The real architectures shipped with onnx (backend/test/data/light) through
ONNX -> IR -> .ms -> IR -> ONNX give onnxruntime's outputs (atol 1e-5, rtol 1e-4).

Their weights are ConstantOfShape nodes (all-equal values); they are replaced by seeded
random initializers first, so a layout or attribute mistake changes the outputs."""

from __future__ import annotations

import onnx
import pytest
from onnx_roundtrip import (
    LIGHT,
    assert_close,
    random_feeds,
    roundtrip,
    run,
    with_random_weights,
)

FAST = {"light_squeezenet", "light_shufflenet", "light_inception_v1", "light_resnet50"}
MODELS = sorted(LIGHT.glob("*.onnx"))


def _param(path):
    marks = () if path.stem in FAST else (pytest.mark.slow,)
    return pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in MODELS])
def test_light_model_round_trip(path):
    model = with_random_weights(onnx.load(path))
    exported, lite, report = roundtrip(model)
    feeds = random_feeds(model, seed=3)
    assert_close(run(exported, feeds), run(model, feeds))
    assert report.mapped_count > 0.95 * len(model.graph.node)


def test_all_nine_light_models_are_present():
    assert len(MODELS) == 9
