"""`accuracy_report`: what quantization costs, per output and per quantized tensor.

On the same samples it runs the float model on onnxruntime's CPU, the quantized model on
onnxruntime's CPU and the quantized model on the NPU (`provider.InferenceSession` with the
NPU provider first, onnxruntime's CPU provider for what the NPU does not take). Per output:
cosine, SNR, max abs error and top-1 agreement of class scores. Per layer: every activation
a QuantizeLinear node quantizes, its integer value from the NPU session (an extra graph
output) dequantized with its scale and zero point, against the float value of the same
tensor in the float model; the "drop" is how many dB a layer loses relative to the
quantized tensors it reads, so the first layer that loses accuracy stands out.

The float model is prepared as for quantization (`prepare.prepare`: the graph onnxruntime's
CPU runs anyway), so tensors renamed by that step keep their names.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnxruntime as ort
from onnx import helper

from provider.errors import InvalidModelError
from provider.quantize import saturation
from provider.quantize.calibration import CalibrationData, model_inputs
from provider.quantize.metrics import Accumulator, Metrics, looks_like_classes
from provider.quantize.prepare import ModelSource, load_model, prepare
from provider.quantize.qdq import QuantizedTensor, int8_nodes, quantized_tensors
from provider.session import CPU_EP, InferenceSession

# onnxruntime's quantizer renames a quantized graph output `X` to `X` + this suffix.
QUANT_INPUT_SUFFIX = "_QuantizeLinear_Input"


@dataclass(frozen=True)
class OutputComparison:
    """One model output: int8 on the NPU and on onnxruntime's CPU against fp32, and the NPU
    against onnxruntime's CPU on the same int8 model."""

    name: str
    npu: Metrics
    cpu: Metrics
    npu_vs_cpu: Metrics


@dataclass(frozen=True)
class LayerComparison:
    """One quantized activation: its NPU value dequantized against its float reference."""

    tensor: str
    node: str  # the node that produces it ("" for a graph input)
    op_type: str
    position: int  # its producer's index in the float graph (0: a graph input)
    scale: float
    zero_point: int
    metrics: Metrics
    drop_db: float | None  # dB lost against the quantized tensors its producer reads


@dataclass
class AccuracyReport:
    """Per-output and per-layer accuracy of a quantized model (see the module docstring)."""

    float_model: str
    quantized_model: str
    data: str
    samples: int
    placement: str  # the NPU session's partition summary
    outputs: list[OutputComparison]
    layers: list[LayerComparison]  # graph order
    float_nodes: list[tuple[str, str]]  # (name, op type) of the quantized model's float nodes
    unmatched: list[str]  # quantized tensors without a float counterpart
    notes: list[str] = field(default_factory=list)  # what to know when reading the numbers

    def worst_drop(self) -> LayerComparison | None:
        """The layer that loses the most dB against its inputs (None without any drop)."""
        drops = [layer for layer in self.layers if layer.drop_db is not None
                 and math.isfinite(layer.drop_db)]
        return max(drops, key=lambda layer: layer.drop_db, default=None)

    def sorted_layers(self, sort: str = "snr") -> list[LayerComparison]:
        """The layers worst SNR first ("snr") or in graph order ("graph")."""
        if sort == "graph":
            return list(self.layers)
        return sorted(self.layers, key=lambda layer: (layer.metrics.snr_db, layer.position))

    def to_text(self, sort: str = "snr", limit: int | None = None) -> str:
        """The table `litenpu accuracy` prints."""
        lines = [f"accuracy of {self.quantized_model} against {self.float_model} on "
                 f"{self.samples} samples ({self.data})",
                 self.placement.splitlines()[0] if self.placement else "", "",
                 f"{'output':<30} {'cosine':>9} {'SNR dB':>8} {'max abs':>10} {'top-1':>7}"]
        for out in self.outputs:
            lines.append(out.name)
            for label, m in (("int8 NPU vs fp32", out.npu), ("int8 CPU vs fp32", out.cpu),
                             ("int8 NPU vs int8 CPU", out.npu_vs_cpu)):
                lines.append(f"  {label:<28} {_row(m)}")
        lines += [f"note: {note}" for note in self.notes]
        order = "worst SNR first" if sort == "snr" else "graph order"
        rows = self.sorted_layers(sort)
        shown = rows if limit is None else rows[:limit]
        lines += ["", f"per layer: {len(rows)} quantized tensors, int8 on the NPU vs fp32 "
                      f"({order}{'' if len(shown) == len(rows) else f', {len(shown)} shown'})",
                  f"{'#':>4} {'tensor':<34} {'op':<18} {'SNR dB':>8} {'drop dB':>8} "
                  f"{'cosine':>9} {'max abs':>10} {'scale':>10} {'zp':>5}"]
        for layer in shown:
            drop = "" if layer.drop_db is None else f"{layer.drop_db:8.2f}"
            lines.append(f"{layer.position:>4} {_clip(layer.tensor, 34):<34} "
                         f"{_clip(layer.op_type or 'input', 18):<18} "
                         f"{_db(layer.metrics.snr_db):>8} {drop:>8} {layer.metrics.cosine:9.5f} "
                         f"{layer.metrics.max_abs:10.4g} {layer.scale:10.4g} {layer.zero_point:>5}")
        worst = self.worst_drop()
        if worst is not None:
            lines.append(f"largest drop: {worst.tensor!r} ({worst.op_type} {worst.node!r}) loses "
                         f"{worst.drop_db:.2f} dB against its inputs")
        if self.float_nodes:
            lines.append("kept float: " + ", ".join(f"{n} ({op})" for n, op in self.float_nodes))
        if self.unmatched:
            lines.append(f"no float counterpart (not compared): {', '.join(self.unmatched)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-ready form (non-finite SNRs are null)."""
        return {
            "float_model": self.float_model, "quantized_model": self.quantized_model,
            "data": self.data, "samples": self.samples, "placement": self.placement,
            "outputs": [{"name": o.name, "npu": o.npu.to_dict(), "cpu": o.cpu.to_dict(),
                         "npu_vs_cpu": o.npu_vs_cpu.to_dict()} for o in self.outputs],
            "layers": [{"tensor": x.tensor, "node": x.node, "op_type": x.op_type,
                        "position": x.position, "scale": x.scale, "zero_point": x.zero_point,
                        "drop_db": x.drop_db if x.drop_db is None or math.isfinite(x.drop_db)
                        else None, **x.metrics.to_dict()} for x in self.layers],
            "float_nodes": [{"name": n, "op_type": op} for n, op in self.float_nodes],
            "unmatched": self.unmatched, "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


def accuracy_report(float_model: ModelSource, quantized_model: ModelSource,
                    data: CalibrationData, *, npu_options: dict[str, str] | None = None
                    ) -> AccuracyReport:
    """Compare `quantized_model` with `float_model` on the samples of `data` (see the module
    docstring); `npu_options` are the NPU provider's options."""
    from provider.ort import EP_NAME

    quantized = load_model(quantized_model)
    with tempfile.TemporaryDirectory(prefix="litenpu-accuracy-") as tmp:
        reference = onnx.load(prepare(float_model, Path(tmp)))
    data.check_inputs(model_inputs(quantized))
    outputs = [o.name for o in quantized.graph.output]
    missing = [n for n in outputs if n not in {o.name for o in reference.graph.output}]
    if missing:
        raise InvalidModelError(f"the quantized model's output(s) {missing} are not outputs of "
                                f"the float model {[o.name for o in reference.graph.output]}")
    tensors, unmatched = quantized_tensors(quantized)
    known = _tensor_names(reference)
    layers: list[tuple[QuantizedTensor, str]] = []
    for tensor in tensors:
        name = tensor.name
        if name not in known and name.endswith(QUANT_INPUT_SUFFIX):
            name = name[: -len(QUANT_INPUT_SUFFIX)]
        if name in known:
            layers.append((tensor, name))
        else:
            unmatched.append(tensor.name)

    ref_names = list(dict.fromkeys([*outputs, *(name for _, name in layers)]))
    float_session = ort.InferenceSession(
        _with_outputs(reference, {n: onnx.TensorProto.FLOAT for n in ref_names}), providers=[CPU_EP])
    cpu_session = ort.InferenceSession(quantized.SerializeToString(), providers=[CPU_EP])
    npu_names = list(dict.fromkeys([*outputs, *(t.quantized for t, _ in layers)]))
    npu_session = InferenceSession(
        _with_outputs(quantized, {t.quantized: helper.np_dtype_to_tensor_dtype(t.zero_point.dtype)
                                  for t, _ in layers}),
        providers=[EP_NAME, CPU_EP], provider_options=[dict(npu_options or {}), {}])

    per_output: dict[str, tuple[Accumulator, Accumulator, Accumulator]] = {}
    per_layer = {t.name: Accumulator() for t, _ in layers}
    for feeds in data:
        ref = dict(zip(ref_names, float_session.run(ref_names, feeds), strict=True))
        cpu = dict(zip(outputs, cpu_session.run(outputs, feeds), strict=True))
        npu = dict(zip(npu_names, npu_session.run(npu_names, feeds), strict=True))
        for name in outputs:
            if name not in per_output:
                classes = looks_like_classes(ref[name].shape)
                per_output[name] = (Accumulator(classes), Accumulator(classes), Accumulator(classes))
            to_npu, to_cpu, between = per_output[name]
            to_npu.add(ref[name], npu[name])
            to_cpu.add(ref[name], cpu[name])
            between.add(cpu[name], npu[name])
        for tensor, name in layers:
            per_layer[tensor.name].add(ref[name], tensor.dequantize(npu[tensor.quantized]))

    positions = _positions(reference)
    snr = {name: acc.metrics().snr_db for name, acc in per_layer.items()}
    comparisons = []
    for tensor, name in layers:
        upstream = [snr[u] for u in tensor.upstream if u in snr]
        comparisons.append(LayerComparison(
            tensor.name, tensor.producer, tensor.op_type, positions.get(name, 0),
            float(tensor.scale.ravel()[0]), int(tensor.zero_point.ravel()[0]),
            per_layer[tensor.name].metrics(), min(upstream) - snr[tensor.name] if upstream else None))
    comparisons.sort(key=lambda c: c.position)
    units = int8_nodes(quantized)
    float_nodes = [(n.name, n.op_type) for n in quantized.graph.node
                   if n.op_type not in ("QuantizeLinear", "DequantizeLinear") and n.name not in units]
    return AccuracyReport(
        _label(float_model), _label(quantized_model), data.source, len(data),
        npu_session.partition_summary(),
        [OutputComparison(n, *(a.metrics() for a in per_output[n])) for n in outputs],
        comparisons, float_nodes, unmatched,
        [saturation.NOTE] if saturation.saturates(quantized) else [])


def _with_outputs(model: onnx.ModelProto, extra: dict[str, int]) -> bytes:
    """`model` (serialized) with tensors `extra` (name -> ONNX element type) as graph outputs."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {o.name for o in copy.graph.output}
    copy.graph.output.extend(helper.make_tensor_value_info(name, elem, None)
                             for name, elem in extra.items() if name not in present)
    return copy.SerializeToString()


def _tensor_names(model: onnx.ModelProto) -> set[str]:
    return {i.name for i in model.graph.input} | {o for n in model.graph.node for o in n.output}


def _positions(model: onnx.ModelProto) -> dict[str, int]:
    """Tensor name -> 1 + index of its producer in graph order (graph inputs: 0)."""
    positions = {i.name: 0 for i in model.graph.input}
    for index, node in enumerate(model.graph.node, start=1):
        positions.update(dict.fromkeys(node.output, index))
    return positions


def _label(model: ModelSource) -> str:
    return os.fspath(model) if isinstance(model, (str, os.PathLike)) else "<model>"


def _row(m: Metrics) -> str:
    top1 = "" if m.top1 is None else f"{100 * m.top1:6.1f}%"
    return f"{m.cosine:9.5f} {_db(m.snr_db):>8} {m.max_abs:10.4g} {top1:>7}"


def _db(value: float) -> str:
    return "inf" if value == math.inf else f"{value:.2f}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]
