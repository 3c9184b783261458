"""Where a fused partition's Programs come from: the compile cache, else a compile of its Lite IR.

`PartitionSource.program(shapes)` is what the data plane asks for a shape it has no Program
for yet. With a compile cache the key comes from the partition's `PartitionDescriptor` (its
content digest and nodes: no Lite IR needed), so a hit maps the stored Program and nothing
else. Only a miss (or no cache) compiles, from the partition's Lite IR: held when the
partition was just cut from GetCapability's import, or read back from the EPContext payload it
was stored in (`StoredPartition`) the first time a shape must be compiled (counted as an
import), then kept while more shapes may come. Each outcome is a `PartitionCacheStats`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from converters.lite import reader as ms_reader
from converters.lite import writer as ms_writer
from converters.lite.ir import LiteModel
from provider.cache import CONTEXT, OFF, PartitionCacheStats, PartitionKeys
from provider.cache.keys import lite_digest, within
from provider.cache.residency import pages_present, pages_spanned
from provider.npu.compiler import compile_model
from provider.npu.memory import DeviceBuffer
from provider.npu.program import Program
from provider.options import CompileOptions
from provider.ort.capability import Whole
from provider.ort.partition_payload import PartitionDescriptor, StoredPartition, pack

__all__ = ["PartitionSource", "compile_counted", "content_digest", "key_options", "record",
           "with_input_shapes"]

log = logging.getLogger("litenpu.ort")

Allocate = Callable[[int], DeviceBuffer] | None


def key_options(ep) -> dict:
    """What a partition's Program depends on besides its content and input shapes."""
    return {**ep.options.compile.as_dict(), "onnxruntime": ep.ort.version_string}


def content_digest(lite: LiteModel, model_fingerprint: str) -> str:
    """A partition's content digest: the model's fingerprint with the partition's structure,
    or, without one, the partition with its weights hashed."""
    if model_fingerprint:
        return within(model_fingerprint, lite_digest(lite, weights=False))
    return lite_digest(lite)


class PartitionSource:
    """The Programs of one partition, per input shapes (see the module docstring). Build one
    with `held` (Lite IR in hand) or `stored` (an EPContext payload)."""

    def __init__(self, ep, name: str, *, lite: LiteModel | None = None,
                 fingerprint: str | None = None, stored: StoredPartition | None = None):
        self.name = name
        self.cache = ep.cache
        self.compile_options = ep.options.compile
        self.counters = ep.counters
        self._model_name = ep.options.cache.model_name
        self._model_fingerprint = ep.options.cache.model_fingerprint
        self._key_options = key_options(ep) if ep.cache is not None else {}
        self._lite = lite
        self._fingerprint = fingerprint
        self._stored = stored
        self._ahead: Whole | None = None  # the Program GetCapability compiled (adopted)
        self._lock = threading.Lock()  # one reader of the stored Lite IR

    @classmethod
    def held(cls, ep, name: str, lite: LiteModel, fingerprint: str | None = None
             ) -> PartitionSource:
        """A partition whose Lite IR is in hand; its content digest computed when a key or a
        payload needs it (unless given)."""
        return cls(ep, name, lite=lite, fingerprint=fingerprint)

    @classmethod
    def adopted(cls, ep, name: str, whole: Whole) -> PartitionSource:
        """A graph GetCapability compiled whole: its Program is the one for its shapes (stored
        by the cache, where there is one, as a compile would be)."""
        source = cls(ep, name, lite=whole.lite, fingerprint=whole.fingerprint)
        source._ahead = whole
        whole.program.name = name  # named as a Program compiled here
        return source

    @classmethod
    def stored(cls, ep, name: str, stored: StoredPartition) -> PartitionSource:
        """A partition read back from its EPContext payload (descriptor only, so far)."""
        return cls(ep, name, stored=stored)

    @cached_property
    def descriptor(self) -> PartitionDescriptor:
        """Content digest, nodes and I/O of the partition."""
        if self._stored is not None:
            return self._stored.descriptor
        fingerprint = self._fingerprint or content_digest(self._lite, self._model_fingerprint)
        return PartitionDescriptor.of(self._lite, fingerprint)

    @cached_property
    def keys(self) -> PartitionKeys | None:
        """The cache keys of the partition's Programs (None without a cache)."""
        if self.cache is None:
            return None
        return self.descriptor.keys(model_name=self._model_name, options=self._key_options)

    def lite(self) -> LiteModel:
        """The partition's Lite IR: held, or read from its payload now (once, counted)."""
        with self._lock:
            if self._lite is None:
                start = time.perf_counter()
                self.counters.imports += 1
                self._lite = ms_reader.loads(self._stored.image(), source=self._stored.where)
                self.counters.spent("import", time.perf_counter() - start)
                log.info("NPU partition %s: Lite IR read from its EPContext payload (%.1f ms)",
                         self.name, (time.perf_counter() - start) * 1e3)
            return self._lite

    def payload(self) -> bytes:
        """The partition as an EPContext payload (descriptor + Lite IR image)."""
        if self._stored is not None and self._lite is None:
            image = self._stored.image()
        else:
            image = ms_writer.dumps(self._lite)
        return pack(self.descriptor, image)

    def program(self, shapes: dict[str, tuple[int, ...]], allocate: Allocate = None
                ) -> tuple[Program, PartitionCacheStats]:
        """The Program for `shapes`: mapped from the cache, else compiled (and stored by the
        cache's background writer: the session runs from the compiled Program). `allocate`
        places a compiled Program's packed weights (e.g. straight into device memory).
        An adopted Program stands for the compile of its shapes (its seconds counted)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.shapes != shapes:
            ahead = None

        def compile_() -> Program:
            return ahead.program if ahead is not None else self._compile(shapes, allocate)

        def earlier(program: Program) -> float:
            """The adopted Program's compile seconds, when it is the one used."""
            return ahead.seconds if ahead is not None and program is ahead.program else 0.0

        if self.keys is None:
            start = time.perf_counter()
            program = compile_()
            return program, record(self.name, OFF, "", shapes, program, 0.0,
                                   earlier(program) + time.perf_counter() - start, None)
        start = time.perf_counter()
        program, outcome = self.cache.get_or_compile(self.keys.key(shapes), compile_,
                                                     background=True)
        self.counters.spent("cache", time.perf_counter() - start - outcome.compile_seconds)
        stats = PartitionCacheStats.of(self.name, shapes, outcome)
        return program, dataclasses.replace(
            stats, compile_seconds=stats.compile_seconds + earlier(program))

    def _compile(self, shapes: dict[str, tuple[int, ...]], allocate: Allocate) -> Program:
        return compile_counted(self.counters, self.lite(), shapes, self.compile_options,
                               allocate)

    def close(self) -> None:
        """Let go of the Lite IR and the payload's file."""
        self._lite = None
        if self._stored is not None:
            self._stored.close()


def compile_counted(counters, lite: LiteModel, shapes: dict[str, tuple[int, ...]],
                    options: CompileOptions, allocate: Allocate) -> Program:
    """compile_model at the concrete `shapes` the partition runs with, counted in the EP's
    `counters` (one more compile, its seconds) when it succeeds."""
    start = time.perf_counter()
    program = compile_model(with_input_shapes(lite, shapes), shapes, options, allocate=allocate)
    counters.compiles += 1
    counters.spent("compile", time.perf_counter() - start)
    return program


def record(name: str, status: str, reason: str, shapes: dict[str, tuple[int, ...]],
           program: Program, load_seconds: float, compile_seconds: float,
           entry: Path | None) -> PartitionCacheStats:
    """The record of a Program that did not come through get_or_compile (context, no cache),
    logged."""
    weights = program.weights_array()
    touched = pages_present(weights) if entry is not None else None
    log.info("NPU partition %s: program %s (%.1f ms)", name,
             "loaded from its EPContext node" if status == CONTEXT else "compiled",
             (load_seconds + compile_seconds) * 1e3)
    return PartitionCacheStats(name, dict(shapes), status, reason, load_seconds, compile_seconds,
                               touched, pages_spanned(weights),
                               str(entry) if entry is not None else None)


def with_input_shapes(lite: LiteModel, shapes: dict[str, tuple[int, ...]]) -> LiteModel:
    """A copy of `lite` whose graph inputs declare the concrete `shapes` onnxruntime ran with.

    The partition's value infos may lack a rank (an intermediate onnxruntime could not infer);
    the imported model then declares () and would refuse the real shape.
    """
    tensors = list(lite.tensors)
    for i in lite.inputs:
        if tensors[i].name in shapes:
            tensors[i] = dataclasses.replace(tensors[i], shape=tuple(shapes[tensors[i].name]))
    return dataclasses.replace(lite, tensors=tensors)
