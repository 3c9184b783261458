"""The native NPU kernels (`provider/npu/csrc/`) against the numpy kernels.

The numpy kernels in `provider/npu/ops/` define what every Program step computes and
are checked against onnxruntime elsewhere (test_npu_kernels.py); here the same compiled
Program runs twice, `Executor(program)` (native steps where `native_steps.lower` takes
them) and `Executor(program, kernels=KERNELS)` (every step on numpy), and the outputs must
agree to float32 rounding (the GEMMs sum in another order). Each equivalence test also
asserts that every step ran natively, so a lowering that silently falls back to numpy
fails rather than passing trivially. Further: the steps that must stay on numpy (fp16,
fused activations without a clamp form, batched matmul), thread-count independence,
concurrent executors, the `LITENPU_NATIVE=0` fallback, fork safety of the thread pool and
the per-step profile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from npu_oracle import lite_graph, pool, rng
from threads import run_threads
from worker_cores import run_until_a_worker_helps

from converters.lite import dtypes as lite_dtypes
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from converters.onnx_import import import_onnx
from provider.errors import BindingError, InputValueError, InvalidModelError, UnsupportedError
from provider.npu import native, native_steps
from provider.npu.capability import check
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor, step_stamps
from provider.npu.memory import DevicePool
from provider.npu.ops import KERNELS, conv_weights
from provider.npu.program import Program, from_bytes, to_bytes
from provider.options import CompileOptions

if native.library() is None:
    pytest.skip("the native NPU library is unavailable", allow_module_level=True)

F32 = np.float32
ROOT = Path(__file__).resolve().parent.parent
SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
ACTS = ["NO_ACTIVATION", "RELU", "RELU6"]


# ---- building and running ------------------------------------------------------------------


def randn(r: np.random.Generator, *shape: int) -> np.ndarray:
    return r.standard_normal(shape).astype(F32)


def graph(nodes: list[tuple[str, dict, list[str], str]], tensors: dict[str, tuple[np.ndarray, bool]],
          outputs: list[str]) -> LiteModel:
    """A Lite model: `tensors` name -> (array, is_constant) for inputs and constants, nodes
    (op, attrs, input names, output name) in order; intermediate tensors are declared float32."""
    m = LiteModel(name="native")
    index: dict[str, int] = {}
    for name, (arr, const) in tensors.items():
        index[name] = m.add_tensor(LiteTensor.of(name, arr.dtype, arr.shape, arr if const else None))
        if not const:
            m.inputs.append(index[name])
    for i, (op, attrs, ins, out) in enumerate(nodes):
        index[out] = m.add_tensor(LiteTensor.of(out, F32, ()))
        m.add_node(LiteNode(f"n{i}", op, dict(attrs), [index[n] for n in ins], [index[out]]))
    m.outputs = [index[o] for o in outputs]
    return m


def compile_for(model: LiteModel, feeds: dict[str, np.ndarray], *, fp16: bool = False) -> Program:
    """The Program for `feeds`' shapes, after a round trip through the file format."""
    shapes = {k: v.shape for k, v in feeds.items()}
    return from_bytes(to_bytes(compile_model(model, shapes, CompileOptions(fp16))))


def run(program: Program, feeds: dict[str, np.ndarray], **kw) -> tuple[list[np.ndarray], int]:
    """Outputs (copies) of one run, and how many steps ran natively."""
    with Executor(program, pool(), **kw) as ex:
        out = [np.array(o) for o in ex.run([feeds[n] for n in ex.input_names])]
        return out, ex.native_steps


def assert_close(got: list[np.ndarray], want: list[np.ndarray], what: str = "") -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        if w.dtype.kind == "f":
            # the finite values' scale (an infinity made the tolerance infinite)
            scale = max(1.0, float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0)))
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * scale, err_msg=what)
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)


def check_native(model: LiteModel, feeds: dict[str, np.ndarray], kernel: str | None = None) -> Program:
    """Every step runs natively and computes what the numpy kernels compute."""
    program = compile_for(model, feeds)
    if kernel is not None:
        assert [s.kernel for s in program.steps] == [kernel], [s.kernel for s in program.steps]
    got, count = run(program, feeds)
    want, none = run(program, feeds, kernels=KERNELS)
    assert none == 0
    assert count == len(program.steps), (
        f"{count} of {len(program.steps)} steps native: "
        f"{[(s.kernel, native_steps.lower(program, i) is not None) for i, s in enumerate(program.steps)]}")
    assert_close(got, want, what=str([(s.kernel, s.attrs) for s in program.steps]))
    return program


def conv_attrs(c: int, o: int, k: tuple[int, int], stride=(1, 1), dil=(1, 1), pads=(0, 0, 0, 0),
               group: int = 1, act: str = "NO_ACTIVATION") -> dict:
    """Conv2DFusion attributes; pads (top, bottom, left, right) as Lite's pad_list."""
    return {"format": "NCHW", "kernel_size": list(k), "stride": list(stride), "dilation": list(dil),
            "group": group, "pad_mode": "PAD", "pad_list": list(pads), "in_channel": c,
            "out_channel": o, "activation_type": act}


def conv_model(r, *, n=1, c=4, hw=(9, 9), o=6, k=(3, 3), stride=(1, 1), dil=(1, 1),
               pads=(0, 0, 0, 0), group=1, bias=True, act="NO_ACTIVATION", residual=False):
    """(model, feeds) of a conv; residual: `conv(x) + r` with the activation on the Add."""
    x = randn(r, n, c, *hw)
    tensors = {"x": (x, False), "w": (randn(r, o, c // group, *k), True)}
    if bias:
        tensors["b"] = (randn(r, o), True)
    attrs = conv_attrs(c, o, k, stride, dil, pads, group, "NO_ACTIVATION" if residual else act)
    nodes = [("Conv2DFusion", attrs, list(tensors), "y" if not residual else "c")]
    feeds = {"x": x}
    if residual:
        oh = (hw[0] + pads[0] + pads[1] - (k[0] - 1) * dil[0] - 1) // stride[0] + 1
        ow = (hw[1] + pads[2] + pads[3] - (k[1] - 1) * dil[1] - 1) // stride[1] + 1
        feeds["r"] = randn(r, n, o, oh, ow)
        tensors["r"] = (feeds["r"], False)
        nodes.append(("AddFusion", {"activation_type": act}, ["c", "r"], "y"))
    return graph(nodes, tensors, ["y"]), feeds


# ---- 1. native == numpy, every step native -------------------------------------------------


@st.composite
def conv_geometry(draw):
    depthwise = draw(st.booleans())
    if depthwise:
        g = c = draw(st.integers(1, 6))
        o = c * draw(st.sampled_from([1, 2]))
    else:
        g = draw(st.integers(1, 3))
        c, o = g * draw(st.integers(1, 4)), g * draw(st.integers(1, 4))
    k = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.lists(st.integers(0, 2), min_size=4, max_size=4)))
    # input at least as large as the dilated kernel minus the padding, up to 7 larger
    hw = tuple(max(1, (k[a] - 1) * dil[a] + 1 - pads[2 * a] - pads[2 * a + 1] + draw(st.integers(0, 7)))
               for a in (0, 1))
    return {"n": draw(st.integers(1, 2)), "c": c, "o": o, "group": g, "k": k, "dil": dil,
            "stride": (draw(st.integers(1, 3)), draw(st.integers(1, 3))), "pads": pads, "hw": hw,
            "bias": draw(st.booleans()), "act": draw(st.sampled_from(ACTS)),
            "residual": draw(st.booleans())}


@SETTINGS
@given(geometry=conv_geometry(), seed=st.integers(0, 2**16))
def test_conv_native_matches_numpy(geometry, seed):
    model, feeds = conv_model(rng(seed), **geometry)
    program = check_native(model, feeds, "conv2d")
    assert program.steps[0].attrs.get("residual", False) == geometry["residual"]


@pytest.mark.parametrize("case", [
    {"c": 8, "o": 8, "group": 8, "k": (3, 3), "pads": (1, 1, 1, 1)},
    {"c": 8, "o": 16, "group": 8, "k": (3, 3), "stride": (2, 2), "pads": (0, 1, 0, 1)},
    {"c": 4, "o": 4, "group": 4, "k": (5, 5), "dil": (2, 2), "pads": (4, 4, 4, 4), "hw": (6, 7)},
    {"c": 3, "o": 6, "group": 3, "k": (1, 1), "stride": (3, 2), "hw": (8, 5)},
    {"c": 16, "o": 32, "k": (1, 1), "hw": (14, 14)},
    {"c": 16, "o": 24, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (28, 28), "n": 2, "act": "RELU6"},
    {"c": 8, "o": 8, "k": (3, 3), "pads": (1, 1, 1, 1), "residual": True, "act": "RELU"},
    # depthwise on both sides of DW_SMALL_PLANE (256 output pixels): channels-last blocks of
    # 16 channels (20: a partial block) vs one plane at a time
    {"c": 20, "o": 20, "group": 20, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (16, 16),
     "residual": True, "act": "RELU6"},
    {"c": 20, "o": 40, "group": 20, "k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1),
     "hw": (9, 7), "n": 2},
    # two whole blocks of 16 channels: a pixel's lanes gathered at once
    {"c": 32, "o": 32, "group": 32, "k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1),
     "hw": (11, 10), "n": 2, "residual": True, "act": "RELU6"},
    {"c": 20, "o": 20, "group": 20, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (17, 17),
     "residual": True, "act": "RELU"},
    {"c": 12, "o": 24, "group": 12, "k": (5, 5), "stride": (2, 2), "pads": (2, 2, 2, 2),
     "hw": (33, 31), "dil": (1, 2)},
    # a plane's 49 taps in two passes over its output (the second adds to the first's sums),
    # the plane's last outputs past its whole vectors of 32 (19 x 25 columns)
    {"c": 3, "o": 6, "group": 3, "k": (7, 7), "pads": (3, 3, 3, 3), "hw": (19, 19),
     "residual": True, "act": "RELU"},
    # a one-tap depthwise conv: the per-plane affine form
    {"c": 6, "o": 6, "group": 6, "k": (1, 1), "hw": (5, 7), "n": 2, "residual": True, "act": "RELU"},
    # a strided conv (column phases) large enough to be split into column blocks
    {"c": 3, "o": 16, "k": (7, 7), "stride": (2, 2), "pads": (3, 3, 3, 3), "hw": (64, 64)},
    # a strided one-column window gathers its columns without phases (ResNet's 1x1/2
    # shortcuts): columns past the padding, strides that differ by axis, a residual
    {"c": 8, "o": 12, "k": (1, 1), "stride": (2, 3), "pads": (1, 0, 0, 2), "hw": (25, 40)},
    {"c": 16, "o": 32, "k": (1, 1), "stride": (2, 2), "hw": (28, 28), "residual": True,
     "act": "RELU"},
    # a GEMM whose block of weights (40 x 48) is past GEMM_CHUNK_MAX_A: its 600 columns in
    # one call per task, not chunks of 256
    {"c": 48, "o": 40, "k": (1, 1), "hw": (20, 30), "residual": True, "act": "RELU"},
    # small planes, one GEMM over the batch's columns: conv1d-like clips, strided, with a
    # residual; groups of 17 channels; one image on a 9x9 plane in two blocks of channels
    {"c": 12, "o": 20, "k": (1, 3), "stride": (1, 2), "pads": (0, 1, 0, 1), "hw": (1, 8),
     "n": 4, "residual": True, "act": "RELU"},
    {"c": 8, "o": 34, "group": 2, "k": (3, 3), "dil": (1, 2), "pads": (1, 2, 1, 2),
     "hw": (5, 6), "n": 3, "act": "RELU6"},
    {"c": 40, "o": 48, "k": (3, 3), "stride": (2, 2), "hw": (9, 9)},
    # a stride past the input (one output row or column): the kernels take it as 1 (2**62
    # overflowed their phase arithmetic and crashed the process)
    {"c": 16, "o": 8, "k": (3, 3), "stride": (2**62, 1), "pads": (1, 1, 1, 1), "hw": (6, 40)},
    {"c": 8, "o": 8, "group": 8, "k": (3, 3), "stride": (1, 2**62), "pads": (1, 1, 1, 1),
     "hw": (9, 5)},
    {"c": 4, "o": 6, "k": (1, 1), "stride": (2**62, 2**62), "hw": (3, 3), "n": 2},
], ids=str)
def test_conv_cases_native_match_numpy(case, vector_width):
    check_native(*conv_model(rng(1), **case), "conv2d")


def test_the_direct_kernel_takes_a_group_without_input_channels(monkeypatch, restore_threads):
    """The rule sends no conv of 0 input channels to the direct kernel, but the kernel must
    not depend on it: on several cores it sized its batch of images by the bytes of a
    group's phases, 0 here, and died with SIGFPE. Forced direct, its output is the bias."""
    monkeypatch.setattr("provider.npu.ops.conv.direct_conv", lambda *geometry: True)
    native.set_threads(3)
    model, feeds = conv_model(rng(5), n=2, c=0, o=8, hw=(12, 12), pads=(1, 1, 1, 1))
    program = check_native(model, feeds, "conv2d")
    assert stored_for(program) == "direct"


@pytest.mark.parametrize("case, kernel", [
    ({"c": 64, "o": 32, "k": (1, 1), "stride": (2, 2), "hw": (14, 14)}, "blocked"),
    ({"c": 64, "o": 32, "k": (1, 1), "stride": (2, 2), "hw": (28, 28)}, None),
    ({"c": 32, "o": 8, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (2, 2)}, None),
    ({"c": 32, "o": 8, "k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1), "hw": (8, 8)}, None),
    ({"c": 3, "o": 16, "k": (3, 3), "stride": (2, 2), "hw": (31, 31)}, None),
    ({"c": 32, "o": 8, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (4, 4)}, "direct"),
    ({"c": 32, "o": 8, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (2, 16)}, "direct"),
    ({"c": 32, "o": 8, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (7, 7)}, "direct"),
    ({"c": 32, "o": 8, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (28, 28)}, "direct"),
    ({"c": 3, "o": 8, "k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1), "hw": (200, 200)}, "direct"),
    # whole blocks of 16 input and output channels, one group: blocked, whatever the plane
    ({"c": 32, "o": 16, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (2, 2)}, "blocked"),
    ({"c": 32, "o": 16, "k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1), "hw": (8, 8)}, "blocked"),
    ({"c": 32, "o": 16, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (7, 7)}, "blocked"),
    ({"c": 16, "o": 48, "k": (5, 5), "pads": (2, 2, 2, 2), "hw": (28, 28)}, "blocked"),
    ({"c": 32, "o": 16, "k": (1, 1), "hw": (7, 7)}, "blocked"),
    ({"c": 32, "o": 16, "k": (1, 1), "hw": (6, 9)}, "blocked"),
    ({"c": 32, "o": 16, "k": (1, 1), "hw": (4, 8)}, None),
    ({"c": 32, "o": 16, "k": (1, 1), "hw": (8, 8)}, None),
    ({"c": 32, "o": 16, "k": (1, 1), "stride": (2, 2), "hw": (14, 14)}, "blocked"),
    ({"c": 32, "o": 16, "k": (1, 1), "stride": (2, 2), "hw": (8, 8)}, None),
    ({"c": 3, "o": 16, "k": (7, 7), "stride": (2, 2), "pads": (3, 3, 3, 3), "hw": (112, 112)}, "blocked"),
    ({"c": 3, "o": 16, "k": (7, 7), "stride": (2, 2), "pads": (3, 3, 3, 3), "hw": (712, 712)}, "direct"),
    ({"c": 3, "o": 16, "k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1), "hw": (200, 200)}, "direct"),
    ({"c": 32, "o": 32, "group": 2, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (14, 14)}, "direct"),
], ids=str)
def test_conv_method_follows_the_measured_rule(case, kernel):
    """1x1 convs, 2x2 outputs (16 positions computed for 4), strided 4x4 outputs (32 for
    16) and 27-tap stems on small planes stay on im2col + GEMM; 3x3 convs on 4x4 (32 for 16,
    stride 1), 2x16, 7x7 (64 for 49) and 28x28 planes, and a 27-tap stem with 10,000
    outputs, are direct, their weights stored for the direct kernel; convs of one group in
    whole blocks of 16 input and output channels, and RGB 7x7 stems, are blocked (1x1 ones
    only at stride 1 on planes of 33-56 positions; not RGB 3x3 stems, not two groups; no
    strided one on an input past 4 MB). All give numpy's values."""
    model, feeds = conv_model(rng(4), **case)
    program = check_native(model, feeds, "conv2d")
    assert stored_for(program) == kernel


def test_blocked_rule_leaves_big_strided_inputs_to_the_direct_kernel():
    """A strided conv's input past 4 MB an image stays with the direct kernel's bands of
    rows (the blocked kernel copies whole images); stride 1 and smaller inputs are blocked;
    what the kernel cannot compute (channels not in whole blocks, groups, 1x1) never is."""
    rule = conv_weights.blocked_conv
    assert rule(16, 32, 1, 3, 3, 256, 256, [2, 2])
    assert not rule(16, 32, 1, 3, 3, 512, 512, [2, 2])
    assert rule(16, 32, 1, 3, 3, 512, 512, [1, 1])
    assert not rule(24, 32, 1, 3, 3, 8, 8, [1, 1]) and not rule(32, 24, 1, 3, 3, 8, 8, [1, 1])
    assert not rule(32, 32, 2, 3, 3, 8, 8, [1, 1]) and not rule(32, 32, 1, 1, 1, 8, 8, [1, 1])
    assert rule(3, 64, 1, 7, 7, 224, 224, [2, 2]) and not rule(3, 64, 1, 3, 3, 224, 224, [2, 2])
    assert not rule(1, 16, 1, 7, 7, 96, 96, [1, 1])


@pytest.fixture
def no_blocked(monkeypatch):
    """Convs the blocked kernel would take go by the direct kernel's rule instead."""
    monkeypatch.setattr("provider.npu.ops.conv.blocked_conv", lambda *geometry: False)


@pytest.fixture(params=[0, 8], ids=["widest", "8 floats"])
def vector_width(request):
    """The fp32 kernels with two widths: the CPU's widest (16 floats with AVX-512), and the
    8-float one forced (what CPUs without AVX-512 run)."""
    if native.library() is None:
        pytest.skip("the native library is not built")
    yield native.set_vector_width(request.param)
    native.set_vector_width(0)


def stored_for(program: Program) -> str | None:
    """The kernel ("direct", "blocked"; None: GEMM) the program's one conv is stored for,
    checked to be the one it is lowered to."""
    stored = program.steps[0].attrs.get("weights")
    assert native_steps.lower(program, 0).p[20] == conv_weights.KERNEL_CODES[stored]  # C_DIRECT
    return stored


@pytest.mark.parametrize("case", [
    {"c": 8, "o": 13, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (20, 20), "n": 2, "act": "RELU"},
    {"c": 16, "o": 8, "group": 2, "k": (3, 3), "pads": (1, 2, 0, 1), "hw": (17, 23)},
    {"c": 6, "o": 16, "k": (3, 5), "dil": (2, 1), "pads": (2, 2, 2, 2), "hw": (19, 21),
     "residual": True, "act": "RELU6"},
    {"c": 3, "o": 9, "k": (7, 7), "stride": (2, 2), "pads": (3, 3, 3, 3), "hw": (40, 40)},
    {"c": 8, "o": 8, "k": (3, 3), "stride": (3, 2), "pads": (1, 0, 1, 0), "hw": (33, 31)},
    # a plane's last tile of one vector (7x7: 63 positions = 48 + 15) and of two (8x8: 80)
    {"c": 32, "o": 13, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (7, 7), "act": "RELU"},
    {"c": 32, "o": 13, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (8, 8), "residual": True},
    # phase planes past DIRECT_BAND_BYTES (512 KB a group): bands of rows, every block each
    {"c": 8, "o": 20, "k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1), "hw": (130, 130)},
    {"c": 16, "o": 12, "group": 2, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (128, 131),
     "residual": True, "act": "RELU"},
    # each band builds its own phase rows: a batch (the second image's rows), dilation
    {"c": 8, "o": 9, "k": (3, 3), "stride": (2, 2), "pads": (1, 0, 1, 2), "hw": (131, 130),
     "n": 2},
    {"c": 6, "o": 16, "k": (3, 3), "dil": (2, 2), "pads": (2, 2, 2, 2), "hw": (150, 149),
     "act": "RELU6"},
    # pairs of blocks in bands: a batch, stride 2, a residual, a block and a half (40)
    {"c": 8, "o": 40, "k": (3, 3), "stride": (2, 2), "pads": (1, 0, 1, 2), "hw": (131, 130),
     "n": 2, "residual": True, "act": "RELU"},
    # pairs of full blocks of 8 output channels (the 8-float width's channel-vector tiles):
    # an odd block count (the fifth on position tiles), a pair per group, strides, a
    # batch, a block and a half, one pair split over the cores by positions; position
    # counts that are not multiples of a tile (6) or of a finished chunk (48)
    {"c": 16, "o": 40, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (7, 7), "act": "RELU"},
    {"c": 8, "o": 32, "group": 2, "k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1),
     "hw": (15, 13), "residual": True},
    {"c": 3, "o": 16, "k": (7, 7), "stride": (2, 2), "pads": (3, 3, 3, 3), "hw": (23, 23),
     "n": 2, "act": "RELU6"},
    {"c": 32, "o": 28, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (14, 14), "residual": True,
     "act": "RELU"},
    {"c": 16, "o": 16, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (10, 9)},
    # a plane's last tile of 3 positions (81 = 48 + 5 x 6 + 3) and of 5 (35 = 5 x 6 + 5)
    {"c": 16, "o": 16, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (9, 9), "residual": True},
    {"c": 24, "o": 32, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (5, 7), "act": "RELU6"},
], ids=str)
def test_direct_conv_cases_match_numpy(case, vector_width, no_blocked):
    """Convs the native library computes directly (no im2col): channel tiles of 8/4/2/1,
    position tiles of 3/2/1 vectors, channel-vector tiles of pairs of blocks (8 floats),
    groups, dilation, strides, uneven pads, residual; with vectors of 16 floats where the
    CPU has AVX-512 and of 8 (forced too)."""
    model, feeds = conv_model(rng(3), **case)
    program = check_native(model, feeds, "conv2d")
    assert stored_for(program) == "direct"


@pytest.mark.parametrize("case", [
    # tiles of 12 and 10 positions per row (2 blocks); an odd block count (the third alone)
    {"c": 16, "o": 32, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (5, 12), "act": "RELU"},
    {"c": 32, "o": 48, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (4, 40), "n": 3},
    # rows split in even tiles (25 = 9 + 8 + 8; 7 alone), stride 2 and 3 (runtime offsets)
    {"c": 16, "o": 16, "k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1), "hw": (13, 50)},
    {"c": 16, "o": 32, "k": (3, 3), "stride": (3, 3), "pads": (1, 0, 2, 1), "hw": (20, 22),
     "residual": True, "act": "RELU"},
    # dilation, uneven and wide pads: kernel rows in the padding skipped, rows with no
    # valid kernel row (the bias alone), columns read past the input's right edge
    {"c": 16, "o": 16, "k": (3, 3), "dil": (2, 3), "pads": (2, 2, 3, 3), "hw": (9, 11),
     "act": "RELU6"},
    {"c": 16, "o": 16, "k": (3, 3), "pads": (4, 4, 1, 5), "hw": (1, 3)},
    {"c": 32, "o": 16, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (1, 1), "act": "SWISH"},
    {"c": 16, "o": 16, "k": (5, 3), "stride": (1, 2), "pads": (0, 2, 2, 0), "hw": (7, 9),
     "residual": True, "act": "HSWISH"},
    # RGB stems (3 channels a block): stride 2 (constant offsets), 1 and 3 (run-time ones)
    {"c": 3, "o": 32, "k": (7, 7), "stride": (2, 2), "pads": (3, 3, 3, 3), "hw": (29, 30),
     "act": "RELU"},
    {"c": 3, "o": 16, "k": (7, 7), "pads": (3, 2, 1, 3), "hw": (9, 15), "n": 2,
     "residual": True},
    {"c": 3, "o": 16, "k": (7, 7), "stride": (3, 3), "pads": (3, 3, 3, 3), "hw": (20, 17)},
    # no bias; a non-clamp activation (finished per output channel); a batch past one call's
    # scratch budget is several calls
    {"c": 16, "o": 16, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (6, 6), "bias": False,
     "act": "SIGMOID"},
    {"c": 64, "o": 32, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (48, 48), "n": 3},
    # the reduction in chunks of channel blocks over bands of rows (partial sums kept between
    # chunks), with the epilogue after the last chunk; rows too wide for one row of partial
    # sums in one pass
    {"c": 48, "o": 32, "k": (3, 3), "pads": (2, 1, 1, 1), "hw": (11, 30), "residual": True,
     "act": "SWISH"},
    {"c": 32, "o": 16, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (2, 520), "act": "RELU"},
    # 1x1 windows: 7x7 planes (tiles of 7) over chunks of 12 channel blocks, residual
    {"c": 208, "o": 48, "k": (1, 1), "hw": (7, 7), "residual": True, "act": "RELU"},
    {"c": 16, "o": 32, "k": (1, 1), "hw": (6, 9), "act": "SWISH"},
    # strided 1x1 windows on 7x7 and 6x7 output planes (a shortcut; uneven strides, padding)
    {"c": 32, "o": 48, "k": (1, 1), "stride": (2, 2), "hw": (13, 14), "residual": True,
     "act": "RELU"},
    {"c": 16, "o": 16, "k": (1, 1), "stride": (2, 3), "pads": (1, 0, 0, 1), "hw": (12, 20)},
], ids=str)
def test_blocked_conv_cases_match_numpy(case, vector_width, restore_threads):
    """Convs of whole 16-channel blocks go by the blocked kernel (output-channel vectors):
    its tiles of 1-12 positions x 1-2 blocks, strides, dilation, padding rows skipped and
    padding columns read as zeros, every activation, residual, the reduction in chunks; with
    AVX-512 tiles where the CPU has it and the 8-float ones; the same bits on 1 and 3 cores,
    and numpy's values."""
    model, feeds = conv_model(rng(7), **case)
    program = check_native(model, feeds, "conv2d")
    assert stored_for(program) == "blocked"
    assert_cores_agree(program, feeds)


def test_blocked_conv_keeps_nans_and_infinities(restore_threads):
    """A NaN or an infinity in the input reaches the outputs whose windows hold it, through
    the epilogue's clamp (RELU6 keeps NaN, as numpy's clip does), as in numpy."""
    model, feeds = conv_model(rng(8), c=16, o=16, hw=(6, 7), pads=(1, 1, 1, 1), act="RELU6")
    feeds["x"][0, 3, 2, 2] = np.nan
    feeds["x"][0, 5, 4, 6] = np.inf
    program = check_native(model, feeds, "conv2d")
    assert stored_for(program) == "blocked"
    got, _ = run(program, feeds)
    assert np.isnan(got[0][0, :, 1:4, 1:4]).all() and not np.isnan(got[0][0, :, 5:, :]).any()


@st.composite
def pair_geometry(draw):
    """conv_geometry's convs with two or more full blocks of 8 output channels per group (what
    the 8-float width's channel-vector tiles take when the conv is direct), on planes whose
    position counts leave every remainder of a 6-position tile."""
    geometry = draw(conv_geometry())
    g = draw(st.integers(1, 2))
    k = (draw(st.integers(2, 5)), draw(st.integers(2, 5)))
    return {**geometry, "group": g, "c": g * draw(st.integers(4, 12)),
            "o": g * draw(st.sampled_from([16, 24, 32, 40])), "k": k,
            "stride": (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
            "hw": tuple((k[a] - 1) * geometry["dil"][a] + 1 + draw(st.integers(4, 16))
                        for a in (0, 1))}


@SETTINGS
@given(geometry=pair_geometry(), seed=st.integers(0, 2**16))
def test_direct_conv_pair_tiles_match_numpy(geometry, seed):
    """Convs of two or more blocks of 8 output channels (about half of them direct: the
    channel-vector tiles, with vectors of 8 floats forced) give numpy's values: last tiles of
    1-6 positions, 3x3 taps unrolled or any other kernel, strides, dilation, groups."""
    if native.library() is None:
        pytest.skip("the native library is not built")
    model, feeds = conv_model(rng(seed), **geometry)
    native.set_vector_width(8)
    try:
        program = check_native(model, feeds, "conv2d")
    finally:
        native.set_vector_width(0)
    assert program.steps[0].attrs.get("residual", False) == geometry["residual"]


def test_direct_weights_beyond_the_kernels_taps_stay_on_numpy():
    """A Program that says "direct" for a conv the direct kernel cannot hold (81 taps; the
    compiler never writes one, a hand-made or foreign file might) is not lowered to it: the
    numpy kernels run it, from the same stored weights, with the same values."""
    model, feeds = conv_model(rng(6), c=4, o=8, k=(9, 9), pads=(4, 4, 4, 4), hw=(12, 12))
    program = compile_for(model, feeds)
    step, want = program.steps[0], run(program, feeds, kernels=KERNELS)[0]
    assert "weights" not in step.attrs
    w, blob = program.slots[step.inputs[1]], program.weights.copy()
    stored = blob[w.offset:w.offset + w.nbytes].view(w.np_dtype).reshape(w.shape)
    stored[...] = conv_weights.direct_blocks(stored.copy())
    program = dataclasses.replace(program, weights=blob, steps=[
        dataclasses.replace(step, attrs={**step.attrs, "weights": "direct"})])
    assert native_steps.lower(program, 0) is None
    got, count = run(program, feeds)
    assert count == 0
    assert_close(got, want)


@pytest.mark.parametrize("case", [
    {"c": 8, "o": 8, "group": 8, "k": (3, 3), "pads": (1, 1, 1, 1), "residual": True},
    {"c": 4, "o": 8, "group": 4, "k": (3, 3), "pads": (1, 1, 1, 1), "residual": True, "act": "RELU"},
    {"c": 1, "o": 1, "k": (1, 1), "hw": (1, 1), "bias": False, "residual": True},  # 1 channel: c == group
], ids=str)
def test_depthwise_conv_with_residual_add(case):
    """The residual fused into a depthwise conv is added before the activation (a 1x1
    single-channel conv is depthwise too)."""
    check_native(*conv_model(rng(1), **case), "conv2d")


@pytest.mark.parametrize("k, stride, hw, op, direct", [
    ((1, 256), (1, 128), (1, 640), "conv", False),
    ((3, 3), (1, 1), (9, 9), "conv", True),
    ((7, 7), (2, 2), (40, 40), "conv", True),
    ((3, 3), (1, 1), (4, 4), "dwconv", False),
], ids=["stft frames", "3x3", "7x7/2", "3x3 to 2x2"])
def test_a_single_channel_conv_runs_direct_unless_its_kernel_is_long_or_its_plane_small(
        k, stride, hw, op, direct):
    """One input channel: the direct conv (a plane per output channel re-read the input per
    channel: 1x1x96x96 -> 16 7x7 497 -> 144 us, 1x1x48x320 -> 32 3x3 387 -> 298 us), a plane
    per output channel (dwconv) where the direct kernel would compute mostly padding, and a
    long window over few positions (an STFT's frames) is one GEMM (conv): 435 -> 49 us."""
    model, feeds = conv_model(rng(3), n=2, c=1, hw=hw, o=20, k=k, stride=stride)
    program = check_native(model, feeds, "conv2d")
    assert native_steps.lower(program, 0).op == native.OPS[op]
    assert (program.steps[0].attrs.get("weights") == "direct") == direct


@SETTINGS
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
       pads=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=4, max_size=4),
       mode=st.sampled_from(["CONSTANT", "REFLECT", "SYMMETRIC", "EDGE"]),
       dtype=st.sampled_from([np.float32, np.int8, np.int64]), value=st.floats(-3, 3),
       seed=st.integers(0, 2**16))
def test_pad_native_matches_numpy(shape, pads, mode, dtype, value, seed):
    """Every mode, pads longer than their axis, unpadded axes merged or folded into the
    element, integer constants."""
    pads = np.array(pads[:len(shape)], np.int32)
    x = (randn(rng(seed), *shape) * 10).astype(dtype)
    model = graph([("PadFusion", {"padding_mode": mode, "constant_value": value}, ["x", "p"], "y")],
                  {"x": (x, False), "p": (pads, True)}, ["y"])
    model.tensors[-1] = LiteTensor.of("y", x.dtype, ())
    program = check_native(model, {"x": x}, "pad")
    assert native_steps.lower(program, 0).op == native.OPS["pad"]


@pytest.mark.parametrize("base, exponent, kernel", [
    ((4, 129, 4), np.array(2.0, np.float32), "unary"),  # an STFT's power spectrum: a square
    ((3, 4), np.full((3, 4), 2.0, np.float32), "unary"),
    ((3, 1), np.full((1, 4), 2.0, np.float32), "binary"),  # the exponent broadcasts the base
    ((3, 4), np.array([2.0, 2.0, 2.0, 3.0], np.float32), "binary"),
], ids=["scalar 2", "all 2", "broadcasting 2", "not all 2"])
def test_pow_of_two_is_a_square(base, exponent, kernel):
    x = randn(rng(9), *base)
    model = graph([("PowFusion", {"scale": 1.0, "shift": 0.0}, ["x", "e"], "y")],
                  {"x": (x, False), "e": (exponent, True)}, ["y"])
    program = check_native(model, {"x": x}, kernel)
    if kernel == "unary":  # x * x, bit for bit
        got, _ = run(program, {"x": x})
        np.testing.assert_array_equal(got[0], x * x)


def pool_attrs(k, s, pads, ceil, include=None, op="MaxPoolFusion"):
    attrs = {"kernel_size": list(k), "strides": list(s), "pad": list(pads), "pad_mode": "PAD",
             "round_mode": "CEIL" if ceil else "FLOOR", "format": "NCHW", "global": False,
             "activation_type": "NO_ACTIVATION"}
    if op == "AvgPoolFusion":
        attrs["count_include_pad"] = bool(include)
    return attrs


@SETTINGS
@given(op=st.sampled_from(["MaxPoolFusion", "AvgPoolFusion"]), kh=st.integers(1, 4),
       kw=st.integers(1, 4), sh=st.integers(1, 3), sw=st.integers(1, 3),
       pads=st.lists(st.integers(0, 3), min_size=4, max_size=4), ceil=st.booleans(),
       include=st.booleans(), n=st.integers(1, 2), c=st.integers(1, 3),
       eh=st.integers(0, 6), ew=st.integers(0, 6), seed=st.integers(0, 2**16))
def test_pool_native_matches_numpy(op, kh, kw, sh, sw, pads, ceil, include, n, c, eh, ew, seed):
    k = (kh, kw)
    pads = [min(p, k[i // 2] - 1) for i, p in enumerate(pads)]  # pads < kernel, as ONNX
    x = randn(rng(seed), n, c, kh + eh, kw + ew)
    model = lite_graph(op, pool_attrs(k, (sh, sw), pads, ceil, include, op), [("x", x, False)])
    check_native(model, {"x": x}, "max_pool" if op == "MaxPoolFusion" else "avg_pool")


@pytest.mark.parametrize("op", ["MaxPoolFusion", "AvgPoolFusion"])
@pytest.mark.parametrize("k, s, pads, ceil, w", [
    ((3, 3), (2, 2), (1, 1, 1, 1), False, 20),  # strided: row by row
    ((2, 2), (2, 2), (0, 0, 0, 0), False, 20),  # 2x2/2: the pairs in one pass
    ((2, 2), (2, 2), (1, 1, 1, 1), True, 21),  # padded, and the last pair past the edge
    ((5, 5), (1, 1), (2, 2, 2, 2), False, 20),  # a detector's SPP pool: the flat passes
    ((3, 2), (1, 1), (1, 0, 1, 1), False, 90),  # either side of the cut-off (96 columns)
    ((3, 2), (1, 1), (1, 0, 1, 1), False, 100),
    ((3, 1), (1, 1), (0, 0, 0, 0), False, 8),  # one column per window: no horizontal pass
    ((1, 4), (1, 1), (0, 0, 1, 2), False, 8),  # one row: no vertical pass
    ((3, 3), (2**62, 1), (1, 1, 0, 0), False, 8),  # one output row: the stride is clamped
], ids=str)
def test_pool_on_small_and_wide_planes(op, k, s, pads, ceil, w):
    """The two ways a plane is pooled (flat passes over small planes at stride 1, row by
    row otherwise) against the numpy kernel."""
    x = randn(rng(w), 1, 3, 23, w)
    model = lite_graph(op, pool_attrs(k, s, pads, ceil, True, op), [("x", x, False)])
    check_native(model, {"x": x}, "max_pool" if op == "MaxPoolFusion" else "avg_pool")


@pytest.mark.parametrize("attrs", [pool_attrs((2, 2), (2, 2), (0, 0, 0, 0), False, None, "MaxPoolFusion"),
                                   pool_attrs((3, 3), (1, 1), (1, 1, 1, 1), False, None, "MaxPoolFusion"),
                                   {"global": True, "format": "NCHW", "activation_type": "RELU"}],
                         ids=["2x2/2", "3x3/1 padded", "global"])
def test_max_pool_keeps_a_nan_in_its_window(attrs):
    """A NaN in a window makes that window's max NaN, as numpy's maximum does (a C `>` fold
    would drop it depending on where it sits); every other window is unaffected. The kernel
    takes the hardware's max on planes without a NaN (channel 2) and the NaN-keeping one on
    the others: both give numpy's values."""
    x = randn(rng(6), 1, 3, 6, 6)
    x[0, 0, 1, 1] = x[0, 1, 0, 5] = np.nan  # channel 2 stays clean
    model = lite_graph("MaxPoolFusion", attrs, [("x", x, False)])
    program = check_native(model, {"x": x})
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    assert np.isnan(got[0]).any() and not np.isnan(got[0]).all()
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("op", ["MaxPoolFusion", "AvgPoolFusion"])
def test_pool_over_the_whole_plane_runs_as_a_global_pool(op):
    """A 7x7 window on a 7x7 plane (ResNet's and ShuffleNet's final pools) is a global pool:
    one reduction per plane instead of a windowed pass."""
    x = randn(rng(5), 2, 40, 7, 7)
    model = lite_graph(op, pool_attrs((7, 7), (1, 1), (0, 0, 0, 0), False, True, op), [("x", x, False)])
    program = check_native(model, {"x": x}, "max_pool" if op == "MaxPoolFusion" else "avg_pool")
    assert native_steps.lower(program, 0).op == native.OPS["global_pool"]


@pytest.mark.parametrize("op", ["MaxPoolFusion", "AvgPoolFusion"])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 5, 6), (1, 16, 7, 7), (1, 4, 1, 30)], ids=str)
@pytest.mark.parametrize("act", ACTS)
def test_global_pool_native_matches_numpy(op, shape, act):
    x = randn(rng(2), *shape) * 3
    model = lite_graph(op, {"global": True, "format": "NCHW", "activation_type": act}, [("x", x, False)])
    check_native(model, {"x": x}, "global_pool")


@SETTINGS
@given(data=st.data(), rank=st.integers(1, 4), count=st.integers(2, 4),
       dtype=st.sampled_from([np.float32, np.int32]), seed=st.integers(0, 2**16))
def test_concat_native_matches_numpy(data, rank, count, dtype, seed):
    axis = data.draw(st.integers(0, rank - 1))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    r = rng(seed)
    feeds = {}
    for i in range(count):
        s = list(shape)
        s[axis] = data.draw(st.integers(1, 4))
        feeds[f"x{i}"] = (randn(r, *s) * 100).astype(dtype)
    model = lite_graph("Concat", {"axis": data.draw(st.sampled_from([axis, axis - rank]))},
                       [(k, v, False) for k, v in feeds.items()], out_dtypes=(dtype,))
    check_native(model, feeds, "concat")


@SETTINGS
@given(data=st.data(), rank=st.integers(2, 5), dtype=st.sampled_from([np.float32, np.int32]),
       seed=st.integers(0, 2**16))
def test_transpose_native_matches_numpy(data, rank, dtype, seed):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    perm = data.draw(st.permutations(range(rank)))
    x = (randn(rng(seed), *shape) * 100).astype(dtype)
    model = lite_graph("Transpose", {}, [("x", x, False), ("perm", np.array(perm, np.int32), True)],
                       out_dtypes=(dtype,))
    check_native(model, {"x": x}, "transpose")


@pytest.mark.parametrize("shape,perm", [((2, 37, 21), (0, 2, 1)), ((2, 5, 6, 20), (0, 2, 3, 1)),
                                        ((40, 33), (1, 0)), ((3, 16, 2, 48), (2, 0, 3, 1))],
                         ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_transposes_of_the_contiguous_axis_run_in_blocks(shape, perm, dtype):
    """Transposes that bring the input's contiguous axis second-last (a matrix transpose per
    index of the axes before) go 16 x 16 at a time (layout.c, AVX-512): sizes that are not
    multiples of 16, a matrix of one block, 4-byte integers and NaN bit patterns come out as
    numpy's."""
    x = (randn(rng(40), *shape) * 100).astype(dtype)
    if dtype == np.float32:
        x.reshape(-1)[::7] = np.nan
    model = lite_graph("Transpose", {}, [("x", x, False), ("perm", np.array(perm, np.int32), True)],
                       out_dtypes=(dtype,))
    program = compile_for(model, {"x": x})
    got, count = run(program, {"x": x})
    assert count == 1
    np.testing.assert_array_equal(got[0].view(np.uint32), np.transpose(x, perm).view(np.uint32))


@SETTINGS
@given(m=st.integers(1, 9), k=st.integers(1, 40), n=st.integers(1, 12), bias=st.booleans(),
       act=st.sampled_from(ACTS), seed=st.integers(0, 2**16))
def test_full_connection_native_matches_numpy(m, k, n, bias, act, seed):
    r = rng(seed)
    x = randn(r, m, k)
    inputs = [("x", x, False), ("w", randn(r, n, k), True)]
    if bias:
        inputs.append(("b", randn(r, n), True))
    model = lite_graph("FullConnection", {"has_bias": bias, "use_axis": False, "activation_type": act},
                       inputs)
    check_native(model, {"x": x}, "matmul")


def test_full_connection_of_a_3d_input_native_matches_numpy():
    """FullConnection flattens the leading axes (a_shape/y_shape attrs): still one GEMM."""
    r = rng(15)
    x = randn(r, 2, 3, 10)
    model = lite_graph("FullConnection", {"has_bias": True, "use_axis": False,
                                          "activation_type": "RELU"},
                       [("x", x, False), ("w", randn(r, 7, 10), True), ("b", randn(r, 7), True)])
    check_native(model, {"x": x}, "matmul")


@SETTINGS
@given(m=st.integers(1, 9), k=st.integers(1, 40), n=st.integers(1, 12), tb=st.booleans(),
       const_b=st.booleans(), bias=st.booleans(), act=st.sampled_from(ACTS),
       seed=st.integers(0, 2**16))
def test_matmul_2d_native_matches_numpy(m, k, n, tb, const_b, bias, act, seed):
    r = rng(seed)
    feeds = {"a": randn(r, m, k)}
    b = randn(r, *((n, k) if tb else (k, n)))
    inputs = [("a", feeds["a"], False), ("b", b, const_b)]
    if not const_b:
        feeds["b"] = b
    if bias:
        inputs.append(("c", randn(r, n), True))
    model = lite_graph("MatMulFusion", {"transpose_a": False, "transpose_b": tb,
                                        "activation_type": act}, inputs)
    check_native(model, feeds, "matmul")


@SETTINGS
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       kind=st.sampled_from(["RELU", "RELU6", "NO_ACTIVATION", "HARD_TANH", "LEAKY_RELU"]),
       lo=st.floats(-3, 0), hi=st.floats(0, 3), alpha=st.floats(0, 1), seed=st.integers(0, 2**16))
def test_activation_native_matches_numpy(shape, kind, lo, hi, alpha, seed):
    x = randn(rng(seed), *shape) * 5
    attrs = {"activation_type": kind}
    if kind == "HARD_TANH":
        attrs.update(min_val=lo, max_val=hi)
    if kind == "LEAKY_RELU":
        attrs["alpha"] = alpha
    check_native(lite_graph("Activation", attrs, [("x", x, False)]), {"x": x}, "activation")


@SETTINGS
@given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=4), log=st.booleans(),
       negative_axis=st.booleans(), scale=st.sampled_from([0.1, 3.0, 50.0]),
       seed=st.integers(0, 2**16))
def test_softmax_native_matches_numpy(shape, log, negative_axis, scale, seed):
    x = randn(rng(seed), *shape) * scale
    op = "LogSoftmax" if log else "Softmax"
    axis = -1 if negative_axis else len(shape) - 1
    attrs = {"axis": axis} if log else {"axis": [axis]}
    check_native(lite_graph(op, attrs, [("x", x, False)]), {"x": x}, "softmax")


@pytest.mark.parametrize("length", [16, 37, 128, 2100])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_long_lines_and_special_values(op, length):
    """Lines of 16 and more take the vector path: whole vectors, a tail, more than one
    chunk of float partial sums (2100), rows in groups with a remainder (19 rows). Masked
    entries (-inf, -1e4) give exactly 0, a NaN makes its row NaN, as numpy's kernel does."""
    x = randn(rng(length), 19, length) * 8
    x[1, ::3] = -np.inf
    x[2, 5:] = -1e4
    x[3, length // 2] = np.nan
    x[4] = -np.inf
    x[4, length - 1] = 2.0
    attrs = {"axis": -1} if op == "LogSoftmax" else {"axis": [-1]}
    model = lite_graph(op, attrs, [("x", x, False)])
    check_native(model, {"x": x}, "softmax")
    if op == "Softmax":
        y = run(compile_for(model, {"x": x}), {"x": x})[0][0]
        assert (y[1, ::3] == 0).all() and (y[2, 5:] == 0).all() and (y[4, :-1] == 0).all()
        assert np.isnan(y[3]).all() and y[4, -1] == 1.0


def test_chain_of_native_steps_runs_as_one_segment():
    """conv -> pool -> transpose -> softmax: one native call, same values as numpy."""
    r = rng(3)
    x = randn(r, 1, 4, 10, 10)
    model = graph([
        ("Conv2DFusion", conv_attrs(4, 8, (3, 3), pads=(1, 1, 1, 1), act="RELU"), ["x", "w", "b"], "c"),
        ("MaxPoolFusion", pool_attrs((2, 2), (2, 2), (0, 0, 0, 0), False), ["c"], "p"),
        ("Transpose", {}, ["p", "perm"], "t"),
        ("Softmax", {"axis": [-1]}, ["t"], "y"),
    ], {"x": (x, False), "w": (randn(r, 8, 4, 3, 3), True), "b": (randn(r, 8), True),
        "perm": (np.array([0, 2, 3, 1], np.int32), True)}, ["y"])
    program = check_native(model, {"x": x})
    segments = native_steps.segments(program)
    assert len(segments) == 1 and segments[0].count == len(program.steps) == 4


# ---- 1b. channels-last tensors from a GEMM conv to depthwise convs ---------------------------


def marked(program: Program) -> list[str]:
    """Names of the tensors the native lowering stores channels last."""
    steps = [native_steps.lower(program, i) for i in range(len(program.steps))]
    return [program.slots[i].name for i in native_steps.channels_last(program, steps)]


def block_model(r, *, c=8, e=24, hw=(9, 9), stride=(1, 1), n=1, expand_k=(1, 1), expand_stride=(1, 1),
                expand_group=1, expand_act="RELU6", expand_bias=True, mult=1, also=(), dw_k=(3, 3),
                dw_pads=(1, 1, 1, 1), dw_dil=(1, 1)):
    """(model, feeds): conv "a" (1x1 expand unless expand_k; expand_act, a bias unless not
    expand_bias) -> depthwise "d" (dw_k, channel multiplier `mult`) -> 1x1 project "y". `also`
    adds readers of "a": "output" (a graph output), "add" (a + a, on numpy), "pool" (a native
    max pool), "dw2" (a second depthwise conv), each an output of its own, or "concat" (a
    concat of "d" and "a" times 1.5: the concat vanishes, a part of its output buffer)."""
    x = randn(r, n, c, *hw)
    pad = [k // 2 for k in expand_k for _ in (0, 1)]
    e_out, d_out = e, e * mult
    tensors = {"x": (x, False), "we": (randn(r, e_out, c // expand_group, *expand_k), True),
               "be": (randn(r, e_out), True), "wd": (randn(r, d_out, 1, *dw_k), True),
               "bd": (randn(r, d_out), True), "wp": (randn(r, 5, d_out, 1, 1), True),
               "bp": (randn(r, 5), True)}
    nodes = [
        ("Conv2DFusion", conv_attrs(c, e_out, expand_k, expand_stride, pads=pad, group=expand_group,
                                    act=expand_act), ["x", "we", "be"][:3 if expand_bias else 2], "a"),
        ("Conv2DFusion", conv_attrs(e_out, d_out, dw_k, stride, dw_dil, pads=dw_pads, group=e_out,
                                    act="RELU6"), ["a", "wd", "bd"], "d"),
        ("Conv2DFusion", conv_attrs(d_out, 5, (1, 1)), ["d", "wp", "bp"], "y"),
    ]
    outputs = ["y"]
    if "output" in also:
        outputs.append("a")
    if "add" in also:
        nodes.append(("AddFusion", {"activation_type": "NO_ACTIVATION"}, ["a", "a"], "a2"))
        outputs.append("a2")
    if "pool" in also:
        nodes.append(("MaxPoolFusion", pool_attrs((2, 2), (2, 2), (0, 0, 0, 0), False), ["a"], "p"))
        outputs.append("p")
    if "dw2" in also:
        tensors["wd2"] = (randn(r, d_out, 1, 3, 3), True)
        nodes.append(("Conv2DFusion", conv_attrs(e_out, d_out, (3, 3), stride, pads=(1, 1, 1, 1),
                                                 group=e_out), ["a", "wd2"], "d2"))
        outputs.append("d2")
    if "concat" in also:
        tensors["s"] = (np.array(1.5, np.float32), True)
        nodes.append(("Concat", {"axis": 1}, ["d", "a"], "cat"))
        nodes.append(("MulFusion", {"activation_type": "NO_ACTIVATION"}, ["cat", "s"], "m"))
        outputs.append("m")
    return graph(nodes, tensors, outputs), {"x": x}


@pytest.mark.parametrize("case", [
    {},
    {"hw": (32, 32)},                      # 1024 output pixels: a plane size that is planar otherwise
    {"hw": (32, 31), "stride": (2, 2)},
    {"e": 20, "hw": (7, 7), "n": 2},       # a last channel block of 4, two images
    # the 1x1 conv on rowgemm's tiles (>= 64 pixels): three panels of W^T, the last of 4
    # columns; K = 20 (a partial block of the packing's transposes), two images; the bias and
    # a clamp or hard swish in the tiles' stores, or no bias, or an activation the rows get
    # after (81 pixels: a last tile of one row)
    {"c": 20, "e": 100, "hw": (10, 9), "n": 2},
    {"c": 20, "e": 100, "hw": (10, 9), "expand_act": "NO_ACTIVATION", "expand_bias": False},
    {"c": 20, "e": 100, "hw": (9, 9), "expand_act": "HSWISH"},
    {"c": 20, "e": 100, "hw": (9, 9), "expand_act": "SWISH"},
    {"expand_group": 2, "c": 8, "e": 32},  # a grouped 1x1 producer
    {"expand_k": (3, 3), "expand_stride": (2, 2), "c": 3, "e": 16, "hw": (17, 17)},  # an im2col stem
    {"also": ("dw2",)},                    # two depthwise readers
    # whole blocks of 16 channels read in place, the pixels whose windows reach the padding
    # checked tap by tap: the top / left, the bottom / right, every side, no window inside
    {"e": 32, "hw": (16, 16), "stride": (2, 2), "dw_pads": (1, 0, 1, 0)},
    {"e": 32, "hw": (15, 14), "stride": (2, 2), "dw_pads": (0, 1, 0, 1)},
    {"e": 48, "hw": (12, 11), "dw_k": (5, 5), "dw_pads": (2, 2, 2, 2), "dw_dil": (1, 2)},
    {"e": 32, "hw": (13, 12), "dw_k": (3, 5), "dw_pads": (2, 1, 2, 1), "dw_dil": (2, 1)},
    {"e": 16, "hw": (4, 5), "dw_k": (5, 5), "dw_pads": (2, 2, 2, 2), "n": 2},
    {"e": 16, "hw": (6, 6), "dw_pads": (3, 0, 0, 3)},  # a row and a column of padding alone
], ids=str)
def test_gemm_to_depthwise_tensor_is_channels_last(case, vector_width):
    """The tensor a GEMM conv passes to depthwise convs only is stored channels last (no
    transposes), and the results are numpy's, with either vector width."""
    program = check_native(*block_model(rng(7), **case))
    assert marked(program) == ["a"]


@pytest.mark.parametrize("case", [
    {"also": ("output",)},                 # the caller reads it
    {"also": ("add",)},                    # a numpy step reads it
    {"also": ("pool",)},                   # a native step other than a depthwise conv reads it
    {"mult": 2},                           # a depthwise conv with 2 outputs per channel
    {"expand_k": (3, 3), "c": 32, "e": 16, "hw": (28, 28)},  # a direct conv writes it
    # a part of an elided concat, read (through the concat's buffer) after its last reader:
    # stored channels last, its part of the product came out transposed (tests/fuzz_ops.py)
    {"also": ("concat",)},
], ids=str)
def test_tensor_stays_planar_unless_every_reader_takes_channels_last(case):
    model, feeds = block_model(rng(8), **case)
    program = compile_for(model, feeds)
    assert marked(program) == []
    assert_close(run(program, feeds)[0], run(program, feeds, kernels=KERNELS)[0])


# ---- 2. steps that stay on numpy -----------------------------------------------------------


def test_fp16_program_stays_on_numpy():
    model, feeds = conv_model(rng(4), c=4, o=8, pads=(1, 1, 1, 1), act="RELU")
    program = compile_for(model, feeds, fp16=True)
    assert any(s.kernel == "conv2d" for s in program.steps)
    assert all(native_steps.lower(program, i) is None for i in range(len(program.steps)))
    got, count = run(program, feeds)
    want, _ = run(program, feeds, kernels=KERNELS)
    assert count == 0
    assert_close(got, want)


def test_conv_with_sign_stays_on_numpy_and_the_pool_after_it_does_not():
    r = rng(5)
    x = randn(r, 1, 4, 8, 8)
    model = graph([
        ("Conv2DFusion", conv_attrs(4, 6, (3, 3), pads=(1, 1, 1, 1), act="SIGN"), ["x", "w", "b"], "c"),
        ("MaxPoolFusion", pool_attrs((2, 2), (2, 2), (0, 0, 0, 0), False), ["c"], "y"),
    ], {"x": (x, False), "w": (randn(r, 6, 4, 3, 3), True), "b": (randn(r, 6), True)}, ["y"])
    program = compile_for(model, {"x": x})
    kinds = [s.kernel for s in program.steps]
    assert kinds == ["conv2d", "max_pool"], kinds
    assert program.steps[0].attrs["activation"] == "SIGN"
    assert native_steps.lower(program, 0) is None and native_steps.lower(program, 1) is not None
    got, count = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    assert count == 1
    assert_close(got, want)


@pytest.mark.parametrize("act", ["SIGMOID", "SWISH", "TANH", "SOFTPLUS", "SOFTSIGN", "ABS", "GELU"])
@pytest.mark.parametrize("case", [
    {"c": 8, "o": 13, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (9, 9)},  # direct
    {"c": 8, "o": 13, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (9, 9), "residual": True},
    {"c": 16, "o": 1, "k": (1, 1), "hw": (12, 12)},  # a detector's objectness head: GEMM
    {"c": 3, "o": 16, "k": (7, 7), "stride": (2, 2), "pads": (3, 3, 3, 3), "hw": (24, 24)},
    {"c": 20, "o": 20, "group": 20, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (8, 8),
     "residual": True},  # depthwise, channels-last blocks
    {"c": 4, "o": 4, "group": 4, "k": (3, 3), "pads": (1, 1, 1, 1), "hw": (20, 20)},  # planes
], ids=str)
def test_conv_with_an_epilogue_activation_runs_natively(case, act):
    """These activations are in the conv kernels' shared epilogue, on every conv path."""
    check_native(*conv_model(rng(7), act=act, **case), "conv2d")


@pytest.mark.parametrize("act", ["SIGMOID", "SWISH", "HSWISH", "TANH", "GELU"])
@pytest.mark.parametrize("a_shape, b_shape, const_b", [
    ((40, 24), (24, 130), True),       # OpenBLAS by blocks of columns
    ((2, 3, 24), (24, 30), True),      # few rows (rowgemm.c on AVX-512), bias below
    ((3, 5, 24), (3, 24, 7), False),   # a batched product of two activations (bmatmul)
], ids=str)
def test_matmul_with_an_epilogue_activation_runs_natively(a_shape, b_shape, const_b, act):
    """The fused activation goes to the shared epilogue on every GEMM path (it sent the
    whole matmul to the numpy kernels: a transformer's MatMul + Sigmoid/Swish)."""
    r = rng(33)
    a, b = randn(r, *a_shape) * 2, randn(r, *b_shape)
    inputs = [("a", a, False), ("b", b, const_b)]
    if const_b:
        inputs.append(("c", randn(r, b_shape[-1]), True))
    feeds = {"a": a} if const_b else {"a": a, "b": b}
    check_native(lite_graph("MatMulFusion", {"activation_type": act}, inputs), feeds, "matmul")


@pytest.mark.parametrize("approximate", [False, True])
def test_exact_gelu_fuses_into_the_gemm_before_it(approximate):
    """A feed-forward layer's MatMul (bias fused) and exact GELU run as one native step, the
    GELU in the GEMM's epilogue; the tanh form has no fused form and stays a step of its own."""
    r = rng(34)
    a = randn(r, 2, 40, 24) * 2
    model = graph([
        ("MatMulFusion", {"activation_type": "NO_ACTIVATION"}, ["a", "w", "c"], "m"),
        ("Activation", {"activation_type": "GELU", "approximate": approximate}, ["m"], "y"),
    ], {"a": (a, False), "w": (randn(r, 24, 130), True), "c": (randn(r, 130), True)}, ["y"])
    program = check_native(model, {"a": a})
    assert [s.kernel for s in program.steps] == ["matmul", "activation"][:1 + approximate]
    if not approximate:
        assert program.steps[0].attrs["activation"] == "GELU"


@pytest.mark.parametrize("op", ["MaxPoolFusion", "AvgPoolFusion"])
@pytest.mark.parametrize("window", [(3, 3), (10, 10)], ids=["windows", "whole plane"])
def test_pool_with_a_fused_sigmoid_runs_natively(op, window):
    """An activation without a clamp form fused into a pool is the window kernels' epilogue
    (the pool's lowering asked for clamp forms only and sent the step to numpy); a window
    over the whole plane runs as the global pool."""
    r = rng(35)
    x = randn(r, 1, 4, 10, 10) * 3
    pads = (1, 1, 1, 1) if window == (3, 3) else (0, 0, 0, 0)
    model = graph([(op, pool_attrs(window, (2, 2), pads, False, False, op), ["x"], "p"),
                   ("Activation", {"activation_type": "SIGMOID"}, ["p"], "y")],
                  {"x": (x, False)}, ["y"])
    program = check_native(model, {"x": x})
    assert len(program.steps) == 1 and program.steps[0].attrs["activation"] == "SIGMOID"


@pytest.mark.parametrize("act", ["SIGMOID", "SWISH", "RELU"])
@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (1,)),
                                             ((1,), (2, 5)), ((3, 1), (1, 6))], ids=str)
def test_binary_with_a_fused_activation_runs_natively(a_shape, b_shape, act):
    r = rng(8)
    a, b = randn(r, *a_shape) * 4, randn(r, *b_shape) * 4
    a.reshape(-1)[0] = np.nan
    _native_matches_numpy(lite_graph("MulFusion", {"activation_type": act},
                                     [("a", a, False), ("b", b, False)]), {"a": a, "b": b})


@pytest.mark.parametrize("bounds", [(0.0, 1.0), (None, 6.0), (-1.5, None), (None, None),
                                    (2.0, -2.0), (np.nan, 0.5)], ids=str)
def test_clip_runs_natively(bounds):
    """Absent and NaN bounds leave that side open; min > max gives max, as numpy's clip."""
    x = np.concatenate([SPECIAL, randn(rng(9), 100) * 3]).reshape(4, 29)
    consts = [(name, np.array(v, F32), True) for name, v in zip(("lo", "hi"), bounds, strict=True)
              if v is not None]
    if bounds[0] is None and bounds[1] is not None:  # an absent min before a given max
        consts.insert(0, ("lo", np.array(np.nan, F32), True))
    _native_matches_numpy(lite_graph("Clip", {}, [("x", x, False), *consts]), {"x": x})


def deconv_model(r, *, n=1, c=4, o=6, hw=(5, 4), k=(2, 2), stride=(2, 2), dil=(1, 1),
                 pads=(0, 0, 0, 0), out_pad=(0, 0), group=1, bias=True, act="NO_ACTIVATION"):
    """(model, feeds) of a transposed conv; pads (top, bottom, left, right)."""
    x = randn(r, n, c, *hw)
    tensors = {"x": (x, False), "w": (randn(r, c, o // group, *k), True)}
    if bias:
        tensors["b"] = (randn(r, o), True)
    attrs = {"format": "NCHW", "kernel_size": list(k), "stride": list(stride),
             "dilation": list(dil), "group": group, "pad_mode": "PAD", "pad_list": list(pads),
             "output_paddings": list(out_pad), "activation_type": act}
    return graph([("Conv2dTransposeFusion", attrs, list(tensors), "y")], tensors, ["y"]), {"x": x}


@pytest.mark.parametrize("case", [
    {},  # kernel = stride: a segmentation head's upsampling, taps that never overlap
    {"n": 2, "c": 24, "o": 24, "hw": (10, 12), "act": "SIGMOID"},
    {"k": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1), "out_pad": (1, 1), "act": "RELU"},
    {"k": (3, 3), "stride": (1, 1), "dil": (2, 2), "bias": False},
    {"k": (3, 2), "stride": (3, 2), "group": 2, "pads": (0, 1, 1, 0)},
    {"c": 64, "o": 32, "k": (4, 4), "hw": (16, 16)},  # GEMM rows split over the cores
], ids=str)
def test_conv_transpose_runs_natively(case):
    check_native(*deconv_model(rng(10), **case), "deconv2d")


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 9), (3, 6)], ids=str)
def test_batch_norm_runs_natively_as_a_one_tap_depthwise_conv(shape):
    r = rng(11)
    x = randn(r, *shape)
    c = shape[1]
    stats = [("scale", randn(r, c), True), ("bias", randn(r, c), True),
             ("mean", randn(r, c), True), ("var", np.abs(randn(r, c)) + 0.1, True)]
    program = compile_for(lite_graph("FusedBatchNorm", {"epsilon": 1e-5}, [("x", x, False), *stats]),
                          {"x": x})
    assert [s.kernel for s in program.steps] == ["scale_shift"]
    _native_matches_numpy(lite_graph("FusedBatchNorm", {"epsilon": 1e-5}, [("x", x, False), *stats]),
                          {"x": x})


def test_batch_norm_after_an_activation_runs_natively_in_place():
    r = rng(12)
    x = randn(r, 2, 5, 6, 6)
    stats = {name: (v, True) for name, v in (("scale", randn(r, 5)), ("bias", randn(r, 5)),
                                              ("mean", randn(r, 5)), ("var", np.abs(randn(r, 5)) + 0.1))}
    model = graph([("Activation", {"activation_type": "TANH"}, ["x"], "a"),
                   ("FusedBatchNorm", {"epsilon": 1e-5}, ["a", *stats], "b"),
                   ("Activation", {"activation_type": "TANH"}, ["b"], "y")],
                  {"x": (x, False), **stats}, ["y"])
    program = check_native(model, {"x": x})
    bn = program.steps[1]
    assert program.slots[bn.inputs[0]].offset == program.slots[bn.outputs[0]].offset  # in place


def test_standalone_sigmoid_runs_natively():
    x = randn(rng(6), 3, 20)
    program = compile_for(lite_graph("Activation", {"activation_type": "SIGMOID"}, [("x", x, False)]),
                          {"x": x})
    got, count = run(program, {"x": x})
    assert count == 1
    assert_close(got, run(program, {"x": x}, kernels=KERNELS)[0])


@pytest.mark.parametrize("a_shape,b_shape,const_b", [((2, 4, 5), (5, 3), True),
                                                      ((3, 4, 5), (3, 5, 2), False),
                                                      ((2, 1, 4, 5), (3, 5, 2), False),
                                                      ((4, 5), (2, 3, 5, 6), False)], ids=str)
def test_batched_matmul_runs_natively(a_shape, b_shape, const_b):
    r = rng(7)
    feeds = {"a": randn(r, *a_shape)}
    b = randn(r, *b_shape)
    if not const_b:
        feeds["b"] = b
    model = lite_graph("MatMulFusion", {"transpose_a": False, "transpose_b": False},
                       [("a", feeds["a"], False), ("b", b, const_b)])
    program = compile_for(model, feeds)
    assert [s.kernel for s in program.steps] == ["matmul"]
    got, count = run(program, feeds)
    assert count == 1
    assert_close(got, run(program, feeds, kernels=KERNELS)[0])


def test_transposed_a_matmul_stays_on_numpy():
    r = rng(8)
    feeds = {"a": randn(r, 6, 4), "b": randn(r, 6, 5)}
    model = lite_graph("MatMulFusion", {"transpose_a": True, "transpose_b": False},
                       [("a", feeds["a"], False), ("b", feeds["b"], False)])
    program = compile_for(model, feeds)
    got, count = run(program, feeds)
    assert count == 0
    assert_close(got, run(program, feeds, kernels=KERNELS)[0])


@pytest.mark.parametrize("op,axis", [("Softmax", [1]), ("Softmax", [0]), ("LogSoftmax", 1),
                                     ("Softmax", [2])])
def test_softmax_over_any_axis_runs_natively(op, axis):
    x = randn(rng(9), 3, 5, 4) * 5
    program = compile_for(lite_graph(op, {"axis": axis}, [("x", x, False)]), {"x": x})
    got, count = run(program, {"x": x})
    assert count == 1
    assert_close(got, run(program, {"x": x}, kernels=KERNELS)[0])


# ---- 3./4. threads ---------------------------------------------------------------------------


@pytest.fixture
def restore_threads():
    before = native.threads()
    yield
    native.set_threads(before)


def mid_conv(seed: int = 10, **kw):
    case = {"c": 32, "o": 64, "hw": (28, 28), "pads": (1, 1, 1, 1), "act": "RELU", **kw}
    model, feeds = conv_model(rng(seed), **case)
    return compile_for(model, feeds), feeds


@pytest.mark.parametrize("kw", [{}, {"group": 32, "o": 64}, {"k": (1, 1), "pads": (0, 0, 0, 0)},
                                {"stride": (2, 2), "n": 2}, {"o": 24},
                                {"c": 24, "o": 24, "hw": (104, 104)},
                                {"c": 128, "o": 200, "hw": (12, 12), "k": (1, 1),
                                 "pads": (0, 0, 0, 0)}], ids=str)
def test_thread_count_does_not_change_the_result(kw, restore_threads):
    """Same values on 1, 2 and 3 cores. The GEMM convs split their output into other blocks
    per core count and OpenBLAS sums a block's edge in another order (1-ulp differences), so
    they agree to rounding; depthwise planes are computed whole by one core: bit-identical.
    Direct convs whose channel blocks do not divide among the cores are cut in bands of
    positions too (24 channels: 3 blocks), banded ones (104x104) in whole rounds of bands;
    a 1x1 conv with more output channels than positions in blocks of output channels (200
    rows: 100 or 67 a core).
    Each count runs in a new device pool: an output no task wrote reads 0 there instead of
    an earlier run's value."""
    program, feeds = mid_conv(**kw)
    x = [feeds[program.slots[i].name] for i in program.inputs]
    results = {}
    for n in (1, 3, 2):
        native.set_threads(n)
        assert native.threads() == n
        with Executor(program, DevicePool()) as ex:
            assert ex.native_steps == len(program.steps)
            results[n] = [np.array(ex.run(x)[0])]
            np.testing.assert_array_equal(ex.run(x)[0], results[n][0])  # deterministic per count
    for n in (2, 3):
        if "group" in kw:
            np.testing.assert_array_equal(results[n][0], results[1][0])
        else:
            assert_close(results[n], results[1])
    assert_close(results[3], run(program, feeds, kernels=KERNELS)[0])


def test_work_is_split_over_the_cores_and_a_run_can_be_limited(restore_threads):
    """A big conv hands tasks to the worker cores; an executor or a run limited to one core
    (`cores=1`, the npu_threads option or a low_power run) keeps every task on the calling
    thread."""
    program, feeds = mid_conv(c=64, o=128, hw=(56, 56))
    native.set_threads(2)
    x = [feeds[program.slots[i].name] for i in program.inputs]
    with Executor(program) as ex, Executor(program, cores=1) as one:
        before = native.worker_tasks()
        run_until_a_worker_helps(lambda: ex.run(x), before)
        assert native.worker_tasks() > before
        before = native.worker_tasks()
        np.testing.assert_array_equal(one.run(x)[0], one.run(x)[0])
        np.testing.assert_array_equal(ex.run(x, cores=1)[0], one.run(x)[0])  # one run's limit
        assert native.worker_tasks() == before
        with pytest.raises(ValueError, match="cores"):
            ex.run(x, cores=-1)
    with pytest.raises(ValueError, match="cores"):
        Executor(program, cores=-1)


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two CPUs")
def test_a_thread_on_its_callers_cpu_moves_off_it():
    """The scheduler may wake a worker core on its caller's CPU, where the two would share
    one core; at each job a worker on the caller's CPU moves to another CPU it may use
    (lnpu_leave_cpu, checked here on this thread), keeping its affinity, and is counted."""
    lib, mask = native.library(), os.sched_getaffinity(0)
    here = sorted(mask)[0]
    try:
        os.sched_setaffinity(0, {here})
        os.sched_setaffinity(0, mask)  # on `here`, free to leave it
        assert os.sched_getaffinity(0) == mask
        moves = native.worker_moves()
        assert lib.lnpu_leave_cpu(here) == 1
        with open("/proc/thread-self/stat") as f:
            assert int(f.read().rsplit(")", 1)[1].split()[36]) != here
        assert os.sched_getaffinity(0) == mask and native.worker_moves() == moves + 1
        assert lib.lnpu_leave_cpu(here) == 0  # not on it any more: stays
        os.sched_setaffinity(0, {here})
        assert lib.lnpu_leave_cpu(here) == 0  # nowhere else to go
    finally:
        os.sched_setaffinity(0, mask)


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs Linux and two CPUs")
def test_a_sleeping_worker_is_woken_off_its_callers_cpu(restore_threads):
    """A run after an idle spell wakes the sleeping worker core with its caller's CPU kept
    out of its mask (else it may queue behind the caller for a whole time slice), and the
    worker, once awake, has its own mask back (threads of other libraries may have theirs)."""
    program, feeds = mid_conv(c=64, o=128, hw=(56, 56))
    native.set_threads(2)
    mask = os.sched_getaffinity(0)

    def masks() -> set[str]:
        """The threads whose CPU mask is not the process's."""
        odd = set()
        for t in os.listdir("/proc/self/task"):
            with contextlib.suppress(ProcessLookupError):  # a thread that just ended
                if os.sched_getaffinity(int(t)) != mask:
                    odd.add(t)
        return odd
    x = [feeds[program.slots[i].name] for i in program.inputs]
    with Executor(program) as ex:
        want = np.array(ex.run(x)[0])
        others = masks()
        steers, deadline = native.worker_steers(), time.monotonic() + 10
        while native.worker_steers() == steers and time.monotonic() < deadline:
            time.sleep(0.02)  # the worker spins for half a millisecond, then sleeps
            np.testing.assert_array_equal(ex.run(x)[0], want)
        assert native.worker_steers() > steers
        while not masks() <= others and time.monotonic() < deadline:
            time.sleep(0.01)
        assert masks() <= others


@pytest.mark.parametrize("kind, attrs", [("RELU", {}), ("HARD_TANH", {"min_val": -1.0, "max_val": 2.0}),
                                         ("LEAKY_RELU", {"alpha": 0.1})], ids=str)
def test_activation_over_the_cores_gives_one_cores_result(restore_threads, kind, attrs):
    """A long activation runs in blocks over the cores (30,021 floats: blocks of whole
    vectors, the last one short); every block sees its own part, so 1 and 3 cores agree with
    each other and with numpy."""
    x = randn(rng(12), 3, 10007) * 5
    program = compile_for(lite_graph("Activation", {"activation_type": kind, **attrs},
                                     [("x", x, False)]), {"x": x})
    assert native_steps.lower(program, 0).op == native.OPS["activation"]
    assert_cores_agree(program, {"x": x})


def test_pool_thread_count_does_not_change_the_result(restore_threads):
    x = randn(rng(11), 2, 32, 30, 30)
    for op in ("MaxPoolFusion", "AvgPoolFusion"):
        program = compile_for(lite_graph(op, pool_attrs((3, 3), (2, 2), (1, 1, 1, 1), True, True, op),
                                         [("x", x, False)]), {"x": x})
        assert_cores_agree(program, {"x": x})


def assert_cores_agree(program: Program, feeds: dict) -> None:
    """The native run on 1 and on 3 cores gives the same bits, and numpy's values."""
    native.set_threads(1)
    one, _ = run(program, feeds)
    native.set_threads(3)
    three, _ = run(program, feeds)
    np.testing.assert_array_equal(one[0], three[0])
    assert_close(three, run(program, feeds, kernels=KERNELS)[0])


def test_set_threads_rejects_non_positive_counts():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            native.set_threads(bad)
    assert 1 <= native.default_threads() <= 8


def test_concurrent_executors_agree_with_a_single_thread(restore_threads):
    native.set_threads(2)
    program, feeds = mid_conv()
    want, _ = run(program, feeds)

    def worker(i: int) -> None:
        with Executor(program, pool()) as ex:
            assert ex.native_steps == 1
            for _ in range(20):
                got = ex.run([feeds["x"]])
                np.testing.assert_array_equal(got[0], want[0])

    run_threads(worker, 4)


# ---- 5. LITENPU_NATIVE=0 ---------------------------------------------------------------------

FALLBACK = """
import numpy as np
from npu_oracle import lite_graph, pool, rng
from provider.npu import native
from provider.npu.compiler import compile_model
from provider.npu.executor import Executor, step_stamps
from provider.npu.ops import KERNELS
assert native.library() is None and native.threads() == 1
r = rng(12)
x = r.standard_normal((1, 4, 9, 9)).astype(np.float32)
w = r.standard_normal((8, 4, 3, 3)).astype(np.float32)
model = lite_graph("Conv2DFusion", {
    "format": "NCHW", "kernel_size": [3, 3], "stride": [1, 1], "dilation": [1, 1], "group": 1,
    "pad_mode": "PAD", "pad_list": [1, 1, 1, 1], "in_channel": 4, "out_channel": 8,
    "activation_type": "RELU"}, [("x", x, False), ("w", w, True)])
program = compile_model(model, {"x": x.shape})
with Executor(program, pool()) as ex, Executor(program, pool(), kernels=KERNELS) as ref:
    assert ex.native_steps == 0, ex.native_steps
    np.testing.assert_array_equal(ex.run([x])[0], ref.run([x])[0])
print("ok")
"""


def test_litenpu_native_0_runs_everything_on_numpy():
    path = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "LITENPU_NATIVE": "0", "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(FALLBACK)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


BLAS_CORE = """
import os
from provider.npu import native
print(native.blas_core(), os.environ.get("OPENBLAS_CORETYPE"))
"""


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"), reason="x86 core names")
@pytest.mark.parametrize("ours, forced", [(None, False), ("Prescott", True)])
def test_the_npus_blas_picks_its_own_kernel_unless_told(ours, forced, tmp_path):
    """OPENBLAS_CORETYPE, set for another OpenBLAS in the process, does not hold the NPU's
    to an old kernel (nor is it changed for the others); LITENPU_OPENBLAS_CORETYPE does.
    (The child imports the same, built, provider package as this process.)"""
    home = str(Path(native.__file__).resolve().parents[2])
    env = {**os.environ, "OPENBLAS_CORETYPE": "Prescott", "PYTHONPATH": home}
    env.pop("LITENPU_OPENBLAS_CORETYPE", None)
    if ours:
        env["LITENPU_OPENBLAS_CORETYPE"] = ours
    done = subprocess.run([sys.executable, "-c", BLAS_CORE], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    core, left = done.stdout.split()
    assert (core == "Katmai") == forced, core  # OpenBLAS's name for its Prescott kernels
    assert left == "Prescott"


# ---- 6. fork ---------------------------------------------------------------------------------


def _child(program: Program, x: np.ndarray, want: np.ndarray) -> None:
    """Exits 0 only when the forked child's native runs give the parent's result."""
    try:
        assert native.threads() >= 2
        for n in (native.threads(), 3):  # the parent's count (same blocking: exact), then 3
            native.set_threads(n)
            with Executor(program, pool()) as ex:
                assert ex.native_steps == 1
                for _ in range(3):
                    got = ex.run([x])[0]
                    if not (np.array_equal(got, want) if n == 2 else
                            np.allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())):
                        os._exit(2)
    except BaseException:
        os._exit(3)
    os._exit(0)


@pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork.*:DeprecationWarning")
def test_fork_after_native_threads_ran(restore_threads):
    native.set_threads(2)
    program, feeds = mid_conv(13)
    want, count = run(program, feeds)  # the pool's worker threads now exist
    assert count == 1
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_child, args=(program, feeds["x"], want[0]))
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail("the forked child hung running native steps")
    assert child.exitcode == 0
    assert_close(run(program, feeds)[0], want)  # the parent's pool still works


# ---- 7. profile ------------------------------------------------------------------------------


def test_profile_times_every_native_step():
    r = rng(14)
    x = randn(r, 1, 8, 16, 16)
    model = graph([
        ("Conv2DFusion", conv_attrs(8, 8, (3, 3), pads=(1, 1, 1, 1), act="RELU6"), ["x", "w", "b"], "c"),
        ("AvgPoolFusion", pool_attrs((2, 2), (2, 2), (0, 0, 0, 0), False, False, "AvgPoolFusion"),
         ["c"], "p"),
        ("Activation", {"activation_type": "SIGN"}, ["p"], "s"),  # numpy's: one Python step
        ("Softmax", {"axis": [-1]}, ["s"], "y"),
    ], {"x": (x, False), "w": (randn(r, 8, 8, 3, 3), True), "b": (randn(r, 8), True)}, ["y"])
    program = compile_for(model, {"x": x})
    stamps = step_stamps(program)
    with Executor(program, pool()) as ex:
        plain = ex.run([x])[0].copy()
        for _ in range(3):
            start = time.monotonic_ns()
            np.testing.assert_array_equal(ex.run([x], stamps=stamps)[0], plain)
            end = time.monotonic_ns()
            # one clock for C and Python: every step inside the run, in order, none empty
            assert start <= stamps[0, 0] and stamps[-1, 1] <= end
            assert (stamps[:, 1] > stamps[:, 0]).all(), stamps
            assert (stamps[1:, 0] >= stamps[:-1, 1]).all(), stamps
        assert ex.native_steps == len(program.steps) - 1
        with pytest.raises(ValueError, match="stamps must be step_stamps"):
            ex.run([x], stamps=np.zeros((len(program.steps), 2)))
    natives = [i for i in range(len(program.steps)) if native_steps.lower(program, i) is not None]
    assert len(natives) == ex.native_steps


# ---- the steps of real models: elementwise, layer norm, recurrent layers -------------------


def _native_matches_numpy(model: LiteModel, feeds: dict, native_steps: int = 1) -> None:
    program = compile_for(model, feeds)
    got, count = run(program, feeds)
    assert count == native_steps
    assert_close(got, run(program, feeds, kernels=KERNELS)[0])


SPECIAL = np.array([0.0, -0.0, 1e-8, -3e-4, 0.19, -0.21, 1.0, -2.5, 9.0, -15.0, 40.0, -90.0,
                    100.0, np.inf, -np.inf, np.nan], np.float32)


@pytest.mark.parametrize("op", ["Sqrt", "Erf", "Neg", "Abs", "Reciprocal", "Floor", "Ceil",
                                "Round", "Square", "ExpFusion"])
def test_unary_math_runs_natively_like_numpy(op):
    ties = np.arange(-5.5, 5.0, 0.5, dtype=np.float32)  # Round: half to even
    x = np.concatenate([SPECIAL, ties, randn(rng(20), 195) * 3]).reshape(8, 29)
    with np.errstate(invalid="ignore", divide="ignore"):
        _native_matches_numpy(lite_graph(op, {}, [("x", x, False)]), {"x": x})


@pytest.mark.parametrize("kind,attrs", [("SIGMOID", {}), ("TANH", {}), ("SWISH", {}),
                                        ("HSWISH", {}), ("GELU", {}),
                                        ("GELU", {"approximate": True}),
                                        ("HSIGMOID", {}), ("HSIGMOID", {"alpha": 0.3}),
                                        ("SOFTPLUS", {}), ("SOFTSIGN", {}), ("ABS", {}),
                                        ("ELU", {"alpha": 1.0}), ("ELU", {"alpha": 0.3}),
                                        ("ELU", {"alpha": np.nan}),
                                        ("THRESHOLDRELU", {"alpha": 0.7}),
                                        ("THRESHOLDRELU", {"alpha": -2.5})], ids=str)
def test_activations_without_a_clamp_form_run_natively(kind, attrs):
    """Special values (signed zeros, tiny, huge, infinities, NaN) and a spread; ELU near 0
    (where e^x - 1 cancels) and with a NaN alpha (the negative elements alone NaN)."""
    near_zero = np.array([-1e-7, -3e-5, -0.01, -0.49, -0.51, 1e-6], np.float32)
    x = np.concatenate([SPECIAL, near_zero, randn(rng(21), 294) * 4]).reshape(4, 79)
    _native_matches_numpy(lite_graph("Activation", {"activation_type": kind, **attrs},
                                     [("x", x, False)]), {"x": x})


@pytest.mark.parametrize("kind, x, want", [
    # ELU's e^x - 1 where it cancels (|x| < 0.5) and past it
    ("ELU", -np.logspace(-7, 0.5, 60), lambda x: np.expm1(x)),
    # softplus' log1p of tiny e^x, down to float32's normal range
    ("SOFTPLUS", -np.linspace(0.0, 80.0, 60), lambda x: np.log1p(np.exp(x))),
    # GELU's x (1 + erf(x / sqrt 2)) / 2 for negative x, where 1 + erf cancels
    ("GELU", -np.linspace(0.0, 12.0, 60),
     lambda x: 0.5 * x * np.vectorize(math.erfc)(-x / math.sqrt(2))),
], ids=["ELU", "SOFTPLUS", "GELU"])
def test_activations_keep_their_relative_precision_near_zero(kind, x, want):
    """Relative error under 1e-5 where the result is tiny (the absolute tolerance of the
    other cases would pass e^x - 1 computed by subtraction)."""
    x = x.astype(np.float32)
    program = compile_for(lite_graph("Activation", {"activation_type": kind, "alpha": 1.0},
                                     [("x", x, False)]), {"x": x})
    (got,), count = run(program, {"x": x})
    assert count == 1
    np.testing.assert_allclose(got, want(x.astype(np.float64)), rtol=1e-5, atol=0)


@pytest.mark.parametrize("op", ["AddFusion", "SubFusion", "MulFusion", "DivFusion", "Maximum",
                                "Minimum", "PowFusion"])
@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)),
                                             ((1, 3, 1), (2, 1, 5)), ((3, 1), (1, 6)),
                                             ((2, 1, 3, 1, 2, 1, 2), (2, 2, 3, 2, 1, 3, 2)),
                                             ((), (5,)), ((4, 1, 6), ())], ids=str)
def test_binary_broadcast_runs_natively_like_numpy(op, a_shape, b_shape):
    r = rng(22)
    a, b = randn(r, *a_shape), randn(r, *b_shape)
    if op == "PowFusion":
        a = np.asarray(np.abs(a))
    if a.size:
        a.reshape(-1)[0] = np.nan
    native_steps = 0 if len(a_shape) == 7 else 1  # 7 dims that do not merge: numpy
    with np.errstate(invalid="ignore", divide="ignore"):
        _native_matches_numpy(lite_graph(op, {}, [("a", a, False), ("b", b, False)]),
                              {"a": a, "b": b}, native_steps)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op, native", [("AddFusion", 1), ("SubFusion", 1), ("MulFusion", 1),
                                        ("Maximum", 1), ("Minimum", 1), ("DivFusion", 0)])
@pytest.mark.parametrize("a_shape,b_shape", [((2, 3, 4), (2, 3, 4)), ((3, 1), (1, 6)), ((), ())],
                         ids=str)
def test_integer_binary_runs_natively_and_wraps_like_numpy(dtype, op, native, a_shape, b_shape):
    """Index arithmetic (shapes, masks, positions) on int32/int64: add, sub and mul wrap
    around as numpy's do; integer division stays with numpy (it truncates)."""
    info, r = np.iinfo(dtype), rng(26)
    a = r.integers(info.min, info.max, a_shape, dtype=dtype, endpoint=True)
    b = r.integers(-9, 9, b_shape, dtype=dtype)
    if op == "DivFusion":
        b[b == 0] = 1
    with np.errstate(over="ignore"):
        _native_matches_numpy(lite_graph(op, {}, [("a", a, False), ("b", b, False)], (dtype,)),
                              {"a": a, "b": b}, native)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.int8])
def test_a_copy_runs_natively_whatever_its_dtype(dtype):
    """A graph output that is a reshape of an input is a copy step: one memcpy in C."""
    x = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
    model = lite_graph("Reshape", {}, [("x", x, False), ("s", np.array([4, 3], np.int32), True)],
                       (dtype,))
    program = compile_for(model, {"x": x})
    assert [s.kernel for s in program.steps] == ["copy"]
    got, count = run(program, {"x": x})
    assert count == 1 and got[0].dtype == x.dtype
    np.testing.assert_array_equal(got[0], x.reshape(4, 3))


CAST_TYPES = [np.float32, np.int32, np.int64, np.uint8, np.int8, np.bool_]


@pytest.mark.parametrize("source", CAST_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("target", CAST_TYPES, ids=lambda t: np.dtype(t).name)
def test_cast_runs_natively_unless_a_float_becomes_an_integer(source, target):
    """Every pair of the C cast's types, values at the source's limits; a float to an
    integer stays with numpy (the conversion instruction's result for inf and NaN)."""
    if np.dtype(source).kind == "f":
        x = np.concatenate([SPECIAL, randn(rng(27), 20) * 300]).astype(source)
    elif np.dtype(source).kind == "b":
        x = np.array([True, False, True], np.bool_)
    else:
        info = np.iinfo(source)
        x = np.array([info.min, info.max, 0, 1, -1 if info.min else 2, 255, 2**24 + 1],
                     np.int64).astype(source)
    type_id = np.array(lite_dtypes.from_numpy(target), np.int32)
    model = lite_graph("Cast", {}, [("x", x, False), ("t", type_id, True)], (target,))
    program = compile_for(model, {"x": x})
    native = not (np.dtype(source).kind == "f" and np.dtype(target).kind in "iu")
    got, count = run(program, {"x": x})
    assert count == int(native)
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_array_equal(got[0], x.astype(target))


@pytest.mark.parametrize("coord", ["ASYMMETRIC", "ALIGN_CORNERS", "HALF_PIXEL"])
@pytest.mark.parametrize("rounding, size", [("NORMAL", (8, 10)), ("FLOOR", (7, 13)),
                                            ("CEIL", (3, 4)), ("ROUND_HALF_DOWN", (10, 5))],
                         ids=str)
def test_float_nearest_resize_runs_natively(coord, rounding, size):
    """A detector's upsampling (and downsampling) of float32 on the nearest copy in C."""
    x = randn(rng(31), 2, 3, 5, 6)
    model = lite_graph("Resize", {"method": "NEAREST", "new_height": size[0],
                                  "new_width": size[1], "coordinate_transform_mode": coord,
                                  "nearest_mode": rounding}, [("x", x, False)])
    program = check_native(model, {"x": x}, "resize")
    assert native_steps.lower(program, 0).op == native.OPS["qresize"]


@pytest.mark.parametrize("shape, reps", [((2, 3, 4), (1, 5, 1)), ((3, 1, 7), (2, 4, 3)),
                                         ((6,), (9,)), ((2, 2, 2, 3), (2, 1, 3, 1))], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_tile_runs_natively_as_a_strided_copy(shape, reps, dtype):
    """Tile (a transformer's mask or position table repeated per batch) as the strided copy,
    x walked with stride 0 along each repeat."""
    x = (randn(rng(36), *shape) * 5).astype(dtype)
    model = lite_graph("TileFusion", {}, [("x", x, False), ("m", np.array(reps, np.int64), True)],
                       out_dtypes=(dtype,))
    program = check_native(model, {"x": x}, "tile")
    np.testing.assert_array_equal(run(program, {"x": x})[0][0], np.tile(x, reps))


@pytest.mark.parametrize("shape, axes", [((4, 5, 6), [1]), ((4, 5, 6), [0, 2]), ((3, 4, 5, 2), [1, 2]),
                                         ((7,), [0]), ((2, 3), [-1])], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
def test_reverse_runs_natively_as_a_strided_copy(shape, axes, dtype):
    """ReverseV2 (a reverse-direction RNN's time axis, ArgMax's last-index form) as the
    strided copy walking the reversed axes backwards from their last element."""
    x = (randn(rng(37), *shape) * 50).astype(dtype)
    model = lite_graph("ReverseV2", {"axis": axes}, [("x", x, False)], out_dtypes=(dtype,))
    program = check_native(model, {"x": x}, "reverse")
    np.testing.assert_array_equal(run(program, {"x": x})[0][0], np.flip(x, axes))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape, axis", [((3, 50), 1), ((7, 2, 5000), 1), ((1,), 0), ((4, 3), 0)],
                         ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_cumsum_runs_natively_with_the_numpy_kernels_bits(exclusive, reverse, shape, axis, dtype):
    """Inclusive or exclusive, forward or from the end, along the last axis and across an
    inner one; float32 adds in numpy's order (a -0.0 first stays -0.0), integers wrap."""
    x = (randn(rng(38), *shape) * 1e3).astype(dtype)
    x.reshape(-1)[0] = -0.0 if dtype == np.float32 else np.iinfo(dtype).max
    model = lite_graph("CumSum", {"exclusive": exclusive, "reverse": reverse},
                       [("x", x, False), ("axis", np.array([axis], np.int64), True)],
                       out_dtypes=(dtype,))
    program = check_native(model, {"x": x}, "cumsum")
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    np.testing.assert_array_equal(got[0], want[0])
    assert np.array_equal(np.signbit(got[0]), np.signbit(want[0]))


@pytest.mark.parametrize("count", [2, 3, 15])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_add_n_runs_natively_with_the_numpy_kernels_bits(count, dtype):
    """ONNX Sum / AddN of same-shape inputs, added in order ((x0 + x1) + x2) + ...: float32
    gives the numpy kernel's bits, integers wrap as numpy's do."""
    r = rng(39)
    xs = [(randn(r, 3, 7000) * 1e3).astype(dtype) for _ in range(count)]
    if dtype != np.float32:
        xs[0][0, :2] = np.iinfo(dtype).max
    names = [f"x{i}" for i in range(count)]
    model = lite_graph("AddN", {}, [(n, x, False) for n, x in zip(names, xs, strict=True)],
                       out_dtypes=(dtype,))
    feeds = dict(zip(names, xs, strict=True))
    program = check_native(model, feeds, "add_n")
    got, _ = run(program, feeds)
    want, _ = run(program, feeds, kernels=KERNELS)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis, k", [(3, 7), (1, 4), (0, 1), (3, 300)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_topk_runs_natively_like_numpy(largest, axis, k, dtype):
    """Sorted, ties by the lower index, NaNs greatest (numpy's stable sort): a line with
    NaNs, signed zeros, infinities and repeats; k from 1 to the whole line."""
    r = rng(35)
    x = (randn(r, 2, 4, 3, 300) * 3).astype(dtype)
    x[0, 0, 0, :] = x[0, 0, 0, :] // 2  # repeats
    if dtype == np.float32:
        x[1, 0, 0, :8] = [np.nan, 1.0, np.nan, np.inf, -0.0, 0.0, -np.inf, 1.0]
    x[1] = x[1, 0]  # ties along axis 0 and 1
    model = lite_graph("TopKFusion", {"axis": axis, "largest": int(largest), "sorted": True},
                       [("x", x, False), ("k", np.array([k], np.int64), True)],
                       out_dtypes=(dtype, np.int64 if axis else np.int32))
    program = check_native(model, {"x": x}, "topk")
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("order", ["random", "rising", "falling", "few_values", "nan_heavy"])
@pytest.mark.parametrize("shape, axis, k", [((3, 5000), 1, 40), ((1, 2000, 37), 1, 25),
                                            ((1, 37, 2000), 2, 600)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_topk_long_lines_like_numpy(largest, order, shape, axis, k, dtype):
    """Lines far longer than k, whose buffers of candidates are cut back to k many times,
    and lines along an inner axis scanned 16 at a time (37: a partial group): orders that
    make every value a candidate (rising for the largest, falling for the smallest), a
    few repeated values (ties by index everywhere), and lines mostly NaN, so that the bar
    is a NaN."""
    r = rng(36)
    x = randn(r, *shape) * 1000
    if order == "rising":
        x = np.sort(x, axis=axis)
    elif order == "falling":
        x = -np.sort(x, axis=axis)
    elif order == "few_values":
        x = np.round(x / 1000)
    x = x.astype(dtype)
    if dtype == np.int32:
        x.flat[:3] = [np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0]
    elif order == "nan_heavy":
        x[r.random(x.shape) < 0.9] = np.nan
        x.flat[:2] = [-0.0, 0.0]
    model = lite_graph("TopKFusion", {"axis": axis, "largest": int(largest), "sorted": True},
                       [("x", x, False), ("k", np.array([k], np.int64), True)],
                       out_dtypes=(dtype, np.int64))
    program = check_native(model, {"x": x}, "topk")
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype, native_step", [(np.float32, False), (np.int32, False),
                                                 (np.int64, True)])
def test_topk_lines_of_2_to_the_32_stay_native_only_where_the_index_fits(dtype, native_step):
    """csrc/topk.c's float32/int32 keys hold a value's index in 32 bits: a line of 2^32 - 1
    values or more is left to the numpy kernel (the C step's heap, for int64, has no such
    bound). The lowering alone, on slots of that shape (no such tensor is made)."""
    from provider.npu.ops.native_builder import StepBuilder
    from provider.npu.ops.topk import KEYED_LINE_LIMIT, _topk_native
    from provider.npu.program import Slot

    n = KEYED_LINE_LIMIT
    x = Slot.of("x", np.dtype(dtype), (1, n), "input")
    outs = [Slot.of("v", np.dtype(dtype), (1, 5), "output"),
            Slot.of("i", np.dtype(np.int64), (1, 5), "output")]
    attrs = {"axis": 1, "k": 5, "largest": 1}
    assert _topk_native([x], outs, attrs, StepBuilder("topk", [0], [1, 2])) is native_step
    shorter = Slot.of("x", np.dtype(dtype), (1, n - 1), "input")
    assert _topk_native([shorter], outs, attrs, StepBuilder("topk", [0], [1, 2]))


@pytest.mark.parametrize("op", ["ArgMaxFusion", "ArgMinFusion"])
@pytest.mark.parametrize("axis", [0, 1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_arg_max_min_run_natively_like_numpy(op, axis, dtype):
    """The first index on a tie; a NaN wins only as its line's first value (onnxruntime's
    scan). Across an inner axis (a segmentation head's classes at axis 1) and along the
    last one."""
    r = rng(34)
    x = (randn(r, 3, 4, 5, 300) * 3).astype(dtype)
    if dtype == np.float32:
        x[0, 0, 0, :5] = [np.nan, 1.0, np.nan, 1e30, -0.0]
        x[:, :, 1, :] = np.nan
    x[1] = x[1, 0]  # ties along axis 0 and 1
    model = lite_graph(op, {"axis": axis, "keep_dims": axis == 1, "top_k": 1},
                       [("x", x, False)], out_dtypes=(np.int64 if axis else np.int32,))
    program = check_native(model, {"x": x}, "arg")
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("slope_shape", [(1,), (3,), (3, 1, 1)], ids=str)
def test_prelu_runs_natively_with_the_numpy_kernels_bits(slope_shape):
    """PReLU (a face-recognition ResNet has one after most convs) as a binary step in C:
    x > 0 ? x : x * slope, slope shared or per channel; zeros, a NaN and infinities pass as
    the numpy kernel passes them."""
    x = randn(rng(33), 2, 3, 5, 6)
    x[0, 0, 0, :4] = [0.0, -0.0, np.nan, -np.inf]
    slope = np.linspace(-0.5, 0.75, int(np.prod(slope_shape)), dtype=np.float32).reshape(slope_shape)
    model = lite_graph("PReLUFusion", {}, [("x", x, False), ("slope", slope, True)])
    program = check_native(model, {"x": x}, "prelu")
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    np.testing.assert_array_equal(got[0], want[0])
    assert np.array_equal(np.signbit(got[0]), np.signbit(want[0]))


@pytest.mark.parametrize("method, kernel, extra", [("LINEAR", "resize_linear", {}),
                                                   ("CUBIC", "resize_cubic", {"exclude_outside": 0}),
                                                   ("CUBIC", "resize_cubic", {"exclude_outside": 1})],
                         ids=["linear", "cubic", "cubic_exclude_outside"])
@pytest.mark.parametrize("coord", ["ASYMMETRIC", "ALIGN_CORNERS", "HALF_PIXEL"])
@pytest.mark.parametrize("size", [(10, 12), (7, 13), (3, 4), (5, 1)], ids=str)
def test_float_resize_runs_natively_with_the_numpy_kernels_bits(method, kernel, extra, coord, size):
    """A segmentation head's bilinear and a super-resolution head's bicubic up- and
    downsampling of float32 in C (csrc/resize.c): the numpy kernel's blends and four-tap
    sums, bit for bit."""
    x = randn(rng(32), 2, 3, 5, 6)
    model = lite_graph("Resize", {"method": method, "new_height": size[0], "new_width": size[1],
                                  "coordinate_transform_mode": coord, **extra},
                       [("x", x, False)])
    program = check_native(model, {"x": x}, kernel)
    assert native_steps.lower(program, 0).op == native.OPS[kernel]
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
@pytest.mark.parametrize("axis, sizes", [(1, [2, 6, 8]), (3, [1, 4]), (0, [1, 1]), (2, [3])],
                         ids=str)
def test_split_runs_natively(dtype, axis, sizes):
    """Split is concat backwards: pieces along any axis (a detector's channel split, the
    outer axis, one piece), any dtype, each output its own slot."""
    shape = [2, 16, 3, 5]
    shape[axis] = sum(sizes)
    x = (randn(rng(32), *shape) * 50).astype(dtype)
    model = lite_graph("Split", {"axis": axis, "output_num": len(sizes), "size_splits": sizes},
                       [("x", x, False)], (dtype,) * len(sizes))
    program = check_native(model, {"x": x}, "split")
    assert native_steps.lower(program, 0).op == native.OPS["split"]
    got, _ = run(program, {"x": x})
    for g, want in zip(got, np.split(x, np.cumsum(sizes)[:-1], axis=axis), strict=True):
        np.testing.assert_array_equal(g, want)


def test_binary_with_a_constant_and_a_fused_relu_runs_natively():
    x = randn(rng(23), 2, 3, 8)
    model = lite_graph("MulFusion", {"activation_type": "RELU"},
                       [("x", x, False), ("w", randn(rng(24), 3, 1), True)])
    _native_matches_numpy(model, {"x": x})


@pytest.mark.parametrize("length", [48, 7, 100])
@pytest.mark.parametrize("affine", [0, 1, 2])
def test_layer_norm_runs_natively(affine, length):
    """Rows of whole blocks of the kernel's partial sums, shorter than one, and with a tail."""
    r = rng(25)
    x = randn(r, 2, 5, length) * 3 + 1
    inputs = [("x", x, False), ("g", randn(r, length), True), ("b", randn(r, length), True)][:affine + 1]
    _native_matches_numpy(lite_graph("LayerNormFusion", {"begin_norm_axis": -1, "epsilon": 1e-5},
                                     inputs), {"x": x})


@pytest.mark.parametrize("shape", [(2, 3, 5, 6), (1, 4, 100), (3, 2, 7)], ids=str)
def test_instance_norm_runs_natively(shape):
    """A row per (image, channel) with that channel's scale and bias: image-to-image models,
    and GroupNorm as PyTorch exports it (a reshaped InstanceNorm over (N, G, rest))."""
    r = rng(27)
    x = randn(r, *shape) * 3 + 1
    c = shape[1]
    _native_matches_numpy(lite_graph("InstanceNorm", {"epsilon": 1e-5}, [
        ("x", x, False), ("scale", randn(r, c), True), ("bias", randn(r, c), True)]), {"x": x})


@pytest.mark.parametrize("op,bidirectional,states,outputs", [
    ("LSTM", False, False, 3), ("LSTM", True, True, 3), ("LSTM", True, False, 1),
    ("GRU", False, True, 2), ("GRU", True, False, 1)])
def test_rnn_runs_natively_like_numpy(op, bidirectional, states, outputs):
    r = rng(26)
    steps, batch, size, hidden = 6, 3, 5, 7
    gates, dirs = (4 if op == "LSTM" else 3), (2 if bidirectional else 1)
    x = randn(r, steps, batch, size)
    inputs = [("x", x, False), ("w", randn(r, dirs, gates * hidden, size) * 0.5, True),
              ("r", randn(r, dirs, gates * hidden, hidden) * 0.5, True),
              ("b", randn(r, dirs, 2 * gates * hidden) * 0.3, True)]
    feeds = {"x": x}
    if states:
        inputs.append(("lengths", np.zeros(0, np.int32), True))  # absent
        for name in ("h0", "c0")[:2 if op == "LSTM" else 1]:
            feeds[name] = randn(r, dirs, batch, hidden)
            inputs.append((name, feeds[name], False))
    model = lite_graph(op, {"bidirectional": bidirectional}, inputs, [np.float32] * outputs)
    _native_matches_numpy(model, feeds)


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_a_recurrence_of_no_hidden_units_runs_natively(op):
    """A .ms file may hold a layer of hidden size 0: its step's kind comes from its kernel,
    not from its shapes (G / H divided by zero there), and it computes empty outputs."""
    x = randn(rng(41), 3, 2, 4)
    model = lite_graph(op, {}, [("x", x, False), ("w", np.ones((1, 0, 4), np.float32), True),
                                ("r", np.ones((1, 0, 0), np.float32), True),
                                ("b", np.ones((1, 0), np.float32), True)])
    _native_matches_numpy(model, {"x": x})


@pytest.mark.parametrize("op, hidden", [("LSTM", 256), ("GRU", 304)])
@pytest.mark.parametrize("batch", [3, 5])
def test_a_big_recurrence_is_cut_over_the_cores_in_blocks(op, hidden, batch, restore_threads,
                                                          monkeypatch, vector_width):
    """R^T of at least 1 MB per direction is stored in blocks of 16 hidden units, and each
    step is cut over the cores by blocks (3 cores: uneven shares; 304 units = 19 blocks):
    both directions, initial states, every output, 3 and 5 batch rows; the same values on
    1, 2 and 3 cores, as the numpy kernel, and as the Program that stores R^T by rows, in
    both vector widths. New device pools: units no task computed read 0, not an earlier
    run's."""
    from provider.npu.ops import rnn as rnn_ops

    r = rng(28)
    steps, size, gates = 4, 16, (4 if op == "LSTM" else 3)
    x = randn(r, steps, batch, size)
    inputs = [("x", x, False), ("w", randn(r, 2, gates * hidden, size) * 0.3, True),
              ("r", randn(r, 2, gates * hidden, hidden) * 0.1, True),
              ("b", randn(r, 2, 2 * gates * hidden) * 0.3, True),
              ("lengths", np.zeros(0, np.int32), True)]
    feeds = {"x": x}
    for name in ("h0", "c0")[:2 if op == "LSTM" else 1]:
        feeds[name] = randn(r, 2, batch, hidden)
        inputs.append((name, feeds[name], False))
    model = lite_graph(op, {"bidirectional": True}, inputs, [np.float32] * (3 if op == "LSTM" else 2))
    program = compile_for(model, feeds)
    (step,) = program.steps
    assert step.attrs["r_layout"] == "blocks"
    want, _ = run(program, feeds, kernels=KERNELS)
    monkeypatch.setattr(rnn_ops, "BLOCKED_MIN_BYTES", 1 << 62)
    by_rows = compile_for(model, feeds)
    assert by_rows.steps[0].attrs["r_layout"] == "rows"
    assert_close(run(by_rows, feeds, kernels=KERNELS)[0], want, "by rows")
    for cores in (1, 2, 3):
        native.set_threads(cores)
        with Executor(program, DevicePool()) as ex:
            assert ex.native_steps == 1
            for _ in range(2):
                assert_close([np.array(o) for o in ex.run([feeds[n] for n in ex.input_names])],
                             want, f"{cores} cores")


@pytest.mark.parametrize("op,attrs,hidden", [
    ("RNN", {}, 7), ("RNN", {"activations": ["Relu", "Relu"], "direction": "bidirectional"}, 7),
    ("RNN", {"direction": "reverse"}, 7), ("GRU", {}, 7), ("GRU", {"direction": "reverse"}, 9),
    ("GRU", {"direction": "bidirectional"}, 7), ("RNN", {"direction": "bidirectional"}, 512)])
def test_custom_rnn_forms_run_natively_like_numpy(op, attrs, hidden):
    """ONNX's RNN and a GRU resetting before its product (linear_before_reset=0), carried as
    Custom: the C step gives the numpy kernel's values (both directions, reverse, Relu; a
    big RNN's R^T in blocks, cut over the cores)."""
    from onnx import helper, numpy_helper

    r = rng(29)
    steps, batch, size = 6, 3, 5
    gates, dirs = (3 if op == "GRU" else 1), (2 if attrs.get("direction") == "bidirectional" else 1)
    x, h0 = randn(r, steps, batch, size), randn(r, dirs, batch, hidden)
    weights = {"W": randn(r, dirs, gates * hidden, size) * 0.5,
               "R": randn(r, dirs, gates * hidden, hidden) * (0.5 / np.sqrt(hidden)),
               "B": randn(r, dirs, 2 * gates * hidden) * 0.3}
    node = helper.make_node(op, ["x", "W", "R", "B", "", "h0"], ["y", "y_h"], hidden_size=hidden,
                            **attrs)
    f = helper.make_tensor_value_info
    graph = helper.make_graph([node], "g", [f("x", 1, x.shape), f("h0", 1, h0.shape)],
                              [f("y", 1, [steps, dirs, batch, hidden]), f("y_h", 1, h0.shape)],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    lite, _ = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]))
    assert [n.op for n in lite.nodes] == ["Custom"]
    feeds = {"x": x, "h0": h0}
    assert compile_for(lite, feeds).steps[0].attrs["r_layout"] == ("blocks" if hidden > 256 else "rows")
    _native_matches_numpy(lite, feeds)


@pytest.mark.parametrize("blob,why", [
    (b"\xff\x00 not a NodeProto", "does not parse"),
    (b"", "carries ai.onnx:"),
    ("conv", "carries ai.onnx:Conv"),
    ("gru", "1 inputs and 1 outputs for its carried node's 3 and 2"),
])
def test_a_custom_node_that_does_not_hold_together_stays_on_the_cpu(blob, why):
    """A .ms file's Custom node is input like any other: a blob that does not parse, an ONNX
    node other than its type says, or operands that do not match get a reason, not a crash."""
    from onnx import helper

    if blob == "conv":
        blob = helper.make_node("Conv", ["x", "w"], ["y"]).SerializeToString()
    elif blob == "gru":
        blob = helper.make_node("GRU", ["x", "W", "R"], ["y", "y_h"], hidden_size=2).SerializeToString()
    x = randn(rng(30), 2, 1, 3)
    model = lite_graph("Custom", {"type": "onnx:ai.onnx:GRU", "attr": {"onnx_node": blob}},
                       [("x", x, False)])
    assert why in check(model, 0)
    with pytest.raises(UnsupportedError, match=why):
        compile_for(model, {"x": x})


def test_rnn_with_sequence_lengths_stays_on_numpy():
    r = rng(27)
    x = randn(r, 4, 2, 3)
    lengths = np.array([4, 2], np.int32)
    model = lite_graph("LSTM", {}, [("x", x, False), ("w", randn(r, 1, 8, 3), True),
                                    ("r", randn(r, 1, 8, 2), True), ("b", randn(r, 1, 16), True),
                                    ("lengths", lengths, False)])
    _native_matches_numpy(model, {"x": x, "lengths": lengths}, native_steps=0)


@pytest.mark.parametrize("mode", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
                                  "ReduceSumSquare", "ReduceL2"])
@pytest.mark.parametrize("axes,keep", [([-1], True), ([1, 2], False), ([0], True)], ids=str)
def test_reduce_over_consecutive_axes_runs_natively(mode, axes, keep):
    x = randn(rng(28), 3, 4, 5) * 3
    x[1, 2, 3] = np.nan
    model = lite_graph("ReduceFusion", {"mode": mode, "keep_dims": keep},
                       [("x", x, False), ("axes", np.array(axes, np.int32), True)])
    _native_matches_numpy(model, {"x": x})


@pytest.mark.parametrize("mode", ["ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL2",
                                  "ReduceMax"])
@pytest.mark.parametrize("axes", [[-1], [1]], ids=["lines", "across"])
def test_reduce_of_long_lines_and_wide_inner_axes_runs_natively(mode, axes):
    """Sums of contiguous lines in the kernel's partial sums, with a tail (300 = 18 x 16 +
    12), and across an axis with 300 lines side by side (more than one block of 256); a NaN
    and an infinity reach their own lines only."""
    x = randn(rng(30), 2, 37, 300) * 3
    x[0, 5, 7], x[1, 9, 290] = np.nan, np.inf
    model = lite_graph("ReduceFusion", {"mode": mode, "keep_dims": False},
                       [("x", x, False), ("axes", np.array(axes, np.int32), True)])
    _native_matches_numpy(model, {"x": x})


def test_reduce_over_axes_apart_and_prod_stay_on_numpy():
    x = randn(rng(29), 3, 4, 5)
    for mode, axes in (("ReduceMean", [0, 2]), ("ReduceProd", [1])):
        model = lite_graph("ReduceFusion", {"mode": mode, "keep_dims": True},
                           [("x", x, False), ("axes", np.array(axes, np.int32), True)])
        _native_matches_numpy(model, {"x": x}, native_steps=0)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [1], [1]), ([0, 1], [2, 5], [0, 2], [1, 2]), ([-1], [-100], [2], [-1]),
    ([4, 0], [0, 1], [2, 1], [-2, 1]), ([1, 0, 0], [2, 1, 1], [0, 1, 2], [1, 1, 1])], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_slices_run_as_native_strided_copies(starts, ends, axes, steps, dtype):
    x = (randn(rng(30), 3, 4, 6) * 10).astype(dtype)
    inputs = [("x", x, False)] + [(n, np.array(v, np.int32), True) for n, v in
                                  (("starts", starts), ("ends", ends), ("axes", axes),
                                   ("steps", steps))]
    model = lite_graph("StridedSlice", {}, inputs, [dtype])
    _native_matches_numpy(model, {"x": x})


@pytest.mark.parametrize("operands", [
    {"starts": [1], "ends": [3], "axes": [1], "steps": [1, 2]},  # ONNX's form
    {"begin": [1, 0], "end": [3, 2], "strides": [1]},  # TF's form
    {"begin": [0, 0, 0, 0], "end": [1, 1, 1, 1], "strides": [1, 1, 1, 1]},  # past the rank
], ids=str)
def test_a_strided_slice_whose_operands_do_not_agree_is_refused(operands):
    """A .ms file's StridedSlice with per-axis operands of different lengths (or more than
    the rank) is an invalid model, as onnxruntime says of its export, not a slice of some
    of them."""
    x = randn(rng(31), 3, 4, 6)
    inputs = [("x", x, False)] + [(n, np.array(v, np.int32), True) for n, v in operands.items()]
    with pytest.raises(InvalidModelError, match="per-axis operands|begin values for rank"):
        compile_for(lite_graph("StridedSlice", {}, inputs), {"x": x})


def _copies_model(x: np.ndarray, case: str) -> LiteModel:
    dt = x.dtype.type
    if case == "transpose":
        return lite_graph("Transpose", {}, [("x", x, False), ("perm", np.array([0, 3, 1, 2], np.int32), True)],
                          out_dtypes=(dt,))
    if case == "concat":
        return lite_graph("Concat", {"axis": 1}, [("x", x, False), ("y", x[:, :2] + 1, True)], out_dtypes=(dt,))
    if case.startswith("add"):  # same shapes merge into one row; a row broadcast into two
        other = x[::-1] if case == "add" else x[:1] * 2
        act = "SWISH" if dt == np.float32 else "NO_ACTIVATION"
        return lite_graph("AddFusion", {"activation_type": act}, [("x", x, False), ("y", other, True)],
                          out_dtypes=(dt,))
    inputs = [("x", x, False)] + [(n, np.array(v, np.int32), True) for n, v in
                                  (("starts", [1, 0]), ("ends", [100, 100]), ("axes", [2, 3]),
                                   ("steps", [2, 3 if case == "slice3" else 2]))]
    return lite_graph("StridedSlice", {}, inputs, [dt])


@pytest.mark.parametrize("case,dtype", [
    *((c, d) for c in ("slice2", "slice3", "transpose", "concat")
      for d in (np.float32, np.float16, np.int8, np.int64)),
    ("add", np.float32), ("add", np.int32), ("add_row", np.float32), ("add_row", np.int64)], ids=str)
def test_big_copies_split_over_cores_copy_the_same_bytes(case, dtype, restore_threads):
    """Slices (every other or every third column: typed strided rows), a transpose that walks
    elements, a concat, and adds whose operands merge into one or two rows (cut in pieces),
    big enough to be cut into tasks: natively, what the numpy kernel gives (the same bytes;
    a fused swish to rounding), on one core and, the same bytes, on two with the worker taking
    tasks (in new device pools: bytes no task wrote read 0, not an earlier run's)."""
    x = (randn(rng(31), 2, 6, 90, 100) * 50).astype(dtype)
    program = compile_for(_copies_model(x, case), {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    native.set_threads(1)
    with Executor(program, DevicePool()) as ex:
        assert ex.native_steps == 1
        one = np.array(ex.run([x])[0])
    if case.startswith("add") and dtype == np.float32:
        assert_close([one], want)
    else:
        np.testing.assert_array_equal(one, want[0])
    native.set_threads(2)
    before = native.worker_tasks()
    with Executor(program, DevicePool()) as ex:
        run_until_a_worker_helps(lambda: np.testing.assert_array_equal(ex.run([x])[0], one), before)
    assert native.worker_tasks() > before


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("axis, table_shape", [(0, (10, 4)), (1, (3, 7, 2)), (2, (2, 3, 5))], ids=str)
def test_gather_of_run_time_indices_runs_natively(axis, table_shape, index_dtype):
    """Negatives wrap; an index outside [-dim, dim) is refused in C with numpy's words."""
    r = rng(30)
    table = randn(r, *table_shape)
    dim = table_shape[axis]
    ids = r.integers(-dim, dim, size=(2, 3)).astype(index_dtype)
    model = lite_graph("Gather", {}, [("table", table, True), ("ids", ids, False),
                                      ("axis", np.array([axis], np.int32), True)])
    _native_matches_numpy(model, {"ids": ids})
    program = compile_for(model, {"ids": ids})
    bad = ids.copy()
    bad[1, 2] = dim
    with Executor(program, pool()) as ex:
        assert ex.native_steps == 1
        with pytest.raises(InputValueError, match=rf"Gather: index {dim} is outside \[-{dim}, {dim}\)"):
            ex.run([bad])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("shape, to", [((1, 16, 1), (1, 16, 384)), ((3, 1, 4), (2, 3, 5, 4)),
                                       ((), (2, 3)), ((5,), (5,))], ids=str)
def test_broadcast_runs_natively_as_a_strided_copy(shape, to, dtype):
    x = np.asarray((rng(31).standard_normal(shape) * 10).astype(dtype))
    model = lite_graph("BroadcastTo", {}, [("x", x, False), ("shape", np.array(to, np.int64), True)],
                       out_dtypes=(np.dtype(dtype),))
    _native_matches_numpy(model, {"x": x})


@pytest.mark.parametrize("m, k, n", [(19, 150, 100), (2, 64, 48), (32, 300, 1000), (5, 7, 3),
                                     (4, 0, 50)], ids=str)
@pytest.mark.parametrize("act", ["NO_ACTIVATION", "RELU6"])
def test_a_gemm_of_few_rows_matches_numpy(m, k, n, act, vector_width, restore_threads):
    """Row tiles of 8, 4, 2 and 1, passes of 64 rows of B with a partial one, a partial last
    panel of 48 columns (csrc/rowgemm.c where the CPU has AVX-512; OpenBLAS with 8-float
    vectors), bias and activation; an empty K is the bias alone. On 1, 2 and 3 cores (a run
    of panels per core)."""
    r = rng(32)
    a, w, bias = randn(r, m, k), randn(r, k, n), randn(r, n)
    model = lite_graph("MatMulFusion", {"activation_type": act},
                       [("a", a, False), ("w", w, True), ("bias", bias, True)])
    for cores in (1, 2, 3):
        native.set_threads(cores)
        _native_matches_numpy(model, {"a": a})


@pytest.mark.parametrize("op, attrs", [("MatMulFusion", {}), ("MatMulFusion", {"transpose_b": True}),
                                       ("FullConnection", {})], ids=str)
@pytest.mark.parametrize("m", [16, 1, 3, 13, 40])
def test_a_big_constant_b_of_few_rows_is_stored_in_panels(op, attrs, m, vector_width,
                                                           restore_threads):
    """A constant B of enough floats for its rows of A (PANEL_MIN_FLOATS) is stored in
    panels of 48 columns (the last one partial here: 1100 = 22 x 48 + 44), for every way a
    constant B comes (MatMul as is or transposed, FullConnection's (out, in)); both kernels
    read them, on AVX-512 tiles or the portable loop, over 1 and 2 cores."""
    from provider.npu.ops import matmul as mm

    r = rng(36)
    k, n = 1024, 1100
    a, w, bias = randn(r, m, k), randn(r, k, n) * 0.05, randn(r, n)
    stored = w.T.copy() if attrs or op == "FullConnection" else w
    model = lite_graph(op, {"activation_type": "RELU", **attrs},
                       [("a", a, False), ("w", stored, True), ("bias", bias, True)])
    program = compile_for(model, {"a": a})
    (step,) = program.steps
    assert step.attrs["weights"] == "panels"
    assert program.slots[step.inputs[1]].shape == (23, k, mm.PANEL)
    expected = np.maximum(a.astype(np.float64) @ w + bias, 0)
    for cores in (1, 2):
        native.set_threads(cores)
        _native_matches_numpy(model, {"a": a})
        assert_close(run(program, {"a": a})[0], [expected.astype(np.float32)])
    assert mm.from_panels(mm.to_panels(w), n).tolist() == w.tolist()


@pytest.mark.parametrize("rows, k, n, panels", [
    (1, 1024, 64, True), (8, 64, 64, True), (16, 384, 384, True), (32, 768, 768, True),
    (64, 1024, 1100, True), (16, 512, 64, False), (24, 256, 256, False), (64, 384, 384, False),
    (65, 1024, 1100, False), (16, 4096, 40, False), (0, 64, 64, False)], ids=str)
def test_panels_are_chosen_where_they_were_measured_faster(rows, k, n, panels):
    """Few rows of A take B in panels from a size that shrinks with the rows; B narrower than
    one panel stays in place (its padding would be work)."""
    from provider.npu.ops.matmul import panels_pay

    assert panels_pay(rows, k, n) is panels


@pytest.mark.parametrize("op, dtype", [
    *((op, dtype) for op in ("Equal", "Less", "Greater", "LessEqual", "GreaterEqual", "NotEqual")
      for dtype in (np.float32, np.int32, np.int64, np.bool_)),
    ("LogicalAnd", np.bool_), ("LogicalOr", np.bool_)], ids=str)
def test_comparisons_run_natively_into_masks(op, dtype):
    """Broadcast both ways; NaNs compare as numpy's (only NotEqual holds)."""
    r = rng(33)
    a = np.asarray((r.standard_normal((2, 3, 4)) * 2).round().astype(dtype))
    b = np.asarray((r.standard_normal((3, 1)) * 2).round().astype(dtype))
    if dtype == np.float32:
        a.reshape(-1)[:3] = np.nan
        b.reshape(-1)[0] = np.nan
    model = lite_graph(op, {}, [("a", a, False), ("b", b, False)], out_dtypes=(np.dtype(np.bool_),))
    _native_matches_numpy(model, {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.int32, np.float16])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4), (2, 3, 4)), ((1, 1, 4, 1), (), (3, 1, 1, 5)),
                                    ((3, 1), (1, 5), (3, 5))], ids=str)
def test_where_runs_natively(shapes, dtype):
    """Every element size (1, 2, 4, 8 bytes: a typed loop each), broadcast both ways."""
    r = rng(34)
    cond = np.asarray(r.random(shapes[0]) > 0.5)
    x = np.asarray((r.standard_normal(shapes[1]) * 5).astype(dtype))
    y = np.asarray((r.standard_normal(shapes[2]) * 5).astype(dtype))
    model = lite_graph("Where", {}, [("c", cond, False), ("x", x, False), ("y", y, False)],
                       out_dtypes=(np.dtype(dtype),))
    _native_matches_numpy(model, {"c": cond, "x": x, "y": y})


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gather_nd_runs_natively_and_refuses_an_index_off_its_axis(index_dtype):
    r = rng(35)
    x = randn(r, 3, 4, 5)
    idx = np.array([[[0, 1], [2, -1]], [[1, 0], [-3, 2]]], index_dtype)
    model = lite_graph("GatherNd", {}, [("x", x, False), ("idx", idx, False)])
    _native_matches_numpy(model, {"x": x, "idx": idx})
    bad = idx.copy()
    bad[1, 0, 1] = 4  # axis 1 has 4: the first column is checked first, and is fine
    with Executor(compile_for(model, {"x": x, "idx": idx}), pool()) as ex:
        with pytest.raises(InputValueError, match=r"GatherND: index 4 is outside \[-4, 4\)"):
            ex.run([x, bad])


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
@pytest.mark.parametrize("x_shape, idx_shape, axis", [((3, 4, 5), (3, 4, 5), 1),
                                                      ((3, 4, 5), (2, 6, 3), 1),
                                                      ((6, 5), (4, 2), 0),
                                                      ((2, 3, 4, 7), (2, 3, 4, 9), 3)], ids=str)
def test_gather_elements_runs_natively_and_refuses_an_index_off_its_axis(index_dtype, dtype,
                                                                        x_shape, idx_shape, axis):
    """torch.gather's export: each index replaces its own position's coordinate on the axis;
    the index may be shorter than x on the other axes (x is read through its strides) and
    longer on the axis itself; negatives wrap. An index off the axis is the numpy kernel's
    InputValueError, raised from C before anything is written."""
    r = rng(37)
    x = (randn(r, *x_shape) * 50).astype(dtype)
    dim = x_shape[axis]
    idx = r.integers(-dim, dim, idx_shape).astype(index_dtype)
    model = lite_graph("GatherD", {}, [("x", x, False), ("dim", np.array([axis], np.int32), True),
                                       ("idx", idx, False)], out_dtypes=(np.dtype(dtype),))
    program = check_native(model, {"x": x, "idx": idx}, "gather_elements")
    got, _ = run(program, {"x": x, "idx": idx})
    want, _ = run(program, {"x": x, "idx": idx}, kernels=KERNELS)
    np.testing.assert_array_equal(got[0], want[0])
    bad = idx.copy()
    bad.flat[-1] = dim
    with Executor(program, pool()) as ex:
        with pytest.raises(InputValueError, match=rf"GatherElements: index {dim} is outside \[-{dim}, {dim}\)"):
            ex.run([x, bad])


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
@pytest.mark.parametrize("x_shape, idx_shape", [((4, 5, 6), (3, 1)), ((4, 5, 6), (2, 2, 2)),
                                                ((4, 5, 6), (5, 3)), ((7,), (9, 1)),
                                                ((4, 5, 6), (0, 2))], ids=str)
def test_scatter_nd_runs_natively_in_order_and_refuses_an_index_off_its_axis(index_dtype, dtype,
                                                                            x_shape, idx_shape):
    """Slices replaced at index tuples in C (layout.c), negatives wrapping, a repeated tuple
    keeping its last update as onnxruntime's loop does (9 tuples into 7 slots repeat), no
    tuple at all leaving data as it is; an index off its axis is the numpy kernel's
    InputValueError, raised from C before anything is written."""
    r = rng(39)
    k = idx_shape[-1]
    x = (randn(r, *x_shape) * 50).astype(dtype)
    idx = np.stack([r.integers(-d, d, idx_shape[:-1]) for d in x_shape[:k]], -1).astype(index_dtype)
    updates = (randn(r, *idx_shape[:-1], *x_shape[k:]) * 50).astype(dtype)
    model = lite_graph("ScatterNdUpdate", {}, [("x", x, False), ("idx", idx, False),
                                               ("u", updates, False)], out_dtypes=(np.dtype(dtype),))
    feeds = {"x": x, "idx": idx, "u": updates}
    program = check_native(model, feeds, "scatter_nd")
    want = x.copy()
    for t, u in zip(idx.reshape(-1, k), updates.reshape(len(idx.reshape(-1, k)), *x_shape[k:]),
                    strict=True):
        want[tuple(t)] = u
    np.testing.assert_array_equal(run(program, feeds)[0][0], want)
    if not idx.size:  # no tuple: data as it is
        return
    bad = idx.copy()
    bad.reshape(-1, k)[-1, 0] = x_shape[0]
    with Executor(program, pool()) as ex:
        with pytest.raises(InputValueError,
                           match=rf"ScatterND: index {x_shape[0]} is outside \[-{x_shape[0]}, {x_shape[0]}\)"):
            ex.run([x, bad, updates])


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
@pytest.mark.parametrize("x_shape, idx_shape, axis", [((3, 4, 5), (3, 4, 5), 1),
                                                      ((3, 4, 5), (2, 9, 3), 1),
                                                      ((6, 5), (14, 2), 0),
                                                      ((2, 3, 4, 7), (2, 3, 4, 16), 3)], ids=str)
def test_scatter_elements_runs_natively_in_order(index_dtype, dtype, x_shape, idx_shape, axis):
    """torch's scatter_ in C (layout.c): each update goes to its own position with the axis's
    coordinate replaced by its index, through x's strides, in order (indices longer than the
    axis repeat places: the last update stays); an index off the axis is the numpy kernel's
    InputValueError, raised from C before anything is written."""
    r = rng(40)
    x = (randn(r, *x_shape) * 50).astype(dtype)
    dim = x_shape[axis]
    idx = r.integers(-dim, dim, idx_shape).astype(index_dtype)
    updates = (randn(r, *idx_shape) * 50).astype(dtype)
    model = lite_graph("ScatterElements", {"axis": axis}, [
        ("x", x, False), ("idx", idx, False), ("u", updates, False)], out_dtypes=(np.dtype(dtype),))
    feeds = {"x": x, "idx": idx, "u": updates}
    program = check_native(model, feeds, "scatter_elements")
    want = x.copy()
    for position in np.ndindex(*idx_shape):
        target = list(position)
        target[axis] = idx[position]
        want[tuple(target)] = updates[position]
    np.testing.assert_array_equal(run(program, feeds)[0][0], want)
    bad = idx.copy()
    bad.flat[-1] = dim
    with Executor(program, pool()) as ex:
        with pytest.raises(InputValueError,
                           match=rf"ScatterElements: index {dim} is outside \[-{dim}, {dim}\)"):
            ex.run([x, bad, updates])


@pytest.mark.parametrize("op", ["Triu", "Tril"])
@pytest.mark.parametrize("k", [0, 2, -3, 9, -9, 2**63 - 1, -(2**63 - 1)])
@pytest.mark.parametrize("shape, dtype", [((2, 3, 5, 7), np.float32), ((6, 4), np.int64),
                                          ((1, 7, 7), np.bool_), ((3, 0, 4), np.float32)], ids=str)
def test_trilu_runs_natively(op, k, shape, dtype):
    """A decoder's causal mask in C (layout.c): each row's kept columns copied, the rest
    zero, over batches of non-square matrices, k past either corner, any element type."""
    x = (randn(rng(38), *shape) * 9).astype(dtype)
    model = lite_graph(op, {}, [("x", x, False), ("k", np.array([k], np.int64), True)],
                       out_dtypes=(np.dtype(dtype),))
    program = check_native(model, {"x": x}, "triangle")
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    np.testing.assert_array_equal(got[0], want[0])
    rows, cols = shape[-2:]
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # j - i, against k unshifted
    keep = offset >= np.int64(k) if op == "Triu" else offset <= np.int64(k)
    np.testing.assert_array_equal(got[0], np.where(keep, x, np.zeros_like(x)))


@pytest.mark.parametrize("radius, alpha, beta, bias", [(2, 1e-4 / 5, 0.75, 1.0),
                                                       (1, 0.5, 0.75, 2.0),
                                                       (3, 2e-5, 0.5, 1.0),
                                                       (0, 0.1, 1.3, 0.0),
                                                       (2**40, 1e-6, 0.75, 1.0)], ids=str)
@pytest.mark.parametrize("shape", [(2, 7, 5, 6), (1, 96, 33, 31), (3, 4, 9)], ids=str)
def test_lrn_runs_natively_like_numpy(radius, alpha, beta, bias, shape):
    """AlexNet's and GoogLeNet's LRN (beta 0.75: square roots) and other betas (powf), any
    spatial rank; a window past the first and last channel, or wider than all of them (the
    radius clamped to the channels: no overflow, no huge pad); a zero bias with a zero input
    (0 / 0: NaN, as numpy)."""
    x = randn(rng(39), *shape) * 4
    x[0, 0, 0] = 0.0
    model = lite_graph("LRN", {"depth_radius": radius, "alpha": alpha, "beta": beta, "bias": bias,
                               "norm_region": "ACROSS_CHANNELS"}, [("x", x, False)])
    program = check_native(model, {"x": x}, "lrn")
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shape, axis", [((4, 128), 1), ((2, 5, 7, 3), 1), ((3, 20, 6), 0),
                                         ((2, 3, 40), 2), ((9,), 0)], ids=str)
def test_lp_normalization_runs_natively_like_numpy(p, shape, axis):
    """An embedding's L2 (or L1) normalization along the last axis, and along inner axes
    (lines read across the block); a zero line gives zeros, not 0 / 0."""
    x = randn(rng(40), *shape) * 3
    if x.ndim > 1:
        np.moveaxis(x, axis, 0)[:, 0] = 0.0  # a zero line
    model = lite_graph("LpNormalization", {"axis": axis, "p": p}, [("x", x, False)])
    program = check_native(model, {"x": x}, "lp_norm")
    got, _ = run(program, {"x": x})
    want, _ = run(program, {"x": x}, kernels=KERNELS)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6, atol=0)
    assert not np.isnan(got[0]).any()


def test_a_step_builder_packs_what_a_lowering_wrote():
    """build() writes slots, parameters and floats where the C step reads them; floats past
    float32's range become infinities (the clamps' "no bound"), a NaN stays a NaN; a
    lowering that resizes a list or overflows the parameters is an error, not a short step."""
    from provider.npu.ops.native_builder import INF, StepBuilder
    b = StepBuilder("conv", [3, 4], [5])
    b.slots(3, None, 4)
    b.slot_at(5, 5)
    b.params(7, 8)
    b.params(9)
    b.p[20] = 11
    b.f[:] = [-INF, INF, float("nan"), 0.5]
    step = b.build()
    assert step.op == native.OPS["conv"]
    assert list(step.slot) == [3, -1, 4, -1, -1, 5] + [-1] * (native.MAX_SLOTS - 6)
    assert list(step.p[:3]) == [7, 8, 9] and step.p[20] == 11 and sum(step.p) == 35
    assert step.f[0] == -np.inf and step.f[1] == np.inf and np.isnan(step.f[2])
    assert step.f[3] == 0.5
    b.p[30:] = [1, 2, 3]  # one value too many: the list grew
    with pytest.raises(ValueError, match="resized"):
        b.build()
    with pytest.raises(IndexError, match="parameters"):
        StepBuilder("conv", [], []).params(*range(native.MAX_PARAMS + 1))


def test_the_plan_names_each_slot_in_its_errors():
    """The C plan's slot names (one buffer of reprs, each slot pointing at its own) name the
    input a run got the wrong size for, whatever its position and characters."""
    x = np.zeros((2, 3), np.float32)
    names = ["first", "zweite Eingabe ä", "third"]
    model = LiteModel(name="names")
    ins = [model.add_tensor(LiteTensor.of(n, np.float32, x.shape)) for n in names]
    model.inputs = ins
    s1 = model.add_tensor(LiteTensor.of("s1", np.float32, ()))
    y = model.add_tensor(LiteTensor.of("y", np.float32, ()))
    model.add_node(LiteNode("a", "AddFusion", {}, [ins[0], ins[1]], [s1]))
    model.add_node(LiteNode("b", "AddFusion", {}, [s1, ins[2]], [y]))
    model.outputs = [y]
    program = compile_model(model, {n: x.shape for n in names})
    with Executor(program, pool()) as ex:
        out = np.empty((2, 3), np.float32)
        for position, name in enumerate(names):
            sizes = [x.nbytes] * 3
            sizes[position] -= 4
            with pytest.raises(BindingError, match=f"input {name!r}: got 20 bytes, expected 24"):
                ex.plan.execute([(x.ctypes.data, n) for n in sizes],
                                [(out.ctypes.data, out.nbytes)])
