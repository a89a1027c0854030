"""Offsets that keep a node's messages ordered where the solver's relaxation reverses some.
The solver (``solver.py``) loosens every constraint of a node by the least uniform amount
that makes them feasible (slot order is taken as exact, and a reading may trail its slot),
so the two ends of a mailbox, signal, DMA or MPI message within the node, whose own
constraint is sound as it stands, may come out up to that many ticks reversed. Here the
messages' constraints are kept exact (with a margin that survives rounding to whole ticks)
and only the others loosened, and the solver's offsets move the least within that system:
clipped to its envelope, then the mean of its greatest solution below them and its least
solution above them (both feasible, so their mean is). With the others loosened by the
relaxation, that system lies inside the solver's, so the offsets stay within its bounds;
where it is infeasible, the others are loosened by up to 4 x the relaxation, and the
node's bounds widen to hold the offsets. Where even that is infeasible, the offsets stay
as they were (the written order violations count what stays reversed). It chooses no
relaxation and computes no bound."""

from __future__ import annotations

import numpy as np

from .solver import reduced_graph

#: ticks by which a message's receive end is kept after its send end: float offsets that
#: keep the order exactly could round to whole ticks one tick reversed
MARGIN_TICKS = 1e-3
_HAIR_TICKS = 1e-6


#: the other constraints loosened by these multiples of the relaxation in turn, until the
#: messages can be kept: a cycle of slot order through a message needs more of the others
#: once the message takes none
LOOSENINGS = (1.0, 1.5, 2.0, 3.0, 4.0)


def keep_messages(n_domains: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
                  hard: np.ndarray, reference: int, offset: np.ndarray, relaxation: float
                  ) -> tuple[np.ndarray, float] | None:
    """(new offsets, the loosening of the other constraints they keep), or None where
    nothing needs moving or no offsets keep every message. Constraints ``x[dst] - x[src] <=
    weight``, ``hard`` (bool per constraint) the messages'; ``offset``: the solver's (NaN
    where a domain has none: left out), which keep every constraint loosened by
    ``relaxation``. With a loosening above the relaxation the offsets may leave the
    solver's bounds (by at most the difference per constraint of a path)."""
    x = np.asarray(offset, dtype=np.float64)
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    placed = np.isfinite(x)
    on = placed[src] & placed[dst] & (src != dst)
    src, dst, hard = src[on], dst[on], np.asarray(hard, dtype=bool)[on]
    weight = np.asarray(weight, dtype=np.float64)[on]
    if not (hard & (x[dst] - x[src] > weight)).any():  # none reversed
        return None
    for factor in LOOSENINGS:
        moved = _moved(n_domains, src, dst, weight, hard, reference, x, placed,
                       factor * relaxation)
        if moved is not None:
            return moved, factor * relaxation
    return None


def _moved(n_domains: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray,
           hard: np.ndarray, reference: int, x: np.ndarray, placed: np.ndarray,
           loosening: float) -> np.ndarray | None:
    # the others loosened by a hair more: the solver's offsets keep them to rounding
    w = np.where(hard, weight - MARGIN_TICKS, weight + loosening + _HAIR_TICKS)
    # the solver's own graph (parallel constraints collapsed, a potential certified by the
    # least relaxation): Dijkstra once per solution, whatever the offsets leave reversed
    graph, potential = reduced_graph(n_domains, src, dst, w, reference)
    if potential.relaxation > _HAIR_TICKS:  # the messages cannot all be kept so
        return None
    ref, zero = np.array([reference]), np.zeros(1)
    upper = graph.multi_source(ref, zero)
    lower = -graph.multi_source(ref, zero, reverse=True)
    # the domains without an offset have no constraint left: no seeds, nothing moves them
    seeds = np.flatnonzero(placed)
    inside = np.clip(x[seeds], lower[seeds], upper[seeds])
    down = graph.multi_source(seeds, inside)  # the greatest solution below
    up = -graph.multi_source(seeds, -inside, reverse=True)  # the least above
    moved = np.full(n_domains, np.nan)
    moved[placed] = 0.5 * (down[placed] + up[placed])
    # what the shortest paths promise, checked to their rounding (offsets of some 1e11
    # ticks carry 1e-5 of it; at most half the margin)
    scale = float(np.abs(x[placed]).max(initial=1.0))
    tol = min(10 * _HAIR_TICKS + 8 * np.finfo(np.float64).eps * scale, MARGIN_TICKS / 2)
    if not np.isfinite(moved[placed]).all() or abs(moved[reference]) > tol:
        return None
    moved[reference] = 0.0
    if (moved[dst] - moved[src] > w + tol).any():
        return None
    return moved
