"""The docs are true: every ```python block in README.md and docs/ runs, relative links
resolve, and the provider options table is `provider.options.OPTIONS`.

Blocks of one file run in order in one namespace, in a scratch directory. A block may opt out
only with a visible marker on the line before it: `<!-- not run: <reason> -->`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provider.options import OPTIONS, NpuOptions

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), ROOT / "models" / "README.md"])
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
OPT_OUT = re.compile(r"<!-- not run: (.+?) -->\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line number, code, opt-out reason or None) of every ```python block."""
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = OPT_OUT.search(before)
        blocks.append((line, match.group(1), reason.group(1) if reason else None))
    return blocks


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", [p for p in PAGES if "```python" in p.read_text()], ids=_id)
def test_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__doc_example__"}
    ran = 0
    for line, code, reason in python_blocks(page.read_text()):
        if reason is not None:
            assert reason.strip(), f"{_id(page)}:{line}: opt-out without a reason"
            continue
        exec(compile(code, f"{page}:{line}", "exec"), namespace)  # noqa: S102 - the test
        ran += 1
    namespace.clear()  # a page's functions hold the namespace: free its sessions now
    assert ran, f"{_id(page)}: every python block opted out"


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_relative_links_resolve(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve()
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            broken.append(target)
    assert not broken, f"{_id(page)}: broken links {broken}"


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a Markdown page's headings (lowercase, punctuation dropped, - for spaces)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    headings = re.findall(r"^#+ (.+?)\s*$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_options_table_is_the_options_table():
    """The user guide's table says what provider.options.OPTIONS says, row by row, in order."""
    text = (ROOT / "docs" / "user-guide.md").read_text()
    section = text.split("## Provider options", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `[A-Za-z0-9_]+` \|.*$", section, re.M)
    expected = []
    for option in OPTIONS:
        expected.append(f"| `{option.key}` | {option.default} | {option.doc} |")
        expected += [f"| `{a}` | | MindSpore Lite's spelling of `{option.key}` |"
                     for a in option.aliases]
    assert documented == expected, (
        "docs/user-guide.md's provider options table differs from provider.options.OPTIONS")
    assert sorted(k for o in OPTIONS for k in (o.key, *o.aliases)) == sorted(
        NpuOptions.valid_keys())


def test_anchor_slugs():
    assert anchors("# IOBinding and zero copy\n## `.ms` format: notes\n") == {
        "iobinding-and-zero-copy", "ms-format-notes"}


def test_opt_out_marker_is_recognised():
    text = "x\n<!-- not run: needs a GPU -->\n```python\nraise SystemExit\n```\n"
    assert python_blocks(text) == [(3, "raise SystemExit\n", "needs a GPU")]
