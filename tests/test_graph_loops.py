"""The SPE solver's graph loops (native/_graphloops.c) give what scipy.sparse.csgraph gives on
the same rows: the same shortest distances bit for bit (zero weights, parallel edges, self
loops, nodes not reached, several sources), the same breadth-first order and predecessors,
directed and undirected, the same weak components with the same numbers, and the same
partition into strong components; random graphs from sparse to dense (hypothesis), compared
against scipy called directly, not through the package's fallback. A conversion without a
node fit does not import scipy.sparse at all."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order, connected_components, dijkstra

from cell_otf2.native import graph_loops

BUILT = pytest.mark.native("graphloops")


def random_graph(seed: int, n: int, m: int, zero_share: float):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    if m and rng.random() < 0.5:  # a chain through part of the nodes: long paths, one SCC
        k = int(rng.integers(1, n + 1))
        perm = rng.permutation(n)[:k]
        src = np.r_[src, perm, perm[-1]]
        dst = np.r_[dst, np.roll(perm, -1), perm[0]]
    w = rng.choice(np.array([0.0, 0.1, 1.0 / 3.0, 7.25, 1e6 + 0.3]), src.size) \
        * (rng.random(src.size) >= zero_share) + rng.random(src.size) * 1e-3
    w[rng.random(src.size) < zero_share] = 0.0
    return src, dst, w


def scipy_rows(n, src, dst, w=None):
    return csr_matrix((np.ones(src.size) if w is None else w, (src, dst)), shape=(n, n))


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = np.unique(np.stack([a, b]), axis=1)
    return pairs.shape[1] == np.unique(a).size == np.unique(b).size


graphs = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 60), st.integers(0, 300),
                   st.sampled_from([0.0, 0.3, 0.9]))


@BUILT
@settings(max_examples=150, deadline=None)
@given(graphs)
def test_dijkstra_same_distances(graph):
    seed, n, m, zero_share = graph
    src, dst, w = random_graph(seed, n, m, zero_share)
    # at most two parallel edges per pair: scipy sums three or more in its sort's order
    rank = np.zeros(src.size, dtype=np.int64)
    key = src * n + dst
    for k in np.unique(key):
        at = np.flatnonzero(key == k)
        rank[at] = np.arange(at.size)
    src, dst, w = src[rank < 2], dst[rank < 2], w[rank < 2]
    sources = np.unique(np.random.default_rng(seed).integers(0, n, 4))
    mine = graph_loops.dijkstra(n, src, dst, w, sources)
    theirs = dijkstra(scipy_rows(n, src, dst, w), directed=True, indices=sources)
    assert mine.shape == theirs.shape
    assert np.array_equal(mine, theirs)
    one = graph_loops.dijkstra(n, src, dst, w, int(sources[0]))
    assert one.shape == (n,) and np.array_equal(one, theirs[0])


@BUILT
@settings(max_examples=150, deadline=None)
@given(graphs, st.booleans())
def test_breadth_first_same_order_and_tree(graph, directed):
    seed, n, m, _ = graph
    src, dst, _w = random_graph(seed, n, m, 0.0)
    root = int(np.random.default_rng(seed + 1).integers(0, n))
    order, pred = graph_loops.breadth_first(n, src, dst, root, directed=directed)
    s_order, s_pred = breadth_first_order(scipy_rows(n, src, dst), root, directed=directed,
                                          return_predecessors=True)
    assert np.array_equal(order, s_order)
    assert np.array_equal(pred, s_pred)


@BUILT
@settings(max_examples=150, deadline=None)
@given(graphs)
def test_components_same(graph):
    seed, n, m, _ = graph
    src, dst, _w = random_graph(seed, n, m, 0.0)
    count, labels = graph_loops.weak_components(n, src, dst)
    s_count, s_labels = connected_components(scipy_rows(n, src, dst), directed=False)
    assert count == s_count and np.array_equal(labels, s_labels)
    count, labels = graph_loops.strong_components(n, src, dst)
    s_count, s_labels = connected_components(scipy_rows(n, src, dst), directed=True,
                                             connection="strong")
    assert count == s_count and same_partition(labels, s_labels)


def test_both_ways_agree(monkeypatch, native_ways):
    """The package's own fallback (scipy) and the compiled way, through one interface."""
    src, dst, w = random_graph(5, 40, 150, 0.3)
    got = [(graph_loops.dijkstra(40, src, dst, w, np.arange(40)),
            graph_loops.breadth_first(40, src, dst, 3, directed=False),
            graph_loops.weak_components(40, src, dst))
           for _way in native_ways(monkeypatch)]
    (d1, (o1, p1), (c1, l1)), (d2, (o2, p2), (c2, l2)) = got
    assert np.array_equal(d1, d2) and np.array_equal(o1, o2) and np.array_equal(p1, p2)
    assert c1 == c2 and np.array_equal(l1, l2)


def test_rows_reject_an_edge_outside():
    with pytest.raises(IndexError):
        graph_loops.compressed_rows(3, np.array([0]), np.array([3]))


@BUILT
def test_conversion_without_node_fit_imports_no_scipy_sparse(tmp_path):
    """A one-node run converted in a fresh interpreter: scipy.sparse stays unimported."""
    from paths import SAMPLES

    code = ("import os, runpy, sys\n"
            "real_exit = os._exit\n"
            "def exit_after_telling(code):\n"
            "    print('scipy.sparse' in sys.modules, flush=True)\n"
            "    real_exit(code)\n"
            "os._exit = exit_after_telling\n"
            f"sys.argv = ['cell2otf2', {str(SAMPLES / 'fft-16spe')!r}, '-o', "
            f"{str(tmp_path / 'a.otf2')!r}, '-q']\n"
            "runpy.run_module('cell_otf2', run_name='__main__')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "a.otf2").exists(), out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout


@BUILT
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 80))
def test_policy_values_same_floats(seed, n):
    """Howard's value step (``solver._evaluate_policy``) compiled: the same cycle means,
    biases and handles, bit for bit, on random functional graphs (self loops, several
    cycles, long tails) with weights of every size."""
    from cell_otf2.sync import solver

    rng = np.random.default_rng(seed)
    succ = rng.integers(0, n, n)
    if rng.random() < 0.3:  # one long cycle and tails into it
        succ = np.roll(np.arange(n), -1)
        succ[rng.random(n) < 0.3] = rng.integers(0, n)
    wp = rng.choice(np.array([0.0, 1e-3, 1.0 / 3.0, -7.5, 1e9 + 0.1]), n) + rng.normal(0, 1, n)
    prev = rng.normal(0, 1e3, n)
    want = solver._evaluate_policy(succ.tolist(), wp.tolist(), prev.tolist())
    got = graph_loops.policy_values(succ, wp, prev)
    assert got is not None
    for mine, theirs in zip(got, want, strict=True):
        assert np.array_equal(mine, np.asarray(theirs))
