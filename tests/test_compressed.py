"""The node fit's sparse matrices (cell_otf2.sync.nodefit.compressed) and scipy's compiled
parts (scipy_parts) give what scipy.sparse, its SuperLU solves and scipy.linalg's banded
solve give, bit for bit: the same arrays in the same order (unsorted products, repeated
entries, empty rows and matrices included), the same solutions, the same failures. And a
node fit in a fresh interpreter imports none of scipy's Python packages."""

from __future__ import annotations

import ast
import subprocess
import sys

import numpy as np
import pytest
from paths import SAMPLES
from scipy import sparse
from scipy.linalg import solveh_banded as scipy_solveh_banded
from scipy.sparse.csgraph import dijkstra as scipy_dijkstra
from scipy.sparse.linalg import splu
from scipy.sparse.linalg import spsolve as scipy_spsolve

from cell_otf2.native import helper
from cell_otf2.native.graph_loops import dijkstra_rows
from cell_otf2.sync.nodefit import estimate
from cell_otf2.sync.nodefit.compressed import (
    Compressed,
    from_triplets,
    identity,
    solve_diagonal,
    spsolve,
    vstack,
    zeros,
)
from cell_otf2.sync.nodefit.scipy_parts import solveh_banded

SEEDS = range(12)


def triplets(seed: int, m: int | None = None, n: int | None = None,
             repeats: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    """Random entries of an m x n matrix, some positions three or more times, some rows and
    columns empty, values of mixed magnitude (sums that round differently by order)."""
    rng = np.random.default_rng(seed)
    m = m if m is not None else int(rng.integers(1, 40))
    n = n if n is not None else int(rng.integers(1, 40))
    k = int(rng.integers(0, 3 * (m + n)))
    row = rng.integers(0, max(1, m - 2), k)
    col = rng.integers(0, max(1, n - 2), k)
    if repeats and k:
        pick = rng.integers(0, k, k // 3)
        row = np.concatenate([row, row[pick], row[pick]])
        col = np.concatenate([col, col[pick], col[pick]])
    values = rng.normal(size=row.size) * 10.0 ** rng.integers(-8, 8, row.size)
    return values, row, col, (m, n)


def same(ours: Compressed, theirs) -> None:  # noqa: ANN001 - a scipy matrix
    """The same format, shape and arrays, entry order included, data bit for bit."""
    assert ours.fmt == theirs.format and ours.shape == theirs.shape
    assert np.array_equal(ours.indptr, theirs.indptr)
    assert np.array_equal(ours.indices, theirs.indices[:theirs.nnz])
    assert ours.data.tobytes() == np.asarray(theirs.data[:theirs.nnz]).tobytes()


def scipy_of(values, row, col, shape, fmt: str = "csr"):  # noqa: ANN001, ANN201
    cls = sparse.csr_matrix if fmt == "csr" else sparse.csc_matrix
    return cls((values, (row, col)), shape=shape)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_from_triplets_adds_repeated_entries_as_scipy_does(seed, fmt):
    v, r, c, shape = triplets(seed)
    same(from_triplets(v, r, c, shape, fmt), scipy_of(v, r, c, shape, fmt))


@pytest.mark.parametrize("seed", SEEDS)
def test_products_transposes_and_conversions(seed):
    v, r, c, shape = triplets(seed)
    a, theirs = from_triplets(v, r, c, shape), scipy_of(v, r, c, shape)
    same(a.T @ a, theirs.T @ theirs)  # the normal matrix: csc times csr, unsorted
    same((a.T @ a).converted("csc"), (theirs.T @ theirs).tocsc())
    same((a.T @ a).converted("csr"), (theirs.T @ theirs).tocsr())
    same(a @ a.T, theirs @ theirs.T)
    same(a.T.converted("csr"), theirs.T.tocsr())
    x = np.random.default_rng(seed).normal(size=shape[1])
    y = np.random.default_rng(seed + 1).normal(size=shape[0])
    assert (a @ x).tobytes() == (theirs @ x).tobytes()
    assert (a.T @ y).tobytes() == (theirs.T @ y).tobytes()


@pytest.mark.parametrize("seed", SEEDS)
def test_sums_scaled_matrices_and_the_identity(seed):
    """The normal matrix of the estimate: an unsorted product plus a scaled canonical matrix
    plus a scaled identity, with entries that cancel exactly."""
    v, r, c, shape = triplets(seed, n=int(np.random.default_rng(seed).integers(3, 30)))
    a, theirs = from_triplets(v, r, c, shape), scipy_of(v, r, c, shape)
    v2, r2, c2, _ = triplets(seed + 100, shape[1], shape[1])
    p, their_p = from_triplets(v2, r2, c2, (shape[1],) * 2), scipy_of(v2, r2, c2, (shape[1],) * 2)
    for strength in (0.0, 1e-3, 1e8):
        ours = a.T @ a + strength * p + identity(shape[1], 1e-9)
        same(ours, theirs.T @ theirs + strength * their_p + 1e-9 * sparse.identity(shape[1]))
    minus = from_triplets(-v2, r2, c2, (shape[1],) * 2)
    same(p + minus, their_p + scipy_of(-v2, r2, c2, (shape[1],) * 2))  # every sum cancels


@pytest.mark.parametrize("seed", SEEDS)
def test_rows_chosen_by_a_mask(seed):
    v, r, c, shape = triplets(seed)
    a, theirs = from_triplets(v, r, c, shape), scipy_of(v, r, c, shape)
    mask = np.random.default_rng(seed).random(shape[0]) < 0.5
    got = a.rows(mask)
    assert got.shape == theirs[mask].shape
    same(got, theirs[mask].tocsr())
    assert a.rows(np.zeros(shape[0], dtype=bool)).shape == (0, shape[1])


@pytest.mark.parametrize("seed", SEEDS)
def test_stacked_rows_in_columns_for_highs(seed):
    blocks = [triplets(seed * 10 + i, n=17) for i in range(3)]
    ours = vstack([from_triplets(*b) for b in blocks]).converted("csc")
    theirs = sparse.vstack([scipy_of(*b) for b in blocks], format="csc")
    same(ours, theirs)


def test_an_empty_product_and_empty_matrices():
    a = zeros((4, 3))
    same(a.T @ a, sparse.csr_matrix((4, 3)).T @ sparse.csr_matrix((4, 3)))
    assert (a @ np.ones(3)).tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="mismatch"):
        a @ np.ones(4)
    with pytest.raises(IndexError):
        from_triplets(np.ones(1), np.array([4]), np.array([0]), (4, 3))


@pytest.mark.parametrize("seed", SEEDS)
def test_superlu_solves_as_scipy(seed):
    """The solves of the fit: ``spsolve`` with SuperLU's default order, and the natural and
    the minimum degree order with diagonal pivots, on normal matrices of random least
    squares."""
    v, r, c, shape = triplets(seed, m=60, n=int(np.random.default_rng(seed).integers(2, 20)),
                              repeats=False)
    rows = np.arange(shape[1])  # every unknown pinned: nonsingular
    v = np.concatenate([v, np.ones(shape[1])])
    r, c = np.concatenate([r, rows % shape[0]]), np.concatenate([c, rows])
    a, theirs = from_triplets(v, r, c, shape), scipy_of(v, r, c, shape)
    b = np.random.default_rng(seed).normal(size=shape[1])
    normal, their_normal = (a.T @ a).converted("csc"), (theirs.T @ theirs).tocsc()
    assert spsolve(normal, b).tobytes() == scipy_spsolve(their_normal, b).tobytes()
    normal = (a.T @ a + identity(shape[1], 1e-9)).converted("csc")
    their_normal = (theirs.T @ theirs + 1e-9 * sparse.identity(shape[1])).tocsc()
    lu = splu(their_normal, permc_spec="NATURAL", diag_pivot_thresh=0.0,
              options={"SymmetricMode": True})
    assert solve_diagonal(normal, b).tobytes() == lu.solve(b).tobytes()
    lu = splu(their_normal, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
              options={"SymmetricMode": True})
    assert solve_diagonal(normal, b, fill_reducing=True).tobytes() == lu.solve(b).tobytes()


def test_singular_matrices_fail_as_in_scipy():
    singular = from_triplets(np.ones(2), np.array([0, 1]), np.array([0, 0]), (2, 2), "csc")
    assert np.isnan(spsolve(singular, np.ones(2))).all()
    with pytest.raises(RuntimeError):
        solve_diagonal(singular, np.ones(2))


@pytest.mark.parametrize("seed", SEEDS)
def test_banded_solve_as_scipy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 200))
    w = rng.random(n) * (rng.random(n) < 0.7)
    for lam in (1e-3, 1.0, 1e6):
        ab = np.zeros((3, n))
        ab[2] = w + lam * np.convolve(np.ones(n - 2), [1.0, 4.0, 1.0]) + 1e-9 * lam
        ab[1, 1:] = lam * np.convolve(np.ones(n - 2), [-2.0, -2.0])
        ab[0, 2:] = lam
        y = rng.normal(size=n)
        assert solveh_banded(ab, y).tobytes() == scipy_solveh_banded(ab, y).tobytes()
        v = rng.choice([-1.0, 1.0], size=(n, 8))
        assert solveh_banded(ab, v).tobytes() == scipy_solveh_banded(ab, v).tobytes()
    bad = np.zeros((3, 4))
    bad[2] = [1.0, -1.0, 1.0, 1.0]
    with pytest.raises(np.linalg.LinAlgError):
        solveh_banded(bad, np.ones(4))
    with pytest.raises(ValueError):
        solveh_banded(np.full((3, 4), np.nan), np.ones(4))


@pytest.mark.parametrize("n_nodes, n_k, extra", [(1, 3, 0), (3, 7, 2), (12, 40, 5), (2, 2, 1)])
def test_the_penalty_is_the_kronecker_construction(n_nodes, n_k, extra):
    """The estimate's second-difference penalty, built from triplets, is the matrix scipy's
    diags, kron and hstack built, entry for entry."""
    n_x = n_nodes * n_k + extra
    ours = estimate._penalty(n_nodes, n_k, n_x)
    if n_k < 3:
        assert ours.nnz == 0 and ours.shape == (n_x, n_x)
        return
    d = sparse.diags([1.0, -2.0, 1.0], [0, 1, 2], shape=(n_k - 2, n_k))
    blocks = sparse.kron(d, sparse.identity(n_nodes), format="csr")
    full = sparse.hstack([blocks, sparse.csr_matrix((blocks.shape[0], n_x - blocks.shape[1]))])
    same(ours, (full.T @ full).tocsr())


@pytest.mark.parametrize("seed", SEEDS)
def test_dijkstra_from_the_nearest_source(seed):
    v, r, c, shape = triplets(seed, m=30, n=30)
    g = from_triplets(np.abs(v) + 1e-9, r, c, shape)
    sources = np.unique(np.random.default_rng(seed).integers(0, 30, 4))
    ours = dijkstra_rows(30, (g.indptr, g.indices, g.data), sources, min_only=True)
    theirs = scipy_dijkstra(sparse.csr_matrix((g.data, g.indices, g.indptr), shape=shape),
                            indices=sources, min_only=True)
    assert ours.tobytes() == theirs.tobytes()


@pytest.mark.skipif(helper("graphloops") is None,
                    reason="without the compiled graph loops the fit walks with scipy.sparse")
def test_a_node_fit_imports_none_of_scipys_packages(tmp_path):
    """A two-node conversion, node fit and linear program included, in a fresh interpreter:
    scipy's compiled modules only, not ``scipy.sparse`` or ``scipy.linalg`` or
    ``scipy.optimize`` (whose imports cost more than a short run's conversion)."""
    code = """
import sys
import cell_otf2
cell_otf2.convert(sys.argv[1], sys.argv[2])
print(sorted(m for m in sys.modules if m.startswith("scipy")))
"""
    out = subprocess.run([sys.executable, "-c", code, str(SAMPLES / "two-nodes-hybrid"),
                          str(tmp_path / "a.otf2")], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    loaded = ast.literal_eval(out.stdout.strip())
    assert "scipy.sparse._sparsetools" in loaded, loaded
    assert all(m.rsplit(".", 1)[-1].startswith("_") for m in loaded), loaded
    assert not {"scipy", "scipy.sparse", "scipy.linalg", "scipy.optimize"} & set(loaded)
