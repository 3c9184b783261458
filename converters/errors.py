"""Exceptions raised by the converters.

`LitenpuError` is the root of every litenpu exception; `provider.errors` re-exports these
classes so users catch one hierarchy whichever room raised.
"""


class LitenpuError(Exception):
    """Base class of every error litenpu raises on purpose."""


class InvalidModelError(LitenpuError, ValueError):
    """A model file or graph is malformed: names the source and the defect."""


class UnsupportedError(LitenpuError):
    """A valid model uses something this part of litenpu cannot handle."""
