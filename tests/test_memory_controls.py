"""Memory controls through real sessions: memory_info, caller-owned memory, internal memory
groups, clones, shared weights, exhaustion, leaks. Results are checked against onnxruntime CPU."""

import gc
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from ort_models import NPU, STATIC, reference
from threads import run_threads

import models
import provider
from provider.bench.process_memory import smaps_rss
from provider.errors import BindingError, DeviceMemoryError
from provider.npu import session_memory
from provider.npu.memory import ARENA_RETAINED_BYTES, DevicePool, default_pool
from provider.npu.weights import block_bytes, weight_store
from provider.options import InvalidOptionError
from provider.session import InferenceSession

MODELS_DIR = Path(models.__file__).parent
INPUT = {"mobilenet_v2": ("image", (3, 64, 64)), "resnet_block": ("image", (3, 56, 56)),
         "transformer_encoder": ("tokens", (16, 64))}
_REFERENCE: dict[str, ort.InferenceSession] = {}


@pytest.fixture(scope="module", autouse=True)
def registered():
    provider.register()


def _options(batch: int) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.add_free_dimension_override_by_name("batch", batch)  # static: compiled at creation
    return options


def _session(name: str, batch: int = 1, **npu: str) -> InferenceSession:
    return InferenceSession(str(MODELS_DIR / f"{name}.onnx"), _options(batch),
                            providers=[("NPUExecutionProvider", npu), "CPUExecutionProvider"])


def _feeds(name: str, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    input_name, shape = INPUT[name]
    return {input_name: np.random.default_rng(seed).standard_normal((batch, *shape)).astype(np.float32)}


def _check(sess: InferenceSession, name: str, batch: int = 1, seed: int = 0) -> None:
    feeds = _feeds(name, batch, seed)
    if name not in _REFERENCE:
        _REFERENCE[name] = ort.InferenceSession(str(MODELS_DIR / f"{name}.onnx"),
                                                providers=["CPUExecutionProvider"])
    expected = _REFERENCE[name].run(None, feeds)
    for got, want in zip(sess.run(None, feeds), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)


def _in_use() -> int:
    gc.collect()
    return default_pool().stats().in_use


def _programs(sess: InferenceSession):
    return [e.program for ep in sess._npu_eps
            for e in ep.memory.executors]


def _check_in_threads(jobs: list[tuple[InferenceSession, str, list[int]]]) -> None:
    """One thread per (session, model name, seeds): each `_check`s its session at every seed;
    fails with whatever any thread raised."""

    def run(i: int) -> None:
        sess, name, seeds = jobs[i]
        for seed in seeds:
            _check(sess, name, seed=seed)

    run_threads(run, len(jobs))


def test_memory_info_equals_what_the_pool_hands_out():
    before = _in_use()
    sess = _session("mobilenet_v2")
    info = sess.memory_info()
    (program,) = _programs(sess)
    assert info.weights == block_bytes(program.weight_bytes) > 0
    assert info.internal == block_bytes(program.internal_bytes) > 0
    assert info.io == program.io_bytes and info.total == info.weights + info.internal + info.io
    assert (info.device_weights, info.device_internal) == (info.weights, info.internal)
    assert default_pool().stats().in_use - before == info.device_total
    _check(sess, "mobilenet_v2")
    after_run = sess.memory_info()
    assert default_pool().stats().in_use - before == after_run.device_total
    assert after_run.pool_in_use == default_pool().stats().in_use
    del sess, program  # (a Program compiled into device memory owns its weights there)
    assert _in_use() == before


def test_two_models_in_one_group_use_the_larger_arena_not_the_sum():
    before = _in_use()
    small = _session("transformer_encoder", internal_memory_group="pair")
    large = _session("mobilenet_v2", internal_memory_group="pair")  # grows the arena
    infos = small.memory_info(), large.memory_info()
    weights = sum(i.device_weights for i in infos)
    arena = max(i.internal for i in infos)
    assert infos[0].internal < infos[1].internal
    assert default_pool().stats().in_use - before == weights + arena
    assert infos[0].device_internal == infos[1].device_internal == arena
    for seed in range(2):  # one after the other, both after the growth
        _check(small, "transformer_encoder", seed=seed)
        _check(large, "mobilenet_v2", seed=seed)
    del small, large
    assert _in_use() == before


def test_two_threads_hammering_one_group_stay_correct():
    sessions = {name: _session(name, internal_memory_group="hammer")
                for name in ("resnet_block", "transformer_encoder")}
    _check_in_threads([(sess, name, list(range(6))) for name, sess in sessions.items()])


def test_eight_clones_in_eight_threads_share_the_weights():
    before = _in_use()
    sess = _session("resnet_block")
    info = sess.memory_info()
    clones = [sess.clone(_options(1)) for _ in range(8)]
    assert [_programs(c) for c in clones] == [_programs(sess)] * 8  # the same Program objects
    # weights once; one arena per clone
    assert default_pool().stats().in_use - before == info.device_weights + 9 * info.device_internal
    _check_in_threads([(c, "resnet_block", [i, i]) for i, c in enumerate(clones)])
    del sess, clones
    assert _in_use() == before


def test_shared_weights_are_stored_once_whatever_the_input_shape():
    before = _in_use()
    one = _session("mobilenet_v2", batch=1, share_weights="1")
    tensors, stored = weight_store().stats()
    mid = default_pool().stats().in_use
    two = _session("mobilenet_v2", batch=2, share_weights="1")
    assert weight_store().stats() == (tensors, stored)
    assert default_pool().stats().in_use - mid == two.memory_info().device_internal
    assert one.memory_info().device_weights == two.memory_info().device_weights > 0
    _check(one, "mobilenet_v2", batch=1)
    _check(two, "mobilenet_v2", batch=2)
    del one, two
    assert _in_use() == before
    assert weight_store().stats() == (0, 0)


def test_shared_weights_with_the_compile_cache_map_each_tensor_once(tmp_path):
    cache = {"cache_dir": str(tmp_path), "share_weights": "1"}
    for batch in (1, 2):  # cold sessions run from memory; the cache writer stores the entries
        _session("resnet_block", batch=batch, **cache)
    gc.collect()
    first = _session("resnet_block", batch=1, **cache)
    stored = weight_store().stats()
    assert stored[1] == 0 and first.memory_info().device_weights == 0  # views of the mapped entry
    second = _session("resnet_block", batch=2, **cache)  # another cache entry, same tensors
    assert weight_store().stats() == stored
    _check(first, "resnet_block", batch=1)
    _check(second, "resnet_block", batch=2)
    del first  # the tensors stay valid while another session uses them
    gc.collect()
    _check(second, "resnet_block", batch=2, seed=3)


def test_a_group_arena_grows_while_a_member_keeps_running():
    small = _session("transformer_encoder", internal_memory_group="grow")
    errors: list[BaseException] = []
    stop = threading.Event()

    def keep_running() -> None:
        seed = 0
        try:
            while not stop.is_set():
                _check(small, "transformer_encoder", seed=seed % 3)
                seed += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=keep_running)
    thread.start()
    try:
        large = _session("mobilenet_v2", internal_memory_group="grow")
        _check(large, "mobilenet_v2")
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert small.memory_info().device_internal == large.memory_info().internal


def _aligned(nbytes: int) -> np.ndarray:
    raw = np.zeros(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes]


def test_caller_owned_memory():
    before = _in_use()
    sess = _session("transformer_encoder", mem_alloc_outside="1")
    info = sess.memory_info()
    assert info.weights > 0 and info.internal > 0
    assert (info.device_weights, info.device_internal) == (0, 0)
    assert _in_use() == before  # nothing allocated for weights or arenas
    with pytest.raises(BindingError, match=f"weight memory of at least {info.weights} bytes"):
        sess.run(None, _feeds("transformer_encoder"))
    with pytest.raises(BindingError, match=f"needs {info.weights} bytes"):
        sess.set_weight_memory(_aligned(info.weights - 64))
    with pytest.raises(BindingError, match="not 64-byte aligned"):
        sess.set_weight_memory(_aligned(info.weights + 64)[1:info.weights + 1])
    sess.set_weight_memory(_aligned(info.weights))
    with pytest.raises(BindingError, match=f"internal memory of at least {info.internal} bytes"):
        sess.run(None, _feeds("transformer_encoder"))
    internal = provider.empty([info.internal], "uint8")  # an NPU OrtValue
    sess.set_internal_memory(internal)
    _check(sess, "transformer_encoder")
    clone = sess.clone(_options(1))  # shares the caller's weights, needs its own internal memory
    with pytest.raises(BindingError, match="internal memory"):
        clone.run(None, _feeds("transformer_encoder"))
    clone.set_internal_memory(_aligned(info.internal))
    _check(clone, "transformer_encoder", seed=1)


def test_sessions_given_one_internal_buffer_run_serialized_and_correct():
    a = _session("resnet_block", mem_alloc_outside="1")
    b = _session("transformer_encoder", mem_alloc_outside="1")
    shared = _aligned(max(a.memory_info().internal, b.memory_info().internal))
    for sess in (a, b):
        sess.set_weight_memory(_aligned(sess.memory_info().weights))
        sess.set_internal_memory(shared)
    _check_in_threads([(a, "resnet_block", list(range(6))), (b, "transformer_encoder", list(range(6)))])


def test_a_caller_device_buffer_is_retained_while_the_session_uses_it():
    before = _in_use()
    sess = _session("transformer_encoder", mem_alloc_outside="1")
    info = sess.memory_info()
    weights, internal = default_pool().allocate(info.weights), default_pool().allocate(info.internal)
    sess.set_weight_memory(weights)
    sess.set_internal_memory(internal)
    weights.release()  # the caller lets go: the session still holds them
    internal.release()
    _check(sess, "transformer_encoder")
    del sess
    assert _in_use() == before


def test_mem_alloc_outside_excludes_groups_and_shared_weights():
    with pytest.raises(InvalidOptionError, match="cannot be combined"):
        _session("resnet_block", mem_alloc_outside="1", internal_memory_group="g")


def test_caller_memory_from_an_imported_fd(tmp_path):
    sess = _session("resnet_block", mem_alloc_outside="1")
    info = sess.memory_info()
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(info.weights))
    with open(path, "r+b") as f:
        region = default_pool().import_fd(f.fileno(), 0, info.weights)
    sess.set_weight_memory(region)
    sess.set_internal_memory(_aligned(info.internal))
    _check(sess, "resnet_block")
    assert path.read_bytes() != bytes(info.weights)  # the weights went into the file


def test_memory_options_need_mem_alloc_outside():
    sess = _session("resnet_block")
    with pytest.raises(BindingError, match="mem_alloc_outside=1"):
        sess.set_internal_memory(_aligned(64))


def test_import_fd_and_wrap_are_zero_copy_inputs(tmp_path):
    sess = InferenceSession(STATIC, providers=NPU)
    x = _aligned(64).view(np.float32).reshape(2, 8)
    x[:] = np.random.default_rng(1).standard_normal((2, 8))
    wrapped = provider.wrap(x)
    path = tmp_path / "input.bin"
    path.write_bytes(x.tobytes() + bytes(4096))
    with open(path, "r+b") as f:
        imported = provider.import_fd(f.fileno(), 0, 64, (2, 8), "float32")
    for value in (wrapped, imported):
        assert value.device_name().lower() == "npu"
        np.testing.assert_array_equal(provider.view(value), x)
        start = provider.copy_stats()
        (y,) = sess.run(None, {"x": value})
        assert provider.copy_stats().bytes_to_device == start.bytes_to_device  # 0 bytes in
        np.testing.assert_allclose(y, reference(STATIC, {"x": x})[0], atol=1e-6)


def test_import_fd_and_wrap_reject_bad_regions(tmp_path):
    path = tmp_path / "r.bin"
    path.write_bytes(bytes(256))
    with open(path, "r+b") as f:
        with pytest.raises(BindingError, match="not 64-byte aligned"):
            provider.import_fd(f.fileno(), 8, 64, (2, 8), "float32")
        with pytest.raises(BindingError, match="needs 64 bytes, the region has 32"):
            provider.import_fd(f.fileno(), 0, 32, (2, 8), "float32")
        with pytest.raises(BindingError, match="too small"):
            provider.import_fd(f.fileno(), 0, 512, (2, 64), "float32")
    with pytest.raises(BindingError, match="aligned"):
        provider.wrap(_aligned(68)[4:].view(np.float32))


def test_device_exhaustion_mid_creation_leaves_the_pool_as_it_was(monkeypatch):
    probe = _session("transformer_encoder")
    weights = probe.memory_info().device_weights
    del probe
    small = DevicePool(weights + 64)  # room for the weights, not the arena
    monkeypatch.setattr(session_memory, "default_pool", lambda: small)
    for options in ({}, {"internal_memory_group": "tiny"}, {"share_weights": "1"}):
        with pytest.raises(DeviceMemoryError):
            _session("transformer_encoder", **options)
        gc.collect()
        assert small.stats().in_use == 0
    assert weight_store().stats() == (0, 0)


def _cycles(count: int, tmp_path) -> None:
    import resource

    def one() -> None:
        sess = InferenceSession(STATIC, providers=[("NPUExecutionProvider", {
            "cache_dir": str(tmp_path), "internal_memory_group": "leak"}), "CPUExecutionProvider"])
        clone = sess.clone()
        x = {"x": np.ones((2, 8), np.float32)}
        for s in (sess, clone):
            np.testing.assert_array_equal(s.run(None, x)[0], np.full((2, 8), 2, np.float32))

    before = _in_use()
    for _ in range(20):  # warm-up: caches, interned strings, allocator arenas
        one()
    gc.collect()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(count):
        one()
    assert _in_use() == before
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    assert grown_kib < 20 * 1024, f"peak RSS grew {grown_kib} KiB over {count} cycles"  # tolerance 20 MiB


def test_create_run_destroy_cycles_leak_nothing(tmp_path):
    _cycles(100, tmp_path)


@pytest.mark.slow
def test_a_thousand_cycles_leak_nothing(tmp_path):
    _cycles(1000, tmp_path)


def test_inspect_memory_prints_the_plan_of_a_real_session(capsys):
    from provider.cli import main
    from provider.memory_report import memory_plan

    path = MODELS_DIR / "resnet_block.onnx"
    plan = memory_plan(path)
    (program,) = plan.programs
    assert plan.dims == {"batch": 1}
    assert (plan.info.weights, plan.info.internal) == (program.weights, program.internal)
    assert plan.info.internal == _session("resnet_block").memory_info().internal
    assert main(["inspect", str(path), "--memory", "--no-placement"]) == 0
    out = capsys.readouterr().out
    assert f"memory (at batch=1): weights {program.weights}, internal {program.internal}" in out


def _pool_rss(pool: DevicePool) -> int:
    """Bytes of the pool's mapping resident now."""
    return smaps_rss(lambda head: head[0].startswith(f"{pool.base_address:x}-"))


def test_a_closed_sessions_arena_pages_wait_for_the_next_session():
    """A closing session's arena gives its block back to the pool but keeps its pages (up to
    memory.ARENA_RETAINED_BYTES): the next session's arena lands on them instead of faulting
    fresh zeroed pages in; trim() gives them back."""
    pool = default_pool()
    pool.trim()
    before = _pool_rss(pool)
    sess = _session("resnet_block", batch=4)
    _check(sess, "resnet_block", batch=4)
    assert sess.memory_info().pool_in_use < ARENA_RETAINED_BYTES
    used = _pool_rss(pool) - before  # weights, and the arena's pages the run touched
    assert used > 1 << 20
    del sess
    gc.collect()
    assert _pool_rss(pool) - before >= used - (64 << 10)
    again = _session("resnet_block", batch=4)
    _check(again, "resnet_block", batch=4)
    assert _pool_rss(pool) - before <= used + (256 << 10)  # the same pages, not new ones
    del again
    gc.collect()
    pool.trim()
    assert _pool_rss(pool) - before < (256 << 10)
