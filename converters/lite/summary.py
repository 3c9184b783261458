"""A short description of a Lite model: I/O, op histogram, weight bytes, producer.

Computed from the IR without reading weight values (sizes come from array metadata), so
summarising a mapped model pages in no weights. `ModelSummary` is format-neutral, so other
formats (ONNX, MindIR) can fill the same record for `litenpu inspect`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from converters.lite import dtypes
from converters.lite.ir import LiteModel, LiteTensor

# MindSpore's converter FmkType: the framework the model was converted from.
FMK_TYPES = {0: "TensorFlow", 1: "Caffe", 2: "ONNX", 3: "MindSpore", 4: "TFLite", 5: "PyTorch",
             6: "third party", 7: "MindSpore Lite"}
_OBJECT_TYPES = {dtypes.OBJECT_STRING: "string", dtypes.OBJECT_TENSOR_TYPE: "tensor",
                 dtypes.UNKNOWN: "unknown"}


@dataclass
class TensorInfo:
    name: str
    dtype: str
    shape: list[int | str]


@dataclass
class ModelSummary:
    """What `litenpu inspect` prints; `asdict()` of it is the --json output."""

    format: str
    name: str
    producer: str
    source_framework: str
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    nodes: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    weights: int = 0
    weight_bytes: int = 0
    external_weight_bytes: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def dtype_name(type_id: int) -> str:
    """numpy-style name of a MindSpore TypeId ("float32"), or what the object type is."""
    if dtypes.has_numpy(type_id):
        return str(dtypes.to_numpy(type_id))
    return _OBJECT_TYPES.get(type_id, f"TypeId {type_id}")


def _info(t: LiteTensor) -> TensorInfo:
    return TensorInfo(t.name, dtype_name(t.type_id), list(t.shape))


def summarize(model: LiteModel) -> ModelSummary:
    """The summary of a Lite model (weights are sized, never read)."""
    consts = [t for t in model.tensors if t.data is not None]
    histogram = Counter(n.op for n in model.nodes)
    return ModelSummary(
        format="MindSpore Lite (.ms)",
        name=model.name,
        producer=model.version,
        source_framework=FMK_TYPES.get(model.fmk_type, f"FmkType {model.fmk_type}"),
        inputs=[_info(model.tensors[i]) for i in model.inputs],
        outputs=[_info(model.tensors[i]) for i in model.outputs],
        nodes=len(model.nodes),
        ops=dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
        weights=len(consts),
        weight_bytes=sum(t.data.nbytes for t in consts),
        external_weight_bytes=sum(t.data.nbytes for t in consts if t.external is not None),
    )


def format_summary(s: ModelSummary, title: str) -> str:
    """Human-readable multi-line text of a summary."""
    def io(items: list[TensorInfo]) -> list[str]:
        width = max((len(t.name) for t in items), default=0)
        return [f"  {t.name.ljust(width)}  {t.dtype:<8} {t.shape}" for t in items] or ["  (none)"]

    lines = [f"{title}: {s.format}" + (f" {s.name!r}" if s.name else ""),
             f"producer: {s.producer or '(unknown)'}; converted from {s.source_framework}",
             "inputs:", *io(s.inputs), "outputs:", *io(s.outputs),
             f"ops: {s.nodes} nodes, {len(s.ops)} kinds"]
    width = max((len(op) for op in s.ops), default=0)
    lines += [f"  {op.ljust(width)}  {count}" for op, count in s.ops.items()]
    weights = f"weights: {s.weights} tensors, {_size(s.weight_bytes)}"
    if s.external_weight_bytes:
        weights += f" ({_size(s.external_weight_bytes)} in an external file)"
    lines.append(weights)
    return "\n".join(lines)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
