"""Rewrites models/transformer_encoder.onnx from the builder in provider.zoo.transformer_encoder."""

from models import write
from provider.zoo.transformer_encoder import build

if __name__ == "__main__":
    print(write(build(), __file__))
