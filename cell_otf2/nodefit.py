"""Fit every node's timebase to the reference node's from the MPI messages between nodes.

Each message point is a happened-before pair between two nodes: ``before`` read node a's
timebase ``ta``, ``after`` read node b's ``tb``, so ``f_a(ta) <= f_b(tb)`` for the true maps
``f`` (node timebase -> reference ticks). A node's model is continuous and piecewise linear in
its own timebase (``offset + rate * timebase`` on each segment); the reference node (the one
hosting rank 0) is the identity. All nodes are fitted together as one linear program (scipy's
HiGHS):

- **Objective**: every segment of every node (the reference's too) has a variable ``t``
  bounded by the slack ``f_b(tb) - f_a(ta)`` of every pair with an end in it; the program
  maximizes the sum of the ``t`` (each segment's smallest slack) minus ``smooth`` times the
  rate changes at the knots (in ticks: change of rate times the mean length of the two
  segments, at most 2 s). On a cycle of nodes the smallest slacks even out (a ring's edges
  all get its mean); one global smallest slack would pin only the bottleneck and leave the
  rest wherever the solver stops.
- **Segments: as many as the messages support** (``_initial_knots``, ``_refine``). A node
  starts with segments holding ``min_points`` messages in and ``min_points`` out. After each
  solve a segment is cut in half when the rate bends at one of its knots by more than it can
  hide (bend * length / 8 > ``tolerance_us``) or when its smallest slack is strained (below
  zero or ``strain_us`` under the node's median), while each half keeps ``split_points``
  messages in and out and ``min_seconds``; then it solves again. Wander is followed where it
  happens, straight stretches stay long.
- **Reduction**: a pair is implied by another of the same node pair sent no earlier and
  received no later (``_undominated``: every collective instance keeps one pair per node
  pair); within one cell (a segment of a and one of b) both maps are linear, so a pair's slack
  is linear in its point (ta, tb) and only the lower convex hull of the cell's points can bind;
  rates stay within ``1 +- max_ppm``, so only hull vertices whose supporting slopes meet that
  range are kept (``_hull``). Both exact and vectorized.
- **Row generation** (``_Program``): each solve starts from a few rows per segment (the pool
  points with the smallest slack under the previous solution, at first under an NTP-style
  rough map, ``_rough_slack``), adds every pool row and rate limit the solution violates (and
  those within 2 ticks), and solves again until none is violated: the result solves the
  whole program with a fraction of its rows.
- **Bound** (``_bounds``): per time window, with the fitted maps, a node may move by no more
  than the shortest path of fitted slacks to and from the reference (a message's slack is
  never negative in truth); ``bound`` is the largest such shift over the run, in reference
  ticks. It takes the fitted rates as right within a window; a node never bounded from both
  sides gets ``None``.

Cost: one HiGHS solve per refinement round and row-generation round (typically 10-20 in
all); each is a few thousand rows for a few nodes, tens of thousands for tens of nodes with
sparse messages, where the interior-point solver takes seconds per solve.

Baselines for the benchmark: ``method="constant"`` (one offset per node, rate 1: the published
algorithm's model) and ``fit_linear_interpolation`` (offsets measured over the first and the
last second of messages, joined linearly, as Score-P and VampirTrace do).

Nodes without a path of messages to and from the reference are not fitted (``None``); callers
keep their start-time map. It reads no files and changes no record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import sparse
from scipy.optimize import linprog
from scipy.sparse.csgraph import breadth_first_order, connected_components, dijkstra

from .decode import Decoded
from .match import Matches
from .model import DomainKind
from .timing import NodeMap, start_time_maps

_LP_METHOD = "highs-ipm"
_SPLIT = 2  # a cut segment becomes this many parts
#: one happened-before pair between nodes: record ``before`` on node a at raw timebase ``ta``,
#: record ``after`` on node b at ``tb`` (record ids count distinct messages per node)
POINT_DTYPE = np.dtype([("a", "<i4"), ("b", "<i4"), ("ta", "<f8"), ("tb", "<f8"),
                        ("before", "<i8"), ("after", "<i8")])


@dataclass(frozen=True)
class FitOptions:
    min_points: int = 256  # messages in and out per starting segment of a node
    split_points: int = 8  # messages in and out each part of a cut segment keeps
    min_seconds: float = 0.1  # shortest segment
    tolerance_us: float = 0.15  # cut while bend * segment length / 8 exceeds this
    strain_us: float = 0.5  # or while a segment's smallest slack is this far below the median
    max_ppm: float = 200.0  # rates stay within 1 +- max_ppm (the reduction relies on it)
    smooth: float = 3.0  # cost of a rate change: smooth * |change of rate| * length (<= 2 s)
    max_refine: int = 12  # refinement rounds (each: solve, then cut segments)
    window_s: float = 0.0  # windows of the bound; 0: the median starting segment


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
    pool: int = 0  # points that can bind (hull vertices per cell), last solve
    rows: int = 0  # rows of the last program solved
    solves: int = 0  # programs solved (refinement x row generation)
    segments: list[int] = field(default_factory=list)  # per node
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
    """Fit node maps to message points; ``method`` "fit" (piecewise) or "constant"."""
    o = options or FitOptions()
    if method == "constant":
        o = replace(o, min_points=1 << 62, max_ppm=0.0, smooth=0.0, max_refine=1)
    elif method != "fit":
        raise ValueError(f"unknown node fit method {method!r}")
    secs = {"prepare": 0.0, "reduce": 0.0, "lp": 0.0, "bounds": 0.0}
    t0 = time.perf_counter()
    pts = points[(points["a"] != points["b"]) & (points["a"] >= 0) & (points["b"] >= 0)]
    maps: list[NodeMap | None] = [None] * n_nodes
    maps[ref] = NodeMap(0.0, 1.0, 0.0, "reference")
    fit = NodeFit(maps, points=int(pts.size), segments=[0] * n_nodes)
    fitted = _strongly_connected(pts, n_nodes, ref)
    pts = pts[fitted[pts["a"]] & fitted[pts["b"]]]
    if pts.size == 0:
        return fit
    events = _events(pts, n_nodes, fitted)
    every = pts
    pts = pts[_undominated(pts, n_nodes)]
    c = _rough_offsets(pts, n_nodes, ref)
    knots = _initial_knots(pts, events, c, o, hz)
    if method == "fit":
        rough = _rough_slack(pts, n_nodes, ref, c, hz)
    else:
        rough = pts["tb"] - pts["ta"] + (c[pts["b"]] - c[pts["a"]])
    start_knots = knots
    secs["prepare"] = time.perf_counter() - t0
    t_mid = 0.5 * float((pts["ta"] + c[pts["a"]]).min() + (pts["ta"] + c[pts["a"]]).max())
    label = "fit" if method == "fit" else method
    smax = _slope_limit(o.max_ppm)
    a, b = pts["a"], pts["b"]
    y = pts["tb"] - pts["ta"] + (c[b] - c[a])
    in_pool = np.zeros(pts.size, dtype=bool)
    changed = np.ones(pts.size, dtype=bool)
    for _ in range(max(1, o.max_refine)):
        t1 = time.perf_counter()
        cell = _cells(a, b, _piece_of(a, pts["ta"], knots), _piece_of(b, pts["tb"], knots),
                      knots)
        todo = np.flatnonzero(changed)
        in_pool[todo] = False
        in_pool[todo[_hull(cell[todo], pts["ta"][todo], y[todo], smax)]] = True
        keep = np.flatnonzero(in_pool)
        pool, cell = pts[keep], np.unique(cell[keep], return_inverse=True)[1].ravel()
        # the smallest slack under the previous solution (first: under the rough map)
        start = _start_rows(pool, _slacks(pool, maps) if fit.solves else rough[keep], knots)
        secs["reduce"] += time.perf_counter() - t1
        t2 = time.perf_counter()
        prog = _Program(ref, knots, c, o, hz)
        z = prog.solve(pool, start)
        fit.pool, fit.rows, fit.solves = int(pool.size), prog.rows, fit.solves + prog.rounds
        for n in np.flatnonzero(fitted).tolist():
            if n != ref:
                kn = knots[n]
                kr = kn + c[n] + z[prog.zoff[n]: prog.zoff[n] + kn.size]
                maps[n] = _midpoint_map(kn, kr, t_mid - c[n], label)
        secs["lp"] += time.perf_counter() - t2
        tseg = [z[prog.toff[n]: prog.toff[n] + kn.size - 1] if kn is not None else None
                for n, kn in enumerate(knots)]
        cut = _refine(knots, maps, tseg, events, ref, o, hz)
        if not any(m is not None and m.any() for m in cut):
            break
        changed = _in_cut(a, pts["ta"], knots, cut) | _in_cut(b, pts["tb"], knots, cut)
        knots = _cut_knots(knots, cut)
    fit.segments = [k.size - 1 if k is not None and i != ref else 0
                    for i, k in enumerate(knots)]
    t3 = time.perf_counter()
    fit.reversed = int((_slacks(every, maps) < 0).sum())
    slack = _slacks(pts, maps)
    fit.min_slack = float(slack.min())
    bounds = _bounds(pts, slack, n_nodes, ref, c, start_knots, o, hz)
    for n, m in enumerate(maps):
        if m is not None and n != ref:
            m.bound = None if not np.isfinite(bounds[n]) else float(bounds[n])
    secs["bounds"] = time.perf_counter() - t3
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


def _rough_slack(pts: np.ndarray, n_nodes: int, ref: int, c: np.ndarray,
                 hz: float) -> np.ndarray:
    """A rough map that follows drift and wander (NTP-style): per node pair and time window,
    the offset between them is the mean of the smallest forward and backward differences;
    windows compose along a spanning tree from the reference, twice (the second pass on what
    the first left). Microseconds good where messages are dense; it only picks the rows the
    program starts with. Returns the slack of every point under it."""
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    big = (pts["ta"] + c[a]).min()
    tr = pts["ta"] + c[a] - big
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    pair = lo * n_nodes + hi
    upair, pinv, pcount = np.unique(pair, return_inverse=True, return_counts=True)
    width = max(float(tr.max()) * 16 / max(float(np.median(pcount)), 1.0), 0.25 * hz, 1.0)
    n_win = int(tr.max() // width) + 1
    win = (tr // width).astype(np.int64)
    fwd = (a == lo).astype(np.int64)
    delta = np.zeros((n_nodes, n_win))  # rough map: timebase + c + delta(window)
    centers = (np.arange(n_win) + 0.5) * width
    slack = pts["tb"] - pts["ta"] + c[b] - c[a]
    for _ in range(2):
        key = (pinv * n_win + win) * 2 + fwd
        best = np.full(upair.size * n_win * 2, np.inf)
        order = np.argsort(key, kind="stable")
        ks = key[order]
        first = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        best[ks[first]] = np.minimum.reduceat(slack[order], first)
        best = best.reshape(upair.size, n_win, 2)
        both = np.isfinite(best).all(axis=2)
        with np.errstate(invalid="ignore"):
            step = np.where(both, (best[:, :, 0] - best[:, :, 1]) / 2, 0.0)  # error of hi - lo
        usable = both.any(axis=1)
        g = sparse.coo_matrix((np.ones(int(usable.sum())), (upair[usable] // n_nodes,
                                                             upair[usable] % n_nodes)),
                              shape=(n_nodes, n_nodes)).tocsr()
        order, pred = breadth_first_order(g, ref, directed=False)
        corr = np.zeros((n_nodes, n_win))
        for q in order[1:].tolist():
            p = int(pred[q])
            j = int(np.searchsorted(upair, min(p, q) * n_nodes + max(p, q)))
            ok = both[j]
            d = np.interp(np.arange(n_win), np.flatnonzero(ok), step[j][ok])
            corr[q] = corr[p] + (d if q > p else -d)
        delta += corr
        da, db = np.empty(a.size), np.empty(b.size)
        tb_r = pts["tb"] + c[b] - big
        for n in np.unique(np.r_[a, b]).tolist():
            sa, sb = a == n, b == n
            da[sa] = np.interp(tr[sa], centers, delta[n])
            db[sb] = np.interp(tb_r[sb], centers, delta[n])
        slack = pts["tb"] - pts["ta"] + c[b] - c[a] + db - da
    return slack


def _events(pts: np.ndarray, n_nodes: int, fitted: np.ndarray) -> list:
    """Per fitted node: sorted times of its distinct sending and receiving records."""
    sides = []
    for ids, node, t in (("before", "a", "ta"), ("after", "b", "tb")):
        _, first = np.unique(pts[ids], return_index=True)
        nd, tt = pts[node][first], pts[t][first]
        order = np.lexsort((tt, nd))
        nd, tt = nd[order], tt[order]
        edges = np.searchsorted(nd, np.arange(n_nodes + 1))
        sides.append([tt[edges[n]:edges[n + 1]] for n in range(n_nodes)])
    return [(sides[0][n], sides[1][n]) if fitted[n] else None for n in range(n_nodes)]


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


def _initial_knots(pts: np.ndarray, events: list, c: np.ndarray, o: FitOptions,
                   hz: float) -> list[np.ndarray | None]:
    """Per fitted node, knots (node timebase) cutting the run into segments that hold about
    ``min_points`` messages in and out each (cut at quantiles of both)."""
    tr = np.concatenate([pts["ta"] + c[pts["a"]], pts["tb"] + c[pts["b"]]])
    lo, hi = float(tr.min()), float(tr.max())
    min_len = max(o.min_seconds * hz, 1.0)
    knots: list[np.ndarray | None] = [None] * len(events)
    for n, ev in enumerate(events):
        if ev is None:
            continue
        out_t, in_t = ev
        first, last = lo - c[n] - 1.0, hi - c[n] + 1.0
        k = int(min(in_t.size, out_t.size) // max(o.min_points, 1))
        k = max(1, min(k, int((last - first) // min_len)))
        inner = np.zeros(0)
        if k > 1:
            j = np.arange(1, k)
            inner = np.maximum(in_t[j * in_t.size // k], out_t[j * out_t.size // k])
            inner = inner[(inner > first + min_len / 2) & (inner < last - min_len / 2)]
            inner = _thin(np.unique(inner), min_len)
        knots[n] = np.concatenate([[first], inner, [last]])
    return knots


def _thin(x: np.ndarray, gap: float) -> np.ndarray:
    """Drop knots closer than ``gap`` to the previous kept one (x sorted)."""
    if x.size < 2:
        return x
    keep = [0]
    for i in range(1, x.size):
        if x[i] - x[keep[-1]] >= gap:
            keep.append(i)
    return x[keep]


def _cut_knots(knots: list[np.ndarray | None],
               cut: list[np.ndarray | None]) -> list[np.ndarray | None]:
    """Cut each marked segment in the middle."""
    return [kn if m is None or not m.any() else np.unique(np.r_[kn, 0.5 * (kn[:-1] + kn[1:])[m]])
            for kn, m in zip(knots, cut, strict=True)]


def _start_rows(pool: np.ndarray, score: np.ndarray,
                knots: list[np.ndarray | None]) -> np.ndarray:
    """Per half of every segment of every node, the pool point touching it with the smallest
    score: few rows, and both ends of every segment held."""
    groups = []
    for side, t in (("a", "ta"), ("b", "tb")):
        node = pool[side].astype(np.int64)
        k = _piece_of(node, pool[t], knots)
        half = np.zeros(node.size, np.int64)
        for n in np.unique(node).tolist():
            sel = node == n
            kn = knots[n]
            half[sel] = pool[t][sel] > 0.5 * (kn[k[sel]] + kn[k[sel] + 1])
        groups.append(_argmin_per_cell((node * (1 << 32) + k) * 2 + half, score))
    return np.unique(np.concatenate(groups))


def _argmin_per_cell(cell: np.ndarray, score: np.ndarray) -> np.ndarray:
    order = np.lexsort((score, cell))
    return order[np.r_[True, cell[order][1:] != cell[order][:-1]]]


def _in_cut(node: np.ndarray, x: np.ndarray, knots: list[np.ndarray | None],
            cut: list[np.ndarray | None]) -> np.ndarray:
    """Points whose segment (on ``node``) is about to be cut."""
    out = np.zeros(node.size, dtype=bool)
    for n, m in enumerate(cut):
        if m is None or not m.any():
            continue
        sel = np.flatnonzero(node == n)
        k = np.clip(np.searchsorted(knots[n], x[sel], side="right") - 1, 0, m.size - 1)
        out[sel[m[k]]] = True
    return out


def _refine(knots: list[np.ndarray | None], maps: list[NodeMap | None],
            tseg: list[np.ndarray | None], events: list, ref: int, o: FitOptions,
            hz: float) -> list[np.ndarray | None]:
    """Per node, the segments to cut: those next to a knot whose bend they would hide badly
    (bend * length / 8 > tolerance) or whose smallest slack is strained (below zero, or well
    below the node's median; everyone's for a node with few segments), while every part keeps
    enough messages and length."""
    tol = o.tolerance_us * 1e-6 * hz
    min_len = max(o.min_seconds * hz, 1.0)
    out: list[np.ndarray | None] = [None] * len(knots)
    everyone = float(np.median(np.concatenate([t for t in tseg if t is not None])))
    for n, kn in enumerate(knots):
        m = maps[n]
        if kn is None or n == ref or not isinstance(m, PiecewiseMap):
            continue
        slope = np.diff(m.knots_ref) / np.diff(kn)
        bend = np.abs(np.diff(slope))  # at interior knots 1..K-1
        seg_bend = np.maximum(np.r_[0.0, bend], np.r_[bend, 0.0])
        length = np.diff(kn)
        parts_ok = np.ones(length.size, dtype=bool)
        for t in events[n]:
            for j in range(_SPLIT):
                lo = kn[:-1] + length * j / _SPLIT
                hi = kn[:-1] + length * (j + 1) / _SPLIT
                parts_ok &= np.searchsorted(t, hi) - np.searchsorted(t, lo) >= o.split_points
        usual = float(np.median(tseg[n])) if tseg[n].size >= 4 else everyone
        strained = (tseg[n] < usual - o.strain_us * 1e-6 * hz) | (tseg[n] < 0)
        out[n] = (((seg_bend * length / 8 > tol) | strained) & (length >= _SPLIT * min_len)
                  & parts_ok)
    return out


def _piece_of(node: np.ndarray, x: np.ndarray, knots: list[np.ndarray | None]) -> np.ndarray:
    k = np.zeros(node.size, np.int64)
    for n in np.unique(node).tolist():
        kn = knots[n]
        if kn is None:
            continue
        sel = node == n
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
    reference node), one ``t`` per segment of every node, one ``w`` per interior knot (the
    rate change there). Rows: ``Z_a(ta) - Z_b(tb) + t <= tb + c_b - ta - c_a`` for each end's
    segment (the pool: hull vertices per cell), ``|rate - 1| <= max_ppm`` per segment, and
    ``w >= |rate change| * min(mean segment length, 2 s)``. Maximizes ``sum t - smooth * sum w``. It
    starts from the given pool points, solves, adds every pool row and rate row the solution
    violates, and repeats: the result solves the whole program.
    """

    def __init__(self, ref: int, knots: list[np.ndarray | None], c: np.ndarray,
                 o: FitOptions, hz: float) -> None:
        self.ref, self.knots, self.c, self.o, self.hz = ref, knots, c, o, hz
        n_nodes = len(knots)
        self.zoff = np.full(n_nodes, -1, np.int64)
        self.toff = np.full(n_nodes, -1, np.int64)
        col = 0
        for n, kn in enumerate(knots):
            if kn is not None and n != ref:
                self.zoff[n] = col
                col += kn.size
        self.n_z = col
        for n, kn in enumerate(knots):
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
        for n in np.unique(node).tolist():
            if n == self.ref:
                continue
            sel = node == n
            kn = self.knots[n]
            lo, hi = kn[k[sel]], kn[k[sel] + 1]
            lam[sel] = (x[sel] - lo) / (hi - lo)
        col0 = np.where(node == self.ref, -1, self.zoff[node] + k)
        col1 = np.where(node == self.ref, -1, col0 + 1)
        w0 = np.where(node == self.ref, 0.0, 1.0 - lam)
        w1 = np.where(node == self.ref, 0.0, lam)
        return col0, w0, col1, w1

    def solve(self, pool: np.ndarray, start: np.ndarray) -> np.ndarray:
        """z (with the t and w columns after it) for the pool of points; ``start`` marks the
        points whose rows are in the first round."""
        c = self.c
        a, b = pool["a"].astype(np.int64), pool["b"].astype(np.int64)
        ca0, wa0, ca1, wa1 = self._interp(a, pool["ta"])
        cb0, wb0, cb1, wb1 = self._interp(b, pool["tb"])
        ta_col = self.toff[a] + _piece_of(a, pool["ta"], self.knots)
        tb_col = self.toff[b] + _piece_of(b, pool["tb"], self.knots)
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
        smooth_rows, smooth_rhs, n_w = self._smoothing()
        n_cols = self.n_zt + n_w
        cost = np.zeros(n_cols)
        cost[self.n_z:self.n_zt] = -1.0
        cost[self.n_zt:] = self.o.smooth
        bounds = np.empty((n_cols, 2))
        bounds[:, 0], bounds[:, 1] = -np.inf, np.inf
        bounds[self.n_z:self.n_zt, 1] = self.hz * 1.0  # t: never unbounded
        bounds[self.n_zt:, 0] = 0.0
        active = np.zeros((pool.size, 2), dtype=bool)
        active[start] = True
        rate_on = np.zeros((seg_col.size, 2), dtype=bool)
        tol, margin = 0.05, 2.0  # ticks: violations below tol are rounding; add near ones too
        for self.rounds in range(1, 101):
            parts = [smooth_rows]
            rhs = [smooth_rhs]
            row0 = smooth_rhs.size
            for side, tcol in ((0, ta_col), (1, tb_col)):
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
            za = wa0 * zz[ca0] + wa1 * zz[ca1]
            zb = wb0 * zz[cb0] + wb1 * zz[cb1]
            slack = d + zb - za
            low = np.c_[slack - sol[ta_col], slack - sol[tb_col]]
            bad = (low < -tol) & ~active
            dz = zz[seg_col + 1] - zz[seg_col]
            lim = eps * seg_len
            bad_rate = np.c_[dz > lim + tol, -dz > lim + tol] & ~rate_on
            if not bad.any() and not bad_rate.any():
                break
            active |= low < margin
            rate_on |= np.c_[dz > lim - margin, -dz > lim - margin] | bad_rate
        return sol

    def _smoothing(self) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray, int]:
        """Rows ``+-(rate change * length) - w <= 0`` at every interior knot."""
        rows, cols, vals = [], [], []
        n_w = row0 = 0
        if self.o.smooth > 0:
            for n, kn in enumerate(self.knots):
                if kn is None or n == self.ref or kn.size < 3:
                    continue
                dx = np.diff(kn)
                lbar = np.minimum(0.5 * (dx[:-1] + dx[1:]), 2.0 * self.hz)
                m = lbar.size
                z0 = self.zoff[n] + np.arange(m)
                cw = self.n_zt + n_w + np.arange(m)
                coef = (lbar / dx[:-1], -lbar / dx[1:] - lbar / dx[:-1], lbar / dx[1:])
                for s_val in (1.0, -1.0):
                    r = row0 + np.arange(m)
                    for j in range(3):
                        rows.append(r)
                        cols.append(z0 + j)
                        vals.append(s_val * coef[j])
                    rows.append(r)
                    cols.append(cw)
                    vals.append(-np.ones(m))
                    row0 += m
                n_w += m
        if not rows:
            e = np.zeros(0, np.int64)
            return (e, e, np.zeros(0)), np.zeros(0), 0
        return ((np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)),
                np.zeros(row0), n_w)


def _midpoint_map(kn: np.ndarray, kr: np.ndarray, x_mid: float, method: str) -> PiecewiseMap:
    m = PiecewiseMap(0.0, 1.0, None, method, kn, kr)
    j = int(np.clip(np.searchsorted(kn, x_mid, side="right") - 1, 0, kn.size - 2))
    rate = float((kr[j + 1] - kr[j]) / (kn[j + 1] - kn[j]))
    m.rate = rate
    m.offset = float(m.to_reference(x_mid) - rate * x_mid)
    return m


def _slacks(pts: np.ndarray, maps: list[NodeMap | None]) -> np.ndarray:
    """f_b(tb) - f_a(ta) of every point under ``maps`` (NaN where a map is missing)."""
    fa = np.full(pts.size, np.nan)
    fb = np.full(pts.size, np.nan)
    for n, m in enumerate(maps):
        if m is None:
            continue
        sa, sb = pts["a"] == n, pts["b"] == n
        fa[sa] = map_to_reference(m, pts["ta"][sa])
        fb[sb] = map_to_reference(m, pts["tb"][sb])
    return fb - fa


def _bounds(pts: np.ndarray, slack: np.ndarray, n_nodes: int, ref: int, c: np.ndarray,
            knots: list[np.ndarray | None], o: FitOptions, hz: float) -> np.ndarray:
    """Per node, the largest shift the fitted slacks allow in any window (inf: never bounded)."""
    tr = pts["ta"] + c[pts["a"]]
    if o.window_s > 0:
        w = o.window_s * hz
    else:
        lengths = [np.median(np.diff(k)) for k in knots if k is not None and k.size > 1]
        w = float(np.median(lengths)) if lengths else float(tr.max() - tr.min() + 1)
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
