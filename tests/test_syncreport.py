"""Synchronization and its report against the simulator's ground truth, over families of runs
(workloads, seeds, node counts, with and without MPI between nodes): a node that no message
reaches is named and makes the conversion lossy unless accepted; the default bounds are the
exact minimum-cycle-mean relaxation of exact slot order (checked against Karp's algorithm on
every node's constraints) and the archive read back has no order violation beyond it; the
report's node segments map every record's raw timebase to the archive's timestamp and keep SPE
records inside their CTX_RUN_BEGIN..END; the report's Table 1 figures equal those of the
all-pairs matrix; ``--read-delay-ticks`` refuses what is not a delay."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from cellbench.analysis import analyze  # noqa: E402
from otf2check import read_events  # noqa: E402

from cell_otf2 import convert  # noqa: E402
from cell_otf2.cli import main as cli_main  # noqa: E402
from cell_otf2.input import format as fmt  # noqa: E402
from cell_otf2.model import DomainKind  # noqa: E402
from cell_otf2.run.summary import sync_report  # noqa: E402
from cell_otf2.sim.run import simulate_run  # noqa: E402
from cell_otf2.sim.truth import load_truth  # noqa: E402
from cell_otf2.sync import solver  # noqa: E402
from cell_otf2.sync.synchronize import pair_table  # noqa: E402

P = fmt.PpeCode

#: runs without MPI between their nodes: every node but rank 0's is placed by start readings
UNREACHED = {
    "fft-2-nodes": dict(workload="fft", seed=1, ranks=2, nodes=2, spes=2, phases=2),
    "matmul-3-nodes": dict(workload="matmul", seed=2, ranks=3, nodes=3, spes=2, phases=2),
    "julia-2-nodes-4-ranks": dict(workload="julia", seed=3, ranks=4, nodes=2, spes=2, phases=2),
}
#: runs whose nodes exchange MPI messages and drift (+-50 ppm): fitted, piecewise maps
REACHED = {
    "hybrid-2-nodes": dict(workload="hybrid", seed=1, nodes=2, ranks=4, spes=1, phases=4,
                           max_ppm=50.0),
    "hybrid-3-nodes": dict(workload="hybrid", seed=2, nodes=3, ranks=6, spes=2, phases=6,
                           max_ppm=50.0),
    "hybrid-4-nodes-switches": dict(workload="hybrid", seed=5, nodes=4, ranks=4, spes=3, spus=2,
                                    phases=4, max_ppm=30.0),
}
#: one-node runs where slot order binds (one record per block) and the relaxation is > 0
BINDING = {
    f"{wl}-{seed}": dict(workload=wl, seed=seed, spes=6, phases=2, spe_buffer_records=1)
    for wl in ("fft", "matmul", "blackscholes", "julia") for seed in (1, 4)
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> run directory, simulated once per module on first use."""
    made: dict[str, Path] = {}
    root = tmp_path_factory.mktemp("syncreport")

    def get(name: str) -> Path:
        if name not in made:
            opts = {**UNREACHED, **REACHED, **BINDING}[name]
            simulate_run(root / name, **opts)
            made[name] = root / name
        return made[name]

    return get


def _cli(args: list[str], capsys) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exc:
        cli_main(args)
    return int(exc.value.code or 0), capsys.readouterr().out.splitlines()


def _map(report: dict, node: np.ndarray, tb: np.ndarray) -> np.ndarray:
    """Raw node timebases -> reference ticks through the report's segments (docs/sync-report.md)."""
    out = np.full(tb.size, np.nan)
    for i, n in enumerate(report["nodes"]):
        sel = node == i
        seg = n["segments"]
        first = np.array([s["first_timebase"] for s in seg])
        assert np.all(np.diff(first) > 0), "segments ascending"
        k = np.clip(np.searchsorted(first, tb[sel], side="right") - 1, 0, len(seg) - 1)
        off = np.array([s["offset_ticks"] for s in seg])
        rate = np.array([s["rate"] for s in seg])
        out[sel] = off[k] + rate[k] * tb[sel]
    return out


# ------------------------------------------------------------------------------------------
# item 3: nodes that nothing synchronizes
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(UNREACHED))
def test_unreached_node_is_unusable_unless_accepted(runs, tmp_path, capsys, name):
    run = runs(name)
    truth = load_truth(run)
    rep_path = tmp_path / "r.json"
    status, lines = _cli([str(run), "-o", str(tmp_path / "a.otf2"), "--report",
                          str(rep_path)], capsys)
    rep = json.loads(rep_path.read_text())
    others = [n["node"] for n in rep["nodes"][1:]]
    assert status == 1
    assert rep["unsynchronized_nodes"] == others
    assert [n["synchronized"] for n in rep["nodes"]] == [True] + [False] * len(others)
    for node in others:
        assert f"  node {node}: start readings only, NOT synchronized (NTP-accurate at best)" \
            in lines
    assert any(ln.startswith("    unsynchronized_node: " + ", ".join(others[:3]))
               for ln in lines)
    assert all(len(ln) <= 100 for ln in lines[1:] if "wall time" not in ln)  # [0]: paths
    # the truth: the start readings put the node far beyond the intervals' worst bound,
    # which is all the summary promised before
    worst = max(i["upper_ticks"] - i["lower_ticks"] for i in rep["intervals"]
                if i["upper_ticks"] is not None)
    for i, node in enumerate(others, start=1):
        tb = np.array([truth.reference_to_node(node, truth.slot_time[0][10])])
        err = abs(float(_map(rep, np.full(1, i), tb)[0]) - truth.node_to_reference(node, tb)[0])
        assert err > 10 * worst, (node, err, worst)
    status, lines = _cli([str(run), "-o", str(tmp_path / "b.otf2"),
                          "--accept-unsynchronized-nodes"], capsys)
    assert status == 0
    assert f"  node {others[0]}: start readings only, NOT synchronized (NTP-accurate at best) " \
        "(accepted)" in lines
    assert "  lost or unusable records: none" in lines
    api = convert(run, tmp_path / "c.otf2", accept_unsynchronized_nodes=True)
    assert not api.lossy and api.unsynchronized_nodes == others
    assert convert(run, tmp_path / "d.otf2").lossy


@pytest.mark.parametrize("name", sorted(REACHED))
def test_reached_nodes_say_how_they_were_placed(runs, tmp_path, capsys, name):
    run = runs(name)
    status, lines = _cli([str(run), "-o", str(tmp_path / "a.otf2")], capsys)
    assert status == 0, lines
    node_lines = [ln for ln in lines if ln.startswith("  node ")]
    assert len(node_lines) == REACHED[name]["nodes"] - 1
    for ln in node_lines:
        assert "fitted to MPI messages, bound " in ln and ln.endswith(" us)") and len(ln) <= 100


# ------------------------------------------------------------------------------------------
# item 5: the report reproduces the archive's clocks; Table 1 figures
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REACHED))
def test_report_segments_reproduce_the_archive(runs, tmp_path, name):
    run = runs(name)
    anchor, rep_path = tmp_path / "a.otf2", tmp_path / "r.json"
    assert not convert(run, anchor, report=rep_path).lossy
    rep = json.loads(rep_path.read_text())
    pipe = analyze(run)
    dec, res = pipe.decoded, pipe.sync
    rec = dec.records
    # drifting nodes: piecewise where their messages show bends, a line where they do not
    assert all(len(n["segments"]) >= 1 for n in rep["nodes"][1:])
    # every record with a clock: its raw node timebase (report interval offset + local for
    # SPE records, the raw timebase for PPE ones) through the report's segments
    ok = (rec["domain"] >= 0) & res.usable & (rec["code"] != 0)
    dom = rec["domain"][ok]
    iv_off = {(i["rank"], i["ctx"], i["interval"]): i["offset_ticks"] for i in rep["intervals"]}
    d = dec.domains
    off = np.zeros(d.size)
    spe = np.flatnonzero(d["kind"] == DomainKind.SPE_INTERVAL)
    off[spe] = [iv_off[(int(d["rank"][k]), int(d["ctx"][k]), int(d["interval"][k]))]
                for k in spe.tolist()]
    tb = off[dom] + rec["local"][ok]
    mapped = _map(rep, d["node"][dom], tb)
    assert np.abs(np.rint(mapped) - rec["time"][ok]).max() == 0
    # ... and every timestamp of the archive (read back) is one of those of its process
    # (an SPE location's "off SPU" region takes its PPE's CTX_SWITCH times)
    rb = read_events(anchor)
    rank_of = dec.locations["rank"][rec["loc"][ok]]
    written = 0
    for r, kind, idx in dec.locations[["rank", "kind", "index"]].tolist():
        where = f"PPE thread {idx} (rank {r})" if kind == 0 else f"SPE ctx {idx} (rank {r})"
        if kind < 2 and rb.times.get(where):
            mine = np.rint(mapped[rank_of == r]).astype(np.int64)
            assert np.isin(rb.times[where], mine).all(), where
            written += len(rb.times[where])
    assert written > 0.5 * ok.sum()
    # SPE records inside their context run, by the report's map
    t = np.full(rec.size, np.nan)
    t[ok] = mapped
    ppe_rank = dec.locations["rank"][rec["loc"]]
    for (rank, ctx), cloc in dec.ctx_loc.items():
        on = np.flatnonzero((rec["loc"] == cloc) & ~np.isnan(t))
        begins = np.flatnonzero((rec["code"] == P.CTX_RUN_BEGIN) & (rec["a"] == ctx)
                                & (ppe_rank == rank))
        ends = np.flatnonzero((rec["code"] == P.CTX_RUN_END) & (rec["a"] == ctx)
                              & (ppe_rank == rank))
        if on.size and begins.size and ends.size:
            assert t[begins[0]] <= t[on].min() and t[on].max() <= t[ends[-1]], (rank, ctx)


def _all_pairs_figures(n, src, dst, w, relaxation, keep, is_spe, ppe_at) -> dict:
    """Table 1 widths from the whole all-pairs matrix (the reference implementation)."""
    D = solver.all_pairs_bounds(n, src, dst, w, relaxation, subset=keep)
    t = solver.error_table(D, is_spe, ppe_at)
    return {"max_all": 2 * t["max_error_all"], "max_spe": 2 * t["max_error_spe"],
            "mean_spe_ppe": 2 * t["mean_error_spe_ppe"],
            "mean_spe_spe": 2 * t["mean_error_spe_spe"]}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_cells", [7, 1 << 22])
def test_pair_width_stats_equal_the_all_pairs_matrix(seed, max_cells):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 40))
    truth = rng.uniform(0, 1000, n)
    m = 6 * n
    s, d = rng.integers(0, n, m), rng.integers(0, n, m)
    w = truth[d] - truth[s] + rng.uniform(-3, 12, m).round()  # some negative cycles
    keep = rng.permutation(n)[: int(rng.integers(3, n))]
    is_spe = np.ones(keep.size, dtype=bool)
    is_spe[0] = False
    relax = solver.solve(n, s, d, w, 0).relaxation
    got = solver.pair_width_stats(n, s, d, w, relax, keep, is_spe, int(keep[0]),
                                max_cells=max_cells)
    want = _all_pairs_figures(n, s, d, w, relax, keep, is_spe, 0)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-6) or (math.isinf(v) and got[k] == v), k


@pytest.mark.parametrize("name", ["fft-1", "julia-4", "hybrid-3-nodes"])
def test_report_pairs_are_the_all_pairs_figures(runs, name):
    pipe = analyze(runs(name))
    dec, res = pipe.decoded, pipe.sync
    rep = sync_report(pipe)
    assert [p["node"] for p in rep["pairs"]] == [n.name for n in dec.manifest.nodes]
    for node, row in enumerate(rep["pairs"]):
        members = np.flatnonzero(dec.domains["node"] == node)
        index = np.full(dec.domains.size, -1, dtype=np.int64)
        index[members] = np.arange(members.size)
        s, d = index[pipe.constraints.src], index[pipe.constraints.dst]
        ok = (s >= 0) & (d >= 0)
        ivs = np.flatnonzero((dec.domains["node"] == node) & (res.bounded == "both")
                             & (dec.domains["kind"] == DomainKind.SPE_INTERVAL))
        keep = index[np.r_[node, ivs]]
        is_spe = np.arange(keep.size) > 0
        want = _all_pairs_figures(members.size, s[ok], d[ok], pipe.constraints.weight[ok],
                                  res.node_relaxation[node], keep, is_spe, 0)
        assert row["domains"] == row["of"] == keep.size
        for k, v in want.items():
            assert row[f"{k}_ticks"] == pytest.approx(v, abs=1e-6), (node, k)
        # the truth: the figures bound the intervals' true relative offsets (loosened)
        assert row["max_all_ticks"] >= max(res.upper[ivs] - res.lower[ivs]) - 1e-6


def test_pairs_on_more_domains_than_the_cap_use_an_even_subset(runs):
    pipe = analyze(runs("fft-4"))
    full = pair_table(pipe.decoded, pipe.sync, max_domains=10_000)
    pipe.sync.pairs = None
    capped = pair_table(pipe.decoded, pipe.sync, max_domains=5)
    assert capped[0]["domains"] == 5 and capped[0]["of"] == full[0]["of"] > 5
    assert capped[0]["max_all_ticks"] <= full[0]["max_all_ticks"]


# ------------------------------------------------------------------------------------------
# item 4: exact relaxation, no violation beyond it, the read delay option
# ------------------------------------------------------------------------------------------


def karp_minimum_cycle_mean(n: int, src, dst, w) -> float:
    """Karp (1978): min over v of max over k of (D_n(v) - D_k(v)) / (n - k), from a virtual
    source tied to every node; inf for an acyclic graph. O(n * m), numpy per step."""
    src = np.r_[np.asarray(src), np.full(n, n)]
    dst = np.r_[np.asarray(dst), np.arange(n)]
    w = np.r_[np.asarray(w, dtype=np.float64), np.zeros(n)]
    N = n + 1
    D = np.full((N + 1, N), np.inf)
    D[0, n] = 0.0
    for k in range(1, N + 1):
        np.minimum.at(D[k], dst, D[k - 1][src] + w)
    best = math.inf
    for v in range(N):
        if not np.isfinite(D[N, v]):
            continue
        ks = np.flatnonzero(np.isfinite(D[:N, v]))
        best = min(best, float(np.max((D[N, v] - D[ks, v]) / (N - ks))))
    return best


@pytest.mark.parametrize("name", sorted(BINDING) + ["hybrid-3-nodes"])
def test_relaxation_is_the_exact_minimum_cycle_mean(runs, name):
    pipe = analyze(runs(name))
    dec, res, cons = pipe.decoded, pipe.sync, pipe.constraints
    assert cons.assumed["slot_order"] == "exact" and cons.assumed["read_delay_ticks"] == 0.0
    for node in range(dec.n_nodes):
        members = np.flatnonzero(dec.domains["node"] == node)
        index = np.full(dec.domains.size, -1, dtype=np.int64)
        index[members] = np.arange(members.size)
        s, d = index[cons.src], index[cons.dst]
        ok = (s >= 0) & (d >= 0)
        cs, cd, cw = solver.collapse_parallel(members.size, s[ok], d[ok], cons.weight[ok])
        mcm = karp_minimum_cycle_mean(members.size, cs, cd, cw)
        want = max(0.0, -mcm) if math.isfinite(mcm) else 0.0
        assert res.node_relaxation[node] == pytest.approx(want, abs=1e-6), node
    assert res.relaxation == max(res.node_relaxation)


@pytest.mark.parametrize("name", sorted(BINDING))
def test_archive_has_no_order_violation_beyond_the_relaxation(runs, tmp_path, name):
    run = runs(name)
    anchor, rep_path = tmp_path / "a.otf2", tmp_path / "r.json"
    summary = convert(run, anchor, report=rep_path)
    rep = json.loads(rep_path.read_text())
    relax = rep["relaxation_ticks"]
    assert relax == summary.relaxation_ticks and summary.order_violations == 0
    assert rep["order_violations"] == 0
    rb = read_events(anchor)  # also asserts time order per location
    slack = relax + 1  # + the rounding of both ends
    assert rb.messages and all(m.recv_time >= m.send_time - slack for m in rb.messages)
    assert all(op.complete_time >= op.issue_time - slack for op in rb.rma)
    # the truth: the default bounds (slot order exact) hold it within 4 ticks
    truth = load_truth(run)
    tv = {(int(i["rank"]), int(i["ctx"]), int(i["interval"])): float(i["offset_ticks"])
          for i in truth.intervals}
    for i in rep["intervals"]:
        if i["lower_ticks"] is None:
            continue
        t = tv[(i["rank"], i["ctx"], i["interval"])]
        assert i["lower_ticks"] - relax - 4 <= t <= i["upper_ticks"] + relax + 4


def test_relaxation_is_positive_somewhere_in_the_family(runs):
    """The family above is worth its name: slot order binds, exact readings need loosening."""
    relax = [analyze(runs(name)).sync.relaxation for name in ("fft-1", "julia-1")]
    assert max(relax) > 0


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "-inf", "2147483649", "1e308", "x"])
def test_read_delay_must_be_a_delay(runs, tmp_path, capsys, value):
    status, _ = _cli([str(runs("fft-1")), "-o", str(tmp_path / "a.otf2"),
                      "--read-delay-ticks", value], capsys)
    assert status == 2
    assert not (tmp_path / "a.otf2").exists()


def test_guaranteed_mode_says_so(runs, tmp_path):
    import cell_otf2

    rep_path = tmp_path / "r.json"
    cell_otf2.convert(runs("fft-1"), tmp_path / "b.otf2", report=rep_path, read_delay_ticks=8)
    rep = json.loads(rep_path.read_text())
    assert rep["assumed"]["slot_order"] == "read delay"
    assert rep["assumed"]["read_delay_ticks"] == 8.0
