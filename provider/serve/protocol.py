"""The JSON that `provider.serve` replicas speak over HTTP (documented in docs/serving.md).

POST body: `{"inputs": {"<input name>": <value>, ...}, "format": "list" | "npy"}`. A value
is a nested list of numbers (it takes that input's dtype) or `{"npy": "<base64 of a .npy
file>"}` (its own dtype, which must be the input's). The answer: `{"outputs": {"<output
name>": <value>, ...}, "replica": "<id>"}`, values as nested lists, or as `{"npy": ...}`
with `"format": "npy"` in the request. Both forms are exact: a list holds each float32
widened to float64, written so that it reads back bit for bit. `.npy` costs a fraction of
the bytes and of the parsing (a 1x3x64x64 float32 image: 66 KB and well under a millisecond
against 254 KB and several milliseconds as lists), so clients that can should use it; lists
are for curl and languages without a .npy reader. A request that does not fit the model
answers HTTP 400 with
`{"error": "<what, naming the input>"}`.
"""

from __future__ import annotations

import base64
import binascii
import io
import json

import numpy as np

from provider.errors import LitenpuError

FORMATS = ("list", "npy")


class RequestError(LitenpuError, ValueError):
    """A request body that is not the JSON `provider.serve` expects."""


def to_npy(array: np.ndarray) -> dict[str, str]:
    """`{"npy": base64 of the .npy bytes}` of an array."""
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return {"npy": base64.b64encode(buffer.getvalue()).decode("ascii")}


def from_npy(value: dict) -> np.ndarray:
    """The array of `{"npy": ...}` (ValueError when it is not a .npy file)."""
    return np.load(io.BytesIO(base64.b64decode(value["npy"], validate=True)),
                   allow_pickle=False)


def _encode(arrays: dict[str, np.ndarray], form: str) -> dict:
    if form == "npy":
        return {name: to_npy(np.asarray(v)) for name, v in arrays.items()}
    return {name: np.asarray(v).tolist() for name, v in arrays.items()}


def encode_request(feeds: dict[str, np.ndarray], form: str = "npy") -> bytes:
    """A POST body for `feeds`, inputs and answer in `form` ("npy" or "list")."""
    return json.dumps({"inputs": _encode(feeds, form), "format": form}).encode()


def decode_request(body: bytes, dtypes: dict[str, np.dtype]) -> tuple[dict[str, np.ndarray], str]:
    """(feeds, answer format) of a POST body; `dtypes` are the model's inputs (missing inputs
    and shapes are the session's to check). RequestError says what does not fit."""
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(f"the request body is not JSON: {e}") from e
    inputs = request.get("inputs") if isinstance(request, dict) else None
    if not isinstance(inputs, dict):
        raise RequestError('expected a JSON object {"inputs": {"<input name>": <nested list> '
                           'or {"npy": "<base64>"}}}; got '
                           + (f"an object with keys {sorted(request)}"
                              if isinstance(request, dict) else type(request).__name__))
    form = request.get("format", "list")
    if form not in FORMATS:
        raise RequestError(f"format {form!r}: expected one of {FORMATS}")
    feeds = {}
    for name, value in inputs.items():
        dtype = dtypes.get(name)
        if dtype is None:
            raise RequestError(f"unknown input {name!r}; the model's inputs are {list(dtypes)}")
        try:
            feeds[name] = from_npy(value) if isinstance(value, dict) else np.asarray(value, dtype)
        except (KeyError, TypeError, ValueError, binascii.Error) as e:
            raise RequestError(f"input {name!r}: expected a nested list of {dtype} numbers of "
                               f'one shape, or {{"npy": "<base64 .npy>"}}: {e}') from e
    return feeds, form


def encode_response(outputs: dict[str, np.ndarray], replica: str, form: str) -> bytes:
    """An answer's body, values in `form`."""
    return json.dumps({"outputs": _encode(outputs, form), "replica": replica}).encode()


def encode_error(message: str) -> bytes:
    """The body of a 400 answer."""
    return json.dumps({"error": message}).encode()


def decode_response(body: bytes) -> tuple[dict[str, np.ndarray], str]:
    """(outputs, replica id) of an answer's body, in either form."""
    answer = json.loads(body)
    return ({name: from_npy(v) if isinstance(v, dict) else np.asarray(v)
             for name, v in answer["outputs"].items()}, answer["replica"])
