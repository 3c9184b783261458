"""A PNG of the per-layer SNR of an accuracy report (matplotlib, the `bench` extra)."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

from provider.quantize.accuracy import AccuracyReport
from provider.quantize.optional import require


def plot_layer_snr(report: AccuracyReport, path: str | os.PathLike) -> Path:
    """Write SNR (dB) per quantized tensor in graph order to PNG `path` (atomically), the
    worst-dropping layer marked; the path written."""
    require("matplotlib", "bench", "plotting the accuracy report")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    layers = [layer for layer in report.layers if math.isfinite(layer.metrics.snr_db)]
    figure = Figure(figsize=(max(6.0, 0.22 * len(layers) + 2), 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    xs = range(len(layers))
    axes.plot(xs, [layer.metrics.snr_db for layer in layers], marker="o", markersize=3)
    worst = report.worst_drop()
    if worst in layers:
        i = layers.index(worst)
        left = i > len(layers) / 2
        axes.annotate(f"{worst.tensor}\n-{worst.drop_db:.1f} dB", (i, worst.metrics.snr_db),
                      textcoords="offset points", xytext=(-10 if left else 10, -28),
                      ha="right" if left else "left", fontsize=8, color="C3",
                      arrowprops={"arrowstyle": "->", "color": "C3"})
    axes.set_xticks(list(xs), [layer.tensor for layer in layers], rotation=90, fontsize=6)
    axes.set_ylabel("SNR vs fp32 (dB)")
    axes.set_title(f"{Path(report.quantized_model).name}: int8 on the NPU, per quantized tensor "
                   f"({report.samples} samples)", fontsize=9)
    axes.grid(True, alpha=0.3)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent or ".")
    os.close(fd)
    try:
        figure.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
