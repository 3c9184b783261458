"""Weights MindSpore stores outside the .mindir file (TensorProto.external_data).

MindSpore's split save writes `<name>_variables/data_<k>` files that start with a 64-byte
header whose first byte is 1 when the writer was little-endian; each tensor then names its
file (relative to the model's directory), offset and length. The file is untrusted: the
byte order, bounds and location are checked and every failure names the tensor.
"""

from __future__ import annotations

import os
import pathlib

from converters.errors import InvalidModelError
from converters.mindir._generated import mind_ir_pb2 as pb

LITTLE_ENDIAN_MARK = 1  # first byte of a data file written on a little-endian machine


class ExternalDataReader:
    """Reads external tensor bytes relative to one model directory (None: bytes input)."""

    def __init__(self, base_dir: pathlib.Path | None) -> None:
        self.base_dir = base_dir.resolve() if base_dir is not None else None
        self.files: list[str] = []

    def read(self, tensor: str, ext: pb.TensorProto.ExternalDataProto, nbytes: int) -> bytes:
        """The `nbytes` bytes of `tensor`; InvalidModelError for any defect in the reference."""
        path = self._path(tensor, ext.location)
        length = ext.length if ext.HasField("length") else nbytes
        if ext.offset < 0 or length != nbytes:
            raise InvalidModelError(
                f"tensor {tensor!r}: external data offset {ext.offset} / length {length} invalid "
                f"(the tensor needs {nbytes} bytes)")
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < 1:
                    raise InvalidModelError(f"tensor {tensor!r}: external data file {ext.location!r} is empty")
                mark = f.read(1)[0]
                if mark != LITTLE_ENDIAN_MARK:
                    raise InvalidModelError(
                        f"tensor {tensor!r}: external data file {ext.location!r} was written on a "
                        f"big-endian device (byte-order mark {mark}); litenpu loads little-endian data only")
                if ext.offset + length > size:
                    raise InvalidModelError(
                        f"tensor {tensor!r}: external data file {ext.location!r} is truncated "
                        f"({size} bytes, tensor needs bytes {ext.offset}..{ext.offset + length})")
                f.seek(ext.offset)
                data = f.read(length)
        except OSError as e:
            raise InvalidModelError(
                f"tensor {tensor!r}: cannot read external data {ext.location!r}: {e}") from e
        if ext.location not in self.files:
            self.files.append(ext.location)
        return data

    def _path(self, tensor: str, location: str) -> pathlib.Path:
        if self.base_dir is None:
            raise InvalidModelError(
                f"tensor {tensor!r}: weights are external ({location!r}); load the model from its "
                "path (or pass base_dir) so the data file can be found")
        if "\0" in location:
            raise InvalidModelError(f"tensor {tensor!r}: external data location {location!r} "
                                    "contains a NUL character")
        path = (self.base_dir / location).resolve()
        if not location or os.path.isabs(location) or not path.is_relative_to(self.base_dir):
            raise InvalidModelError(
                f"tensor {tensor!r}: external data location {location!r} is outside the model directory")
        return path
