"""The node fit's estimate (its curves, before any message is kept ordered) of a simulated
run loaded by ``bench/node_oracle.load``, and its error against the run's truth at the
records of every node but the reference: for tests of the estimate on whole runs."""

from __future__ import annotations

import numpy as np

from cell_otf2.sync.nodefit import estimate
from cell_otf2.sync.nodefit.fit import _envelope_lines, build_graph, envelope
from cell_otf2.sync.nodefit.points import FitOptions, undominated


def estimate_curves(d) -> estimate.Curves:  # noqa: ANN001 - node_oracle.RunData
    """The estimate's curves, started as the converter starts them (the envelope's lines)."""
    o = FitOptions()
    hard = undominated(d.pts, d.n_nodes)
    g = build_graph(d.pts[hard], d.n_nodes, d.ref, d.c)
    env = envelope(g, 0.0, o.max_ppm * 1e-6, np.zeros(g.size))
    return estimate.estimate(d.pts, d.n_nodes, d.ref, d.c, d.hz, o,
                             prior=_envelope_lines(g, env, d.n_nodes, d.ref))


def curve_errors(d, curves: estimate.Curves) -> dict[int, np.ndarray]:  # noqa: ANN001
    """Per node but the reference: the curve's error in seconds at its records."""
    out = {}
    for n in range(d.n_nodes):
        if n == d.ref or curves.knots[n] is None:
            continue
        x, t = d.x_eval[n], d.t_true[n]
        out[n] = (estimate.offsets_at(curves.knots, curves.values, np.full(x.size, n), x)
                  - (t - x - d.c[n])) / d.hz
    return out
