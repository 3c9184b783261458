"""Model formats by file extension, and file-to-file conversion between them (atomic writes).

`format_of(path)` is the one place a file's extension names its format (".onnx", ".ms",
".mindir"); sessions, `litenpu inspect` and `convert` all dispatch on it. Every source
format reads into Lite IR (`read`) and every destination format writes from it:
`READERS[ext](path, progress) -> (LiteModel, ConversionReport)` and
`WRITERS[ext](model, path, progress)`. Adding a format (e.g. `.mindir` as a source) is one
function registered with `register_reader` / `register_writer`; `convert` needs no change.
Writers never leave a half-written destination: they write to a temporary file in the
destination's folder and rename it into place.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import onnx

from converters.atomic import replacing
from converters.errors import UnsupportedError
from converters.lite.ir import LiteModel
from converters.report import ConversionReport, CustomNode

Progress = Callable[[int, int], None] | None
Reader = Callable[[Path, Progress], tuple[LiteModel, ConversionReport]]
Writer = Callable[[LiteModel, Path, Progress], None]

READERS: dict[str, Reader] = {}
WRITERS: dict[str, Writer] = {}

# Above this many weight bytes, weights leave the main file (protobuf / flatbuffers cap 2 GiB).
EXTERNAL_WEIGHTS_ABOVE = 1 << 30
EXTERNAL_TENSOR_MIN = 1 << 10


def register_reader(ext: str, fn: Reader) -> Reader:
    """Make `convert` read files ending in `ext` (".mindir", ...) with `fn`."""
    if ext in READERS:
        raise ValueError(f"a reader for {ext} is already registered")
    READERS[ext] = fn
    return fn


def register_writer(ext: str, fn: Writer) -> Writer:
    """Make `convert` write files ending in `ext` with `fn` (which must write atomically)."""
    if ext in WRITERS:
        raise ValueError(f"a writer for {ext} is already registered")
    WRITERS[ext] = fn
    return fn


LAYOUTS = ("NCHW", "NHWC")


def convert(src: str | os.PathLike, dst: str | os.PathLike, *,
            progress: Progress = None, layout: str = "NCHW") -> ConversionReport:
    """Convert model file `src` to `dst`, formats chosen by extension; what was done.

    `progress(done, total)` is called as nodes are converted (for long conversions).
    `layout="NHWC"` rewrites NCHW layers to NHWC (see `converters.nhwc`): what MindSpore
    Lite's own CPU runtime needs; the default keeps the source layout (the NPU takes NCHW).
    """
    if layout not in LAYOUTS:
        raise UnsupportedError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    src, dst = Path(src), Path(dst)
    read = _lookup(READERS, src, "read")
    write = _lookup(WRITERS, dst, "write")
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such model file")
    if src.resolve() == dst.resolve():
        raise UnsupportedError(f"{src}: source and destination are the same file")
    model, report = read(src, progress)
    if layout == "NHWC":
        from converters.nhwc import to_nhwc

        model = to_nhwc(model)
    write(model, dst, progress)
    report.source, report.destination = str(src), str(dst)
    return report


def format_of(path: str | os.PathLike, default: str | None = None) -> str:
    """The format of a model file, by extension: ".onnx", ".ms" or ".mindir". An unknown
    extension is `default`, or, without one, an UnsupportedError listing the known ones."""
    ext = Path(path).suffix.lower()
    if ext in READERS:
        return ext
    if default is not None:
        return default
    raise UnsupportedError(f"{path}: {ext or 'extensionless'} files are not a model format "
                           f"litenpu knows (known: {', '.join(sorted(READERS))})")


def read(path: str | os.PathLike, progress: Progress = None
         ) -> tuple[LiteModel, ConversionReport]:
    """A model file of any known format as Lite IR, and what its reading did."""
    path = Path(path)
    return READERS[format_of(path)](path, progress)


def _lookup(table: dict, path: Path, verb: str):
    ext = format_of(path, default="")
    if ext not in table:
        known = ", ".join(sorted(table))
        raise UnsupportedError(f"{path}: cannot {verb} {path.suffix.lower() or 'extensionless'} "
                               f"files (known: {known})")
    return table[ext]


# ---- formats -----------------------------------------------------------------------------

def _read_onnx(path: Path, progress: Progress) -> tuple[LiteModel, ConversionReport]:
    from converters.onnx_import import import_onnx

    return import_onnx(path, progress=progress)


def _read_ms(path: Path, progress: Progress) -> tuple[LiteModel, ConversionReport]:
    from converters.lite import reader
    from converters.onnx_import import weight_bytes

    model = reader.load(path)
    report = ConversionReport(source=str(path))
    report.mapped = Counter(n.op for n in model.nodes if n.op != "Custom")
    report.custom = [CustomNode(n.name, n.attrs.get("type", "?"), "carried as Custom")
                     for n in model.nodes if n.op == "Custom"]
    report.weight_bytes = weight_bytes(model)
    return model, report


def _read_mindir(path: Path, progress: Progress) -> tuple[LiteModel, ConversionReport]:
    from converters.mindir import import_mindir

    return import_mindir(path, progress=progress)


def _write_ms(model: LiteModel, path: Path, progress: Progress) -> None:
    from converters.lite import writer

    weights = sum(t.data.nbytes for t in model.tensors if t.data is not None)
    threshold = EXTERNAL_TENSOR_MIN if weights > EXTERNAL_WEIGHTS_ABOVE else None
    writer.save(model, path, external_threshold=threshold)


def _write_onnx(model: LiteModel, path: Path, progress: Progress) -> None:
    from converters.onnx_export import export_onnx

    save_onnx_atomic(export_onnx(model, progress=progress), path)


def save_onnx_atomic(model: onnx.ModelProto, path: Path) -> None:
    """Save `model` at `path` (weights in `<name>.data` when over 2 GiB), all or nothing."""
    path = Path(path)
    big = model.ByteSize() > EXTERNAL_WEIGHTS_ABOVE
    location = path.name + ".data"
    with replacing(path) as tmp:
        onnx.save(model, tmp, save_as_external_data=big, all_tensors_to_one_file=True,
                  location=location)
        if big:
            os.replace(tmp.parent / location, path.parent / location)


register_reader(".onnx", _read_onnx)
register_reader(".ms", _read_ms)
register_reader(".mindir", _read_mindir)
register_writer(".ms", _write_ms)
register_writer(".onnx", _write_onnx)
