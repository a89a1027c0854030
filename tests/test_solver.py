"""solver.py and sync_baselines.py against ground truth and independent computations.

Instances come from KNOWN true offsets: domains with offsets g, events with true times,
local = floor(true - g) (+ a few ticks of read delay for infeasible cases), pairs sampled
among events in true order. Independent references: scipy's linprog for the relaxation,
cycle enumeration on tiny graphs, scipy's Johnson and a plain Bellman-Ford sweep.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cellbench.sync_baselines import floyd_warshall, lamport_offsets, paper_solve
from scipy.optimize import linprog
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import johnson

from cell_otf2.sync import solver


def make_instance(rng, n, n_events, n_pairs, max_delay=0, scale=10**6, node_scale=None):
    """(src, dst, weight, truth): truth[d] = g[d] - g[0], reference 0."""
    g = rng.integers(-scale, scale, n).astype(np.float64)
    if node_scale is not None:  # a raw-timebase-like reference clock
        g[0] = -float(node_scale)
    t_true = np.sort(rng.uniform(0, 20.0 * n_events, n_events))
    dom = rng.integers(0, n, n_events)
    dom[:n] = np.arange(n)  # every domain has events
    rng.shuffle(dom)
    delay = rng.integers(0, max_delay + 1, n_events) if max_delay else 0
    local = np.floor(t_true - g[dom]) + delay
    # consecutive pairs (slot order) plus random pairs i < j in true order
    i = np.concatenate([np.arange(n_events - 1), rng.integers(0, n_events - 1, n_pairs)])
    j = np.concatenate([np.arange(1, n_events), i[n_events - 1 :] + rng.integers(1, 30, n_pairs)])
    j = np.minimum(j, n_events - 1)
    keep = dom[i] != dom[j]
    i, j = i[keep], j[keep]
    # e_i happened before e_j: edge dom(j) -> dom(i), weight local(j) - local(i)
    return dom[j], dom[i], local[j] - local[i], g - g[0]


def lp_relaxation(n, src, dst, w, ref=0):
    """min delta >= 0 such that x[dst] - x[src] <= w + delta is feasible (HiGHS)."""
    m = src.size
    A = np.zeros((m, n + 1))
    A[np.arange(m), dst] += 1.0
    A[np.arange(m), src] -= 1.0
    A[:, n] = -1.0
    bounds = [(None, None)] * n + [(0, None)]
    bounds[ref] = (0, 0)
    c = np.zeros(n + 1)
    c[n] = 1.0
    res = linprog(c, A_ub=A, b_ub=w, bounds=bounds, method="highs")
    assert res.status == 0
    return res.fun


def brute_min_cycle_mean(n, src, dst, w):
    """Minimum mean over every simple cycle, by enumeration (tiny n only)."""
    best = {}
    for s, d, ww in zip(src.tolist(), dst.tolist(), w.tolist(), strict=True):
        best[(s, d)] = min(best.get((s, d), np.inf), ww)
    mcm = np.inf
    for k in range(1, n + 1):
        for cyc in itertools.permutations(range(n), k):
            if cyc[0] != min(cyc):
                continue
            edges = list(zip(cyc, cyc[1:] + cyc[:1], strict=True))
            if all(e in best for e in edges):
                mcm = min(mcm, sum(best[e] for e in edges) / k)
    return mcm


# ------------------------------------------------------------------------------------------
# ground truth
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_feasible_instance_contains_truth_and_needs_no_relaxation(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40))
    src, dst, w, truth = make_instance(rng, n, 40 * n, 20 * n, node_scale=10**12 + seed)
    sol = solver.solve(n, src, dst, w, reference=0)
    assert sol.relaxation == 0.0
    assert (sol.bounded == solver.BOTH).all()
    assert (truth >= sol.lower - 1e-3).all() and (truth <= sol.upper + 1e-3).all()
    assert (sol.lower <= sol.offset + 1e-3).all() and (sol.offset <= sol.upper + 1e-3).all()
    assert solver.check_feasible(sol.offset, src, dst, w, tol=1e-3) == 0.0
    assert sol.offset[0] == 0.0
    assert np.isclose(sol.offset, 0.5 * (sol.lower + sol.upper), atol=1e-3).all()


@pytest.mark.parametrize("seed", range(6))
def test_relaxation_equals_linear_program_on_infeasible_instances(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(3, 30))
    src, dst, w, _ = make_instance(rng, n, 30 * n, 10 * n, max_delay=4, scale=10**4)
    sol = solver.solve(n, src, dst, w, reference=0)
    expected = lp_relaxation(n, *solver.collapse_parallel(n, src, dst, w))
    assert expected > 0  # the delays really make it infeasible
    assert sol.relaxation == pytest.approx(expected, abs=1e-6)
    assert sol.relaxation >= expected - 1e-9  # never under-relaxed
    assert solver.check_feasible(sol.offset, src, dst, w + sol.relaxation, tol=1e-6) == 0.0
    # and no less would do: the loosened system is tight
    with pytest.raises(ValueError):
        solver.all_pairs_bounds(n, src, dst, w, sol.relaxation - 1e-3)


@pytest.mark.parametrize("seed", range(40))
def test_relaxation_equals_cycle_enumeration_on_tiny_graphs(seed):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(1, 6))
    m = int(rng.integers(1, 14))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.integers(-9, 12, m).astype(np.float64) + rng.choice([0.0, 0.25, 1 / 3], m)
    mcm = brute_min_cycle_mean(n, src, dst, w)
    assert solver.minimum_cycle_mean(n, src, dst, w) == pytest.approx(mcm, abs=1e-9)
    sol = solver.solve(n, src, dst, w, reference=0)
    assert sol.relaxation == pytest.approx(max(0.0, -mcm) if np.isfinite(mcm) else 0.0, abs=1e-9)
    assert solver.check_feasible(sol.offset, src, dst, w + sol.relaxation, tol=1e-9) == 0.0


def test_bounds_equal_johnson_distances_at_moderate_size():
    rng = np.random.default_rng(7)
    n = 300
    src, dst, w, _ = make_instance(rng, n, 20_000, 5_000, max_delay=3, scale=10**9)
    sol = solver.solve(n, src, dst, w, reference=0)
    cs, cd, cw = solver.collapse_parallel(n, src, dst, w)
    g = csr_matrix((cw + sol.relaxation, (cs, cd)), shape=(n, n))
    D = johnson(g, indices=[0])[0]
    Dt = johnson(g.T.tocsr(), indices=[0])[0]
    assert np.allclose(sol.upper, D, atol=1e-4)
    assert np.allclose(sol.lower, -Dt, atol=1e-4)


# ------------------------------------------------------------------------------------------
# bounded / unbounded domains
# ------------------------------------------------------------------------------------------


def test_unreachable_and_one_sided_domains():
    # 0 <-> 1 both ways; 1 -> 2 only (2 reachable from 0: upper only);
    # 3 -> 0 only (3 reaches 0: lower only); 4 untouched
    src = np.array([0, 1, 1, 3])
    dst = np.array([1, 0, 2, 0])
    w = np.array([10.0, -4.0, 5.0, 7.0])
    sol = solver.solve(5, src, dst, w, reference=0)
    assert sol.bounded.tolist() == ["both", "both", "upper", "lower", "none"]
    assert sol.lower[1] == 4.0 and sol.upper[1] == 10.0 and sol.offset[1] == 7.0
    assert sol.upper[2] == 15.0 and sol.lower[2] == -np.inf
    assert sol.lower[3] == -7.0 and sol.upper[3] == np.inf
    assert np.isnan(sol.offset[4]) and sol.lower[4] == -np.inf and sol.upper[4] == np.inf
    # one-sided domains are placed consistently with the placed ones, not at their bound
    assert sol.offset[2] == 12.0  # x1 + 5, tighter than upper = 15
    assert sol.offset[3] == -7.0
    assert solver.check_feasible(sol.offset, src, dst, w) == 0.0
    # with alpha = 1 the upper-only domain takes its bound
    assert solver.solve(5, src, dst, w, reference=0, alpha=1.0).offset[2] == 15.0


def test_bound_at_the_one_sided_bound_would_violate_a_constraint():
    """Why one-sided domains are not simply set to their bound (documented choice)."""
    src, dst, w = np.array([0, 1, 1]), np.array([1, 0, 2]), np.array([10.0, -4.0, 5.0])
    sol = solver.solve(3, src, dst, w, reference=0)
    naive = sol.offset.copy()
    naive[2] = sol.upper[2]
    assert solver.check_feasible(naive, src, dst, w) > 0
    assert solver.check_feasible(sol.offset, src, dst, w) == 0.0


def test_check_feasible_reports_the_worst_violation():
    x = np.array([0.0, 5.0, np.nan])
    assert solver.check_feasible(x, [0, 1, 0], [1, 0, 2], [3.0, 10.0, 0.0]) == 2.0
    assert solver.check_feasible(x, [0], [1], [5.0]) == 0.0


# ------------------------------------------------------------------------------------------
# parallel edges
# ------------------------------------------------------------------------------------------


def test_collapse_keeps_the_minimum_of_parallel_edges():
    src = np.array([2, 0, 2, 0, 1, 0])
    dst = np.array([1, 1, 1, 1, 0, 1])
    w = np.array([4.0, 9.0, -1.0, 3.0, 2.0, 5.0])
    s, d, ww = solver.collapse_parallel(3, src, dst, w)
    assert list(zip(s.tolist(), d.tolist(), ww.tolist(), strict=True)) == [
        (0, 1, 3.0),
        (1, 0, 2.0),
        (2, 1, -1.0),
    ]
    sol = solver.solve(3, src, dst, w, reference=0)
    assert sol.n_edges == 3 and sol.n_constraints == 6
    assert sol.upper[1] == 3.0 and sol.lower[1] == -2.0  # a sum would have given 17 and -2


def test_invalid_input_is_refused():
    with pytest.raises(ValueError):
        solver.solve(2, [0], [2], [1.0], reference=0)
    with pytest.raises(ValueError):
        solver.solve(2, [0], [1], [np.nan], reference=0)
    with pytest.raises(ValueError):
        solver.solve(2, [0, 1], [1], [1.0], reference=0)
    with pytest.raises(ValueError):
        solver.solve(2, [0], [1], [1.0], reference=5)


# ------------------------------------------------------------------------------------------
# all pairs and the paper's error table
# ------------------------------------------------------------------------------------------


def test_all_pairs_bounds_equal_floyd_warshall_and_subset():
    rng = np.random.default_rng(11)
    n = 25
    src, dst, w, _ = make_instance(rng, n, 600, 300, max_delay=2, scale=10**5)
    sol = solver.solve(n, src, dst, w, reference=0)
    D = solver.all_pairs_bounds(n, src, dst, w, sol.relaxation)
    F = floyd_warshall(n, src, dst, w + sol.relaxation)
    assert np.allclose(D, F, atol=1e-6)
    sub = [4, 0, 17]
    assert np.allclose(
        solver.all_pairs_bounds(n, src, dst, w, sol.relaxation, subset=sub), F[np.ix_(sub, sub)]
    )


def test_error_table_on_a_hand_computed_matrix():
    # domains: 0 PPE, 1..3 SPE
    D = np.array(
        [
            [0.0, 4.0, 6.0, 2.0],
            [2.0, 0.0, 8.0, 1.0],
            [0.0, 2.0, 0.0, 3.0],
            [4.0, 5.0, 1.0, 0.0],
        ]
    )
    tab = solver.error_table(D, [False, True, True, True], ppe_index=0)
    # pair errors: (0,1) 3, (0,2) 3, (0,3) 3, (1,2) 5, (1,3) 3, (2,3) 2
    assert tab == {
        "max_error_all": 5.0,
        "max_error_spe": 5.0,
        "mean_error_spe_ppe": 3.0,
        "mean_error_spe_spe": pytest.approx(10.0 / 3.0),
    }


# ------------------------------------------------------------------------------------------
# baselines
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_paper_agrees_with_solve_on_feasible_instances(seed):
    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(3, 30))
    src, dst, w, truth = make_instance(rng, n, 30 * n, 10 * n)
    sol = solver.solve(n, src, dst, w, reference=0)
    paper, D = paper_solve(n, src, dst, w, reference=0)
    assert paper.relaxation == 0.0
    assert np.allclose(D, solver.all_pairs_bounds(n, src, dst, w, 0.0), atol=1e-6)
    assert np.allclose(paper.upper, sol.upper) and np.allclose(paper.lower, sol.lower)
    assert np.allclose(paper.offset, sol.offset)
    assert (truth >= paper.lower).all() and (truth <= paper.upper).all()


@pytest.mark.parametrize("seed", range(6))
def test_paper_over_relaxes_on_infeasible_instances(seed):
    rng = np.random.default_rng(400 + seed)
    n = int(rng.integers(3, 25))
    src, dst, w, _ = make_instance(rng, n, 30 * n, 10 * n, max_delay=5, scale=10**4)
    sol = solver.solve(n, src, dst, w, reference=0)
    paper, _ = paper_solve(n, src, dst, w, reference=0)
    assert paper.relaxation >= sol.relaxation - 1e-9
    assert solver.check_feasible(paper.offset, src, dst, w + paper.relaxation, tol=1e-6) == 0.0


def test_paper_relaxation_on_a_three_cycle_is_half_its_total():
    src, dst, w = np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([-2.0, -2.0, -2.0])
    assert solver.solve(3, src, dst, w, 0).relaxation == pytest.approx(2.0)  # -mean
    assert paper_solve(3, src, dst, w, 0)[0].relaxation == 3.0  # d/2, d = 6
    # a full FW run composes the cycle with itself on the diagonal; the paper's d is the cycle
    assert np.diag(floyd_warshall(3, src, dst, w)).min() == -12.0
    assert np.diag(floyd_warshall(3, src, dst, w, stop_at_negative=True)).min() == -6.0


def test_paper_relaxation_stays_of_the_size_of_the_delays():
    rng = np.random.default_rng(9)
    n = 120
    src, dst, w, _ = make_instance(rng, n, 4000, 2000, max_delay=3, scale=10**6)
    sol = solver.solve(n, src, dst, w, reference=0)
    paper, _ = paper_solve(n, src, dst, w, reference=0)
    assert sol.relaxation <= paper.relaxation < 10 * max(sol.relaxation, 1.0)


def _bellman_ford_bump(n, src, dst, w, initial):
    x = initial.astype(np.float64).copy()
    for _ in range(n + 1):
        changed = False
        for s, d, ww in zip(src.tolist(), dst.tolist(), w.tolist(), strict=True):
            if x[s] < x[d] - ww:
                x[s] = x[d] - ww
                changed = True
        if not changed:
            return x
    raise AssertionError("no fixpoint")


@pytest.mark.parametrize("seed", range(6))
def test_lamport_offsets_is_the_least_bumped_fixpoint(seed):
    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(2, 20))
    src, dst, w, truth = make_instance(rng, n, 20 * n, 5 * n)
    initial = truth + rng.integers(-50, 50, n)
    initial[0] = 0.0
    x = lamport_offsets(n, src, dst, w, initial, reference=0)
    assert solver.check_feasible(x, src, dst, w, tol=1e-9) == 0.0
    assert x[0] == 0.0
    fix = _bellman_ford_bump(n, src, dst, w, initial)
    assert np.allclose(x, fix - (fix[0] - initial[0]))


def test_lamport_refuses_an_infeasible_system_and_takes_a_relaxation():
    src, dst, w = np.array([0, 1]), np.array([1, 0]), np.array([-1.0, -1.0])
    with pytest.raises(ValueError):
        lamport_offsets(2, src, dst, w, np.zeros(2))
    x = lamport_offsets(2, src, dst, w, np.array([0.0, -5.0]), relaxation=1.0)
    assert x.tolist() == [0.0, 0.0]  # x1 >= x0 - (w + 1) = 0: bumped from -5 to 0


# ------------------------------------------------------------------------------------------
# structure that made textbook Howard take O(n) iterations
# ------------------------------------------------------------------------------------------


def test_howard_needs_few_policy_evaluations_on_a_long_chain(monkeypatch):
    """Intervals linked only to their neighbours in time: a chain with many tied cycles.

    Counts policy evaluations (deterministic) instead of timing: the textbook improvement
    moves one hop per iteration here (thousands of evaluations for 3000 domains).
    """
    rng = np.random.default_rng(5)
    n = 3000
    a = np.arange(n - 1)
    src, dst = np.r_[a, a + 1], np.r_[a + 1, a]
    g = rng.integers(-(10**6), 10**6, n)
    w = (g[dst] - g[src]).astype(np.float64) + rng.integers(-3, 50, src.size)
    calls = []
    real = solver._evaluate_policy
    monkeypatch.setattr(solver, "_evaluate_policy", lambda *a: calls.append(1) or real(*a))
    sol = solver.solve(n, src, dst, w, reference=0)
    assert len(calls) < 20
    pair_sums = w[: n - 1] + w[n - 1 :]  # each 2-cycle u -> u+1 -> u
    assert sol.relaxation == pytest.approx(max(0.0, -pair_sums.min() / 2), abs=1e-9)
    assert solver.check_feasible(sol.offset, src, dst, w + sol.relaxation) == 0.0
