"""A float model made ready for quantization: opset >= 13, two-input Sums written as Adds,
onnxruntime's `quant_pre_process` (shape inference, graph optimisation such as Conv+BatchNorm
fusion) and a name on every node.

The accuracy report prepares the float model the same way, so the tensors the quantized
model names have a float counterpart of the same name.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
from onnx import version_converter
from onnxruntime.quantization import quant_pre_process

from provider.errors import InvalidModelError
from provider.quantize.optional import available

log = logging.getLogger("litenpu.quantize")

# Per-channel DequantizeLinear (its `axis` attribute) exists from opset 13 on, which needs IR
# version 7; below IR 4 every initializer was also a graph input, and the quantizer's new
# initializers (scales, zero points) would make such a model invalid.
MIN_OPSET = 13
MIN_IR = 7

ModelSource = str | os.PathLike | bytes | onnx.ModelProto


def load_model(model: ModelSource) -> onnx.ModelProto:
    """`model` as a ModelProto (from a path, serialized bytes or itself)."""
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, bytes):
            return onnx.load_from_string(model)
        return onnx.load(os.fspath(model))
    except FileNotFoundError:
        raise
    except Exception as e:  # noqa: BLE001 - onnx raises DecodeError and others for bad files
        where = "model bytes" if isinstance(model, bytes) else os.fspath(model)
        raise InvalidModelError(f"{where}: not a readable ONNX model ({type(e).__name__}: {e})") from None


def prepare(model: ModelSource, folder: Path) -> Path:
    """Write the prepared float model into `folder` and return its path."""
    proto = load_model(model)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise InvalidModelError("the model imports no default ONNX opset")
    if opset < MIN_OPSET:
        try:
            proto = version_converter.convert_version(proto, MIN_OPSET)
        except Exception as e:  # noqa: BLE001 - the converter raises bare RuntimeErrors
            raise InvalidModelError(f"opset {opset} model: converting it to opset {MIN_OPSET} "
                                    f"(needed for per-channel weights) failed: {e}") from None
    if proto.ir_version < MIN_IR:
        proto = _without_initializer_inputs(proto)
    proto = _sums_as_adds(proto)
    source, prepared = folder / "float.onnx", folder / "prepared.onnx"
    onnx.save(proto, source)
    symbolic = available("sympy")
    if not symbolic:
        log.info("sympy is not installed: symbolic shape inference skipped (pip install "
                 "'litenpu[quantize]')")
    try:
        with _working_directory(folder):
            quant_pre_process(str(source), str(prepared), skip_symbolic_shape=not symbolic)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises a bare Exception
        if not symbolic:
            raise
        # e.g. "Incomplete symbolic shape inference" on shape arithmetic over dynamic dims
        # (detectors' heads): ONNX's own shape inference still runs without it
        log.info("symbolic shape inference failed (%s); pre-processing without it", e)
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    proto = onnx.load(prepared)
    if _name_nodes(proto):
        onnx.save(proto, prepared)
    return prepared


def _sums_as_adds(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its two-input Sum nodes as Add nodes (the same value, broadcasting
    alike), a copy when there are any (the caller's model is left as it was): onnxruntime's
    quantizer quantizes Add but not Sum, and the residual adds of older models (the light
    ResNet-50's 16) would otherwise stay float between their int8 convs."""
    def two_input_sum(node: onnx.NodeProto) -> bool:
        return node.op_type == "Sum" and node.domain in ("", "ai.onnx") and len(node.input) == 2

    if not any(two_input_sum(node) for node in model.graph.node):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if two_input_sum(node):
            node.op_type = "Add"
    return copy


@contextmanager
def _working_directory(folder: Path) -> Iterator[None]:
    """Run in `folder`: onnxruntime's symbolic shape inference, when it gives up, saves its
    partial model (and external data files) into the current directory, the user's."""
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def _without_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """An IR < 4 model at IR 7: weights are initializers only, no longer graph inputs too."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    weights = {i.name for i in copy.graph.initializer}
    inputs = [i for i in copy.graph.input if i.name not in weights]
    del copy.graph.input[:]
    copy.graph.input.extend(inputs)
    copy.ir_version = MIN_IR
    return copy


def _name_nodes(model: onnx.ModelProto) -> bool:
    """Name unnamed nodes `<OpType>_<n>` (unique), so --exclude and the reports can name them."""
    taken = {n.name for n in model.graph.node if n.name}
    counts: Counter[str] = Counter()
    changed = False
    for node in model.graph.node:
        if node.name:
            continue
        while True:
            name = f"{node.op_type}_{counts[node.op_type]}"
            counts[node.op_type] += 1
            if name not in taken:
                break
        node.name, changed = name, True
        taken.add(name)
    return changed
