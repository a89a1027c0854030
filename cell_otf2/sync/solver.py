"""Clock synchronization on a difference-constraint graph: ``solve`` takes edges ``x[dst] - x[src]
<= weight`` between clock domains, finds the least uniform relaxation that makes them feasible
(Howard's minimum cycle mean), the upper and lower bound of every domain relative to the
reference (Dijkstra) and offsets between them by ``alpha`` (never a made-up value for an
unbounded domain); ``error_table`` gives pairwise errors (the steps: docs/accuracy.md). It knows
nothing about traces and checks only that indexes are in range and weights finite."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..model import SyncSolution
from ..native.graph_loops import (
    breadth_first,
    compressed_rows,
    dijkstra,
    dijkstra_rows,
    policy_values,
    strong_components,
    weak_components,
)

BOTH, UPPER, LOWER, NONE = "both", "upper", "lower", "none"

#: Howard's policy iteration gives up after this many improvements (never reached in practice)
_HOWARD_MAX_ITER = 100_000


# ------------------------------------------------------------------------------------------
# input handling
# ------------------------------------------------------------------------------------------


def as_edges(n_domains: int, src, dst, weight) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    src = np.asarray(src, dtype=np.int64).ravel()
    dst = np.asarray(dst, dtype=np.int64).ravel()
    weight = np.asarray(weight, dtype=np.float64).ravel()
    if not (src.shape == dst.shape == weight.shape):
        raise ValueError(
            f"src, dst, weight differ in length: {src.size}, {dst.size}, {weight.size}"
        )
    if n_domains < 1:
        raise ValueError(f"n_domains must be >= 1, got {n_domains}")
    if src.size:
        lo = min(src.min(), dst.min())
        hi = max(src.max(), dst.max())
        if lo < 0 or hi >= n_domains:
            raise ValueError(f"domain index out of range [0, {n_domains}): {lo}..{hi}")
        if not np.isfinite(weight).all():
            raise ValueError("weights must be finite")
    return src, dst, weight


def collapse_parallel(
    n_domains: int, src, dst, weight
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep, for every (src, dst) pair, only the smallest weight; sorted by (src, dst)."""
    src, dst, weight = as_edges(n_domains, src, dst, weight)
    if src.size == 0:
        return src, dst, weight
    key = src * n_domains + dst
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    w = np.minimum.reduceat(weight[order], starts)
    key = key[starts]
    return key // n_domains, key % n_domains, w


def check_feasible(x, src, dst, weight, tol: float = 1e-9) -> float:
    """Largest violation of ``x[dst] - x[src] <= weight`` over constraints with both ends finite.

    Returns 0.0 when every such constraint holds within ``tol``. Constraints touching a NaN or
    infinite offset are not checked (such a domain is unbounded, not placed).
    """
    x = np.asarray(x, dtype=np.float64)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    weight = np.asarray(weight, dtype=np.float64)
    if src.size == 0:
        return 0.0
    viol = x[dst] - x[src] - weight
    viol = viol[np.isfinite(viol)]
    worst = float(viol.max()) if viol.size else 0.0
    return worst if worst > tol else 0.0


# ------------------------------------------------------------------------------------------
# step 2: exact centring potential along a spanning forest
# ------------------------------------------------------------------------------------------


def _tree_potential(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> np.ndarray:
    """p with w + p[src] - p[dst] == 0 on a spanning forest of the undirected graph.

    Only sums and differences of weights: exact for integer weights, so shifting by p loses
    nothing, and the shifted weights are of the size of the slack, not of the raw clocks.
    """
    p = np.zeros(n)
    if src.size == 0:
        return p
    # one BFS for the whole forest: a virtual root tied to one node per weak component
    n_comp, comp = weak_components(n, src, dst)
    first = np.full(n_comp, n, dtype=np.int64)
    np.minimum.at(first, comp, np.arange(n))
    root = n
    rows = np.concatenate([src, np.full(n_comp, root)])
    cols = np.concatenate([dst, first])
    order, pred = breadth_first(n + 1, rows, cols, root, directed=False)
    # weight of the tree edge pred[v] -> v (+w) or v -> pred[v] (-w); edges are unique
    child = order[1:]
    parent = pred[child]
    real = parent != root
    child, parent = child[real], parent[real]
    tree_w = np.zeros(n)
    if child.size:
        key = src * n + dst
        by_key = np.argsort(key, kind="stable")
        e_fwd = _edge_at(key[by_key], by_key, parent * n + child)
        e_bwd = _edge_at(key[by_key], by_key, child * n + parent)
        tree_w[child] = np.where(e_fwd >= 0, w[e_fwd], -w[np.maximum(e_bwd, 0)])
    pl = p.tolist()
    twl = tree_w.tolist()
    for v, u in zip(child.tolist(), parent.tolist(), strict=True):  # BFS order: parent first
        pl[v] = pl[u] + twl[v]
    return np.asarray(pl)


def _edge_at(sorted_key: np.ndarray, by_key: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Index of the edge with each ``wanted`` key (src * n + dst), -1 where there is none."""
    at = np.minimum(np.searchsorted(sorted_key, wanted), sorted_key.size - 1)
    return np.where(sorted_key[at] == wanted, by_key[at], -1)


# ------------------------------------------------------------------------------------------
# step 3: minimum cycle mean (Howard) and a feasible potential
# ------------------------------------------------------------------------------------------


def _evaluate_policy(
    succ: list[int], wp: list[float], prev_x: list[float]
) -> tuple[list[float], list[float], list[int]]:
    """Cycle mean ``eta`` reached from every node of a functional graph, the bias ``x`` and
    the cycle reached (``handle``: the cycle node whose bias is kept from ``prev_x``).

    x[u] = wp[u] - eta[u] + x[succ[u]]; keeping one bias per cycle keeps the iteration
    monotone.
    """
    n = len(succ)
    eta = [0.0] * n
    x = [0.0] * n
    handle = [0] * n
    state = [0] * n  # 0 new, 1 on the current path, 2 done
    pos = [0] * n
    for s in range(n):
        if state[s]:
            continue
        path: list[int] = []
        u = s
        while state[u] == 0:
            state[u] = 1
            pos[u] = len(path)
            path.append(u)
            u = succ[u]
        if state[u] == 1:  # the walk closed a new cycle at u
            i = pos[u]
            cyc = path[i:]
            mean = math.fsum(wp[c] for c in cyc) / len(cyc)
            eta[u] = mean
            x[u] = prev_x[u]
            handle[u] = u
            state[u] = 2
            for c in reversed(cyc[1:]):
                eta[c] = mean
                x[c] = wp[c] - mean + x[succ[c]]
                handle[c] = u
                state[c] = 2
            rest = path[:i]
        else:
            rest = path
        for c in reversed(rest):
            nxt = succ[c]
            eta[c] = eta[nxt]
            x[c] = wp[c] - eta[nxt] + x[nxt]
            handle[c] = handle[nxt]
            state[c] = 2
    return eta, x, handle


def _howard(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray]:
    """Minimum cycle mean of a strongly connected graph, and a bias x with
    x[u] <= w(u, v) - mean + x[v] + eps on every edge (eps ~ 1e-10 * max |w|).

    Howard's policy iteration (one out-edge per node), in the variant that keeps a single
    cycle: whenever the policy has several cycles, every node outside the best cycle's basin
    is redirected to it along a breadth-first tree of the reversed graph (one step instead of
    the textbook's one hop per iteration, which is O(n) iterations on chain-like graphs);
    then the bias improvement of the textbook. Edges must be sorted by (src, dst), unique,
    and every node must have an out-edge.
    """
    m = src.size
    starts = np.searchsorted(src, np.arange(n))
    idx = np.arange(m)
    key = src * n + dst  # sorted: edge lookup by (u, v)
    eps = 1e-10 * max(1.0, float(np.abs(w).max()))
    gmin = np.minimum.reduceat(w, starts)
    pol = np.minimum.reduceat(np.where(w <= gmin[src], idx, m), starts)
    x_prev = np.zeros(n)
    for _ in range(_HOWARD_MAX_ITER):
        values = policy_values(dst[pol], w[pol], x_prev)
        if values is None:  # the loop below in Python, the same floats
            eta_l, x_l, handle_l = _evaluate_policy(dst[pol].tolist(), w[pol].tolist(),
                                                    x_prev.tolist())
            values = np.asarray(eta_l), np.asarray(x_l), np.asarray(handle_l)
        eta, x, handle = values
        x_prev = x
        best = handle[int(np.argmin(eta))]
        outside = handle != best
        if outside.any():
            # redirect: BFS on reversed edges from every node of the best basin
            basin = np.flatnonzero(~outside)
            _, pred = breadth_first(n + 1, np.r_[dst, np.full(basin.size, n)],
                                    np.r_[src, basin], n, directed=True)
            u = np.flatnonzero(outside)
            e = np.searchsorted(key, u * n + pred[u])
            pol[u] = e
            continue
        same = np.abs(eta[dst] - eta[src]) <= eps
        val = np.where(same, w - eta[src] + x[dst], np.inf)
        best_val = np.minimum.reduceat(val, starts)
        better = best_val < x - eps
        if not better.any():
            return float(eta.min()), x
        first = np.minimum.reduceat(np.where(val <= best_val[src], idx, m), starts)
        pol = np.where(better, first, pol)
    raise RuntimeError("Howard's policy iteration did not converge")


def _topological_order(n_comp: int, cu: np.ndarray, cv: np.ndarray) -> list[int]:
    """Kahn's algorithm on the condensation (edges cu -> cv between different components)."""
    order = np.argsort(cu, kind="stable")
    targets = cv[order].tolist()
    ptr = np.searchsorted(cu[order], np.arange(n_comp + 1)).tolist()
    indeg = np.bincount(cv, minlength=n_comp).tolist()
    stack = [c for c in range(n_comp) if indeg[c] == 0]
    topo = []
    while stack:
        c = stack.pop()
        topo.append(c)
        for d in targets[ptr[c] : ptr[c + 1]]:
            indeg[d] -= 1
            if indeg[d] == 0:
                stack.append(d)
    return topo


@dataclass(frozen=True)
class _Potential:
    relaxation: float  # certified: pot satisfies every edge loosened by it
    pot: np.ndarray  # feasible potential for the centred weights loosened by relaxation
    min_cycle_mean: float  # inf for an acyclic graph
    n_scc: int  # strongly connected components with a cycle
    n_edges: int  # distinct edges, self-loops included


def _relax_and_potential(
    n: int,
    src: np.ndarray,
    dst: np.ndarray,
    w: np.ndarray,
    timings: dict[str, float] | None = None,
) -> _Potential:
    """Minimum cycle mean and a feasible potential of collapsed, centred edges."""
    t0 = time.perf_counter()
    loop = src == dst
    mcm = float(w[loop].min()) if loop.any() else math.inf
    s, d, ww = src[~loop], dst[~loop], w[~loop]
    pot = np.zeros(n)
    n_comp, lab = strong_components(n, s, d)
    ls, ld = lab[s], lab[d]
    inner = ls == ld
    # Howard per component with a cycle, on local indexes
    sizes = np.bincount(lab, minlength=n_comp)
    node_order = np.argsort(lab, kind="stable")
    node_ptr = np.searchsorted(lab[node_order], np.arange(n_comp + 1))
    local = np.empty(n, dtype=np.int64)
    e_in = np.flatnonzero(inner)
    e_in = e_in[np.lexsort((s[e_in], ls[e_in]))]
    e_ptr = np.searchsorted(ls[e_in], np.arange(n_comp + 1))
    big = np.flatnonzero(sizes >= 2)
    if timings is not None:
        timings["scc"] = time.perf_counter() - t0
    for c in big.tolist():
        nodes = node_order[node_ptr[c] : node_ptr[c + 1]]
        local[nodes] = np.arange(nodes.size)
        e = e_in[e_ptr[c] : e_ptr[c + 1]]
        mean_c, bias = _howard(nodes.size, local[s[e]], local[d[e]], ww[e])
        mcm = min(mcm, mean_c)
        pot[nodes] = -bias  # pot[v] - pot[u] = bias[u] - bias[v] <= w - mean + eps
    delta = max(0.0, -mcm) if math.isfinite(mcm) else 0.0
    # shift components in topological order so edges between them hold too
    cross = np.flatnonzero(~inner)
    if cross.size:
        topo = _topological_order(n_comp, ls[cross], ld[cross])
        cross = cross[np.argsort(ld[cross], kind="stable")]
        c_ptr = np.searchsorted(ld[cross], np.arange(n_comp + 1))
        shift = np.zeros(n_comp)
        for c in topo:
            e = cross[c_ptr[c] : c_ptr[c + 1]]
            if e.size:
                need = ww[e] + delta + pot[s[e]] + shift[ls[e]] - pot[d[e]]
                shift[c] = min(0.0, float(need.min()))
        pot = pot + shift[lab]
    # certificate: whatever the potential still violates (Howard's eps, rounding) is added
    if src.size:
        viol = float((pot[dst] - pot[src] - w - delta).max())
        scale = max(1.0, float(np.abs(w).max()), float(np.abs(pot).max()))
        if viol > 0 and (delta > 0 or viol > 1e-12 * scale):
            delta += viol
    return _Potential(delta, pot, mcm, int(big.size), int(src.size))


# ------------------------------------------------------------------------------------------
# step 4: shortest paths on non-negative reduced weights
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Reduced:
    """The loosened graph with non-negative reduced weights and its potential."""

    n: int
    src: np.ndarray
    dst: np.ndarray
    red: np.ndarray  # w + relaxation + q[src] - q[dst] >= 0
    q: np.ndarray  # potential in original coordinates, relative to q[anchor] = 0

    def loosened(self, extra: float) -> _Reduced:
        """The same graph with every weight loosened by ``extra`` >= 0 more."""
        return _Reduced(self.n, self.src, self.dst, self.red + extra, self.q)

    def multi_source(
        self, seeds: np.ndarray, values: np.ndarray, reverse: bool = False
    ) -> np.ndarray:
        """min over seeds b of (values[b] + dist(b -> v)), or of dist(v -> b) if reverse.

        +inf where no seed reaches (or is reached from) v.
        """
        n, q = self.n, self.q
        if seeds.size == 0:
            return np.full(n, np.inf)
        sign = 1.0 if reverse else -1.0
        c = values + sign * q[seeds]
        base = float(c.min())
        s, d = (self.dst, self.src) if reverse else (self.src, self.dst)
        rows = np.concatenate([s, np.full(seeds.size, n)])
        cols = np.concatenate([d, seeds])
        data = np.concatenate([self.red, c - base])
        dist = dijkstra(n + 1, rows, cols, data, n)[:n]
        return dist + base - sign * q


def reduced_graph(
    n: int,
    src: np.ndarray,
    dst: np.ndarray,
    w: np.ndarray,
    anchor: int,
    timings: dict[str, float] | None = None,
) -> tuple[_Reduced, _Potential]:
    """Collapse, centre and certify: the loosened graph ready for Dijkstra."""
    t0 = time.perf_counter()
    s, d, ww = collapse_parallel(n, src, dst, w)
    t1 = time.perf_counter()
    p0 = _tree_potential(n, s, d, ww)
    w0 = ww + p0[s] - p0[d]  # exact for integer weights
    t2 = time.perf_counter()
    potential = _relax_and_potential(n, s, d, w0, timings)
    pot = potential.pot
    keep = s != d
    s, d, w0 = s[keep], d[keep], w0[keep]
    red = np.maximum(w0 + potential.relaxation + pot[s] - pot[d], 0.0)  # clip rounding only
    q = (pot - pot[anchor]) + (p0 - p0[anchor])
    if timings is not None:
        scc = timings.pop("scc")
        timings["collapse"] = t1 - t0
        timings["centre"] = t2 - t1
        timings["scc"] = scc
        timings["relaxation"] = time.perf_counter() - t2 - scc
    return _Reduced(n, s, d, red, q), potential


# ------------------------------------------------------------------------------------------
# public API
# ------------------------------------------------------------------------------------------


def solve(n_domains: int, src, dst, weight, reference: int, alpha: float = 0.5) -> SyncSolution:
    """Offsets of every domain relative to ``reference`` from difference constraints.

    See the module docstring for the steps and the one-sided/unbounded rules.
    """
    if not 0 <= reference < n_domains:
        raise ValueError(f"reference {reference} not in [0, {n_domains})")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    timings: dict[str, float] = {}
    src, dst, weight = as_edges(n_domains, src, dst, weight)
    n = n_domains
    graph, potential = reduced_graph(n, src, dst, weight, reference, timings)
    t3 = time.perf_counter()
    ref = np.array([reference])
    zero = np.zeros(1)
    upper = graph.multi_source(ref, zero)
    lower = -graph.multi_source(ref, zero, reverse=True)
    upper[reference] = lower[reference] = 0.0
    has_up = np.isfinite(upper)
    has_lo = np.isfinite(lower)
    both = has_up & has_lo
    up_only = has_up & ~has_lo
    lo_only = has_lo & ~has_up
    offset = _offsets_at(graph, alpha, lower, upper, both, up_only, lo_only)
    if up_only.any() or lo_only.any():  # one-sided offsets follow the placed domains'
        offset_range = tuple(offset if extreme == alpha else
                             _offsets_at(graph, extreme, lower, upper, both, up_only, lo_only)
                             for extreme in (0.0, 1.0))
    else:
        offset_range = (np.where(both, lower, np.nan), np.where(both, upper, np.nan))
    bounded = np.full(n, NONE, dtype="<U5")
    bounded[both] = BOTH
    bounded[up_only] = UPPER
    bounded[lo_only] = LOWER
    timings["sssp"] = time.perf_counter() - t3
    return SyncSolution(
        offset=offset,
        lower=lower,
        upper=upper,
        offset_low=offset_range[0],
        offset_high=offset_range[1],
        bounded=bounded,
        relaxation=float(potential.relaxation),
        reference=int(reference),
        alpha=float(alpha),
        n_constraints=int(src.size),
        n_edges=potential.n_edges,
        timings=timings,
    )


def _offsets_at(graph: _Reduced, alpha: float, lower: np.ndarray, upper: np.ndarray,
                both: np.ndarray, up_only: np.ndarray, lo_only: np.ndarray) -> np.ndarray:
    """The offsets ``alpha`` gives: between the bounds where both exist; a domain bounded on
    one side only as close to the placed domains as its constraints allow (NaN: unbounded).
    Every offset grows with ``alpha``, so alpha 0 and 1 give each domain's extremes."""
    offset = np.full(lower.size, np.nan)
    offset[both] = alpha * upper[both] + (1.0 - alpha) * lower[both]
    if up_only.any():
        placed = np.flatnonzero(both)
        offset[up_only] = graph.multi_source(placed, offset[placed])[up_only]
    if lo_only.any():
        placed = np.flatnonzero(both | up_only)
        offset[lo_only] = -graph.multi_source(placed, -offset[placed], reverse=True)[lo_only]
    return offset


def minimum_cycle_mean(n_domains: int, src, dst, weight) -> float:
    """Minimum mean weight over all directed cycles (inf for an acyclic graph)."""
    s, d, w = collapse_parallel(n_domains, src, dst, weight)
    p0 = _tree_potential(n_domains, s, d, w)
    return _relax_and_potential(n_domains, s, d, w + p0[s] - p0[d]).min_cycle_mean


def all_pairs_bounds(
    n_domains: int, src, dst, weight, relaxation: float, subset=None
) -> np.ndarray:
    """D[i, j] = shortest distance i -> j in the graph loosened by ``relaxation`` (Johnson).

    With ``subset`` (domain indexes) D is len(subset) x len(subset), rows and columns in
    subset order, distances still through the whole graph. x[j] - x[i] lies in
    [-D[j, i], D[i, j]]; +inf where no path. Memory is 8 * k**2 bytes (k = len(subset)):
    pass a subset for thousands of domains. Raises ValueError if ``relaxation`` is below
    what the system needs (negative cycles remain).
    """
    src, dst, weight = as_edges(n_domains, src, dst, weight)
    graph, potential = reduced_graph(n_domains, src, dst, weight, anchor=0)
    need = potential.relaxation
    if relaxation < need - 1e-9 * max(1.0, abs(need)):
        raise ValueError(f"relaxation {relaxation} below the required {need}: negative cycles")
    extra = max(0.0, relaxation - need)
    rows = np.arange(n_domains) if subset is None else np.asarray(subset, dtype=np.int64)
    graph = graph.loosened(extra)
    dr = dijkstra(n_domains, graph.src, graph.dst, graph.red, rows)
    q = graph.q
    dist = dr - q[rows][:, None] + q[None, :]
    return dist if subset is None else dist[:, rows]


def pair_width_stats(
    n_domains: int, src, dst, weight, relaxation: float, keep, is_spe, ppe: int,
    max_cells: int = 1 << 22,
) -> dict[str, float]:
    """The paper's Table 1 figures over the domains ``keep`` without an all-pairs matrix.

    Width of a pair = D[i, j] + D[j, i], the width of x[j] - x[i]'s feasible interval in
    the graph loosened by ``relaxation`` (Johnson: one potential, then Dijkstra from every
    domain of ``keep`` forwards and backwards, in blocks of at most ``max_cells`` /
    ``n_domains`` sources, so memory is 16 * ``max_cells`` bytes beside the graph whatever
    len(keep), and no matrix of len(keep)**2 is ever built). On reduced weights
    the potential cancels in the sum, so no precision is lost on raw clock values. Keys:
    ``max_all`` (every pair of ``keep``), ``max_spe`` (pairs of two SPE domains, ``is_spe``
    a mask over ``keep``), ``mean_spe_ppe`` (each SPE domain with ``ppe``, a domain of
    ``keep``), ``mean_spe_spe`` (every unordered SPE pair); NaN where there is no such pair,
    inf where a pair is unbounded. Raises ValueError like ``all_pairs_bounds``.
    """
    src, dst, weight = as_edges(n_domains, src, dst, weight)
    keep = np.asarray(keep, dtype=np.int64)
    is_spe = np.asarray(is_spe, dtype=bool)
    k = keep.size
    stats = {"max_all": math.nan, "max_spe": math.nan, "mean_spe_ppe": math.nan,
             "mean_spe_spe": math.nan}
    if k < 2:
        return stats
    graph, potential = reduced_graph(n_domains, src, dst, weight, anchor=int(keep[0]))
    need = potential.relaxation
    if relaxation < need - 1e-9 * max(1.0, abs(need)):
        raise ValueError(f"relaxation {relaxation} below the required {need}: negative cycles")
    graph = graph.loosened(max(0.0, relaxation - need))
    # the rows once: Dijkstra runs on them for every block of sources
    fwd = compressed_rows(n_domains, graph.src, graph.dst, graph.red)
    bwd = compressed_rows(n_domains, graph.dst, graph.src, graph.red)
    ppe_at = int(np.flatnonzero(keep == ppe)[0]) if (keep == ppe).any() else -1
    spe_pos = np.flatnonzero(is_spe)
    max_all = max_spe = -math.inf
    sum_spe = 0.0
    spe_ppe = []
    block = max(1, max_cells // n_domains)  # Dijkstra gives rows x n_domains
    for at in range(0, k, block):
        rows = np.arange(at, min(k, at + block))
        w = (dijkstra_rows(n_domains, fwd, keep[rows])[:, keep]
             + dijkstra_rows(n_domains, bwd, keep[rows])[:, keep])
        w[np.arange(rows.size), rows] = -math.inf  # not a pair
        max_all = max(max_all, float(w.max()))
        mine = is_spe[rows]
        if mine.any() and spe_pos.size:
            ws = w[np.ix_(mine, spe_pos)]
            max_spe = max(max_spe, float(ws.max()))
            sum_spe += float(ws[ws > -math.inf].sum())  # the diagonal is no pair
            if ppe_at >= 0:
                spe_ppe.append(w[mine, ppe_at])
    n_spe = spe_pos.size
    stats["max_all"] = max_all
    if n_spe >= 2:
        stats["max_spe"] = max_spe
        stats["mean_spe_spe"] = sum_spe / (n_spe * (n_spe - 1))  # each pair counted twice
    if spe_ppe:
        stats["mean_spe_ppe"] = float(np.concatenate(spe_ppe).mean())
    return stats


def pair_errors(D: np.ndarray) -> np.ndarray:
    """E[i, j] = (D[i, j] + D[j, i]) / 2: half the width of x[j] - x[i]'s feasible interval."""
    D = np.asarray(D, dtype=np.float64)
    return (D + D.T) / 2.0


def error_table(D: np.ndarray, is_spe_mask, ppe_index: int) -> dict[str, float]:
    """The paper's Table 1 columns from an all-pairs matrix (indexes are D's own).

    Error of a pair = (D[i, j] + D[j, i]) / 2, half the width of the feasible interval of
    their relative offset (inf when a side is unbounded). Keys:
    ``max_error_all`` (every pair i != j), ``max_error_spe`` (pairs of two SPE domains),
    ``mean_error_spe_ppe`` (each SPE domain with ``ppe_index``), ``mean_error_spe_spe``
    (every unordered pair of two SPE domains). NaN where there is no such pair.
    """
    E = pair_errors(D)
    k = E.shape[0]
    spe = np.flatnonzero(np.asarray(is_spe_mask, dtype=bool))
    off = ~np.eye(k, dtype=bool)
    iu = np.triu_indices(spe.size, 1)
    spe_pairs = E[np.ix_(spe, spe)][iu]
    spe_ppe = E[spe[spe != ppe_index], ppe_index]

    def _stat(fn, a: np.ndarray) -> float:
        return float(fn(a)) if a.size else math.nan

    return {
        "max_error_all": _stat(np.max, E[off]),
        "max_error_spe": _stat(np.max, spe_pairs),
        "mean_error_spe_ppe": _stat(np.mean, spe_ppe),
        "mean_error_spe_spe": _stat(np.mean, spe_pairs),
    }
