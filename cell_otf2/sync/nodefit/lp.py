"""The fallback centring of the node fit, for nodes that no symmetric kind of message links
to the reference (e.g. one-way rings closed only by collectives): per node a piecewise-linear
map centred between the tightest messages of both directions, every kind mixed (but a
collective's orders between nodes beyond the pair terms' reach), by a linear program over
knots at the bends of its offset curve (``curves.py``, ``program.py``). Its maps are an
estimate only: ``fit.py`` keeps every message ordered and states the bounds."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from ...model import NodeMap
from .curves import choose_model, node_curves, node_knots, prior_offsets, refined_curves
from .points import ORDER_ONLY, PiecewiseMap, rough_offsets, slacks, strongly_connected, undominated
from .points import LpOptions as FitOptions
from .program import (
    Program,
    cells,
    hull,
    near_in_node_order,
    objective_windows,
    piece_of,
    slope_limit,
)


def lp_maps(points: np.ndarray, n_nodes: int, ref: int, hz: float,
            o: FitOptions | None = None) -> list[NodeMap | None]:
    """Node maps centred between the tightest messages of both directions, all kinds
    mixed (None where not fitted). Should HiGHS fail with the chosen knot spacings, again
    with knots at the bends only; None everywhere if it fails then too."""
    o = o or FitOptions()
    try:
        return _lp_maps(points, n_nodes, ref, hz, o)
    except RuntimeError:
        try:
            return _lp_maps(points, n_nodes, ref, hz, replace(o, min_spacing=np.inf))
        except RuntimeError:
            return [None] * n_nodes


def _lp_maps(points: np.ndarray, n_nodes: int, ref: int, hz: float, o: FitOptions
             ) -> list[NodeMap | None]:
    pts = points[(points["a"] != points["b"]) & (points["a"] >= 0) & (points["b"] >= 0)]
    # a collective's orders between nodes farther apart than the pair terms reach, neither
    # the reference: not rows of the program (they tie no node to its neighbours' terms or
    # to the reference; they grow with the square of the nodes), unless some node has no
    # way back to the reference without them. The hard constraints (``hard.py``) keep every
    # one of them
    fitted = strongly_connected(pts, n_nodes, ref)
    far = (~near_in_node_order(pts["a"].astype(np.int64), pts["b"].astype(np.int64),
                               n_nodes, o.pair_reach)
           & (pts["kind"] == ORDER_ONLY) & (pts["a"] != ref) & (pts["b"] != ref))
    if far.any() and (strongly_connected(pts[~far], n_nodes, ref) == fitted).all():
        pts = pts[~far]
    maps: list[NodeMap | None] = [None] * n_nodes
    maps[ref] = NodeMap(0.0, 1.0, 0.0, "reference")
    pts = pts[fitted[pts["a"]] & fitted[pts["b"]]]
    if pts.size == 0:
        return maps
    pts = pts[undominated(pts, n_nodes)]
    c = rough_offsets(pts, n_nodes, ref)
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    lo_r = float(min((pts["ta"] + c[a]).min(), (pts["tb"] + c[b]).min())) - 1.0
    hi_r = float(max((pts["ta"] + c[a]).max(), (pts["tb"] + c[b]).max())) + 1.0
    nodes = [n for n in np.flatnonzero(fitted).tolist() if n != ref]
    bends = {n: np.zeros(0) for n in nodes}
    spacing = {n: np.inf for n in nodes}
    prior: list[NodeMap | None] = [None] * n_nodes
    for n in np.flatnonzero(fitted).tolist():
        prior[n] = _map(np.array([lo_r, hi_r]) - c[n], np.array([lo_r, hi_r]))
    grid, per_edge = objective_windows(lo_r, hi_r, len(nodes) + 1, o, hz)
    longest = max(o.max_segment_s * hz, float(grid[1] - grid[0]))
    kref: list[np.ndarray | None] = [None] * n_nodes
    for n in np.flatnonzero(fitted).tolist():
        kref[n] = node_knots(np.zeros(0), lo_r, hi_r, longest)
    centers, curves = node_curves(pts, n_nodes, ref, c, hz, o)
    width = float(np.diff(centers[:2])[0]) if centers.size > 1 else np.inf
    for rnd in range(o.refine + 1):
        if rnd:  # the curves again with the rates of the last round's maps
            curves = refined_curves(pts, n_nodes, ref, c, centers, prior)
        for n in nodes:
            bends[n], spacing[n] = choose_model(centers, curves[:, n], width, lo_r,
                                                 hi_r, o, hz)
            kr = node_knots(bends[n], lo_r, hi_r, min(longest, abs(spacing[n])))
            kref[n] = kr
            z = prior_offsets(centers, curves[:, n], kr, width)
            prior[n] = _map(kr - c[n], kr + z)
    # knots every h besides the bends: the fit is the mean of ``spins`` fits whose knots are
    # shifted by h / spins (each keeps every slack >= its smallest, so does their mean; the
    # mean follows a curve between knots and averages the noise of knots pinned by few
    # messages)
    spins = max(int(o.spins), 1) if any(h > 0 and np.isfinite(h)
                                        for h in spacing.values()) else 1

    def spin_fit(spin: int) -> list[tuple[np.ndarray, np.ndarray]]:
        kref_s = list(kref)
        for n in nodes:
            h = spacing[n]
            kref_s[n] = node_knots(bends[n], lo_r, hi_r, min(longest, abs(h)),
                                   spin / spins if h > 0 else 0.0)
        knots = [None if k is None else k - c[n] for n, k in enumerate(kref_s)]
        tknots = [None if k is None else grid - c[n] for n, k in enumerate(kref_s)]
        fine = [None if k is None else np.unique(np.r_[k, tk])
                for k, tk in zip(knots, tknots, strict=True)]
        cell = cells(a, b, piece_of(a, pts["ta"], fine), piece_of(b, pts["tb"], fine),
                      fine)
        y = pts["tb"] - pts["ta"] + (c[b] - c[a])
        pool = pts[hull(cell, pts["ta"], y, slope_limit(o.max_ppm))]
        prog = Program(ref, knots, tknots, per_edge, c, o, hz)
        z = prog.solve(pool, slacks(pool, prior))
        per_node: list[tuple[np.ndarray, np.ndarray]] = []
        for n in range(n_nodes):
            kn = knots[n]
            if n in bends and kn is not None:
                per_node.append((kn, kn + c[n] + z[prog.zoff[n]: prog.zoff[n] + kn.size]))
            else:
                per_node.append((np.zeros(0), np.zeros(0)))
        return per_node

    # the spins' programs are independent and HiGHS releases the interpreter while it
    # solves: on two cores or more they run side by side (the same fits, in spin order)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = min(spins, cpus or 1)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool_ex:
            fits = list(pool_ex.map(spin_fit, range(spins)))
    else:
        fits = [spin_fit(spin) for spin in range(spins)]
    for n in nodes:
        kn = np.unique(np.concatenate([f[n][0] for f in fits]))
        kr = np.mean([_extend(kn, *f[n]) for f in fits], axis=0)
        maps[n] = _map(kn, kr)
    return maps


def _map(kn: np.ndarray, kr: np.ndarray) -> NodeMap:
    return PiecewiseMap(0.0, 1.0, None, "fit", knots_node=kn, knots_ref=kr)


def _extend(x: np.ndarray, kn: np.ndarray, kr: np.ndarray) -> np.ndarray:
    """The piecewise-linear map through (kn, kr) at ``x``, extended linearly beyond both
    ends."""
    j = np.clip(np.searchsorted(kn, x, side="right") - 1, 0, kn.size - 2)
    return kr[j] + (x - kn[j]) * (kr[j + 1] - kr[j]) / (kn[j + 1] - kn[j])
