"""Rewrites models/mobilenet_v2.onnx from the builder in provider.zoo.mobilenet_v2."""

from models import write
from provider.zoo.mobilenet_v2 import build

if __name__ == "__main__":
    print(write(build(), __file__))
