"""The node-clock evaluator (bench/cellbench/nodetruth.py) on a small simulated two-node run
and on hand-made inputs: its errors agree with the simulator's per-record truth, a map shifted
by k ticks shows an error larger by k, a tighter bound is counted where the truth leaves it,
reversed pairs read back are counted by kind, the report's pieces invert as they map, and the
clocks.json clock model inverts exactly (checked on the foreign runs' start readings when
they are beside the clone)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from cellbench import nodetruth as nt
from cellbench.readback import read_archive
from paths import ROOT

from cell_otf2.input.manifest import load_manifest
from cell_otf2.input.reader import read_dump
from cell_otf2.run.conversion import convert
from cell_otf2.sim.run import simulate_run
from cell_otf2.sim.truth import load_truth

FOREIGN = ROOT.parent / "shared" / "foreign-runs"


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    base = tmp_path_factory.mktemp("nodetruth")
    run = base / "run"
    simulate_run(run, "cluster", 41, nodes=2, ranks=4, spes=2, phases=24, exchange_s=0.004,
                 wander_us=4.0, wander_period_s=0.05, max_ppm=40.0)
    anchor = base / "out" / "trace.otf2"
    convert(run, anchor, report=base / "out" / "sync.json")
    return run, anchor, json.loads((base / "out" / "sync.json").read_text())


@pytest.fixture(scope="module")
def back(converted):
    return read_archive(converted[1])


def _other(report: dict) -> dict:
    return next(n for n in report["nodes"] if n["node"] != report["reference"]["node"])


def test_errors_agree_with_the_per_record_truth(converted, back):
    run, anchor, report = converted
    res = nt.evaluate(run, anchor, report, detail=True, back=back)
    ev = res["events_detail"]
    assert res["truth"] == "simulated" and res["events"] == len(ev["time"]) > 0
    truth = load_truth(run)
    man = load_manifest(run)
    other = _other(report)
    m = nt.ReportMap.from_report(other)
    checked = records = 0
    for p in man.processes:
        if p.node != other["node"]:
            continue
        d = read_dump(man.dump_path(p.rank), man, p.rank)
        t_true = truth.slot_time[p.rank][d.ppe["slot"]]
        placed = m.to_reference(d.ppe["timebase"].astype(np.float64))
        for th in np.unique(d.ppe["thread"]).tolist():
            name = f"PPE thread {th} (rank {p.rank})"
            sel = ev["loc"] == name
            times, errs = ev["time"][sel], ev["error_ticks"][sel]
            order = np.argsort(times, kind="stable")
            times, errs = times[order], errs[order]
            mine = d.ppe["thread"] == th
            i = np.clip(np.searchsorted(times, np.rint(placed[mine])), 0, len(times) - 1)
            hit = np.abs(times[i] - placed[mine]) <= 0.5 + 1e-6
            direct = times[i][hit] - t_true[mine][hit]  # archive time - true time of the record
            assert np.abs(errs[i][hit] - direct).max() <= 1.5, name
            checked += int(hit.sum())
            records += int(mine.sum())
    # every PPE record has an event at its time but CTX_RUN_BEGIN/END (spe_context_run's
    # Enter/Leave are the records of that region)
    assert checked > 0.95 * records > 500


def test_a_map_shifted_by_k_ticks_shows_error_k(converted, back):
    run, anchor, report = converted
    base = nt.evaluate(run, anchor, report, detail=True, back=back)
    k = 1000.0
    shifted = copy.deepcopy(report)
    node = _other(shifted)
    node["offset_ticks"] += k
    for s in node["segments"]:
        s["offset_ticks"] += k
    res = nt.evaluate(run, anchor, shifted, detail=True, back=back)
    diff = res["events_detail"]["error_ticks"] - base["events_detail"]["error_ticks"]
    # exactly k but for the true clock's slope over k ticks: this run's 4 us wander over
    # 0.05 s bends it by up to 5e-4
    assert np.abs(diff - k).max() < 1.0
    err = base["events_detail"]["error_ticks"]
    assert res["max_us"] == pytest.approx(np.abs(err + k).max() / 14.318, abs=0.5)


def test_bound_containment_counts_events_outside(converted, back):
    run, anchor, report = converted
    base = nt.evaluate(run, anchor, report, detail=True, back=back)
    err = base["events_detail"]["error_ticks"]
    tight = copy.deepcopy(report)
    node = _other(tight)
    node["bound_ticks"] = -0.5  # the events within 0.5 tick (of the 1 allowed) stay inside
    for s in node["segments"]:
        s.pop("bound_ticks", None)
    res = nt.evaluate(run, anchor, tight, back=back)
    assert res["outside_bound"] == int((np.abs(err) > 0.5).sum()) > 0
    for s in node["segments"]:  # a piece's own bound wins over the node's
        s["bound_ticks"] = 1e9
    assert nt.evaluate(run, anchor, tight, back=back)["outside_bound"] == 0


def test_reversed_pairs_are_counted(converted, back):
    run, anchor, report = converted
    res = nt.evaluate(run, anchor, report, back=back)
    assert res["reversed_total"] == 0 == res["order_violations"] and res["counts_agree"]
    assert res["unmatched"] == {"sends": 0, "receives": 0, "dma_without_completion": 0,
                                "completions_without_dma": 0}
    assert res["mpi_messages"] == len(load_truth(run).messages)
    edited = copy.deepcopy(back)
    comm = np.array(edited.comms, dtype=object)[edited.msg_comm]
    mpi = np.flatnonzero(comm == "MPI_COMM_WORLD")
    mbox = np.flatnonzero(comm == "Cell mailboxes")
    edited.msg_recv[mpi[0]] = edited.msg_send[mpi[0]] - 5  # reversed
    edited.msg_recv[mpi[1]] = edited.msg_send[mpi[1]]  # under one tick, not reversed
    edited.msg_recv[mbox[0]] = edited.msg_send[mbox[0]] - 1
    edited.rma_complete[0] = edited.rma_issue[0] - 1
    res = nt.evaluate(run, anchor, report, back=edited)
    assert (res["reversed_mpi"], res["reversed_mailbox"], res["reversed_dma"]) == (1, 1, 1)
    assert res["reversed_total"] == 3 and not res["counts_agree"]
    assert res["mpi_under_1_tick"] == 2
    assert sum(res["reversed_mpi_by_nodes"].values()) == 1


def test_report_pieces_invert_as_they_map():
    entry = {"node": "n", "offset_ticks": 0.0, "rate": 1.0, "bound_ticks": 7.0, "segments": [
        {"first_timebase": 1000, "offset_ticks": 50.0, "rate": 1.00002},
        {"first_timebase": 5000, "offset_ticks": 50.0 + 4000 * 0.00001, "rate": 1.00001,
         "bound_ticks": 3.0},
        {"first_timebase": 9000, "offset_ticks": 50.0 + 4000 * 0.00001 - 4000 * 0.00002,
         "rate": 1.00003}]}
    m = nt.ReportMap.from_report(entry)
    x = np.array([0.0, 999.0, 1000.0, 4999.5, 5000.0, 8000.0, 9000.0, 20000.0])
    assert np.array_equal(m.segment(x), [0, 0, 0, 0, 1, 1, 2, 2])
    t = m.to_reference(x)
    assert np.abs(m.to_node(t) - x).max() < 1e-6
    assert t[0] == pytest.approx(50.0)  # the first piece also applies before it
    assert list(m.bound[m.segment(x)]) == [7.0] * 4 + [3.0] * 2 + [7.0] * 2


def test_foreign_clock_inverts_exactly():
    clock = nt.ForeignClock(a=-297_584_639_504, ppb=-44_601, amp=144.96, period=2.9e9,
                            phase=2.5, t0=334_754_090_134)
    t = np.arange(clock.t0, clock.t0 + 9 * 10**9, 3_333_331, dtype=np.float64)
    x = clock.timebase(t)
    first = clock.first_reading(x)
    assert np.all(first <= t) and np.all(clock.timebase(first) >= x)
    assert np.all(clock.timebase(first - 1) < x)
    assert np.array_equal(clock.to_reference(x), first)
    mid = clock.to_reference(x + 0.5)
    assert np.all((mid > first) & (mid <= clock.first_reading(x + 1)))


@pytest.mark.skipif(not (FOREIGN / "hybrid-wander-a" / "clocks.json").is_file(),
                    reason="the foreign runs are not beside the clone")
def test_foreign_start_readings_map_to_one_start():
    """Every process of a foreign run started within milliseconds of the others (their wall
    clocks say so): their start timebases, through clocks.json, must agree as closely."""
    for name in ("hybrid-wander-a", "hybrid-linear-b"):
        run = FOREIGN / name
        clocks = nt.true_clocks(run)
        procs = json.loads((run / "run.json").read_text())["processes"]
        t = np.array([float(clocks.to_reference[p["node"]](np.array([p["start_timebase"]]))[0])
                      for p in procs])
        wall = np.array([p["start_realtime_ns"] for p in procs], dtype=np.float64)
        spread_s = (t.max() - t.min()) / clocks.timebase_hz
        assert clocks.source == "clocks.json" and spread_s < 0.01, name
        # on one node the wall clock is one clock too: the starts' distances agree closely
        node = np.array([p["node"] for p in procs])
        for n in set(node.tolist()):
            i = np.flatnonzero(node == n)
            gap_true = (t[i] - t[i[0]]) / clocks.timebase_hz
            assert np.abs(gap_true - (wall[i] - wall[i[0]]) / 1e9).max() < 1e-4, (name, n)


def test_cli_prints_a_line_per_node(converted, capsys):
    run, anchor, _ = converted
    assert nt.main([str(run), str(anchor), str(anchor.parent / "sync.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("qs20-b: ") and out[1].startswith("total (simulated truth")
