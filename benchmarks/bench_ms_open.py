"""Opening a big .ms file lazily: open time and how much of it gets paged in.

Writes a >= 100 MB model (temp dir), opens it with `reader.load(path, lazy=True)` and
reports, as a fraction of the file size, the file's pages resident in this process
(`Rss` of its mapping in /proc/self/smaps) after opening, after summarising (what
`litenpu inspect` does), and after reading every weight; plus the process RSS growth.
Baseline in the same run: `reader.load(path, lazy=False)`, which reads the whole file.
Target: < 2 % paged in until weights are read.

The file is evicted from the page cache before opening (fsync + POSIX_FADV_DONTNEED), as
for a model that was not just written. Freshly written files sit in the page cache as
large folios (up to 2 MiB on recent kernels), and a fault maps a whole folio: the "hot"
line shows that case, where the pages were resident anyway and nothing is read from disk.

    PYTHONPATH=. python3 benchmarks/bench_ms_open.py [--mb 100]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from converters.lite import reader, writer
from converters.lite.ir import LiteModel, LiteNode, LiteTensor
from converters.lite.summary import summarize
from provider.bench.process_memory import mapped_rss, rss_bytes

CNODE = 2


def big_model(total_mb: int, n_layers: int = 50) -> LiteModel:
    """A chain of MatMulFusion layers whose float32 weights add up to `total_mb` MB."""
    side = int(np.sqrt(total_mb * 2**20 / 4 / n_layers)) + 1
    m = LiteModel(name="big")
    rng = np.random.default_rng(0)
    x = m.add_tensor(LiteTensor.of("x", np.float32, (1, side), node_type=CNODE))
    m.inputs = [x]
    for i in range(n_layers):
        w = m.add_tensor(LiteTensor.of(f"w{i}", np.float32, (side, side),
                                       rng.standard_normal((side, side), np.float32)))
        y = m.add_tensor(LiteTensor.of(f"y{i}", np.float32, (1, side), node_type=CNODE))
        m.add_node(LiteNode(f"mm{i}", "MatMulFusion", {"transpose_b": True}, [x, w], [y]))
        x = y
    m.outputs = [x]
    return m.finalize_subgraph()


def evict(path: Path) -> None:
    """Drop the file's clean pages from the page cache (no privileges needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def open_hot(path: Path) -> int:
    """Mapped bytes after a lazy open while the whole file is in the page cache."""
    with open(path, "rb") as f:
        f.read()
    model = reader.load(path, lazy=True)
    resident = mapped_rss(path)
    del model
    return resident


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="weight megabytes (default 100)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.ms"
        t0 = time.perf_counter()
        writer.save(big_model(args.mb), path)
        write_s = time.perf_counter() - t0
        size = path.stat().st_size
        hot = open_hot(path)
        evict(path)

        rss0 = rss_bytes()
        t0 = time.perf_counter()
        model = reader.load(path, lazy=True)
        open_s = time.perf_counter() - t0
        opened = mapped_rss(path)
        rss_open = rss_bytes() - rss0
        summarize(model)
        summarized = mapped_rss(path)
        checksum = sum(float(t.data.sum(dtype=np.float64)) for t in model.tensors if t.is_const)
        touched = mapped_rss(path)
        del model

        t0 = time.perf_counter()
        eager = reader.load(path, lazy=False)
        eager_s = time.perf_counter() - t0
        del eager

    pct = 100 / size
    print(f"file: {size / 2**20:.1f} MiB written in {write_s:.2f} s")
    print(f"open lazily: {open_s * 1e3:.1f} ms  (read whole file: {eager_s * 1e3:.1f} ms, "
          f"{eager_s / open_s:.1f}x)")
    print(f"paged in after open: {opened / 2**10:.0f} KiB = {opened * pct:.3f} % of the file "
          f"(target < 2 %: {'ok' if opened * pct < 2 else 'MISSED'})")
    print(f"paged in after summary (inspect): {summarized * pct:.3f} %")
    print(f"hot page cache (just written): mapped after open {hot * pct:.1f} % "
          "(already resident, no disk reads)")
    print(f"paged in after reading every weight: {touched * pct:.1f} % (sum {checksum:.3g})")
    print(f"process RSS growth from opening: {rss_open / 2**20:.2f} MiB = {rss_open * pct:.3f} %")


if __name__ == "__main__":
    main()
