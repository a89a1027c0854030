"""The node fit's estimate: every node's offset curve to the reference, centred on the
near-fastest messages of symmetric kinds. Messages of one kind (the same communicator and size)
between two nodes are taken to have the same least latency both ways, so per window the
fastest message of each direction leaves the two nodes' offset difference at the middle of
their two delays; a least-squares solve over the node pairs of each window gives every node's
offset (nodes reached through others included), and a smoother across the windows (a
constant, a line, or a penalized piecewise-linear curve, whichever cross-validates best while
simplest) makes the curve. Rounds re-centre on the last round's curves. It keeps no message
ordered (``hard.py`` does) and reads no files."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.linalg import LinAlgError, solveh_banded
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import spsolve

from .points import ORDER_ONLY, FitOptions, by_node

#: smoothing strengths tried (penalty on second differences, window units), smoothest first
_LAMBDAS = tuple(10.0 ** k for k in range(8, -2, -1))


@dataclass
class Curves:
    """Per node: knots (node timebase) and the offset beyond ``x + c`` there (None: the
    reference or a node the estimate does not reach), the model chosen and its expected RMS
    error in ticks under the symmetric-latency assumption (NaN: unknown)."""

    knots: list[np.ndarray | None]
    values: list[np.ndarray | None]
    model: list[str]
    error: np.ndarray
    windows: int = 0
    window_ticks: float = 0.0
    samples: int = 0  # symmetric (pair, kind, window) samples of the last round


def curve_at(knots: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The piecewise-linear curve through (knots, values) at ``x``, extended linearly."""
    x = np.asarray(x, dtype=np.float64)
    if knots.size == 1:
        return np.full(x.shape, float(values[0]))
    j = np.clip(np.searchsorted(knots, x, side="right") - 1, 0, knots.size - 2)
    slope = (values[j + 1] - values[j]) / (knots[j + 1] - knots[j])
    return values[j] + (x - knots[j]) * slope


def offsets_at(curves_knots: list[np.ndarray | None], curves_values: list[np.ndarray | None],
               node: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each entry's curve value (0 where the node has no curve)."""
    out = np.zeros(x.size)
    for n, sel in by_node(node):
        k = curves_knots[n] if 0 <= n < len(curves_knots) else None
        if k is not None:
            out[sel] = curve_at(k, curves_values[n], x[sel])
    return out


def estimate(pts: np.ndarray, n_nodes: int, ref: int, c: np.ndarray, hz: float,
             o: FitOptions) -> Curves:
    """Every node's curve from the symmetric kinds among ``pts`` (POINT_DTYPE; ``c`` the rough
    offsets: reference ~ timebase + c; ``hz`` ticks per second)."""
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    fwd = a == lo
    u = pts["ta"] + c[a]
    kind = pts["kind"]
    kinds, kid = np.unique(kind, return_inverse=True)
    group = (lo * n_nodes + hi) * kinds.size + kid.ravel()
    sym = kind != ORDER_ONLY
    # groups with messages both ways
    d_key = group * 2 + (~fwd)
    present = np.unique(d_key[sym])
    both = np.intersect1d(present[present % 2 == 0] // 2, present[present % 2 == 1] // 2)
    keep = sym & np.isin(group, both)
    curves = Curves([None] * n_nodes, [None] * n_nodes, [""] * n_nodes,
                    np.full(n_nodes, np.nan))
    if not keep.any():
        return curves
    a, b, lo, hi, fwd, u, group = (a[keep], b[keep], lo[keep], hi[keep], fwd[keep], u[keep],
                                   group[keep])
    ta, tb = pts["ta"][keep], pts["tb"][keep]
    u0, u1 = float(u.min()), float(u.max())
    span = max(u1 - u0, 1.0)
    n_target = max(1, int(np.ceil(span / _window_width(group * 2 + (~fwd), u, span, o))))
    # coarse to fine: few long windows first (their fastest messages are never all late, and
    # the rate they give lets the finer windows' fastest messages be told from late ones)
    schedule = [k for k in (4 ** np.arange(1, 12)).tolist() if k < n_target] + [n_target] * 2
    knots: list[np.ndarray | None] = [None] * n_nodes
    values: list[np.ndarray | None] = [None] * n_nodes
    reached = np.zeros(n_nodes, dtype=bool)
    late_ticks = o.outlier_us * 1e-6 * hz
    for n_win in schedule:
        width = span / n_win
        centers = u0 + (np.arange(n_win) + 0.5) * width
        win = np.clip(((u - u0) // width).astype(np.int64), 0, n_win - 1)
        key = (group * n_win + win) * 2 + (~fwd)
        r = (tb + c[b] + offsets_at(knots, values, b, tb)) - (
            ta + c[a] + offsets_at(knots, values, a, ta))
        order = np.lexsort((r, key))
        ks, rs = key[order], r[order]
        first = np.r_[True, ks[1:] != ks[:-1]]
        ks, rs, at = ks[first], rs[first], order[first]  # per (group, window, direction)
        # the coarse windows hold many messages each way; once the map is near, a window
        # whose fastest message one way is far behind its neighbours' came late
        fast = (_near_fastest(ks, rs, n_win, late_ticks) if n_win == n_target
                else np.ones(ks.size, dtype=bool))
        pair = np.flatnonzero((ks[:-1] % 2 == 0) & (ks[1:] == ks[:-1] + 1) & fast[:-1]
                              & fast[1:])
        gw = ks[pair] // 2
        delta = 0.5 * (rs[pair] - rs[pair + 1])  # error of (hi - lo) under the curves
        e, linked = _window_offsets(gw % n_win, lo[at[pair]], hi[at[pair]], delta, n_win,
                                    n_nodes, ref)
        curves.samples = int(gw.size)
        for n in range(n_nodes):
            if n == ref or not linked[:, n].any():
                continue
            reached[n] = True
            x = centers - c[n]
            cur = (curve_at(knots[n], values[n], x) if knots[n] is not None
                   else np.zeros(n_win))
            y = cur - np.where(linked[:, n], e[:, n], 0.0)
            knots[n] = x
            values[n], curves.model[n], curves.error[n] = smooth(
                y, linked[:, n].astype(float), o, late_ticks)
    curves.windows, curves.window_ticks = schedule[-1], span / schedule[-1]
    for n in range(n_nodes):
        if not reached[n]:
            knots[n] = values[n] = None
    curves.knots, curves.values = knots, values
    return curves


def _near_fastest(ks: np.ndarray, rs: np.ndarray, n_win: int, late: float,
                  half: int = 2) -> np.ndarray:
    """Per (group, window, direction) fastest delay ``rs`` (keys ``ks`` ascending): whether
    it is within ``late`` of the fastest of the same group and direction over the ``half``
    windows on either side (else every message of that window and direction came late)."""
    gd = (ks // 2 // n_win) * 2 + ks % 2
    w = (ks // 2) % n_win
    ugd, inv = np.unique(gd, return_inverse=True)
    grid = np.full((ugd.size, n_win + 2 * half), np.inf)
    grid[inv, w + half] = rs
    lows = np.lib.stride_tricks.sliding_window_view(grid, 2 * half + 1, axis=1).min(axis=2)
    return rs <= lows[inv, w] + late


def _both_ways(kind: np.ndarray, lo: np.ndarray, hi: np.ndarray, fwd: np.ndarray,
               n_nodes: int) -> np.ndarray:
    """Per point: its node pair has messages of its kind both ways."""
    key = ((lo * n_nodes + hi) * 2 + fwd).astype(np.int64)
    kinds, kid = np.unique(kind, return_inverse=True)
    full = key * kinds.size + kid.ravel()
    seen = np.unique(full)
    other = ((lo * n_nodes + hi) * 2 + ~fwd).astype(np.int64) * kinds.size + kid.ravel()
    return (kind != ORDER_ONLY) & np.isin(other, seen)


def _window_width(d_key: np.ndarray, u: np.ndarray, span: float, o: FitOptions) -> float:
    """Windows hold about ``window_messages`` messages per direction of a kind (the median
    over the directions), and are at most ``max_windows``."""
    order = np.lexsort((u, d_key))
    k, t = d_key[order], u[order]
    start = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    end = np.r_[start[1:], k.size]
    count = end - start
    many = count > 1
    if not many.any():
        return span
    period = (t[end[many] - 1] - t[start[many]]) / (count[many] - 1)
    w = o.window_messages * float(np.median(period))
    return float(min(max(w, span / max(o.max_windows, 1), 1.0), span))


def _window_offsets(w: np.ndarray, lo: np.ndarray, hi: np.ndarray, delta: np.ndarray,
                    n_win: int, n_nodes: int, ref: int) -> tuple[np.ndarray, np.ndarray]:
    """Per window, least squares over its samples ``E[w, hi] - E[w, lo] = delta`` with the
    reference at 0. Returns (E [window, node], linked [window, node]: the node has a path of
    samples to the reference in that window)."""
    size = n_win * n_nodes
    va, vb = w * n_nodes + lo, w * n_nodes + hi
    g = sparse.coo_matrix((np.ones(w.size), (va, vb)), shape=(size, size)).tocsr()
    _, lab = connected_components(g, directed=False)
    refs = np.arange(n_win) * n_nodes + ref
    linked = (lab == np.repeat(lab[refs], n_nodes)).reshape(n_win, n_nodes)
    e = np.zeros((n_win, n_nodes))
    unknown = linked.ravel().copy()
    unknown[refs] = False
    if not unknown.any():
        linked[:, ref] = True
        return e, linked
    col = np.full(size, -1)
    col[unknown] = np.arange(int(unknown.sum()))
    ok = linked.ravel()[va]
    ca, cb, d = col[va[ok]], col[vb[ok]], delta[ok]
    rows = np.arange(d.size)
    m = [(rows[cb >= 0], cb[cb >= 0], 1.0), (rows[ca >= 0], ca[ca >= 0], -1.0)]
    mat = sparse.csr_matrix((np.concatenate([np.full(r.size, s) for r, _, s in m]),
                             (np.concatenate([r for r, _, _ in m]),
                              np.concatenate([cc for _, cc, _ in m]))),
                            shape=(d.size, int(unknown.sum())))
    normal = (mat.T @ mat).tocsc()
    sol = np.atleast_1d(spsolve(normal, mat.T @ d))
    flat = e.ravel()
    flat[unknown] = sol
    return flat.reshape(n_win, n_nodes), linked


def smooth(y: np.ndarray, w: np.ndarray, o: FitOptions, outlier: float = np.inf
           ) -> tuple[np.ndarray, str, float]:
    """A node's curve over the windows from its samples ``y`` (weights ``w``, 0 where none):
    samples further than ``outlier`` ticks (or 8 robust deviations, whichever is more) from
    the running median of their neighbours set aside (a window whose fastest messages one way
    were all received late), then the simplest of a constant, a line and penalized curves
    (second differences, smoothest first) whose cross-validated error is within
    ``simpler_within`` of the best, refitted once with robust weights. Returns (values,
    model, expected RMS error in ticks)."""
    n = y.size
    w = w * _inliers(y, w, outlier)
    ok = np.flatnonzero(w > 0)
    if ok.size == 0:
        return np.zeros(n), "none", np.nan
    cands: list[tuple[str, float]] = [("constant", 0.0)]
    if ok.size >= 3:
        cands.append(("line", 0.0))
    if ok.size >= 2 * max(o.folds, 2) and n >= 4:
        cands += [("smooth", lam) for lam in _LAMBDAS]
    cands = [cd for cd in cands if cd[0] in o.models] or [("constant", 0.0)]
    if len(cands) > 1:
        folds = max(2, min(o.folds, ok.size))
        fold = np.full(n, -1)
        fold[ok] = np.arange(ok.size) % folds
        scores = []
        for model, lam in cands:
            err = 0.0
            for f in range(folds):
                wt = np.where(fold == f, 0.0, w)
                s = _fit(model, lam, y, wt)
                test = fold == f
                err += float(np.sum(w[test] * (y[test] - s[test]) ** 2))
            scores.append(err)
        best = min(scores)
        pick = next(i for i, sc in enumerate(scores) if sc <= o.simpler_within * best + 1e-9)
    else:
        pick = 0
    model, lam = cands[pick]
    s = _fit(model, lam, y, w)
    res = (y - s)[ok]
    scale = 1.4826 * float(np.median(np.abs(res)))
    if scale > 0 and ok.size > 3:
        robust = np.clip(1.0 - (np.abs(y - s) / (4.685 * scale)) ** 2, 0.0, None) ** 2
        w2 = w * robust
        if np.count_nonzero(w2) >= 2:
            s = _fit(model, lam, y, w2)
            w = w2
    df = _dof(model, lam, w)
    resid = float(np.sum(w * (y - s) ** 2))
    dof_left = float(np.sum(w > 0)) - df
    sigma = np.sqrt(resid / dof_left) if dof_left > 0 else np.nan
    error = float(sigma * np.sqrt(df / max(float(np.sum(w > 0)), 1.0)))
    return s, model, error


def _inliers(y: np.ndarray, w: np.ndarray, outlier: float, half: int = 3) -> np.ndarray:
    """1 for the samples near the running median of their weighted neighbours, else 0."""
    ok = np.flatnonzero(w > 0)
    keep = np.ones(y.size)
    if ok.size < 2 * half + 2:
        return keep
    v = y[ok]
    pad = np.r_[np.full(half, v[0]), v, np.full(half, v[-1])]
    win = np.lib.stride_tricks.sliding_window_view(pad, 2 * half + 1)
    med = np.median(win, axis=1)
    dev = np.abs(v - med)
    scale = 1.4826 * float(np.median(dev))
    keep[ok[dev > max(8.0 * scale, outlier)]] = 0.0
    return keep


def _fit(model: str, lam: float, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    n = y.size
    t = np.arange(n, dtype=np.float64)
    sw = float(w.sum())
    if sw <= 0:
        return np.zeros(n)
    mean = float(np.sum(w * y) / sw)
    if model == "constant":
        return np.full(n, mean)
    tm = float(np.sum(w * t) / sw)
    var = float(np.sum(w * (t - tm) ** 2))
    if model == "line" or var <= 0:
        if var <= 0:
            return np.full(n, mean)
        slope = float(np.sum(w * (t - tm) * (y - mean)) / var)
        return mean + slope * (t - tm)
    ab = _banded(w, lam)
    try:
        return solveh_banded(ab, w * y)
    except (LinAlgError, ValueError):
        return _fit("line", 0.0, y, w)


def _banded(w: np.ndarray, lam: float) -> np.ndarray:
    """``diag(w) + lam * D'D`` (D: second differences) in solveh_banded's upper form."""
    n = w.size
    ones = np.ones(n - 2)
    ab = np.zeros((3, n))
    ab[2] = w + lam * np.convolve(ones, [1.0, 4.0, 1.0])
    ab[1, 1:] = lam * np.convolve(ones, [-2.0, -2.0])
    ab[0, 2:] = lam * ones
    ab[2] += 1e-9 * lam  # a curve no window pins stays defined
    return ab


def _dof(model: str, lam: float, w: np.ndarray, probes: int = 8) -> float:
    """Degrees of freedom of the fit (trace of its hat matrix; Hutchinson's estimate for
    the penalized curves)."""
    if model == "constant":
        return 1.0
    if model == "line":
        return 2.0
    ab = _banded(w, lam)
    rng = np.random.default_rng(0)
    v = rng.choice([-1.0, 1.0], size=(w.size, probes))
    try:
        hv = solveh_banded(ab, w[:, None] * v)
    except (LinAlgError, ValueError):
        return 2.0
    return float(np.clip(np.mean(np.sum(v * hv, axis=0)), 1.0, float(np.sum(w > 0))))
