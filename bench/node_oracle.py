"""How close the node fit comes to what its messages allow: on one run (simulated, or a foreign
run with its ``clocks.json``), the converter's node maps against the truth at every record of
the other nodes, beside oracle fits that are told what the messages cannot tell and otherwise
fit the same model (each node's offset piecewise linear on a grid of windows, a penalty on
second differences chosen by 3-fold cross-validation over interleaved windows, least squares
over every node pair at once):

- ``truth``: the true offset difference at every message (no latency unknown): the limit of
  the model and the grid (what interpolating between exchanges costs);
- ``select T``: told which messages are timely (true latency within T us of the least of their
  kind, node pair and direction), with an unknown least latency per kind and node pair (the
  same both ways, as ours assumes): ours with a perfect choice of messages;
- ``floor T``: told, besides, the least latency of every kind, node pair and direction (no
  symmetry assumed): what the latency jitter of the timely messages alone leaves.

Each row also gives, per hop distance from the reference (over node pairs that exchange
symmetric kinds), the RMS error: along a chain the error of a node is the sum of its hops'
errors, so with independent hops it grows as sqrt(hops) times one hop's error. It also gives
the jitter of the timely messages (true latency above the least, us). It changes nothing in
the converter and asserts nothing.

    python bench/node_oracle.py RUN [RUN ...] [--thresholds 1,4] [--fit-only]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import shortest_path
from scipy.sparse.linalg import splu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cellbench.analysis import analyze  # noqa: E402
from cellbench.nodetruth import true_clocks  # noqa: E402

from cell_otf2.model import DomainKind  # noqa: E402
from cell_otf2.sync.nodefit.fit import fit_points, points_from_trace  # noqa: E402
from cell_otf2.sync.nodefit.points import (  # noqa: E402
    ORDER_ONLY,
    FitOptions,
    map_to_reference,
    rough_offsets,
)

#: smoothing strengths tried, smoothest first (the package's list)
LAMBDAS = (1e12, 1e10, 1e8, 1e7, 1e6, 1e5, 1e4, 1e3, 1e2, 1e1, 1.0)
SAMPLES_PER_NODE = 20000  # records per node the errors are taken at (evenly spread)


@dataclass
class RunData:
    name: str
    hz: float
    n_nodes: int
    ref: int
    pts: np.ndarray
    c: np.ndarray  # rough offsets: reference ~ timebase + c
    latency: np.ndarray  # every point's true latency, ticks
    x_eval: list[np.ndarray]  # per node: node timebase of sampled records
    t_true: list[np.ndarray]  # ... and the true reference time there
    ours: list  # the converter's node maps
    hops: np.ndarray  # per node: hops to the reference over symmetric node pairs


def load(run: Path, options: FitOptions | None = None) -> RunData:
    """Decode and match ``run``, its points, the truth at them and at its records, and the
    node maps the converter's fit gives (with ``options``)."""
    pipe = analyze(run)
    dec = pipe.decoded
    man = dec.manifest
    clocks = true_clocks(run)
    names = [nd.name for nd in man.nodes]
    to_ref = [clocks.to_reference[nm] for nm in names]
    pts = points_from_trace(dec, pipe.matches)
    ref = man.node_of_rank(0)
    n_nodes = dec.n_nodes
    hz = float(man.timebase_hz)
    sent = np.zeros(pts.size)
    recv = np.zeros(pts.size)
    for n in range(n_nodes):
        sa, sb = pts["a"] == n, pts["b"] == n
        sent[sa] = to_ref[n](pts["ta"][sa])
        recv[sb] = to_ref[n](pts["tb"][sb])
    c = rough_offsets(pts, n_nodes, ref)
    fit = fit_points(pts, n_nodes, ref, hz, options)
    rec = dec.records
    dom = rec["domain"]
    x_eval, t_true = [], []
    for n in range(n_nodes):
        on = dom >= 0  # records read on the node's own timebase (PPE)
        on[on] = (dec.domains["node"][dom[on]] == n) & (
            dec.domains["kind"][dom[on]] == DomainKind.NODE)
        x = np.sort(rec["local"][on].astype(np.float64))
        if x.size > SAMPLES_PER_NODE:
            x = x[np.linspace(0, x.size - 1, SAMPLES_PER_NODE).astype(np.int64)]
        x_eval.append(x)
        t_true.append(to_ref[n](x) if x.size else x)
    sym = pts["kind"] != ORDER_ONLY
    adj = sparse.coo_matrix((np.ones(int(sym.sum())), (pts["a"][sym], pts["b"][sym])),
                            shape=(n_nodes, n_nodes)).tocsr()
    hops = shortest_path(adj, directed=False, unweighted=True, indices=ref)
    return RunData(run.name, hz, n_nodes, ref, pts, c, recv - sent, x_eval, t_true,
                   fit.maps, hops)


def errors_us(d: RunData, to_ref: list) -> dict[int, np.ndarray]:
    """Per non-reference node, the error (us) at its sampled records of ``to_ref[n](x)``."""
    out = {}
    for n in range(d.n_nodes):
        if n == d.ref or to_ref[n] is None or d.x_eval[n].size == 0:
            continue
        out[n] = (to_ref[n](d.x_eval[n]) - d.t_true[n]) / d.hz * 1e6
    return out


def ours_to_ref(d: RunData) -> list:
    return [None if m is None else (lambda x, m=m: map_to_reference(m, x)) for m in d.ours]


# --------------------------------------------------------------------------------------------
# the oracle fit: the estimate's model on equations the oracle provides
# --------------------------------------------------------------------------------------------


def grid_fit(d: RunData, rows: np.ndarray, rhs: np.ndarray, latency_groups: np.ndarray | None,
             width_ticks: float) -> list:
    """Least squares over ``rows`` of the points: ``g_b(u) - g_a(u) (+ L_group) = rhs`` with
    g a node's offset beyond ``x + c`` (reference ticks), piecewise linear on windows of
    ``width_ticks``, a second-difference penalty chosen by 3-fold CV over interleaved
    windows (the strongest within 2 % of the best). Returns per node the map x -> reference."""
    pts = d.pts[rows]
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    u = pts["ta"] + d.c[a]
    u0, u1 = float(u.min()), float(u.max())
    n_k = int(max(1, min(400, np.ceil(max(u1 - u0, 1.0) / width_ticks))))
    width = max(u1 - u0, 1.0) / n_k
    nodes = [n for n in range(d.n_nodes) if n != d.ref]
    col = np.full(d.n_nodes, -1)
    col[nodes] = np.arange(len(nodes))
    # hat functions extended linearly beyond the first and last knots, as the curve is
    pos = (u - u0) / width - 0.5
    j0 = np.clip(np.floor(pos).astype(np.int64), 0, max(n_k - 2, 0))
    frac = pos - j0 if n_k > 1 else np.zeros(u.size)
    n_e = len(nodes) * n_k
    n_g = 0
    if latency_groups is not None:
        _, g_inv = np.unique(latency_groups, return_inverse=True)
        n_g = int(g_inv.max()) + 1
    n_x = n_e + n_g
    ri, ci, vi = [], [], []
    m = rows.size
    for node, s in ((b, 1.0), (a, -1.0)):
        cn = col[node]
        ok = cn >= 0
        for dj, wgt in ((0, 1.0 - frac), (1, frac)):
            if n_k == 1 and dj == 1:
                continue
            ri.append(np.arange(m)[ok])
            ci.append(cn[ok] * n_k + j0[ok] + dj)
            vi.append(s * wgt[ok])
    if n_g:
        ri.append(np.arange(m))
        ci.append(n_e + g_inv.ravel())
        vi.append(np.ones(m))
    mat = sparse.csr_matrix((np.concatenate(vi), (np.concatenate(ri), np.concatenate(ci))),
                            shape=(m, n_x))
    if n_k >= 3:
        d2 = sparse.diags([1.0, -2.0, 1.0], [0, 1, 2], shape=(n_k - 2, n_k))
        blk = sparse.block_diag([d2] * len(nodes))
        full = sparse.hstack([blk, sparse.csr_matrix((blk.shape[0], n_g))]).tocsr()
        pen = (full.T @ full).tocsr()
    else:
        pen = sparse.csr_matrix((n_x, n_x))

    def solve(mt: sparse.csr_matrix, y: np.ndarray, lam: float) -> np.ndarray:
        normal = (mt.T @ mt + lam * pen + 1e-9 * sparse.identity(n_x)).tocsc()
        try:
            return np.atleast_1d(splu(normal, permc_spec="MMD_AT_PLUS_A").solve(mt.T @ y))
        except RuntimeError:
            return np.full(n_x, np.nan)

    win = np.clip(((u - u0) // width).astype(np.int64), 0, n_k - 1)
    fold = win % 3
    scores = []
    for lam in LAMBDAS:
        err = 0.0
        for f in range(3):
            test = fold == f
            if not test.any() or test.all():
                continue
            x = solve(mat[~test], rhs[~test], lam)
            err += float(np.sum((mat[test] @ x - rhs[test]) ** 2))
        scores.append(err if np.isfinite(err) else np.inf)
    best = min(scores)
    lam = next(lm for lm, sc in zip(LAMBDAS, scores, strict=True) if sc <= 1.02 * best + 1e-9)
    x = solve(mat, rhs, lam)
    e = x[:n_e].reshape(len(nodes), n_k)
    grid = u0 + (np.arange(n_k) + 0.5) * width
    out: list = [None] * d.n_nodes
    out[d.ref] = lambda xx: np.asarray(xx, dtype=np.float64)
    for i, n in enumerate(nodes):
        if not np.isfinite(e[i]).all():
            continue

        def f(xx: np.ndarray, n: int = n, ei: np.ndarray = e[i]) -> np.ndarray:
            uu = np.asarray(xx, dtype=np.float64) + d.c[n]
            return uu + curve_through(grid, ei, uu)

        out[n] = f
    return out


def curve_through(knots: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The piecewise-linear curve through (knots, values) at ``x``, extended linearly."""
    if knots.size == 1:
        return np.full(x.shape, float(values[0]))
    j = np.clip(np.searchsorted(knots, x, side="right") - 1, 0, knots.size - 2)
    slope = (values[j + 1] - values[j]) / (knots[j + 1] - knots[j])
    return values[j] + (x - knots[j]) * slope


def oracle_maps(d: RunData, mode: str, thr_us: float, width_ticks: float) -> list:
    """The oracle fits: ``mode`` "truth", "select" or "floor"."""
    pts = d.pts
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    delay = (pts["tb"] + d.c[b]) - (pts["ta"] + d.c[a])
    # with g_n = T_n(x) - x - c_n: latency = delay + g_b(tb) - g_a(ta)
    if mode == "truth":
        rows = np.flatnonzero(pts["kind"] != ORDER_ONLY)
        return grid_fit(d, rows, d.latency[rows] - delay[rows], None, width_ticks)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    kinds, kid = np.unique(pts["kind"], return_inverse=True)
    group = (lo * d.n_nodes + hi) * kinds.size + kid.ravel()
    dkey = group * 2 + (a != lo)
    sym = pts["kind"] != ORDER_ONLY
    least = np.full(int(dkey.max()) + 1, np.inf)
    np.minimum.at(least, dkey[sym], d.latency[sym])
    timely = sym & (d.latency <= least[dkey] + thr_us * 1e-6 * d.hz)
    # groups with timely messages both ways
    present = np.unique(dkey[timely])
    both = np.intersect1d(present[present % 2 == 0] // 2, present[present % 2 == 1] // 2)
    rows = np.flatnonzero(timely & np.isin(group, both))
    if mode == "select":
        # delay = L_group - (g_b - g_a): unknown L per group, the same both ways
        return grid_fit(d, rows, -delay[rows], group[rows], width_ticks)
    return grid_fit(d, rows, least[dkey[rows]] - delay[rows], None, width_ticks)


def window_ticks(d: RunData, o: FitOptions) -> float:
    """The grid's window, as the estimate sizes it: about ``window_messages`` messages per
    direction of a kind (the median over the directions of the timely messages), at most
    ``max_knots`` windows over the run. Timely here: true latency within ``timely_us`` of the
    least of the direction."""
    pts = d.pts
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    kinds, kid = np.unique(pts["kind"], return_inverse=True)
    dkey = ((np.minimum(a, b) * d.n_nodes + np.maximum(a, b)) * kinds.size + kid.ravel()) * 2 \
        + (a > b)
    sym = pts["kind"] != ORDER_ONLY
    least = np.full(int(dkey.max()) + 1, np.inf)
    np.minimum.at(least, dkey[sym], d.latency[sym])
    timely = sym & (d.latency <= least[dkey] + o.timely_us * 1e-6 * d.hz)
    u = pts["ta"] + d.c[a]
    span = max(float(u[sym].max() - u[sym].min()), 1.0)
    periods = []
    for k in np.unique(dkey[timely]):
        t = np.sort(u[timely & (dkey == k)])
        if t.size > 1:
            periods.append((t[-1] - t[0]) / (t.size - 1))
    if not periods:
        return span
    w = o.window_messages * float(np.median(periods))
    w = min(max(w, span / o.max_windows, 1.0), span)
    return span / min(max(1.0, np.ceil(span / w)), o.max_knots)


def jitter_us(d: RunData, thr_us: float) -> float:
    """RMS of the true latency above the least of its kind, node pair and direction, over the
    messages within ``thr_us`` of it (us)."""
    pts = d.pts
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    kinds, kid = np.unique(pts["kind"], return_inverse=True)
    dkey = ((np.minimum(a, b) * d.n_nodes + np.maximum(a, b)) * kinds.size + kid.ravel()) * 2 \
        + (a > b)
    sym = pts["kind"] != ORDER_ONLY
    least = np.full(int(dkey.max()) + 1, np.inf)
    np.minimum.at(least, dkey[sym], d.latency[sym])
    ex = (d.latency - least[dkey]) / d.hz * 1e6
    sel = sym & (ex <= thr_us)
    return float(np.sqrt(np.mean(ex[sel] ** 2))) if sel.any() else float("nan")


def summary(errs: dict[int, np.ndarray], hops: np.ndarray) -> str:
    if not errs:
        return "no nodes"
    allv = np.concatenate(list(errs.values()))
    allv = allv[np.isfinite(allv)]
    by_hop: dict[int, list[np.ndarray]] = {}
    for n, e in errs.items():
        by_hop.setdefault(int(hops[n]) if np.isfinite(hops[n]) else -1, []).append(e)
    hop_txt = " ".join(
        f"{h}:{np.sqrt(np.nanmean(np.concatenate(v) ** 2)):.3f}" for h, v in sorted(by_hop.items()))
    return (f"RMS {np.sqrt(np.mean(allv ** 2)):7.3f} max {np.abs(allv).max():7.3f} us | "
            f"per hop RMS {hop_txt}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--thresholds", default="1,4", help="timely thresholds (us) of the oracles")
    ap.add_argument("--timely-us", type=float, default=None, help="ours with this timely_us")
    ap.add_argument("--window-messages", type=float, default=None,
                    help="ours and the oracles' grid with this window_messages")
    ap.add_argument("--late-window-us", type=float, default=None,
                    help="ours with this late_window_us")
    ap.add_argument("--fit-only", action="store_true", help="ours only")
    args = ap.parse_args()
    o = FitOptions()
    if args.timely_us is not None:
        o = replace(o, timely_us=args.timely_us)
    if args.late_window_us is not None:
        o = replace(o, late_window_us=args.late_window_us)
    if args.window_messages is not None:
        o = replace(o, window_messages=args.window_messages)
    for run in args.runs:
        d = load(run, o)
        print(f"{d.name}: {d.n_nodes} nodes, {d.pts.size} points, hops "
              f"{d.hops.astype(int).tolist() if np.isfinite(d.hops).all() else d.hops}")
        print(f"  ours            {summary(errors_us(d, ours_to_ref(d)), d.hops)}", flush=True)
        if args.fit_only:
            continue
        width = window_ticks(d, o)
        print(f"  truth           "
              f"{summary(errors_us(d, oracle_maps(d, 'truth', 0, width)), d.hops)}", flush=True)
        for thr in (float(t) for t in args.thresholds.split(",")):
            for mode in ("select", "floor"):
                errs = errors_us(d, oracle_maps(d, mode, thr, width))
                print(f"  {mode:6s} {thr:4.1f} us  {summary(errs, d.hops)}  (jitter "
                      f"{jitter_us(d, thr):.2f} us)", flush=True)


if __name__ == "__main__":
    main()
