"""The SPE solver's and the node fit's graph algorithms over edge arrays (``src``, ``dst``,
weights): shortest distances from given sources, breadth-first order with predecessors, weak
and strong components, and the value step of Howard's policy iteration (``policy_values``,
whose twin is the solver's own loop: None without the helper). Each of the others builds the
graph's compressed rows as ``scipy.sparse.csr_matrix`` would (sorted by source then
destination, parallel edges merged and their weights summed) and runs the compiled helper
``cell_otf2/native/_graphloops.c`` where ``native.helper`` gives it, else scipy.sparse.csgraph's
function of the same name on that matrix, with the same result either way
(``tests/test_graph_loops.py``): the same distances, order and predecessors, and the same
partition into components (strong components may be numbered otherwise). The compiled way
keeps scipy.sparse, a quarter of a second to import, out of every conversion. It knows
nothing of clocks or constraints."""

from __future__ import annotations

import numpy as np

from . import helper

#: the predecessor of the root and of every node a breadth-first walk does not reach
NO_PREDECESSOR = -9999

Rows = tuple[np.ndarray, np.ndarray, np.ndarray]


def compressed_rows(n: int, src: np.ndarray, dst: np.ndarray,
                    weight: np.ndarray | None = None) -> Rows:
    """(indptr, indices, data) of the n x n graph: rows by source, columns sorted, parallel
    edges merged with their weights summed in the order given (ones where ``weight`` is None;
    scipy sums three or more parallel edges in its sort's order, which may round otherwise:
    the solver passes none)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    data = (np.ones(src.size) if weight is None
            else np.asarray(weight, dtype=np.float64).reshape(src.shape))
    if src.size and (min(int(src.min()), int(dst.min())) < 0
                     or max(int(src.max()), int(dst.max())) >= n):
        raise IndexError(f"an edge's end outside the graph's {n} nodes")
    key = src * n + dst
    order = np.argsort(key, kind="stable")
    key = key[order]
    data = data[order]
    if key.size > 1 and not (key[1:] != key[:-1]).all():
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        data = np.add.reduceat(data, first)
        key = key[first]
    indices = key % n if n else key
    indptr = np.searchsorted(key // n if n else key, np.arange(n + 1)).astype(np.int64)
    return indptr, indices.astype(np.int64), data


def _scipy_matrix(n: int, rows: Rows):  # noqa: ANN202 - scipy's type, imported lazily
    from scipy.sparse import csr_matrix

    indptr, indices, data = rows
    return csr_matrix((data, indices, indptr), shape=(n, n))


def dijkstra(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
             sources: np.ndarray | int) -> np.ndarray:
    """Shortest distances (weights >= 0) from each of ``sources`` to every node, +inf where
    there is no path: shape (len(sources), n), or (n,) for a single int."""
    return dijkstra_rows(n, compressed_rows(n, src, dst, weight), sources)


def dijkstra_rows(n: int, rows: Rows, sources: np.ndarray | int,
                  min_only: bool = False) -> np.ndarray:
    """``dijkstra`` on the graph's ``compressed_rows``, for a caller that asks it from
    several batches of sources; ``min_only``: shape (n,), the distance from the nearest
    source (scipy's ``min_only``: one walk from every source at once)."""
    single = np.ndim(sources) == 0 or min_only
    seeds = np.atleast_1d(np.asarray(sources, dtype=np.int64))
    c_helper = helper("graphloops")
    if c_helper is None:
        from scipy.sparse.csgraph import dijkstra as scipy_dijkstra

        dist = np.atleast_2d(scipy_dijkstra(_scipy_matrix(n, rows), directed=True,
                                            indices=seeds, min_only=min_only))
    else:
        raw = c_helper.dijkstra(np.ascontiguousarray(rows[0], dtype=np.int64),
                                np.ascontiguousarray(rows[1], dtype=np.int64),
                                np.ascontiguousarray(rows[2], dtype=np.float64),
                                np.ascontiguousarray(seeds), min_only)
        dist = np.frombuffer(raw, dtype=np.float64).reshape(1 if min_only else seeds.size, n)
    return dist[0] if single else dist


def breadth_first(n: int, src: np.ndarray, dst: np.ndarray, root: int,
                  directed: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(order, pred): the nodes reached from ``root`` in breadth-first order (each node's
    out-neighbours by index, then, undirected, its in-neighbours by index) and each node's
    predecessor (``NO_PREDECESSOR`` for the root and every node not reached)."""
    rows = compressed_rows(n, src, dst)
    c_helper = helper("graphloops")
    if c_helper is None:
        from scipy.sparse.csgraph import breadth_first_order

        order, pred = breadth_first_order(_scipy_matrix(n, rows), root, directed=directed,
                                          return_predecessors=True)
        return order.astype(np.int64), pred.astype(np.int64)
    empty = np.zeros(0, dtype=np.int64)
    back = (empty, empty) if directed else compressed_rows(n, dst, src)[:2]
    raw_order, raw_pred = c_helper.bfs(rows[0], rows[1], back[0], back[1], int(root))
    return np.frombuffer(raw_order, dtype=np.int64), np.frombuffer(raw_pred, dtype=np.int64)


def weak_components(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[int, np.ndarray]:
    """(count, labels) of the weakly connected components, numbered by their least node."""
    rows = compressed_rows(n, src, dst)
    c_helper = helper("graphloops")
    if c_helper is None:
        from scipy.sparse.csgraph import connected_components

        count, labels = connected_components(_scipy_matrix(n, rows), directed=False)
        return int(count), labels.astype(np.int64)
    back = compressed_rows(n, dst, src)
    count, raw = c_helper.weak(rows[0], rows[1], back[0], back[1])
    return int(count), np.frombuffer(raw, dtype=np.int64)


def strong_components(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[int, np.ndarray]:
    """(count, labels) of the strongly connected components (numbered in no stated order)."""
    rows = compressed_rows(n, src, dst)
    c_helper = helper("graphloops")
    if c_helper is None:
        from scipy.sparse.csgraph import connected_components

        count, labels = connected_components(_scipy_matrix(n, rows), directed=True,
                                             connection="strong")
        return int(count), labels.astype(np.int64)
    count, raw = c_helper.strong(rows[0], rows[1])
    return int(count), np.frombuffer(raw, dtype=np.int64)


def policy_values(succ: np.ndarray, wp: np.ndarray, prev_x: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The value step of Howard's policy iteration on the functional graph u -> succ[u] of
    weights ``wp`` (``solver._evaluate_policy``: per node the mean of the cycle its walk
    reaches, its bias, the cycle's first node) through the compiled helper, with the same
    floats; None where the helper does not run (the caller takes its own loop)."""
    c_helper = helper("graphloops")
    if c_helper is None:
        return None
    eta, x, handle = c_helper.policy_values(
        np.ascontiguousarray(succ, dtype=np.int64), np.ascontiguousarray(wp, dtype=np.float64),
        np.ascontiguousarray(prev_x, dtype=np.float64))
    return (np.frombuffer(eta, dtype=np.float64), np.frombuffer(x, dtype=np.float64),
            np.frombuffer(handle, dtype=np.int64))
