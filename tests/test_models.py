"""models/: the committed .onnx files are what the builders produce, stay small, map to
Lite without Custom nodes, and survive ONNX -> IR -> .ms -> IR -> ONNX exactly."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx_roundtrip import assert_close, random_feeds, roundtrip, run

import models

MODELS_DIR = Path(models.__file__).parent
EXPECTED_LITE_OPS = {
    "mobilenet_v2": {"Conv2DFusion", "FusedBatchNorm", "Activation", "AddFusion",
                     "AvgPoolFusion", "Flatten", "FullConnection"},
    "resnet_block": {"Conv2DFusion", "FusedBatchNorm", "Activation", "AddFusion",
                     "MaxPoolFusion", "AvgPoolFusion", "Flatten", "FullConnection"},
    "transformer_encoder": {"LayerNormFusion", "MatMulFusion", "AddFusion", "MulFusion",
                            "DivFusion", "Erf", "Reshape", "Transpose", "Softmax"},
}


@pytest.mark.parametrize("name", models.NAMES)
def test_committed_file_is_the_builder_output(name):
    path = MODELS_DIR / f"{name}.onnx"
    assert path.stat().st_size < 5 * 2**20
    assert path.read_bytes() == models.build(name).SerializeToString()


@pytest.mark.parametrize("name", models.NAMES)
def test_model_round_trips_through_ms(name):
    model = onnx.load(MODELS_DIR / f"{name}.onnx")
    exported, lite, report = roundtrip(model)
    assert not report.custom, report.custom
    assert EXPECTED_LITE_OPS[name] <= {n.op for n in lite.nodes}
    for batch in (1, 3):
        feeds = random_feeds(model, seed=batch, dim=batch)
        assert_close(run(exported, feeds), run(model, feeds))


def test_mobilenet_has_depthwise_convs_and_relu6():
    lite = roundtrip(models.build("mobilenet_v2"))[1]
    groups = [n.attrs["group"] for n in lite.nodes if n.op == "Conv2DFusion"]
    assert any(g > 1 for g in groups)
    assert any(n.attrs.get("activation_type") == "RELU6" for n in lite.nodes)


def test_unknown_model_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="mobilenet_v2"):
        models.build("vgg")
