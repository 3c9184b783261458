"""Real architectures: ONNX -> import_onnx -> compile_model -> Executor matches onnxruntime.

The onnx package's light models make their weights with ConstantOfShape (one value per
tensor); they run as shipped, and once more with those weights replaced by seeded random
initializers of the same shapes (a far stronger check). A model with ops outside the NPU's
set is checked on its NPU-supported connected subgraphs, the boundary tensors fed from
onnxruntime (the ONNX model gets them as extra outputs). Models under models/ run too.
"""

from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np
import onnx
import pytest
from npu_oracle import (
    ATOL,
    assert_matches,
    ort_values,
    randomized,
    rng,
    run_npu,
    subgraph,
    supported_components,
)

from converters.lite.ir import LiteModel
from converters.onnx_import import import_onnx
from provider.npu import capability

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
REPO_MODELS = os.path.join(os.path.dirname(__file__), os.pardir, "models")
FAST = {"light_squeezenet", "light_shufflenet", "light_inception_v1"}
SLOW = {"light_resnet50", "light_densenet121", "light_inception_v2", "light_vgg19",
        "light_zfnet512", "light_bvlc_alexnet"}


def graph_input(model: onnx.ModelProto) -> tuple[str, list[int]]:
    inits = {i.name for i in model.graph.initializer}
    vi = next(i for i in model.graph.input if i.name not in inits)
    return vi.name, [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]  # symbolic: 1


def compare(lite: LiteModel, sub: LiteModel, model: onnx.ModelProto, feeds_from: dict) -> None:
    """Run `sub` on the NPU with its inputs from onnxruntime and compare all its outputs:
    within rtol 1e-3 and atol 1e-4, the atol scaled up with an output's range beyond 10
    (1e-5 of its largest |value|). Random weights without normalization grow some outputs
    to ~1e6 (ShuffleNet), where an element near zero is a cancellation of terms that size
    and both sides' float32 sums, in different orders, differ there by ~1e-6 of the range.
    A softmax of logits beyond SOFTMAX_SCALE is not compared (its logits are, when they are
    outputs): a logit's rounding error, ~1e-6 of its size, then moves the exponent by more
    than 1, which decides every probability (the shipped AlexNet's constant weights give
    logits of 8e11 that only rounding tells apart; SqueezeNet's, 6.7e9, one ulp apart on
    AVX2's summation order). An opset < 13 Softmax counts too: its logits are found back
    through the reshapes it is imported with."""
    softmax_of = {out: logits for out, logits in _softmax_logits(sub, model).items()}
    names = [lite.tensors[t].name for t in (*sub.inputs, *sub.outputs, *softmax_of.values())]
    values = ort_values(model, feeds_from, list(dict.fromkeys(names)))
    got = run_npu(sub, {lite.tensors[t].name: values[lite.tensors[t].name] for t in sub.inputs})
    for t, g in zip(sub.outputs, got, strict=True):
        want = values[lite.tensors[t].name]
        if t in softmax_of and np.max(np.abs(values[lite.tensors[softmax_of[t]].name])) > SOFTMAX_SCALE:
            continue
        scale = float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0))  # (inf: no scale)
        assert_matches(g, want, atol=max(ATOL, 1e-5 * scale), what=f"{sub.name} {lite.tensors[t].name}")


SOFTMAX_SCALE = 1e5


def _onnx_values(model: onnx.ModelProto) -> set[str]:
    """The values onnxruntime can report (a softmax imported as several Lite nodes reads a
    value of the importer's own)."""
    return {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}


_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "ExpandDims")


def _softmax_logits(lite: LiteModel, model: onnx.ModelProto) -> dict[int, int]:
    """Softmax / LogSoftmax output tensor (and the reshapes of it, as an opset < 13 Softmax
    imports: Reshape -> Softmax -> Reshape) -> its logits: the input followed back through
    reshapes to a value onnxruntime can report."""
    values, producer = _onnx_values(model), {t: n for n in lite.nodes for t in n.outputs}
    found: dict[int, int] = {}
    for node in lite.nodes:
        if node.op not in ("Softmax", "LogSoftmax"):
            continue
        logits = node.inputs[0]
        while lite.tensors[logits].name not in values and logits in producer \
                and producer[logits].op in _RESHAPES:
            logits = producer[logits].inputs[0]
        if lite.tensors[logits].name not in values:
            continue
        out = node.outputs[0]
        found[out] = logits
        readers = [n for n in lite.nodes if out in n.inputs]
        while len(readers) == 1 and readers[0].op in _RESHAPES:
            out = readers[0].outputs[0]
            found[out] = logits
            readers = [n for n in lite.nodes if out in n.inputs]
    return found


def check_model(model: onnx.ModelProto, max_subgraphs: int = 2) -> None:
    """Whole model on the NPU when supported (the logits before any softmax compared too, as
    random weights can saturate it), else its largest supported subgraphs."""
    lite, _ = import_onnx(model)
    name, shape = graph_input(model)
    feeds = {name: rng(1).standard_normal(shape).astype(np.float32)}
    if all(why is None for why in capability.supported_nodes(lite).values()):
        logits = sorted(set(_softmax_logits(lite, model).values()) - set(lite.outputs))
        compare(lite, dataclasses.replace(lite, outputs=[*lite.outputs, *logits], subgraphs=[]),
                model, feeds)
        return
    groups = [g for g in supported_components(lite) if len(g) > 1][:max_subgraphs]
    assert groups, "no NPU-supported subgraph"
    for nodes in groups:
        compare(lite, subgraph(lite, nodes), model, feeds)


def light(name: str) -> onnx.ModelProto:
    path = os.path.join(LIGHT, f"{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} not shipped with this onnx")
    return onnx.load(path)


def _params(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(names)]


@pytest.mark.parametrize("name", _params(FAST | SLOW))
def test_light_model_random_weights(name):
    check_model(randomized(light(name)))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FAST | SLOW))
def test_light_model_as_shipped(name):
    check_model(light(name))


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO_MODELS, "**", "*.onnx"), recursive=True)),
                         ids=os.path.basename)
def test_repo_models(path):
    check_model(onnx.load(path))
