"""EPContext nodes: a compiled NPU partition saved inside an ONNX model, and loaded back.

When a session runs with `ep.context_enable=1` (or through `onnxruntime.ModelCompiler`),
Compile returns, per fused partition, a `com.microsoft:EPContext` node named like the fused
node, with `source="NPUExecutionProvider"` and `ep_cache_context` holding the partition:
- a Program (`provider.npu.program` bytes) when its input shapes are static: loading it
  compiles nothing;
- else a partition payload (`provider.ort.partition_payload`: a descriptor, then the Lite IR
  as `.ms` bytes): loading it reads the descriptor only; each concrete shape's Program comes
  from the compile cache at run time, or is compiled from the Lite IR, read only then. (A bare
  `.ms` image, as earlier versions wrote, is still read, in full.)
`ep.context_embed_mode=1` embeds those bytes. With 0, a partition whose Program sits in the
compile cache (`cache_dir` given) references that cache entry: `ep_cache_context` is the entry
directory's path, relative to the context model's directory when the cache is in it or beside it
(a model moved together with its cache still loads), else absolute; loading resolves it against
the model's directory and maps its Program (checked like a cache hit; a vanished or bad entry is
an InvalidModelError naming the file). Without a cache entry, 0 writes the bytes to
a file next to the context model (`ep.context_file_path`) and stores the file name (suffix
`.lnpu`), resolved against the model's directory when loading. GetCapability claims EPContext
nodes whose `source` is ours.
"""

from __future__ import annotations

import ctypes as C
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import provider
from converters.lite import reader as ms_reader
from converters.lite.ir import LiteModel
from provider.cache import CacheKey, entry, writer
from provider.cache.writer import Pending
from provider.errors import CacheError, InvalidModelError
from provider.npu import program as npu_program
from provider.npu.program import Program
from provider.ort import EP_NAME, abi
from provider.ort.partition_payload import StoredPartition, is_payload

log = logging.getLogger("litenpu.ort")

OP_TYPE = "EPContext"
DOMAIN = "com.microsoft"
SOURCE = EP_NAME
FILE_SUFFIX = ".lnpu"


# Session config key: where the context model will live when it is written elsewhere first
# (`litenpu compile` and the CacheSession write it in a temporary place, then move it); cache
# entry references are made relative to that place.
FINAL_PATH_KEY = "litenpu.context_model_path"


@dataclass(frozen=True)
class ContextOptions:
    """The session's EPContext settings (onnxruntime's `ep.context_*` config keys)."""

    enable: bool = False
    embed: bool = True
    file_path: str = ""  # where onnxruntime writes the context model (side files go beside it)
    final_path: str = ""  # where it will live: cache entry references are relative to it

    @classmethod
    def from_config(cls, config: dict[str, str]) -> ContextOptions:
        file_path = config.get("ep.context_file_path", "")
        return cls(enable=config.get("ep.context_enable", "0") == "1",
                   embed=config.get("ep.context_embed_mode", "1") != "0",
                   file_path=file_path, final_path=config.get(FINAL_PATH_KEY, file_path))


def is_ours(op_type: str, domain: str, attrs: dict) -> bool:
    """An EPContext node this provider wrote."""
    return op_type == OP_TYPE and domain == DOMAIN and attrs.get("source") == SOURCE


def to_bytes(program: Program) -> bytes:
    """A static partition's Program as stored in `ep_cache_context` (a dynamic partition's
    payload is `provider.ort.partition_source.PartitionSource.payload`)."""
    return npu_program.to_bytes(program)


def from_bytes(blob: bytes, where: str) -> Program | StoredPartition | LiteModel:
    """The partition stored in `ep_cache_context`: a Program, a partition payload (its
    descriptor read, its Lite IR not yet), or a bare `.ms` image (InvalidModelError when it is
    none of these)."""
    if blob.startswith(npu_program.MAGIC):
        return npu_program.from_bytes(blob, source=where)
    if is_payload(blob):
        return StoredPartition.from_bytes(blob, where)
    return ms_reader.loads(blob, source=where)


def create_node(ort: abi.Ort, name: str, inputs: list[str], outputs: list[str],
                blob: Callable[[], bytes] | Path, options: ContextOptions) -> tuple[int, Pending | None]:
    """A new OrtNode for the partition (onnxruntime takes ownership when Compile returns it),
    and the background write of its side file, if it has one.

    `blob`: what makes the partition's bytes, or (embed mode 0 only) the cache entry holding
    its Program. A side file is written by the cache writer (`provider.cache.writer`): the
    bytes of a dynamic partition are its whole Lite IR, weights included.
    """
    written = None
    if isinstance(blob, Path):
        payload, embed_mode = entry_reference(blob, options.final_path).encode(), 0
    elif options.embed:
        payload, embed_mode = blob(), 1
    else:
        if not options.file_path:
            raise InvalidModelError("ep.context_embed_mode=0 needs ep.context_file_path "
                                    "(where the context model is written)")
        file_name = f"{os.path.splitext(os.path.basename(options.file_path))[0]}_{name}{FILE_SUFFIX}"
        path = os.path.join(os.path.dirname(os.path.abspath(options.file_path)), file_name)
        written = _write_later(path, blob)
        payload, embed_mode = file_name.encode(), 0
    attrs = [_int_attr(ort, "main_context", 1), _int_attr(ort, "embed_mode", embed_mode),
             _str_attr(ort, "ep_cache_context", payload), _str_attr(ort, "source", SOURCE.encode()),
             _str_attr(ort, "ep_sdk_version", provider.__version__.encode())]
    array = (abi.vp * len(attrs))(*attrs)
    ins = (C.c_char_p * len(inputs))(*[n.encode() for n in inputs])
    outs = (C.c_char_p * len(outputs))(*[n.encode() for n in outputs])
    node = abi.vp()
    try:
        # The node must carry the fused node's name: onnxruntime matches them by name.
        ort.editor.CreateNode(OP_TYPE.encode(), DOMAIN.encode(), name.encode(), ins, len(inputs),
                              outs, len(outputs), array, len(attrs), C.byref(node))
    finally:
        for attr in array:  # CreateNode takes (and NULLs) the attributes it keeps
            if attr:
                ort.api.ReleaseOpAttr(attr)
    return node.value, written


def entry_reference(entry: Path, model_file: str) -> str:
    """How an EPContext node names a cache entry: relative to the context model's directory
    when the entry is under it or beside it (its cache directory is, or is a sibling of, the
    model's directory), so a model moved with its cache still loads; else absolute."""
    entry = entry.resolve()
    if model_file:
        base = Path(os.path.abspath(model_file)).parent.resolve()
        roots = (base,) if base.parent == base.parent.parent else (base, base.parent)
        if any(entry.is_relative_to(root) for root in roots):
            return os.path.relpath(entry, base)
    return str(entry)


@dataclass(frozen=True)
class LoadedContext:
    """What one of our EPContext nodes held."""

    source: Program | StoredPartition | LiteModel
    entry: Path | None  # the cache entry it references (embed mode 0 with a cache)


def load_node(attrs: Mapping[str, Any], model_path: str, where: str) -> LoadedContext:
    """The partition of one of our EPContext nodes (embedded, side file or cache entry)."""
    payload = attrs.get("ep_cache_context", b"")
    payload = payload.encode() if isinstance(payload, str) else bytes(payload)  # str: UTF-8 text
    if attrs.get("embed_mode", 1) == 1:
        return LoadedContext(from_bytes(payload, where), None)
    base = os.path.dirname(model_path) if model_path else os.getcwd()
    path = os.path.join(base, payload.decode())
    writer.wait(Path(path))  # written by this process's cache writer, perhaps still queued
    if not path.endswith(FILE_SUFFIX):
        return LoadedContext(open_cache_entry(Path(path), where), Path(path))
    stored = StoredPartition.open(path, where)  # a partition payload: its head only
    if stored is not None:
        return LoadedContext(stored, None)
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise InvalidModelError(f"EPContext file {path!r} of the NPU partition: {e}") from e
    return LoadedContext(from_bytes(blob, where), None)


def open_cache_entry(directory: Path, where: str) -> Program:
    """The Program of a cache entry an EPContext node references (mapped, checked as a hit)."""
    manifest_path = directory / entry.MANIFEST
    if not manifest_path.is_file():
        raise InvalidModelError(f"EPContext node {where}: its cache entry is gone: "
                                f"{manifest_path} does not exist (the cache was cleared or "
                                "evicted); compile the context model again")
    try:
        manifest = entry.read_manifest(directory)
        key = CacheKey.from_dict(manifest.get("key", {}))
        if key.digest != directory.name:
            raise CacheError(f"the entry holds key {key.digest}, not {directory.name}")
        program, _ = entry.open_entry(directory, key, str(manifest.get("cache_version", "")),
                                      manifest)
    except CacheError as e:
        raise InvalidModelError(f"EPContext node {where}: cache entry {directory} cannot be "
                                f"used: {e}") from e
    try:  # used now: least recently used eviction must not pick an entry a model refers to
        os.utime(directory)
    except OSError:
        pass  # a read-only cache keeps its order
    return program


def model_path(ort: abi.Ort, graph: int) -> str:
    """Path of the model file the graph came from ("" for a model loaded from bytes)."""
    return ort.string("Graph_GetModelPath", graph)


def _int_attr(ort: abi.Ort, name: str, value: int) -> int:
    data, out = C.c_int64(value), abi.vp()
    ort.api.CreateOpAttr(name.encode(), C.byref(data), 1, abi.ATTR_INT, C.byref(out))
    return out.value


def _str_attr(ort: abi.Ort, name: str, value: bytes) -> int:
    out = abi.vp()
    ort.api.CreateOpAttr(name.encode(), C.c_char_p(value), len(value), abi.ATTR_STRING, C.byref(out))
    return out.value


def _write_later(path: str, blob: Callable[[], bytes]) -> Pending:
    def write() -> None:
        try:
            _write_atomic(path, blob())
        except Exception as exc:
            log.warning("EPContext file %s not written: %s", path, exc)
            raise

    return writer.submit(Path(path), write)


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise CacheError(f"EPContext file {path}: cannot write it: {exc.strerror or exc}") from exc
