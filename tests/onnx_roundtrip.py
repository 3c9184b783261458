"""Shared helpers of the ONNX converter tests: round trips and onnxruntime comparisons."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from converters.lite import reader, writer
from converters.onnx_export import export_onnx
from converters.onnx_import import import_onnx
from provider.quantize.saturation import saturates

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def shared_dir() -> Path:
    """The shared data folder: $LITENPU_SHARED or <repo>/../shared."""
    default = Path(__file__).resolve().parents[1].parent / "shared"
    return Path(os.environ.get("LITENPU_SHARED", default))


def roundtrip(model, via_ms: bool = True):
    """ONNX (ModelProto or GraphView) -> IR (-> .ms bytes -> IR) -> ONNX; returns
    (exported model, IR, report)."""
    lite, report = import_onnx(model)
    if via_ms:
        lite = reader.loads(writer.dumps(lite))
    return export_onnx(lite), lite, report


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """`model` on onnxruntime's CPU provider: its fused int8 kernels where they are exact,
    its unfused float path where they saturate (provider.quantize.saturation)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if saturates(model):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def random_feeds(model: onnx.ModelProto, seed: int = 0, dim: int = 2) -> dict[str, np.ndarray]:
    """Seeded inputs for every non-initializer graph input (symbolic dims become `dim`)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dim for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def assert_close(got: list[np.ndarray], expected: list[np.ndarray], rtol: float = 1e-4,
                 atol: float = 1e-5) -> None:
    """Same count, then per output shape, dtype and values."""
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        e = np.asarray(e)
        assert g.shape == e.shape, f"output {i}: shape {g.shape} != {e.shape}"
        assert g.dtype == e.dtype, f"output {i}: dtype {g.dtype} != {e.dtype}"
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"output {i}")


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The light models build their weights with ConstantOfShape (all equal values), which
    hides layout mistakes: replace each such node with a seeded random initializer."""
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    shapes = {t.name: onnx.numpy_helper.to_array(t) for t in out.graph.initializer}
    keep = []
    for node in out.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            keep.append(node)
            continue
        shape = [int(d) for d in shapes[node.input[0]]]
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        value = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in) if len(shape) > 1
                 else rng.uniform(0.5, 1.5, shape))  # 1-D: scales, biases, BN statistics
        out.graph.initializer.append(
            onnx.numpy_helper.from_array(value.astype(np.float32), node.output[0]))
        if out.ir_version < 4:  # initializers are graph inputs too before IR 4
            out.graph.input.append(onnx.helper.make_tensor_value_info(
                node.output[0], onnx.TensorProto.FLOAT, shape))
    del out.graph.node[:]
    out.graph.node.extend(keep)
    return out
