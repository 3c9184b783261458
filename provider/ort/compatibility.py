"""Compiled-model compatibility: what an EPContext model's Programs were compiled for, and
whether this litenpu runs them as they are.

onnxruntime asks the EP for a compatibility string when it writes an EPContext model
(`OrtEp::GetCompiledModelCompatibilityInfo`, stored in the model's metadata as
`ep_compatibility_info.NPUExecutionProvider`) and asks the factory to judge one
(`OrtEpFactory::ValidateCompiledModelCompatibilityInfo`: `get_model_compatibility_for_ep_devices`
in Python, and session creation). The string is `provider.cache.keys.program_stamp` as JSON: the
Program format, the litenpu version, the device and the compile options. The verdict:

- unsupported: not litenpu's, another device, a Program format this litenpu cannot read, or
  compile options it does not know (or values it cannot parse);
- prefer recompilation: readable, but this litenpu would compile something else: an older
  format, another litenpu version, or options added since;
- optimal: what this litenpu compiles with those options.

The factory sees no session, so it judges the option set, not the values a session asks for:
loading a Program compiled with other compile options than the session's is refused when the
EP builds the kernel (`check_program`), so a context model never runs with options the session
did not ask for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from provider import __version__
from provider.cache.keys import DEVICE, program_stamp
from provider.errors import InvalidModelError
from provider.npu.program import FORMAT_VERSION, READABLE_VERSIONS, Program
from provider.options import OPTIONS, CompileOptions, InvalidOptionError

__all__ = ["PREFIX", "NOT_APPLICABLE", "OPTIMAL", "PREFER_RECOMPILATION", "UNSUPPORTED",
           "NAMES", "Verdict", "info", "validate", "check_program"]

PREFIX = "litenpu:"

# OrtCompiledModelCompatibility
NOT_APPLICABLE, OPTIMAL, PREFER_RECOMPILATION, UNSUPPORTED = 0, 1, 2, 3
NAMES = {NOT_APPLICABLE: "not applicable", OPTIMAL: "optimal",
         PREFER_RECOMPILATION: "prefer recompilation", UNSUPPORTED: "unsupported"}


@dataclass(frozen=True)
class Verdict:
    """A compatibility status (OrtCompiledModelCompatibility) and why."""

    status: int
    reason: str

    def __str__(self) -> str:
        return f"{NAMES[self.status]}: {self.reason}"


def info(options: CompileOptions) -> str:
    """The compatibility string of the Programs this litenpu compiles with `options`."""
    return PREFIX + json.dumps(program_stamp(options.as_dict()), sort_keys=True,
                               separators=(",", ":"))


def validate(text: str) -> Verdict:
    """How this litenpu can use Programs whose compatibility string is `text`."""
    stamp = _stamp(text)
    if stamp is None:
        return Verdict(UNSUPPORTED, f"not a litenpu compatibility string: {text[:200]!r}")
    if stamp["device"] != DEVICE:
        return Verdict(UNSUPPORTED, f"compiled for device {stamp['device']!r}, this litenpu "
                                    f"runs {DEVICE!r}")
    version = stamp["format_version"]
    if version not in READABLE_VERSIONS:
        return Verdict(UNSUPPORTED, f"Program format {version}; this litenpu reads "
                                    f"{list(READABLE_VERSIONS)}")
    options, problem = _options(stamp["options"])
    if problem:
        return Verdict(UNSUPPORTED, problem)
    if version != FORMAT_VERSION:
        return Verdict(PREFER_RECOMPILATION, f"Program format {version}; this litenpu "
                                             f"compiles format {FORMAT_VERSION}")
    if stamp["litenpu_version"] != __version__:
        return Verdict(PREFER_RECOMPILATION, f"compiled by litenpu {stamp['litenpu_version']}; "
                                             f"this is {__version__}")
    missing = sorted(set(CompileOptions().as_dict()) - set(options))
    if missing:
        return Verdict(PREFER_RECOMPILATION, f"compiled before the compile option(s) "
                                             f"{', '.join(missing)} existed")
    return Verdict(OPTIMAL, f"litenpu {__version__}, Program format {FORMAT_VERSION}, "
                            f"compile options {options}")


def check_program(program: Program, session: CompileOptions, where: str) -> None:
    """InvalidModelError unless `program` (from an EPContext node) was compiled with the
    session's compile options: the session's options define what it runs."""
    options, problem = _options(program.options)
    if problem:
        raise InvalidModelError(f"EPContext node {where}: {problem}; recompile the context "
                                "model with this litenpu")
    compiled = replace(CompileOptions(), **options)
    if compiled != session:
        raise InvalidModelError(
            f"EPContext node {where} was compiled with compile options {compiled.as_dict()}; "
            f"this session compiles with {session.as_dict()}: open it with the same provider "
            "options, or compile the context model again with these")


def _stamp(text: str) -> dict[str, Any] | None:
    """The stamp in a compatibility string, or None when it is not one of ours."""
    if not text.startswith(PREFIX):
        return None
    try:
        stamp = json.loads(text[len(PREFIX):])
    except ValueError:
        return None
    keys = {"format_version": int, "litenpu_version": str, "device": str, "options": dict}
    if not isinstance(stamp, dict) or any(not isinstance(stamp.get(k), t) or
                                          isinstance(stamp.get(k), bool)
                                          for k, t in keys.items()):
        return None
    return stamp


def _options(recorded: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Compile options as this litenpu reads them (by field name, typed), or a problem:
    names it does not know, or values it cannot parse."""
    known = {o.field: o for o in OPTIONS if o.group == "compile"}
    unknown = sorted(set(recorded) - set(known))
    if unknown:
        return {}, (f"compile option(s) {', '.join(unknown)} unknown to litenpu {__version__} "
                    f"(it knows {', '.join(sorted(known))})")
    try:
        return {name: known[name].parse(name, raw) for name, raw in recorded.items()}, ""
    except InvalidOptionError as exc:
        return {}, f"compile options {recorded}: {exc}"
