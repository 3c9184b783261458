"""litenpu: an onnxruntime execution provider for NPUs, written in Python."""

__version__ = "0.1.0"
