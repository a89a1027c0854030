"""How far the fitted node maps are from what their own messages say under the estimate's
assumption (messages of one kind take the same least time both ways): per node pair, in
windows of a few messages each way where neither direction's fastest was received late, half
the difference of the two directions' fastest delays under the maps is the maps' error there;
its size (the root of the 90th percentile of its squares) per pair, and per node its pairs'
added in quadrature along its path from the reference. A floor for the stated expected error
of a node's map that no residual of the fit can hide (a rate change the curves missed leaves
the fitted messages close to the curves and the two-way centres far from them). The two-way centres
(``two_way_centres``) also serve the estimate's test for a missed drift. And the nodes whose
error the assumption cannot state (``one_way_only``: every route to them crosses a link late
one way in every exchange that no other pair's latency centres). It changes no map and
bounds nothing."""

from __future__ import annotations

import numpy as np

from ...model import NodeMap
from ...native.graph_loops import breadth_first
from .floors import least_and_near
from .points import ORDER_ONLY, by_node, map_to_reference

#: a pair's disagreement is the root of this quantile of its windows' squares, not of their
#: median: a map off by tens of microseconds near its rate steps only (a 4-node chain, MPI
#: every 7 s, five steps: its end node 23 us RMS, 167 us max) stated 1.2 us from the median,
#: 24 us from this; where the maps are good (a 4-node ring, MPI every 2 s: 0.7-1.3 us RMS)
#: it states 0.9-1.1 us
_QUANTILE = 0.9
#: ticks added to a receive recorded as its call began, for the floor on the windows timely
#: both ways: far beyond any latency, so that it is never timely
_AT_ENTRY_LATE = 1e15


def two_way_centres(delay: np.ndarray, group: np.ndarray, back: np.ndarray, win: np.ndarray,
                    n_groups: int, n_win: int, late_ticks: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group (a kind and node pair) and window with messages both ways, unless their two
    fastest ``delay`` s sum to more than ``late_ticks`` above the least such sum of the group
    (one of them was received late): half the difference of the forward and the backward
    fastest (``back`` 0 / 1), which is the offset error there of the clocks the delays were
    taken under, plus half the difference of the two directions' least latencies. Returns
    (group, window, half) of those windows."""
    return _centres(_window_floors(delay, group, back, win, n_groups, n_win), late_ticks)


def _window_floors(delay: np.ndarray, group: np.ndarray, back: np.ndarray, win: np.ndarray,
                   n_groups: int, n_win: int) -> np.ndarray:
    """Per group, direction and window the fastest ``delay`` (inf where none)."""
    floor = np.full((n_groups, 2, n_win), np.inf)
    np.minimum.at(floor, (group, back, win), delay)
    return floor


def _centres(floor: np.ndarray, late_ticks: float, timely_ticks: float | None = None,
             kind_of: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``two_way_centres`` of the windows' fastest delays ``floor`` (``_window_floors``).
    ``kind_of`` (each group's kind): also leave out a window whose two fastest sum to more
    than ``late_ticks`` above the least such sum of its kind's groups, or with
    ``timely_ticks``, more than those ticks above it, and then also unless each
    direction's fastest lies within those ticks of the direction's least and below
    ``_AT_ENTRY_LATE`` (a pair late one way in every exchange has no such window)."""
    both = np.isfinite(floor).all(axis=1)
    forward, backward = np.where(both, floor[:, 0], 0.0), np.where(both, floor[:, 1], 0.0)
    total = np.where(both, forward + backward, np.inf)
    both &= total <= total.min(axis=1)[:, None] + late_ticks
    if timely_ticks is not None:
        least = floor.min(axis=2)
        both &= ((forward <= least[:, :1] + timely_ticks)
                 & (backward <= least[:, 1:] + timely_ticks))
        both &= (forward < _AT_ENTRY_LATE) & (backward < _AT_ENTRY_LATE)
    if kind_of is not None and kind_of.size:  # near the least sum of the kind's groups
        usual = np.full(int(kind_of.max()) + 1, np.inf)
        np.minimum.at(usual, kind_of, total.min(axis=1))
        margin = late_ticks if timely_ticks is None else timely_ticks
        both &= total <= usual[kind_of][:, None] + margin
    g, w = np.nonzero(both)
    return g, w, 0.5 * (forward[g, w] - backward[g, w])


def _mirrored_centres(floor: np.ndarray, near: float, kind_of: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of the windows' fastest delays ``floor`` (``_window_floors``), per group whose one
    direction's least delay exceeds by ``near`` the least sum of its kind's pairs' two least
    delays (so it came late in every exchange; the estimate centres such a pair on that
    sum), per window with messages the other way: half that sum less the other way's
    fastest, signed as the forward minus the backward ((group, window, half), as
    ``two_way_centres``)."""
    least = floor.min(axis=2)
    real = np.isfinite(least).all(axis=1) & (least.max(axis=1) < _AT_ENTRY_LATE)
    least_sum = np.full(int(kind_of.max()) + 1, np.inf)
    np.minimum.at(least_sum, kind_of[real], least[real].sum(axis=1))
    usual = least_sum[kind_of]
    late = (np.isfinite(least).all(axis=1) & np.isfinite(usual))[:, None] & (
        least > usual[:, None] + near)
    gs, ws, half = [], [], []
    for side in (0, 1):
        other = floor[:, 1 - side]
        ok = (late[:, side] & ~late[:, 1 - side])[:, None] & (other < _AT_ENTRY_LATE)
        gm, wm = np.nonzero(ok)
        half.append((0.5 * usual[gm] - other[gm, wm]) * (1.0 if side == 0 else -1.0))
        gs.append(gm)
        ws.append(wm)
    return np.concatenate(gs), np.concatenate(ws), np.concatenate(half)


def path_disagreement(pts: np.ndarray, delay: np.ndarray, maps: list[NodeMap | None],
                      n_nodes: int, ref: int, late_ticks: float, window_messages: int = 2,
                      timely_ticks: float | None = None) -> np.ndarray:
    """Per node, the two-way disagreements (ticks) of the node pairs on its path from the
    reference added in quadrature (breadth first over the pairs that have such windows;
    independent links' errors add so along a chain); 0 for the reference,
    NaN for the nodes no checked pair reaches. ``pts``: POINT_DTYPE; ``delay``: their delays
    under ``maps`` (``points.slacks``); ``late_ticks``: a window whose two fastest delays sum
    to more than this above the least such sum of its kind and pair is left out (one of them
    was received late), or above the least such sum of its kind's pairs. ``timely_ticks``:
    only windows timely both ways by that margin (``_centres``), and no receive recorded as
    its call began."""
    out = np.full(n_nodes, np.nan)
    out[ref] = 0.0
    if timely_ticks is not None:  # such a receive had come before its call: late by an
        # unknown time, never timely (a direction of nothing else is late every time)
        delay = np.where(pts["at_entry"], delay + _AT_ENTRY_LATE, delay)
    pts, delay, back, groups, group, n_k = _kind_groups(pts, delay, n_nodes)
    if pts.size == 0:
        return out
    a = pts["a"].astype(np.int64)
    t = np.zeros(pts.size)  # the send in reference ticks
    for n, sel in by_node(a):
        m = maps[n]
        if m is not None:
            t[sel] = map_to_reference(m, pts["ta"][sel])
    t -= t.min()
    real = delay < _AT_ENTRY_LATE  # the windows hold about so many of these each way
    count = np.bincount((group * 2 + back)[real], minlength=2 * groups.size)
    span = float(t.max())
    per = span / max(float(np.median(count[count > 0])), 1.0)
    width = max(per * window_messages, span / 2000.0, 1.0)
    n_win = int(span // width) + 1
    win = np.minimum((t // width).astype(np.int64), n_win - 1)
    floor = _window_floors(delay, group, back, win, groups.size, n_win)
    g, _, half = _centres(floor, late_ticks, timely_ticks, groups % n_k)
    mirror = np.zeros(g.size, dtype=bool)
    if timely_ticks is not None:
        gm, _, hm = _mirrored_centres(floor, timely_ticks, groups % n_k)
        g, half, mirror = np.r_[g, gm], np.r_[half, hm], np.r_[mirror, np.ones(gm.size, bool)]
    if g.size == 0:
        return out
    pairs, at = np.unique(groups[g] // n_k, return_inverse=True)
    at = at.ravel()
    size = np.zeros(pairs.size)  # of the two-way windows
    size_mirrored = np.zeros(pairs.size)
    for i in range(pairs.size):  # per node pair (a handful)
        h, hm = half[(at == i) & ~mirror], half[(at == i) & mirror]
        if timely_ticks is None:  # the root of a high quantile
            size[i] = float(np.sqrt(np.quantile(h ** 2, _QUANTILE)))
        elif h.size:  # the mean and its standard error: the centring's bias, not jitter
            size[i] = float(np.sqrt(np.mean(h) ** 2 + np.var(h) / h.size))
        if hm.size:  # the median: the timely way's windows may hold late receives too
            size_mirrored[i] = abs(float(np.median(hm)))
    # the two-way windows' pairs alone, then with the mirrored pairs (which may reach a node
    # by another route): per node the larger
    two_way = np.isin(np.arange(pairs.size), at[~mirror])
    if two_way.any():
        out = _along_paths(pairs[two_way], size[two_way], n_nodes, ref)
    if mirror.any():
        out = np.fmax(out, _along_paths(pairs, np.maximum(size, size_mirrored), n_nodes,
                                        ref))
    return out


def _along_paths(pairs: np.ndarray, size: np.ndarray, n_nodes: int, ref: int) -> np.ndarray:
    """Per node, the root of the sum of the squared ``size`` of the node pairs (lo * n + hi)
    on its breadth-first path from ``ref`` (NaN where none reaches it)."""
    out = np.full(n_nodes, np.nan)
    out[ref] = 0.0
    p_lo, p_hi = pairs // n_nodes, pairs % n_nodes
    order, pred = breadth_first(n_nodes, p_lo, p_hi, ref, directed=False)
    weight = {(int(x), int(y)): float(s) for x, y, s in zip(p_lo, p_hi, size, strict=True)}
    for n in order[1:].tolist():
        p = int(pred[n])
        out[n] = float(np.hypot(out[p], weight[(min(n, p), max(n, p))]))
    return out


def one_way_only(pts: np.ndarray, delay: np.ndarray, n_nodes: int, ref: int,
                 near_ticks: float, n_min: int) -> np.ndarray:
    """Per node: does every route of node pairs from the reference to it cross a link that
    the estimate's assumption cannot centre? Such a link's messages of some kind go both ways
    but one direction has no cluster at its least delay (at most one in 50 of its messages
    within ``near_ticks`` of its least, so 50 messages or more: received late in every
    exchange) or was received at its receive calls' entry every time with a two-way sum above
    its kind's usual one (``_late_at_entry``), and no node pair shows that kind's usual
    latency (both directions with ``n_min`` messages within ``near_ticks`` of their least),
    so its offset is half its lateness off, which nothing measures (a 2-node run of 7
    minutes: 3.0 ms, against 0.34 us stated). A link counts as centred where a kind goes
    both ways with neither direction so late, or with one so late and the kind's usual
    latency shown by another pair (it is mirrored on that). A node linked to the reference
    by no kind both ways is not judged here. ``delay``: the points' delays under the final
    maps (``points.slacks``)."""
    out = np.zeros(n_nodes, dtype=bool)
    pts, delay, back, groups, group, n_k = _kind_groups(pts, delay, n_nodes)
    if pts.size == 0:
        return out
    d_key = group * 2 + back
    n_dir = 2 * groups.size
    least, near = least_and_near(delay, d_key, n_dir, near_ticks)
    count = np.bincount(d_key, minlength=n_dir)
    present = count > 0
    # no cluster at its least (the least itself is near: 50 messages at least)
    late = present & (near * 50 <= count)
    late |= _late_at_entry(pts["at_entry"], delay, d_key, groups % n_k, n_k, least, count,
                           near_ticks / 4)
    both = present[0::2] & present[1::2]
    timely = both & ~late[0::2] & ~late[1::2]
    shown = np.zeros(n_k, dtype=bool)
    shown[(groups % n_k)[timely & (np.minimum(near[0::2], near[1::2]) >= n_min)]] = True
    centred = timely | (both & shown[groups % n_k])
    pair = groups // n_k
    reach_all = _reached(n_nodes, pair[both], ref)
    reach_centred = _reached(n_nodes, pair[centred], ref)
    return reach_all & ~reach_centred


def _late_at_entry(at_entry: np.ndarray, delay: np.ndarray, d_key: np.ndarray,
                   kind_of: np.ndarray, n_k: int, least_all: np.ndarray, count: np.ndarray,
                   margin: float) -> np.ndarray:
    """Per direction (``d_key`` = group * 2 + backward, ``kind_of`` per group; ``least_all``
    and ``count`` its least delay and its messages, as ``one_way_only`` has them): is every
    receive of it recorded as its receive call began (``at_entry``: each message had come
    before the call, so none says when it came), by more than ``margin`` on the pair's
    least two-way sum over the least of its kind's pairs with receives waited for both
    ways, or with no such pair (so nothing tells a few microseconds of lateness from
    hundreds of milliseconds: a 3-node chain of seven exchanges, both links so one way,
    was 77 ms off against 0.26 us stated), and its other direction's least delay not
    within four times ``margin`` of half that least sum (where it is, the estimate mirrored
    the link on the kind's usual latency: 10 exchanges of a 12-node chain, such a link
    late by 88 us, its node 0.06 us off)?"""
    n_dir = 2 * kind_of.size
    at = np.bincount(d_key, weights=at_entry.astype(np.float64), minlength=n_dir)
    every = (count > 0) & (at == count)
    if not every.any():
        return every
    least_waited, _ = least_and_near(delay[~at_entry], d_key[~at_entry], n_dir, 0.0)
    least = np.where(np.isfinite(least_waited), least_waited, least_all)
    two_way = least[0::2] + least[1::2]
    both_waited = np.isfinite(least_waited[0::2]) & np.isfinite(least_waited[1::2])
    usual = np.full(n_k, np.inf)
    np.minimum.at(usual, kind_of[both_waited], two_way[both_waited])
    raised = np.repeat(~np.isfinite(usual[kind_of]) | (two_way > usual[kind_of] + margin), 2)
    # ... and not mirrored: its other direction's least delay under the maps is not the
    # kind's usual half sum (the estimate mirrors such a link where it tells it late)
    half = np.repeat(usual[kind_of] / 2.0, 2)
    other = least_waited[np.arange(n_dir) ^ 1]
    centred = np.isfinite(half) & np.isfinite(other)
    centred[centred] = np.abs(other[centred] - half[centred]) <= 4.0 * margin
    return every & raised & ~centred


def _kind_groups(pts: np.ndarray, delay: np.ndarray, n_nodes: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The point-to-point messages between two nodes with a finite ``delay``, grouped by
    kind and node pair: (their points, delays, backward (1 where sent from the pair's higher
    node), the groups' keys ((lo * ``n_nodes`` + hi) * kinds + kind, sorted), each one's
    group, the number of kinds)."""
    use = (pts["a"] != pts["b"]) & (pts["a"] >= 0) & (pts["b"] >= 0) & (
        pts["kind"] != ORDER_ONLY) & np.isfinite(delay)
    pts, delay = pts[use], delay[use]
    a, b = pts["a"].astype(np.int64), pts["b"].astype(np.int64)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    _, kind = np.unique(pts["kind"], return_inverse=True)
    n_k = int(kind.max()) + 1 if kind.size else 1
    groups, group = np.unique((lo * n_nodes + hi) * n_k + kind.ravel(), return_inverse=True)
    return pts, delay, (a != lo).astype(np.int64), groups, group.ravel(), n_k


def _reached(n_nodes: int, pairs: np.ndarray, ref: int) -> np.ndarray:
    """Per node: reached from ``ref`` over the undirected node ``pairs`` (lo * n + hi)?"""
    out = np.zeros(n_nodes, dtype=bool)
    out[ref] = True
    if pairs.size:
        order, _ = breadth_first(n_nodes, pairs // n_nodes, pairs % n_nodes, ref,
                                 directed=False)
        out[order] = True
    return out
