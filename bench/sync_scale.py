"""Scale benchmark of the clock-synchronization solver (cell_otf2.sync.solver.solve).

Builds a realistic constraint system from known true offsets and prints the time per step:
a few node domains (raw timebase values of ~1e12 ticks), many SPE live-interval domains (8 SPE
lanes per node, each a sequence of intervals covering the run), one shared slot-order stream
per node in which consecutive slots of different domains give a happened-before pair, a few
hundred cross-node pairs (standing in for MPI), integer truncation and a few ticks of read
delay (so the system is slightly infeasible).

    .venv/bin/python bench/sync_scale.py [--domains 10000] [--constraints 1000000] [--seed 0]
        [--compare] [--baselines 300]

Checks nothing about speed by itself; it prints the numbers and the accuracy against truth.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from cellbench.sync_baselines import lamport_offsets, paper_solve
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import bellman_ford, johnson

from cell_otf2.sync import solver


def make_instance(
    n_domains: int = 10_000,
    n_constraints: int = 1_000_000,
    n_nodes: int = 4,
    lanes: int = 8,
    max_delay: int = 3,
    seed: int = 0,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(n, src, dst, weight, true_offset): x[dst] - x[src] <= weight, truth relative to 0."""
    rng = np.random.default_rng(seed)
    n_int = n_domains - n_nodes
    g = np.empty(n_domains)
    g[:n_nodes] = -(1e12 + rng.integers(0, 10**9, n_nodes))  # local = true - g ~ 1e12
    g[n_nodes:] = rng.integers(-(2**32), 2**32, n_int)
    run_ticks = 2.0 * n_constraints / n_nodes  # ~2 ticks between slots: delays matter
    per_node = n_int // n_nodes
    srcs, dsts, ws = [], [], []
    slots_per_node = int(1.4 * (n_constraints - 400) / n_nodes) + 1  # ~70 % pairs differ
    for k in range(n_nodes):
        ids = (
            n_nodes
            + k * per_node
            + np.arange(per_node if k < n_nodes - 1 else n_int - k * per_node)
        )
        lane = np.arange(ids.size) % lanes
        # intervals of one lane share its time span: boundaries at sorted random cut points
        t_true = np.sort(rng.uniform(0, run_ticks, slots_per_node))
        dom = np.full(slots_per_node, k, dtype=np.int64)
        spe = rng.random(slots_per_node) < 0.5
        which_lane = rng.integers(0, lanes, slots_per_node)
        for ln in range(lanes):
            mine = ids[lane == ln]
            cuts = np.sort(rng.uniform(0, run_ticks, mine.size - 1))
            sel = spe & (which_lane == ln)
            dom[sel] = mine[np.searchsorted(cuts, t_true[sel])]
        delay = np.where(
            rng.random(slots_per_node) < 0.05, rng.integers(0, max_delay + 1, slots_per_node), 0
        )
        local = np.floor(t_true - g[dom]) + delay
        a, b = dom[:-1], dom[1:]
        diff = a != b
        # slot i happened before slot i+1: edge dom(i+1) -> dom(i), weight local(i+1) - local(i)
        srcs.append(b[diff])
        dsts.append(a[diff])
        ws.append((local[1:] - local[:-1])[diff])
    # cross-node pairs (MPI stand-in): node i at true t before node j at true t + latency
    m = 400
    ni = rng.integers(0, n_nodes, m)
    nj = (ni + rng.integers(1, n_nodes, m)) % n_nodes
    t = rng.uniform(0, run_ticks, m)
    lat = rng.uniform(50, 500, m)
    srcs.append(nj)
    dsts.append(ni)
    ws.append(np.floor(t + lat - g[nj]) - np.floor(t - g[ni]))
    src = np.concatenate(srcs)
    dst = np.concatenate(dsts)
    w = np.concatenate(ws)
    return n_domains, src, dst, w, g - g[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", type=int, default=10_000)
    ap.add_argument("--constraints", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--compare",
        action="store_true",
        help="also time scipy's johnson and bellman_ford for the bounds",
    )
    ap.add_argument(
        "--baselines",
        type=int,
        default=300,
        metavar="N",
        help="domains of the small instance for the baseline comparison (0: skip)",
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    n, src, dst, w, truth = make_instance(args.domains, args.constraints, seed=args.seed)
    print(
        f"instance: {n} domains, {src.size} constraints, built in {time.perf_counter() - t0:.2f} s"
    )
    t0 = time.perf_counter()
    sol = solver.solve(n, src, dst, w, reference=0)
    total = time.perf_counter() - t0
    for step, sec in sol.timings.items():
        print(f"  {step:<16s} {sec:8.3f} s")
    print(f"  {'total':<16s} {total:8.3f} s")
    print(f"distinct edges {sol.n_edges}, relaxation {sol.relaxation:.6f} ticks")
    both = sol.bounded == solver.BOTH
    inside = (truth >= sol.lower - 1e-6) & (truth <= sol.upper + 1e-6)
    err = np.abs(sol.offset - truth)[both]
    width = (sol.upper - sol.lower)[both]
    print(
        f"bounded both: {both.sum()}/{n}; truth inside bounds: {inside[both].mean():.4f}; "
        f"|offset - truth| max {err.max():.2f} mean {err.mean():.2f} ticks; "
        f"bound width max {width.max():.1f} mean {width.mean():.1f}"
    )
    viol = solver.check_feasible(sol.offset, src, dst, w + sol.relaxation, tol=1e-6)
    print(f"max violation of loosened constraints: {viol}")
    if args.compare:
        compare_johnson(n, src, dst, w, sol)
    if args.baselines:
        compare_baselines(args.baselines, args.seed)


def compare_johnson(n, src, dst, w, sol) -> None:
    """scipy's johnson (Bellman-Ford inside) on the same collapsed, loosened graph."""
    cs, cd, cw = solver.collapse_parallel(n, src, dst, w)
    g = csr_matrix((cw + sol.relaxation, (cs, cd)), shape=(n, n))
    t0 = time.perf_counter()
    D = johnson(g, indices=[sol.reference])[0]
    dt = time.perf_counter() - t0
    same = np.allclose(np.where(np.isfinite(D), D, 0), np.where(np.isfinite(D), sol.upper, 0))
    print(f"scipy johnson, one source: {dt:.3f} s; same upper bounds: {same}")
    t0 = time.perf_counter()
    bellman_ford(g, indices=[sol.reference])
    print(f"scipy bellman_ford, one source: {time.perf_counter() - t0:.3f} s")


def compare_baselines(n_small: int, seed: int) -> None:
    """Accuracy against truth of solve, the paper's algorithm and Lamport bumping."""
    n, src, dst, w, truth = make_instance(n_small, 60 * n_small, n_nodes=2, seed=seed)
    sol = solver.solve(n, src, dst, w, reference=0)
    t0 = time.perf_counter()
    paper, _ = paper_solve(n, src, dst, w, reference=0)
    t_paper = time.perf_counter() - t0
    placed = sol.bounded == solver.BOTH
    # Lamport from offsets that are right to within a few hundred ticks (a run-begin anchor)
    rng = np.random.default_rng(seed)
    initial = np.where(placed, truth + rng.integers(-300, 300, n), 0.0)
    initial[0] = 0.0
    lam = lamport_offsets(n, src, dst, w, initial, reference=0, relaxation=sol.relaxation)
    print(f"baselines on {n} domains, {src.size} constraints (|offset - truth| on bounded):")
    for name, off, relax in (
        ("solve", sol.offset, sol.relaxation),
        ("paper", paper.offset, paper.relaxation),
        ("lamport", lam, sol.relaxation),
    ):
        err = np.abs(off - truth)[placed]
        print(
            f"  {name:<8s} relaxation {relax:10.3f}  max {err.max():9.2f}  mean {err.mean():8.2f}"
        )
    print(f"  (paper's Floyd-Warshall took {t_paper:.2f} s)")


if __name__ == "__main__":
    main()
