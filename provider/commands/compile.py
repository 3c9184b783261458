"""`litenpu compile MODEL [-o OUT] [--embed] [--cache-dir DIR]`: write an EPContext model.

The NPU partitions of MODEL are compiled once (onnxruntime's `ModelCompiler` with the NPU EP)
and saved as `com.microsoft:EPContext` nodes: loading OUT builds each NPU kernel straight from
its Program, with no import and no compile. By default the Programs stay in the compile cache
and OUT references their entries (a small file; `litenpu cache clear` makes OUT unloadable),
relative to OUT when the cache is in or beside OUT's directory (move them together);
`--embed` puts the Program bytes into OUT itself.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import onnx
import onnxruntime as ort

from converters.atomic import replacing
from provider.cache import CompileCache, default_cache_dir, writer
from provider.cache.fingerprint import MEMO_DIR, source_fingerprint
from provider.commands.registry import command, key_values
from provider.errors import CacheError, UsageError
from provider.options import NpuOptions
from provider.ort import epcontext
from provider.ort.registration import ep_devices, register

EXAMPLE = """\
example:
  litenpu compile models/resnet_block.onnx -o resnet_ctx.onnx --cache-dir /tmp/npu-cache
  python -c "import provider; s = provider.InferenceSession('resnet_ctx.onnx', \\
      providers=['NPUExecutionProvider', 'CPUExecutionProvider'])"
"""


def _add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLE
    p.add_argument("model", type=Path, help="source ONNX model")
    p.add_argument("-o", "--output", type=Path,
                   help="the EPContext model to write (default: MODEL_ctx.onnx beside MODEL)")
    p.add_argument("--embed", action="store_true",
                   help="embed the Programs in the output (default: reference cache entries)")
    p.add_argument("--cache-dir", type=Path,
                   help="compile cache directory (default without --embed: "
                        f"{default_cache_dir()}; with --embed: none)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an NPU provider option, e.g. model_name=resnet or disable_ops=Add "
                        "(repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="print no summary")


def _npu_options(args: argparse.Namespace) -> NpuOptions:
    options = key_values(args.option, "--option")
    cache_dir = args.cache_dir if args.cache_dir is not None else (
        None if args.embed else default_cache_dir())
    if cache_dir is not None:
        if any(k in options for k in ("cache_dir", "CachePath")):
            raise UsageError("give the cache directory once: --cache-dir or --option cache_dir")
        options["cache_dir"] = str(cache_dir)
    return NpuOptions.parse(options)


def compile_model_file(model: Path, output: Path, npu: NpuOptions, *, embed: bool) -> None:
    """Compile `model`'s NPU partitions into the EPContext model `output` (with a cache, into
    entries keyed by the model's content fingerprint, hashed once, not per partition).

    onnxruntime's compile API partitions the graph as loaded, before its graph
    optimisations; a session on the source model partitions the optimised graph, so its
    Programs are others: open the EPContext model to start warm."""
    register()
    if npu.cache.cache_dir is not None and not npu.cache.model_fingerprint:
        fingerprint = source_fingerprint(model, npu.cache.cache_dir / MEMO_DIR)
        npu = replace(npu, cache=replace(npu.cache, model_fingerprint=fingerprint))
    options = ort.SessionOptions()
    options.add_provider_for_devices(ep_devices(), npu.to_strings())
    # written in a temporary folder beside OUT first: cache entries are referenced from OUT
    options.add_session_config_entry(epcontext.FINAL_PATH_KEY, str(output.resolve()))
    output.parent.mkdir(parents=True, exist_ok=True)
    compiler = ort.ModelCompiler(options, str(model), embed_compiled_data_into_model=embed)
    with replacing(output) as tmp:  # a new path: onnxruntime refuses to overwrite a file
        compiler.compile_to_file(str(tmp))
        # Programs and side files are written in the background: wait for them
        cache = CompileCache.from_options(npu.cache)
        if cache is not None:
            cache.flush()
        writer.wait(tmp.parent)
        _check_references(tmp, output)
        for side in tmp.parent.iterdir():  # context files the EP wrote beside the model
            if side != tmp:
                os.replace(side, output.parent / side.name)


def _ours(model: Path) -> list[onnx.NodeProto]:
    nodes = onnx.load(str(model), load_external_data=False).graph.node
    return [n for n in nodes if n.op_type == epcontext.OP_TYPE and n.domain == epcontext.DOMAIN]


def _check_references(written: Path, output: Path) -> None:
    """Every cache entry and side file the EPContext model references exists (a failed
    background write was logged; the model is not installed then)."""
    for node in _ours(written):
        attrs = {a.name: a for a in node.attribute}
        if attrs["embed_mode"].i == 1:
            continue
        reference = attrs["ep_cache_context"].s.decode()
        if not any((base / reference).exists()  # a cache entry, or a side file beside it
                   for base in (output.parent, written.parent)):
            raise CacheError(f"{node.name}: its {reference} was not written (see the warning "
                             "above); nothing written")


def summary(output: Path) -> str:
    """What the written model holds: nodes, EPContext nodes and where their Programs live."""
    nodes = onnx.load(str(output), load_external_data=False).graph.node
    ours = _ours(output)
    lines = [f"{output}: {len(nodes)} node(s), {len(ours)} NPU partition(s) as EPContext nodes"]
    for node in ours:
        attrs = {a.name: a for a in node.attribute}
        reference = attrs["ep_cache_context"].s
        if attrs["embed_mode"].i == 1:
            where = f"embedded, {len(reference)} bytes"
        elif os.path.isabs(reference.decode()):
            where = reference.decode()
        else:  # relative to OUT's directory
            where = f"{reference.decode()} ({(output.parent / reference.decode()).resolve()})"
        lines.append(f"  {node.name}: {where}")
    return "\n".join(lines)


@command("compile", "compile a model's NPU partitions into an EPContext model (loads without "
         "compiling)", _add_args)
def run(args: argparse.Namespace) -> int:
    if not args.model.is_file():
        raise FileNotFoundError(f"model {args.model} does not exist")
    if args.model.suffix.lower() != ".onnx":
        raise UsageError(f"{args.model}: expected an .onnx model; convert it first, e.g. "
                         f"litenpu convert {args.model} -o {args.model.with_suffix('.onnx')}")
    output = args.output or args.model.with_name(f"{args.model.stem}_ctx.onnx")
    if output.resolve() == args.model.resolve():
        raise UsageError(f"-o {output}: would overwrite the source model")
    compile_model_file(args.model, output, _npu_options(args), embed=args.embed)
    if not args.quiet:
        print(summary(output))
    return 0
