"""Text checks for protobuf model files (ONNX, MindIR) read from untrusted bytes.

protobuf keeps a proto2 string field that is not UTF-8 as bytes instead of failing the
parse, and onnxruntime's C API ends names at a NUL character: either would surface far
from the file (a TypeError or UnicodeDecodeError deep in an importer, two values read as
one). `check_text` rejects both up front, naming the file and the field.
"""

from __future__ import annotations

from google.protobuf.message import Message

from converters.errors import InvalidModelError

# Fields that name things (values, nodes, ops): the ONNX spec makes them C identifiers.
IDENTIFIER_FIELDS = frozenset({"name", "input", "output", "op_type", "domain"})


def check_text(msg: Message, label: str) -> None:
    """InvalidModelError if a string field of `msg` is not UTF-8, or a name holds a NUL.

    Only string and message fields are read, so weight bytes (raw_data) are never copied.
    """
    for fd in msg.DESCRIPTOR.fields:
        repeated = _repeated(fd)
        if fd.type == fd.TYPE_MESSAGE:
            if repeated or msg.HasField(fd.name):
                for item in getattr(msg, fd.name) if repeated else (getattr(msg, fd.name),):
                    check_text(item, label)
        elif fd.type == fd.TYPE_STRING:
            value = getattr(msg, fd.name)
            for item in value if repeated else (value,):
                if not isinstance(item, str):
                    raise InvalidModelError(f"{label}: field {fd.full_name} is not valid UTF-8 "
                                            f"text ({bytes(item)[:40]!r})")
                if "\0" in item and fd.name in IDENTIFIER_FIELDS:
                    raise InvalidModelError(f"{label}: {fd.full_name} {item!r} contains a NUL "
                                            "character")


def _repeated(fd) -> bool:
    is_repeated = getattr(fd, "is_repeated", None)  # protobuf >= 5.x; `label` is gone in 7.x
    return is_repeated if is_repeated is not None else fd.label == fd.LABEL_REPEATED
