"""The node fit's linear program (``Program``, scipy's HiGHS, by row generation): knot
deviations of every node, maximizing every node's smallest slack per window of the objective
(``objective_windows``) plus a small weight times every node pair's, with rates within
``1 +- max_ppm``; the rows that can bind (the lower convex hull per cell, ``hull`` and
``cells``); and the bound the fitted slacks leave each node (``shift_bounds``). It chooses no
knots (``curves.py`` does) and builds no map (``fit.py`` does)."""

from __future__ import annotations

import numpy as np

from ...native.graph_loops import dijkstra_rows
from .compressed import from_triplets
from .highs import GrowingLp
from .points import LpOptions as FitOptions
from .points import by_node


class Program:
    """The linear program, solved by row generation.

    Columns: knot deviations z (reference = x + c + Z(x), Z linear between knots; none for the
    reference node), one ``t`` per window of every node, one ``u`` per window of every node
    pair with points in it whose nodes are at most ``pair_reach`` apart
    (``near_in_node_order``). Rows: ``Z_a(ta) - Z_b(tb) + t <= tb + c_b - ta - c_a`` for the
    window of each end and the pair's window (the pool: hull vertices per cell), and
    ``|rate - 1| <= max_ppm`` per segment. Maximizes ``sum t + edge_weight * sum u``. It starts
    from the rows of the points with the smallest prior slack per window half of every node
    and per pair window and direction, within ``start_us`` of it (``start_us_many`` on more
    nodes than the pair terms reach), and every rate row of a node with a knot in each
    window or more; solves, adds per column and side the pool row the solution breaks most
    (and those within 2 ticks of it) and every rate row it breaks, and repeats until it
    breaks none: the result solves the whole program. (Adding every row it breaks at once
    took 15-23 s a warm solve on a 20-node one-way ring exchanging every 5 s for 10 minutes,
    45-55 k rows added after a first solution far off: 2.2-2.9 s now.)
    """

    def __init__(self, ref: int, knots: list[np.ndarray | None],
                 tknots: list[np.ndarray | None], per_edge: int, c: np.ndarray,
                 o: FitOptions, hz: float) -> None:
        self.ref, self.knots, self.tknots, self.c, self.o, self.hz = ref, knots, tknots, c, o, hz
        self.per_edge = per_edge
        n_nodes = len(knots)
        self.zoff = np.full(n_nodes, -1, np.int64)
        self.toff = np.full(n_nodes, -1, np.int64)
        col = 0
        for n, kn in enumerate(knots):
            if kn is not None and n != ref:
                self.zoff[n] = col
                col += kn.size
        self.n_z = col
        for n, kn in enumerate(tknots):
            if kn is not None:
                self.toff[n] = col
                col += kn.size - 1
        self.n_zt = col
        self.rows = 0
        self.rounds = 0

    def _interp(self, node: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, ...]:
        """Columns and weights of Z_node(x) (column -1, weight 0 on the reference node)."""
        k = piece_of(node, x, self.knots)
        lam = np.zeros(x.size)
        for n, sel in by_node(node):
            if n == self.ref:
                continue
            kn = self.knots[n]
            assert kn is not None, "every node but the reference has knots"
            lo, hi = kn[k[sel]], kn[k[sel] + 1]
            lam[sel] = (x[sel] - lo) / (hi - lo)
        col0 = np.where(node == self.ref, -1, self.zoff[node] + k)
        col1 = np.where(node == self.ref, -1, col0 + 1)
        w0 = np.where(node == self.ref, 0.0, 1.0 - lam)
        w1 = np.where(node == self.ref, 0.0, lam)
        return col0, w0, col1, w1

    def solve(self, pool: np.ndarray, score: np.ndarray) -> np.ndarray:
        """z (with the t and u columns after it) for the pool of points; ``score`` (a prior
        slack per point) picks the rows of the first round."""
        c, n_nodes = self.c, len(self.knots)
        a, b = pool["a"].astype(np.int64), pool["b"].astype(np.int64)
        ca0, wa0, ca1, wa1 = self._interp(a, pool["ta"])
        cb0, wb0, cb1, wb1 = self._interp(b, pool["tb"])
        wa = piece_of(a, pool["ta"], self.tknots)
        sides = [self.toff[a] + wa, self.toff[b] + piece_of(b, pool["tb"], self.tknots)]
        n_u = 0
        termed = np.zeros(pool.size, dtype=bool)  # rows of a pair with a node-pair term
        if self.o.edge_weight > 0:
            termed = near_in_node_order(a, b, n_nodes, self.o.pair_reach)
            lo = np.minimum(a, b)
            pair = (lo * n_nodes + np.maximum(a, b)) * (wa.max() + 1) + wa // self.per_edge
            upair, inv = np.unique(pair[termed], return_inverse=True)
            n_u = upair.size
            if n_u:  # a pair side where any pair has its term
                ucol = np.full(pool.size, self.n_zt + 2 * n_u, np.int64)  # past the last: none
                ucol[termed] = self.n_zt + inv.ravel() * 2 + (a == lo)[termed]
                sides.append(ucol)
        d = pool["tb"] + c[b] - pool["ta"] - c[a]
        # per segment: rate rows, added when violated, or from the first round for a node
        # with as many segments as objective windows or more: a window holding a knot is
        # made wider by tilting the node's map about it where its first rows of one direction
        # lie left of the knot and of the other right, so such knots zig-zag away, the
        # slacks run to their cap and the first solve ends in thousands of simplex pivots (an
        # 8-node ring: 0.35 s instead of 0.09); every node's rate rows, though, cost the
        # interior-point solve a fifth more on 16 nodes
        seg_lo, seg_dx, seg_first = [], [], []
        for n, (kn, tk) in enumerate(zip(self.knots, self.tknots, strict=True)):
            if kn is not None and n != self.ref:
                seg_lo.append(self.zoff[n] + np.arange(kn.size - 1))
                seg_dx.append(np.diff(kn))
                seg_first.append(np.full(kn.size - 1, tk is not None and kn.size >= tk.size))
        seg_col = np.concatenate(seg_lo) if seg_lo else np.zeros(0, np.int64)
        seg_len = np.concatenate(seg_dx) if seg_dx else np.zeros(0)
        first_rates = np.concatenate(seg_first) if seg_first else np.zeros(0, dtype=bool)
        eps = self.o.max_ppm * 1e-6
        n_cols = self.n_zt + n_u
        cost = np.zeros(n_cols)
        cost[self.n_z:self.n_zt] = -1.0
        cost[self.n_zt:] = -self.o.edge_weight
        bounds = np.empty((n_cols, 2))
        bounds[:, 0], bounds[:, 1] = -np.inf, np.inf
        bounds[self.n_z:, 1] = self.hz * 1.0  # t, u: never unbounded
        active = np.zeros((pool.size, len(sides)), dtype=bool)
        start_us = (self.o.start_us if n_nodes <= 2 * self.o.pair_reach + 1
                    else self.o.start_us_many)
        n_keys = n_cols + 2 * n_u + 1  # the side columns' numbers (one past: none)
        for side, tcol in enumerate(sides):  # per column and side, the smallest prior slacks
            active[:, side] = score <= (_least_of_column(tcol, score, n_keys)
                                        + start_us * 1e-6 * self.hz)
        if n_u:  # u columns were numbered per direction to pick a first row of each
            active[:, 2] &= termed
            sides[2] = np.where(termed, self.n_zt + (sides[2] - self.n_zt) // 2, 0)
        rate_on = np.c_[first_rates, first_rates]
        in_model = np.zeros_like(active)  # the rows the program holds so far
        rate_in_model = np.zeros_like(rate_on)
        lp = GrowingLp(cost, bounds)  # later rounds from the last basis
        tol, margin = 1.0, 2.0  # ticks: a window's smallest slack 1 tick high is no matter
        for self.rounds in range(1, 101):
            # the rows activated since the last solve (all of them the first time)
            parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
            rhs = []
            row0 = 0
            for side, tcol in enumerate(sides):
                i = np.flatnonzero(active[:, side] & ~in_model[:, side])
                r = row0 + np.arange(i.size)
                for col, wgt in ((ca0, wa0), (ca1, wa1), (cb0, -wb0), (cb1, -wb1)):
                    ok = col[i] >= 0
                    parts.append((r[ok], col[i][ok], wgt[i][ok]))
                parts.append((r, tcol[i], np.ones(i.size)))
                rhs.append(d[i])
                row0 += i.size
            for side, sign in ((0, 1.0), (1, -1.0)):
                j = np.flatnonzero(rate_on[:, side] & ~rate_in_model[:, side])
                r = row0 + np.arange(j.size)
                parts.append((r, seg_col[j] + 1, np.full(j.size, sign)))
                parts.append((r, seg_col[j], np.full(j.size, -sign)))
                rhs.append(eps * seg_len[j])
                row0 += j.size
            rr = np.concatenate([p[0] for p in parts])
            cc = np.concatenate([p[1] for p in parts])
            vv = np.concatenate([p[2] for p in parts])
            lp.add_rows(from_triplets(vv, rr, cc, (row0, n_cols)),
                        np.concatenate(rhs))
            in_model |= active
            rate_in_model |= rate_on
            sol = lp.solve()
            self.rows = lp.n_rows
            zz = np.r_[sol[:self.n_z], 0.0]  # index -1 -> the reference's zero
            slack = d + wb0 * zz[cb0] + wb1 * zz[cb1] - wa0 * zz[ca0] - wa1 * zz[ca1]
            low = np.stack([slack - sol[tcol] for tcol in sides], axis=1)
            if n_u:  # a row of a pair without a term has no pair side
                low[~termed, 2] = np.inf
            bad = (low < -tol) & ~active
            dz = zz[seg_col + 1] - zz[seg_col]
            lim = eps * seg_len
            bad_rate = np.c_[dz > lim + tol, -dz > lim + tol] & ~rate_on
            if not bad.any() and not bad_rate.any():
                break
            # per column and side, the row that breaks it most (and any row within the
            # margin of that): a first solution far off breaks most of the pool at once
            near = (low < margin) & ~active
            for side, tcol in enumerate(sides):
                worst = _least_of_column(tcol, np.where(near[:, side], low[:, side], np.inf),
                                         n_keys)
                near[:, side] &= low[:, side] <= np.minimum(worst + margin, margin)
            active |= near
            rate_on |= np.c_[dz > lim - margin, -dz > lim - margin] | bad_rate
        return sol


def _least_of_column(col: np.ndarray, value: np.ndarray, n_keys: int) -> np.ndarray:
    """Per row, the least ``value`` of the rows with its ``col`` (``n_keys`` numbers)."""
    least = np.full(n_keys, np.inf)
    np.minimum.at(least, col, value)
    return least[col]


def objective_windows(lo_r: float, hi_r: float, n_fitted: int, o: FitOptions,
             hz: float) -> tuple[np.ndarray, int]:
    """Edges (reference ticks) of the windows of the node terms: ``t_window_s`` or 1/``windows``
    of the run if shorter, wider when nodes x windows would pass ``max_windows``; and how many
    of them make a window of the node-pair terms (``edge_window_s``, at most a tenth of the
    run, one at least)."""
    span = hi_r - lo_r
    if not np.isfinite(o.t_window_s):
        return np.array([lo_r, hi_r]), 1
    n_t = max(int(np.ceil(span / (o.t_window_s * hz))), o.windows, 1)
    n_t = max(1, min(n_t, o.max_windows // max(n_fitted, 1)))
    per_edge = int(round(min(o.edge_window_s * hz, span / 10) * n_t / span))
    return np.linspace(lo_r, hi_r, n_t + 1), max(1, per_edge)


def near_in_node_order(a: np.ndarray, b: np.ndarray, n_nodes: int, reach: int) -> np.ndarray:
    """Per point, whether its nodes are at most ``reach`` apart in node order, counted around
    the ring of ``n_nodes`` (every pair where ``n_nodes <= 2 * reach + 1``)."""
    apart = np.abs(a - b)
    return np.minimum(apart, n_nodes - apart) <= reach


def piece_of(node: np.ndarray, x: np.ndarray, knots: list[np.ndarray | None]) -> np.ndarray:
    k = np.zeros(node.size, np.int64)
    for n, sel in by_node(node):
        kn = knots[n]
        if kn is not None:
            k[sel] = np.clip(np.searchsorted(kn, x[sel], side="right") - 1, 0, kn.size - 2)
    return k


def hull(cell: np.ndarray, x: np.ndarray, y: np.ndarray, smax: float,
          max_passes: int = 200) -> np.ndarray:
    """Indexes of the points that minimize ``y - s * x`` within their cell for some slope s in
    [-smax, smax]: the lower convex hull's vertices whose supporting slopes meet that range.
    Removing a point above the chord of its neighbours never removes a hull vertex, so the
    passes are exact; points left after ``max_passes`` are only kept, never lost."""
    if cell.size == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((y, x, cell))
    g, xs, ys = cell[order], x[order], y[order]
    first = np.ones(g.size, dtype=bool)
    first[1:] = (g[1:] != g[:-1]) | (xs[1:] != xs[:-1])
    idx, g, xs, ys = order[first], g[first], xs[first], ys[first]
    for _ in range(max_passes):
        if g.size < 3:
            break
        inner = (g[1:-1] == g[:-2]) & (g[1:-1] == g[2:])
        x0, x1, x2 = xs[:-2], xs[1:-1], xs[2:]
        y0, y1, y2 = ys[:-2], ys[1:-1], ys[2:]
        above = inner & ((y1 - y0) * (x2 - x0) >= (y2 - y0) * (x1 - x0))
        if not above.any():
            break
        keep = np.ones(g.size, dtype=bool)
        keep[1:-1] = ~above
        idx, g, xs, ys = idx[keep], g[keep], xs[keep], ys[keep]
    same = g[1:] == g[:-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(same, (ys[1:] - ys[:-1]) / (xs[1:] - xs[:-1]), np.nan)
    s_left = np.r_[-np.inf, np.where(same, s, -np.inf)]
    s_right = np.r_[np.where(same, s, np.inf), np.inf]
    ok = (s_left <= smax) & (s_right >= -smax)
    return np.sort(idx[ok])


def cells(a: np.ndarray, b: np.ndarray, ka: np.ndarray, kb: np.ndarray,
           knots: list[np.ndarray | None]) -> np.ndarray:
    """One int64 key per (segment of a, segment of b)."""
    sizes = np.array([k.size - 1 if k is not None else 1 for k in knots], dtype=np.int64)
    off = np.r_[0, np.cumsum(sizes)]
    return (off[a] + ka) * off[-1] + off[b] + kb


def slope_limit(max_ppm: float) -> float:
    """Largest |rate_a / rate_b - 1| when both rates lie within 1 +- max_ppm."""
    eps = max_ppm * 1e-6
    return ((1 + eps) / (1 - eps) - 1) * 1.01 + 1e-12 if eps < 1 else np.inf


def shift_bounds(pts: np.ndarray, slack: np.ndarray, n_nodes: int, ref: int, c: np.ndarray,
            w: float) -> np.ndarray:
    """Per node, the largest shift the fitted slacks allow in any window of ``w`` reference
    ticks (inf: never bounded)."""
    tr = pts["ta"] + c[pts["a"]]
    w = max(w, 1.0)
    win = ((tr - tr.min()) // w).astype(np.int64)
    n_win = int(win.max()) + 1
    relax = max(0.0, -float(np.nanmin(slack)))
    wt = slack + relax
    # per (window, a, b) minimum; edge b -> a (shift of a <= shift of b + slack)
    key = (win * n_nodes + pts["a"]) * n_nodes + pts["b"]
    order = np.lexsort((wt, key))
    key, wt = key[order], wt[order]
    first = np.r_[True, key[1:] != key[:-1]]
    key, wt = key[first], wt[first]
    a = (key // n_nodes) % n_nodes
    b = key % n_nodes
    wn = key // (n_nodes * n_nodes)
    size = n_win * n_nodes
    wt = np.maximum(wt, 1e-9)  # csgraph drops explicit zeros
    g = from_triplets(wt, wn * n_nodes + b, wn * n_nodes + a, (size, size))
    back = g.T.converted("csr")
    src = np.arange(n_win) * n_nodes + ref
    up = dijkstra_rows(size, (g.indptr, g.indices, g.data), src,
                       min_only=True).reshape(n_win, n_nodes)
    down = dijkstra_rows(size, (back.indptr, back.indices, back.data), src,
                         min_only=True).reshape(n_win, n_nodes)
    both = np.isfinite(up) & np.isfinite(down)
    worst = np.where(both, np.maximum(up, down), -np.inf).max(axis=0)
    return np.where(np.isfinite(worst), worst, np.inf)
