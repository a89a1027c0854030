"""The progress line: every stage named as it starts, stages only advance, the overall percent
grows to 100 and the time left appears once there is a basis for it; nothing off a terminal."""

from __future__ import annotations

import io
from pathlib import Path

from cell_otf2 import progress as progress_mod
from cell_otf2.progress import STAGE_WEIGHTS, TerminalProgress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def lines(out: Tty) -> list[str]:
    return [x.strip() for x in out.getvalue().split("\r") if x.strip()]


def test_stages_named_as_they_start_and_overall_grows(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    out = Tty()
    p = TerminalProgress(True, out)
    seen, overall = [], []
    for stage in STAGE_WEIGHTS:
        for f in (0.0, 0.5, 1.0):
            now[0] += 1.0
            p(stage, f)
            seen.append(p.text().split()[0])
            overall.append(p.overall())
    assert [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]] == list(STAGE_WEIGHTS)
    assert overall == sorted(overall) and overall[-1] == 1.0
    assert "left" in lines(out)[-1]


def test_an_earlier_stage_inside_a_later_one_does_not_go_back(monkeypatch):
    p = TerminalProgress(True, Tty())
    p("write", 0.4)
    p("emit", 0.0)  # emit builds pieces while the writer writes
    assert p.text().startswith("write") and p.fraction == 0.4


def test_nothing_off_a_terminal():
    out = io.StringIO()
    p = TerminalProgress(True, out)
    p("read", 0.5)
    p.close()
    assert out.getvalue() == ""


def test_conversion_names_every_stage_it_runs(tmp_path):
    from cell_otf2.run.conversion import convert

    calls = []
    samples = Path(__file__).resolve().parent.parent / "sample_traces"
    convert(samples / "fft-16spe",
            tmp_path / "a.otf2", progress=lambda s, f: calls.append(s))
    order = [s for i, s in enumerate(calls) if i == 0 or s != calls[i - 1]]
    for stage in ("read", "decode", "mpi", "order", "sync", "emit", "write"):
        assert stage in order, order
