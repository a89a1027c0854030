"""Baselines of the node clock fit for the benchmark and the tests, beside the converter's fit
(``cell_otf2.sync.nodefit``): ``fit_linear_interpolation`` (offsets measured over the first and the
last second of messages, joined linearly per node, as Score-P and VampirTrace do); the other
baseline, constant offsets (one offset per node, rate 1: the published algorithm's model), is
``fit_points(..., method="constant")`` of the package. Nothing here is used by the converter."""

from __future__ import annotations

import numpy as np

from cell_otf2.model import NodeMap
from cell_otf2.sync.nodefit.fit import NodeFit, fit_points, midpoint_map
from cell_otf2.sync.nodefit.points import (
    FitOptions,
    map_to_reference,
    rough_offsets,
    slacks,
    strongly_connected,
)


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
    fitted = strongly_connected(pts, n_nodes, ref)
    pts = pts[fitted[pts["a"]] & fitted[pts["b"]]]
    if pts.size == 0:
        return fit
    c = rough_offsets(pts, n_nodes, ref)
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
        maps[n] = midpoint_map(kn, kr, 0.5 * (xs + xe), "linear-interpolation")
    slack = slacks(pts, maps)
    fit.min_slack = float(slack.min())
    fit.reversed = int((slack < 0).sum())
    return fit
