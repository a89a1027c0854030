"""The documentation ships with the project: nothing a user reads points outside the clone,
and every relative link of the Markdown pages reaches an existing file and heading."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the team's working notes live outside the repository; users never have them
FORBIDDEN = ("../shared", "FORMAT.md", "CONTRACT.md", "ARCHITECTURE.md")
#: the pages whose links are checked
PAGES = [ROOT / "README.md", ROOT / "sample_traces" / "README.md",
         *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _text_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*"))]
    files += sorted((ROOT / "cell_otf2").rglob("*"))
    out = []
    for path in files:
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images and other binary files
            continue
        out.append(path)
    return out


def _prose(path: Path) -> list[str]:
    """The lines of a Markdown page outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown page (repeated headings get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_matches_github():
    assert slug("2. The manifest `run.json`") == "2-the-manifest-runjson"
    assert slug("6. Clocks, order and what they guarantee") == (
        "6-clocks-order-and-what-they-guarantee")
    assert slug("Mapping details (the whole mapping: [docs/archive.md](docs/archive.md))") == (
        "mapping-details-the-whole-mapping-docsarchivemd")


@pytest.mark.parametrize("path", _text_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pointer_outside_the_clone(path: Path):
    text = path.read_text(encoding="utf-8")
    found = [(n, word) for n, line in enumerate(text.splitlines(), 1)
             for word in FORBIDDEN if word in line]
    assert not found, f"{path.relative_to(ROOT)} points outside the clone: {found}"


def test_the_three_pages_exist():
    for name in ("format.md", "archive.md", "sync-report.md"):
        assert (ROOT / "docs" / name).is_file()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    broken = []
    for line in _prose(page):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / unquote(file_part)).resolve() if file_part else page
            if not dest.exists():
                broken.append(f"{target}: no such file")
                continue
            if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{target}: no heading '#{anchor}' in {dest.name}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
