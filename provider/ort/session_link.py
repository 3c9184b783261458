"""What ties a `provider.InferenceSession` to the OrtEp onnxruntime creates for it.

onnxruntime creates a session's EP (CreateEp, then GetCapability and Compile) inside the
session's constructor. The session registers a `SessionLink` (its options as parsed at the
door, the memory family a clone joins, and the list its EPs add themselves to) and names it
in a session config entry, `litenpu.session`, which CreateEp reads with the others. So the EP
takes the typed options as they are, and a session knows its EPs, with no thread-local state.
A session built by plain onnxruntime code has no link: its EP parses the provider option
strings onnxruntime carries, once.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from provider.options import NpuOptions

__all__ = ["CONFIG_KEY", "SessionLink", "attach", "find"]

CONFIG_KEY = "litenpu.session"

_LINKS: weakref.WeakValueDictionary[int, SessionLink] = weakref.WeakValueDictionary()
_HANDLES = itertools.count(1)
_LOCK = threading.Lock()


@dataclass(eq=False)
class SessionLink:
    """One InferenceSession's side of the link (the session keeps it alive)."""

    options: NpuOptions
    family: Any = None  # provider.npu.session_memory.Family a clone's memory joins
    eps: list = field(default_factory=list)  # the NpuEps onnxruntime created for the session


def attach(link: SessionLink, session_options: Any) -> None:
    """Name `link` in `session_options` (an onnxruntime SessionOptions) for CreateEp."""
    with _LOCK:
        handle = next(_HANDLES)
        _LINKS[handle] = link
    session_options.add_session_config_entry(CONFIG_KEY, str(handle))


def find(config: dict[str, str]) -> SessionLink | None:
    """The link a session's config entries name, if any (and if its session still lives)."""
    handle = config.get(CONFIG_KEY)
    if handle is None or not handle.isdigit():
        return None
    with _LOCK:
        return _LINKS.get(int(handle))
