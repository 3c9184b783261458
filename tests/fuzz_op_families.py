"""The op families of tests/fuzz_ops.py: one generator per family draws a small random
model (mostly one node) and how to feed and compare it, from a numpy Generator alone.

Twenty-one generators of 20-110 lines each, kept in one module (over ~400 lines) so that the
families, their shared helpers and the registry at the end read as one list.

Feeds are random normal floats and small integers; in one case in ten of the single-op
families, a fifth of the float32 feed values are NaN or +-inf. Known by-design differences
are kept out of the draws:

- no NaN in max/min windows (pooling, ReduceMax, ReduceMin, ReduceLogSumExp's shift by
  the maximum): the NPU keeps a NaN, onnxruntime's kernels may drop it (for ReduceMin,
  onnx's reference evaluator keeps it too; a LogSumExp of NaN and +inf is inf there);
- no -inf into pooling either: onnxruntime's MaxPool starts a window at -3.4e38, so a window
  of -inf and padding gives -3.4e38 there, -inf in onnx's reference and on the NPU;
- no NaN into ArgMax / ArgMin with select_last_index: the NPU takes a NaN as the largest
  value either way (numpy's rule, and onnxruntime's without select_last_index), while
  onnxruntime's select_last_index loop skips it;
- no NaN or inf into LRN: onnxruntime's running sum over the channel window turns an inf
  into NaN (inf - inf) for the channels after it;
- no NaN or inf into a linear or cubic Resize: onnxruntime, onnx's reference evaluator and
  the NPU each interpolate infinities into their own mix of inf and NaN;
- no nearest Resize rounding half ties (round_prefer_*) by sizes of an uneven ratio:
  onnxruntime computes the source coordinate in float32 and so does the NPU, yet at an
  exact .5 the two pick different neighbours for about 1% of (in, out) size pairs (e.g. 14
  -> 19 rows, half_pixel, row 9 reads 6.5); floor and ceil agree on all of 2,400 pairs;
- no integer QLinear* / MatMulInteger / ConvInteger / DynamicQuantizeLinear ops: on hosts
  without VNNI (AVX2) onnxruntime's u8 x s8 kernels saturate pairs of products in 16 bits
  (provider.quantize.saturation), so it is not an exact oracle there. QDQ models (float ops
  between QuantizeLinear / DequantizeLinear) are drawn instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NONFINITE = (np.inf, -np.inf, np.nan)
INFINITE = (np.inf, -np.inf)
POSITIVE_INF = (np.inf,)


# ---- what a generator returns ----------------------------------------------------------------

@dataclass
class Draw:
    """One drawn model: its nodes (nodes[main] is the op under test; the graph outputs are the
    last node's outputs), graph inputs, constants and opset, plus how to feed and compare it."""

    nodes: list[onnx.NodeProto]
    inputs: list[onnx.ValueInfoProto]
    inits: list[onnx.TensorProto] = field(default_factory=list)
    opset: int = 17
    main: int = 0
    feeds: dict[str, np.ndarray] = field(default_factory=dict)  # the rest are drawn at random
    specials: tuple[float, ...] = ()  # non-finite values that may go into float32 feeds
    step: float = 0.0  # > 0: a QDQ model, compared within this output quantization step
    notes: dict = field(default_factory=dict)  # what the main node's attributes do not say


def tensor(name: str, shape: Sequence[int], elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape))


def const(name: str, value, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def pick(rng: np.random.Generator, options: Sequence):
    """One of `options`, as the Python value it is (rng.choice would give numpy scalars)."""
    return options[int(rng.integers(len(options)))]


def ints(rng: np.random.Generator, low: int, high: int, count: int) -> list[int]:
    """`count` integers in [low, high)."""
    return [int(v) for v in rng.integers(low, high, count)]


def normal(rng: np.random.Generator, shape: Sequence[int], scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(list(shape)) * scale).astype(np.float32)


def single(op: str, inputs: list[str], outputs: list[str], graph_inputs: list,
           inits: list | None = None, opset: int = 17,
           specials: tuple[float, ...] = NONFINITE, **attrs) -> Draw:
    """A one-node model (by default its float feeds may get NaN and infinities)."""
    node = helper.make_node(op, inputs, outputs, **attrs)
    return Draw([node], graph_inputs, inits or [], opset, specials=specials)


# ---- the families: convolution, pooling, resampling ------------------------------------------

def conv_out(size: int, k: int, s: int, d: int, pads: int, auto_pad: str) -> int:
    """One output dim of a Conv (or pool without ceil_mode)."""
    if auto_pad.startswith("SAME"):
        return -(-size // s)
    if auto_pad == "VALID":
        pads = 0
    return (size + pads - d * (k - 1) - 1) // s + 1


def draw_conv(rng: np.random.Generator) -> Draw:
    """Conv 2-D (groups, dilations, pads/auto_pad, bias) + residual Add + fused activation."""
    g = pick(rng, [1, 1, 1, 2, 4])
    c, o = g * int(rng.integers(1, 40 // g + 2)), g * int(rng.integers(1, 72 // g + 2))
    if rng.random() < 0.3:  # whole blocks of 16 channels (what the blocked kernel takes)
        c, o = 16 * g * int(rng.integers(1, 3)), 16 * g * int(rng.integers(1, 5))
    k, s = ints(rng, 1, 8, 2), ints(rng, 1, 4, 2)
    d = [pick(rng, [1, 1, 2]), pick(rng, [1, 1, 2])]
    n, h, w = int(rng.integers(1, 4)), int(rng.integers(1, 40)), int(rng.integers(1, 40))
    attrs = dict(kernel_shape=k, strides=s, dilations=d, group=g)
    if rng.random() < 0.25:
        attrs["auto_pad"] = pick(rng, ["SAME_UPPER", "SAME_LOWER", "VALID"])
        if attrs["auto_pad"] != "VALID":  # onnxruntime: no dilation with SAME_*
            attrs["dilations"] = [1, 1]
        pads = [0, 0, 0, 0]
    else:
        pads = attrs["pads"] = [int(rng.integers(0, k[i % 2])) for i in range(4)]
    inits = [const("w", normal(rng, [o, c // g, *k]))]
    ins = ["x", "w"]
    if rng.random() < 0.5:
        inits.append(const("b", normal(rng, [o])))
        ins.append("b")
    nodes = [helper.make_node("Conv", ins, ["c"], **attrs)]
    graph_inputs = [tensor("x", [n, c, h, w])]
    auto = attrs.get("auto_pad", "NOTSET")
    out = [conv_out(size, k[i], s[i], d[i], pads[i] + pads[i + 2], auto)
           for i, size in enumerate((h, w))]
    last = "c"
    residual = rng.random() < 0.3 and min(out) >= 1
    if residual:
        graph_inputs.append(tensor("r", [n, o, *out]))
        nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
        last = "a"
    # what the NPU fuses into Conv (the tiles store a clamp or hard swish themselves)
    act = pick(rng, ["none", "relu", "clip", "silu", "sigmoid", "hardswish", "leaky"])
    if act == "relu":
        nodes.append(helper.make_node("Relu", [last], ["y"]))
    elif act == "hardswish":
        nodes.append(helper.make_node("HardSwish", [last], ["y"]))
    elif act == "leaky":
        nodes.append(helper.make_node("LeakyRelu", [last], ["y"], alpha=0.1))
    elif act == "clip":
        inits += [const("lo", 0.0), const("hi", 6.0)]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))
    elif act == "silu":
        nodes.append(helper.make_node("Sigmoid", [last], ["sg"]))
        nodes.append(helper.make_node("Mul", [last, "sg"], ["y"]))
    elif act == "sigmoid":
        nodes.append(helper.make_node("Sigmoid", [last], ["y"]))
    return Draw(nodes, graph_inputs, inits, 17, notes=dict(residual=residual, act=act))


def draw_convt(rng: np.random.Generator) -> Draw:
    """ConvTranspose 2-D: groups, dilations, pads/auto_pad, output_padding/output_shape, bias."""
    g = pick(rng, [1, 1, 2])
    c, o = g * int(rng.integers(1, 6)), g * int(rng.integers(1, 6))
    k, s = ints(rng, 1, 5, 2), ints(rng, 1, 4, 2)
    d = [pick(rng, [1, 1, 2]), pick(rng, [1, 1, 2])]
    h, w = ints(rng, 1, 12, 2)
    attrs = dict(kernel_shape=k, strides=s, dilations=d, group=g)
    r = rng.random()
    if r < 0.5:
        attrs["pads"] = [int(rng.integers(0, k[i % 2])) for i in range(4)]
    elif r < 0.7:
        attrs["auto_pad"] = pick(rng, ["SAME_UPPER", "SAME_LOWER", "VALID"])
    if rng.random() < 0.3:
        attrs["output_padding"] = [int(rng.integers(0, max(s[i], d[i]))) for i in range(2)]
    if rng.random() < 0.2 and "auto_pad" not in attrs:
        attrs["output_shape"] = [h * s[0] + int(rng.integers(0, 2)),
                                 w * s[1] + int(rng.integers(0, 2))]
    inits = [const("w", normal(rng, [c, o // g, *k]))]
    ins = ["x", "w"]
    if rng.random() < 0.5:
        inits.append(const("b", normal(rng, [o])))
        ins.append("b")
    graph_inputs = [tensor("x", [int(rng.integers(1, 3)), c, h, w])]
    return single("ConvTranspose", ins, ["y"], graph_inputs, inits, 17, **attrs)


def draw_pool(rng: np.random.Generator) -> Draw:
    """MaxPool (dilated) / AveragePool / LpPool with pads, ceil_mode...; or a global pool."""
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 20))
    h, w = ints(rng, 1, 30, 2)
    graph_inputs = [tensor("x", [n, c, h, w])]
    if rng.random() < 0.1:
        op = pick(rng, ["GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"])
        return single(op, ["x"], ["y"], graph_inputs, opset=19, specials=POSITIVE_INF)
    op = pick(rng, ["MaxPool", "MaxPool", "AveragePool", "LpPool"])
    k, s = ints(rng, 1, 6, 2), ints(rng, 1, 4, 2)
    attrs: dict = dict(kernel_shape=k, strides=s)
    auto = pick(rng, ["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
    if auto == "NOTSET":
        attrs["pads"] = [int(rng.integers(0, k[i % 2])) for i in range(4)]
    else:
        attrs["auto_pad"] = auto
    if op == "MaxPool" and not auto.startswith("SAME"):  # onnxruntime segfaults on SAME dilated
        attrs["dilations"] = [pick(rng, [1, 1, 2, 3]), pick(rng, [1, 1, 2])]
    # onnxruntime's CPU pooling kernels die (SIGFPE) on an empty output: windows fit in x
    d = attrs.get("dilations", [1, 1])
    h, w = max(h, (k[0] - 1) * d[0] + 1), max(w, (k[1] - 1) * d[1] + 1)
    graph_inputs = [tensor("x", [n, c, h, w])]
    if op != "LpPool" and rng.random() < 0.5:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and rng.random() < 0.5:
        attrs["count_include_pad"] = 1
    if op == "LpPool":
        attrs["p"] = pick(rng, [1, 2, 3])
    return single(op, ["x"], ["y"], graph_inputs, opset=19, specials=POSITIVE_INF, **attrs)


def draw_resize(rng: np.random.Generator) -> Draw:
    """Resize 4-D: nearest/linear/cubic, all coordinate and rounding modes, scales or sizes."""
    mode = pick(rng, ["nearest", "linear", "cubic"])
    transforms = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
    if mode != "nearest":
        transforms.append("tf_crop_and_resize")
    attrs: dict = dict(mode=mode, coordinate_transformation_mode=pick(rng, transforms))
    nearest = pick(rng, ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    if mode == "cubic" and rng.random() < 0.5:
        attrs["cubic_coeff_a"] = pick(rng, [-0.5, -0.75])
    if mode == "cubic" and rng.random() < 0.3:  # onnxruntime: cubic only (or antialias)
        attrs["exclude_outside"] = 1
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    h, w = ints(rng, 1, 12, 2)
    inits, roi = [], ""
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        inits.append(const("roi", [0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8]))
        roi = "roi"
        attrs["extrapolation_value"] = 0.5
    factors = [0.5, 1, 1.5, 2, 3, 0.33, 2.5]
    if rng.random() < 0.5:
        inits.append(const("scales", [1, 1, pick(rng, factors), pick(rng, factors)]))
        ins = ["x", roi, "scales"]
    else:
        sizes = ints(rng, 1, 25, 2)
        if mode == "nearest" and nearest.startswith("round"):  # see the module's docstring
            sizes = [size * int(rng.integers(1, 4)) for size in (h, w)]
        inits.append(const("sizes", [n, c, *sizes], np.int64))
        ins = ["x", roi, "", "sizes"]
    # infinities through an interpolation: onnxruntime, onnx's reference and the NPU each
    # give their own mix of inf and NaN (no spec says which): only nearest gets them
    specials = NONFINITE if mode == "nearest" else ()
    return single("Resize", ins, ["y"], [tensor("x", [n, c, h, w])], inits, 19, specials,
                  **attrs)


# ---- the families: reductions, normalization, shapes, indexing --------------------------------

def random_shape(rng: np.random.Generator, min_rank: int, max_rank: int, max_dim: int) -> list:
    return ints(rng, 1, max_dim + 1, int(rng.integers(min_rank, max_rank + 1)))


def draw_reduce(rng: np.random.Generator) -> Draw:
    """The ten Reduce* ops, ranks 1-4, any (negative) axes or none, keepdims, noop."""
    op = pick(rng, ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                    "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum"])
    shape = random_shape(rng, 1, 4, 5)
    rank = len(shape)
    axes = [int(a) if rng.random() < 0.5 else int(a) - rank
            for a in sorted(rng.choice(rank, size=int(rng.integers(0, rank + 1)), replace=False))]
    attrs = dict(keepdims=int(rng.integers(0, 2)))
    if not axes and rng.random() < 0.3:
        attrs["noop_with_empty_axes"] = 1
    inits, ins = [], ["x"]
    if axes:
        inits.append(const("axes", axes, np.int64))
        ins.append("axes")
    # NaN in a max/min window: the NPU keeps it, onnxruntime may drop it (see the top)
    specials = INFINITE if op in ("ReduceMax", "ReduceMin", "ReduceLogSumExp") else NONFINITE
    return single(op, ins, ["y"], [tensor("x", shape)], inits, 18, specials, **attrs)


def draw_norm(rng: np.random.Generator) -> Draw:
    """Layer / Instance / Batch (inference) / Lp / MeanVariance normalization, LRN, Softmax and
    LogSoftmax (over any axis; last dims of 1 to 130: lines shorter than a vector, whole
    vectors and a tail)."""
    op = pick(rng, ["LayerNormalization", "InstanceNormalization", "BatchNormalization",
                    "LpNormalization", "MeanVarianceNormalization", "LRN", "Softmax",
                    "LogSoftmax"])
    if op in ("Softmax", "LogSoftmax"):
        shape = [*random_shape(rng, 0, 2, 4), pick(rng, [1, 5, 16, 37, 130])]
        return single(op, ["x"], ["y"], [tensor("x", shape)], opset=13,
                      axis=int(rng.integers(-len(shape), len(shape))))
    shape = random_shape(rng, {"LayerNormalization": 1, "LRN": 3}.get(op, 2), 4, 5)
    rank = len(shape)
    channels = shape[1] if rank > 1 else shape[0]
    x = [tensor("x", shape)]
    if op == "LayerNormalization":
        axis = int(rng.integers(-rank, rank))
        scaled = shape[axis % rank:]
        inits = [const("g", normal(rng, scaled)), const("b", normal(rng, scaled))]
        return single(op, ["x", "g", "b"], ["y"], x, inits, 17, axis=axis,
                      epsilon=pick(rng, [1e-5, 1e-3]))
    if op == "InstanceNormalization":
        inits = [const("g", normal(rng, [channels])), const("b", normal(rng, [channels]))]
        return single(op, ["x", "g", "b"], ["y"], x, inits, 17)
    if op == "BatchNormalization":
        inits = [const(name, normal(rng, [channels])) for name in ("g", "b", "m")]
        inits.append(const("v", rng.random(channels) + 0.1))
        return single(op, ["x", "g", "b", "m", "v"], ["y"], x, inits, 15)
    if op == "LRN":  # finite feeds: onnxruntime's running window sum makes inf - inf = NaN
        return single(op, ["x"], ["y"], x, opset=13, specials=(), size=pick(rng, [1, 3, 5, 7]),
                      alpha=pick(rng, [1e-4, 1e-2, 0.5]), beta=pick(rng, [0.5, 0.75, 1.0]),
                      bias=pick(rng, [1.0, 2.0]))
    if op == "LpNormalization":
        return single(op, ["x"], ["y"], x, opset=17, axis=int(rng.integers(-rank, rank)),
                      p=pick(rng, [1, 2]))
    mvn_shape = [max(2, shape[0]), *shape[1:], *[1] * (4 - rank)]  # default axes [0, 2, 3]
    return single(op, ["x"], ["y"], [tensor("x", mvn_shape)], opset=17)


def draw_shape(rng: np.random.Generator) -> Draw:
    """Transpose Expand Tile Flatten Squeeze Unsqueeze Split D2S S2D Reshape (-1, 0)."""
    op = pick(rng, ["Transpose", "Expand", "Tile", "Flatten", "Squeeze", "Unsqueeze", "Split",
                    "DepthToSpace", "SpaceToDepth", "Reshape"])
    shape = random_shape(rng, 1, 4, 4)
    rank = len(shape)
    x = [tensor("x", shape)]
    if op == "Transpose":
        return single(op, ["x"], ["y"], x, perm=[int(p) for p in rng.permutation(rank)])
    if op == "Expand":
        target = [pick(rng, [1, 3]) if dim == 1 else dim for dim in shape]
        target = ints(rng, 1, 3, int(rng.integers(0, 2))) + target
        return single(op, ["x", "t"], ["y"], x, [const("t", target, np.int64)])
    if op == "Tile":
        return single(op, ["x", "r"], ["y"], x, [const("r", ints(rng, 0, 3, rank), np.int64)])
    if op == "Flatten":
        return single(op, ["x"], ["y"], x, axis=int(rng.integers(-rank, rank + 1)))
    if op == "Squeeze":
        ones = [i for i, dim in enumerate(shape) if dim == 1]
        if ones and rng.random() < 0.7:
            return single(op, ["x", "a"], ["y"], x, [const("a", ones, np.int64)])
        return single(op, ["x"], ["y"], x)
    if op == "Unsqueeze":
        count = int(rng.integers(1, 3))
        out_rank = rank + count
        axes = [int(a) if rng.random() < 0.5 else int(a) - out_rank
                for a in sorted(rng.choice(out_rank, size=count, replace=False))]
        return single(op, ["x", "a"], ["y"], x, [const("a", axes, np.int64)])
    if op == "Split":
        axis = int(rng.integers(-rank, rank))
        shape[axis] = max(shape[axis], 2)
        return single(op, ["x"], ["y", "z"], [tensor("x", shape)], opset=18, axis=axis,
                      num_outputs=2)
    if op in ("DepthToSpace", "SpaceToDepth"):
        b = int(rng.integers(1, 4))
        depth = b * b if op == "DepthToSpace" else 1
        space = b if op == "SpaceToDepth" else 1
        dims = [int(rng.integers(1, 3)), int(rng.integers(1, 4)) * depth,
                int(rng.integers(1, 4)) * space, int(rng.integers(1, 4)) * space]
        attrs: dict = dict(blocksize=b)
        if op == "DepthToSpace":
            attrs["mode"] = pick(rng, ["DCR", "CRD"])
        return single(op, ["x"], ["y"], [tensor("x", dims)], **attrs)
    target = [int(np.prod(shape))]
    if rng.random() < 0.5:
        target = [-1] + ([1] if rng.random() < 0.5 else [])
    if rng.random() < 0.3:
        target = [0] * min(rank, 2) + [-1]
    return single("Reshape", ["x", "t"], ["y"], x, [const("t", target, np.int64)])


def draw_pad(rng: np.random.Generator) -> Draw:
    """Pad constant (default or 1.5) / reflect / edge / wrap, ranks 1-4, negative pads."""
    mode = pick(rng, ["constant", "reflect", "edge", "wrap"])
    shape = random_shape(rng, 1, 4, 5)
    low, high = ints(rng, -2, 4, len(shape)), ints(rng, -2, 4, len(shape))
    if mode == "reflect":  # a reflection needs pads < dim
        low = [min(p, dim - 1) for p, dim in zip(low, shape, strict=True)]
        high = [min(p, dim - 1) for p, dim in zip(high, shape, strict=True)]
    inits, ins = [const("pads", low + high, np.int64)], ["x", "pads"]
    if mode == "constant" and rng.random() < 0.5:
        inits.append(const("cv", 1.5))
        ins.append("cv")
    return single("Pad", ins, ["y"], [tensor("x", shape)], inits, 19, mode=mode)


def draw_slice(rng: np.random.Generator) -> Draw:
    """Slice, ranks 1-4, (negative) axes, starts/ends past either end, steps -2..3."""
    shape = random_shape(rng, 1, 4, 7)
    rank = len(shape)
    axes = [int(a) for a in rng.choice(rank, size=int(rng.integers(1, rank + 1)), replace=False)]
    starts, ends, steps = [], [], []
    for a in axes:
        steps.append(pick(rng, [1, 1, 2, -1, -2, 3]))
        starts.append(int(rng.integers(-shape[a] - 2, shape[a] + 2)))
        ends.append(pick(rng, [int(rng.integers(-shape[a] - 2, shape[a] + 2)), 2**62, -2**62]))
    if rng.random() < 0.3:
        axes = [a - rank for a in axes]
    inits = [const(name, values, np.int64)
             for name, values in (("s", starts), ("e", ends), ("a", axes), ("t", steps))]
    return single("Slice", ["x", "s", "e", "a", "t"], ["y"], [tensor("x", shape)], inits)


def draw_gather(rng: np.random.Generator) -> Draw:
    """Gather on any axis, constant int64 indices (negative too) of rank 0-2 (maybe empty);
    GatherElements / ScatterElements with a constant index of the data's rank (smaller off
    the axis); ScatterND with distinct constant index tuples 1..rank deep (negative too)."""
    shape = random_shape(rng, 1, 3, 5)
    axis = int(rng.integers(-len(shape), len(shape)))
    dim = shape[axis]
    if rng.random() < 0.25:
        k = int(rng.integers(1, len(shape) + 1))
        slots = int(np.prod(shape[:k]))
        flat = rng.permutation(slots)[:int(rng.integers(0, slots + 1))]
        tuples = np.stack(np.unravel_index(flat, shape[:k]), -1).reshape(len(flat), k)
        tuples -= np.array(shape[:k]) * rng.integers(0, 2, tuples.shape)
        return single("ScatterND", ["x", "i", "u"], ["y"],
                      [tensor("x", shape), tensor("u", [len(flat), *shape[k:]])],
                      [const("i", tuples, np.int64)], 13)
    if rng.random() < 0.35:
        extent = [int(rng.integers(1, 4)) if a == axis % len(shape) else int(rng.integers(1, d + 1))
                  for a, d in enumerate(shape)]
        index = rng.integers(-dim, dim, extent)
        if rng.random() < 0.4:  # repeated places too: onnxruntime keeps the last update
            return single("ScatterElements", ["x", "i", "u"], ["y"],
                          [tensor("x", shape), tensor("u", extent)],
                          [const("i", index, np.int64)], 13, axis=axis)
        return single("GatherElements", ["x", "i"], ["y"], [tensor("x", shape)],
                      [const("i", index, np.int64)], 13, axis=axis)
    indices = rng.integers(-dim, dim, ints(rng, 0, 4, int(rng.integers(0, 3))))
    return single("Gather", ["x", "i"], ["y"], [tensor("x", shape)],
                  [const("i", indices, np.int64)], axis=axis)


def draw_argtopk(rng: np.random.Generator) -> Draw:
    """ArgMax / ArgMin (select_last_index), TopK (k 0..dim, 2 outputs), CumSum; any axis."""
    op = pick(rng, ["ArgMax", "ArgMin", "TopK", "CumSum"])
    shape = random_shape(rng, 1, 3, 5)
    axis = int(rng.integers(-len(shape), len(shape)))
    x = [tensor("a", shape)]
    if op in ("ArgMax", "ArgMin"):
        last = int(rng.integers(0, 2))
        return single(op, ["a"], ["y"], x, opset=13, specials=INFINITE if last else NONFINITE,
                      axis=axis, keepdims=int(rng.integers(0, 2)), select_last_index=last)
    if op == "TopK":
        k = const("k", [int(rng.integers(0, shape[axis] + 1))], np.int64)
        return single(op, ["a", "k"], ["y", "i"], x, [k], 11, axis=axis,
                      largest=int(rng.integers(0, 2)), sorted=1)
    return single(op, ["a", "ax"], ["y"], x, [const("ax", axis, np.int64)], 14,
                  exclusive=int(rng.integers(0, 2)), reverse=int(rng.integers(0, 2)))


# ---- the families: matrix products, elementwise, types -----------------------------------------

def draw_gemm(rng: np.random.Generator) -> Draw:
    """Gemm: transA/transB, alpha, beta, constant B, C of every broadcastable shape or none."""
    m, k, n = ints(rng, 1, 9, 3)
    trans_a, trans_b = int(rng.integers(0, 2)), int(rng.integers(0, 2))
    a = [k, m] if trans_a else [m, k]
    inits = [const("B", normal(rng, [n, k] if trans_b else [k, n]))]
    c_shape = pick(rng, [[], [n], [1, n], [m, 1], [m, n], [1]])
    attrs: dict = dict(transA=trans_a, transB=trans_b)
    if rng.random() < 0.4:
        attrs["alpha"] = pick(rng, [0.5, 2.0, -1.0])
    if rng.random() < 0.4:
        attrs["beta"] = pick(rng, [0.0, 0.5, 2.0])
    ins = ["a", "B"]
    if rng.random() < 0.8:
        inits.append(const("C", normal(rng, c_shape)))
        ins.append("C")
    return single("Gemm", ins, ["y"], [tensor("a", a)], inits, 13, **attrs)


def draw_matmul(rng: np.random.Generator) -> Draw:
    """MatMul, ranks 1-4 each, broadcast batch dims, B constant or a second input."""
    rank_a, rank_b = ints(rng, 1, 5, 2)
    m, k, n = int(rng.integers(1, 6)), int(rng.integers(1, 7)), int(rng.integers(1, 6))
    batch = [pick(rng, [1, 2, 3]) for _ in range(max(rank_a, rank_b) - 2)]

    def operand(rank: int, last2: list[int]) -> list[int]:
        if rank == 1:
            return [k]
        tail = batch[len(batch) - (rank - 2):]
        return [dim if rng.random() < 0.7 else 1 for dim in tail] + last2

    a, b = operand(rank_a, [m, k]), operand(rank_b, [k, n])
    if rng.random() < 0.5:
        return single("MatMul", ["a", "b"], ["y"], [tensor("a", a)], [const("b", normal(rng, b))],
                      13)
    return single("MatMul", ["a", "b"], ["y"], [tensor("a", a), tensor("b", b)], opset=13)


def broadcast_pair(rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Two shapes of rank 0-3 with dims 1-3 that broadcast together."""
    a = [pick(rng, [1, 2, 3]) for _ in range(int(rng.integers(0, 4)))]
    b = [pick(rng, [1, 2, 3]) for _ in range(int(rng.integers(0, 4)))]
    offset = len(a) - len(b)
    for i in range(max(0, -offset), len(b)):
        j = i + offset  # b[i] lines up with a[j]
        if j >= 0 and a[j] != b[i] and 1 not in (a[j], b[i]):
            b[i] = a[j]
    return a, b


def draw_binary(rng: np.random.Generator) -> Draw:
    """Float Add Sub Mul Div Pow Max Min Mod PRelu Sum Mean on broadcast shapes."""
    op = pick(rng, ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "PRelu", "Sum",
                    "Mean"])
    a, b = broadcast_pair(rng)
    if op == "PRelu":  # the slope broadcasts to X one way (onnxruntime takes any broadcast)
        b = [dim if rng.random() < 0.5 else 1 for dim in a[int(rng.integers(0, len(a) + 1)):]]
    attrs = dict(fmod=1) if op == "Mod" else {}
    values = normal(rng, b)
    if op == "Pow":
        values = np.round(values * 2)
    if rng.random() < 0.5:
        return single(op, ["a", "b"], ["y"], [tensor("a", a)], [const("b", values)], **attrs)
    return single(op, ["a", "b"], ["y"], [tensor("a", a), tensor("b", b)], **attrs)


def draw_unary(rng: np.random.Generator) -> Draw:
    """28 float activations and math functions (with their attributes) and IsNaN, on small
    shapes and some with a last dim of 16 to 130."""
    op = pick(rng, ["Elu", "Selu", "HardSigmoid", "Gelu", "Mish", "Softplus", "Softsign", "Celu",
                    "ThresholdedRelu", "LeakyRelu", "Erf", "Abs", "Neg", "Exp", "Log", "Sqrt",
                    "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tanh",
                    "Sigmoid", "HardSwish", "Relu", "Clip", "IsNaN"])
    shape = [pick(rng, [1, 2, 3]) for _ in range(int(rng.integers(0, 4)))]
    if rng.random() < 0.3:  # a long last dim: the kernels' vector loops and their tails
        shape.append(pick(rng, [16, 37, 130]))
    attrs: dict = {}
    if op in ("Elu", "Celu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "Selu") and \
            rng.random() < 0.6:
        attrs["alpha"] = pick(rng, [0.1, 0.5, 2.0, -1.0])
    if op == "HardSigmoid" and rng.random() < 0.6:
        attrs["beta"] = pick(rng, [0.1, 0.5, 0.7])
    if op == "Selu" and rng.random() < 0.5:
        attrs["gamma"] = pick(rng, [1.0, 2.0])
    if op == "Gelu" and rng.random() < 0.5:
        attrs["approximate"] = "tanh"
    ins, inits = ["x"], []
    if op == "Clip":
        for name, bounds in (("lo", [-1, 0, 0.5]), ("hi", [-0.5, 1, 6])):
            if rng.random() < 0.7:
                inits.append(const(name, pick(rng, bounds)))
                ins.append(name)
            else:
                ins.append("")
    while ins[-1] == "":
        ins.pop()
    return single(op, ins, ["y"], [tensor("x", shape)], inits, 20, **attrs)


TYPES = {  # short name -> (ONNX element type, numpy dtype)
    "f": (TensorProto.FLOAT, np.float32),
    "f16": (TensorProto.FLOAT16, np.float16),
    "i32": (TensorProto.INT32, np.int32),
    "i64": (TensorProto.INT64, np.int64),
    "u8": (TensorProto.UINT8, np.uint8),
    "i8": (TensorProto.INT8, np.int8),
    "b": (TensorProto.BOOL, np.bool_),
}


def draw_int(rng: np.random.Generator) -> Draw:
    """int32/int64 arithmetic, comparisons, Mod, Abs Neg Sign; uint8 BitShift."""
    op = pick(rng, ["Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater",
                    "LessOrEqual", "GreaterOrEqual", "Mod", "BitShift", "Abs", "Neg", "Sign"])
    kind = "u8" if op == "BitShift" else pick(rng, ["i32", "i64"])
    elem, dtype = TYPES[kind]
    a = [pick(rng, [1, 3]) for _ in range(int(rng.integers(0, 3)))]
    b_shape = [pick(rng, [1, 3]) for _ in range(int(rng.integers(0, 3)))]
    attrs: dict = {}
    if op == "Mod":
        attrs["fmod"] = int(rng.integers(0, 2))
    if op == "BitShift":
        attrs["direction"] = pick(rng, ["LEFT", "RIGHT"])
        b = rng.integers(0, 7, b_shape).astype(dtype)
    else:
        b = rng.integers(-20, 20, b_shape).astype(dtype)
    if op in ("Div", "Mod"):
        b[b == 0] = 3
    x = [tensor("a", a, elem)]
    if op in ("Abs", "Neg", "Sign"):
        return single(op, ["a"], ["y"], x)
    return single(op, ["a", "b"], ["y"], x, [const("b", b, dtype)], **attrs)


def draw_cast(rng: np.random.Generator) -> Draw:
    """Cast between float32, float16, int32, int64, uint8, int8 and bool, rank 0-2."""
    source, target = pick(rng, list(TYPES)), pick(rng, list(TYPES))
    shape = ints(rng, 1, 4, int(rng.integers(0, 3)))
    return single("Cast", ["a"], ["y"], [tensor("a", shape, TYPES[source][0])],
                  to=TYPES[target][0])


def draw_where(rng: np.random.Generator) -> Draw:
    """Where (constant condition and else-operand), float32/int32/int64, broadcast shapes."""
    kind = pick(rng, ["f", "i64", "i32"])
    elem, dtype = TYPES[kind]
    cond = [pick(rng, [1, 3]) for _ in range(int(rng.integers(0, 4)))]
    other = [pick(rng, [1, 3]) for _ in range(int(rng.integers(0, 3)))]
    a = [pick(rng, [1, 3])] * int(rng.integers(0, 3))
    inits = [const("c", rng.integers(0, 2, cond), np.bool_),
             const("o", rng.standard_normal(other) * 5, dtype)]
    return single("Where", ["c", "a", "o"], ["y"], [tensor("a", a, elem)], inits)


# ---- the families: recurrent and quantized ----------------------------------------------------

def draw_rnn(rng: np.random.Generator) -> Draw:
    """LSTM / GRU / RNN: directions, clip, bias, lengths, initial states, peepholes, outputs."""
    op = pick(rng, ["LSTM", "GRU", "RNN"])
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    steps, batch, size, hidden = (int(rng.integers(1, 6)), int(rng.integers(1, 4)),
                                  int(rng.integers(1, 7)), int(rng.integers(1, 9)))
    direction = pick(rng, ["forward", "reverse", "bidirectional"])
    dirs = 2 if direction == "bidirectional" else 1
    # layout 0 only: onnxruntime CPU refuses layout=1 (batchwise), there is no oracle for it
    attrs: dict = dict(hidden_size=hidden, direction=direction)
    if op == "GRU":
        attrs["linear_before_reset"] = int(rng.integers(0, 2))
    if rng.random() < 0.15:
        attrs["clip"] = pick(rng, [0.5, 3.0])
    inits = [const("W", normal(rng, [dirs, gates * hidden, size], 0.5)),
             const("R", normal(rng, [dirs, gates * hidden, hidden], 0.5))]
    graph_inputs = [tensor("X", [steps, batch, size])]
    ins = ["X", "W", "R", "", "", "", "", ""]  # X W R B sequence_lens initial_h initial_c P
    if rng.random() < 0.7:
        inits.append(const("B", normal(rng, [dirs, 2 * gates * hidden], 0.3)))
        ins[3] = "B"
    feeds = {}
    if rng.random() < 0.3:
        lengths = rng.integers(1, steps + 1, batch).astype(np.int32)
        if rng.random() < 0.5:
            inits.append(const("sl", lengths, np.int32))
        else:
            graph_inputs.append(tensor("sl", [batch], TensorProto.INT32))
            feeds["sl"] = lengths
        ins[4] = "sl"
    state = [dirs, batch, hidden]
    for slot, name in ((5, "h0"), (6, "c0")):
        if (name == "h0" or op == "LSTM") and rng.random() < 0.4:
            graph_inputs.append(tensor(name, state))
            ins[slot] = name
    if op == "LSTM" and rng.random() < 0.2:
        inits.append(const("P", normal(rng, [dirs, 3 * hidden], 0.3)))
        ins[7] = "P"
    while ins[-1] == "":
        ins.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    kept = [name for name in outputs if rng.random() < 0.7] or ["Y"]
    node_outputs = [name if name in kept else "" for name in outputs]
    while node_outputs[-1] == "":
        node_outputs.pop()
    node = helper.make_node(op, ins, node_outputs, **attrs)
    return Draw([node], graph_inputs, inits, 14, feeds=feeds,
                notes=dict(steps=steps, batch=batch, input_size=size))


def draw_qdq(rng: np.random.Generator) -> Draw:
    """QDQ Conv / depthwise Conv / MatMul / Gemm / Add / Mul, u8 or s8, per-tensor or channel."""
    kind = pick(rng, ["conv", "matmul", "add", "gemm", "dwconv"])
    act = pick(rng, [np.uint8, np.int8])

    def zero_point() -> int:
        return int(rng.integers(0, 256) if act == np.uint8 else rng.integers(-128, 128))

    xs, ys = pick(rng, [0.01, 0.02, 0.05, 0.1]), pick(rng, [0.02, 0.05, 0.1, 0.2])
    inits = [const("xs", xs), const("xz", zero_point(), act),
             const("ys", ys), const("yz", zero_point(), act)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"])]
    notes: dict = dict(kind=kind, activations=np.dtype(act).name)

    def weights(shape: list[int], channels: int, per_channel: bool, axis: int) -> np.ndarray:
        """Constant int8 weights and their DequantizeLinear; returns their scale."""
        scale = rng.random(channels) * 0.02 + 0.001 if per_channel else np.array(0.01)
        inits.extend([const("w", rng.integers(-127, 128, shape), np.int8),
                      const("ws", scale),
                      const("wz", np.zeros(channels if per_channel else ()), np.int8)])
        nodes.append(helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=axis))
        notes["per_channel"] = per_channel
        return scale

    if kind in ("conv", "dwconv"):
        c = int(rng.integers(1, 17))
        o, g = (c, c) if kind == "dwconv" else (int(rng.integers(1, 17)), 1)
        k, h, s = pick(rng, [1, 3]), int(rng.integers(3, 12)), pick(rng, [1, 2])
        per_channel = rng.random() < 0.6
        weight_scale = weights([o, c // g, k, k], o, per_channel, 0)
        ins = ["xd", "wd"]
        if rng.random() < 0.7:  # int32 bias at scale xs * weight scale, as quantizers make
            inits += [const("b", rng.integers(-500, 500, o), np.int32),
                      const("bs", xs * weight_scale * np.ones(o)),
                      const("bz", np.zeros(o), np.int32)]
            nodes.append(helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0))
            ins.append("bd")
        main = len(nodes)
        nodes.append(helper.make_node("Conv", ins, ["c"], kernel_shape=[k, k], strides=[s, s],
                                      pads=[k // 2] * 4, group=g))
        last = "c"
        if rng.random() < 0.5:
            nodes.append(helper.make_node("Relu", ["c"], ["r"]))
            last = "r"
        x_shape = [int(rng.integers(1, 3)), c, h, h]
    elif kind in ("matmul", "gemm"):
        m, k, n = int(rng.integers(1, 9)), int(rng.integers(1, 33)), int(rng.integers(1, 33))
        per_channel = kind == "matmul" and rng.random() < 0.5
        weights([k, n] if kind == "matmul" else [n, k], n, per_channel, 1)
        main = len(nodes)
        if kind == "matmul":
            nodes.append(helper.make_node("MatMul", ["xd", "wd"], ["c"]))
        else:
            inits.append(const("bias", normal(rng, [n])))
            nodes.append(helper.make_node("Gemm", ["xd", "wd", "bias"], ["c"], transB=1))
        last, x_shape = "c", [m, k]
    else:
        x_shape = [int(rng.integers(1, 4)), int(rng.integers(1, 6)), int(rng.integers(1, 6))]
        inits += [const("bs2", pick(rng, [0.01, 0.03, 0.1])), const("bz2", zero_point(), act)]
        nodes += [helper.make_node("QuantizeLinear", ["x2", "bs2", "bz2"], ["x2q"]),
                  helper.make_node("DequantizeLinear", ["x2q", "bs2", "bz2"], ["x2d"])]
        main = len(nodes)
        nodes.append(helper.make_node(pick(rng, ["Add", "Mul"]), ["xd", "x2d"], ["c"]))
        last = "c"
    nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph_inputs = [tensor("x", x_shape)]
    feeds = {"x": normal(rng, x_shape, xs * 60)}
    if kind == "add":
        graph_inputs.append(tensor("x2", x_shape))
        feeds["x2"] = normal(rng, x_shape, 1.5)
    return Draw(nodes, graph_inputs, inits, 17, main=main, feeds=feeds, step=ys, notes=notes)


# ---- the chains: what the NPU's graph rewrites and fusions see ---------------------------------

CHAIN_STEPS = ["conv1", "conv3", "dwconv", "bn", "addc", "mulc", "relu", "clip6", "sigmoid",
               "silu", "hswish_ops", "hardswish", "leaky", "residual", "maxpool", "concat",
               "nhwc_round_trip"]


class _Chain:
    """A growing NCHW chain: its nodes, constants and the shape of each value."""

    def __init__(self, rng: np.random.Generator, shape: list[int]):
        self.rng, self.nodes, self.inits = rng, [], []
        self.shapes = {"x": list(shape)}
        self.cur = "x"

    def name(self, stem: str) -> str:
        return f"{stem}{len(self.nodes)}"

    def const(self, value: np.ndarray) -> str:
        name = self.name("k") + f"_{len(self.inits)}"
        self.inits.append(const(name, value))
        return name

    def add(self, op: str, inputs: list[str], shape: list[int], **attrs) -> str:
        out = self.name("v")
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{len(self.nodes)}",
                                           **attrs))
        self.shapes[out] = list(shape)
        self.cur = out
        return out

    def conv(self, out_c: int, k: int, group: int = 1) -> None:
        n, c, h, w = self.shapes[self.cur]
        weight = normal(self.rng, [out_c, c // group, k, k], 1 / np.sqrt(c // group * k * k))
        ins = [self.cur, self.const(weight)]
        if self.rng.random() < 0.7:
            ins.append(self.const(normal(self.rng, [out_c], 0.1)))
        self.add("Conv", ins, [n, out_c, h, w], kernel_shape=[k, k], pads=[k // 2] * 4,
                 group=group)


def _chain_step(chain: _Chain, step: str, values: list[str]) -> None:
    """Append one step (values: every NCHW value so far, for residuals and concats)."""
    rng, x = chain.rng, chain.cur
    n, c, h, w = shape = chain.shapes[x]
    per_channel = [1, c, 1, 1]
    if step == "conv1":
        chain.conv(int(rng.integers(1, 33)), 1)
    elif step == "conv3":
        chain.conv(int(rng.integers(1, 33)), 3)
    elif step == "dwconv":
        chain.conv(c, 3, group=c)
    elif step == "bn":
        args = [normal(rng, [c]), normal(rng, [c]), normal(rng, [c]),
                (rng.random(c) + 0.5).astype(np.float32)]
        chain.add("BatchNormalization", [x, *map(chain.const, args)], shape)
    elif step in ("addc", "mulc"):
        value = normal(rng, pick(rng, [per_channel, [1], []]))
        chain.add("Add" if step == "addc" else "Mul", [x, chain.const(value)], shape)
    elif step in ("relu", "sigmoid", "hardswish"):
        chain.add({"relu": "Relu", "sigmoid": "Sigmoid", "hardswish": "HardSwish"}[step], [x],
                  shape)
    elif step == "leaky":
        chain.add("LeakyRelu", [x], shape, alpha=0.1)
    elif step == "clip6":
        chain.add("Clip", [x, chain.const(np.float32(0)), chain.const(np.float32(6))], shape)
    elif step == "silu":
        chain.add("Mul", [x, chain.add("Sigmoid", [x], shape)], shape)
    elif step == "hswish_ops":  # x * clip(x + 3, 0, 6) / 6, the OCR models' spelling
        shifted = chain.add("Add", [x, chain.const(np.float32(3))], shape)
        clipped = chain.add("Clip", [shifted, chain.const(np.float32(0)),
                                     chain.const(np.float32(6))], shape)
        chain.add("Div", [chain.add("Mul", [x, clipped], shape), chain.const(np.float32(6))],
                  shape)
    elif step == "residual":
        same = [v for v in values if chain.shapes[v] == shape and v != x]
        if same:
            chain.add("Add", [x, pick(rng, same)], shape)
    elif step == "maxpool" and h >= 2 and w >= 2:
        chain.add("MaxPool", [x], [n, c, h // 2, w // 2], kernel_shape=[2, 2], strides=[2, 2])
    elif step == "concat":
        same = [v for v in values if chain.shapes[v][2:] == shape[2:]]
        other = pick(rng, same)
        chain.add("Concat", [x, other], [n, c + chain.shapes[other][1], h, w], axis=1)
    elif step == "nhwc_round_trip":  # a layout change and back, which rewrites may cancel
        nhwc = chain.add("Transpose", [x], [n, h, w, c], perm=[0, 2, 3, 1])
        if rng.random() < 0.5:
            nhwc = chain.add("Relu", [nhwc], [n, h, w, c])
        chain.add("Transpose", [nhwc], shape, perm=[0, 3, 1, 2])


def draw_chain(rng: np.random.Generator) -> Draw:
    """2-7 steps of convolutions, normalization, activations (also as their op patterns),
    residual adds, pooling, concats and layout round trips on one NCHW input."""
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 17)), *ints(rng, 1, 20, 2)]
    chain = _Chain(rng, shape)
    values = ["x"]
    for _ in range(int(rng.integers(2, 8))):
        _chain_step(chain, pick(rng, CHAIN_STEPS), values)
        values.append(chain.cur)
    if not chain.nodes:
        chain.add("Relu", ["x"], shape)
    return Draw(chain.nodes, [tensor("x", shape)], chain.inits, 17,
                notes=dict(steps=[node.op_type for node in chain.nodes]))


FAMILIES: dict[str, Callable[[np.random.Generator], Draw]] = {
    "conv": draw_conv,
    "convt": draw_convt,
    "pool": draw_pool,
    "resize": draw_resize,
    "reduce": draw_reduce,
    "norm": draw_norm,
    "shape": draw_shape,
    "pad": draw_pad,
    "slice": draw_slice,
    "gather": draw_gather,
    "argtopk": draw_argtopk,
    "gemm": draw_gemm,
    "matmul": draw_matmul,
    "binary": draw_binary,
    "unary": draw_unary,
    "int": draw_int,
    "cast": draw_cast,
    "where": draw_where,
    "rnn": draw_rnn,
    "qdq": draw_qdq,
    "chain": draw_chain,
}
