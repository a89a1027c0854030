"""The node fit's growing linear program (cell_otf2.sync.nodefit.highs.GrowingLp): rows added
after a solve are solved from the last basis, and that must give the optimum of every row so
far, as a solve from scratch (scipy's linprog over all rows at once) does: over a family of
random bounded programs grown in 1-5 batches, with the bindings and without them (the fallback
where scipy lacks them). Then the fallback centring (``lp_maps``, which runs the program by row
generation) gives the same node maps warm and from scratch on a one-way ring."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from ring_points import HZ, linear_clocks, one_way_ring
from scipy import sparse
from scipy.optimize import linprog

from cell_otf2.sync.nodefit import highs, scipy_parts
from cell_otf2.sync.nodefit.highs import GrowingLp, LpFailed
from cell_otf2.sync.nodefit.lp import lp_maps
from cell_otf2.sync.nodefit.points import map_to_reference


def random_program(seed: int, n: int | None = None, m: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, sparse.csr_matrix, np.ndarray]:
    """A feasible bounded LP: max of random positive weights over a box cut by random
    half-spaces that keep the origin inside (``n`` columns and ``m`` rows, or drawn)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40)) if n is None else n
    m = int(rng.integers(n, 6 * n)) if m is None else m
    mat = sparse.random(m, n, density=min(1.0, 4.0 / n), random_state=seed, format="csr")
    mat.data = rng.normal(size=mat.data.size)
    rhs = rng.uniform(0.1, 5.0, m)  # the origin is strictly inside every row
    cost = -rng.uniform(0.1, 1.0, n)
    bounds = np.c_[np.full(n, -10.0), np.full(n, 10.0)]
    if seed % 3 == 0:  # some columns free below
        bounds[rng.random(n) < 0.3, 0] = -np.inf
    return cost, bounds, mat, rhs


@pytest.mark.parametrize("warm", [True, False])
@pytest.mark.parametrize("seed", range(40))
def test_rows_added_after_a_solve_give_the_whole_optimum(seed, warm):
    cost, bounds, mat, rhs = random_program(seed)
    ref = linprog(cost, A_ub=mat, b_ub=rhs, bounds=bounds, method="highs")
    assert ref.status == 0
    lp = GrowingLp(cost, bounds, warm=warm)
    batches = np.array_split(np.random.default_rng(seed).permutation(rhs.size),
                             1 + seed % 5)
    for rows in batches:
        lp.add_rows(mat[rows], rhs[rows])
        x = lp.solve()
    assert lp.n_rows == rhs.size
    assert cost @ x == pytest.approx(ref.fun, rel=1e-7, abs=1e-7)
    assert (mat @ x <= rhs + 1e-7).all()
    assert ((x >= bounds[:, 0] - 1e-7) & (x <= bounds[:, 1] + 1e-7)).all()


def test_without_the_bindings_every_solve_is_from_scratch(monkeypatch):
    monkeypatch.setattr(highs, "_bindings", lambda: None)
    cost, bounds, mat, rhs = random_program(5)
    lp = GrowingLp(cost, bounds, warm=True)
    assert not lp.warm
    lp.add_rows(mat, rhs)
    ref = linprog(cost, A_ub=mat, b_ub=rhs, bounds=bounds, method="highs")
    assert cost @ lp.solve() == pytest.approx(ref.fun, rel=1e-7, abs=1e-7)


def test_bindings_not_as_expected_fall_back_to_a_solve_from_scratch(monkeypatch):
    """A private module of scipy may change: a HiGHS object without the calls this code
    makes (here: none at all) must leave the solve to linprog, not fail it."""
    monkeypatch.setattr(highs, "_bindings", lambda: object())
    cost, bounds, mat, rhs = random_program(7)
    ref = linprog(cost, A_ub=mat, b_ub=rhs, bounds=bounds, method="highs")
    lp = GrowingLp(cost, bounds)
    assert lp.warm
    lp.add_rows(mat[: rhs.size // 2], rhs[: rhs.size // 2])
    lp.solve()
    assert not lp.warm
    lp.add_rows(mat[rhs.size // 2:], rhs[rhs.size // 2:])
    assert cost @ lp.solve() == pytest.approx(ref.fun, rel=1e-7, abs=1e-7)


@pytest.mark.parametrize("warm", [True, False])
def test_an_infeasible_program_is_a_failure_not_a_solution(warm):
    lp = GrowingLp(np.array([-1.0]), np.array([[0.0, 10.0]]), warm=warm)
    lp.add_rows(sparse.csr_matrix(np.array([[1.0]])), np.array([5.0]))
    assert lp.solve()[0] == pytest.approx(5.0)
    lp.add_rows(sparse.csr_matrix(np.array([[-1.0]])), np.array([-6.0]))  # x >= 6
    with pytest.raises(LpFailed):
        lp.solve()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fallback_centring_the_same_warm_and_from_scratch(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    pts = one_way_ring(rng, linear_clocks(rng, 5), 6000, 60.0)
    hz = HZ
    warm = lp_maps(pts, 5, 0, hz)
    monkeypatch.setattr(highs, "_bindings", lambda: None)
    cold = lp_maps(pts, 5, 0, hz)
    for n in range(1, 5):
        assert warm[n] is not None and cold[n] is not None
        mine = pts["ta"][pts["a"] == n]
        x = np.linspace(mine.min(), mine.max(), 200)
        gap = map_to_reference(warm[n], x) - map_to_reference(cold[n], x)
        assert np.abs(gap).max() < 1.0  # ticks: the same optimum, up to HiGHS's tolerances


def test_the_bindings_load_without_scipy_optimize_and_linprog_shares_them():
    """The bindings come from scipy's folder without ``scipy.optimize``'s set-up (a fresh
    interpreter: this one imported it above); a later ``import scipy.optimize`` finds the
    same module, and ``linprog`` still solves; without the folder's file the usual import
    gives the same module."""
    code = """
import sys
from cell_otf2.sync.nodefit import highs
core = highs._bindings()
assert core is not None and "scipy.optimize" not in sys.modules, sorted(sys.modules)
from scipy.optimize import linprog
from scipy.optimize._highspy import _core
assert _core is core
res = linprog([-1, -1], A_ub=[[1, 2], [3, 1]], b_ub=[4, 5], method="highs")
assert res.status == 0 and abs(res.x[0] - 1.2) < 1e-9 and abs(res.x[1] - 1.4) < 1e-9
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_bindings_by_the_usual_import_where_the_file_is_not_found(monkeypatch):
    monkeypatch.delitem(sys.modules, scipy_parts.HIGHS, raising=False)
    monkeypatch.setattr(scipy_parts, "load_by_file", lambda name: None)
    from scipy.optimize._highspy import _core

    assert highs._bindings() is _core


@pytest.mark.parametrize("seed", range(6))
def test_many_rows_added_solve_afresh_with_the_same_optimum(seed):
    """More than a few hundred rows added since the last solve: the next solve begins afresh
    (the dual simplex from the last basis took 3 s where a new solve takes 0.4 s, on a 20-node
    one-way ring), a few rows then go on from the basis; every solve is the optimum of every
    row so far."""
    cost, bounds, mat, rhs = random_program(seed, 60, 1400)
    lp = GrowingLp(cost, bounds)
    if not lp.warm:
        pytest.skip("scipy without HiGHS's bindings: every solve is from scratch")
    fresh = []
    for rows in (np.arange(0, 300), np.arange(300, 1300), np.arange(1300, 1400)):
        lp.add_rows(mat[rows], rhs[rows])
        x = lp.solve()
        fresh.append(lp.fresh_solves)
        ref = linprog(cost, A_ub=mat[:rows[-1] + 1], b_ub=rhs[:rows[-1] + 1], bounds=bounds,
                      method="highs")
        assert cost @ x == pytest.approx(ref.fun, rel=1e-7, abs=1e-7)
    assert fresh == [1, 2, 2]
