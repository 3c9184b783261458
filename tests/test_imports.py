"""The rooms' rules, read from the source: no import cycles, and who may import what.

- no module of `provider` or `converters` is part of an import cycle;
- `converters` never imports `provider`;
- `provider.npu` never imports onnxruntime (the device knows nothing of its host runtime);
- ctypes only in `provider/ort/` and `provider/npu/native.py`;
- a module over ~400 lines says why in its docstring.

Imports are read with `ast`, including those inside functions (a lazy import still ties two
modules together); `from a import b` counts as importing `a.b` when that is a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("provider", "converters")
GENERATED = ("_generated",)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if any(part in GENERATED for part in path.parts):
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module (ours or not) `name` imports, anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names
                       if f"{base}.{alias.name}" in MODULES)
    return out


GRAPH = {name: {m for m in _imports(name, path) if m in MODULES and m != name}
         for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _package_parents(name: str) -> set[str]:
    """`a.b.c` imports its packages `a` and `a.b` implicitly: not a cycle of ours."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_no_import_cycles():
    graph = {n: {m for m in deps if m not in _package_parents(n)} for n, deps in GRAPH.items()}
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _importing(prefix: str, target: str) -> list[str]:
    return sorted(name for name, path in MODULES.items()
                  if (name == prefix or name.startswith(prefix + "."))
                  and any(m == target or m.startswith(target + ".")
                          for m in _imports(name, path)))


def test_converters_never_import_provider():
    assert _importing("converters", "provider") == []


def test_the_device_never_imports_onnxruntime():
    assert _importing("provider.npu", "onnxruntime") == []


def test_ctypes_only_at_the_abi_edges():
    users = [n for n in _importing("provider", "ctypes") + _importing("converters", "ctypes")
             if not n.startswith("provider.ort") and n != "provider.npu.native"]
    assert users == []


LONG_LINES = 420  # "~400": a few lines over are not a second job
SAYS_WHY = ("long by design", "over 400 lines on purpose")


def test_long_modules_say_why_in_their_docstring():
    """A module over ~400 lines usually holds two jobs; the few that should not be split
    (one table, one family whose parts share helpers) say so where a reader starts."""
    silent = []
    for name, path in MODULES.items():
        source = path.read_text()
        if source.count("\n") > LONG_LINES:
            doc = (ast.get_docstring(ast.parse(source)) or "").lower()
            if not any(" ".join(phrase.split()) in " ".join(doc.split()) for phrase in SAYS_WHY):
                silent.append(f"{name} ({source.count(chr(10))} lines)")
    assert not silent, f"long modules that do not say why: {silent}"
