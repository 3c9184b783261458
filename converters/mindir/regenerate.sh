#!/bin/sh
# Regenerate _generated/mind_ir_pb2.py from mind_ir.proto (never edit the output by hand).
# Uses Debian's protoc 3.21.12 (apt install protobuf-compiler); its output runs on the
# protobuf Python runtime 4.21+ (checked up to 7.x), which onnx already pulls in.
set -eu
cd "$(dirname "$0")"
protoc --version
protoc --proto_path=. --python_out=_generated mind_ir.proto
