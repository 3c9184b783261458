"""`provider.InferenceSession`: onnxruntime's InferenceSession with the NPU provider wired in.

It is a real `onnxruntime.InferenceSession` subclass. It accepts the provider list and options
as onnxruntime users write them (`providers=["NPUExecutionProvider", "CPUExecutionProvider"]`,
`provider_options=[{...}, {}]`), validates the NPU options once (unknown keys list the valid
ones), registers the library, and selects the NPU device with `add_provider_for_devices`.
`.ms` and `.mindir` models are converted to ONNX in memory first (through Lite IR). Extras over onnxruntime:

- EP errors surface: onnxruntime's silent retry on CPU after an EP failure is disabled;
- strict mode (`session.disable_cpu_ep_fallback=1`): a model the NPU does not take whole is
  an UnsupportedError listing the nodes left on CPU and why;
- stderr stays clean: SessionOptions whose log_severity_level is unset (-1) get ERROR (3,
  `set_default_severity`), so onnxruntime's warnings (e.g. VerifyEachNodeIsAssignedToAnEp
  when some nodes run on CPU, which `partition()` explains) are not printed while its errors
  are; a level the caller set is kept;
- a feed or bound buffer of the wrong name, dtype or shape raises `BindingError` naming the
  input: bindings are checked when bound; `run()` lets onnxruntime check the feeds and, only
  when it refuses them, checks them again to name what is wrong (a run costs what
  onnxruntime's own does; the checks are `provider.bindings`);
- profiling (`enable_profiling`): every NPU step of every run is an event, in onnxruntime's
  profile JSON or, on onnxruntime without the EP profiler hook, the EP's own trace file
  (`npu_profile_file` after `end_profiling()`; see provider.ort.profiling);
- `partition()` says which nodes run on the NPU and why the others don't, and is logged at
  INFO once the session exists; `copy_stats()` gives the CPU<->NPU bytes copied;
- compile cache (provider options `cache_dir`, `model_name`, ...): `cache_stats()` lists
  where each partition's Program came from; a model file with a `model_name` is a
  CacheSession (`provider.ort.cache_session`): a warm start loads the stored EPContext model and
  never parses the source.
- memory controls (`provider.npu.session_memory`): `memory_info()`, caller-owned memory
  (`set_weight_memory` / `set_internal_memory`), `clone()` for one session per thread.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import onnxruntime as ort

from converters.convert import format_of
from converters.convert import read as read_model
from converters.onnx_export import export_onnx
from provider import exit_gate
from provider.bindings import CheckedIOBinding, check_feeds
from provider.cache import writer
from provider.cache.fingerprint import MEMO_DIR, source_fingerprint
from provider.errors import BindingError, InvalidModelError, UnsupportedError
from provider.npu.memory import default_pool
from provider.npu.session_memory import Family, SessionMemoryInfo, merge_infos
from provider.options import InvalidOptionError, NpuOptions
from provider.ort import EP_NAME, abi, pinned_pool, profiling, session_link
from provider.ort.cache_session import CacheSession, SessionCacheStats
from provider.ort.capability import Placement
from provider.ort.ep import STRICT_KEY, NpuEp
from provider.ort.registration import ep_devices, register
from provider.ort.run_modes import RUN_KEY
from provider.ort.session_link import SessionLink
from provider.ort.status import model_load_errors, raise_typed, typed_errors
from provider.ort.tensors import copy_stats, view
from provider.placement import NodePlacement, PlacementSummary

log = logging.getLogger("litenpu.ort")

CPU_EP = "CPUExecutionProvider"
# onnxruntime's refusal under session.disable_cpu_ep_fallback=1 (it names no node)
STRICT_REFUSAL = "fallback to CPU EP has been explicitly disabled"
_CALLS = exit_gate.calls
_severity = {"default": 3}  # onnxruntime's ERROR: its errors are printed, its warnings are not


def set_default_severity(level: int) -> None:
    """The onnxruntime log severity of NPU sessions whose SessionOptions set none (default 3,
    ERROR; the CLI, which reports each error itself on one line, uses 4, FATAL)."""
    _severity["default"] = int(level)


def normalize_providers(providers: Sequence | None, provider_options: Sequence[dict] | None
                        ) -> tuple[NpuOptions | None, list[str]]:
    """(NPU options or None when the NPU is not asked for, the other provider names).

    Accepts onnxruntime's forms: names, or (name, options) tuples, with or without a parallel
    `provider_options` list. InvalidOptionError for bad NPU options, UnsupportedError for a
    provider the NPU cannot be combined with.
    """
    providers = list(providers or [])
    if provider_options is not None and len(provider_options) != len(providers):
        raise InvalidOptionError(f"provider_options has {len(provider_options)} entries for "
                                 f"{len(providers)} providers; give one dict per provider")
    npu, others = None, []
    for i, entry in enumerate(providers):
        name, options = (entry if isinstance(entry, tuple) else (entry, None))
        if provider_options is not None:
            options = {**(options or {}), **provider_options[i]}
        if name == EP_NAME:
            npu = NpuOptions.parse(options)
        else:
            others.append(name)
    if npu is not None and any(name != CPU_EP for name in others):
        raise UnsupportedError(f"{EP_NAME} can be combined only with {CPU_EP}; got "
                               f"{[n for n in others if n != CPU_EP]}")
    return npu, others


def _model_source(path_or_bytes: Any) -> Any:
    """The model as onnxruntime takes it: ONNX files (and files of no known format, which
    onnxruntime reads itself) as they are; `.ms` / `.mindir` files as ONNX bytes (via Lite IR)."""
    if not isinstance(path_or_bytes, (str, os.PathLike)) or \
            format_of(path_or_bytes, default=".onnx") == ".onnx":
        return path_or_bytes
    lite, _ = read_model(path_or_bytes)
    return export_onnx(lite).SerializeToString()


def _device_region(buffer: Any) -> Any:
    """Caller-owned memory as the device takes it: an NPU OrtValue becomes its numpy view
    (which keeps the OrtValue alive); DeviceBuffers and aligned arrays pass as they are."""
    return view(buffer) if isinstance(buffer, ort.OrtValue) else buffer


def _with_fingerprint(path_or_bytes: Any, npu: NpuOptions) -> NpuOptions:
    """With a compile cache, the options carrying the model's content fingerprint (cache
    entries belong to one content, whatever the model_name)."""
    cache = npu.cache
    if cache.model_fingerprint or cache.cache_dir is None:
        return npu
    fingerprint = source_fingerprint(path_or_bytes, cache.cache_dir / MEMO_DIR,
                                     record_later=True)  # by the writer, once the session is made
    return replace(npu, cache=replace(cache, model_fingerprint=fingerprint))


def _with_step_trace(npu: NpuOptions, options: ort.SessionOptions) -> NpuOptions:
    """With `enable_profiling` on an onnxruntime that has no EP profiler hook (1.23), the
    options writing the NPU steps to the EP's own trace file beside onnxruntime's profile."""
    if (not options.enable_profiling or npu.runtime.profile_file_prefix is not None
            or abi.runtime_api_version(ort.__version__) >= profiling.HOOK_SINCE):
        return npu
    prefix = options.profile_file_prefix.rstrip("_") + "_npu"
    return replace(npu, runtime=replace(npu.runtime, profile_file_prefix=prefix))


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a session is built, as it was after.
    Building keeps thousands of new objects (Lite IR, Programs, plans), and the collections
    they set off walk every object of the process: 4-8% of a zoo model's creation, measured
    alternating in one process. Reference counting still frees everything else at once."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class InferenceSession(ort.InferenceSession):
    """onnxruntime.InferenceSession that can run partitions on the NPU (see module docstring)."""

    def __init__(self, path_or_bytes: str | bytes | os.PathLike, sess_options: ort.SessionOptions | None = None,
                 providers: Sequence | None = None, provider_options: Sequence[dict] | None = None,
                 **kwargs: Any):
        npu, _ = normalize_providers(providers, provider_options)
        if npu is None:
            self.npu_profile_file = None
            self._link: SessionLink | None = None
            self._cache_session: CacheSession | None = None
            self._clone_source = (path_or_bytes, npu, kwargs)
            super().__init__(_model_source(path_or_bytes), sess_options, providers,
                             provider_options, **kwargs)
            self._inputs = self.get_inputs()
            self._caller_memory = False
            return
        self._build(path_or_bytes, sess_options, npu, kwargs, None)

    def __del__(self, _free=exit_gate.free) -> None:
        _free(self)  # onnxruntime's session is freed inside the exit gate

    @_cyclic_gc_paused()
    @writer.held()  # the cache's writes (memo, entries) start once the session is made
    def _build(self, path_or_bytes: Any, sess_options: ort.SessionOptions | None,
               npu: NpuOptions, kwargs: dict, family: Family | None) -> None:
        """An NPU session: the EP gets `npu` as parsed (and, for a clone, the source's family)."""
        self._clone_source = (path_or_bytes, npu, kwargs)  # clone() builds the same session
        register()
        options = sess_options if sess_options is not None else ort.SessionOptions()
        if options.log_severity_level == -1:  # unset: onnxruntime's warnings stay off stderr
            options.log_severity_level = _severity["default"]
        if options.has_providers():
            raise InvalidOptionError(
                "these SessionOptions already select execution providers (e.g. they configured "
                f"another session with {EP_NAME}); pass a fresh onnxruntime.SessionOptions")
        npu = _with_fingerprint(path_or_bytes, npu)
        npu = _with_step_trace(npu, options)
        self.npu_profile_file: str | None = None
        self._link = SessionLink(npu, family)
        session_link.attach(self._link, options)
        cache_session = self._cache_session = CacheSession.plan(path_or_bytes, npu, options)
        model = cache_session.warm_model() if cache_session is not None else None
        options.add_provider_for_devices(ep_devices(), {})  # the options travel in the link
        if model is not None:
            try:
                with cache_session.loading(options):
                    self._create(model, options, kwargs)
            except Exception as exc:  # noqa: BLE001 - a bad stored model falls back to the source
                model = None
                cache_session.cold(options, why=f"{type(exc).__name__}: {exc}")
        elif cache_session is not None:
            cache_session.cold(options)
        if model is None:
            self._create(_model_source(path_or_bytes), options, kwargs)
            if cache_session is not None:
                cache_session.store([k for ep in self._npu_eps for k in ep.kernels.values()])
        if cache_session is not None:
            log.info("CacheSession: %s (%s)", cache_session.path, cache_session.reason)
        self._inputs = self.get_inputs()
        self._caller_memory = npu.memory.mem_alloc_outside  # runs check it is there
        self.disable_fallback()
        if log.isEnabledFor(logging.INFO):  # the summary is built only to be logged
            for line in self.partition_summary().splitlines():
                log.info("%s", line)

    @exit_gate.gated
    def _create(self, model: Any, options: ort.SessionOptions, kwargs: dict) -> None:
        """onnxruntime's constructor, its silent retry on CPU off (it would print a banner and
        hide the NPU's error) and errors typed; the NPU EPs it creates join the link."""
        what = f"model {os.fspath(model)!r}" if isinstance(model, (str, os.PathLike)) else \
            "the model"
        self._link.eps.clear()  # a failed attempt's EPs (the warm path's) are not ours
        # onnxruntime adds its CPU provider itself; naming providers here would drop the NPU.
        if pinned_pool.pins_workers(options):
            pinned_pool.to_first_cpu()  # off the processors onnxruntime's new workers spin on
        exit_gate.enter()
        try:
            with model_load_errors(what):
                super().__init__(model, options, None, None, **{**kwargs, "enable_fallback": 0})
        except InvalidModelError as exc:
            if STRICT_REFUSAL not in str(exc):
                raise
            raise UnsupportedError(f"{what}: {STRICT_KEY}=1, and the NPU does not take every "
                                   f"node:\n{self.partition_summary()}") from exc
        finally:
            exit_gate.leave()

    @property
    def _npu_eps(self) -> list[NpuEp]:
        return self._link.eps if self._link is not None else []

    def cache_stats(self) -> SessionCacheStats:
        """Where each NPU partition's Program came from (cache hit/miss/..., times, pages touched)
        and which CacheSession path built the session."""
        partitions = [s.settled() for ep in self._npu_eps for s in ep.cache_stats]
        if self._cache_session is None:
            return SessionCacheStats("", "", partitions)
        return self._cache_session.stats(partitions)

    # ---- placement --------------------------------------------------------------------
    def _placements(self) -> list[Placement]:
        return [p for ep in self._npu_eps for p in ep.placements]

    def partition(self) -> list[NodePlacement]:
        """Every node GetCapability saw: on the NPU (partition index) or on CPU (reason)."""
        result: list[NodePlacement] = []
        placements = [p for p in self._placements() if not p.nested]
        if not placements:
            return result
        last = placements[-1]  # onnxruntime may ask again; the final answer is what ran
        for number, names in enumerate(last.partitions):
            result += [NodePlacement(n, last.op_types[n], "NPU", number) for n in names]
        result += [NodePlacement(n, last.op_types[n], "CPU", None, why) for n, why in last.cpu.items()]
        return result

    def placement_summary(self) -> PlacementSummary:
        """Counts of the placement and the CPU nodes grouped by reason."""
        shapes = {(s.partition, tuple(sorted(s.input_shapes.items())))
                  for ep in self._npu_eps for s in ep.cache_stats}  # (writes not awaited)
        return PlacementSummary.of(self.partition(),
                                   [p.failure for p in self._placements() if p.failure],
                                   Counter(name for name, _ in shapes))

    def partition_summary(self) -> str:
        """Human-readable placement: counts, partitions, and why nodes stayed on CPU."""
        return self.placement_summary().text()

    def copy_stats(self):
        """Bytes copied between CPU and NPU memory so far, process-wide (subtract snapshots)."""
        return copy_stats()

    # ---- memory controls (provider/npu/session_memory.py) ------------------------------
    def memory_info(self) -> SessionMemoryInfo:
        """NPU memory of this session: Program sizes and the pool bytes it holds."""
        return merge_infos([ep.memory.info() for ep in self._npu_eps],
                           default_pool().stats().in_use)

    def set_weight_memory(self, buffer: Any) -> None:
        """mem_alloc_outside=1: the caller's memory for the weights (filled by the session)."""
        for ep in self._npu_eps:
            ep.memory.set_weight_memory(_device_region(buffer))

    def set_internal_memory(self, buffer: Any) -> None:
        """mem_alloc_outside=1: the caller's memory for the internal tensors (arenas)."""
        for ep in self._npu_eps:
            ep.memory.set_internal_memory(_device_region(buffer))

    def clone(self, sess_options: ort.SessionOptions | None = None) -> InferenceSession:
        """A session sharing this one's NPU Programs and weights, with its own arena (one per
        thread, like rknn_dup_context). SessionOptions cannot be copied: pass fresh ones
        (e.g. with the same free dimension overrides) or get onnxruntime's defaults."""
        source, npu, kwargs = self._clone_source
        if npu is None:
            return type(self)(source, sess_options, self.get_providers(), **kwargs)
        clone = type(self).__new__(type(self))
        family = self._npu_eps[0].memory.family if self._npu_eps else None
        clone._build(source, sess_options, npu, kwargs, family)
        return clone

    def end_profiling(self) -> str:
        """onnxruntime's end_profiling (the path of its profile JSON); `npu_profile_file` is
        then the file holding the NPU step events: that one where onnxruntime has the EP
        profiler hook, else the EP's own trace file (None when no NPU step ran)."""
        path = super().end_profiling()
        if self._link is not None:
            traces = [str(p) for ep in self._npu_eps if (p := ep.end_trace()) is not None]
            hooked = abi.runtime_api_version(ort.__version__) >= profiling.HOOK_SINCE
            self.npu_profile_file = traces[-1] if traces else (path or None) if hooked else None
        return path

    # ---- checked feeds and bindings ----------------------------------------------------
    def set_ep_dynamic_options(self, options: dict[str, str]) -> None:
        """onnxruntime's set_ep_dynamic_options (e.g. {"npu_perf_mode": "low_power"}), our
        errors typed; UnsupportedError where onnxruntime's Python lacks it (1.23)."""
        setter = getattr(super(), "set_ep_dynamic_options", None)
        if setter is None:
            raise UnsupportedError(
                f"onnxruntime {ort.__version__} has no set_ep_dynamic_options; give the "
                "performance mode per run instead: RunOptions.add_run_config_entry("
                f"{RUN_KEY!r}, mode), or per session with the npu_perf_mode option")
        with typed_errors():
            setter(options)

    @exit_gate.gated
    def run(self, output_names, input_feed, run_options=None):
        """onnxruntime's run(), which checks the feeds; when it refuses them, BindingError names
        the input and what was expected (checked only then: a check before every run was 1.2
        us of the ~6 us the NPU provider adds to a tiny model's run)."""
        if self._caller_memory:
            for ep in self._npu_eps:
                ep.memory.check_ready()
        _CALLS.append(None)  # exit_gate, inline: this is a run's path
        if exit_gate.closing:
            exit_gate.hold_if_late()
        try:
            return super().run(output_names, input_feed, run_options)
        except Exception as exc:
            try:
                check_feeds(self._inputs, input_feed)
            except BindingError as bad:
                raise bad from exc
            raise_typed(exc)
            raise
        finally:
            _CALLS.pop()

    @exit_gate.gated
    def run_with_iobinding(self, iobinding, run_options=None) -> None:
        """onnxruntime's run_with_iobinding(), our errors (e.g. BindingError) typed."""
        _CALLS.append(None)
        if exit_gate.closing:
            exit_gate.hold_if_late()
        try:
            super().run_with_iobinding(iobinding, run_options)
        except Exception as exc:
            raise_typed(exc)
            raise
        finally:
            _CALLS.pop()

    @exit_gate.gated
    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """onnxruntime's run_with_ort_values(), our errors typed."""
        _CALLS.append(None)
        if exit_gate.closing:
            exit_gate.hold_if_late()
        try:
            return super().run_with_ort_values(output_names, input_dict_ort_values, run_options)
        except Exception as exc:
            raise_typed(exc)
            raise
        finally:
            _CALLS.pop()

    def io_binding(self) -> CheckedIOBinding:
        """An IOBinding whose bind calls check shape/dtype/size against the model."""
        return CheckedIOBinding(self)
