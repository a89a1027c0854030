"""The message points the node fit works on (``POINT_DTYPE``: happened-before pairs between two
nodes' timebases, with the kind of message each is), the fit's options (``FitOptions``) and what
its steps share: a point's slack under node maps (``slacks``), points grouped by node, the nodes
linked to the reference both ways, rough offsets, the reduction to the points no other point of
the same node pair dominates, and a piecewise-linear curve's values (``curve_at``). It fits
nothing (``estimate.py``, ``hard.py`` and ``fit.py`` do) and reads no files."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ...model import NodeMap
from ...native.graph_loops import strong_components

#: one happened-before pair between nodes: record ``before`` on node a at raw timebase ``ta``,
#: record ``after`` on node b at ``tb`` (record ids count distinct messages per node); ``kind``
#: names the kind of message (communicator and size of a point-to-point message) whose least
#: latency is taken to be the same both ways, -1 for an order only (a collective's);
#: ``at_entry``: a receive recorded as its MPI call began (within ``AT_ENTRY_US``), so the
#: message had come before the call and ``tb`` is when the receiver looked, not when it came
POINT_DTYPE = np.dtype([("a", "<i4"), ("b", "<i4"), ("ta", "<f8"), ("tb", "<f8"),
                        ("before", "<i8"), ("after", "<i8"), ("kind", "<i8"),
                        ("at_entry", "?")])
#: a receive recorded within this of its MPI call's entry was there before the call (in both
#: tracer models seen, such receives are recorded within 1.5 us of the entry, and those the
#: call waited for 10 us or more after it)
AT_ENTRY_US = 3.0
#: the kind of a point that is an order only
ORDER_ONLY = -1


@dataclass(frozen=True)
class FitOptions:
    """What the node fit assumes and how finely it follows a clock."""

    #: every node's rate against the reference within 1 +- this (the guaranteed bound's set of
    #: maps; raised, and said so, where the messages need more)
    max_ppm: float = 100.0
    #: a received message is written at least this many ticks after its send
    min_latency_ticks: float = 1.05
    #: estimate windows hold about this many messages per direction of a kind, at least ...
    window_messages: int = 2
    #: ... and the run is cut into at most this many windows
    max_windows: int = 2000
    #: a window's sample further than this (or 8 robust deviations) from its neighbours'
    #: running median is set aside (its fastest messages one way were all received late)
    outlier_us: float = 20.0
    #: a message is timely when within this of its direction's fastest in its window
    timely_us: float = 4.0
    #: in the joint rounds after the first (the curves then follow the clocks), a window whose
    #: fastest message one way is more than this above that direction's fastest over the run
    #: is taken as late (every message of it that way was received late); the first round
    #: allows four times ``outlier_us``
    late_window_us: float = 48.0
    #: ... but in a run shorter than ``short_span_s``, whose curves cannot miss wander (its
    #: periods are minutes), that margin shrinks with the square of the span, to no less
    #: than ``short_late_us`` (receives of a short run come late by tens of microseconds)
    short_span_s: float = 30.0
    short_late_us: float = 16.0
    #: when the joint rounds fit lines, a kind and node pair is re-centred between the least
    #: residuals of its two directions (not the means of its timely messages, which differ
    #: with how each direction's messages queue) when each direction has at least this many
    #: messages within ``floor_near_us`` of its least; 0: never
    floor_messages: int = 16
    #: ... within this of its least
    floor_near_us: float = 1.0
    #: the joint rounds' grid has at most this many knots per node
    max_knots: int = 400
    #: rounds of the estimate (each re-centres on the last round's map)
    rounds: int = 4
    #: folds of the cross-validation that chooses how smooth a node's curve is
    folds: int = 5
    #: a simpler curve (constant, line, smoother) is taken while its cross-validated error
    #: stays within this factor of the best one's
    simpler_within: float = 1.02
    #: the curves a node may have ("constant", "line", "smooth")
    models: tuple[str, ...] = ("constant", "line", "smooth")


@dataclass(frozen=True)
class LpOptions:
    """The options of the fallback centring (``lp.py``)."""

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
    #: node-pair terms, and rows of a collective's orders (but with the reference), only
    #: between nodes at most this far apart in the manifest's order, counted around the
    #: ring of nodes: each node has twice this many partners at most (every pair on up to
    #: ``2 * pair_reach + 1`` nodes), so the program grows with the nodes, not with their
    #: pairs (collectives link every pair; the hard constraints keep every one; the rows
    #: stay where some node has no other way back to the reference)
    pair_reach: int = 8
    max_windows: int = 1024  # node windows at most (windows and segments grow to keep it)
    max_ppm: float = 200.0  # rates stay within 1 +- max_ppm (the reduction relies on it)
    start_us: float = 0.5  # first rows: prior slack within this of its window's smallest
    #: ... or within this on more than ``2 * pair_reach + 1`` nodes: there the rows within
    #: 0.5 us left 7-11 k binding rows to the second round, whose warm dual simplex took
    #: longer than a larger first interior-point solve (32 nodes: 14.0 -> 9.8 s of solving,
    #: 64 nodes: 29.5 -> 21.3 s, the same maps to the microsecond's thousandth)
    start_us_many: float = 2.0
    max_segment_s: float = np.inf  # knots at least this often (default: only at bends)
    refine: int = 1  # rounds of node curves with the rates of the last round's maps
    min_spacing: float = 2.0  # knot spacings tried: down to this many curve windows
    spins: int = 3  # knots every h: the mean of this many fits, knots shifted by h / spins
    spin_slack: float = 4.0  # ... if the shifted knots' score is within this factor
    folds: int = 5  # model choice: cross-validation over this many interleaved window sets
    cv_floor_us: float = 0.3  # ... the fewest knots whose median error is within this^2
    #: ... or within this times the curve's noise variance when that is less (dense
    #: messages resolve finer curves), but never below ``cv_floor_min_us`` squared
    cv_floor_noise: float = 0.5
    cv_floor_min_us: float = 0.05
    window_s: float = 0.0  # windows of the bound; 0: t_window_s


@dataclass
class PiecewiseMap(NodeMap):
    """A continuous piecewise-linear map; ``offset``/``rate`` are those at the run's midpoint;
    ``piece_bounds`` the guaranteed bound of each piece (reference ticks)."""

    #: ``syncloops.place`` computes ``to_reference`` in C from the knots
    piecewise_linear: ClassVar[bool] = True

    knots_node: np.ndarray = field(default_factory=lambda: np.zeros(0))
    knots_ref: np.ndarray = field(default_factory=lambda: np.zeros(0))
    piece_bounds: np.ndarray | None = None

    def to_reference(self, x: np.ndarray | float) -> np.ndarray:
        """Reference ticks of node timebase ``x`` (the end segments extend beyond the knots)."""
        x = np.asarray(x, dtype=np.float64)
        kn, kr = self.knots_node, self.knots_ref
        k = np.clip(np.searchsorted(kn, x, side="right") - 1, 0, kn.size - 2)
        slope = (kr[k + 1] - kr[k]) / (kn[k + 1] - kn[k])
        return kr[k] + (x - kn[k]) * slope


def map_to_reference(m: NodeMap, x: np.ndarray | float) -> np.ndarray:
    """Reference ticks of node timebase ``x`` under any node map."""
    return m.to_reference(np.asarray(x, dtype=np.float64))


def strongly_connected(pts: np.ndarray, n_nodes: int, ref: int) -> np.ndarray:
    """Nodes with a path of messages to and from the reference."""
    _, lab = strong_components(n_nodes, pts["a"], pts["b"])
    return lab == lab[ref]


def rough_offsets(pts: np.ndarray, n_nodes: int, ref: int) -> np.ndarray:
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


def undominated(pts: np.ndarray, n_nodes: int) -> np.ndarray:
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


def by_node(node: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(node, indexes of its entries) for every node present: one sort, not a mask per node."""
    order = np.argsort(node, kind="stable")
    ns = node[order]
    cut = np.flatnonzero(np.r_[True, ns[1:] != ns[:-1], True])
    return [(int(ns[i]), order[i:j]) for i, j in zip(cut[:-1], cut[1:], strict=True)]


def slacks(pts: np.ndarray, maps: list[NodeMap | None]) -> np.ndarray:
    """f_b(tb) - f_a(ta) of every point under ``maps`` (NaN where a map is missing)."""
    out = []
    for side, t in (("a", "ta"), ("b", "tb")):
        f = np.full(pts.size, np.nan)
        for n, sel in by_node(pts[side]):
            m = maps[n] if 0 <= n < len(maps) else None
            if m is not None:
                f[sel] = map_to_reference(m, pts[t][sel])
        out.append(f)
    return out[1] - out[0]


def curve_slopes(knots: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A curve's rate beyond 1 per piece, absolute (pieces shorter than a tick as a tick)."""
    return np.abs(np.diff(values) / np.maximum(np.diff(knots), 1.0))


def curve_at(knots: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The piecewise-linear curve through (knots, values) at ``x``, extended linearly."""
    x = np.asarray(x, dtype=np.float64)
    if knots.size == 1:
        return np.full(x.shape, float(values[0]))
    j = np.clip(np.searchsorted(knots, x, side="right") - 1, 0, knots.size - 2)
    slope = (values[j + 1] - values[j]) / (knots[j + 1] - knots[j])
    return values[j] + (x - knots[j]) * slope
