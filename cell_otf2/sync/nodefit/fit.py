"""The node fit's entry points: ``fitted_node_maps`` (the converter's maps: the fit, or the
manifest's start times where messages do not reach a node both ways), ``fit_nodes`` (a decoded
trace) and ``fit_points`` (message points, e.g. gathered from several processes), and what they
return: ``NodeFit`` and its ``PiecewiseMap`` per node (continuous, piecewise linear, the
reference node the identity), each with its guaranteed bound per piece and the estimate's
expected error. The steps: the estimate (``estimate.py``), the least change to it that keeps
every message ordered and the envelope of every map that does (``hard.py``). It reads no
files, changes no record, and does not check that the points are real messages
(``match.py`` does)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from ...damage import DamageKind, DamageLog
from ...decode.mpi_entry import receive_entry_ticks
from ...input import format as fmt
from ...model import Decoded, DomainKind, Matches, NodeMap
from ..extents import node_extents
from ..synchronize import start_time_maps
from .disagree import one_way_only, path_disagreement
from .estimate import estimate, offsets_at
from .hard import (
    Graph,
    Infeasible,
    apexes,
    blame,
    bound_at,
    build_graph,
    envelope,
    keep_order,
    keep_order_by_node,
)
from .lp import lp_maps
from .points import (
    AT_ENTRY_US,
    ORDER_ONLY,
    POINT_DTYPE,
    FitOptions,
    PiecewiseMap,
    curve_at,
    curve_slopes,
    rough_offsets,
    slacks,
    strongly_connected,
    undominated,
)

#: how often a rate limit too tight for the messages is doubled before the fit gives up
_RATE_DOUBLINGS = 10
#: a window counts as timely both ways for the stated error's floor where each direction's
#: fastest lies within this many ``timely_us`` of its least, and their sum of its kind's
#: least sum (``disagree.path_disagreement``)
_TIMELY_BOTH = 2.0
#: rounds of setting contradicting messages aside
_BLAME_ROUNDS = 8
#: where keeping every message ordered moves a node's estimate by more than this, the nodes
#: are placed one at a time from the reference outwards (``hard.keep_order_by_node``): the
#: joint step moves both sides of a misfit by half of it, so one node's estimate far off
#: (a link late one way in every exchange) moved its good neighbours by hundreds of
#: microseconds to milliseconds (a 6-node chain of 4 exchanges: a node 1.1 us off by its
#: estimate written 3.95 ms off)
_SPREAD_US = 80.0
_FAR_US = 80.0
#: ... by more than ``_SPREAD_US`` at this share of a node's message ends at least: a misfit
#: spread over a node, not an estimate that rounded rate steps' corners and was clipped
#: there (12-node rings whose rates stepped by up to 80 ppm: MPI every 3 s, 151 us moved at
#: under a tenth of a node's ends, placed node by node 130 us RMS and 0.8 ms off, now 9;
#: MPI every 7 s, moved at up to two fifths, 580 us RMS and 2.8 ms off, now 70)
_SPREAD_SHARE = 0.5


@dataclass
class NodeFit:
    maps: list[NodeMap | None]  # per node; None: not fitted (no messages both ways)
    min_slack: float = np.inf  # smallest fitted slack over all points, reference ticks
    reversed: int = 0  # points whose fitted slack is negative
    points: int = 0
    pool: int = 0  # points kept as hard constraints (no other implies them)
    rows: int = 0  # vertices of the constraint graph
    solves: int = 0  # constraint graphs solved
    segments: list[int] = field(default_factory=list)  # per node: straight pieces
    knots: list[np.ndarray | None] = field(default_factory=list)  # per node, reference ticks
    models: list[str] = field(default_factory=list)  # per node: the estimate's model
    contradicting: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    max_ppm: float = 0.0  # the rate limit of the bounds (raised where the messages need it)
    seconds: dict[str, float] = field(default_factory=dict)


def points_from_trace(dec: Decoded, matches: Matches,
                      entry_ticks: np.ndarray | None = None) -> np.ndarray:
    """The cross-node pairs of ``matches`` as POINT_DTYPE rows (records with a node clock);
    a point-to-point message's kind is its communicator and size, a collective's order has
    none; ``at_entry`` where the receive was recorded within ``AT_ENTRY_US`` of its MPI
    call's entry (``entry_ticks``: per record of ``dec``, ``mpi_entry.receive_entry_ticks``;
    default: read from ``dec``'s own ENTER and LEAVE records)."""
    pairs = matches.node_pairs
    rec = dec.records
    bef, aft = pairs["before"], pairs["after"]
    da, db = rec["domain"][bef], rec["domain"][aft]
    kinds = dec.domains["kind"]
    ok = (da >= 0) & (db >= 0)
    ok[ok] = (kinds[da[ok]] == DomainKind.NODE) & (kinds[db[ok]] == DomainKind.NODE)
    pts = np.zeros(int(ok.sum()), POINT_DTYPE)
    node = dec.domains["node"]
    bef, aft = bef[ok], aft[ok]
    pts["a"], pts["b"] = node[da[ok]], node[db[ok]]
    pts["ta"], pts["tb"] = rec["local"][bef], rec["local"][aft]
    pts["before"], pts["after"] = bef, aft
    p2p = np.isin(rec["code"][bef], [fmt.PpeCode.MPI_SEND, fmt.PpeCode.MPI_ISEND])
    size = (rec["c"][bef] & np.uint64(0xFFFFFFFF)).astype(np.int64)
    comm = (rec["a"][bef] & np.uint64(0x7FFFFFFF)).astype(np.int64)
    pts["kind"] = np.where(p2p, (comm << 32) | size, ORDER_ONLY)
    if entry_ticks is None:
        entry_ticks = receive_entry_ticks(dec)
    pts["at_entry"] = entry_ticks[aft] <= AT_ENTRY_US * 1e-6 * dec.manifest.timebase_hz
    return pts[pts["a"] != pts["b"]]


def fitted_node_maps(dec: Decoded, matches: Matches, options: FitOptions | None = None,
                     damage: DamageLog | None = None, extents: np.ndarray | None = None,
                     entry_ticks: np.ndarray | None = None) -> list[NodeMap]:
    """The converter's node maps: the fit where the messages reach a node both ways, the
    manifest's start times (``synchronize.start_time_maps``) for the other nodes. Messages
    that no clock maps can keep ordered together go to ``damage`` (first file and slot).
    ``extents``: per node the node timebase span of all its records, over which the
    guaranteed bound is stated (default: of ``dec``'s records, which may be the MPI records
    only). ``entry_ticks``: per record, ``points_from_trace``'s (default: read from ``dec``)."""
    maps = start_time_maps(dec)
    if dec.n_nodes < 2:
        return maps
    pts = points_from_trace(dec, matches, entry_ticks)
    fit = fit_points(pts, dec.n_nodes, dec.manifest.node_of_rank(0), dec.manifest.timebase_hz,
                     options, extents=node_extents(dec) if extents is None else extents)
    if fit.contradicting.size and damage is not None:
        bad = pts[fit.contradicting]
        recs = np.concatenate([bad["before"], bad["after"]])
        first = int(recs[np.argmin(dec.records["slot"][recs])])
        rank = int(dec.locations["rank"][dec.records["loc"][first]])
        damage.add(DamageKind.contradicting_messages, dec.dump_names[rank],
                   int(dec.records["slot"][first]), int(bad.size),
                   "MPI messages that contradict each other under every clock map (a "
                   "receive that would precede its send whatever the node clocks did): "
                   "not used to place the node clocks")
    return [m if m is not None else s for m, s in zip(fit.maps, maps, strict=True)]


def fit_nodes(dec: Decoded, matches: Matches, options: FitOptions | None = None,
              method: str = "fit") -> NodeFit:
    """Fit every node of a decoded trace (reference: the node of rank 0). ``method``: "fit" or
    "constant" (one offset per node, no message kept by force: the published algorithm's
    model, a baseline)."""
    man = dec.manifest
    pts = points_from_trace(dec, matches)
    return fit_points(pts, dec.n_nodes, man.node_of_rank(0), man.timebase_hz, options, method,
                      extents=node_extents(dec))


def fit_points(points: np.ndarray, n_nodes: int, ref: int, hz: float,
               options: FitOptions | None = None, method: str = "fit",
               extents: np.ndarray | None = None) -> NodeFit:
    """Fit node maps to message points (POINT_DTYPE, e.g. gathered from several processes);
    ``method`` "fit" (the estimate, then every message kept) or "constant" (one offset per
    node from the estimate alone, a baseline). ``extents``: per node the node timebase span
    of its records, where the bound is stated up to."""
    o = options or FitOptions()
    if method == "constant":
        o = replace(o, models=("constant",))
    elif method != "fit":
        raise ValueError(f"unknown node fit method {method!r}")
    secs = {"prepare": 0.0, "estimate": 0.0, "order": 0.0, "bounds": 0.0}
    t0 = time.perf_counter()
    pts = points[(points["a"] != points["b"]) & (points["a"] >= 0) & (points["b"] >= 0)]
    maps: list[NodeMap | None] = [None] * n_nodes
    maps[ref] = NodeMap(0.0, 1.0, 0.0, "reference")
    fit = NodeFit(maps, points=int(pts.size), segments=[0] * n_nodes, knots=[None] * n_nodes,
                  models=[""] * n_nodes, max_ppm=o.max_ppm)
    fitted = strongly_connected(pts, n_nodes, ref)
    index = np.flatnonzero(fitted[pts["a"]] & fitted[pts["b"]])
    pts = pts[index]
    if pts.size == 0:
        return fit
    c = rough_offsets(pts, n_nodes, ref)
    secs["prepare"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    hard = undominated(pts, n_nodes)
    eps = eps_first = o.max_ppm * 1e-6
    # the graph of every message and its envelope at the rate limit, latency 0: the
    # estimate's first curves, and the bounds below unless messages are set aside or the
    # limit raised (the same graph, latency and limit: the same shortest paths)
    g_first = build_graph(pts[hard], n_nodes, ref, c)
    try:
        env_first: tuple[np.ndarray, np.ndarray] | None = envelope(g_first, 0.0, eps,
                                                                   np.zeros(g_first.size))
    except Infeasible:
        env_first = None
    env_lines = _envelope_lines(g_first, env_first, n_nodes, ref)
    curves = estimate(pts, n_nodes, ref, c, hz, o, prior=env_lines)
    _hold_no_rate(curves, eps, g_first, env_first, env_lines)
    lonely = [n for n in np.flatnonzero(fitted).tolist()
              if n != ref and curves.knots[n] is None]
    if lonely:  # no symmetric kind links them: centred between all messages instead
        # lp_maps keeps the undominated points only: given them, it keeps them all (the
        # same fit) without sorting every point once more
        centred = lp_maps(pts[hard], n_nodes, ref, hz)
        for n in lonely:
            m = centred[n]
            if isinstance(m, PiecewiseMap):  # lp_maps gives piecewise maps or None
                kn = np.asarray(m.knots_node, dtype=np.float64)
                curves.knots[n] = kn
                curves.values[n] = np.asarray(m.knots_ref) - kn - c[n]
                curves.model[n] = "all kinds"
        _hold_railed(curves, lonely, eps, g_first, env_first)
    if method == "constant":  # the baseline: one offset per node, the curve's middle
        for n, kc in enumerate(curves.knots):
            vals = curves.values[n]
            if kc is not None and vals is not None:
                curves.knots[n] = np.r_[kc[0], max(kc[-1], kc[0] + 1.0)]
                curves.values[n] = np.full(2, _middle(kc, vals))
                curves.model[n] = "constant"
    fit.models = list(curves.model)
    secs["estimate"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    lat = o.min_latency_ticks if method == "fit" else 0.0
    dropped = np.zeros(0, np.int64)
    z = None
    g = g_first
    for _ in range(_BLAME_ROUNDS + _RATE_DOUBLINGS):
        h = offsets_at(curves.knots, curves.values, g.node, g.x)
        h[np.array([curves.knots[n] is None for n in range(n_nodes)])[g.node]] = np.nan
        h[0] = 0.0
        fit.solves += 1
        if method != "fit":
            z = np.nan_to_num(h, nan=0.0)
            break
        try:
            z, _, _ = keep_order(g, h, lat, eps)
            moved, spread = _moved_by(g, z, h, n_nodes, _SPREAD_US * 1e-6 * hz)
            if spread.max() >= _SPREAD_SHARE:
                # the estimate misfit somewhere by more than that: placed node by node from
                # the reference outwards, a node's misfit moves that node, not its neighbours
                z = keep_order_by_node(g, h, lat, eps, _hop_order(pts, n_nodes, ref, moved),
                                       _FAR_US * 1e-6 * hz)
            break
        except Infeasible:
            bad = blame(g, np.nan_to_num(h, nan=0.0), 0.0)
            if bad.size:
                dropped = np.r_[dropped, hard[bad]]
                hard = np.delete(hard, bad)
                g = build_graph(pts[hard], n_nodes, ref, c)  # of the messages kept
            elif eps < 0.25:
                eps *= 2.0
            else:
                break
    if z is None:
        return fit  # nothing keeps the messages: the caller falls back to start times
    fit.contradicting = index[np.sort(dropped)]
    fit.max_ppm = eps * 1e6
    fit.pool, fit.rows = int(hard.size), g.size
    secs["order"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    # every map that keeps every message (the first envelope's, on its graph and limit)
    if env_first is not None and g is g_first and eps == eps_first:
        lower, upper = env_first
    else:
        lower, upper = envelope(g, 0.0, eps, z)
    label = "fit" if method == "fit" else method
    for n in np.flatnonzero(fitted).tolist():
        if n == ref:
            continue
        v = np.flatnonzero(g.node == n)
        xs, zv = g.x[v], z[v]
        ext = extents[n] if extents is not None else np.array([np.nan, np.nan])
        kn, kz = _map_knots(curves, n, xs, zv, h[v], ext)
        span = np.array([np.nanmin(np.r_[xs, kn, ext]), np.nanmax(np.r_[xs, kn, ext])])
        mid = 0.5 * float(span[0] + span[1])
        m = midpoint_map(kn, kn + c[n] + kz, mid, label)
        if method == "constant":
            m.rate, m.offset = 1.0, float(c[n] + kz[0])
        if method == "fit":
            m.piece_bounds, m.bound = _bounds(m, c[n], xs, lower[v], upper[v], eps, span)
        m.estimate_error = (float(curves.error[n]) if np.isfinite(curves.error[n])
                            else None)
        maps[n] = m
        fit.segments[n] = kn.size - 1
        fit.knots[n] = kn + c[n]
    slack = slacks(pts, maps)
    if method == "fit":  # the residuals may hide what the maps miss: the stated error is
        # never less than the two-way disagreement of the messages with the maps. Where the
        # curves followed a drift their lines missed, over the windows whose two fastest sum
        # near the least of their kind (a pair late one way every time has none); else over
        # the windows timely both ways (a round that kept few messages, or a kind's one
        # timely message back, leaves residuals that say nothing), and not where no error
        # is stated
        followed = curves.followed_drift
        off = path_disagreement(pts, slack, maps, n_nodes, ref,
                                4.0 * o.outlier_us * 1e-6 * hz,
                                timely_ticks=None if followed
                                else _TIMELY_BOTH * o.timely_us * 1e-6 * hz)
        for n in np.flatnonzero(off > 0).tolist():
            m = maps[n]
            if m is not None and n != ref and (followed or m.estimate_error is not None):
                m.estimate_error = max(m.estimate_error or 0.0, float(off[n]))
        # no pair with such windows reaches the node: nothing measured its map
        for n in np.flatnonzero(np.isnan(off)).tolist():
            m = maps[n]
            if m is not None and n != ref:
                m.estimate_error = None
    # no error stated where the assumption cannot centre a node (judged on the delays under
    # the maps: not where the curves followed a drift their lines missed, whose maps may
    # still miss it, which that floor above states)
    if method == "fit" and not curves.followed_drift:
        for n in np.flatnonzero(one_way_only(pts, slack, n_nodes, ref,
                                             o.timely_us * 1e-6 * hz,
                                             o.floor_messages)).tolist():
            m = maps[n]
            if m is not None and n != ref:
                m.estimate_error = None
    # never an expected error above the guaranteed bound, which holds the truth whatever the
    # latencies (a floor over windows of a pair late one way in every exchange stated 141 ms
    # for maps 30-90 us off, bound by 6 ms)
    for m in maps:
        if (m is not None and m.estimate_error is not None and m.bound is not None
                and np.isfinite(m.bound)):
            m.estimate_error = min(m.estimate_error, float(m.bound))
    secs["bounds"] = time.perf_counter() - t3
    fit.min_slack = float(np.nanmin(slack)) if slack.size else np.inf
    fit.reversed = int((slack < 0).sum())
    fit.seconds = secs
    return fit


def _moved_by(g: Graph, z: np.ndarray, h: np.ndarray, n_nodes: int, spread: float
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per node, the most ``keep_order`` moved one of its vertices from the estimate ``h``
    (0 where it has none), and the share of its vertices it moved by more than ``spread``."""
    change = np.abs(z - h)
    change[~np.isfinite(change)] = 0.0
    moved = np.zeros(n_nodes)
    np.maximum.at(moved, g.node, change)
    far = np.bincount(g.node, weights=(change > spread).astype(float), minlength=n_nodes)
    size = np.bincount(g.node, minlength=n_nodes)
    return moved, far / np.maximum(size, 1)


def _hop_order(pts: np.ndarray, n_nodes: int, ref: int, moved: np.ndarray) -> list[int]:
    """The nodes but the reference by their hops from it over the node pairs with messages
    (breadth first), of equal hops the least moved (``moved``) first; nodes not reached last."""
    link = np.zeros((n_nodes, n_nodes), dtype=bool)
    link[pts["a"], pts["b"]] = link[pts["b"], pts["a"]] = True
    hops = np.full(n_nodes, n_nodes + 1)
    hops[ref] = 0
    frontier = [ref]
    while frontier:
        nxt = [int(m) for m in np.flatnonzero(link[frontier].any(axis=0) & (hops > n_nodes))]
        for m in nxt:
            hops[m] = hops[frontier[0]] + 1
        frontier = nxt
    return [int(n) for n in np.lexsort((moved, hops)) if n != ref]


def _middle(knots: np.ndarray, values: np.ndarray) -> float:
    """A curve's value halfway between its first and last knot."""
    return float(curve_at(knots, values, np.array([0.5 * (knots[0] + knots[-1])]))[0])


def _inside(env: tuple[np.ndarray, np.ndarray], g, n: int, value: float) -> bool:  # noqa: ANN001
    """Whether the constant ``value`` lies inside the envelope ``env`` of graph ``g`` at
    every vertex of node ``n``."""
    v = g.node == n
    return not np.any((value < env[0][v]) | (value > env[1][v]))


def _hold(curves, n: int, value: float) -> None:  # noqa: ANN001
    """Node ``n``'s curve held at ``value`` throughout, with no rate and no expected error."""
    curves.values[n] = np.full(curves.knots[n].size, value)
    curves.model[n] = "no rate"
    curves.error[n] = np.nan


def _hold_no_rate(curves, eps: float, g, env: tuple[np.ndarray, np.ndarray] | None,  # noqa: ANN001
                  env_lines: list[tuple[np.ndarray, np.ndarray] | None]) -> list[int]:
    """Where a node's curve runs faster or slower than the rate limit ``eps`` anywhere, its
    messages did not resolve its rate (a clock cannot drift so far: few exchanges, or a run
    too short, under latency noise): hold no rate there, the curve's value halfway along its
    span throughout; where that value leaves the envelope ``env`` of graph ``g`` (the maps
    that keep every message ordered) at one of the node's vertices, the curve's offset is as
    unresolved as its rate: the line through the envelope's middle (``env_lines``) instead.
    Either way no expected error (the guaranteed bound still says how far it may be).
    Returns those nodes. ``curves``: the estimate's (``estimate.Curves``), changed in place."""
    held = []
    for n, (kc, vals) in enumerate(zip(curves.knots, curves.values, strict=True)):
        if kc is None or vals is None or kc.size < 2 or np.max(curve_slopes(kc, vals)) <= eps:
            continue
        middle = _middle(kc, vals)
        _hold(curves, n, middle)
        held.append(n)
        line = env_lines[n]
        if env is not None and line is not None and not _inside(env, g, n, middle):
            curves.knots[n], curves.values[n] = line
            curves.model[n] = "envelope"
    return held


def _hold_railed(curves, nodes: list[int], eps: float, g,  # noqa: ANN001
                 env: tuple[np.ndarray, np.ndarray] | None) -> list[int]:
    """Of ``nodes`` (curves centred between all messages, ``lp.lp_maps``, whose own rate
    limit is wider), those whose every piece runs at or beyond the rate limit ``eps``: the
    centring did not resolve their rate (on a run too short for its latencies, e.g. 10 ms,
    that is where its optimum lands), so where the curve's value halfway along its span
    stays inside the envelope ``env`` of graph ``g`` (the maps that keep every message
    ordered) at every vertex of the node, hold that value throughout, with no expected
    error. A rate within the limit is kept: on 30 ms the centring resolves drifts of 50-100
    ppm. Returns those nodes; ``curves`` changed in place."""
    held: list[int] = []
    if env is None:
        return held
    for n in nodes:
        kc, vals = curves.knots[n], curves.values[n]
        if kc is None or vals is None or kc.size < 2:
            continue
        if np.min(curve_slopes(kc, vals)) < eps * (1.0 - 1e-6):
            continue
        middle = _middle(kc, vals)
        if _inside(env, g, n, middle):
            _hold(curves, n, middle)
            held.append(n)
    return held


def _envelope_lines(g, env: tuple[np.ndarray, np.ndarray] | None, n_nodes: int, ref: int
                    ) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per node a straight line through the middle of the envelope ``env`` the messages
    leave it in graph ``g`` (every map within the rate limit that keeps every message
    ordered; None: no map does), each vertex weighted by how narrow the envelope is there: a
    first curve that needs no assumption on latencies, for nodes no symmetric kind pins. None
    where the envelope is open."""
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * n_nodes
    if env is None:
        return out
    lower, upper = env
    for n in range(n_nodes):
        v = np.flatnonzero((g.node == n) & np.isfinite(lower) & np.isfinite(upper))
        if n == ref or v.size == 0:
            continue
        x, mid = g.x[v], 0.5 * (lower[v] + upper[v])
        w = 1.0 / (upper[v] - lower[v] + 1.0) ** 2
        xm = float(np.sum(w * x) / w.sum())
        ym = float(np.sum(w * mid) / w.sum())
        var = float(np.sum(w * (x - xm) ** 2))
        slope = float(np.sum(w * (x - xm) * (mid - ym)) / var) if var > 0 else 0.0
        ends = np.array([x.min(), max(x.max(), x.min() + 1.0)])
        out[n] = (ends, ym + slope * (ends - xm))
    return out


def _map_knots(curves, n: int, xs: np.ndarray, zv: np.ndarray, hv: np.ndarray,
               ext: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A node's knots (node timebase) and offsets beyond ``x + c`` there: the estimate's
    curve (its two ends where it is a line) plus the vertices the hard constraints moved and
    their neighbours, the move interpolated between vertices. Where a vertex at an end moved,
    the map goes on to the node's records ``ext`` (first, last) at its mean rate over its
    knots, not with the slope of a short piece between two moved vertices."""
    kc = curves.knots[n]
    if kc is None:  # no estimate: the offsets the constraints leave, vertex by vertex
        kn, kz = xs, zv
    else:
        est = _bends(kc, curves.values[n])
        move = zv - hv
        moved = np.abs(move) > 1e-6
        near = moved.copy()
        near[1:] |= moved[:-1]
        near[:-1] |= moved[1:]
        kn = np.unique(np.r_[est, xs[near]])
        kz = curve_at(kc, curves.values[n], kn)
        if moved.any():
            kz = kz + np.interp(kn, xs, np.where(moved, move, 0.0))
            # out to the records where a move at an end would tilt the map: on at the map's
            # mean rate over its knots (a smooth estimate's end piece can be as steep)
            fin = ext[np.isfinite(ext)]
            before = fin[fin < kn[0]] if near[0] else np.zeros(0)  # near: moved or beside
            after = fin[fin > kn[-1]] if near[-1] else np.zeros(0)
            if (before.size or after.size) and kn[-1] > kn[0]:
                slope = (kz[-1] - kz[0]) / (kn[-1] - kn[0])
                kn, kz = (np.r_[before, kn, after],
                          np.r_[kz[0] + slope * (before - kn[0]), kz,
                                kz[-1] + slope * (after - kn[-1])])
    if kn.size == 1:
        kn, kz = np.r_[kn, kn + 1.0], np.r_[kz, kz]
    return kn, kz


def _bends(kn: np.ndarray, kz: np.ndarray, tol: float = 1e-3) -> np.ndarray:
    """The knots of a piecewise-linear curve where it bends by more than ``tol`` ticks (a
    straight curve keeps its two ends)."""
    if kn.size <= 2:
        return kn
    mid = kz[:-2] + (kz[2:] - kz[:-2]) * (kn[1:-1] - kn[:-2]) / (kn[2:] - kn[:-2])
    bend = np.abs(kz[1:-1] - mid) > tol
    return np.r_[kn[0], kn[1:-1][bend], kn[-1]]


def _bounds(m: PiecewiseMap, c: float, xs: np.ndarray, lower: np.ndarray, upper: np.ndarray,
            eps: float, span: np.ndarray) -> tuple[np.ndarray, float]:
    """Per piece of ``m`` and over the node's span, the largest distance from the map to the
    envelope (every map within the rate limit that keeps every message ordered)."""
    kn = m.knots_node
    at = np.unique(np.r_[kn, xs, apexes(xs, lower, upper, eps), span])
    at = at[(at >= min(span[0], kn[0])) & (at <= max(span[1], kn[-1]))]
    lo, up = bound_at(xs, lower, upper, eps, at)
    z = m.to_reference(at) - at - c
    b = np.maximum(up - z, z - lo)
    piece = np.clip(np.searchsorted(kn, at, side="right") - 1, 0, kn.size - 2)
    out = np.zeros(kn.size - 1)
    np.maximum.at(out, piece, b)
    on_knot = np.isin(at, kn) & (piece > 0)  # a knot also ends the piece before it
    np.maximum.at(out, piece[on_knot] - 1, b[on_knot])
    return out, float(b.max()) if b.size else 0.0


def midpoint_map(kn: np.ndarray, kr: np.ndarray, x_mid: float, method: str) -> PiecewiseMap:
    m = PiecewiseMap(0.0, 1.0, None, method, knots_node=kn, knots_ref=kr)
    j = int(np.clip(np.searchsorted(kn, x_mid, side="right") - 1, 0, kn.size - 2))
    rate = float((kr[j + 1] - kr[j]) / (kn[j + 1] - kn[j]))
    m.rate = rate
    m.offset = float(m.to_reference(x_mid) - rate * x_mid)
    return m
