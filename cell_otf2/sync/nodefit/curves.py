"""Each node's offset curve to the reference (per window, the centre of the band its MPI
messages leave, by least squares over the node pairs; again with the rates of the last model)
and the model chosen from it: the bends where its rate changes (a penalized segmentation) and
the knot spacing between them (cross-validation over interleaved windows), then a node's knots
and the offsets at them that start the program. It solves no linear program (``program.py``
does) and chooses no final map (``lp.py`` does)."""

from __future__ import annotations

import functools

import numpy as np

from ...model import NodeMap
from ...native.graph_loops import weak_components
from .compressed import from_triplets, spsolve
from .points import LpOptions as FitOptions
from .points import map_to_reference, slacks

_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


def choose_model(centers: np.ndarray, v: np.ndarray, width: float, lo_r: float, hi_r: float,
                  o: FitOptions, hz: float) -> tuple[np.ndarray, float]:
    """A node's model, chosen from its curve: (bends, knot spacing h between them). The
    candidates are procedures: straight pieces between the bends of ``_bend_knots`` (or no
    bends), with knots every h besides (or not: h = inf). Each is run on all windows but
    every ``folds``-th and scored on the windows it did not see, over the ``folds``
    interleaved sets (cross-validation: the bends are searched again on each training set,
    so a procedure that chases noise predicts badly). A candidate's score is the median of
    its squared errors (a training set that misses a bend spoils a few windows, not the
    score). The choice is the candidate with the fewest knots whose score is within the floor
    of the best, or below it: a finer model must predict unseen windows better by more than
    the floor, which is ``cv_floor_noise`` times the noise variance of the curve's window
    offsets (sigma^2, from its second differences: what the messages resolve), clipped to
    ``cv_floor_min_us`` .. ``cv_floor_us`` squared. So a node is a line (no bends, h = inf)
    unless its messages show something the line misses, and dense messages follow finer
    curves than sparse ones. Candidates are scored fewest knots first, and no further once
    one is below the floor. A negative h: knots exactly every h (the grid shifted by h /
    ``spins`` predicts more than ``spin_slack`` times worse: its knots sit on bends)."""
    ok = np.flatnonzero(np.isfinite(v))
    span = hi_r - lo_r
    if ok.size < 2 * max(o.folds, 2) or not np.isfinite(width):
        return _bend_knots(centers, v, o, hz), np.inf
    spacings = _spacing_candidates(span, width, o)
    sigma = _noise(v)  # of the whole curve: a training set's windows are not evenly spaced
    fold = np.arange(ok.size) % o.folds
    sets = [(ok[fold == f], ok[fold != f]) for f in range(o.folds)]
    fold_bends = [_bend_knots(centers[tr], v[tr], o, hz, width, sigma) for _, tr in sets]
    full = _bend_knots(centers, v, o, hz)
    floor = float(np.clip(o.cv_floor_noise * sigma ** 2, (o.cv_floor_min_us * 1e-6 * hz) ** 2,
                          (o.cv_floor_us * 1e-6 * hz) ** 2))

    def score(i: int, h: float, shift: float = 0.0) -> float:
        err = np.zeros(centers.size)
        kr = None if i == 0 else node_knots(np.zeros(0), lo_r, hi_r, h, shift)
        basis = None if kr is None else _hat_basis(centers, kr)  # every fold's, rows apart
        if basis is not None and _shared_knots_errors(basis, v, sets, err):
            return float(np.median(err[ok]))
        for (test, train), fb in zip(sets, fold_bends, strict=True):
            err[test] = _holdout_error(centers, v, train, test, fb if i == 0 else np.zeros(0),
                                       lo_r, hi_r, h, width, shift, kr, basis)
        return float(np.median(err[ok]))

    sets_b = [(0, full), (1, np.zeros(0))] if full.size else [(0, full)]
    cands = sorted((_knot_count(b, lo_r, hi_r, h), i, j) for i, b in sets_b
                   for j, h in enumerate(spacings))
    scores: list[tuple[float, int, int, int]] = []
    for size, i, j in cands:
        scores.append((score(i, spacings[j]), size, i, j))
        if scores[-1][0] <= floor:
            break
    best = min(sc for sc, *_ in scores)
    _, _, i, j = min((size, k, i, j) for k, (sc, size, i, j) in enumerate(scores)
                     if sc <= max(best + floor, floor) or sc == best)
    bends, h = (full if i == 0 else np.zeros(0)), spacings[j]
    spin = np.isfinite(h) and o.spins > 1
    for s in range(1, max(o.spins, 1)):
        if spin:
            spin = score(i, h, s / o.spins) <= o.spin_slack * best + floor
    return bends, (h if spin or not np.isfinite(h) else -h)


def _spacing_candidates(span: float, width: float, o: FitOptions) -> list[float]:
    """Knot spacings to try: the run in 1 (inf: no knots but bends), 2, 3, 4, 6, 8, ...
    pieces, down to ``min_spacing`` curve windows."""
    if not (np.isfinite(width) and np.isfinite(o.min_spacing)):
        return [np.inf]
    most = int(span / (max(o.min_spacing, 1.0) * width))
    ks = np.unique(np.round(np.geomspace(1, max(most, 1), 12)).astype(int))
    return [np.inf if k == 1 else span / k for k in ks.tolist()]


def _holdout_error(centers: np.ndarray, v: np.ndarray, train: np.ndarray, test: np.ndarray,
                   bends: np.ndarray, lo_r: float, hi_r: float, h: float, width: float,
                   shift: float = 0.0, kr: np.ndarray | None = None,
                   basis: np.ndarray | None = None) -> np.ndarray:
    """Squared errors on ``test`` of the least-squares pieces on knots (``bends``, every h)
    fitted to ``train`` (windows straddling a bend left out of the fit); ``basis``: the hat
    functions of ``kr`` at every centre, if the caller has them (a row depends on its centre
    only, so its rows are the train and test sets' own)."""
    if kr is None:
        kr = node_knots(bends, lo_r, hi_r, h, shift)
    if basis is None:
        basis = _hat_basis(centers, kr)
    x, y = centers[train], v[train]
    keep = np.ones(x.size, dtype=bool)
    for k in bends:
        keep &= np.abs(x - k) >= width / 2
    coef = _fit_basis(basis[train[keep]], y[keep], kr.size)
    pred = basis[test] @ coef
    return (pred - v[test]) ** 2


def _shared_knots_errors(basis: np.ndarray, v: np.ndarray,
                        sets: list[tuple[np.ndarray, np.ndarray]], err: np.ndarray) -> bool:
    """``_holdout_error`` of every (test, train) set at once where they share their knots and
    have no bends (``basis``: the knots' hat functions at every centre): the same normal
    equations, solved in one stacked call (LAPACK's solve per system, as one by one), the
    squared errors written to ``err`` at each test set. False, with ``err`` untouched, where a
    system is singular: the caller then takes each set's own way, with its fallback."""
    lhs, rhs = zip(*(_normal_equations(basis[train], v[train], basis.shape[1])
                     for _, train in sets), strict=True)
    try:
        coefs = np.linalg.solve(np.stack(lhs), np.stack(rhs)[:, :, None])[:, :, 0]
    except np.linalg.LinAlgError:
        return False
    for (test, _), coef in zip(sets, coefs, strict=True):
        err[test] = (basis[test] @ coef - v[test]) ** 2
    return True


def _bend_knots(centers: np.ndarray, v: np.ndarray, o: FitOptions, hz: float,
                width: float = 0.0, sigma: float | None = None) -> np.ndarray:
    """Knots (reference ticks) where a node's curve bends: the segmentation into straight
    pieces (least-squares lines of at least ``min_windows`` windows) with one window left out
    between neighbours (it may straddle the bend) that minimizes the squared residuals plus
    a cost per bend of ``max(25 sigma^2, bend_us^2)`` (sigma: the curve's noise from its
    second differences), by dynamic programming; each bend where the two lines meet, within
    a window of the left-out one. A lone window off the line costs a bend with parallel lines
    on either side: a harmless knot."""
    ok = np.isfinite(v)
    if width <= 0:
        width = float(centers[1] - centers[0]) if centers.size > 1 else 1.0
    t, v = (centers[ok] - centers[0]) / width, v[ok]  # t in windows
    m = max(int(o.min_windows), 2)
    n = t.size
    if n < 2 * m + 1:
        return np.zeros(0)
    if sigma is None:
        sigma = _noise(v)
    penalty = max(25.0 * sigma ** 2, (o.bend_us * 1e-6 * hz) ** 2)
    sse = _piece_costs(t, v)  # sse[s, e]: line over windows s..e-1
    best = np.full(n + 1, np.inf)
    cut = np.full(n + 1, -1)  # the left-out window before the last piece, -1: none
    best[m:] = sse[0, m:]
    # window g left out: pieces [.., g) and [g + 1, e), for g in m .. e - m - 1; the ends
    # e of a block of m need ``best`` of earlier ends only, so a block is one array step
    for e0 in range(2 * m + 1, n + 1, m):
        ends = np.arange(e0, min(e0 + m, n + 1))
        left_out = np.arange(m, ends[-1] - m)
        c = best[left_out][None, :] + penalty + sse[left_out[None, :] + 1, ends[:, None]]
        c[left_out[None, :] >= ends[:, None] - m] = np.inf
        k = np.argmin(c, axis=1)
        low = c[np.arange(ends.size), k]
        better = low < best[ends]
        best[ends[better]], cut[ends[better]] = low[better], left_out[k[better]]
    gaps: list[int] = []
    end = n  # walk the left-out windows back from the last
    while cut[end] >= 0:
        gaps.append(int(cut[end]))
        end = int(cut[end])
    gaps.sort()
    bounds = [0, *[x for g in gaps for x in (g, g + 1)], n]
    lines = [_line(t[a:b], v[a:b]) for a, b in zip(bounds[::2], bounds[1::2], strict=True)]
    knots = []
    for g, (b1, r1), (b2, r2) in zip(gaps, lines[:-1], lines[1:], strict=True):
        x = (b2 - b1) / (r1 - r2) if r1 != r2 else t[g]
        knots.append(min(max(x, t[g] - 1.0), t[g] + 1.0))
    return np.asarray(knots) * width + centers[0]


def node_curves(pts: np.ndarray, n_nodes: int, ref: int, c: np.ndarray, hz: float,
                 o: FitOptions) -> tuple[np.ndarray, np.ndarray]:
    """Every node's offset to the reference (ticks beyond ``timebase + c``) at the centres of
    windows of ``curve_window_s``: per node pair and window the band's centre line
    (``_edge_lines``), then per window least squares over the pairs. Returns (centres in
    reference ticks, offsets [window, node], NaN where a node is not linked that window)."""
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    t = pts["ta"] + c[a]
    slack = pts["tb"] - pts["ta"] + (c[b] - c[a])  # = e_hi - e_lo's lower bound, per side
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    t0 = float(t.min())
    width = _curve_width(a * n_nodes + b, float(t.max()) - t0, o, hz)
    win = ((t - t0) // width).astype(np.int64)
    n_win = int(win.max()) + 1
    centers = t0 + (np.arange(n_win) + 0.5) * width
    key = (lo * n_nodes + hi) * n_win + win
    bracket = 2.2 * o.max_ppm * 1e-6 + 1e-9
    gk, alpha, _ = _edge_lines(key, t, slack, a == lo, centers[win], bracket)
    return centers, _window_offsets(gk, alpha, n_win, n_nodes, ref)


def refined_curves(pts: np.ndarray, n_nodes: int, ref: int, c: np.ndarray,
                    centers: np.ndarray, maps: list[NodeMap | None]) -> np.ndarray:
    """The node curves at ``centers`` again, with every node's rate held at its map's: the
    maps' own curve plus, per window, the centre of the band that the smallest slacks under
    the maps leave each node pair in its two directions (least squares over the pairs). No
    rate is searched per window, so a window's offset is as good as its tightest messages in
    each direction: the curve of sparse messages, and its noise, are the messages' own."""
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    slack = slacks(pts, maps)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    n_win = centers.size
    width = float(centers[1] - centers[0]) if n_win > 1 else np.inf
    u = pts["ta"] + c[a]
    win = np.clip(np.floor((u - centers[0]) / width + 0.5), 0, n_win - 1).astype(np.int64)
    if not np.isfinite(width):
        win[:] = 0
    key = ((lo * n_nodes + hi) * n_win + win) * 2 + (a != lo)
    order = np.lexsort((slack, key))
    ks, ss = key[order], slack[order]
    first = np.r_[True, ks[1:] != ks[:-1]]
    ks, ss = ks[first], ss[first]  # per (group, direction): the smallest slack
    both = np.flatnonzero((ks[:-1] % 2 == 0) & (ks[1:] == ks[:-1] + 1))
    gk, alpha = ks[both] // 2, 0.5 * (ss[both + 1] - ss[both])
    out = _window_offsets(gk, alpha, n_win, n_nodes, ref)
    for n, m in enumerate(maps):
        if m is not None and n != ref:
            out[:, n] += map_to_reference(m, centers - c[n]) - centers
    return out


def _edge_lines(key: np.ndarray, t: np.ndarray, slack: np.ndarray, fwd: np.ndarray,
                center: np.ndarray, bracket: float,
                iters: int = 48) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group ``key`` (points with ``center`` per point), the line ``e = alpha + beta *
    (t - center)`` that maximizes the smaller of the smallest ``slack + e`` over the ``fwd``
    points and the smallest ``slack - e`` over the others. Returns (group keys, alpha, beta)
    for the groups with points in both directions, before and after the centre. ``beta``
    within +-``bracket`` by golden section (the objective is concave), ``alpha`` balances the
    two smallest slacks."""
    order = np.lexsort((~fwd, key))
    k, fw = key[order], fwd[order]
    sub = k * 2 + (~fw)
    starts = np.flatnonzero(np.r_[True, sub[1:] != sub[:-1]])
    ends = np.r_[starts[1:], sub.size]
    sk = sub[starts]
    both = np.flatnonzero((sk[:-1] % 2 == 0) & (sk[1:] == sk[:-1] + 1))
    empty = np.zeros(0)
    if both.size == 0:
        return np.zeros(0, np.int64), empty, empty

    def gather(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, ...]:
        n = e - s
        off = np.r_[0, np.cumsum(n)[:-1]]
        idx = np.arange(int(n.sum())) - np.repeat(off - s, n)
        g = np.repeat(np.arange(s.size), n)
        src = order[idx]
        return g, t[src] - center[src], slack[src], off

    gf, tf, rf, off_f = gather(starts[both], ends[both])
    gb, tb, rb, off_b = gather(starts[both + 1], ends[both + 1])

    def value(beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo_f = np.minimum.reduceat(rf + beta[gf] * tf, off_f)
        lo_b = np.minimum.reduceat(rb - beta[gb] * tb, off_b)
        return lo_f, lo_b

    lo = np.full(both.size, -bracket)
    hi = np.full(both.size, bracket)
    x1, x2 = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
    g1, g2 = sum(value(x1)), sum(value(x2))
    for _ in range(iters):
        right = g1 < g2  # the maximum lies right of x1
        lo = np.where(right, x1, lo)
        hi = np.where(right, hi, x2)
        new = np.where(right, lo + _GOLDEN * (hi - lo), hi - _GOLDEN * (hi - lo))
        gn = sum(value(new))
        x1, g1, x2, g2 = (np.where(right, x2, new), np.where(right, g2, gn),
                          np.where(right, new, x1), np.where(right, gn, g1))
    beta = 0.5 * (lo + hi)
    lo_f, lo_b = value(beta)
    # the rate is pinned only where both directions have points before and after the centre
    pinned = ((np.minimum.reduceat(tf, off_f) < 0) & (np.maximum.reduceat(tf, off_f) > 0)
              & (np.minimum.reduceat(tb, off_b) < 0) & (np.maximum.reduceat(tb, off_b) > 0)
              & (np.abs(beta) < 0.99 * bracket))
    return sk[both][pinned] // 2, ((lo_b - lo_f) / 2)[pinned], beta[pinned]


def _window_offsets(gk: np.ndarray, alpha: np.ndarray, n_win: int, n_nodes: int,
                    ref: int) -> np.ndarray:
    """Per window, least squares over the node pairs: ``out[w, hi] - out[w, lo] ~ alpha`` for
    every group ``gk = (lo * n_nodes + hi) * n_win + w``, the reference at 0, NaN where a node
    is not linked to the reference that window."""
    out = np.full((n_win, n_nodes), np.nan)
    out[:, ref] = 0.0
    if gk.size == 0:
        return out
    gw, pair = gk % n_win, gk // n_win
    ga, gb = pair // n_nodes, pair % n_nodes
    va, vb = gw * n_nodes + ga, gw * n_nodes + gb  # vertices (window, node)
    size = n_win * n_nodes
    _, lab = weak_components(size, va, vb)
    linked = lab == np.repeat(lab[np.arange(n_win) * n_nodes + ref], n_nodes)
    unknown = linked.copy()
    unknown[np.arange(n_win) * n_nodes + ref] = False
    col = np.full(size, -1)
    col[unknown] = np.arange(int(unknown.sum()))
    ok = linked[va]
    r = np.arange(int(ok.sum()))
    rows, cols, vals = [], [], []
    for v, s in ((vb[ok], 1.0), (va[ok], -1.0)):
        m = col[v] >= 0
        rows.append(r[m])
        cols.append(col[v][m])
        vals.append(np.full(int(m.sum()), s))
    if not unknown.any():
        return out
    mat = from_triplets(np.concatenate(vals), np.concatenate(rows), np.concatenate(cols),
                        (r.size, int(unknown.sum())))
    flat = out.reshape(-1)
    flat[unknown] = spsolve((mat.T @ mat).converted("csc"), mat.T @ alpha[ok])
    return out


def _curve_width(pair: np.ndarray, span: float, o: FitOptions, hz: float) -> float:
    """Window of the node curves: ``curve_points`` points of the median directed node pair,
    at most ``1 / curve_windows`` of the run, within ``curve_window_s`` (shorter than its
    least on a run shorter than ``curve_windows`` of it: ``1 / curve_windows`` of the run,
    so that a run of seconds has windows enough to show a rate change); but never fewer
    than ``curve_min_points`` points (sparse messages: a window's offset needs several
    exchanges)."""
    counts = np.unique(pair, return_counts=True)[1]
    per_point = max(span, 1.0) / max(float(np.median(counts)), 1.0)
    most = span / max(o.curve_windows, 1)
    w = min(o.curve_points * per_point, most)
    w = float(np.clip(w, min(o.curve_window_s[0] * hz, most), o.curve_window_s[1] * hz))
    return max(w, min(o.curve_min_points * per_point, span))


def _line(t: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """Least-squares line ``v = b0 + r * t`` (the mean for a single point)."""
    if t.size < 2:
        return float(v.mean()), 0.0
    tm = float(t.mean())
    r = float(np.dot(t - tm, v - v.mean()) / max(np.dot(t - tm, t - tm), 1e-300))
    return float(v.mean()) - r * tm, r


def _noise(v: np.ndarray) -> float:
    """A curve's noise (ticks) from the median absolute deviation of its second differences
    (evenly spaced windows; NaN windows skipped)."""
    d2 = np.diff(v[np.isfinite(v)], 2)
    if not d2.size:
        return 0.0
    return 1.4826 * float(np.median(np.abs(d2 - np.median(d2)))) / np.sqrt(6.0)


def _piece_costs(t: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Squared residuals of the least-squares line over windows s..e-1, for every s < e."""
    cs = [np.r_[0.0, np.cumsum(x)] for x in (np.ones_like(t), t, v, t * t, t * v, v * v)]
    n0, st, sv, stt, stv, svv = (c[None, :] - c[:, None] for c in cs)
    with np.errstate(divide="ignore", invalid="ignore"):
        vt = stt - st * st / n0
        cov = stv - st * sv / n0
        out = svv - sv * sv / n0 - np.where(vt > 0, cov * cov / vt, 0.0)
    out[~(n0 >= 2)] = np.inf
    return np.maximum(out, 0.0)


def node_knots(bends: np.ndarray, lo_r: float, hi_r: float, longest: float,
           shift: float = 0.0) -> np.ndarray:
    """A node's knots (reference ticks): the run's ends, its bends, and enough knots between
    them that no segment is longer than ``longest``; with ``shift`` (a fraction), knots
    every ``longest`` from ``lo_r + shift * longest`` instead, but none within a quarter of
    it of a bend or an end."""
    k = _ends_and_bends(bends, lo_r, hi_r)
    longest = max(longest, 1.0)
    if not np.isfinite(longest):
        return k
    if shift > 0:
        grid = lo_r + (np.arange(int((hi_r - lo_r) / longest) + 1) + shift) * longest
        near = np.abs(grid[:, None] - k[None, :]).min(axis=1) < longest / 4
        return np.unique(np.concatenate((k, grid[~near & (grid < hi_r)])))
    pieces = np.maximum(np.ceil(np.diff(k) / longest), 1).astype(np.int64)
    if (pieces == 1).all():
        return k
    seg = np.repeat(np.arange(k.size - 1), pieces)  # every piece of every span
    j = np.arange(seg.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    return np.concatenate((k[seg] + j * (np.diff(k) / pieces)[seg], k[-1:]))


def _knot_count(bends: np.ndarray, lo_r: float, hi_r: float, longest: float) -> int:
    """``node_knots(bends, lo_r, hi_r, longest).size``, without building them."""
    k = _ends_and_bends(bends, lo_r, hi_r)
    longest = max(longest, 1.0)
    if not np.isfinite(longest):
        return int(k.size)
    pieces = np.maximum(np.ceil(np.diff(k) / longest), 1).astype(np.int64)
    return int(k.size) if (pieces == 1).all() else int(pieces.sum()) + 1


def _ends_and_bends(bends: np.ndarray, lo_r: float, hi_r: float) -> np.ndarray:
    """The run's ends and the bends between them, ascending, once each."""
    if bends.size == 0 and lo_r < hi_r:  # the usual case, without a sort
        return np.array([lo_r, hi_r], dtype=np.float64)
    inner = bends[(bends > lo_r) & (bends < hi_r)].astype(np.float64, copy=False)
    return np.unique(np.concatenate(([lo_r], inner, [hi_r])))


def prior_offsets(centers: np.ndarray, v: np.ndarray, kr: np.ndarray, width: float) -> np.ndarray:
    """A node's offsets at its knots ``kr`` fitted to its curve by least squares (windows
    holding a knot left out): the map whose slacks pick the first rows of the program."""
    ok = np.isfinite(v)
    for k in kr[1:-1]:
        ok &= np.abs(centers - k) >= width / 2
    return _fit_knots(centers[ok], v[ok], kr)


def _fit_knots(x: np.ndarray, y: np.ndarray, kr: np.ndarray) -> np.ndarray:
    """Values at knots ``kr`` of the least-squares piecewise-linear fit to (x, y), with a
    light pull towards straight lines where no point pins a knot."""
    return _fit_basis(_hat_basis(x, kr), y, kr.size)


def _fit_basis(h: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """``_fit_knots`` from the hat functions ``h`` of its points (one row each, k knots)."""
    try:
        return np.linalg.solve(*_normal_equations(h, y, k))
    except np.linalg.LinAlgError:  # knots no point pins beyond the pull: the minimum norm
        d = _pulls(k)[0]
        lhs = np.r_[h, 1e-3 * d, 1e-9 * np.eye(k)]
        return np.linalg.lstsq(lhs, np.r_[y, np.zeros(d.shape[0] + k)], rcond=None)[0]


def _normal_equations(h: np.ndarray, y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``_fit_basis``'s normal equations (lhs, rhs) for hat functions ``h`` of k knots."""
    _, bend_pull, ridge = _pulls(k)
    return h.T @ h + bend_pull + ridge, h.T @ y


@functools.lru_cache(maxsize=64)
def _pulls(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For k knots: the second differences ``d``, the light pull towards straight lines
    ``1e-6 d'd`` and the ridge ``1e-18 I`` of ``_fit_basis`` (the cross-validation fits
    thousands of pieces on a few knot counts; read only)."""
    d = np.zeros((max(k - 2, 0), k))
    i = np.arange(k - 2)
    d[i, i], d[i, i + 1], d[i, i + 2] = 1.0, -2.0, 1.0
    out = (d, 1e-6 * (d.T @ d), 1e-18 * np.eye(k))
    for a in out:
        a.flags.writeable = False
    return out


def _hat_basis(x: np.ndarray, kr: np.ndarray) -> np.ndarray:
    """Values at ``x`` of the piecewise-linear hat functions on knots ``kr``."""
    j = np.clip(np.searchsorted(kr, x, side="right") - 1, 0, kr.size - 2)
    lam = (x - kr[j]) / (kr[j + 1] - kr[j])
    h = np.zeros((x.size, kr.size))
    h[np.arange(x.size), j] = 1.0 - lam
    h[np.arange(x.size), j + 1] = lam
    return h
