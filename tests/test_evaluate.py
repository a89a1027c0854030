"""Accuracy metrics (cellbench.evaluate) and baselines (cellbench.baselines).

Hand-made cases with known answers for every metric, the anchored baseline on the hand-built
run (its error is exactly the CTX_RUN_BEGIN -> START distance), and one small simulated run
where the truth derived from readings equals the simulator's interval table, ours covers the
truth with zero order violations, and a deliberately wrong offset shows up in every metric.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import minirun  # noqa: E402
import numpy as np
import pytest
from cellbench import baselines as bt
from cellbench import evaluate as ev
from cellbench.analysis import analyze

from cell_otf2.input import format as fmt
from cell_otf2.model import (
    DMA_DTYPE,
    DOMAIN_DTYPE,
    MSG_DTYPE,
    PAIR_DTYPE,
    RECORD_DTYPE,
    Constraints,
    DomainKind,
    LocKind,
    Matches,
    OrderOptions,
)

P, S = fmt.PpeCode, fmt.SpeCode

#: the guaranteed mode (``--read-delay-ticks 8``): bounds hold for every reading that trails
#: its reservation by up to 8 ticks, so the truth lies inside them (the default's exact
#: slot order leaves it within a few ticks: tests/test_convert.py, tests/test_solver.py)
GUARANTEED = OrderOptions(read_delay_ticks=8)


# ------------------------------------------------------------------------------------------
# hand-made metrics
# ------------------------------------------------------------------------------------------


def test_error_stats_exact():
    s = ev.error_stats(np.array([3.0, -4.0, 0.0, np.nan]))
    assert s["n"] == 3
    assert s["rms"] == pytest.approx(math.sqrt(25 / 3))
    assert s["max"] == 4.0
    assert s["p99"] == pytest.approx(3.98)  # linear between 3 and 4 at rank 1.98
    assert math.isnan(ev.error_stats(np.array([np.nan]))["rms"])


def test_coverage_and_widths_exact():
    true = np.array([0.0, 5.0, 10.0, np.nan, 2.0])
    lower = np.array([0.0, 6.0, 9.0, 0.0, -np.inf])
    upper = np.array([1.0, 7.0, np.inf, 1.0, 3.0])
    # domain 0 (on its lower bound: inside), 1 (outside); 2, 4 unbounded, 3 no truth
    assert ev.coverage(true, lower, upper) == 0.5
    assert ev.coverage(true, lower, upper, mask=np.array([1, 0, 1, 1, 1], bool)) == 1.0
    assert ev.coverage(true, lower, upper, mask=np.zeros(5, bool)) != 0.5  # NaN: nothing
    w = ev.width_stats(lower, upper)
    assert w == {"mean": 1.0, "max": 1.0, "bounded": 3, "unbounded": 2}
    w = ev.width_stats(np.array([0.0, 0.0]), np.array([4.0, 10.0]), np.array([True, True]))
    assert (w["mean"], w["max"]) == (7.0, 10.0)


def _order_case():
    # 0 RUN_BEGIN (PPE), 1 START, 2 EXIT, 3 RUN_END (PPE), 4 DMA, 5 TAG_WAIT_END,
    # 6 mailbox write BEGIN (PPE), 7 mailbox read END (SPE), 8 DMA never completed
    codes = [P.CTX_RUN_BEGIN, S.START, S.EXIT, P.CTX_RUN_END, S.DMA, S.TAG_WAIT_END,
             P.IN_MBOX_WRITE_BEGIN, S.IN_MBOX_READ_END, S.DMA]
    rec = np.zeros(len(codes), RECORD_DTYPE)
    rec["code"] = codes
    ppe = {0, 3, 6}
    kind = np.array([LocKind.PPE_THREAD if i in ppe else LocKind.SPE_CONTEXT
                     for i in range(rec.size)], dtype=np.uint8)
    msgs = np.zeros(1, MSG_DTYPE)
    msgs["send"], msgs["recv"] = 6, 7
    dma = np.zeros(2, DMA_DTYPE)
    dma["issue"], dma["complete"] = [4, 8], [5, -1]
    pairs = np.array([(0, 1), (2, 3), (6, 7), (4, 5)], dtype=PAIR_DTYPE)
    return rec, kind, Matches(msgs, dma, pairs, np.zeros(0, PAIR_DTYPE))


def test_order_violations_exact():
    rec, kind, m = _order_case()
    usable = np.ones(rec.size, bool)
    ok = np.array([10, 20, 30, 40, 21, 22, 11, 25, 5], dtype=np.int64)
    got = ev.order_violations(rec, kind, m, ok, usable)
    assert got == {"messages": 0, "dma": 0, "run_begin": 0, "run_end": 0, "held": 0, "total": 0}
    # every kind reversed once; the mailbox pair must not count as a run pair
    bad = np.array([30, 20, 40, 35, 21, 19, 26, 25, 5], dtype=np.int64)
    got = ev.order_violations(rec, kind, m, bad, usable, held=2)
    assert got == {"messages": 1, "dma": 1, "run_begin": 1, "run_end": 1, "held": 2,
                   "total": 6}
    usable[7] = False  # a record that is not written reverses nothing
    assert ev.order_violations(rec, kind, m, bad, usable)["messages"] == 0


def test_table1_on_one_node_exact():
    # domains: node 0, node 1, intervals 2 and 3 on node 0, interval 4 on node 1
    doms = np.zeros(5, DOMAIN_DTYPE)
    doms["kind"] = [DomainKind.NODE, DomainKind.NODE] + [DomainKind.SPE_INTERVAL] * 3
    doms["node"] = [0, 1, 0, 0, 1]
    doms["readings"] = [0, 0, 5, 5, 5]
    dec = SimpleNamespace(domains=doms, n_nodes=2)
    # x2 - x0 in [10, 14], x3 - x0 in [20, 22], x4 - x1 in [0, 100] (other node, ignored)
    src = np.array([0, 2, 0, 3, 1, 4])
    dst = np.array([2, 0, 3, 0, 4, 1])
    w = np.array([14.0, -10.0, 22.0, -20.0, 100.0, 0.0])
    cons = Constraints(src, dst, w)
    subset = ev.table1_subset(dec, 0)
    assert subset.tolist() == [0, 2, 3]
    t = ev.table1(dec, cons, 0.0, 0, subset)
    # half widths: (0,2) 2, (0,3) 1, (2,3): x3 - x2 in [6, 12] -> 3
    assert t == {"max_error_all": 3.0, "max_error_spe": 3.0, "mean_error_spe_ppe": 1.5,
                 "mean_error_spe_spe": 3.0}
    # loosened by 1: x3 - x2 goes through the node domain, two edges each way -> 3 + 2
    assert ev.table1(dec, cons, 1.0, 0, subset)["max_error_spe"] == 5.0
    assert ev.table1_subset(dec, 0, max_domains=2).tolist() == [0, 2]


def test_record_errors_only_written_spe_records():
    rec = np.zeros(4, RECORD_DTYPE)
    rec["domain"] = [0, 2, 2, -1]  # a PPE record, two SPE records, one without clock
    dec = SimpleNamespace(records=rec, n_nodes=1)
    times = np.array([100, 205, 290, 0])
    true = np.array([0.0, 200.0, 300.0, 0.0])
    s = ev.record_errors(dec, times, np.ones(4, bool), true)
    assert (s["n"], s["max"], s["rms"]) == (2, 10.0, pytest.approx(math.sqrt(62.5)))
    s = ev.record_errors(dec, times, np.array([1, 1, 0, 1], bool), true)
    assert (s["n"], s["max"]) == (1, 5.0)


# ------------------------------------------------------------------------------------------
# baselines on the hand-built run (SPE: node_tb = SPE_OFFSET + local, PPE reads t + 1)
# ------------------------------------------------------------------------------------------


def test_anchored_on_minirun_is_off_by_the_run_begin_gap(tmp_path):
    minirun.build(tmp_path / "run")
    pipe = analyze(tmp_path / "run")
    iv = np.flatnonzero(pipe.decoded.domains["kind"] == DomainKind.SPE_INTERVAL)
    assert iv.size == 1
    true = minirun.SPE_OFFSET + 1  # the PPE reads t + 1 at true time t
    est = bt.anchored(pipe.decoded)
    # first SPE reading (START at 150) placed at CTX_RUN_BEGIN's reading (131): 20 early
    assert est.offset[iv[0]] - true == -20
    assert est.offset[0] == 0.0
    # 20 early breaks no constraint here (the lower bound is lower still): Lamport keeps it
    assert pipe.sync.lower[iv[0]] <= est.offset[iv[0]]
    lam = bt.lamport(pipe.decoded, pipe.constraints, est, pipe.sync.relaxation)
    assert lam.offset[iv[0]] == est.offset[iv[0]]
    # 100 early does: bumped to the lower bound, exactly
    est.offset[iv[0]] -= 80
    lam = bt.lamport(pipe.decoded, pipe.constraints, est, pipe.sync.relaxation)
    assert lam.offset[iv[0]] == pytest.approx(pipe.sync.lower[iv[0]])
    ours = bt.ours(pipe)
    assert ours.lower[iv[0]] <= true <= ours.upper[iv[0]]


# ------------------------------------------------------------------------------------------
# one small simulated run
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    from cell_otf2.sim.run import simulate_run
    from cell_otf2.sim.truth import load_truth

    run = tmp_path_factory.mktemp("eval") / "run"
    simulate_run(run, "fft", seed=5, spes=4, phases=2, chunks=4, spe_buffer_records=1)
    return analyze(run, order_options=GUARANTEED), load_truth(run)


def test_true_offsets_equal_the_simulators_intervals(small_run):
    pipe, truth = small_run
    dec = pipe.decoded
    got = ev.true_offsets(dec, truth)
    d = dec.domains
    mask = ev.interval_mask(dec)
    want = {(int(i["rank"]), int(i["ctx"]), int(i["interval"])): i["offset_ticks"]
            for i in truth.intervals if i["readings"] > 0}
    assert mask.sum() == len(want) > 0
    for k in np.flatnonzero(mask).tolist():
        assert got[k] == want[(int(d["rank"][k]), int(d["ctx"][k]), int(d["interval"][k]))]
    assert (got[: dec.n_nodes] == 0).all()


def test_ours_covers_truth_without_order_violations(small_run):
    pipe, truth = small_run
    r = ev.evaluate(pipe, truth, bt.ours(pipe))
    assert r["relaxation"] == 0.0
    assert r["coverage"] == 1.0
    assert r["order"]["total"] == 0
    assert r["intervals"] == r["placed"] == r["width"]["bounded"] == 4
    assert r["offset_error"]["max"] <= r["width"]["max"]
    assert r["record_error"]["n"] > 300
    # the archive's own times are what record_times reproduces
    times, usable, held = ev.record_times(pipe.decoded, pipe.sync.offset, pipe.sync.node_maps)
    assert np.array_equal(times[usable], pipe.decoded.records["time"][usable]) and held == 0


def test_a_wrong_offset_shows_in_every_metric(small_run):
    pipe, truth = small_run
    est = bt.ours(pipe)
    k = int(np.flatnonzero(ev.interval_mask(pipe.decoded))[0])
    good = ev.evaluate(pipe, truth, est)
    est.offset[k] += 1000.0
    est.lower[k] += 1000.0
    est.upper[k] += 1000.0
    bad = ev.evaluate(pipe, truth, est)
    assert bad["offset_error"]["max"] >= 1000 - good["offset_error"]["max"]
    assert bad["record_error"]["max"] >= 1000 - good["record_error"]["max"]
    assert bad["coverage"] == 0.75
    est.offset[k] -= 10**6  # far too early: its START precedes CTX_RUN_BEGIN
    worse = ev.evaluate(pipe, truth, est)
    assert worse["order"]["run_begin"] == 1 and worse["order"]["messages"] > 0


def test_paper_and_baselines_run_on_the_same_trace(small_run):
    pipe, truth = small_run
    dec = pipe.decoded
    paper = bt.paper(dec, pipe.matches)
    mask = ev.interval_mask(dec)
    assert np.isfinite(paper.offset[mask]).all() and 0 in paper.matrices
    subset = ev.table1_subset(dec, 0)
    t = bt.paper_table1(paper, dec, 0, subset)
    assert set(t) == {"max_error_all", "max_error_spe", "mean_error_spe_ppe",
                      "mean_error_spe_spe"}
    assert bt.paper(dec, pipe.matches, max_domains=2).skipped
    anchored = bt.anchored(dec)
    assert np.isfinite(anchored.offset[mask]).all()
    lam = bt.lamport(dec, pipe.constraints, anchored, pipe.sync.relaxation)
    r = ev.evaluate(pipe, truth, lam)
    assert r["order"]["total"] == 0  # Lamport satisfies every constraint by construction


@pytest.mark.parametrize("opts, lo, hi", [
    (dict(decr_writes=True, phases=4), -2, 2),  # DECR_WRITE: exact up to the truncation
    (dict(spus=2, phases=3), 0, 45),  # compensated restore: late by up to 3 us (43 ticks)
])
def test_anchored_continues_across_links(tmp_path, opts, lo, hi):
    """Anchored error changes from one interval of a context to the next only by what the
    link cannot see (write truncation, restore latency), never by whole decrementer spans."""
    from cell_otf2.sim.run import simulate_run
    from cell_otf2.sim.truth import load_truth

    simulate_run(tmp_path / "run", "fft", seed=5, spes=4, chunks=4, **opts)
    pipe = analyze(tmp_path / "run")
    dec = pipe.decoded
    err = bt.anchored(dec).offset - ev.true_offsets(dec, load_truth(tmp_path / "run"))
    links = dec.links
    assert links.size >= 4
    step = err[links["prev"]] - err[links["next"]]  # how much earlier the next one is
    assert (step >= lo).all() and (step <= hi).all(), step
