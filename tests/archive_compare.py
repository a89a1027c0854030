"""Comparing two conversions of one run (serial and parallel, in memory and streamed): the
summaries without the lines that name the output or the processes, and the archives through
the otf2 reader, otf2-print and their bytes."""

from __future__ import annotations

import filecmp
import subprocess
from pathlib import Path

from otf2check import otf2_print_ok, read_events


def summary_body(stdout: str) -> list[str]:
    """The summary without its first line (names the output), its wall-time line and the
    line naming the converter processes."""
    lines = stdout.strip().splitlines()
    return [ln for ln in lines[1:] if not ln.lstrip().startswith(("wall time", "on "))]


def plain(ev) -> tuple:
    """An event read back, definitions without names (metric classes) by their repr."""
    return (ev.loc, ev.kind, ev.time, sorted((k, repr(v)) for k, v in ev.fields.items()),
            sorted((k, repr(v)) for k, v in ev.attrs.items()))


def same_archive(a: Path, b: Path) -> None:
    """Definitions, events per location, timestamps: through the reader, otf2-print, bytes."""
    otf2_print_ok(b)
    ra, rb = read_events(a), read_events(b)
    assert ra.defs == rb.defs
    assert len(ra.events) == len(rb.events)
    for i, (x, y) in enumerate(zip(ra.events, rb.events, strict=True)):
        assert plain(x) == plain(y), f"event {i} differs: {x} != {y}"

    def printed(anchor: Path) -> list[str]:
        text = subprocess.run(["otf2-print", "-A", "-G", str(anchor)], capture_output=True,
                              text=True, check=True).stdout
        return [ln for ln in text.splitlines() if not ln.startswith("Trace identifier")]

    assert printed(a) == printed(b)
    name_a, name_b = a.with_suffix(""), b.with_suffix("")
    assert filecmp.cmp(name_a.with_suffix(".def"), name_b.with_suffix(".def"), shallow=False)
    files = sorted(p.name for p in name_a.iterdir())
    assert files == sorted(p.name for p in name_b.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(name_a, name_b, files, shallow=False)
    assert not mismatch and not errors
