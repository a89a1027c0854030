"""The node fit's entry points: ``fitted_node_maps`` (the converter's maps: the fit, or the
manifest's start times where messages do not reach a node both ways), ``fit_nodes`` (a decoded
trace) and ``fit_points`` (message points, e.g. gathered from several processes), and what they
return: ``NodeFit`` and its ``PiecewiseMap`` per node (continuous, piecewise linear, the
reference node the identity). It runs the steps of ``points.py``, ``curves.py`` and
``program.py`` in order and averages the shifted-knot fits; it reads no files, changes no
record, and does not check that the points are real messages (``match.py`` does)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from ..model import Decoded, DomainKind, Matches, NodeMap
from ..synchronize import start_time_maps
from .curves import choose_model, node_curves, node_knots, prior_offsets, refined_curves
from .points import (
    POINT_DTYPE,
    FitOptions,
    rough_offsets,
    slacks,
    strongly_connected,
    undominated,
)
from .program import Program, cells, hull, objective_windows, piece_of, shift_bounds, slope_limit


@dataclass
class PiecewiseMap(NodeMap):
    """A continuous piecewise-linear map; ``offset``/``rate`` are those at the run's midpoint."""

    #: ``syncloops.place`` computes ``to_reference`` in C from the knots
    piecewise_linear: ClassVar[bool] = True

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
    manifest's start times (``synchronize.start_time_maps``) for the other nodes."""
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
    """Fit every node of a decoded trace (reference: the node of rank 0). ``method``: "fit" or
    "constant" (one offset per node: the published algorithm's model, a baseline)."""
    man = dec.manifest
    pts = points_from_trace(dec, matches)
    ref = man.node_of_rank(0)
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
    fitted = strongly_connected(pts, n_nodes, ref)
    pts = pts[fitted[pts["a"]] & fitted[pts["b"]]]
    if pts.size == 0:
        return fit
    every = pts
    pts = pts[undominated(pts, n_nodes)]
    c = rough_offsets(pts, n_nodes, ref)
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
        prior[n] = midpoint_map(np.array([lo_r, hi_r]) - c[n], np.array([lo_r, hi_r]),
                                 lo_r - c[n], "prior")
    grid, per_edge = objective_windows(lo_r, hi_r, len(nodes) + 1, o, hz)
    longest = max(o.max_segment_s * hz, float(grid[1] - grid[0]))
    kref: list[np.ndarray | None] = [None] * n_nodes
    for n in np.flatnonzero(fitted).tolist():
        kref[n] = node_knots(np.zeros(0), lo_r, hi_r, longest)
    if method == "fit":
        centers, curves = node_curves(pts, n_nodes, ref, c, hz, o)
        width = float(np.diff(centers[:2])[0]) if centers.size > 1 else np.inf
        for rnd in range(o.refine + 1):
            if rnd:  # the curves again with the rates of the last round's maps
                curves = refined_curves(pts, n_nodes, ref, c, centers, prior)
            for n in nodes:
                bends[n], spacing[n] = choose_model(centers, curves[:, n], width, lo_r,
                                                     hi_r, o, hz)
                kref[n] = node_knots(bends[n], lo_r, hi_r, min(longest, abs(spacing[n])))
                z = prior_offsets(centers, curves[:, n], kref[n], width)
                prior[n] = midpoint_map(kref[n] - c[n], kref[n] + z, lo_r - c[n], "prior")
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
            kref[n] = node_knots(bends[n], lo_r, hi_r, min(longest, abs(h)),
                             spin / spins if h > 0 else 0.0)
        t2 = time.perf_counter()
        knots = [None if k is None else k - c[n] for n, k in enumerate(kref)]
        tknots = [None if k is None else grid - c[n] for n, k in enumerate(kref)]
        fine = [None if k is None else np.unique(np.r_[k, tk])
                for k, tk in zip(knots, tknots, strict=True)]
        cell = cells(a, b, piece_of(a, pts["ta"], fine), piece_of(b, pts["tb"], fine),
                      fine)
        y = pts["tb"] - pts["ta"] + (c[b] - c[a])
        pool = pts[hull(cell, pts["ta"], y, slope_limit(o.max_ppm))]
        score = slacks(pool, prior)
        secs["reduce"] += time.perf_counter() - t2
        t3 = time.perf_counter()
        prog = Program(ref, knots, tknots, per_edge, c, o, hz)
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
        maps[n] = midpoint_map(kn, kr, 0.5 * (lo_r + hi_r) - c[n], label)
        fit.segments[n] = kn.size - 1
        kref[n] = kn + c[n]
    fit.knots = kref
    t4 = time.perf_counter()
    slack = slacks(pts, maps)
    fit.min_slack = float(slack.min())
    # a dominated pair's slack is at least its dominator's (maps increase): count over all
    # pairs only when some undominated one is reversed
    fit.reversed = 0 if fit.min_slack >= 0 else int((slacks(every, maps) < 0).sum())
    w = o.window_s * hz if o.window_s > 0 else float(grid[1] - grid[0])
    bounds = shift_bounds(pts, slack, n_nodes, ref, c, w)
    for n in nodes:
        m = maps[n]
        if m is not None:
            m.bound = None if not np.isfinite(bounds[n]) else float(bounds[n])
    secs["bounds"] = time.perf_counter() - t4
    fit.seconds = secs
    return fit


def midpoint_map(kn: np.ndarray, kr: np.ndarray, x_mid: float, method: str) -> PiecewiseMap:
    m = PiecewiseMap(0.0, 1.0, None, method, kn, kr)
    j = int(np.clip(np.searchsorted(kn, x_mid, side="right") - 1, 0, kn.size - 2))
    rate = float((kr[j + 1] - kr[j]) / (kn[j + 1] - kn[j]))
    m.rate = rate
    m.offset = float(m.to_reference(x_mid) - rate * x_mid)
    return m


def _extend(x: np.ndarray, kn: np.ndarray, kr: np.ndarray) -> np.ndarray:
    """The piecewise-linear map through (kn, kr) at ``x``, extended linearly beyond both
    ends."""
    j = np.clip(np.searchsorted(kn, x, side="right") - 1, 0, kn.size - 2)
    return kr[j] + (x - kn[j]) * (kr[j + 1] - kr[j]) / (kn[j + 1] - kn[j])
