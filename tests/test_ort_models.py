"""Real architectures through onnxruntime with the NPU EP, against plain onnxruntime CPU.

The onnx package's light models (weights replaced by seeded random ones, see npu_oracle) and
every model under models/ (.onnx, and .mindir through Lite IR) run through
`provider.InferenceSession`; outputs must match
onnxruntime's CPU EP (atol 1e-4, rtol 1e-3) and most nodes must
run on the NPU. A `.ms` file (Lite IR written by converters.lite.writer) runs too.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from npu_oracle import randomized

import provider
from converters.lite import writer
from converters.onnx_import import import_onnx
from provider.session import InferenceSession

NPU = ["NPUExecutionProvider", "CPUExecutionProvider"]
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
REPO_MODELS = os.path.join(os.path.dirname(__file__), os.pardir, "models")
FAST = ["light_squeezenet"]
SLOW = ["light_shufflenet", "light_inception_v1", "light_resnet50", "light_densenet121",
        "light_inception_v2", "light_vgg19", "light_zfnet512", "light_bvlc_alexnet"]


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def feeds_for(sess: ort.InferenceSession, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input (symbolic dims set to 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def compare(model: bytes, npu_source=None) -> tuple[int, int]:
    """Run on NPU+CPU and on CPU; assert outputs match; (NPU nodes, all nodes)."""
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = InferenceSession(npu_source if npu_source is not None else model, providers=NPU)
    feeds = feeds_for(reference)
    for got, want in zip(sess.run(None, feeds), reference.run(None, feeds), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)
    placed = sess.partition()
    return sum(p.device == "NPU" for p in placed), len(placed)


def light(name: str) -> bytes:
    path = os.path.join(LIGHT, f"{name}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"{path} not shipped with this onnx")
    return randomized(onnx.load(path)).SerializeToString()


@pytest.mark.parametrize("name", FAST + [pytest.param(n, marks=pytest.mark.slow) for n in SLOW])
def test_light_model_matches_cpu(name, capsys):
    npu, total = compare(light(name))
    with capsys.disabled():
        print(f"\n{name}: {npu} of {total} nodes on the NPU")
    assert npu >= 0.8 * total


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO_MODELS, "**", "*.onnx"), recursive=True)),
                         ids=os.path.basename)
def test_repo_models_match_cpu(path):
    with open(path, "rb") as f:
        npu, total = compare(f.read())
    assert npu >= 1


def test_ms_file_runs_through_the_session(tmp_path):
    model = light("light_squeezenet")
    lite, _ = import_onnx(onnx.load_from_string(model))
    path = tmp_path / "squeezenet.ms"
    writer.save(lite, path)
    npu, total = compare(model, npu_source=str(path))
    assert npu >= 0.8 * total


MINDIR = sorted(glob.glob(os.path.join(REPO_MODELS, "mindir", "*.mindir")))


@pytest.mark.parametrize("path", [p if "lenet5.mindir" in p else pytest.param(p, marks=pytest.mark.slow)
                                  for p in MINDIR], ids=os.path.basename)
def test_mindir_models_match_cpu(path):
    npu = InferenceSession(path, providers=NPU)
    cpu = InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = feeds_for(cpu)
    fixture = os.path.splitext(path)[0] + ".npz"  # MindSpore's own inputs, when exported
    if os.path.exists(fixture):
        data = np.load(fixture)
        feeds = {i.name: data[f"in{k}"] for k, i in enumerate(cpu.get_inputs()) if f"in{k}" in data} or feeds
    for got, want in zip(npu.run(None, feeds), cpu.run(None, feeds), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)
    assert any(p.device == "NPU" for p in npu.partition())
