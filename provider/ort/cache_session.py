"""CacheSession: a warm start builds the session from a stored EPContext model, not the source.

MindSpore Lite's CacheSession skips graph conversion and CPU scheduling when the NPU already
holds a compiled cache for CachePath/ModelName/CacheVersion. Here (DESIGN section 6): when a
session is created from a model *file* with the provider options `cache_dir` and `model_name`
(+ `cache_version`), one cache entry (the *session entry*, keyed by the model name, the file's
absolute path, its content fingerprint and the NPU options) stores the session's EPContext
model (embed mode 0: its EPContext nodes reference the partitions' cache entries, by paths
relative to the session entry, so the cache directory can move). The
fingerprint of an unchanged file comes from its memo (`provider.cache.fingerprint`: one
`os.stat` per file, no reading), so a warm start has onnxruntime load that small model
instead of the source, which is not opened at all, and each NPU kernel maps its Program from
the cache. A changed file has another fingerprint, hence no session entry: the normal path
runs with `ep.context_*` set, and the EPContext model it produced is stored afterwards.
Which path ran, and why, is `SessionCacheStats.path`/`reason`.

A cache entry holds a Program: the session entry's is an empty one (no slots, steps or
weights) named after the model; the real Programs stay in the partition entries, stored once.
A dynamic-shape partition's EPContext node references a side file, stored in the session
entry too, holding its descriptor and Lite IR (`provider.ort.partition_payload`): a warm
session reads the descriptor only, and each shape's Program comes from its own cache entry on
the first run of that shape; the Lite IR is read only for a shape no entry holds. A model with no NPU
partition, or with a static partition whose Program is in no cache entry (an unwritable
cache), gets no session entry. A stored model of our EPContext nodes only (the source record
says so) is created with onnxruntime's graph optimisations off: there is nothing to optimise.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort

from provider.cache import CompileCache, PartitionCacheStats, session_key, writer
from provider.cache.writer import Pending
from provider.errors import CacheError
from provider.npu.program import Program
from provider.options import NpuOptions
from provider.ort import epcontext
from provider.ort.compute import FusedKernel

__all__ = ["SessionCacheStats", "CacheSession", "CONTEXT_MODEL", "SOURCE_STAT"]

log = logging.getLogger("litenpu.cache")

CONTEXT_MODEL = "context.onnx"  # extra file of the session entry: the EPContext model
SOURCE_STAT = "source.json"  # extra file: the source file's path and content fingerprint
WARM, COLD = "context-model", "source"
NPU_ONLY = "npu_only"  # field of the source record: the EPContext model has no CPU node


@dataclass(frozen=True)
class SessionCacheStats:
    """How a session got its NPU Programs: the CacheSession path and every partition's record.

    `path`: "context-model" (warm: built from the stored EPContext model), "source" (the model
    was parsed; the EPContext model stored afterwards unless `reason` says why not), or "" when
    no CacheSession applies (no cache_dir/model_name, or the model was given as bytes).
    """

    path: str
    reason: str
    partitions: list[PartitionCacheStats] = field(default_factory=list)


def _has_config(options: ort.SessionOptions, key: str) -> bool:
    try:
        options.get_session_config_entry(key)
    except RuntimeError:  # onnxruntime's way of saying "not set"
        return False
    return True


class CacheSession:
    """The CacheSession decision for one session: the warm model, or storing after a cold one."""

    def __init__(self, source: str, npu: NpuOptions, cache: CompileCache,
                 sess_options: ort.SessionOptions):
        self.source = os.path.abspath(source)
        self.cache = cache
        self.fingerprint = npu.cache.model_fingerprint
        # what shapes the session's partitions and Programs: placement and compile options
        options = {"placement": asdict(npu.placement), "compile": npu.compile.as_dict(),
                   "graph_optimization_level": str(sess_options.graph_optimization_level)}
        self.key = session_key(self.source, fingerprint=self.fingerprint,
                               model_name=npu.cache.model_name, options=options)
        self.path, self.reason = COLD, ""
        self._tmp: str | None = None
        self._npu_only = False  # the stored EPContext model holds our EPContext nodes only
        self._written: Pending | None = None  # the session entry's background write

    @classmethod
    def plan(cls, path_or_bytes: Any, npu: NpuOptions, sess_options: ort.SessionOptions
             ) -> CacheSession | None:
        """A CacheSession when the model is a file and the options give cache_dir + model_name
        (not when the caller asks for an EPContext model of their own: `ep.context_enable`).
        `npu.cache.model_fingerprint` must be the file's content fingerprint."""
        cache = CompileCache.from_options(npu.cache)
        if not isinstance(path_or_bytes, (str, os.PathLike)) or cache is None \
                or not npu.cache.model_name or _has_config(sess_options, "ep.context_enable"):
            return None
        return cls(os.fspath(path_or_bytes), npu, cache, sess_options)

    def _record(self) -> dict[str, str]:
        return {"path": self.source, "fingerprint": self.fingerprint}

    def warm_model(self) -> str | None:
        """The stored EPContext model's path when the entry for this content is valid.

        The entry's key holds the source's content fingerprint, so a changed file finds no
        entry (its fingerprint is recomputed only when its stat changed, see
        `provider.cache.fingerprint`)."""
        if self.cache.get(self.key) is None:  # a bad entry is logged by get()
            self.reason = "no valid session entry for this model content"
            return None
        directory = self.cache.path(self.key)
        try:
            recorded = json.loads((directory / SOURCE_STAT).read_text())
        except (OSError, ValueError) as exc:
            self.reason = f"cannot read the session entry's source record: {exc}"
            return None
        if not isinstance(recorded, dict) or \
                {k: recorded.get(k) for k in ("path", "fingerprint")} != self._record():
            self.reason = f"session entry records another source {recorded!r}"
            return None
        self.path, self.reason = WARM, f"session entry {directory}"
        self._npu_only = recorded.get(NPU_ONLY) is True
        return str(directory / CONTEXT_MODEL)

    @contextmanager
    def loading(self, options: ort.SessionOptions) -> Iterator[None]:
        """Around onnxruntime's creation of the stored EPContext model: when it holds our
        EPContext nodes only, no graph optimisation applies to it (each node is one fused
        kernel, no CPU node is left), so the passes are skipped, and onnxruntime's own
        intra-op threads would have no kernel to run, so unless the caller sized them none
        are started (each spun beside the NPU's first run: 1 ms of a warm MobileNetV2's);
        the caller's settings are restored afterwards (the session keeps its own copy)."""
        level, threads = options.graph_optimization_level, options.intra_op_num_threads
        if self._npu_only:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            if not threads:
                options.intra_op_num_threads = 1
        try:
            yield
        finally:
            options.graph_optimization_level = level
            options.intra_op_num_threads = threads

    def cold(self, options: ort.SessionOptions, why: str = "") -> None:
        """Set up the normal path: stat the source, ask onnxruntime for an EPContext model."""
        if why:  # the stored EPContext model failed to load
            log.warning("CacheSession %s: stored EPContext model unusable (%s); loading the "
                        "source", self.source, why)
            self.cache.discard(self.key)
        self.path = COLD
        self._tmp = tempfile.mkdtemp(prefix="litenpu-ctx-")
        # removed by store(), or with this object when the session fails to build
        weakref.finalize(self, shutil.rmtree, self._tmp, ignore_errors=True)
        final = self.cache.path(self.key) / CONTEXT_MODEL  # its entries: "../<digest>"
        for key, value in (("ep.context_enable", "1"), ("ep.context_embed_mode", "0"),
                           ("ep.context_file_path", os.path.join(self._tmp, CONTEXT_MODEL)),
                           (epcontext.FINAL_PATH_KEY, str(final))):
            options.add_session_config_entry(key, value)

    def store(self, kernels: Sequence[FusedKernel]) -> None:
        """After a cold session: store its EPContext model + the source stat as the entry, on
        the cache writer (after the Programs and side files it names; `stats()` waits).

        Not when a static kernel's Program is in no cache entry (an unwritable cache): its
        EPContext node would hold the whole Program.
        """
        self.reason = "storing the session entry"
        self._written = writer.submit(self.cache.path(self.key), lambda: self._store_now(kernels))

    def _store_now(self, kernels: Sequence[FusedKernel]) -> None:
        try:
            self.reason = self._store(kernels)
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
        log.info("CacheSession %s: %s", self.source, self.reason)

    def _store(self, kernels: Sequence[FusedKernel]) -> str:
        if not kernels:
            return "not stored: no NPU partition"
        uncached = [k.name for k in kernels if k.cache_entry is None and not k.per_shape]
        if uncached:
            return f"not stored: partition(s) {uncached} not in cache entries"
        if self._tmp is None:
            return "not stored: no EPContext model was asked for"
        unwritten = [k.name for k in kernels
                     if (not k.per_shape and not k.cache_entry.is_dir())
                     or (k.context_written is not None and k.context_written.error())]
        if unwritten:  # their writes, queued before this one, failed (and were logged)
            return f"not stored: partition(s) {unwritten} were not written"
        try:  # the EPContext model and its side files (Lite IR of dynamic partitions)
            files = {f.name: f.read_bytes() for f in Path(self._tmp).iterdir()}
        except OSError as exc:
            return f"not stored: cannot read onnxruntime's EPContext model ({exc})"
        if CONTEXT_MODEL not in files:
            return "not stored: onnxruntime wrote no EPContext model"
        record = {**self._record(), NPU_ONLY: _npu_only(files[CONTEXT_MODEL])}
        marker = Program(slots=[], steps=[], inputs=[], outputs=[], internal_bytes=0,
                         name=f"CacheSession {os.path.basename(self.source)}")
        try:
            self.cache.discard(self.key)  # a stale or bad session entry is replaced
            directory = self.cache.put(self.key, marker, extra_files={
                **files, SOURCE_STAT: json.dumps(record).encode()})
        except CacheError as exc:
            return f"not stored: {exc}"
        return f"stored session entry {directory}"

    def stats(self, partitions: list[PartitionCacheStats]) -> SessionCacheStats:
        """The session's cache record (once the session entry's write is done)."""
        if self._written is not None:
            self._written.error()  # the reason says how it went
            self._written = None
        return SessionCacheStats(self.path, self.reason, partitions)


def _npu_only(context_model: bytes) -> bool:
    """Whether an EPContext model's nodes are all ours (nothing left for the CPU)."""
    try:
        graph = onnx.load_model_from_string(context_model).graph
    except Exception:  # noqa: BLE001 - an unreadable model is checked when it is loaded
        return False
    return bool(graph.node) and all(
        epcontext.is_ours(n.op_type, n.domain,
                          {a.name: a.s.decode(errors="replace") for a in n.attribute
                           if a.type == onnx.AttributeProto.STRING}) for n in graph.node)
