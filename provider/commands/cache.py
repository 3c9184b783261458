"""`litenpu cache ls|verify|clear`: look after the on-disk compile cache.

ls lists entries (least recently used first) with the input shapes each Program was compiled
for (a dynamic-shape partition has one entry per shape; a CacheSession's entry has none), verify hashes every byte of every entry and
exits 1 naming each bad one (--deep: also re-hashes every model file whose content
fingerprint the cache recorded), clear removes entries (all, or one model's with --model).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from provider.cache import CompileCache, EntryInfo, default_cache_dir
from provider.cache.entry import BadEntry
from provider.cache.fingerprint import MEMO_DIR, verify_memos
from provider.commands.registry import command

EXAMPLES = """examples:
  litenpu cache ls                          # entries of the default cache, least recently used first
  litenpu cache verify --cache-dir ./cache  # hash every entry; exit 1 naming the bad ones
  litenpu cache verify --deep               # ... and re-hash the recorded model files
  litenpu cache clear --model resnet        # remove one model's entries
"""


def _add_args(p: argparse.ArgumentParser) -> None:
    p.epilog = EXAMPLES
    p.add_argument("action", choices=("ls", "verify", "clear"),
                   help="ls: list entries; verify: full integrity check; clear: remove entries")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help=f"cache directory (default: {default_cache_dir()})")
    p.add_argument("--model", metavar="NAME", default=None,
                   help="clear: only the entries of this model (ModelName or program name)")
    p.add_argument("--deep", action="store_true",
                   help="verify: also re-hash the model files whose fingerprints are recorded")


def _when(seconds: float | None) -> str:
    return "-" if seconds is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} GiB"


def _label(info: EntryInfo) -> str:
    name = info.model_name or info.program_name or "?"
    return f"{name}@{info.cache_version}" if info.cache_version else name


def _ls(cache: CompileCache) -> int:
    infos = cache.entries()
    rows = [("ENTRY", "MODEL@VERSION", "INPUT SHAPES", "SIZE", "CREATED", "LAST USED")]
    for info in infos:
        label = _label(info) if info.problem is None else f"<bad manifest: {info.problem}>"
        rows.append((info.name, label, info.shapes_text(), _size(info.size),
                     _when(info.created), _when(info.last_used)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print(f"{len(infos)} entries, {_size(sum(i.size for i in infos))} in {cache.dir}")
    return 0


def _verify_sources(cache: CompileCache) -> int:
    """Re-hash the recorded model files; how many records were wrong."""
    checks = verify_memos(cache.dir / MEMO_DIR)
    for check in checks:
        detail = f": {check.detail}" if check.detail else ""
        print(f"{check.status:<7} source {check.path}{detail}")
    changed = sum(c.status == "changed" for c in checks)
    print(f"{len(checks) - changed} of {len(checks)} recorded model fingerprints ok")
    return changed


def _verify(cache: CompileCache, deep: bool) -> int:
    changed = _verify_sources(cache) if deep else 0
    infos = cache.entries()
    bad = 0
    for info in infos:
        try:
            cache.verify_entry(info.name)
        except BadEntry as exc:
            bad += 1
            print(f"BAD  {info.name} ({_label(info)}): {exc}")
        else:
            print(f"ok   {info.name} ({_label(info)})")
    print(f"{len(infos) - bad} of {len(infos)} entries ok in {cache.dir}")
    return 1 if bad or changed else 0


def _clear(cache: CompileCache, model: str | None) -> int:
    removed = cache.clear(model)
    which = f" of model {model!r}" if model is not None else ""
    print(f"removed {removed} entries{which} from {cache.dir}")
    return 0


@command("cache", "list, verify or clear the compile cache", _add_args)
def run(args: argparse.Namespace) -> int:
    cache = CompileCache(args.cache_dir if args.cache_dir is not None else default_cache_dir())
    if args.action == "ls":
        return _ls(cache)
    if args.action == "verify":
        return _verify(cache, args.deep)
    return _clear(cache, args.model)
