"""litenpu converters: ONNX / MindIR / MindSpore Lite (.ms) graph formats, no runtime."""
