"""The executor: zero-copy binding, copy accounting, binding errors, lifetimes, threads."""

import gc
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from threads import run_threads

from provider.errors import BindingError, DeviceMemoryError, LitenpuError, UnsupportedError
from provider.npu import program as fmt
from provider.npu.executor import (
    CopyStats,
    Executor,
    MemoryInfo,
    upload_weights,
    weights_are_mapped,
)
from provider.npu.memory import DevicePool
from provider.npu.program import Program, Slot, Step

KIB = 1024


@dataclass(frozen=True)
class ToyKernel:
    """A test-only kernel: same calling convention as provider.npu.ops.Kernel."""

    run: object


def _add(inputs, outputs, attrs):
    np.add(inputs[0], inputs[1], out=outputs[0])


def _scale(inputs, outputs, attrs):
    np.multiply(inputs[0], attrs["factor"], out=outputs[0])


def _broken(inputs, outputs, attrs):
    raise FloatingPointError("boom")


KERNELS = {"add": ToyKernel(_add), "scale": ToyKernel(_scale), "broken": ToyKernel(_broken)}

W = np.arange(6, dtype=np.float32).reshape(2, 3) / 4


def make_program(kernel: str = "add") -> Program:
    """t = x + w (arena); y = 2 t; z = t + x. Inputs x; outputs y, z."""
    slots = [
        Slot.of("x", "float32", (2, 3), "input"),
        Slot.of("w", "float32", (2, 3), "weight", 0),
        Slot.of("t", "float32", (2, 3), "internal", 0),
        Slot.of("y", "float32", (2, 3), "output"),
        Slot.of("z", "float32", (2, 3), "output"),
    ]
    steps = [Step(kernel, {}, [0, 1], [2]), Step("scale", {"factor": 2.0}, [2], [3]),
             Step("add", {}, [2, 0], [4])]
    return Program(slots, steps, [0], [3, 4], W.tobytes(), 64, {}, "toy")


def expected(x: np.ndarray) -> list[np.ndarray]:
    return [2 * (x + W), (x + W) + x]


def seeded_input(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)


@pytest.fixture
def pool():
    p = DevicePool(256 * KIB)
    yield p
    assert p.stats().in_use == 0, "test leaked device memory"


def check(results, x):
    for got, want in zip(results, expected(x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_device_resident_io_copies_nothing(pool):
    x = seeded_input()
    with Executor(make_program(), pool, kernels=KERNELS) as ex, pool.allocate(24) as xb, \
            pool.allocate(24) as yb, pool.allocate(32) as zb:
        xb.view(np.float32, (2, 3))[:] = x
        results = ex.run([xb], [yb, zb])
        assert ex.copy_stats == CopyStats(0, 0)
        check(results, x)
        assert np.shares_memory(results[0], yb.view())
        # device arrays (views of pool buffers) are in place too
        ex.run([xb.view(np.float32, (2, 3))], [yb.view(np.float32, (2, 3)), zb])
        assert ex.total_copy_stats == CopyStats(0, 0)
        gone = pool.allocate(24)
        ex.run([xb], [gone, zb])
        gone.release()  # a buffer released since the last run is refused, not reused
        with pytest.raises(LitenpuError, match="released"):
            ex.run([xb], [gone, zb])


def test_host_io_copies_exactly_the_io_bytes(pool):
    program = make_program()
    with Executor(program, pool, kernels=KERNELS) as ex:
        x = seeded_input()
        check(ex.run([x]), x)
        assert ex.copy_stats == CopyStats(24, 48)
        assert program.io_bytes == 72
        assert ex.memory_info() == MemoryInfo(24, 64, 72, 72, True)
        y, z = np.empty((2, 3), np.float32), np.zeros((2, 3), np.float32)
        results = ex.run([seeded_input(1)], [y, z])
        assert results[0] is y and results[1] is z  # caller's outputs written in place
        check([y, z], seeded_input(1))
        assert ex.total_copy_stats == CopyStats(48, 96)


def test_wrapped_host_memory_is_zero_copy(pool):
    raw = np.zeros(3 * 64 + 64, np.uint8)
    start = -raw.ctypes.data % 64
    x, y, z = (raw[start + 64 * i : start + 64 * i + 24].view(np.float32).reshape(2, 3)
               for i in range(3))
    x[:] = seeded_input()
    buffers = [pool.wrap(a) for a in (x, y, z)]
    with Executor(make_program(), pool, kernels=KERNELS) as ex:
        ex.run([x], [y, z])
        assert ex.copy_stats == CopyStats(0, 0)
        check([y, z], x)
    for b in buffers:
        b.release()


def test_strided_device_input_is_copied_and_counted(pool):
    with Executor(make_program(), pool, kernels=KERNELS) as ex, pool.allocate(48) as xb:
        wide = xb.view(np.float32, (2, 6))
        wide[:] = np.repeat(seeded_input(), 2, axis=1)
        x = wide[:, ::2]
        check(ex.run([x]), np.ascontiguousarray(x))
        assert ex.copy_stats.bytes_copied_in == 24


@pytest.mark.parametrize(
    "inputs, outputs, message",
    [
        ([np.zeros((2, 3), np.float64)], None, r"input 'x': got float64\[2, 3\], expected float32"),
        ([np.zeros((3, 2), np.float32)], None, r"input 'x'.*expected float32\[2, 3\]"),
        ([[1, 2, 3]], None, "expected a numpy array or DeviceBuffer, got list"),
        ([], None, r"takes 1 inputs \['x'\], got 0"),
        ([np.zeros((2, 3), np.float32)], [None], r"has 2 outputs \['y', 'z'\]"),
        ([np.zeros((2, 3), np.float32)], [np.zeros(6, np.float32), None], r"output 'y'"),
        ([np.zeros((2, 3), np.float32)], [None, np.zeros((2, 3), np.float32)[::1].copy()
                                          .view(np.int32)], r"output 'z'.*int32"),
    ],
)
def test_binding_errors_name_the_io_and_expectation(pool, inputs, outputs, message):
    with Executor(make_program(), pool, kernels=KERNELS) as ex:
        with pytest.raises(BindingError, match=message):
            ex.run(inputs, outputs)


def test_too_small_or_read_only_output_buffer(pool):
    x = seeded_input()
    with Executor(make_program(), pool, kernels=KERNELS) as ex, pool.allocate(16) as small:
        with pytest.raises(BindingError, match=r"output 'y': device buffer of 16 bytes is too small"):
            ex.run([x], [small, None])
        frozen = np.zeros((2, 3), np.float32)
        frozen.flags.writeable = False
        with pytest.raises(BindingError, match="'z'.*read-only"):
            ex.run([x], [None, frozen])
        with pool.allocate(24) as zb:
            frozen_device = zb.view(np.float32, (2, 3))
            frozen_device.flags.writeable = False
            with pytest.raises(BindingError, match="'z'.*read-only"):
                ex.run([x], [None, frozen_device])
        check(ex.run([x]), x)  # still usable after binding errors


def test_in_place_outputs_must_not_alias_inputs_or_each_other(pool):
    with Executor(make_program(), pool, kernels=KERNELS) as ex, pool.allocate(24) as xb, \
            pool.allocate(24) as yb:
        with pytest.raises(BindingError, match="output 'y' shares memory with input 'x'"):
            ex.run([xb], [xb, None])
        with pytest.raises(BindingError, match="output 'z' shares memory with output 'y'"):
            ex.run([xb], [yb, yb])
        x = seeded_input()
        ex.run([x], [np.empty_like(x), x])  # host I/O is staged: z may overwrite x afterwards
        np.testing.assert_allclose(x, expected(seeded_input())[1], rtol=1e-6)


def test_run_named(pool):
    x = seeded_input()
    with Executor(make_program(), pool, kernels=KERNELS) as ex:
        z = np.empty((2, 3), np.float32)
        out = ex.run_named({"x": x}, {"z": z})
        assert list(out) == ["y", "z"] and out["z"] is z
        check([out["y"], out["z"]], x)
        with pytest.raises(BindingError, match=r"missing inputs \['x'\], unknown names \['q', 'v'\]"):
            ex.run_named({"q": x}, {"v": z})


def test_weights_uploaded_or_used_in_place_from_a_mapped_program(pool, tmp_path):
    program = make_program()
    assert not weights_are_mapped(program)
    with Executor(program, pool, kernels=KERNELS) as ex:
        assert pool.stats().in_use == 64 + 64  # arena + uploaded weights
        check(ex.run([seeded_input()]), seeded_input())
    fmt.save(program, tmp_path / "toy.lnp")
    loaded = fmt.load(tmp_path / "toy.lnp")
    assert weights_are_mapped(loaded) and not weights_are_mapped(fmt.load(tmp_path / "toy.lnp", False))
    with Executor(loaded, pool, kernels=KERNELS) as ex:
        assert pool.stats().in_use == 64  # the arena only: weights stay in the file mapping
        assert ex.memory_info() == MemoryInfo(24, 64, 72, 0, False)
        check(ex.run([seeded_input()]), seeded_input())
        # the weight the run's numpy step read: a view of the mapping, read-only
        weight = ex._views[1] if ex.numpy_steps is None else ex.numpy_steps._views[1][1]
        assert np.shares_memory(weight, loaded.weights)
        assert not weight.flags.writeable
    # a Program whose blob already is device memory is used in place too
    with upload_weights(program, pool) as blob:
        resident = Program(**{**program.__dict__, "weights": blob.view()})
        with Executor(resident, pool, kernels=KERNELS) as ex:
            assert pool.stats().in_use == 64 + 64  # the caller's blob + the arena, no copy
            assert not ex.memory_info().weights_uploaded
            check(ex.run([seeded_input()]), seeded_input())


def test_caller_supplied_weights_and_arena_are_retained_and_released(pool):
    program = make_program()
    weights = upload_weights(program, pool)
    arena = pool.allocate(program.internal_bytes)
    a = Executor(program, pool, kernels=KERNELS, weights=weights, arena=arena)
    b = Executor(program, pool, kernels=KERNELS, weights=weights, arena=arena, lock=a._lock)
    assert (weights.refcount, arena.refcount) == (3, 3)
    check(b.run([seeded_input()]), seeded_input())
    a.close()
    b.close()
    assert (weights.refcount, arena.refcount) == (1, 1)
    with pytest.raises(BindingError, match="arena buffer has 64 bytes, the program needs 128"):
        Executor(Program(**{**program.__dict__, "internal_bytes": 128}), pool, kernels=KERNELS,
                 arena=arena)
    assert pool.stats().allocations == 2  # the failed constructor released its upload
    weights.release()
    arena.release()


def test_kernel_lookup_and_failures(pool):
    with pytest.raises(UnsupportedError, match="no NPU kernel 'mystery'; known kernels: add, broken"):
        Executor(make_program("mystery"), pool, kernels=KERNELS)
    with Executor(make_program("broken"), pool, kernels=KERNELS) as ex:
        with pytest.raises(LitenpuError, match=r"step 0 \(broken\) failed: FloatingPointError"):
            ex.run([seeded_input()])


def test_close_is_idempotent_and_gc_releases(pool):
    ex = Executor(make_program(), pool, kernels=KERNELS)
    ex.run([seeded_input()])
    ex.close()
    ex.close()
    with pytest.raises(LitenpuError, match="closed"):
        ex.run([seeded_input()])
    forgotten = Executor(make_program(), pool, kernels=KERNELS)
    forgotten.run([seeded_input()])
    assert pool.stats().in_use > 0
    del forgotten
    gc.collect()
    assert pool.stats().in_use == 0


def test_thousand_create_run_close_cycles_return_the_pool(pool):
    program = make_program()
    x = seeded_input()
    for _ in range(1000):
        with Executor(program, pool, kernels=KERNELS) as ex:
            ex.run([x])
        assert pool.stats().in_use == 0
    assert pool.stats().largest_free == pool.capacity


def test_exhaustion_raises_and_the_pool_stays_usable(pool):
    program = make_program()
    huge = Program(**{**program.__dict__, "internal_bytes": pool.capacity})
    with pytest.raises(DeviceMemoryError) as info:
        Executor(huge, pool, kernels=KERNELS)
    assert info.value.requested == pool.capacity
    assert pool.stats().in_use == 0  # the weight upload was rolled back
    with Executor(program, pool, kernels=KERNELS) as ex:
        filler = pool.allocate(pool.stats().largest_free)
        with pytest.raises(DeviceMemoryError):
            ex.run([seeded_input()])  # no room for the staging copy of x
        filler.release()
        check(ex.run([seeded_input()]), seeded_input())


def test_eight_threads_share_one_program(pool):
    program = make_program()

    def worker(seed: int) -> None:
        with Executor(program, pool, kernels=KERNELS) as ex:
            for i in range(200):
                x = seeded_input(seed * 1000 + i)
                check(ex.run([x]), x)

    run_threads(worker)


def test_default_registry_runs_real_kernels_like_onnxruntime(pool):
    b = np.random.default_rng(1).standard_normal((1, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        "add_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    program = Program(
        [Slot.of("x", "float32", (2, 3), "input"), Slot.of("b", "float32", (1, 3), "weight", 0),
         Slot.of("y", "float32", (2, 3), "output")],
        [Step("binary", {"op": "add", "activation": "RELU"}, [0, 1], [2])],
        [0], [2], b.tobytes(), 0, {}, "add_relu")
    x = seeded_input(3)
    with Executor(program, pool) as ex:
        (y,) = ex.run([x])
    np.testing.assert_allclose(y, sess.run(None, {"x": x})[0], rtol=1e-6, atol=1e-7)


def test_compiled_program_through_the_cache_format_matches_onnxruntime(pool, tmp_path):
    """The whole infra chain: ONNX -> Lite -> compile -> save -> mmap load -> device run."""
    # imported here so the rest of this file does not depend on the other rooms' modules
    from converters.onnx_import import import_onnx
    from provider.npu.compiler import compile_model

    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.1
    b2 = rng.standard_normal(8).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r1"]),
         helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c2", "r1"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])],
        "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (b2, "b2"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    lite, _ = import_onnx(model)
    fmt.save(compile_model(lite, {"x": (1, 3, 16, 16)}), tmp_path / "residual.lnp")
    program = fmt.load(tmp_path / "residual.lnp", verify=False)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with Executor(program, pool) as ex, pool.allocate(x.nbytes) as xb, \
            pool.allocate(want.nbytes) as yb:
        xb.view(np.float32, x.shape)[:] = x
        (y,) = ex.run([xb], [yb])
        assert ex.copy_stats == CopyStats(0, 0)
        # device memory: the arena and the two I/O buffers; weights stay in the file mapping
        assert not ex.memory_info().weights_uploaded
        blocks = [program.internal_bytes, x.nbytes, want.nbytes]
        assert pool.stats().in_use == sum(-(-max(n, 1) // 64) * 64 for n in blocks)
        assert y.shape == want.shape and y.dtype == want.dtype
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
