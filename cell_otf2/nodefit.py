"""Fit every node's timebase to the reference node's from the MPI messages between nodes.

Each message point is a happened-before pair between two nodes: ``before`` read node a's
timebase ``ta``, ``after`` read node b's ``tb``, so ``f_a(ta) <= f_b(tb)`` for the true maps
``f`` (node timebase -> reference ticks). A node's model is continuous and piecewise linear in
its own timebase (``offset + rate * timebase`` on each segment), with knots only where its rate
bends; the reference node (the one hosting rank 0) is the identity. Steps:

- **Reduction** (``_undominated``): a pair is implied by another of the same node pair sent no
  earlier and received no later (every collective instance keeps one pair per node pair).
- **Node curves** (``_edge_lines``, ``_node_curves``): per node pair and window (about
  ``curve_points`` points per direction, within ``curve_window_s`` and 1/``curve_windows``
  of the run, but ``curve_min_points`` at least), the line through the band between the
  pair's two directions that keeps the smallest slack largest (its rate by golden-section
  search, vectorized over all windows); a window is dropped unless both directions have
  points in both of its halves (else the rate is not pinned and the centre's offset can be
  off by milliseconds); per window, least squares over the node pairs gives every node's
  offset to the reference at the window's centre (NaN where a node is not linked to the
  reference that window). Then ``refine`` times (``_refined_curves``) the same with every
  rate held at the last model's: per window only the band's centre, from the smallest
  slacks each way, so a window's offset is as good as its tightest messages.
- **Model** (``_choose_model``): per node, straight pieces between bends and knots every h
  besides, chosen by cross-validation on its curve. Bends (``_bend_knots``): the curve's
  segmentation into straight pieces (one window left out between neighbours: it may
  straddle the bend) that minimizes squared residuals plus a cost per bend (25 times the
  curve's noise squared, at least ``bend_us`` squared), by dynamic programming; a bend where
  the lines of two neighbouring pieces meet. Candidates: with those bends or none, h = inf
  (knots at the bends only) or the run cut into 2, 3, 4, 6, ... pieces. Each candidate is
  run on four fifths of the windows (the bends searched again) and scored by the median
  squared error of its least-squares pieces on the fifth left out, over five interleaved
  fifths; the choice is the one with the fewest knots whose score is within ``cv_floor_us``
  squared of the best (or below it). So a node gets a straight line unless its messages
  show a bend or a curve beyond what the fit resolves, and knots as dense as its messages
  can pin: linear clocks as good as one line, wandering clocks followed.
- **Knots** (``_knots``): the bends, and knots every h between them (and at least every
  ``max_segment_s``, default never). A knot anywhere but at a bend spreads it and costs
  accuracy around it; knots every h model a smooth curve, so the fit is the mean of
  ``spins`` fits whose grids are shifted by h / ``spins`` (each keeps every slack at least
  its smallest, so does the mean; it follows the curve between knots and averages the
  noise of knots pinned by few messages), unless the shifted grid predicts the curve
  ``spin_slack`` times worse (the knots sit on bends). The knots are fixed before the
  program: no refinement rounds.
- **Program** (``_Program``, scipy's HiGHS): maximize the sum over every node and window of
  ``t_window_s`` (1/``windows`` of a shorter run) of its smallest slack, plus ``edge_weight``
  times the sum over every node pair and window of ``edge_window_s`` (a tenth of a shorter
  run) of the pair's smallest slack, rates within ``1 +- max_ppm``.
  The node terms follow the tightest messages whatever their direction (robust to pairs whose
  two directions have different fastest latencies, such as collectives); the pair terms pin
  what the node terms leave free (a ring of one-way messages can tilt as a whole, closed only
  by collectives that never become the tightest). Within one cell (a window of a and one of b,
  both maps linear there), a pair's slack is linear in its point, so only the lower convex
  hull of the cell's points can bind, and only vertices whose supporting slopes meet the rate
  limits (``_hull``): exact and vectorized.
- **Row generation**: the first solve holds, per column and side, the rows whose slack under
  the curves' maps (``_prior``: least squares with the knots) is within ``start_us`` of the
  column's smallest; it adds every row the solution violates by more than a tick (and those
  within 2 ticks) and solves again until none is: typically a single solve.
- **Bound** (``_bounds``): per window, with the fitted maps, a node may move by no more than
  the shortest path of fitted slacks to and from the reference (a message's slack is never
  negative in truth); ``bound`` is the largest such shift over the run, in reference ticks.
  It takes the fitted rates as right within a window; a node never bounded from both sides
  gets ``None``.

Cost: the curves are a few dozen vectorized passes over the points; the model choice a few
dozen small least-squares fits per node and round (fewest knots first, none once one is
good enough); knots every h cost ``spins`` programs. HiGHS's interior-point
solver costs grow with the columns coupled across nodes far more than with the rows, so the
windows (and the longest segment) grow when nodes x windows would pass ``max_windows``: a
256-node run with a million messages has about 5000 columns and fits in about 25 s of CPU
(``bench/nodes.py``; a third of it choosing the models).

Baselines for the benchmark: ``method="constant"`` (one offset per node, rate 1, one window:
the published algorithm's model) and ``fit_linear_interpolation`` (offsets measured over the
first and the last second of messages, joined linearly, as Score-P and VampirTrace do).

Nodes without a path of messages to and from the reference are not fitted (``None``); callers
keep their start-time map. It reads no files and changes no record. It does not check that
the points are real messages (``match.py`` does) nor that clocks are piecewise linear: a
curve too noisy to show its bends gets a line. Should HiGHS fail, the fit is made again with
knots at the bends only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components, dijkstra

from .decode import Decoded
from .match import Matches
from .model import DomainKind
from .timing import NodeMap, start_time_maps

_LP_METHOD = "highs-ipm"
_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0
#: one happened-before pair between nodes: record ``before`` on node a at raw timebase ``ta``,
#: record ``after`` on node b at ``tb`` (record ids count distinct messages per node)
POINT_DTYPE = np.dtype([("a", "<i4"), ("b", "<i4"), ("ta", "<f8"), ("tb", "<f8"),
                        ("before", "<i8"), ("after", "<i8")])


@dataclass(frozen=True)
class FitOptions:
    curve_points: int = 512  # node curves: windows hold about this many points per direction
    curve_window_s: tuple[float, float] = (0.5, 10.0)  # ... and are this long at least/most
    curve_windows: int = 64  # ... and are at most 1/64 of the run
    curve_min_points: int = 8  # ... but hold this many points per direction at least
    bend_us: float = 1.5  # a straight piece of a curve stays within this (or 6x its noise)
    min_windows: int = 4  # curve windows per straight piece, at least
    t_window_s: float = 5.0  # windows of the node terms of the objective ...
    windows: int = 30  # ... or 1/30 of the run if shorter
    edge_window_s: float = 60.0  # windows of the node-pair terms (<= run / 10, in t windows)
    edge_weight: float = 0.1  # weight of the node-pair terms
    max_windows: int = 1024  # node windows at most (windows and segments grow to keep it)
    max_ppm: float = 200.0  # rates stay within 1 +- max_ppm (the reduction relies on it)
    start_us: float = 2.0  # first rows: prior slack within this of its window's smallest
    max_segment_s: float = np.inf  # knots at least this often (default: only at bends)
    refine: int = 1  # rounds of node curves with the rates of the last round's maps
    min_spacing: float = 2.0  # knot spacings tried: down to this many curve windows
    spins: int = 3  # knots every h: the mean of this many fits, knots shifted by h / spins
    spin_slack: float = 4.0  # ... if the shifted knots' score is within this factor
    folds: int = 5  # model choice: cross-validation over this many interleaved window sets
    cv_floor_us: float = 0.3  # ... the fewest knots whose median error is within this^2
    window_s: float = 0.0  # windows of the bound; 0: t_window_s


@dataclass
class PiecewiseMap(NodeMap):
    """A continuous piecewise-linear map; ``offset``/``rate`` are those at the run's midpoint."""

    knots_node: np.ndarray = field(default_factory=lambda: np.zeros(0))
    knots_ref: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def to_reference(self, x: np.ndarray | float) -> np.ndarray:
        """Reference ticks of node timebase ``x`` (the end segments extend beyond the knots)."""
        x = np.asarray(x, dtype=np.float64)
        kn, kr = self.knots_node, self.knots_ref
        k = np.clip(np.searchsorted(kn, x, side="right") - 1, 0, kn.size - 2)
        slope = (kr[k + 1] - kr[k]) / (kn[k + 1] - kn[k])
        return kr[k] + (x - kn[k]) * slope


@dataclass
class NodeFit:
    maps: list[NodeMap | None]  # per node; None: not fitted (no messages both ways)
    min_slack: float = np.inf  # smallest fitted slack over all points, reference ticks
    reversed: int = 0  # points whose fitted slack is negative
    points: int = 0
    pool: int = 0  # points that can bind (hull vertices per cell)
    rows: int = 0  # rows of the last program solved
    solves: int = 0  # programs solved (row generation rounds)
    segments: list[int] = field(default_factory=list)  # per node: straight pieces
    knots: list[np.ndarray | None] = field(default_factory=list)  # per node, reference ticks
    seconds: dict[str, float] = field(default_factory=dict)


def map_to_reference(m: NodeMap, x: np.ndarray | float) -> np.ndarray:
    """Reference ticks of node timebase ``x`` under any node map."""
    return m.to_reference(np.asarray(x, dtype=np.float64))


# --------------------------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------------------------


def points_from_trace(dec: Decoded, matches: Matches) -> np.ndarray:
    """The cross-node pairs of ``matches`` as POINT_DTYPE rows (records with a node clock)."""
    pairs = matches.node_pairs
    rec = dec.records
    bef, aft = pairs["before"], pairs["after"]
    da, db = rec["domain"][bef], rec["domain"][aft]
    kinds = dec.domains["kind"]
    ok = (da >= 0) & (db >= 0)
    ok[ok] = (kinds[da[ok]] == DomainKind.NODE) & (kinds[db[ok]] == DomainKind.NODE)
    pts = np.zeros(int(ok.sum()), POINT_DTYPE)
    node = dec.domains["node"]
    pts["a"], pts["b"] = node[da[ok]], node[db[ok]]
    pts["ta"], pts["tb"] = rec["local"][bef[ok]], rec["local"][aft[ok]]
    pts["before"], pts["after"] = bef[ok], aft[ok]
    return pts[pts["a"] != pts["b"]]


def fitted_node_maps(dec: Decoded, matches: Matches,
                     options: FitOptions | None = None) -> list[NodeMap]:
    """The converter's node maps: the fit where the messages reach a node both ways, the
    manifest's start times (``timing.start_time_maps``) for the other nodes."""
    maps = start_time_maps(dec)
    if dec.n_nodes < 2:
        return maps
    try:
        fit = fit_nodes(dec, matches, options)
    except RuntimeError:  # HiGHS found no solution: the report says "start-times"
        return maps
    return [m if m is not None else s for m, s in zip(fit.maps, maps, strict=True)]


def fit_nodes(dec: Decoded, matches: Matches, options: FitOptions | None = None,
              method: str = "fit") -> NodeFit:
    """Fit every node of a decoded trace (reference: the node of rank 0). ``method``: "fit",
    "constant" or "linear" (the two baselines)."""
    man = dec.manifest
    pts = points_from_trace(dec, matches)
    ref = man.node_of_rank(0)
    if method == "linear":
        return fit_linear_interpolation(pts, dec.n_nodes, ref, man.timebase_hz, options)
    return fit_points(pts, dec.n_nodes, ref, man.timebase_hz, options, method)


def fit_points(points: np.ndarray, n_nodes: int, ref: int, hz: float,
               options: FitOptions | None = None, method: str = "fit") -> NodeFit:
    """Fit node maps to message points (POINT_DTYPE, e.g. gathered from several processes);
    ``method`` "fit" (piecewise, knots at bends) or "constant" (one offset per node). Should
    HiGHS fail with the chosen knot spacings, the fit is made again with knots at the bends
    only."""
    o = options or FitOptions()
    try:
        return _fit_points(points, n_nodes, ref, hz, o, method)
    except RuntimeError:
        if method != "fit" or not np.isfinite(o.min_spacing):
            raise
        return _fit_points(points, n_nodes, ref, hz, replace(o, min_spacing=np.inf), method)


def _fit_points(points: np.ndarray, n_nodes: int, ref: int, hz: float, o: FitOptions,
                method: str) -> NodeFit:
    if method == "constant":
        o = replace(o, max_ppm=0.0, edge_weight=0.0, t_window_s=np.inf)
    elif method != "fit":
        raise ValueError(f"unknown node fit method {method!r}")
    secs = {"prepare": 0.0, "curves": 0.0, "reduce": 0.0, "lp": 0.0, "bounds": 0.0}
    t0 = time.perf_counter()
    pts = points[(points["a"] != points["b"]) & (points["a"] >= 0) & (points["b"] >= 0)]
    maps: list[NodeMap | None] = [None] * n_nodes
    maps[ref] = NodeMap(0.0, 1.0, 0.0, "reference")
    fit = NodeFit(maps, points=int(pts.size), segments=[0] * n_nodes, knots=[None] * n_nodes)
    fitted = _strongly_connected(pts, n_nodes, ref)
    pts = pts[fitted[pts["a"]] & fitted[pts["b"]]]
    if pts.size == 0:
        return fit
    every = pts
    pts = pts[_undominated(pts, n_nodes)]
    c = _rough_offsets(pts, n_nodes, ref)
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    lo_r = float(min((pts["ta"] + c[a]).min(), (pts["tb"] + c[b]).min())) - 1.0
    hi_r = float(max((pts["ta"] + c[a]).max(), (pts["tb"] + c[b]).max())) + 1.0
    secs["prepare"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    nodes = [n for n in np.flatnonzero(fitted).tolist() if n != ref]
    bends = {n: np.zeros(0) for n in nodes}
    spacing = {n: np.inf for n in nodes}
    prior: list[NodeMap | None] = [None] * n_nodes
    for n in np.flatnonzero(fitted).tolist():
        prior[n] = _midpoint_map(np.array([lo_r, hi_r]) - c[n], np.array([lo_r, hi_r]),
                                 lo_r - c[n], "prior")
    grid, per_edge = _windows(lo_r, hi_r, len(nodes) + 1, o, hz)
    longest = max(o.max_segment_s * hz, float(grid[1] - grid[0]))
    kref: list[np.ndarray | None] = [None] * n_nodes
    for n in np.flatnonzero(fitted).tolist():
        kref[n] = _knots(np.zeros(0), lo_r, hi_r, longest)
    if method == "fit":
        centers, curves = _node_curves(pts, n_nodes, ref, c, hz, o)
        width = float(np.diff(centers[:2])[0]) if centers.size > 1 else np.inf
        for rnd in range(o.refine + 1):
            if rnd:  # the curves again with the rates of the last round's maps
                curves = _refined_curves(pts, n_nodes, ref, c, centers, prior)
            for n in nodes:
                bends[n], spacing[n] = _choose_model(centers, curves[:, n], width, lo_r,
                                                     hi_r, o, hz)
                kref[n] = _knots(bends[n], lo_r, hi_r, min(longest, abs(spacing[n])))
                z = _prior(centers, curves[:, n], kref[n], width)
                prior[n] = _midpoint_map(kref[n] - c[n], kref[n] + z, lo_r - c[n], "prior")
    secs["curves"] = time.perf_counter() - t1
    # knots every h besides the bends: the fit is the mean of ``spins`` fits whose knots are
    # shifted by h / spins (each keeps every slack >= its smallest, so does their mean; the
    # mean follows a curve between knots and averages the noise of knots pinned by few
    # messages)
    spins = max(int(o.spins), 1) if any(h > 0 and np.isfinite(h)
                                        for h in spacing.values()) else 1
    fits: list[list[tuple[np.ndarray, np.ndarray]]] = []
    for spin in range(spins):
        for n in nodes:
            h = spacing[n]
            kref[n] = _knots(bends[n], lo_r, hi_r, min(longest, abs(h)),
                             spin / spins if h > 0 else 0.0)
        t2 = time.perf_counter()
        knots = [None if k is None else k - c[n] for n, k in enumerate(kref)]
        tknots = [None if k is None else grid - c[n] for n, k in enumerate(kref)]
        fine = [None if k is None else np.unique(np.r_[k, tk])
                for k, tk in zip(knots, tknots, strict=True)]
        cell = _cells(a, b, _piece_of(a, pts["ta"], fine), _piece_of(b, pts["tb"], fine),
                      fine)
        y = pts["tb"] - pts["ta"] + (c[b] - c[a])
        pool = pts[_hull(cell, pts["ta"], y, _slope_limit(o.max_ppm))]
        score = _slacks(pool, prior)
        secs["reduce"] += time.perf_counter() - t2
        t3 = time.perf_counter()
        prog = _Program(ref, knots, tknots, per_edge, c, o, hz)
        z = prog.solve(pool, score)
        fit.pool, fit.rows = fit.pool + int(pool.size), max(fit.rows, prog.rows)
        fit.solves += prog.rounds
        fits.append([(knots[n], knots[n] + c[n] + z[prog.zoff[n]: prog.zoff[n] + knots[n].size])
                     if n in bends else (np.zeros(0), np.zeros(0)) for n in range(n_nodes)])
        secs["lp"] += time.perf_counter() - t3
    label = "fit" if method == "fit" else method
    for n in nodes:
        kn = np.unique(np.concatenate([f[n][0] for f in fits]))
        kr = np.mean([_extend(kn, *f[n]) for f in fits], axis=0)
        maps[n] = _midpoint_map(kn, kr, 0.5 * (lo_r + hi_r) - c[n], label)
        fit.segments[n] = kn.size - 1
        kref[n] = kn + c[n]
    fit.knots = kref
    t4 = time.perf_counter()
    slack = _slacks(pts, maps)
    fit.min_slack = float(slack.min())
    # a dominated pair's slack is at least its dominator's (maps increase): count over all
    # pairs only when some undominated one is reversed
    fit.reversed = 0 if fit.min_slack >= 0 else int((_slacks(every, maps) < 0).sum())
    w = o.window_s * hz if o.window_s > 0 else float(grid[1] - grid[0])
    bounds = _bounds(pts, slack, n_nodes, ref, c, w)
    for n in nodes:
        m = maps[n]
        if m is not None:
            m.bound = None if not np.isfinite(bounds[n]) else float(bounds[n])
    secs["bounds"] = time.perf_counter() - t4
    fit.seconds = secs
    return fit


def fit_linear_interpolation(points: np.ndarray, n_nodes: int, ref: int, hz: float,
                             options: FitOptions | None = None,
                             measure_s: float = 1.0) -> NodeFit:
    """Score-P's model: constant-offset fits over the first and the last ``measure_s`` seconds
    of messages, joined by a straight line per node (the baseline, not the converter's fit)."""
    o = options or FitOptions()
    pts = points[(points["a"] != points["b"]) & (points["a"] >= 0) & (points["b"] >= 0)]
    maps: list[NodeMap | None] = [None] * n_nodes
    maps[ref] = NodeMap(0.0, 1.0, 0.0, "reference")
    fit = NodeFit(maps, points=int(pts.size))
    fitted = _strongly_connected(pts, n_nodes, ref)
    pts = pts[fitted[pts["a"]] & fitted[pts["b"]]]
    if pts.size == 0:
        return fit
    c = _rough_offsets(pts, n_nodes, ref)
    tr = pts["ta"] + c[pts["a"]]
    w = measure_s * hz
    first = fit_points(pts[tr <= tr.min() + w], n_nodes, ref, hz, o, "constant")
    last = fit_points(pts[tr >= tr.max() - w], n_nodes, ref, hz, o, "constant")
    ts, te = tr.min() + w / 2, tr.max() - w / 2
    for n in range(n_nodes):
        ms, me = first.maps[n], last.maps[n]
        if n == ref or ms is None or me is None:
            continue
        xs, xe = ts - c[n], max(te - c[n], ts - c[n] + 1.0)
        kn = np.array([xs, xe])
        kr = np.array([float(map_to_reference(ms, xs)), float(map_to_reference(me, xe))])
        maps[n] = _midpoint_map(kn, kr, 0.5 * (xs + xe), "linear-interpolation")
    slack = _slacks(pts, maps)
    fit.min_slack = float(slack.min())
    fit.reversed = int((slack < 0).sum())
    return fit


# --------------------------------------------------------------------------------------------
# node curves and knots
# --------------------------------------------------------------------------------------------


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


def _node_curves(pts: np.ndarray, n_nodes: int, ref: int, c: np.ndarray, hz: float,
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
    g = sparse.coo_matrix((np.ones(gk.size), (va, vb)), shape=(size, size)).tocsr()
    _, lab = connected_components(g, directed=False)
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
    mat = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                            shape=(r.size, int(unknown.sum())))
    flat = out.reshape(-1)
    from scipy.sparse.linalg import spsolve  # imported by the fit only: see ``solve``

    flat[unknown] = spsolve((mat.T @ mat).tocsc(), mat.T @ alpha[ok])
    return out


def _refined_curves(pts: np.ndarray, n_nodes: int, ref: int, c: np.ndarray,
                    centers: np.ndarray, maps: list[NodeMap | None]) -> np.ndarray:
    """The node curves at ``centers`` again, with every node's rate held at its map's: the
    maps' own curve plus, per window, the centre of the band that the smallest slacks under
    the maps leave each node pair in its two directions (least squares over the pairs). No
    rate is searched per window, so a window's offset is as good as its tightest messages in
    each direction: the curve of sparse messages, and its noise, are the messages' own."""
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    slack = _slacks(pts, maps)
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


def _curve_width(pair: np.ndarray, span: float, o: FitOptions, hz: float) -> float:
    """Window of the node curves: ``curve_points`` points of the median directed node pair,
    at most ``1 / curve_windows`` of the run, within ``curve_window_s``; but never fewer
    than ``curve_min_points`` points (sparse messages: a window's offset needs several
    exchanges)."""
    counts = np.unique(pair, return_counts=True)[1]
    per_point = max(span, 1.0) / max(float(np.median(counts)), 1.0)
    w = min(o.curve_points * per_point, span / max(o.curve_windows, 1))
    w = float(np.clip(w, o.curve_window_s[0] * hz, o.curve_window_s[1] * hz))
    return max(w, min(o.curve_min_points * per_point, span))


def _line(t: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """Least-squares line ``v = b0 + r * t`` (the mean for a single point)."""
    if t.size < 2:
        return float(v.mean()), 0.0
    tm = float(t.mean())
    r = float(np.dot(t - tm, v - v.mean()) / max(np.dot(t - tm, t - tm), 1e-300))
    return float(v.mean()) - r * tm, r


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
    for e in range(2 * m + 1, n + 1):
        g = np.arange(m, e - m)  # left-out window g: pieces [.., g) and [g + 1, e)
        c = best[g] + penalty + sse[g + 1, e]
        k = int(np.argmin(c))
        if c[k] < best[e]:
            best[e], cut[e] = c[k], g[k]
    gaps, e = [], n
    while cut[e] >= 0:
        gaps.append(int(cut[e]))
        e = int(cut[e])
    gaps.sort()
    bounds = [0, *[x for g in gaps for x in (g, g + 1)], n]
    lines = [_line(t[a:b], v[a:b]) for a, b in zip(bounds[::2], bounds[1::2], strict=True)]
    knots = []
    for g, (b1, r1), (b2, r2) in zip(gaps, lines[:-1], lines[1:], strict=True):
        x = (b2 - b1) / (r1 - r2) if r1 != r2 else t[g]
        knots.append(min(max(x, t[g] - 1.0), t[g] + 1.0))
    return np.asarray(knots) * width + centers[0]


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


def _knots(bends: np.ndarray, lo_r: float, hi_r: float, longest: float,
           shift: float = 0.0) -> np.ndarray:
    """A node's knots (reference ticks): the run's ends, its bends, and enough knots between
    them that no segment is longer than ``longest``; with ``shift`` (a fraction), knots
    every ``longest`` from ``lo_r + shift * longest`` instead, but none within a quarter of
    it of a bend or an end."""
    k = np.unique(np.r_[lo_r, bends[(bends > lo_r) & (bends < hi_r)], hi_r])
    longest = max(longest, 1.0)
    if not np.isfinite(longest):
        return k
    if shift > 0:
        grid = lo_r + (np.arange(int((hi_r - lo_r) / longest) + 1) + shift) * longest
        near = np.abs(grid[:, None] - k[None, :]).min(axis=1) < longest / 4
        return np.unique(np.r_[k, grid[~near & (grid < hi_r)]])
    pieces = np.maximum(np.ceil(np.diff(k) / longest), 1).astype(np.int64)
    if (pieces == 1).all():
        return k
    seg = np.repeat(np.arange(k.size - 1), pieces)  # every piece of every span
    j = np.arange(seg.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    return np.r_[k[seg] + j * (np.diff(k) / pieces)[seg], k[-1]]


def _extend(x: np.ndarray, kn: np.ndarray, kr: np.ndarray) -> np.ndarray:
    """The piecewise-linear map through (kn, kr) at ``x``, extended linearly beyond both
    ends."""
    j = np.clip(np.searchsorted(kn, x, side="right") - 1, 0, kn.size - 2)
    return kr[j] + (x - kn[j]) * (kr[j + 1] - kr[j]) / (kn[j + 1] - kn[j])


def _spacing_candidates(span: float, width: float, o: FitOptions) -> list[float]:
    """Knot spacings to try: the run in 1 (inf: no knots but bends), 2, 3, 4, 6, 8, ...
    pieces, down to ``min_spacing`` curve windows."""
    if not (np.isfinite(width) and np.isfinite(o.min_spacing)):
        return [np.inf]
    most = int(span / (max(o.min_spacing, 1.0) * width))
    ks = np.unique(np.round(np.geomspace(1, max(most, 1), 12)).astype(int))
    return [np.inf if k == 1 else span / k for k in ks.tolist()]


def _choose_model(centers: np.ndarray, v: np.ndarray, width: float, lo_r: float, hi_r: float,
                  o: FitOptions, hz: float) -> tuple[np.ndarray, float]:
    """A node's model, chosen from its curve: (bends, knot spacing h between them). The
    candidates are procedures: straight pieces between the bends of ``_bend_knots`` (or no
    bends), with knots every h besides (or not: h = inf). Each is run on all windows but
    every ``folds``-th and scored on the windows it did not see, over the ``folds``
    interleaved sets (cross-validation: the bends are searched again on each training set,
    so a procedure that chases noise predicts badly). A candidate's score is the median of
    its squared errors (a training set that misses a bend spoils a few windows, not the
    score). The choice is the candidate with the fewest knots whose score is within
    ``cv_floor_us`` squared of the best, or below it (a finer model must predict the curve
    better by more than the fit resolves): a line (no bends, h = inf) unless the messages
    show something it misses. Candidates are scored fewest knots first, and no further once
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
    floor = (o.cv_floor_us * 1e-6 * hz) ** 2

    def score(i: int, h: float, shift: float = 0.0) -> float:
        err = np.zeros(centers.size)
        kr = None if i == 0 else _knots(np.zeros(0), lo_r, hi_r, h, shift)
        for (test, train), fb in zip(sets, fold_bends, strict=True):
            err[test] = _holdout_error(centers, v, train, test, fb if i == 0 else np.zeros(0),
                                       lo_r, hi_r, h, width, shift, kr)
        return float(np.median(err[ok]))

    sets_b = [(0, full), (1, np.zeros(0))] if full.size else [(0, full)]
    cands = sorted((_knots(b, lo_r, hi_r, h).size, i, j) for i, b in sets_b
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


def _holdout_error(centers: np.ndarray, v: np.ndarray, train: np.ndarray, test: np.ndarray,
                   bends: np.ndarray, lo_r: float, hi_r: float, h: float, width: float,
                   shift: float = 0.0, kr: np.ndarray | None = None) -> np.ndarray:
    """Squared errors on ``test`` of the least-squares pieces on knots (``bends``, every h)
    fitted to ``train`` (windows straddling a bend left out of the fit)."""
    if kr is None:
        kr = _knots(bends, lo_r, hi_r, h, shift)
    x, y = centers[train], v[train]
    keep = np.ones(x.size, dtype=bool)
    for k in bends:
        keep &= np.abs(x - k) >= width / 2
    coef = _fit_knots(x[keep], y[keep], kr)
    pred = _hat_basis(centers[test], kr) @ coef
    return (pred - v[test]) ** 2


def _hat_basis(x: np.ndarray, kr: np.ndarray) -> np.ndarray:
    """Values at ``x`` of the piecewise-linear hat functions on knots ``kr``."""
    j = np.clip(np.searchsorted(kr, x, side="right") - 1, 0, kr.size - 2)
    lam = (x - kr[j]) / (kr[j + 1] - kr[j])
    h = np.zeros((x.size, kr.size))
    h[np.arange(x.size), j] = 1.0 - lam
    h[np.arange(x.size), j + 1] = lam
    return h


def _prior(centers: np.ndarray, v: np.ndarray, kr: np.ndarray, width: float) -> np.ndarray:
    """A node's offsets at its knots ``kr`` fitted to its curve by least squares (windows
    holding a knot left out): the map whose slacks pick the first rows of the program."""
    ok = np.isfinite(v)
    for k in kr[1:-1]:
        ok &= np.abs(centers - k) >= width / 2
    return _fit_knots(centers[ok], v[ok], kr)


def _fit_knots(x: np.ndarray, y: np.ndarray, kr: np.ndarray) -> np.ndarray:
    """Values at knots ``kr`` of the least-squares piecewise-linear fit to (x, y), with a
    light pull towards straight lines where no point pins a knot."""
    h = _hat_basis(x, kr)
    k = kr.size
    d = np.zeros((max(k - 2, 0), k))
    i = np.arange(k - 2)
    d[i, i], d[i, i + 1], d[i, i + 2] = 1.0, -2.0, 1.0
    try:
        return np.linalg.solve(h.T @ h + 1e-6 * (d.T @ d) + 1e-18 * np.eye(k), h.T @ y)
    except np.linalg.LinAlgError:  # knots no point pins beyond the pull: the minimum norm
        lhs = np.r_[h, 1e-3 * d, 1e-9 * np.eye(k)]
        return np.linalg.lstsq(lhs, np.r_[y, np.zeros(d.shape[0] + k)], rcond=None)[0]


def _windows(lo_r: float, hi_r: float, n_fitted: int, o: FitOptions,
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


# --------------------------------------------------------------------------------------------
# steps
# --------------------------------------------------------------------------------------------


def _strongly_connected(pts: np.ndarray, n_nodes: int, ref: int) -> np.ndarray:
    """Nodes with a path of messages to and from the reference."""
    g = sparse.coo_matrix((np.ones(pts.size), (pts["a"], pts["b"])),
                          shape=(n_nodes, n_nodes)).tocsr()
    _, lab = connected_components(g, directed=True, connection="strong")
    return lab == lab[ref]


def _rough_offsets(pts: np.ndarray, n_nodes: int, ref: int) -> np.ndarray:
    """c[n] with reference ~ timebase + c[n] (milliseconds good): medians along a BFS tree."""
    lo = np.minimum(pts["a"], pts["b"]).astype(np.int64)
    hi = np.maximum(pts["a"], pts["b"]).astype(np.int64)
    # value of (time on lo) - (time on hi) for each point
    diff = np.where(pts["a"] == lo, pts["ta"] - pts["tb"], pts["tb"] - pts["ta"])
    key = lo * n_nodes + hi
    order = np.lexsort((diff, key))
    key, diff = key[order], diff[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], key.size]
    med = diff[(starts + ends - 1) // 2]
    ukey = key[starts]
    adj: dict[int, list[tuple[int, float]]] = {}
    for k, m in zip(ukey.tolist(), med.tolist(), strict=True):
        a, b = divmod(k, n_nodes)
        # ta + c_a ~ tb + c_b  =>  c_b = c_a + (t_lo - t_hi) for (lo=a, hi=b)
        adj.setdefault(a, []).append((b, m))
        adj.setdefault(b, []).append((a, -m))
    c = np.zeros(n_nodes)
    seen = np.zeros(n_nodes, dtype=bool)
    seen[ref] = True
    queue = [ref]
    while queue:
        a = queue.pop(0)
        for b, m in adj.get(a, []):
            if not seen[b]:
                seen[b] = True
                c[b] = c[a] + m
                queue.append(b)
    return c


def _undominated(pts: np.ndarray, n_nodes: int) -> np.ndarray:
    """Indexes of the points no other point of the same node pair dominates: a later send
    with an earlier or equal receive implies the pair (maps increase), whatever the model."""
    pair = pts["a"].astype(np.int64) * n_nodes + pts["b"]
    order = np.lexsort((pts["tb"], -pts["ta"], -pair))  # pairs descending, ta descending
    pr, tb = pair[order], pts["tb"][order]
    start = np.r_[True, pr[1:] != pr[:-1]]
    lo = np.minimum.reduceat(tb, np.flatnonzero(start))
    rank = np.cumsum(start) - 1
    # per pair: tb - its minimum lies in [0, span]; stacking pairs from the highest offset
    # down makes one running minimum restart at every pair
    v = tb - lo[rank]
    span = float(v.max()) + 1.0
    v = v + (rank.max() - rank) * span
    prev = np.r_[np.inf, np.minimum.accumulate(v)[:-1]]
    prev[start] = np.inf
    return np.sort(order[v < prev])


def _by_node(node: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(node, indexes of its entries) for every node present: one sort, not a mask per node."""
    order = np.argsort(node, kind="stable")
    ns = node[order]
    cut = np.flatnonzero(np.r_[True, ns[1:] != ns[:-1], True])
    return [(int(ns[i]), order[i:j]) for i, j in zip(cut[:-1], cut[1:], strict=True)]


def _piece_of(node: np.ndarray, x: np.ndarray, knots: list[np.ndarray | None]) -> np.ndarray:
    k = np.zeros(node.size, np.int64)
    for n, sel in _by_node(node):
        kn = knots[n]
        if kn is not None:
            k[sel] = np.clip(np.searchsorted(kn, x[sel], side="right") - 1, 0, kn.size - 2)
    return k


def _hull(cell: np.ndarray, x: np.ndarray, y: np.ndarray, smax: float,
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


def _cells(a: np.ndarray, b: np.ndarray, ka: np.ndarray, kb: np.ndarray,
           knots: list[np.ndarray | None]) -> np.ndarray:
    """One int64 key per (segment of a, segment of b)."""
    sizes = np.array([k.size - 1 if k is not None else 1 for k in knots], dtype=np.int64)
    off = np.r_[0, np.cumsum(sizes)]
    return (off[a] + ka) * off[-1] + off[b] + kb


def _slope_limit(max_ppm: float) -> float:
    """Largest |rate_a / rate_b - 1| when both rates lie within 1 +- max_ppm."""
    eps = max_ppm * 1e-6
    return ((1 + eps) / (1 - eps) - 1) * 1.01 + 1e-12 if eps < 1 else np.inf


class _Program:
    """The linear program, solved by row generation.

    Columns: knot deviations z (reference = x + c + Z(x), Z linear between knots; none for the
    reference node), one ``t`` per window of every node, one ``u`` per window of every node
    pair with points in it. Rows: ``Z_a(ta) - Z_b(tb) + t <= tb + c_b - ta - c_a`` for the
    window of each end and the pair's window (the pool: hull vertices per cell), and
    ``|rate - 1| <= max_ppm`` per segment. Maximizes ``sum t + edge_weight * sum u``. It starts
    from the rows of the points with the smallest prior slack per window half of every node
    and per pair window and direction, solves, adds every pool row and rate row the solution
    violates, and repeats: the result solves the whole program.
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
        k = _piece_of(node, x, self.knots)
        lam = np.zeros(x.size)
        for n, sel in _by_node(node):
            if n == self.ref:
                continue
            kn = self.knots[n]
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
        # scipy.optimize (HiGHS) is imported here, not with the module: a conversion of one
        # node, or a parallel converter process other than 0, never fits and saves its
        # import (about 0.2 s and 17 MB)
        from scipy.optimize import linprog

        c, n_nodes = self.c, len(self.knots)
        a, b = pool["a"].astype(np.int64), pool["b"].astype(np.int64)
        ca0, wa0, ca1, wa1 = self._interp(a, pool["ta"])
        cb0, wb0, cb1, wb1 = self._interp(b, pool["tb"])
        wa = _piece_of(a, pool["ta"], self.tknots)
        sides = [self.toff[a] + wa, self.toff[b] + _piece_of(b, pool["tb"], self.tknots)]
        n_u = 0
        if self.o.edge_weight > 0:
            lo = np.minimum(a, b)
            pair = (lo * n_nodes + np.maximum(a, b)) * (wa.max() + 1) + wa // self.per_edge
            upair, inv = np.unique(pair, return_inverse=True)
            n_u = upair.size
            sides.append(self.n_zt + inv.ravel() * 2 + (a == lo))
        d = pool["tb"] + c[b] - pool["ta"] - c[a]
        # per segment: rate rows, added when violated
        seg_lo, seg_dx = [], []
        for n, kn in enumerate(self.knots):
            if kn is not None and n != self.ref:
                seg_lo.append(self.zoff[n] + np.arange(kn.size - 1))
                seg_dx.append(np.diff(kn))
        seg_col = np.concatenate(seg_lo) if seg_lo else np.zeros(0, np.int64)
        seg_len = np.concatenate(seg_dx) if seg_dx else np.zeros(0)
        eps = self.o.max_ppm * 1e-6
        n_cols = self.n_zt + n_u
        cost = np.zeros(n_cols)
        cost[self.n_z:self.n_zt] = -1.0
        cost[self.n_zt:] = -self.o.edge_weight
        bounds = np.empty((n_cols, 2))
        bounds[:, 0], bounds[:, 1] = -np.inf, np.inf
        bounds[self.n_z:, 1] = self.hz * 1.0  # t, u: never unbounded
        active = np.zeros((pool.size, len(sides)), dtype=bool)
        for side, tcol in enumerate(sides):  # per column and side, the smallest prior slacks
            best = np.full(n_cols + 2 * n_u, np.inf)
            np.minimum.at(best, tcol, score)
            active[:, side] = score <= best[tcol] + self.o.start_us * 1e-6 * self.hz
        if n_u:  # u columns were numbered per direction to pick a first row of each
            sides[2] = self.n_zt + (sides[2] - self.n_zt) // 2
        rate_on = np.zeros((seg_col.size, 2), dtype=bool)
        tol, margin = 1.0, 2.0  # ticks: a window's smallest slack 1 tick high is no matter
        for self.rounds in range(1, 101):
            parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
            rhs = []
            row0 = 0
            for side, tcol in enumerate(sides):
                i = np.flatnonzero(active[:, side])
                r = row0 + np.arange(i.size)
                for col, wgt in ((ca0, wa0), (ca1, wa1), (cb0, -wb0), (cb1, -wb1)):
                    ok = col[i] >= 0
                    parts.append((r[ok], col[i][ok], wgt[i][ok]))
                parts.append((r, tcol[i], np.ones(i.size)))
                rhs.append(d[i])
                row0 += i.size
            for side, sign in ((0, 1.0), (1, -1.0)):
                j = np.flatnonzero(rate_on[:, side])
                r = row0 + np.arange(j.size)
                parts.append((r, seg_col[j] + 1, np.full(j.size, sign)))
                parts.append((r, seg_col[j], np.full(j.size, -sign)))
                rhs.append(eps * seg_len[j])
                row0 += j.size
            rr = np.concatenate([p[0] for p in parts])
            cc = np.concatenate([p[1] for p in parts])
            vv = np.concatenate([p[2] for p in parts])
            a_ub = sparse.csr_matrix((vv, (rr, cc)), shape=(row0, n_cols))
            res = linprog(cost, A_ub=a_ub, b_ub=np.concatenate(rhs), bounds=bounds,
                          method=_LP_METHOD)
            if res.x is None or res.status != 0:
                raise RuntimeError(f"node fit: HiGHS found no solution ({res.message})")
            sol = res.x
            self.rows = row0
            zz = np.r_[sol[:self.n_z], 0.0]  # index -1 -> the reference's zero
            slack = d + wb0 * zz[cb0] + wb1 * zz[cb1] - wa0 * zz[ca0] - wa1 * zz[ca1]
            low = np.stack([slack - sol[tcol] for tcol in sides], axis=1)
            bad = (low < -tol) & ~active
            dz = zz[seg_col + 1] - zz[seg_col]
            lim = eps * seg_len
            bad_rate = np.c_[dz > lim + tol, -dz > lim + tol] & ~rate_on
            if not bad.any() and not bad_rate.any():
                break
            active |= low < margin
            rate_on |= np.c_[dz > lim - margin, -dz > lim - margin] | bad_rate
        return sol


def _midpoint_map(kn: np.ndarray, kr: np.ndarray, x_mid: float, method: str) -> PiecewiseMap:
    m = PiecewiseMap(0.0, 1.0, None, method, kn, kr)
    j = int(np.clip(np.searchsorted(kn, x_mid, side="right") - 1, 0, kn.size - 2))
    rate = float((kr[j + 1] - kr[j]) / (kn[j + 1] - kn[j]))
    m.rate = rate
    m.offset = float(m.to_reference(x_mid) - rate * x_mid)
    return m


def _slacks(pts: np.ndarray, maps: list[NodeMap | None]) -> np.ndarray:
    """f_b(tb) - f_a(ta) of every point under ``maps`` (NaN where a map is missing)."""
    out = []
    for side, t in (("a", "ta"), ("b", "tb")):
        f = np.full(pts.size, np.nan)
        for n, sel in _by_node(pts[side]):
            m = maps[n] if 0 <= n < len(maps) else None
            if m is not None:
                f[sel] = map_to_reference(m, pts[t][sel])
        out.append(f)
    return out[1] - out[0]


def _bounds(pts: np.ndarray, slack: np.ndarray, n_nodes: int, ref: int, c: np.ndarray,
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
    g = sparse.csr_matrix((wt, (wn * n_nodes + b, wn * n_nodes + a)), shape=(size, size))
    src = np.arange(n_win) * n_nodes + ref
    up = dijkstra(g, indices=src, min_only=True).reshape(n_win, n_nodes)
    down = dijkstra(g.T.tocsr(), indices=src, min_only=True).reshape(n_win, n_nodes)
    both = np.isfinite(up) & np.isfinite(down)
    worst = np.where(both, np.maximum(up, down), -np.inf).max(axis=0)
    return np.where(np.isfinite(worst), worst, np.inf)
