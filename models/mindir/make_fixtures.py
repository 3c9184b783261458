"""Export the MindIR test fixtures with the real MindSpore, plus MindSpore's own outputs.

Opt-in (not run by the tests): needs `pip install mindspore==2.10.0 numpy` in a separate
Python 3.11 venv, e.g.

    python3 -m venv /tmp/ms && /tmp/ms/bin/pip install mindspore==2.10.0 numpy
    /tmp/ms/bin/python models/mindir/make_fixtures.py

and, for the `*_ms20` fixtures (MindSpore 2.0's spelling), with Python 3.8:

    python3.8 -m venv /tmp/ms20 && /tmp/ms20/bin/pip install mindspore==2.0.0 "pillow<10" numpy
    /tmp/ms20/bin/python models/mindir/make_fixtures.py

Writes `<name>.mindir` and `<name>.npz` (inputs `in0..`, MindSpore outputs `out0..`) next to
this file for each net below, and `lenet5_ext_graph.mindir` + `lenet5_ext_variables/data_0`:
the same LeNet-5 written by MindSpore's own split-save path (weights as external data behind
a 64-byte header whose first byte records the byte order), which MindSpore takes for nets
over 1 GiB; the threshold is lowered here so a small net goes that way. Weights come from a fixed seed and BatchNorm statistics are
set to non-trivial values, so a converter that drops or mis-wires a parameter is caught.
"""

from __future__ import annotations

import pathlib

import mindspore as ms
import numpy as np
from mindspore import nn, ops
from mindspore.ops import operations as P
from mindspore.train import serialization

HERE = pathlib.Path(__file__).resolve().parent


class LeNet5(nn.Cell):
    """Classic LeNet-5: Conv2D, ReLU, MaxPool, Flatten, Dense (MatMul + BiasAdd)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(16 * 5 * 5, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, 10)

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def conv_bn_relu6(cin: int, cout: int, k: int, stride: int, group: int = 1) -> nn.SequentialCell:
    return nn.SequentialCell(
        nn.Conv2d(cin, cout, k, stride=stride, pad_mode="pad", padding=k // 2, group=group),
        nn.BatchNorm2d(cout),
        nn.ReLU6(),
    )


class InvertedResidual(nn.Cell):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 project (+ residual when shapes match)."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.body = nn.SequentialCell(
            conv_bn_relu6(cin, hidden, 1, 1),
            conv_bn_relu6(hidden, hidden, 3, stride, group=hidden),
            nn.Conv2d(hidden, cout, 1, pad_mode="valid"),
            nn.BatchNorm2d(cout),
        )

    def construct(self, x):
        y = self.body(x)
        if self.use_res:
            return x + y
        return y


class MobileNetV2Block(nn.Cell):
    """A small MobileNetV2: stem, two inverted residual blocks, global mean pool, classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = conv_bn_relu6(3, 16, 3, 2)
        self.block1 = InvertedResidual(16, 24, 2, 4)
        self.block2 = InvertedResidual(24, 24, 1, 4)
        self.mean = P.ReduceMean(keep_dims=False)
        self.head = nn.Dense(24, 10)

    def construct(self, x):
        x = self.block2(self.block1(self.stem(x)))
        return self.head(self.mean(x, (2, 3)))


class EncoderLayer(nn.Cell):
    """Post-norm transformer encoder layer: multi-head attention + GeLU FFN, LayerNorm."""

    def __init__(self, d_model: int = 32, heads: int = 4, ffn: int = 64) -> None:
        super().__init__()
        self.heads, self.dh = heads, d_model // heads
        self.q = nn.Dense(d_model, d_model)
        self.k = nn.Dense(d_model, d_model)
        self.v = nn.Dense(d_model, d_model)
        self.o = nn.Dense(d_model, d_model)
        self.ff1 = nn.Dense(d_model, ffn)
        self.ff2 = nn.Dense(ffn, d_model)
        self.gelu = nn.GELU()
        self.ln1 = nn.LayerNorm((d_model,))
        self.ln2 = nn.LayerNorm((d_model,))
        self.qk = P.BatchMatMul(transpose_b=True)
        self.pv = P.BatchMatMul()
        self.softmax = nn.Softmax(axis=-1)
        self.scale = 1.0 / float(np.sqrt(d_model // heads))

    def split_heads(self, x, b: int, s: int):
        return ops.transpose(ops.reshape(x, (b, s, self.heads, self.dh)), (0, 2, 1, 3))

    def construct(self, x):
        b, s, d = x.shape
        flat = ops.reshape(x, (b * s, d))
        q = self.split_heads(self.q(flat), b, s)
        k = self.split_heads(self.k(flat), b, s)
        v = self.split_heads(self.v(flat), b, s)
        att = self.softmax(self.qk(q, k) * self.scale)
        ctx = ops.reshape(ops.transpose(self.pv(att, v), (0, 2, 1, 3)), (b * s, d))
        h = self.ln1(flat + self.o(ctx))
        h = self.ln2(h + self.ff2(self.gelu(self.ff1(h))))
        return ops.reshape(h, (b, s, d))


class OpZoo(nn.Cell):
    """The remaining common primitives, one small branch each; returns several outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.fast_gelu = P.FastGeLU()
        self.hswish = P.HSwish()
        self.hsigmoid = P.HSigmoid()
        self.log_softmax = P.LogSoftmax(axis=1)
        self.avg_pool = P.AvgPool(kernel_size=2, strides=2, pad_mode="VALID")
        self.reduce_sum = P.ReduceSum(keep_dims=True)
        self.reduce_max = P.ReduceMax(keep_dims=False)
        self.split = P.Split(axis=1, output_num=2)
        self.concat = P.Concat(axis=1)
        self.pad = P.Pad(((0, 0), (0, 0), (1, 2), (2, 1)))
        self.resize_nn = P.ResizeNearestNeighbor((16, 16))
        self.resize_bl = P.ResizeBilinearV2(align_corners=False, half_pixel_centers=True)
        self.strided_slice = P.StridedSlice()
        self.gather = P.Gather()
        self.cast = P.Cast()
        self.idx = ms.Tensor(np.array([3, 0, 2], np.int32))
        self.w = ms.Parameter(ms.Tensor(np.linspace(0.5, 1.5, 8).astype(np.float32)), name="w")

    def construct(self, x):
        a = ops.sigmoid(x) + ops.tanh(x) - self.fast_gelu(x)
        b = self.hswish(x) * self.hsigmoid(x)
        lo, hi = self.split(x)
        c = self.concat((hi, lo))
        d = ops.exp(x * 0.1) / (ops.sqrt(ops.abs(x) + 1.0) + ops.pow(x, 2.0))
        e = ops.erf(x) + self.log_softmax(x)
        f = ops.squeeze(ops.expand_dims(self.reduce_sum(x, (2,)), 0), 0)
        g = self.reduce_max(x, (1,))
        h = self.avg_pool(self.pad(x))
        i = self.resize_nn(x) + self.resize_bl(x, (16, 16))
        j = self.strided_slice(x, (0, 1, 0, 1), (1, 4, 8, 8), (1, 1, 2, 2))
        k = self.gather(x, self.idx, 1)
        m = self.cast(self.cast(x * 10.0, ms.int32), ms.float32)
        n = ops.ones_like(x) + ops.zeros_like(x) + x * self.w
        return a + b + c + e, d, f, g, h, i, j, k, m, n


class OpVariants(nn.Cell):
    """Argument variants: SAME padding, align_corners / half-pixel resizes, transposed and
    negative-axis forms, reductions over every axis."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_same = nn.Conv2d(4, 6, 3, stride=2, pad_mode="same", has_bias=True)
        self.max_same = nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same")
        self.avg_same = nn.AvgPool2d(kernel_size=3, stride=2, pad_mode="same")
        self.nn_align = P.ResizeNearestNeighbor((11, 13), align_corners=True)
        self.nn_half = P.ResizeNearestNeighborV2(align_corners=False, half_pixel_centers=True)
        self.bl_align = P.ResizeBilinearV2(align_corners=True)
        self.bmm_ta = P.BatchMatMul(transpose_a=True)
        self.concat = P.Concat(axis=-1)
        self.split = P.Split(axis=-1, output_num=4)
        self.log_softmax = P.LogSoftmax(axis=-1)
        self.mean_all = P.ReduceMean(keep_dims=True)
        self.sum_all = P.ReduceSum(keep_dims=False)

    def construct(self, x):
        a = self.max_same(self.conv_same(x)) + self.avg_same(self.conv_same(x))
        b = self.nn_align(x) + self.bl_align(x, (11, 13)) + self.nn_half(x, (11, 13))
        flat = ops.reshape(x, (1, 4, 64))
        c = self.bmm_ta(flat, flat)
        p0, p1, p2, p3 = self.split(x)
        d = self.log_softmax(self.concat((p3, p1, p0, p2)))
        e = self.mean_all(x) + self.sum_all(x)
        return a, b, c, d, e


class OpExtras(nn.Cell):
    """More element-wise math, comparisons with Select, Tile, Argmax, Elu / Softplus, SumExt.
    (Rsqrt, Square and NotEqual have single-primitive tests in tests/test_mindir_run.py.)"""

    def __init__(self) -> None:
        super().__init__()
        self.tile = P.Tile()
        self.argmax = P.Argmax(axis=1)
        self.reduce_min = P.ReduceMin(keep_dims=True)
        self.reduce_prod = P.ReduceProd(keep_dims=False)
        self.elu = P.Elu(alpha=1.0)
        self.softplus = P.Softplus()
        self.select = P.Select()

    def construct(self, x):
        y = x * 0.5
        a = ops.neg(x) + ops.log(ops.abs(x) + 1.0) + ops.floor(x)
        b = ops.maximum(x, y) - ops.minimum(x, y) + ops.reciprocal(ops.abs(x) + 1.0)
        c = self.select(ops.logical_and(ops.greater(x, y), ops.less_equal(x, 1.0)), x, ops.ceil(y))
        d = self.tile(x, (1, 2, 1, 1))
        e = self.argmax(x)
        f = self.reduce_min(x, (2, 3)) + self.reduce_prod(x, (3,)).sum()
        g = self.elu(x) + self.softplus(x) + ops.sin(x) * ops.cos(x)
        h = ops.cast(ops.equal(x, ops.floor(x)), ms.float32) + ops.cast(ops.logical_not(ops.less(x, y)), ms.float32)
        return a + b + c, d, e, f, g, h


class ModernOps(nn.Cell):
    """What current MindSpore code writes: exact GELU (Erf), SiLU, adaptive pooling, Dense on 3-D
    input, Dropout in eval, mean/sum, the @ operator (MatMulExt), chunk/cat, interpolate."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, pad_mode="same")
        self.bn = nn.BatchNorm2d(8)
        self.gelu = nn.GELU(approximate=False)
        self.silu = nn.SiLU()
        self.hswish = nn.HSwish()
        self.leaky = nn.LeakyReLU(0.1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.pool2 = nn.AdaptiveAvgPool2d((4, 2))
        self.fc = nn.Dense(8, 6)
        self.drop = nn.Dropout(p=0.5)

    def construct(self, x):
        y = self.bn(self.conv(x))
        a = self.gelu(y) + self.silu(y) + self.hswish(y) + self.leaky(y)
        p = self.pool(a).view(1, 8) + ops.reshape(self.pool2(a), (1, 8, 8)).mean(-1)
        t = ops.reshape(a, (1, 8, 64)).permute(0, 2, 1)
        d = self.fc(self.drop(t))
        m = ops.mean(d, axis=-1, keep_dims=True) + ops.sum(d, 1, keepdim=True)
        s = ops.softmax(d @ d.transpose(0, 2, 1), axis=-1)
        c = ops.cat(ops.chunk(a, 2, axis=1)[::-1], axis=1)
        i = ops.interpolate(a, size=(16, 16), mode="bilinear", align_corners=False)
        return p, d, m, s, c, i


def fixed_parameters(net: nn.Cell, seed: int) -> None:
    """Give every parameter (BatchNorm statistics too) seeded, non-trivial values."""
    rng = np.random.default_rng(seed)
    for p in net.get_parameters():
        shape = p.shape
        if "moving_variance" in p.name:
            value = rng.uniform(0.5, 1.5, shape)
        elif "gamma" in p.name:
            value = rng.uniform(0.8, 1.2, shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 4
            value = rng.standard_normal(shape) / np.sqrt(fan_in)
        p.set_data(ms.Tensor(value.astype(np.float32)))


def export(name: str, net: nn.Cell, inputs: list[np.ndarray], seed: int,
           dynamic_dims: tuple[int, ...] = ()) -> None:
    """Export `net` and its outputs on `inputs`; `dynamic_dims` of every input export as -1."""
    fixed_parameters(net, seed)
    net.set_train(False)
    tensors = [ms.Tensor(a) for a in inputs]
    outs = net(*tensors)
    outs = outs if isinstance(outs, tuple) else (outs,)
    if dynamic_dims:
        tensors = [ms.Tensor(shape=[None if i in dynamic_dims else d for i, d in enumerate(a.shape)],
                             dtype=ms.float32) for a in inputs]
    ms.export(net, *tensors, file_name=str(HERE / name), file_format="MINDIR")
    for path in HERE.glob(f"{name}*"):  # MindSpore writes 0400 / 0700; keep the checkout usable
        path.chmod(0o755 if path.is_dir() else 0o644)
    for path in HERE.glob(f"{name}_variables/*"):
        path.chmod(0o644)
    arrays = {f"in{i}": a for i, a in enumerate(inputs)}
    arrays.update({f"out{i}": o.asnumpy() for i, o in enumerate(outs)})
    np.savez(HERE / f"{name}.npz", **arrays)


def main() -> None:
    ms.set_context(mode=ms.GRAPH_MODE)
    if hasattr(ms, "set_device"):
        ms.set_device("CPU")
    else:  # MindSpore 2.0
        ms.set_context(device_target="CPU")
    ms.set_seed(0)
    rng = np.random.default_rng(0)
    lenet_input = rng.standard_normal((2, 1, 32, 32)).astype(np.float32)
    mobilenet_input = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    if ms.__version__.startswith("2.0."):
        # MindSpore 2.0 spells primitive arguments as primitive attributes, not constant
        # inputs: the same two nets, written that way.
        export("lenet5_ms20", LeNet5(), [lenet_input], 1)
        export("mobilenetv2_block_ms20", MobileNetV2Block(), [mobilenet_input], 2)
        return
    export("lenet5", LeNet5(), [lenet_input], 1)
    export("mobilenetv2_block", MobileNetV2Block(), [mobilenet_input], 2)
    export("encoder_layer", EncoderLayer(), [rng.standard_normal((2, 8, 32)).astype(np.float32)], 3)
    split_threshold = serialization.TOTAL_SAVE
    serialization.TOTAL_SAVE = 0  # KiB: force the external-data layout for a small net
    try:
        export("lenet5_ext", LeNet5(), [rng.standard_normal((2, 1, 32, 32)).astype(np.float32)], 1)
    finally:
        serialization.TOTAL_SAVE = split_threshold
    export("op_zoo", OpZoo(), [rng.standard_normal((1, 4, 8, 8)).astype(np.float32)], 4)
    export("op_variants", OpVariants(), [rng.standard_normal((1, 4, 8, 8)).astype(np.float32)], 5)
    export("op_extras", OpExtras(), [np.round(rng.standard_normal((1, 4, 8, 8)) * 4).astype(np.float32) / 4], 6)
    export("modern_ops", ModernOps(), [rng.standard_normal((1, 4, 8, 8)).astype(np.float32)], 7)
    # Batch size left open at export (-1 in the file); the reference outputs use a batch of 3.
    export("encoder_layer_dynamic", EncoderLayer(), [rng.standard_normal((3, 8, 32)).astype(np.float32)], 3,
           dynamic_dims=(0,))


if __name__ == "__main__":
    main()
