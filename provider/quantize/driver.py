"""`quantize_model`: a float ONNX model to a QDQ int8 model for the NPU (onnxruntime's
`quant_pre_process` and `quantize_static` with the NPU configuration), and what was done.

Everything happens in a temporary folder; the output (and the optional `.ms`) is written
atomically once calibration and quantization succeeded, so a failure never leaves a
half-written file.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnxruntime.quantization import CalibrationDataReader, quantize_static

from converters.convert import convert, save_onnx_atomic
from provider.quantize.calibration import CalibrationData, model_inputs
from provider.quantize.config import NPU_INT8_OPS, QuantConfig, QuantOptionError
from provider.quantize.prepare import ModelSource, load_model, prepare
from provider.quantize.qdq import int8_nodes

Progress = Callable[[int, int], None] | None

NO_KERNEL = "no int8 kernel on the NPU"
EXCLUDED = "excluded by --exclude"
FUSED = "fused into the quantized output of the layer before"
LEFT_FLOAT = "left float by onnxruntime's quantizer: its inputs are not quantized"


@dataclass(frozen=True)
class NodeDecision:
    """What quantization did with one node of the prepared float model."""

    name: str
    op_type: str
    precision: str  # "int8", "fused" (removed: its range is its producer's) or "float"
    reason: str = ""


@dataclass
class QuantizeResult:
    """The outcome of `quantize_model`: files, per-node decisions, sizes and time."""

    source: str
    output: Path
    ms_output: Path | None
    config: QuantConfig
    samples: int
    nodes: list[NodeDecision]
    size_before: int
    size_after: int
    seconds: float
    warnings: list[str] = field(default_factory=list)

    def count(self, precision: str) -> int:
        return sum(n.precision == precision for n in self.nodes)

    def summary(self) -> str:
        """The human-readable report `litenpu quantize` prints."""
        cfg = self.config
        lines = [
            f"quantized {self.source} -> {self.output} in {self.seconds:.1f} s "
            f"({self.samples} calibration samples, {cfg.method}, {cfg.activations} activations, "
            f"{'7-bit' if cfg.reduce_range else 'int8'} weights per channel on Conv/ConvTranspose)",
            f"  nodes: {self.count('int8')} int8, {self.count('fused')} fused into the layer "
            f"before, {self.count('float')} kept float",
        ]
        by_reason: dict[str, list[NodeDecision]] = {}
        for node in self.nodes:
            if node.precision == "float":
                by_reason.setdefault(node.reason, []).append(node)
        for reason, nodes in by_reason.items():
            lines.append(f"  kept float, {reason}: {_list_nodes(nodes)}")
        lines += [f"  warning: {w}" for w in self.warnings]
        ratio = self.size_before / self.size_after if self.size_after else 0.0
        lines.append(f"  size: {_size(self.size_before)} -> {_size(self.size_after)} "
                     f"({ratio:.1f}x smaller)")
        if self.ms_output is not None:
            lines.append(f"  wrote {self.ms_output} (MindSpore Lite)")
        return "\n".join(lines)


def quantize_model(model: ModelSource, output: str | os.PathLike, calibration: CalibrationData,
                   config: QuantConfig | None = None, *, ms_output: str | os.PathLike | None = None,
                   progress: Progress = None) -> QuantizeResult:
    """Quantize float model `model` with `calibration` samples, write the QDQ model to
    `output` (and, with `ms_output`, the same model as a MindSpore Lite `.ms`).

    `progress(done, total)` is called after each calibration sample. Raises
    CalibrationError for data that do not fit the model, QuantOptionError for bad options.
    """
    config = config if config is not None else QuantConfig()
    start = time.perf_counter()
    output = Path(output)
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else "<model>"
    if output.suffix.lower() != ".onnx":
        raise QuantOptionError(f"{output}: the quantized model is an ONNX file; name it *.onnx")
    if isinstance(model, (str, os.PathLike)) and Path(model).resolve() == output.resolve():
        raise QuantOptionError(f"{output}: the output would overwrite the float model")
    if ms_output is not None and Path(ms_output).suffix.lower() != ".ms":
        raise QuantOptionError(f"{ms_output}: the MindSpore Lite model must be named *.ms")
    if not output.parent.is_dir():
        raise FileNotFoundError(f"{output.parent}: no such folder for the quantized model")
    float_model = load_model(model)
    with tempfile.TemporaryDirectory(prefix="litenpu-quantize-") as tmp:
        prepared_path = prepare(float_model, Path(tmp))
        prepared = onnx.load(prepared_path)
        config.check_nodes(prepared)
        calibration.check_inputs(model_inputs(prepared_path))
        quantized_path = Path(tmp) / "quantized.onnx"
        quantize_static(str(prepared_path), str(quantized_path),
                        _Reader(calibration, progress), **config.static_arguments(prepared))
        quantized = onnx.load(quantized_path)
        if ms_output is not None:  # first: a model the converter rejects writes no file
            convert(quantized_path, ms_output)
    nodes, warnings = decisions(prepared, quantized, config)
    save_onnx_atomic(quantized, output)
    before = os.path.getsize(model) if isinstance(model, (str, os.PathLike)) \
        else float_model.ByteSize()
    return QuantizeResult(source, output, Path(ms_output) if ms_output is not None else None,
                          config, len(calibration), nodes, before, os.path.getsize(output),
                          time.perf_counter() - start, warnings)


def decisions(prepared: onnx.ModelProto, quantized: onnx.ModelProto,
              config: QuantConfig) -> tuple[list[NodeDecision], list[str]]:
    """Per node of the prepared float model: int8, fused or float (and why); and warnings."""
    present = {n.name for n in quantized.graph.node}
    units = int8_nodes(quantized)
    result, warnings = [], []
    for node in prepared.graph.node:
        name, op = node.name, node.op_type
        if name in config.exclude:
            if name in units:
                warnings.append(f"{op} {name!r} was excluded but its neighbours quantize its "
                                "inputs and outputs, so runtimes fold it to int8; exclude a "
                                "neighbour too to keep it float")
                result.append(NodeDecision(name, op, "int8", "a QDQ unit despite --exclude"))
            else:
                result.append(NodeDecision(name, op, "float", EXCLUDED))
        elif op not in NPU_INT8_OPS:
            result.append(NodeDecision(name, op, "float", NO_KERNEL))
        elif name not in present:
            result.append(NodeDecision(name, op, "fused", FUSED))
        elif name in units:
            result.append(NodeDecision(name, op, "int8"))
        else:
            result.append(NodeDecision(name, op, "float", LEFT_FLOAT))
    return result, warnings


class _Reader(CalibrationDataReader):
    """onnxruntime's calibration reader over CalibrationData (each sample checked when read)."""

    def __init__(self, data: CalibrationData, progress: Progress):
        self._data, self._progress, self._next = data, progress, 0

    def get_next(self) -> dict | None:
        if self._next >= len(self._data):
            return None
        feeds = self._data[self._next]
        self._next += 1
        if self._progress is not None:
            self._progress(self._next, len(self._data))
        return feeds


def _list_nodes(nodes: list[NodeDecision], shown: int = 6) -> str:
    names = ", ".join(f"{n.name} ({n.op_type})" for n in nodes[:shown])
    return names + (f" and {len(nodes) - shown} more" if len(nodes) > shown else "")


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"
