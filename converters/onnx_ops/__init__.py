"""Per-op ONNX <-> Lite IR conversion functions, one small function per op, in two tables."""
