"""Rewrites models/resnet_block.onnx from the builder in provider.zoo.resnet_block."""

from models import write
from provider.zoo.resnet_block import build

if __name__ == "__main__":
    print(write(build(), __file__))
