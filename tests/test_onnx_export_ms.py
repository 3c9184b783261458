"""Real MindSpore Lite files (NHWC layers, OHWI weights, fused activations, MatMulFusion
and FullConnection with bias) exported to ONNX reproduce MindSpore Lite 2.0's outputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_roundtrip import run, shared_dir

from converters.onnx_export import export_onnx

MS_DIR = shared_dir() / "data" / "ms"
FILES = sorted(MS_DIR.glob("*.ms")) if MS_DIR.is_dir() else []


@pytest.mark.skipif(not FILES, reason=f"no real .ms files under {MS_DIR}")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_real_ms_file_matches_mindspore_lite_outputs(path):
    from converters.lite import reader

    exported = export_onnx(reader.load(path))
    ref = np.load(str(path) + ".ref.npz")
    feeds = {k[3:]: v for k, v in ref.items() if k.startswith("in:")}
    got = run(exported, feeds)
    names = [o.name for o in exported.graph.output]
    assert sorted(names) == sorted(k[4:] for k in ref if k.startswith("out:"))
    for name, value in zip(names, got, strict=True):
        np.testing.assert_allclose(value, ref["out:" + name], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not FILES, reason=f"no real .ms files under {MS_DIR}")
def test_nhwc_layers_are_wrapped_in_transposes():
    from converters.lite import reader

    path = next(p for p in FILES if "lenet" in p.name) if any(
        "lenet" in p.name for p in FILES) else FILES[0]
    ops = [n.op_type for n in export_onnx(reader.load(path)).graph.node]
    assert ops[:3] == ["Transpose", "Conv", "Transpose"]


@pytest.mark.skipif(not FILES, reason=f"no real .ms files under {MS_DIR}")
def test_convert_real_ms_file_to_onnx(tmp_path):
    import onnx

    from converters.convert import convert

    path = FILES[0]
    report = convert(path, tmp_path / "out.onnx")
    assert report.mapped_count > 0 and not report.custom
    exported = onnx.load(tmp_path / "out.onnx")
    ref = np.load(str(path) + ".ref.npz")
    got = run(exported, {k[3:]: v for k, v in ref.items() if k.startswith("in:")})
    np.testing.assert_allclose(got[0], ref["out:" + exported.graph.output[0].name],
                               rtol=1e-4, atol=1e-5)
