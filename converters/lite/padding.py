"""SAME padding as MindSpore Lite computes it, shared by the ONNX importer and exporter and
the NPU's window rules: ceil(size / stride) outputs, the padding they need split with the
extra at the end, and a negative need (a stride past the kernel) padded as 0, where
onnxruntime's SAME_UPPER crops the input instead."""

from __future__ import annotations


def same_total(size: int, kernel: int, stride: int, dilation: int = 1) -> int:
    """The padding ceil(size / stride) windows need along one axis; negative where they need
    less than the input (onnxruntime's SAME_UPPER pooling then crops half of it at the
    start)."""
    out = -(-size // stride)
    return (out - 1) * stride + (kernel - 1) * dilation + 1 - size


def same_pads(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """Lite's SAME padding of one axis, (before, after): the total, at least 0, the extra
    at the end."""
    total = max(same_total(size, kernel, stride, dilation), 0)
    return total // 2, total - total // 2
