"""The summary, the synchronization report, the archive's properties and ``cell2otf2 report``
count the same intervals as synchronized, and where some are not, the summary and the report say
why in the same words (an interval cut at unresolved decrementer wraps is bounded before the cut
only, so it is not synchronized anywhere)."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest

import cell_otf2
from cell_otf2.model import DOMAIN_DTYPE, DomainKind
from cell_otf2.sync.interval_bounds import Why, _ranges, interval_bounds, why_lines


def test_damaged_run_one_count_and_one_reason(sample, tmp_path):
    """The damaged sample's file is cut after the last PPE record: every context's last
    blocks lie in a window nothing bounds from above, so their steps may hide wraps. The
    summary said "0 of 4", the report "4 of 4" and drew four finite bounds."""
    pytest.importorskip("matplotlib")
    from cell_otf2.report import render_report

    sync = tmp_path / "a.sync.json"
    s = cell_otf2.convert(sample("damaged-gap-truncate"), tmp_path / "a.otf2", report=sync,
                          progress=None)
    assert (s.intervals_bounded, s.intervals) == (0, 4)
    assert len(s.intervals_not_synchronized) == 1
    why = s.intervals_not_synchronized[0]
    assert re.fullmatch(r"4 intervals cut at \d+ unresolved decrementer wraps in rank 0, "
                        r"contexts 0-3: .*", why), why
    printed = "\n".join(s.lines())
    assert "clock intervals synchronized 0 of 4" in printed
    assert "no interval synchronized" in printed and "not synchronized (4 intervals):" in printed
    report = json.loads(sync.read_text())
    assert [iv["synchronized"] for iv in report["intervals"]] == [False] * 4
    assert all(iv["unresolved_wraps"] > 0 for iv in report["intervals"])
    assert report["not_synchronized"] == s.intervals_not_synchronized
    # the wraps counted per interval are the steps the damage line counts
    wraps = sum(iv["unresolved_wraps"] for iv in report["intervals"])
    assert f"in {wraps} steps" in printed.replace("\n      ", " ")
    render_report(tmp_path / "a.otf2", tmp_path / "rep", sync_report=sync)
    page = html.unescape((tmp_path / "rep" / "index.html").read_text())
    assert "<th>intervals synchronized</th><td>0 of 4</td>" in page
    assert "<th>live intervals</th><td>4 (0 synchronized)</td>" in page
    assert why in page


def test_clean_run_counts_agree(sample, tmp_path):
    sync = tmp_path / "a.sync.json"
    s = cell_otf2.convert(sample("fft-16spe"), tmp_path / "a.otf2", report=sync, progress=None)
    report = json.loads(sync.read_text())
    assert s.intervals_bounded == s.intervals == 16
    assert all(iv["synchronized"] and iv["unresolved_wraps"] == 0
               for iv in report["intervals"])
    assert report["not_synchronized"] == s.intervals_not_synchronized == []


def _domains(rows: list[tuple[int, int, int, int]]) -> np.ndarray:
    """(rank, ctx, interval, segment) rows of SPE interval domains."""
    d = np.zeros(len(rows), DOMAIN_DTYPE)
    d["kind"] = DomainKind.SPE_INTERVAL
    for i, (r, c, k, seg) in enumerate(rows):
        d["rank"][i], d["ctx"][i], d["interval"][i], d["segment"][i] = r, c, k, seg
    return d


def test_every_reason_in_words():
    inf, nan = np.inf, np.nan
    d = _domains([(0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2),  # cut after its first segment
                  (0, 1, 0, 0), (0, 1, 0, 1),  # two bounded segments: synchronized
                  (0, 2, 0, 0), (1, 3, 0, 0), (2, 5, 0, 0)])
    lower = np.array([0.0, 5.0, 9.0, 0.0, 1.0, 0.0, -inf, nan])
    upper = np.array([4.0, inf, nan, 2.0, 8.0, inf, 3.0, nan])
    b = interval_bounds(d, lower, upper)
    assert b.why.tolist() == [Why.CUT, Why.SYNCHRONIZED, Why.LOWER_ONLY, Why.UPPER_ONLY,
                              Why.NOTHING]
    assert b.width[1] == 7.0 and np.isinf(b.width[[0, 2, 3, 4]]).all()
    assert b.unresolved.tolist() == [2, 0, 0, 0, 0]
    assert why_lines(b) == [
        "1 interval cut at 2 unresolved decrementer wraps in rank 0, context 0: bounded up to "
        "the first cut, on one side only after it",
        "1 interval bounded from below only in rank 0, context 2",
        "1 interval bounded from above only in rank 1, context 3",
        "1 interval with nothing to bound it in rank 2, context 5 (its records are not "
        "written)"]


def test_context_ranges():
    assert _ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert _ranges([3]) == "3"


def test_dma_peak_is_labelled_by_the_chips_and_nodes_used(simulated, tmp_path):
    """A 4-node run's aggregate was drawn against "1 chip x 25.6 GB/s" (no context switch
    names a chip, so the archive's system tree holds none): each node's contexts used a chip."""
    pytest.importorskip("matplotlib")
    from cell_otf2.report.dma import chips_used, peak_label
    from cell_otf2.report.load import load_archive

    cell_otf2.convert(simulated("four-nodes"), tmp_path / "a.otf2", progress=None)
    loaded = load_archive(tmp_path / "a.otf2", max_events=1000)
    assert chips_used(loaded) == (4, 4)
    assert peak_label(4, 4) == "memory peak, 4 chips on 4 nodes: 4 x 25.6 GB/s"
    assert peak_label(1, 1) == "memory peak, 1 chip: 1 x 25.6 GB/s"
