"""The device memory pool: allocator, refcounts, stats, fd export/import, wrapping, threads."""

import mmap
import os
import random
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threads import run_threads

from provider.bench.process_memory import rss_bytes
from provider.errors import BindingError, DeviceMemoryError, LitenpuError, UnsupportedError
from provider.npu import memory, native
from provider.npu.heap import PyHeap
from provider.npu.memory import DevicePool, default_pool

KIB = 1024


@pytest.fixture
def pool():
    p = DevicePool(256 * KIB)
    yield p
    assert p.stats().in_use == 0, "test leaked device memory"


def test_allocations_are_aligned_and_counted(pool):
    a = pool.allocate(100)
    b = pool.allocate(1)
    c = pool.allocate(1000, alignment=4096)
    assert [x.address % 64 for x in (a, b)] == [0, 0]
    assert c.address % 4096 == 0
    assert (a.nbytes, b.nbytes, c.nbytes) == (100, 1, 1000)
    s = pool.stats()
    assert s.in_use == 128 + 64 + 1024 and s.allocations == 3 and s.peak == s.in_use
    for x in (a, b, c):
        x.release()
    s = pool.stats()
    assert (s.in_use, s.allocations, s.peak, s.largest_free) == (0, 0, 1216, pool.capacity)


def test_best_fit_and_coalescing(pool):
    a, gap1, b, gap2, c = (pool.allocate(n) for n in (64, 1024, 64, 256, 64))
    gap1.release()
    gap2.release()
    small = pool.allocate(200)  # best fit: the 256-byte hole, not the first (1024) one
    assert small.address == gap2.address
    small.release()
    b.release()  # merges with both neighbouring holes into one 1344-byte block
    merged = pool.allocate(1024 + 64 + 256)
    assert merged.address == gap1.address
    tail = c.address + 64 - pool.base_address
    assert dict(pool._books.free_blocks()) == {tail: pool.capacity - tail}  # the only hole left
    for x in (a, c, merged):
        x.release()
    assert dict(pool._books.free_blocks()) == {0: pool.capacity}  # everything coalesced again


def test_zero_sized_buffer_gets_its_own_address(pool):
    a, b = pool.allocate(0), pool.allocate(0)
    assert a.address != b.address and a.view().size == 0
    a.release()
    b.release()


def test_views_are_the_device_memory(pool):
    with pool.allocate(4 * 6) as buf:
        v = buf.view(np.float32, (2, 3))
        v[:] = np.arange(6).reshape(2, 3)
        assert np.shares_memory(v, buf.view())
        np.testing.assert_array_equal(buf.view(np.float32), np.arange(6, dtype=np.float32))
        assert pool.contains(v.ctypes.data, v.nbytes)
        assert not pool.contains(v.ctypes.data, v.nbytes + 1)
        assert pool.find(v.ctypes.data + 5) is buf
        with pytest.raises(BindingError, match="too small"):
            buf.view(np.float32, (7,))
    assert not pool.contains(v.ctypes.data, 4)


def test_exhaustion_is_clear_and_leaves_the_pool_usable(pool):
    held = pool.allocate(200 * KIB)
    before = pool.stats()
    with pytest.raises(DeviceMemoryError, match="requested 131072 bytes") as info:
        pool.allocate(128 * KIB)
    assert info.value.requested == 128 * KIB
    assert info.value.available == pool.capacity - 200 * KIB
    assert pool.stats() == before
    held.release()
    pool.allocate(128 * KIB).release()


def test_bad_requests(pool):
    with pytest.raises(DeviceMemoryError, match="int >= 0"):
        pool.allocate(-1)
    with pytest.raises(DeviceMemoryError, match="power of two"):
        pool.allocate(8, alignment=96)
    with pytest.raises(DeviceMemoryError, match="positive int"):
        DevicePool(0)


def test_refcounts(pool):
    buf = pool.allocate(64)
    assert buf.retain() is buf and buf.refcount == 2
    buf.release()
    assert pool.stats().allocations == 1
    buf.release()
    assert buf.refcount == 0 and pool.stats().allocations == 0
    with pytest.raises(LitenpuError, match="double release"):
        buf.release()
    with pytest.raises(LitenpuError, match="already released"):
        buf.retain()
    with pytest.raises(LitenpuError, match="released"):
        buf.view()


def test_export_import_round_trip(pool):
    with pool.allocate(4096 + 256) as buf:
        buf.view()[:] = np.arange(buf.nbytes) % 251
        fd, offset, size = buf.export()
        # another mapping of the exported fd sees the same bytes, and writes go both ways
        other = mmap.mmap(fd, offset + size)
        assert other[offset : offset + size] == buf.view().tobytes()
        other[offset] = 77
        assert buf.view()[0] == 77
        del other
        imported = pool.import_fd(fd, offset, size)
        assert imported.address != buf.address
        np.testing.assert_array_equal(imported.view(), buf.view())
        assert pool.contains(imported.address, size)
        assert imported.export()[1:] == (offset, size)
        imported.release()
        assert not pool.contains(imported.address, size)


def test_import_from_a_foreign_fd(pool):
    fd = os.memfd_create("foreign")
    try:
        os.ftruncate(fd, 3 * mmap.ALLOCATIONGRANULARITY)
        os.pwrite(fd, b"\x01\x02\x03\x04", mmap.ALLOCATIONGRANULARITY + 128)
        with pool.import_fd(fd, mmap.ALLOCATIONGRANULARITY + 128, 64) as buf:
            assert buf.address % 64 == 0
            assert buf.view()[:4].tolist() == [1, 2, 3, 4]
        read_only = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        with pool.import_fd(read_only, mmap.ALLOCATIONGRANULARITY + 128, 64) as buf:
            assert buf.view()[:4].tolist() == [1, 2, 3, 4]
            assert not buf.view().flags.writeable
        os.close(read_only)
        with pytest.raises(BindingError, match="too small"):
            pool.import_fd(fd, 0, 4 * mmap.ALLOCATIONGRANULARITY)
        with pytest.raises(BindingError, match="aligned"):
            pool.import_fd(fd, 8, 64)
        with pytest.raises(BindingError, match="not usable"):
            pool.import_fd(10_000, 0, 64)
    finally:
        os.close(fd)


def aligned_array(nbytes: int, misalign: int = 0) -> np.ndarray:
    raw = np.zeros(nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + misalign
    return raw[start : start + nbytes]


def test_wrap_host_memory_without_copy(pool):
    host = aligned_array(256).view(np.float32)
    with pool.wrap(host, nbytes=256) as buf:
        assert buf.address == host.ctypes.data
        buf.view(np.float32)[:] = 5
        assert (host == 5).all()
        assert pool.contains(host.ctypes.data, host.nbytes)
        with pytest.raises(UnsupportedError, match="no file descriptor"):
            buf.export()
    assert not pool.contains(host.ctypes.data, host.nbytes)
    with pytest.raises(BindingError, match="not 64-byte aligned"):
        pool.wrap(aligned_array(256, misalign=8))
    with pytest.raises(BindingError, match="has 256 bytes, need 512"):
        pool.wrap(aligned_array(256), nbytes=512)
    with pytest.raises(BindingError, match="C-contiguous"):
        pool.wrap(aligned_array(256)[::2])
    with pytest.raises(BindingError, match="numpy array"):
        pool.wrap(b"abc")


def test_anonymous_fallback_without_memfd(monkeypatch):
    def no_memfd(*args):
        raise OSError("memfd_create not supported")

    monkeypatch.setattr(memory.os, "memfd_create", no_memfd)
    p = DevicePool(64 * KIB)
    assert p.fd == -1
    with p.allocate(64) as buf:
        buf.view()[:] = 1
        with pytest.raises(UnsupportedError):
            buf.export()
    p.close()



@pytest.mark.parametrize("path", ["native", "python"])
def test_trim_can_keep_the_low_free_pages(path):
    """trim(keep=n) frees every free page but the first n bytes' in address order (where the
    best fit places the next block): those keep their bytes, the rest come back zeroed."""
    p = DevicePool(128 << 20)
    heap = p.heap
    if path == "python":
        p.heap = None  # the trim loop of the pool without the C heap, over the same books
    buf = p.allocate(64 << 20)
    buf.view()[:] = 1
    buf.release()
    released = p.trim(keep=16 << 20)
    assert released == (128 - 16) << 20
    with p.allocate(64 << 20) as again:  # the same block: best fit from the low end
        view = again.view()
        assert view[: 16 << 20].min() == 1  # kept: not faulted in again
        assert view[16 << 20 :: 4096].max() == 0
    assert p.trim() == 128 << 20
    p.heap = heap
    p.close()

def test_capacity_is_committed_lazily():
    before = rss_bytes()
    p = DevicePool(1 << 30)
    buf = p.allocate(512 << 20)
    buf.view()[:: 1 << 20] = 1  # touch one byte per MiB: 512 pages
    assert rss_bytes() - before < 64 << 20
    buf.release()
    p.close()


@pytest.mark.parametrize("memfd", [True, False])
def test_trim_returns_free_pages_to_the_os(monkeypatch, memfd):
    if not memfd:
        monkeypatch.setattr(memory.os, "memfd_create", lambda *a: (_ for _ in ()).throw(OSError()))
    p = DevicePool(128 << 20)
    keep = p.allocate(4096)
    keep.view()[:] = 7
    buf = p.allocate(64 << 20)
    buf.view()[:] = 1
    touched = rss_bytes()
    buf.release()
    assert p.trim() >= (64 << 20)
    assert touched - rss_bytes() > 48 << 20
    assert (keep.view() == 7).all()  # live buffers keep their bytes
    with p.allocate(64 << 20) as again:
        assert again.view()[:: 1 << 16].max() == 0  # trimmed pages come back zeroed
    keep.release()
    p.close()


def test_close_refuses_live_buffers():
    p = DevicePool(64 * KIB)
    buf = p.allocate(64)
    with pytest.raises(LitenpuError, match="1 live buffers"):
        p.close()
    buf.release()
    p.close()
    assert p.fd == -1


def test_default_pool_is_a_configurable_singleton():
    p = default_pool()
    assert default_pool() is p and default_pool(p.capacity) is p
    with pytest.raises(DeviceMemoryError, match="already exists"):
        default_pool(p.capacity // 2)


# the child only builds a pool and exits, so threads of the parent (onnxruntime's) are harmless
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_gets_its_own_default_pool():
    parent = default_pool()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report whether the singleton was reset, then leave at once
        ok = default_pool(64 * KIB) is not parent
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.waitpid(pid, 0)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_writes_its_own_copy_of_the_pools(pool):
    """Sessions made before a fork run in both processes: the child's writes into an
    existing pool must not reach the parent's memory, nor the parent's reach the child's
    (they did: the pool is a shared mapping, and runs overwrote each other's arenas)."""
    closed = [DevicePool(64 * KIB) for _ in range(4)]  # closed before the fork, still referenced
    for other in closed:
        other.close()
        assert other not in memory._SHARED_POOLS  # the child must not try to copy them
    buf = pool.allocate(3 * mmap.PAGESIZE)
    buf.view()[:] = 1
    up_read, up_write = os.pipe()  # child -> parent
    down_read, down_write = os.pipe()  # parent -> child
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            os.close(up_read)
            os.close(down_write)
            ok = bool((buf.view() == 1).all())
            buf.view()[:] = 2  # the parent must not see this
            os.write(up_write, b"w")
            os.read(down_read, 1)  # the parent has written 3 meanwhile
            ok = ok and bool((buf.view() == 2).all())
            try:
                buf.export()
                ok = False  # the parent's fd would share the parent's pages, not the child's
            except UnsupportedError:
                pass
            other = pool.allocate(5 * mmap.PAGESIZE)
            other.view()[:] = 4
            other.release()
            ok = ok and pool.trim() >= 4 * mmap.PAGESIZE
        finally:
            os.write(up_write, b"1" if ok else b"0")
            os._exit(0)
    os.close(up_write)
    os.close(down_read)
    try:
        started = os.read(up_read, 1)
        untouched = bool((buf.view() == 1).all())
        buf.view()[:] = 3
    finally:
        os.write(down_write, b"g")
        child_ok = os.read(up_read, 1)
        os.waitpid(pid, 0)
        os.close(up_read)
        os.close(down_write)
    assert started == b"w" and untouched and child_ok == b"1"
    assert (buf.view() == 3).all() and buf.export()[0] == pool.fd >= 0
    buf.release()


def test_threads_allocate_and_free_concurrently(pool):
    def worker(tag: int) -> None:
        rng = random.Random(tag)
        held = []
        for _ in range(300):
            if held and rng.random() < 0.5:
                buf, value = held.pop(rng.randrange(len(held)))
                assert (buf.view() == value).all(), "another thread overwrote my buffer"
                buf.release()
            else:
                buf = pool.allocate(rng.randrange(1, 2048))
                buf.view()[:] = tag
                held.append((buf, tag))
        for buf, value in held:
            assert (buf.view() == value).all()
            buf.release()

    run_threads(worker)
    assert pool.stats().allocations == 0 and pool.stats().largest_free == pool.capacity


def test_shared_buffer_refcount_across_threads(pool):
    buf = pool.allocate(64)
    barrier = threading.Barrier(8)

    def worker(_: int) -> None:
        barrier.wait()
        for _ in range(1000):
            buf.retain()
            buf.release()

    run_threads(worker)
    assert buf.refcount == 1
    buf.release()


ops = st.lists(st.tuples(st.booleans(), st.integers(0, 9000), st.sampled_from([64, 128, 4096])),
               max_size=60)


@settings(max_examples=100, deadline=None)
@given(ops)
def test_property_allocator_invariants(sequence):
    p = DevicePool(64 * KIB)
    live = []
    for free, nbytes, alignment in sequence:
        if free and live:
            live.pop(nbytes % len(live)).release()
            continue
        try:
            live.append(p.allocate(nbytes, alignment))
        except DeviceMemoryError as exc:
            assert exc.available < nbytes or exc.available < nbytes + alignment
            continue
        assert live[-1].address % alignment == 0
        spans = sorted((b.address, b.address + max(b.nbytes, 1)) for b in live)
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))
        s = p.stats()
        assert s.in_use == sum(-(-max(b.nbytes, 1) // 64) * 64 for b in live)
        free = p._books.free_blocks()
        assert s.in_use + sum(size for _, size in free) <= p.capacity
        assert s.largest_free == max((size for _, size in free), default=0)
    for b in live:
        b.release()
    assert p._books.free_blocks() == [(0, p.capacity)]
    p.close()


@pytest.mark.skipif(native.library() is None, reason="the native library is not loaded")
@settings(max_examples=100, deadline=None)
@given(ops)
def test_property_the_c_heap_keeps_the_python_books(sequence):
    """The C heap (the pool's books with the native library) places every block where the
    Python books (without it) do, and agrees on every query."""
    base, capacity = 1 << 40, 64 * KIB
    c_heap, py_heap = native.Heap(base, capacity), PyHeap(base, capacity)
    live: list[int] = []
    for free, nbytes, alignment in sequence:
        if free and live:
            offset = live.pop(nbytes % len(live))
            assert c_heap.release(offset) == py_heap.release(offset)
        else:
            offset = c_heap.alloc(nbytes, alignment)
            assert offset == py_heap.alloc(nbytes, alignment)
            if offset >= 0:
                live.append(offset)
        assert c_heap.stats() == py_heap.stats()
        assert c_heap.free_blocks() == py_heap.free_blocks()
        for probe in (0, nbytes, *live):
            assert c_heap.block(probe) == py_heap.block(probe)
            assert c_heap.contains(base + probe, nbytes % 200) == py_heap.contains(base + probe, nbytes % 200)
    c_heap.grow(2 * capacity)
    py_heap.grow(2 * capacity)
    assert c_heap.free_blocks() == py_heap.free_blocks()
    assert c_heap.release(12345) == py_heap.release(12345) == -1
