"""The node fit's hard constraints: every message as an order that the maps must keep, as
difference constraints between the offsets of the message ends (``Graph``: one vertex per
message end on a non-reference node, one for the reference, whose offset is 0; a message
a -> b says ``z_a(ta) - z_b(tb) <= tb + c_b - ta - c_a - latency``; consecutive vertices of
a node differ by at most the rate limit times their distance). From it: the least change to
an estimate that keeps every message (``keep_order``: the mean of the least solution above it
and the greatest below it, both feasible, so their mean is; ``keep_order_by_node``: the same
node by node, each given the nodes placed before it), the guaranteed envelope of all
maps within the rate limit that keep every message ordered (``envelope``, ``bound_at``) and,
where no map can keep them, the messages to blame (``Infeasible``). Shortest paths are
Dijkstra's over weights made non-negative by a potential (the estimate), in rounds that relax
the few edges it leaves negative. It estimates nothing (``estimate.py`` does)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...native.graph_loops import dijkstra_rows
from .compressed import from_triplets

#: ``keep_order_by_node``: an estimate no constant brings inside is placed in the middle of
#: what the nodes before allow where at least this share of its ends lie far outside; below
#: it, clipped (the middle of a link late one way lies far from the truth, where an
#: estimate off at a few exchanges is right at the others)
_FAR_SHARE = 0.5


class Infeasible(Exception):
    """No offsets satisfy the constraints; ``points``: message points on the cycles found."""

    def __init__(self, points: np.ndarray) -> None:
        super().__init__(f"{points.size} messages on a negative cycle")
        self.points = points


@dataclass
class Graph:
    """The constraint graph of a set of message points. Vertex 0 is the reference."""

    node: np.ndarray  # per vertex
    x: np.ndarray  # per vertex: node timebase (NaN for the reference)
    msg_src: np.ndarray  # per message edge (constraint z[dst] - z[src] <= base - latency)
    msg_dst: np.ndarray
    msg_base: np.ndarray
    msg_point: np.ndarray  # the point each message edge came from
    rate_lo: np.ndarray  # per pair of consecutive vertices of a node: the earlier ...
    rate_dx: np.ndarray  # ... and their distance in node ticks

    @property
    def size(self) -> int:
        return int(self.node.size)

    def edges(self, latency: float, eps: float, monotone_only: bool = False
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, weight) of every constraint, parallel edges collapsed to their
        minimum. ``monotone_only``: the rate limit replaced by "maps increase"."""
        lo, hi = self.rate_lo, self.rate_lo + 1
        if monotone_only:
            src = np.concatenate([self.msg_src, hi])
            dst = np.concatenate([self.msg_dst, lo])
            w = np.concatenate([self.msg_base - latency, self.rate_dx])
        else:
            src = np.concatenate([self.msg_src, lo, hi])
            dst = np.concatenate([self.msg_dst, hi, lo])
            w = np.concatenate([self.msg_base - latency, eps * self.rate_dx,
                                eps * self.rate_dx])
        key = src * self.size + dst
        order = np.lexsort((w, key))
        first = np.r_[True, key[order][1:] != key[order][:-1]]
        sel = order[first]
        return src[sel], dst[sel], w[sel]


def build_graph(pts: np.ndarray, n_nodes: int, ref: int, c: np.ndarray) -> Graph:
    """The graph of ``pts`` (POINT_DTYPE, between nodes linked to the reference; ``c`` the
    rough offsets)."""
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    ends_node = np.concatenate([a, b])
    ends_x = np.concatenate([pts["ta"], pts["tb"]])
    other = ends_node != ref
    key_node, key_x = ends_node[other], ends_x[other]
    order = np.lexsort((key_x, key_node))
    kn, kx = key_node[order], key_x[order]
    first = np.r_[True, (kn[1:] != kn[:-1]) | (kx[1:] != kx[:-1])]
    node = np.r_[ref, kn[first]]
    x = np.r_[np.nan, kx[first]]
    vid = np.zeros(ends_node.size, np.int64)
    idx = np.cumsum(first)  # 1-based vertex of each sorted end
    tmp = np.zeros(key_node.size, np.int64)
    tmp[order] = idx
    vid[other] = tmp
    va, vb = vid[:a.size], vid[a.size:]
    base = pts["tb"] + c[b] - pts["ta"] - c[a]
    same = np.flatnonzero(node[1:-1] == node[2:]) + 1  # vertex i and i + 1 on one node
    return Graph(node=node, x=x, msg_src=vb, msg_dst=va, msg_base=base,
                 msg_point=np.arange(pts.size), rate_lo=same,
                 rate_dx=x[same + 1] - x[same])


def shortest(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray, init: np.ndarray,
             pot: np.ndarray) -> np.ndarray:
    """``min_j (init_j + dist(j -> i))`` for every vertex i (inf: unreached), for edges
    ``src -> dst`` of weight ``w`` (any sign). ``pot``: a potential that leaves few reduced
    weights negative (a near-feasible solution). Raises ``Infeasible`` (with the edge indexes
    still relaxing in ``points``) on a negative cycle."""
    rw = w + pot[src] - pot[dst]
    neg = rw < 0
    s_pos, d_pos, w_pos = src[~neg], dst[~neg], rw[~neg] + 1e-9  # csgraph: no explicit 0s
    s_neg, d_neg, w_neg = src[neg], dst[neg], rw[neg]
    e_neg = np.flatnonzero(neg)
    d = init - pot  # reduced: a path's weight is w + pot[start] - pot[end]
    for _ in range(int(neg.sum()) + 2):
        fin = np.flatnonzero(np.isfinite(d))
        if fin.size == 0:
            return np.full(n, np.inf)
        base = float(d[fin].min())
        rows = np.concatenate([s_pos, np.full(fin.size, n)])
        cols = np.concatenate([d_pos, fin])
        vals = np.concatenate([w_pos, d[fin] - base + 1e-9])
        g = from_triplets(vals, rows, cols, (n + 1, n + 1))
        dist = dijkstra_rows(n + 1, (g.indptr, g.indices, g.data), n)[:n] + base
        if not neg.any():
            return dist + pot
        cand = dist[s_neg] + w_neg
        better = cand < dist[d_neg] - 1e-6
        if not better.any():
            return dist + pot
        d = dist
        np.minimum.at(d, d_neg[better], cand[better])
    raise Infeasible(e_neg[better])


def envelope(g: Graph, latency: float, eps: float, pot: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) offset of every vertex over the maps within the rate limit ``eps`` that
    keep every message at least ``latency`` ticks long, the reference at 0."""
    return envelope_of(g.size, *g.edges(latency, eps), pot)


def envelope_of(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray, pot: np.ndarray,
                ref: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) of every vertex over the solutions of the constraints ``x[dst] -
    x[src] <= w`` (parallel edges collapsed) with ``x[ref] = 0``; ``pot`` as ``shortest``
    takes it."""
    start = np.full(n, np.inf)
    start[ref] = 0.0
    upper = shortest(n, src, dst, w, start, pot)
    lower = -shortest(n, dst, src, w, start, -pot)
    return lower, upper


def nearest(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray, h: np.ndarray,
            pot: np.ndarray, ref: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The solution of ``x[dst] - x[src] <= w`` (parallel edges collapsed) closest to ``h``
    (NaN: the middle of the envelope), before ``x[ref]`` is set to 0 (the caller's), and the
    envelope about ``ref`` (``envelope_of``): ``h`` clipped to the envelope, then the mean of
    the greatest feasible solution below it and the least above it (both feasible, so their
    mean is). Raises ``Infeasible``."""
    lower, upper = envelope_of(n, src, dst, w, pot, ref)
    with np.errstate(invalid="ignore"):  # an unconstrained vertex: -inf + inf, not taken
        mid = np.where(np.isfinite(lower) & np.isfinite(upper), 0.5 * (lower + upper), 0.0)
    hc = np.clip(np.where(np.isnan(h), mid, h), lower, upper)
    down = shortest(n, src, dst, w, hc, pot)
    up = -shortest(n, dst, src, w, -hc, -pot)
    return 0.5 * (down + up), lower, upper


def keep_order(g: Graph, h: np.ndarray, latency: float, eps: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The offsets closest to ``h`` (per vertex, 0 at the reference; NaN where there is no
    estimate: the middle of the envelope is taken) that keep every message at least
    ``latency`` long within the rate limit (``nearest``). Returns (offsets, lower, upper
    envelope)."""
    z, lower, upper = nearest(g.size, *g.edges(latency, eps), h, np.nan_to_num(h, nan=0.0))
    z[0] = 0.0
    return z, lower, upper


def keep_order_by_node(g: Graph, h: np.ndarray, latency: float, eps: float,
                       nodes: list[int], far: float) -> np.ndarray:
    """``keep_order`` node by node, in the order of ``nodes`` (the reference not among
    them), each node given the nodes placed before it, which stay where they were put
    (pinned by two edges to the reference): a node whose estimate ``h`` lies within ``far``
    of what they allow the closest to it (``nearest``); one whose estimate lies farther out
    moved by the least constant that brings it inside (its shape kept: clipped to the
    envelope, whose edges are rate-limit cones, its rate would rail); where no constant
    does, clipped all the same where fewer than half of its ends lie farther out than
    ``far`` (an estimate off at a few exchanges, right at the others), else into the middle
    of what they allow. So an estimate far off on one node moves that node, not the nodes
    placed before it, where the joint ``keep_order`` moves both sides of a misfit by half
    of it.
    Every message is kept (each step is feasible with its pins, which the next keeps).
    Returns the offsets (0 at the reference). Raises ``Infeasible``."""
    src0, dst0, w0 = g.edges(latency, eps)
    n = g.size
    z = np.full(n, np.nan)
    z[0] = 0.0
    pot = np.nan_to_num(h, nan=0.0)
    pot[0] = 0.0
    for node in nodes:
        mine = np.flatnonzero(g.node == node)
        if not mine.size:
            continue
        pinned = np.flatnonzero(np.isfinite(z))[1:]  # the reference is vertex 0
        src = np.concatenate([src0, np.zeros(pinned.size, np.int64), pinned])
        dst = np.concatenate([dst0, pinned, np.zeros(pinned.size, np.int64)])
        w = np.concatenate([w0, z[pinned], -z[pinned]])
        pot_now = np.where(np.isfinite(z), z, pot)
        lower, upper = envelope_of(n, src, dst, w, pot_now)
        with np.errstate(invalid="ignore"):
            mid = np.where(np.isfinite(lower) & np.isfinite(upper), 0.5 * (lower + upper),
                           0.0)
        est = np.where(np.isnan(h[mine]), mid[mine], h[mine])
        start = np.full(n, np.inf)
        start[0] = 0.0
        start[pinned] = z[pinned]
        start[mine] = np.clip(est, lower[mine], upper[mine])
        if np.abs(start[mine] - est).max(initial=0.0) > far:
            # an estimate this far outside: moved by the least constant that brings it
            # inside (its shape kept), else, where no constant does, the middle
            lo_shift = float((lower[mine] - est).max())
            hi_shift = float((upper[mine] - est).min())
            if lo_shift <= hi_shift:
                start[mine] = est + min(max(0.0, lo_shift), hi_shift)
            elif np.mean(np.abs(start[mine] - est) > far) >= _FAR_SHARE:
                start[mine] = mid[mine]  # else clipped (above): right where it is inside
        down = shortest(n, src, dst, w, start, pot_now)
        up = -shortest(n, dst, src, w, -start, -pot_now)
        z[mine] = 0.5 * (down[mine] + up[mine])
    z[np.isnan(z)] = 0.0  # vertices of no node given (none: every node is)
    z[0] = 0.0
    return z


def blame(g: Graph, h: np.ndarray, latency: float) -> np.ndarray:
    """Message points that no increasing maps can keep ordered together (empty if increasing
    maps can: then only the rate limit is too tight)."""
    src, dst, w = g.edges(latency, 0.0, monotone_only=True)
    start = np.zeros(g.size)
    try:
        shortest(g.size, src, dst, w, start, h)
    except Infeasible as bad:
        # the edges still relaxing, as message points (rate edges have no point)
        key = src[bad.points] * g.size + dst[bad.points]
        mkey = g.msg_src * g.size + g.msg_dst
        return np.unique(g.msg_point[np.isin(mkey, key)])
    return np.zeros(0, np.int64)


def bound_at(xs: np.ndarray, lower: np.ndarray, upper: np.ndarray, eps: float,
             x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The envelope (lower, upper) of one node at ``x`` from its vertices (``xs`` ascending,
    their envelope values): between and beyond vertices the rate limit alone bounds it."""
    x = np.asarray(x, dtype=np.float64)
    j = np.searchsorted(xs, x, side="right")
    left = np.clip(j - 1, 0, xs.size - 1)
    right = np.clip(j, 0, xs.size - 1)
    dl, dr = np.abs(x - xs[left]), np.abs(xs[right] - x)
    up = np.minimum(upper[left] + eps * dl, upper[right] + eps * dr)
    lo = np.maximum(lower[left] - eps * dl, lower[right] - eps * dr)
    return lo, up


def apexes(xs: np.ndarray, lower: np.ndarray, upper: np.ndarray, eps: float) -> np.ndarray:
    """Where the envelope between consecutive vertices is widest (its breakpoints)."""
    if xs.size < 2:
        return np.zeros(0)
    mid = 0.5 * (xs[1:] + xs[:-1])
    pu = np.clip(mid + (upper[1:] - upper[:-1]) / (2 * eps), xs[:-1], xs[1:])
    pl = np.clip(mid + (lower[:-1] - lower[1:]) / (2 * eps), xs[:-1], xs[1:])
    return np.concatenate([pu, pl])
