"""The README opens with a quick start a new user can follow (the two make commands, how to call
the installed command, a conversion, a viewer and the report) and explains ViTE's "cannot find
rank N in communicator" lines; ``make demo`` can be run twice (its report folder is a previous
report the second time: replaced with --force)."""

from __future__ import annotations

from paths import ROOT


def test_readme_opens_with_a_quick_start():
    text = (ROOT / "README.md").read_text()
    head = text.split("```")[1]  # the first code block
    assert text.index("```") < 200  # right below the title
    lines = [line for line in head.splitlines() if line.strip()]
    assert len(lines) <= 10
    for needed in ("make demo", "make test", "source .venv/bin/activate", ".venv/bin/cell2otf2",
                   "cell2otf2 sample_traces/", "cell2otf2 report", "vampir", "vite"):
        assert needed in head, needed


def test_readme_explains_vites_warning():
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "cannot find rank N in communicator 3" in text
    assert "docs/archive.md#15-communicators-groups-and-paradigms" in text
    assert "## 15. Communicators, groups and paradigms" in (ROOT / "docs" / "archive.md"
                                                             ).read_text()


def test_make_demo_replaces_its_previous_report():
    demo = [line for line in (ROOT / "Makefile").read_text().splitlines()
            if "cell2otf2 report" in line]
    assert demo and all("--force" in line for line in demo)
