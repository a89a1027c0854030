"""cell2otf2 report: figures drawn from what the otf2 reader reads back (cell_otf2.report).

Each expectation is counted independently of the report code, with ``otf2check.read_events``
(one Python object per event, the otf2 reader's own API): the rows and events each figure was
drawn from, the exact events a sample keeps (the windows of ``sample_plan`` applied to the
reader's global order), and the time every location spends in each region category,
integrated with a plain Python stack over all events. The archive's own bound property is
checked against the conversion's JSON report.
"""

from __future__ import annotations

import json
import struct
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from otf2check import read_events  # noqa: E402
from paths import SAMPLES  # noqa: E402

from cell_otf2 import convert  # noqa: E402
from cell_otf2.errors import FormatError, UsageError  # noqa: E402
from cell_otf2.report.derive import (  # noqa: E402
    Cat,
    base_name,
    category_time,
    segments,
    sync_intervals,
)
from cell_otf2.report.load import load_archive, sample_plan  # noqa: E402

FIGURES = ("timeline.png", "dma_bandwidth.png", "dma_histograms.png", "waits.png",
           "ppe_mpi.png", "sync_bounds.png", "node_clocks.png")
ONE_NODE = tuple(f for f in FIGURES if f != "node_clocks.png")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------
# sampling plan
# ---------------------------------------------------------------------------------------------


@given(st.integers(0, 10**9), st.integers(1, 10**6), st.integers(1, 20))
def test_sample_plan_keeps_exactly_max_events_in_disjoint_spread_windows(total, cap, n):
    starts, sizes = sample_plan(total, cap, n)
    assert sizes.sum() == min(total, cap)
    ends = starts + sizes
    assert starts[0] >= 0 and ends[-1] <= total
    assert np.all(starts[1:] >= ends[:-1])  # disjoint, in order
    if total > cap:
        assert len(starts) == min(n, cap)
        assert sizes.max() - sizes.min() <= 1
        skipped_before = starts - (np.cumsum(sizes) - sizes)  # events skipped before window k
        between = np.diff(skipped_before)
        skip = total - cap
        k = len(starts)
        # the same number skipped between any two windows (up to rounding), half of it
        # before the first window and after the last
        if between.size:
            assert between.max() - between.min() <= 1
        assert abs(skipped_before[0] - skip / (2 * k)) <= 1
        assert abs((skip - skipped_before[-1]) - skip / (2 * k)) <= 1


def test_sample_plan_rejects_no_events():
    with pytest.raises(ValueError):
        sample_plan(10, 0)


# ---------------------------------------------------------------------------------------------
# the archive's own bound of every live interval
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def restored(tmp_path_factory):
    out = tmp_path_factory.mktemp("restored")
    convert(SAMPLES / "context-switch-restored", out / "a.otf2", report=out / "sync.json")
    return out / "a.otf2", json.loads((out / "sync.json").read_text())


def test_sync_intervals_property_matches_the_sync_report(restored):
    anchor, report = restored
    rb = read_events(anchor)
    props = rb.defs.location_properties
    spe_names = [n for n, t, *_ in rb.defs.locations if t == "ACCELERATOR_STREAM"]
    assert len(spe_names) == 8
    listed = 0
    for name in spe_names:
        ctx = int(name.split()[2])
        want = [iv for iv in report["intervals"] if iv["ctx"] == ctx and iv["rank"] == 0]
        entries = props[name]["cell2otf2::sync_intervals"].split(";")
        assert len(entries) == len(want) == 6  # 3 STOP/START pairs and 2 DECR_WRITEs
        times = rb.times[name]
        prev_last = -1
        for entry, iv in zip(entries, want, strict=True):
            first, last, width = entry.split(":")
            assert float(width) == pytest.approx(iv["upper_ticks"] - iv["lower_ticks"],
                                                 abs=0.051)
            first, last = int(first), int(last)
            assert times[0] <= first <= last <= times[-1]
            assert first >= prev_last  # intervals follow each other on the context
            assert first in times and last in times  # timestamps of events of that context
            prev_last = last
        worst = max(float(e.split(":")[2]) for e in entries)
        assert float(props[name]["cell2otf2::sync_bound_ticks"]) == pytest.approx(worst)
        listed += len(entries)
    assert listed == len(report["intervals"])


# ---------------------------------------------------------------------------------------------
# loading and segments against a plain reading of every event
# ---------------------------------------------------------------------------------------------


def reference_category_time(rb, windows, categories) -> dict[str, np.ndarray]:
    """Per location name, ticks per category inside the windows, by replaying every event's
    Enter/Leave on a Python stack (the innermost region is the state)."""
    out = {}
    for name in rb.times:
        acc = np.zeros(len(Cat))
        stack: list[str] = []
        t_prev = None
        evs = [e for e in rb.events if e.loc == name]

        for e in evs:
            if t_prev is not None and stack:
                for w0, w1 in windows:
                    lo, hi = max(t_prev, w0), min(e.time, w1)
                    if hi > lo:
                        acc[categories(stack[-1])] += hi - lo
            if e.kind == "Enter":
                stack.append(e.fields["region"])
            elif e.kind == "Leave":
                stack.pop()
            t_prev = e.time
        acc[Cat.NOT_RUNNING] = sum(w1 - w0 for w0, w1 in windows) - acc.sum()
        out[name] = acc
    return out


def category_of(name: str) -> Cat:
    b = base_name(name)
    if b == "mfc_read_tag_status":
        return Cat.TAG_WAIT
    if b in ("spu_read_in_mbox", "spu_write_out_mbox", "spu_write_out_intr_mbox",
             "spu_read_signal"):
        return Cat.MBOX_WAIT
    if b == "off SPU":
        return Cat.OFF_SPU
    return Cat.COMPUTE


@pytest.mark.parametrize("max_events", [10**9, 1500, 7])
def test_sample_keeps_the_planned_events_and_exact_region_times(restored, max_events):
    anchor, _ = restored
    rb = read_events(anchor)
    loaded = load_archive(anchor, max_events=max_events)
    total = len(rb.events)
    assert loaded.total_events == total
    assert loaded.sampled == (total > max_events)
    starts, sizes = sample_plan(total, max_events)
    keep = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, sizes, strict=True)])
    assert loaded.events.size == min(total, max_events) == keep.size
    names = loaded.loc_names
    kinds = {1: "Enter", 2: "Leave", 5: "RmaGet", 6: "RmaPut", 7: "RmaOpCompleteBlocking",
             10: "Metric"}
    for row, i in zip(loaded.events.tolist(), keep.tolist(), strict=True):
        ev = rb.events[i]
        # a PPE thread's samples (on its METRIC location) are read as the thread's own
        assert (names[row[0]], row[1]) == (ev.loc.removesuffix(" counters"), ev.time)
        assert kinds.get(row[2], ev.kind) == ev.kind
    assert Counter(loaded.counts) == Counter({
        "Enter": rb_count(rb, "Enter"), "Leave": rb_count(rb, "Leave"),
        "MpiSend/MpiIsend": rb_count(rb, "MpiSend", "MpiIsend"),
        "MpiRecv/MpiIrecv": rb_count(rb, "MpiRecv", "MpiIrecv"),
        "RmaGet": rb_count(rb, "RmaGet"), "RmaPut": rb_count(rb, "RmaPut"),
        "RmaOpCompleteBlocking": rb_count(rb, "RmaOpCompleteBlocking"),
        "MpiCollectiveBegin": 0, "MpiCollectiveEnd": 0, "Metric": rb_count(rb, "Metric"),
        # the DMA window's creation and destruction on each context (docs/archive.md, 10)
        "other": rb_count(rb, "RmaWinCreate", "RmaWinDestroy", "ProgramBegin",
                          "ProgramEnd")})
    # windows: from the first to the last kept event (the whole trace when not sampled)
    windows = [(int(a), int(b)) for a, b in loaded.window_bounds]
    if loaded.sampled:
        for (s, n), (a, b) in zip(zip(starts, sizes, strict=True), windows, strict=True):
            assert (a, b) == (rb.events[s].time, rb.events[s + n - 1].time)
    got = category_time(loaded, segments(loaded))
    want = reference_category_time(rb, windows, category_of)
    for ref, name in enumerate(names):
        np.testing.assert_array_equal(got[ref], want[name], err_msg=name)
    if not loaded.sampled:  # the restored run switches every context out 3 times
        spe = [i for i, n in enumerate(names) if n.startswith("SPE ctx")]
        assert np.all(got[spe, Cat.OFF_SPU] > 0) and np.all(got[spe, Cat.TAG_WAIT] > 0)


def rb_count(rb, *kinds: str) -> int:
    return sum(n for (_, k), n in rb.counts.items() if k in kinds)


def test_unreadable_archive_is_a_format_error(tmp_path):
    with pytest.raises(FormatError, match="no OTF2 anchor file"):
        load_archive(tmp_path / "missing.otf2")
    bad = tmp_path / "bad.otf2"
    bad.write_text("not an archive\n")
    with pytest.raises(FormatError, match="is not an OTF2 anchor file"):
        load_archive(bad)


# ---------------------------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------------------------


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def check_figures(result, out: Path, figures=FIGURES) -> None:
    import matplotlib.image

    assert [p.name for p in result.figures] == list(figures)
    html = result.index_html.read_text()
    for name in figures:
        path = out / name
        w, h = png_size(path)
        assert 1200 <= w <= 2400 and 700 <= h <= 1400, (name, w, h)
        img = matplotlib.image.imread(path)
        assert img.shape[:2] == (h, w)
        assert img[..., :3].std() > 0.05, f"{name} is (nearly) blank"
        assert f"src='{name}'" in html


@pytest.fixture(scope="module")
def fft_archives(tmp_path_factory):
    pytest.importorskip("matplotlib")
    out = tmp_path_factory.mktemp("fft")
    convert(SAMPLES / "fft-16spe", out / "rma.otf2", report=out / "sync.json")
    convert(SAMPLES / "fft-16spe", out / "msg.otf2", dma_style="messages")
    return out


def test_report_of_the_fft_sample(fft_archives, tmp_path):
    from cell_otf2.report import render_report

    anchor = fft_archives / "rma.otf2"
    sync = fft_archives / "sync.json"
    result = render_report(anchor, tmp_path / "rep", sync_report=sync)
    check_figures(result, tmp_path / "rep", ONE_NODE)
    assert "node_clocks.png" in result.skipped  # one node: nothing to synchronize
    rb = read_events(anchor)
    locs = rb.defs.locations
    spes = {n for n, t, *_ in locs if t == "ACCELERATOR_STREAM"}
    metric_holders = [n for n, t, *_ in locs if t == "METRIC"]  # the PPE thread's samples
    assert len(locs) == 35 and len(spes) == 16 and metric_holders == [
        "PPE thread 0 (rank 0) counters"]
    assert not result.sampled and result.total_events == len(rb.events) == 22344
    assert result.rows == {"timeline.png": 34, "dma_bandwidth.png": 16,
                           "dma_histograms.png": 2, "waits.png": 16, "ppe_mpi.png": 17,
                           "sync_bounds.png": 16}
    report = json.loads(sync.read_text())
    assert result.events == {
        "timeline.png": len(rb.events),
        "dma_bandwidth.png": rb_count(rb, "RmaGet", "RmaPut"),
        "dma_histograms.png": rb_count(rb, "RmaGet", "RmaPut"),
        "ppe_mpi.png": 0,  # one process, no MPI call
        "waits.png": sum(n for (loc, k), n in rb.counts.items()
                         if loc in spes and k in ("Enter", "Leave")),
        "sync_bounds.png": len(report["intervals"]),
    }
    html = result.index_html.read_text()
    assert "Synchronization report" in html and "sample" not in html.lower()
    assert f"<th>events</th><td>{len(rb.events):,}</td>" in html


def test_sampled_report_with_dma_as_messages(fft_archives, tmp_path):
    from cell_otf2.report import render_report

    anchor = fft_archives / "msg.otf2"
    result = render_report(anchor, tmp_path / "rep", max_events=5000)
    check_figures(result, tmp_path / "rep", ONE_NODE)
    rb = read_events(anchor)
    assert result.sampled and result.total_events == len(rb.events) > 5000
    assert result.events["timeline.png"] == 5000
    # a row per location but the METRIC one (its samples are the PPE thread's)
    assert result.rows["timeline.png"] == len(rb.defs.locations) - 1
    # the DMA figures draw every send on the "DMA" communicator, sampled or not
    dma_sends = sum(1 for e in rb.events
                    if e.kind == "MpiSend" and e.fields["communicator"] == "DMA")
    assert dma_sends == 4096 and result.events["dma_bandwidth.png"] == dma_sends
    assert rb_count(rb, "RmaGet", "RmaPut") == 0
    html = result.index_html.read_text()
    # (22,344 events before the run's second, nested region went: 16 runs, 32 events)
    assert "drawn from a sample" in html and f"5,000 of {len(rb.events):,} events" in html
    assert len(rb.events) == 22_344 - 32


def test_report_refuses_bad_inputs(fft_archives, tmp_path):
    from cell_otf2.report import render_report

    bad = tmp_path / "sync.json"
    bad.write_text("{ not json")
    with pytest.raises(FormatError, match="not a cell2otf2 synchronization report"):
        render_report(fft_archives / "rma.otf2", tmp_path / "r", sync_report=bad)
    with pytest.raises(UsageError, match="at least 1"):
        render_report(fft_archives / "rma.otf2", tmp_path / "r", max_events=0)
    assert not (tmp_path / "r").exists()


def test_bounds_parse_of_unplaced_and_unbounded_entries():
    from types import SimpleNamespace

    fake = SimpleNamespace(props={3: {"cell2otf2::sync_intervals": "10:20:1.5;-:-:unbounded"}})
    per = sync_intervals(fake)
    assert per[3].shape == (2, 3)
    assert per[3][0].tolist() == [10.0, 20.0, 1.5]
    assert np.isnan(per[3][1, 0]) and np.isinf(per[3][1, 2])


def test_converter_and_report_package_do_not_import_matplotlib(tmp_path):
    import subprocess

    code = ("import sys\nfrom cell_otf2.run.conversion import convert\nimport cell_otf2.report\n"
            f"convert({str(SAMPLES / 'wraps-heartbeats')!r}, {str(tmp_path / 'a.otf2')!r})\n"
            "print('matplotlib' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"


@pytest.mark.filterwarnings("error")
def test_figures_of_an_archive_without_spe_contexts(restored, tmp_path):
    """No SPE rows: the SPE figures are drawn empty, without warnings, from zero rows."""
    pytest.importorskip("matplotlib")
    from cell_otf2.report import bounds, dma, waits
    from cell_otf2.report.load import LocClass

    loaded = load_archive(restored[0])
    loaded.loc_class[:] = LocClass.PPE
    loaded.props = {}
    seg = segments(loaded)
    assert dma.draw(loaded, seg, tmp_path / "d.png") == (0, 0)
    assert waits.draw(loaded, seg, tmp_path / "w.png") == (0, 0)
    assert bounds.draw(loaded, tmp_path / "b.png") == (0, 0)
    for name in ("d.png", "w.png", "b.png"):
        assert png_size(tmp_path / name) == (1600, 900)


# ---------------------------------------------------------------------------------------------
# exact numbers over every event, also when the figures are drawn from a sample
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_events", [10**9, 3000])
def test_shares_are_exact_above_max_events(fft_archives, max_events):
    from cell_otf2.report.exact import category_ticks, latency_ticks, transfers

    anchor = fft_archives / "rma.otf2"
    rb = read_events(anchor)
    loaded = load_archive(anchor, max_events=max_events)
    assert loaded.sampled == (max_events < len(rb.events))
    span = [(rb.events[0].time, rb.events[-1].time)]
    want = reference_category_time(rb, span, category_of)
    got = category_ticks(loaded)
    for ref, name in enumerate(loaded.loc_names):
        np.testing.assert_array_equal(got[ref, :Cat.NOT_RUNNING], want[name][:Cat.NOT_RUNNING],
                                      err_msg=name)
    spe = loaded.loc_class == 1
    compute = got[spe, Cat.COMPUTE].sum() / got[spe, :Cat.NOT_RUNNING].sum()
    assert compute == pytest.approx(0.853, abs=0.001)  # 74.7% when counted on a sample
    # every DMA command with its completion: sizes and issue-to-completion latencies
    xfer = transfers(loaded)
    assert xfer.size == len(rb.rma) == 4096
    assert sorted(xfer["bytes"].tolist()) == sorted(op.bytes for op in rb.rma)
    lat = sorted(op.complete_time - op.issue_time for op in rb.rma)
    assert sorted(latency_ticks(xfer).tolist()) == lat


# ---------------------------------------------------------------------------------------------
# a sync report of another run is refused
# ---------------------------------------------------------------------------------------------


def test_report_refuses_the_sync_report_of_another_run(fft_archives, restored, tmp_path):
    import subprocess

    anchor = fft_archives / "rma.otf2"
    other = restored[0].parent / "sync.json"
    run = subprocess.run([sys.executable, "-m", "cell_otf2", "report", str(anchor), "-o",
                          str(tmp_path / "rep"), "--sync-report", str(other)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 3, run.stderr
    assert str(other) in run.stderr and str(anchor) in run.stderr
    assert "8 SPE contexts in the report, 16 in the archive" in run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert not (tmp_path / "rep").exists()
    # one field changed is enough
    from cell_otf2.report import render_report

    own = json.loads((fft_archives / "sync.json").read_text())
    for key, value, words in (("timebase_hz", 79_800_000, "timebase 79800000 Hz"),
                              ("reference", {"rank": 0, "node": "qs20-z"}, "reference node"),
                              ("intervals", own["intervals"][:-1], "15 live intervals")):
        bad = tmp_path / f"{key}.json"
        bad.write_text(json.dumps({**own, key: value}))
        with pytest.raises(FormatError, match=words):
            render_report(anchor, tmp_path / "r2", sync_report=bad)


def test_report_numbers_have_units_and_sensible_digits(tmp_path):
    import re

    from cell_otf2.report import render_report, units

    assert units.ticks(2802.92724609375, 14_318_000) == "2,803 ticks (196 µs)"
    assert units.ticks(7.0, 14_318_000) == "7.0 ticks (489 ns)"
    assert units.rate(25.6e9) == "25.6 GB/s" and units.seconds(0.00333) == "3.33 ms"
    convert(SAMPLES / "two-nodes-hybrid", tmp_path / "a.otf2", report=tmp_path / "s.json")
    result = render_report(tmp_path / "a.otf2", tmp_path / "rep", sync_report=tmp_path / "s.json")
    text = re.sub(r"<[^>]+>", " ", result.index_html.read_text())
    assert not re.findall(r"\d\.\d{4,}", text)  # no float printed with all its digits
    assert re.search(r"bound \d{1,3}(,\d{3})* ticks \([\d.]+ [µm]s\)", text)


# ---------------------------------------------------------------------------------------------
# progress on a terminal
# ---------------------------------------------------------------------------------------------


class _Terminal:
    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


def test_report_shows_progress_on_a_terminal_only(fft_archives, tmp_path):
    import subprocess

    from cell_otf2.report import render_report
    from cell_otf2.report.progress import ProgressLine

    term = _Terminal()
    line = ProgressLine(stream=term)
    render_report(fft_archives / "rma.otf2", tmp_path / "rep", progress=line)
    line.close()
    shown = [t.strip() for t in term.text.split("\r") if t.strip()]
    assert shown[0] == "cell2otf2 report: reading events 100.0% (22,344 of 22,344)"
    assert "cell2otf2 report: drawing timeline.png" in shown
    assert term.text.endswith("\r") and not term.text.split("\r")[-2].strip()  # erased
    assert not ProgressLine(stream=type("Pipe", (_Terminal,), {"isatty": lambda s: False})()
                            ).enabled
    big = ProgressLine(stream=_Terminal())
    big.started -= 10
    big.reading(4_500_000, 9_000_000)
    assert big.last.endswith("reading events  50.0% (4.5 M of 9.0 M), 0:10 left")
    run = subprocess.run([sys.executable, "-m", "cell_otf2", "report",
                          str(fft_archives / "rma.otf2"), "-o", str(tmp_path / "r2")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stderr == ""  # not a terminal: no progress line


# ---------------------------------------------------------------------------------------------
# node clocks
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    out = tmp_path_factory.mktemp("two")
    convert(SAMPLES / "two-nodes-hybrid", out / "a.otf2", report=out / "sync.json")
    return out / "a.otf2", out / "sync.json"


def test_node_clock_figure_from_the_report_and_the_archive_messages(two_nodes, tmp_path):
    from cell_otf2.report import nodeclock, render_report

    anchor, sync = two_nodes
    rb = read_events(anchor)
    group_node = {name: node for name, _t, node, *_ in rb.defs.location_groups}
    node_of = {name: group_node[group] for name, _t, group, *_ in rb.defs.locations}
    cross = [m for m in rb.messages if m.comm not in ("Cell mailboxes", "DMA")
             and node_of[m.sender] != node_of[m.receiver]]
    assert len(cross) == 24
    report = json.loads(sync.read_text())
    # today: the report's nodes (one offset and rate each); then with the per-node segments
    # and pairs another change adds (docs/sync-report.md section 6)
    node_b = report["nodes"][1]
    tb_mid = (280_000_000_000 - node_b["offset_ticks"]) / node_b["rate"]
    pieces = [{"first_timebase": 0, "offset_ticks": node_b["offset_ticks"], "rate": 1.0002},
              {"first_timebase": tb_mid, "offset_ticks": node_b["offset_ticks"] + 0.0002 * tb_mid
               - 0.0001 * tb_mid, "rate": 1.0001}]
    pairs = [{"node": "qs20-b", "max_all_ticks": 2802.92724609375, "max_spe_ticks": 21.0,
              "mean_spe_ppe_ticks": 9.9, "mean_spe_spe_ticks": 12.25}]
    segmented = {**report, "pairs": pairs, "nodes": [report["nodes"][0],
                                                      {**node_b, "segments": pieces}]}
    for variant, rep in (("plain", report), ("segments", segmented), ("none", None)):
        path = tmp_path / f"{variant}.json"
        if rep is not None:
            path.write_text(json.dumps(rep))
        result = render_report(anchor, tmp_path / variant,
                               sync_report=path if rep is not None else None)
        check_figures(result, tmp_path / variant)
        assert result.rows["node_clocks.png"] == 1  # qs20-b; qs20-a is the reference
        assert result.events["node_clocks.png"] == len(cross)  # each message once
        if variant == "segments":
            assert ("<th>pairs qs20-b</th><td>max all 2,803 ticks (196 µs), max spe 21.0 "
                    "ticks (1.47 µs)") in result.index_html.read_text()
    loaded = load_archive(anchor)
    c = nodeclock.constraints(loaded)["qs20-b"]
    into = [m for m in cross if node_of[m.receiver] == "qs20-b"]
    assert sorted(c["in"][:, 1].tolist()) == sorted(m.recv_time - m.send_time for m in into)
    assert c["in"].shape[0] + c["out"].shape[0] == len(cross)
    # the offset: archive time minus the node's timebase, piece by piece
    t = np.array([279e9, 281e9])
    plain = nodeclock.offset_curve(node_b, t)
    np.testing.assert_allclose(plain, t - (t - node_b["offset_ticks"]) / node_b["rate"])
    seg = nodeclock.offset_curve({**node_b, "segments": pieces}, t)
    for k, tt in enumerate(t.tolist()):
        p = pieces[k]
        assert seg[k] == pytest.approx(tt - (tt - p["offset_ticks"]) / p["rate"])
    assert np.allclose(nodeclock.offset_curve(None, t), 0)


# ---------------------------------------------------------------------------------------------
# DMA: bandwidth against the peak, sizes and latencies
# ---------------------------------------------------------------------------------------------


@settings(deadline=None)  # the first example imports matplotlib
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 300), st.integers(1, 1 << 14)),
                min_size=1, max_size=30))
def test_spread_keeps_every_byte_and_puts_it_where_the_command_ran(cmds):
    from cell_otf2.report.dma import spread, spread_rows

    t0 = np.array([c[0] for c in cmds], float)
    t1 = t0 + [c[1] for c in cmds]
    b = np.array([c[2] for c in cmds], float)
    edges = np.linspace(0, 1400, 15)
    got = spread(t0, t1, b, edges)
    assert got.sum() == pytest.approx(b.sum())
    assert np.all(got >= -1e-6)
    # each column: every command's rate times its overlap with the column (at least a tick)
    end = np.maximum(t1, t0 + 1)
    overlap = np.clip(np.minimum(end[:, None], edges[None, 1:])
                      - np.maximum(t0[:, None], edges[None, :-1]), 0, None)
    np.testing.assert_allclose(got, (b / (end - t0)) @ overlap, rtol=1e-9, atol=1e-9)
    # on rows: each row as if spread alone
    row = np.arange(t0.size) % 3
    rows = spread_rows(row, 3, t0, t1, b, edges)
    for k in range(3):
        np.testing.assert_allclose(rows[k], spread(t0[row == k], t1[row == k], b[row == k],
                                                   edges), rtol=1e-9, atol=1e-9)
    # a command within one column puts its bytes into that column only
    one = spread(np.array([205.0]), np.array([290.0]), np.array([64.0]), edges)
    assert one[2] == pytest.approx(64.0) and np.delete(one, 2).max() == pytest.approx(0)


@pytest.mark.native("evtread")
@pytest.mark.parametrize("edges", [np.linspace(-50, 1400, 301),
                                   np.array([0.0, 3, 3.5, 100, 101, 700, 1000.5]),
                                   np.array([10.0, 20.0])])
def test_spread_in_c_and_numpy_agree(edges):
    from cell_otf2.report.dma import spread, spread_rows

    rng = np.random.default_rng(7)
    t0 = np.concatenate([rng.integers(-100, 1600, 4000).astype(float), edges,
                         edges + 0.5, [edges[0] - 5, edges[-1], edges[-1] + 3]])
    t1 = t0 + np.concatenate([rng.integers(0, 3, 2000), rng.integers(0, 2000, 2000),
                              rng.integers(0, 40, t0.size - 4000)])
    b = rng.integers(1, 1 << 14, t0.size).astype(float)
    row = rng.integers(-1, 5, t0.size)  # -1: left out
    for c_and_py in ((spread_rows(row, 5, t0, t1, b, edges, compiled=c) for c in (True, False)),
                     (spread(t0, t1, b, edges, compiled=c) for c in (True, False))):
        got, want = c_and_py
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-6)


def test_dma_figures_are_exact_and_against_the_peak(fft_archives, tmp_path):
    from cell_otf2.report import dma, render_report
    from cell_otf2.report.exact import latency_ticks, transfers

    anchor = fft_archives / "rma.otf2"
    rb = read_events(anchor)
    loaded = load_archive(anchor, max_events=3000)  # sampled: the DMA numbers stay exact
    d = dma.per_spe(loaded)
    gets = sum(op.bytes for op in rb.rma if op.kind == "RmaGet")
    puts = sum(op.bytes for op in rb.rma if op.kind == "RmaPut")
    assert d["into"].sum() == gets and d["out"].sum() == puts  # main memory is not a row
    assert d["grid"].sum() == pytest.approx(gets + puts)
    spe = {n for n, t, *_ in rb.defs.locations if t == "ACCELERATOR_STREAM"}
    running = {}
    for name in spe:
        t = rb.times[name]
        running[name] = (t[-1] - t[0]) / loaded.timer_resolution  # START to EXIT
    for row, loc in enumerate(d["spes"].tolist()):
        name = loaded.loc_names[loc]
        moved = sum(op.bytes for op in rb.rma if op.loc == name)
        assert d["into"][row] + d["out"][row] == moved
        assert d["running"][row] == pytest.approx(running[name])
    result = render_report(anchor, tmp_path / "rep", max_events=3000)
    check_figures(result, tmp_path / "rep", ONE_NODE)
    assert result.events["dma_bandwidth.png"] == result.events["dma_histograms.png"] == 4096
    html = result.index_html.read_text()
    assert "25.6 GB/s" in html
    # DMA written as messages: the same commands, the same latencies
    msg = load_archive(fft_archives / "msg.otf2")
    xm, xr = transfers(msg), transfers(loaded)
    assert xm.size == xr.size == 4096
    assert sorted(latency_ticks(xm).tolist()) == sorted(latency_ticks(xr).tolist())
    assert (xm["dst"] == xm["issuer"]).sum() == (xr["dst"] == xr["issuer"]).sum() == 2048


# ---------------------------------------------------------------------------------------------
# per-context table and CSV, mailbox and signal waits, PPE and MPI time, damage
# ---------------------------------------------------------------------------------------------


def visits_of(rb, name: str, regions: set[str]) -> list[int]:
    """Durations of the completed visits of ``regions`` on location ``name``."""
    out, stack = [], []
    for e in rb.events:
        if e.loc != name:
            continue
        if e.kind == "Enter":
            stack.append((e.fields["region"], e.time))
        elif e.kind == "Leave":
            region, t0 = stack.pop()
            if base_name(region) in regions:
                out.append(e.time - t0)
    return out


def test_contexts_csv_and_wait_table_from_every_event(fft_archives, tmp_path):
    import csv

    from cell_otf2.report import render_report

    anchor = fft_archives / "rma.otf2"
    rb = read_events(anchor)
    result = render_report(anchor, tmp_path / "rep", max_events=3000,
                           sync_report=fft_archives / "sync.json")
    assert result.csv == tmp_path / "rep" / "contexts.csv"
    with open(result.csv, newline="") as f:
        table = list(csv.DictReader(f))
    spe = [n for n, t, *_ in rb.defs.locations if t == "ACCELERATOR_STREAM"]
    assert [r["context"] for r in table] == spe
    hz = 14_318_000
    want = reference_category_time(rb, [(rb.events[0].time, rb.events[-1].time)], category_of)
    html = result.index_html.read_text()
    for r in table:
        name = r["context"]
        assert r["rank"] == "0" and r["node"] == "qs20-a" and r["program"] == "fft_spu"
        assert int(r["events"]) == sum(rb.kinds(name).values())
        ticks = want[name][:Cat.NOT_RUNNING]
        assert float(r["running_s"]) == pytest.approx(ticks.sum() / hz, rel=1e-5)
        for col, cat in (("busy_share", Cat.COMPUTE), ("dma_wait_share", Cat.TAG_WAIT),
                         ("mailbox_wait_share", Cat.MBOX_WAIT), ("off_spu_share", Cat.OFF_SPU)):
            assert float(r[col]) == pytest.approx(ticks[cat] / ticks.sum(), abs=1e-5), col
        moved = sum(op.bytes for op in rb.rma if op.loc == name)
        assert int(r["bytes_moved"]) == moved
        assert float(r["bandwidth_bytes_per_s"]) == pytest.approx(moved / (ticks.sum() / hz),
                                                                  rel=1e-5)
        assert float(r["share_of_peak"]) == pytest.approx(
            float(r["bandwidth_bytes_per_s"]) / 25.6e9, rel=1e-5)
        assert float(r["sync_bound_ticks"]) == float(
            rb.defs.location_properties[name]["cell2otf2::sync_bound_ticks"])
        for kind, regions in (("mailbox", {"spu_read_in_mbox", "spu_write_out_mbox",
                                           "spu_write_out_intr_mbox"}),
                              ("signal", {"spu_read_signal"})):
            d = visits_of(rb, name, regions)
            assert int(r[f"{kind}_waits"]) == len(d) > 0
            assert float(r[f"{kind}_wait_mean_s"]) == pytest.approx(sum(d) / len(d) / hz,
                                                                    rel=1e-5)
            assert float(r[f"{kind}_wait_max_s"]) == pytest.approx(max(d) / hz, rel=1e-5)
        assert f"<td>{name}</td>" in html
    assert "<h2>Mailbox and signal waits</h2>" in html and "contexts.csv" in html
    assert "<h2>Damage</h2>" in html and "Nothing lost" in html


def test_ppe_and_mpi_breakdown(two_nodes, tmp_path):
    from cell_otf2.report import ppempi, render_report

    anchor, sync = two_nodes
    rb = read_events(anchor)
    loaded = load_archive(anchor, max_events=2000)
    regions = ppempi.mpi_regions(loaded)
    mpi_names = {name for name, _role, paradigm in rb.defs.regions if paradigm == "MPI"}
    ppe = [n for n, t, *_ in rb.defs.locations if t == "CPU_THREAD"
           and not n.startswith("Main memory")]
    assert regions and {r["region"] for r in regions} <= mpi_names
    for r in regions:
        d = [x for n in ppe for x in visits_of(rb, n, {r["region"]})]
        assert r["calls"] == len(d)
        assert r["total"] == sum(d) and r["longest"] == max(d)
    b = ppempi.breakdown(loaded)
    assert sorted(loaded.loc_names[i] for i in b["ppe"]) == sorted(ppe)  # grouped per rank
    for i, name in enumerate(loaded.loc_names[j] for j in b["ppe"]):
        t = rb.times[name]
        assert b["ticks"][i].sum() == pytest.approx(t[-1] - t[0])
    result = render_report(anchor, tmp_path / "rep", sync_report=sync)
    check_figures(result, tmp_path / "rep")
    assert result.rows["ppe_mpi.png"] == len(ppe)
    assert result.events["ppe_mpi.png"] == sum(r["calls"] for r in regions)


def test_damage_list_from_the_sync_report_and_the_archive(tmp_path):
    import html
    import re

    from cell_otf2.report import render_report

    convert(SAMPLES / "damaged-gap-truncate", tmp_path / "a.otf2", report=tmp_path / "s.json")
    report = json.loads((tmp_path / "s.json").read_text())
    rb = read_events(tmp_path / "a.otf2")
    enters = sum(n for (_, k), n in rb.counts.items() if k == "Enter")
    leaves = sum(n for (_, k), n in rb.counts.items() if k == "Leave")
    with_report = render_report(tmp_path / "a.otf2", tmp_path / "r1",
                                sync_report=tmp_path / "s.json").index_html.read_text()
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", with_report))
    lost = report["lost"]
    assert f"trace slots lost in GAPs {lost['slots']:,} sync report" in text
    assert f"SPE blocks missing (seq skips) {lost['blocks']:,}" in text
    assert f"{lost['records']:,} sync report: lost.records" in text
    m = re.search(r"regions still open at their location's last event ([\d,]+)",
                  html.unescape(text))
    stray = re.search(r"Leaves of a region that was not open ([\d,]+)", text)
    # the writer closes what a damaged run leaves open (emit/balance.py), so the archive balances
    opened = int(m.group(1).replace(",", "")) if m else 0
    closed_stray = int(stray.group(1).replace(",", "")) if stray else 0
    assert enters - opened == leaves - closed_stray  # every other Enter has its Leave
    assert opened == 0 and closed_stray == 0 and enters == leaves
    without = render_report(tmp_path / "a.otf2", tmp_path / "r2").index_html.read_text()
    assert "lost in GAPs" not in without and "Without --sync-report" in without
    # the archive alone shows nothing of this damage since its regions are balanced
    assert "regions still open" not in without and "Nothing lost" in without


# ---------------------------------------------------------------------------------------------
# readable with 100+ locations
# ---------------------------------------------------------------------------------------------


def test_report_of_a_run_with_hundreds_of_locations(tmp_path):
    import csv
    import re
    import subprocess

    run = subprocess.run([sys.executable, "-m", "cell_otf2", "simulate", str(tmp_path / "run"),
                          "--workload", "hybrid", "--ranks", "8", "--nodes", "4", "--spes",
                          "16", "--phases", "1"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    from cell_otf2.report import render_report

    convert(tmp_path / "run", tmp_path / "out" / "a.otf2", report=tmp_path / "out" / "s.json")
    result = render_report(tmp_path / "out" / "a.otf2", tmp_path / "rep",
                           sync_report=tmp_path / "out" / "s.json")
    check_figures(result, tmp_path / "rep")
    loaded = load_archive(tmp_path / "out" / "a.otf2", max_events=10)
    assert loaded.n_locs == 272 and int((loaded.loc_class == 1).sum()) == 128
    assert result.rows["timeline.png"] == 8 * 3  # per rank: PPE threads, memory, SPEs
    assert result.rows["waits.png"] == result.rows["ppe_mpi.png"] == 8  # a bar per rank
    assert result.rows["dma_bandwidth.png"] == result.rows["sync_bounds.png"] == 128
    assert result.rows["node_clocks.png"] == 3  # every node but the reference
    with open(result.csv, newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 128 and {r["rank"] for r in table} == {str(r) for r in range(8)}
    assert {r["node"] for r in table} == {"qs20-a", "qs20-b", "qs20-c", "qs20-d"}
    html = result.index_html.read_text()
    grouped = re.findall(r"<td>rank (\d) \(16 contexts\)</td>", html)
    assert grouped == [str(r) for r in range(8)] * 2  # context table and wait table
    assert "SPE ctx 5 (rank 3)" not in html  # per rank on the page, every context in the CSV
    # a rank's row: its contexts' bytes over their summed running time, against the peak
    rank0 = [r for r in table if r["rank"] == "0"]
    bw = sum(int(r["bytes_moved"]) for r in rank0) / sum(float(r["running_s"]) for r in rank0)
    row = re.search(r"<td>rank 0 \(16 contexts\)</td>(.*?)</tr>", html).group(1)
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert cells[-2] == f"{100 * bw / 25.6e9:.1f}%"


@pytest.mark.parametrize("gaps", [False, True])
def test_pairing_by_channel_and_sequence(gaps):
    """exact._pair: by place when each channel's sequence numbers are 0, 1, ..., by sort
    when they are not; both as a lookup of the (chan, seq) key."""
    from cell_otf2.report.exact import _pair
    from cell_otf2.report.load import Log

    rng = np.random.default_rng(3)
    n = 3000
    chan = rng.integers(0, 40, n)
    side = rng.integers(0, 2, n)
    seq = np.zeros(n, np.int64)
    for s in (0, 1):
        for c in range(40):
            at = np.flatnonzero((chan == c) & (side == s))
            seq[at] = rng.permutation(at.size) * (3 if gaps else 1)
    log = Log(**{name: np.zeros(n, np.int64) for name in ("kind", "loc", "time", "partner",
                                                          "ref", "bytes")},
              chan=chan, seq=seq)
    a, b = np.flatnonzero(side == 0), np.flatnonzero(side == 1)
    where = {(chan[j], seq[j]): j for j in b.tolist()}
    want = [where.get((chan[i], seq[i]), -1) for i in a.tolist()]
    assert _pair(log, a, b).tolist() == want
