"""Node pairs whose messages of a symmetric kind came late one way in every exchange (a busy
receiver whose receives all complete in a later ``MPI_Waitall``), or in all but one or two. The
estimate's assumption, the same least latency both ways, would centre such a pair between a
timely and a late direction, off by half the lateness, or tilt it through its few timely
messages: milliseconds. Per kind and node pair, a window is late one way when its fastest delay
that way lies above the line through its neighbours' or above what the rate limit lets the
direction's other windows allow (a run of late windows passes the first test at a run's ends);
a direction is timely when few of its windows are late (the chord's robust scatter within a
quarter of the lateness margin, or at most a quarter of its windows), scattered when that
scatter exceeds the margin. Adding to a late message's delay the timely direction's at the same
time (along its own messages near its windows' fastest, its late windows left out: a wandering
clock moves within a window) gives what no smooth error of the clocks changes: twice the least
latency plus that message's lateness; against its usual value over the kind's node pairs (the
median of those within the margin of the least, from pairs timely both ways or timely one way,
none from a pair whose least sum is not positive: its timely direction's curve is off), a
scattered direction with at most two messages within the margin of it (for the estimate's start
lines: or in at most ``timely_share`` of its windows, as a few timely windows of a wandering
clock pin no line) is late one way. ``late_one_way`` names those directions; the estimate
replaces their messages by the timely direction's, mirrored (``mirrored``; the timely
direction's own late messages are not), so that such a pair is centred where its timely
direction takes half the kind's usual two-way sum: an assumption (a kind's least latency alike
on every node pair) made only there (with two node pairs of a kind, the other pair's sum: the
smaller sum is the one no lateness raised). A pair whose directions take turns at being late
gives its kind a two-way sum from messages sent together (one exchange), where two exchanges
agree on it, else from each direction's timely messages between two of the other's close around
it. It decides nothing where fewer than two node pairs share a kind, where a direction has
fewer than three windows, or where no direction is timely. A pair of such a kind whose
directions take turns at being late, never timely together, with too few timely messages
one way for a line, gives way too (``taking_turns``): its late messages dropped, its timely
ones mirrored with the kind's usual sum."""

from __future__ import annotations

import numpy as np

from .points import curve_at

#: a scattered direction timely in at most this many messages is late one way
_TIMELY_MESSAGES = 2
#: a direction with at most this share of its windows late is timely
_LATE_SHARE = 0.25
#: messages of a pair sent so close that clocks drifting apart at the largest rate move their
#: two-way sum by at most this share of the lateness margin were sent together (48 ms with
#: the defaults: one exchange, its ranks a few milliseconds apart)
_TOGETHER_SHARE = 0.2
#: a pair taking turns whose directions are timely this many times each or more is pinned by
#: the estimate's support lines (three messages on a line each way) and is not mirrored:
#: mirroring single messages with the kind's usual sum, where a message 20-60 us late passes
#: for timely, took such pairs from 0.7-1.4 us to 10-72 us
_PINNING_MESSAGES = 3
#: a pair taking turns: a sum from a direction's message and the chord through the other's
#: two around it, those at most this many of its usual spacings apart
_BRACKET_SPACINGS = 2.5


def late_one_way(r: np.ndarray, d_key: np.ndarray, u: np.ndarray, width: float,
                 n_kinds: int, margin: float, rate: float, timely_share: float = 0.0,
                 pooled: dict[int, float] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The directions late in every exchange and their kinds' usual two-way sums: per
    direction key (``d_key`` = group * 2 + backward, group = pair * ``n_kinds`` + kind;
    every message of a kind with messages both ways, ``r`` its delay under any curves whose
    error is smooth over a few windows, ``u`` its time, ``width`` the windows' width), the
    scattered directions of timely/scattered pairs with at most ``_TIMELY_MESSAGES`` messages
    whose two-way sum lies within ``margin`` of their kind's usual one, that usual sum (twice
    the kind's usual least latency: the median of the kind's pairs within ``margin`` of its
    least) and, per message, whether it may be mirrored (False for the timely direction's own
    late messages of such pairs). ``rate``: the largest slope of a curve's error (ticks per
    tick). ``timely_share``: also name the scattered directions with at most this share of
    their windows' count of such messages (for the start lines, which a few timely windows
    of a wandering clock do not pin). ``pooled``: {kind: usual sum} for the kinds whose pairs
    give fewer than two sums here (``pooled_sums``)."""
    on_time = np.ones(r.size, dtype=bool)
    none = (np.zeros(0, np.int64), np.zeros(0), on_time)
    n_dir = int(d_key.max()) + 1 if d_key.size else 0
    n_dir += n_dir % 2
    if n_dir == 0 or not np.isfinite(width) or width <= 0:
        return none
    win = ((u - float(u.min())) // width).astype(np.int64)
    # per direction and window its fastest message: (direction, time, delay), by time
    order = np.lexsort((r, win, d_key))
    key = d_key[order] * (int(win.max()) + 1) + win[order]
    first = order[np.r_[True, key[1:] != key[:-1]]]
    fk, ft, fr = d_key[first], u[first], r[first]
    bounds = np.searchsorted(fk, np.arange(n_dir + 1))
    by_dir = np.argsort(d_key, kind="stable")
    starts = np.searchsorted(d_key[by_dir], np.arange(n_dir + 1))
    two_way = np.full(n_dir // 2, np.nan)  # twice the least latency plus what came late
    beyond = np.full(n_dir // 2, np.nan)  # a pair taking turns: its sum by extrapolation
    slow = np.full(n_dir // 2, -1)
    late_sums: dict[int, np.ndarray] = {}  # a scattered direction's sums, per message
    late_windows = np.zeros(n_dir // 2, np.int64)  # a scattered direction's windows
    for g in np.unique(d_key // 2).tolist():
        ways = [slice(bounds[2 * g + s], bounds[2 * g + s + 1]) for s in (0, 1)]
        if any(w.stop - w.start < 3 for w in ways):
            continue
        dev = [_off_chord(ft[w], fr[w]) for w in ways]
        scatter = [1.4826 * float(np.median(np.abs(d))) for d in dev]
        # a window late that way: above the chord through its neighbours, or above what the
        # rate limit lets the others allow (a run of late windows passes the chord test)
        out = [(d > margin / 2.0) | above_reach(ft[w], fr[w], rate, margin / 2.0)
               for d, w in zip(dev, ways, strict=True)]
        # timely: few windows late (the chord's robust scatter, which a late window spoils
        # for its neighbours too, or the share of windows late)
        prompt = [sc < margin / 4.0 or float(np.mean(o)) <= _LATE_SHARE
                  for sc, o in zip(scatter, out, strict=True)]
        late = int(np.argmax(scatter))
        side = 1 - late  # the timely direction
        mine = [by_dir[starts[2 * g + s]:starts[2 * g + s + 1]] for s in (0, 1)]
        if scatter[late] > margin and prompt[side]:
            slow[g] = late
            t_late, r_late = u[mine[late]], r[mine[late]]
        elif prompt[0] and prompt[1]:  # both timely: the fastest of each window one way
            t_late, r_late = ft[ways[0]][~out[0]], fr[ways[0]][~out[0]]
            side = 1
        else:  # no telling which way is late: messages sent together give a sum, else
            # each direction's messages within reach of its others, between each other's
            two_way[g] = _together(u, r, mine, _TOGETHER_SHARE * margin / rate, margin)
            if not np.isfinite(two_way[g]):
                points = _timely_points(u, r, mine, rate, margin)
                two_way[g] = _agreed_least(_interleaved_sums(u, mine, points), margin)
                if not np.isfinite(two_way[g]):
                    beyond[g] = _agreed_least(_extrapolated_sums(points), margin)
            continue
        keep = ~out[side]
        if keep.sum() < 2 or t_late.size == 0:
            continue
        kt, kr = ft[ways[side]][keep], fr[ways[side]][keep]  # the timely direction's curve
        own = mine[side]
        tn, yn = _through_messages(u[own], r[own], kt, kr, margin)
        pair_sums = r_late + curve_at(tn, yn, t_late)
        least = float(np.min(pair_sums))
        if not least > 0.0:
            continue  # no two-way sum is negative: the timely direction's curve is off there
        # beyond the timely direction's first and last message its curve is extrapolated,
        # microseconds off where the clock wanders (a busy 3-node chain: a sum of 8.8 us 13 s
        # before the first, where twice the least latency is 20 us, became its kind's usual
        # sum and put a node 7.8 us off): the least sum between them where it is as timely
        # (within the margin; a few exchanges may have their only timely sums outside)
        inside = pair_sums[(t_late >= tn[0]) & (t_late <= tn[-1])]
        two_way[g] = least
        if inside.size and float(np.min(inside)) <= least + margin:
            two_way[g] = float(np.min(inside))
        if slow[g] >= 0:
            late_sums[g] = pair_sums
            late_windows[g] = ways[late].stop - ways[late].start
            # the timely direction's own late messages are not mirrored
            on_time[own] = r[own] - curve_at(kt, kr, u[own]) <= margin / 2.0
    kind = np.arange(n_dir // 2) % n_kinds
    keys: list[int] = []
    sums: list[float] = []
    # a kind that no second pair gives a sum takes one from a pair taking turns, its timely
    # directions' line carried a few exchanges beyond them (``_extrapolated_sums``)
    for k in np.unique(kind[np.isfinite(beyond)]).tolist():
        of_k = np.isfinite(two_way) & (kind == k)
        lone = np.isfinite(beyond) & (kind == k)
        # or where every pair's sum lies beyond the margin above it: the pairs that gave
        # those are late one way in every exchange (a 4-node chain whose end links came 23 to
        # 32 ms late one way in all six exchanges, its middle link taking turns)
        if np.count_nonzero(of_k) == 1 or (
                of_k.any() and float(np.min(beyond[lone])) + margin < float(
                    np.min(two_way[of_k]))):
            two_way[lone] = beyond[lone]
    for k in np.unique(kind[np.isfinite(two_way)]).tolist():
        of_k = np.isfinite(two_way) & (kind == k)
        if of_k.sum() >= 2:
            # the kind's usual two-way sum: the median of the pairs within the margin of its
            # least (a pair late by a constant, which no test here tells, does not raise it)
            near = of_k & (two_way <= float(np.min(two_way[of_k])) + margin)
            usual = float(np.median(two_way[near]))
        elif pooled is not None and k in pooled:
            usual = pooled[k]
        else:
            continue
        for g in np.flatnonzero(of_k & (slow >= 0) & np.isfinite(two_way)).tolist():
            # late in every exchange but at most ``_TIMELY_MESSAGES``: so few timely messages
            # pin no rate, and a support line through them tilts the pair by its lateness
            timely_at_most = max(_TIMELY_MESSAGES, timely_share * late_windows[g])
            if np.count_nonzero(late_sums[g] <= usual + margin) > timely_at_most:
                continue
            keys.append(2 * g + int(slow[g]))
            sums.append(usual)
    if not keys:
        return none
    return np.array(keys, np.int64), np.array(sums), on_time


def mirrored(d_key: np.ndarray, late: np.ndarray, usual: np.ndarray, on_time: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How the directions ``late`` give way: which messages to keep (those of no late
    direction), which to mirror in their place (the timely direction's of the same kind and
    pair, those ``on_time``) and, per mirrored message, its kind's ``usual`` two-way sum. A
    message mirrored is sent where and when its original was received and received where
    its original was sent, ``usual`` after that was sent: under any curves its delay is
    ``usual`` minus its original's, so the pair is centred where the timely direction takes
    half the kind's usual two-way sum (a late original, mirrored, would be impossibly
    early). No ``late``: every message kept, none mirrored."""
    keep = ~np.isin(d_key, late)
    timely_of = np.full(int(max(d_key.max(initial=0), late.max(initial=0))) + 2, -1)
    timely_of[late ^ 1] = np.arange(late.size)
    which = np.flatnonzero((timely_of[d_key] >= 0) & on_time)
    return keep, which, usual[timely_of[d_key[which]]]


def pooled_sums(r: np.ndarray, d_key: np.ndarray, u: np.ndarray, n_kinds: int, margin: float,
                rate: float, known: set[int]) -> dict[int, float]:
    """Usual two-way sums of the kinds not in ``known`` (those ``late_one_way`` gave one),
    pooled over their node pairs: where no pair of a kind gives two sums that agree (pairs
    taking turns at being late over a few exchanges, whose clocks bend between them: one sum
    of a pair lands off by the bend), each pair's least positive sum (``_interleaved_sums``
    and ``_extrapolated_sums``, none asked to agree); a kind whose pairs give two or more within
    ``margin`` of their least takes their median. Returns {kind: sum}."""
    leasts: dict[int, list[float]] = {}
    by_dir = np.argsort(d_key, kind="stable")
    starts = np.searchsorted(d_key[by_dir], np.arange(2 * (int(d_key.max()) // 2 + 1) + 1)
                             if d_key.size else np.zeros(1, np.int64))
    for g in np.unique(d_key // 2).tolist():
        if g % n_kinds in known:
            continue
        ways = [by_dir[starts[2 * g + side]:starts[2 * g + side + 1]] for side in (0, 1)]
        if any(w.size < 2 for w in ways):
            continue
        points = _timely_points(u, r, ways, rate, margin)
        every = np.concatenate([*_interleaved_sums(u, ways, points),
                                *_extrapolated_sums(points), np.zeros(0)])
        every = every[every > 0.0]
        if every.size:
            leasts.setdefault(g % n_kinds, []).append(float(every.min()))
    out: dict[int, float] = {}
    for k, of_k in leasts.items():
        v = np.sort(np.asarray(of_k))
        near = v[v <= v[0] + margin]
        if near.size >= 2:
            out[k] = float(np.median(near))
    return out


def taking_turns(r: np.ndarray, d_key: np.ndarray, u: np.ndarray, n_kinds: int, margin: float,
                 rate: float, late: np.ndarray, usual: np.ndarray,
                 pooled: dict[int, float] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Node pairs whose directions take turns at being late and are never timely together
    (one way timely in some exchanges, the other way in the others), of a kind whose usual
    two-way sum ``late_one_way`` found (``late``, ``usual``): no window gives such a pair a
    two-way sum, and the estimate centred it between a timely and a late direction
    (milliseconds). Per direction a message is timely when it lies within half the ``margin``
    of what the rate limit lets its direction's others allow (``above_reach``), but of two
    sent together (within ``_TOGETHER_SHARE`` of the margin's reach) whose sum lies above
    the kind's usual one by more than the margin, the one further above its direction's
    least is late; a pair with timely and late messages both ways and at most one exchange
    timely both ways gives way: its late messages are
    dropped and its timely ones mirrored with the kind's usual sum, so that each timely
    message pins the pair as the mirrored directions of ``late_one_way`` do. ``pooled``:
    more kinds' usual sums ({kind: sum}, ``pooled_sums``). Returns, per message, whether it
    is dropped, and the messages to mirror with their sums."""
    drop = np.zeros(r.size, dtype=bool)
    none = (drop, np.zeros(0, np.int64), np.zeros(0))
    kind_usual = dict(pooled or {})
    kind_usual.update({int(key // 2) % n_kinds: float(sum_)
                       for key, sum_ in zip(late.tolist(), usual.tolist(), strict=True)})
    if not kind_usual or d_key.size == 0:
        return none
    named = set((late // 2).tolist())
    within = _TOGETHER_SHARE * margin / rate
    which: list[np.ndarray] = []
    sums: list[np.ndarray] = []
    for g in np.unique(d_key // 2).tolist():
        if g in named or g % n_kinds not in kind_usual:
            continue
        ways = [np.flatnonzero(d_key == 2 * g + side) for side in (0, 1)]
        if any(w.size < 2 for w in ways):
            continue
        timely = []
        for w in ways:
            idx = w[np.argsort(u[w], kind="stable")]
            timely.append((idx, ~above_reach(u[idx], r[idx], rate, margin / 2.0)))
        if not all(ok.any() and not ok.all() for _, ok in timely):
            continue
        if min(int(ok.sum()) for _, ok in timely) >= _PINNING_MESSAGES:
            continue  # the estimate's support lines pin it (a line through each direction)
        (i0, ok0), (i1, ok1) = timely
        t1 = u[i1]
        j = np.clip(np.searchsorted(t1, u[i0]), 1, max(t1.size - 1, 1))
        near = np.where(np.abs(t1[j - 1] - u[i0]) <= np.abs(t1[j] - u[i0]), j - 1, j)
        together = (np.abs(t1[near] - u[i0]) <= within) & ok0 & ok1[near]
        # sent together, both within reach, but their sum above the kind's usual one: one of
        # them came late (over seconds between exchanges the rate limit's reach lets
        # hundreds of microseconds pass), the one further above its direction's least
        usual_g = kind_usual[g % n_kinds]
        over = together & (r[i0] + r[i1[near]] > usual_g + margin)
        if over.any():
            above0 = r[i0] - float(r[i0[ok0]].min())
            above1 = r[i1] - float(r[i1[ok1]].min())
            first = over & (above0 >= above1[near])
            ok0 = ok0 & ~first
            ok1 = ok1.copy()
            ok1[near[over & ~first]] = False
            together &= ~over
        if not (ok0.any() and ok1.any()):
            continue
        if np.count_nonzero(together) > 1:
            continue  # timely both ways in some exchanges: the windows centre it
        drop[i0[~ok0]] = drop[i1[~ok1]] = True
        mine = np.r_[i0[ok0], i1[ok1]]
        which.append(mine)
        sums.append(np.full(mine.size, kind_usual[g % n_kinds]))
    if not which:
        return none
    return drop, np.concatenate(which), np.concatenate(sums)


def _through_messages(t: np.ndarray, y: np.ndarray, kt: np.ndarray, kr: np.ndarray,
                      margin: float) -> tuple[np.ndarray, np.ndarray]:
    """The curve through a timely direction's own messages (times ``t``, delays ``y``) that
    lie within half the ``margin`` above its windows' curve (``kt``, ``kr``): its messages
    follow a clock that wanders within a window, where the windows' fastest do not; at a
    time shared by several, the least. The windows' curve where fewer than two are left."""
    near = y - curve_at(kt, kr, t) <= margin / 2.0
    t_n, y_n = _least_per_time(t[near], y[near])
    return (t_n, y_n) if t_n.size >= 2 else (kt, kr)


def _least_per_time(t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points by time, one per distinct time (the least ``y`` there): knots for
    ``curve_at``."""
    order = np.lexsort((y, t))
    t_s, y_s = t[order], y[order]
    first = np.r_[True, t_s[1:] != t_s[:-1]] if t_s.size else np.zeros(0, dtype=bool)
    return t_s[first], y_s[first]


def _together(u: np.ndarray, r: np.ndarray, ways: list[np.ndarray], within: float,
              margin: float) -> float:
    """The least two-way sum of a pair's messages sent together (each forward message with
    the nearest backward one, ``within`` ticks of it): twice the least latency plus what came
    late, whatever the offset, off by the clocks' drift over their distance. NaN unless two
    exchanges at least agree on it within ``margin`` (one could have come late both ways) and
    it is positive."""
    fwd, bwd = ways
    if fwd.size == 0 or bwd.size == 0:
        return np.nan
    by_time = np.argsort(u[bwd])
    tb, rb = u[bwd][by_time], r[bwd][by_time]
    j = np.searchsorted(tb, u[fwd])
    left, right = np.clip(j - 1, 0, tb.size - 1), np.clip(j, 0, tb.size - 1)
    gap_l, gap_r = np.abs(tb[left] - u[fwd]), np.abs(tb[right] - u[fwd])
    near = np.where(gap_l <= gap_r, left, right)
    gap = np.minimum(gap_l, gap_r)
    ok = gap <= within
    if not ok.any():
        return np.nan
    return _agreed_least([r[fwd][ok] + rb[near[ok]]], margin)


def _timely_points(u: np.ndarray, r: np.ndarray, ways: list[np.ndarray], rate: float,
                   margin: float) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per direction of a pair (its messages ``ways``): its points by time, one per distinct
    time, the least delay there (``_least_per_time``), and which of them lie within half the
    ``margin`` of every other's reach under the rate limit (``above_reach``: a late message
    does not pass once a timely one is within reach): what ``_interleaved_sums`` and
    ``_extrapolated_sums`` both start from."""
    out = []
    for way in ways:
        t, y = _least_per_time(u[way], r[way])
        timely = ~above_reach(t, y, rate, margin / 2.0) if t.size else np.zeros(0, bool)
        out.append((t, y, timely))
    return out


def _interleaved_sums(u: np.ndarray, ways: list[np.ndarray],
                      points: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
                      ) -> list[np.ndarray]:
    """The two-way sums of a pair whose directions take turns at being late but never
    together: each direction's timely messages (``points``, ``_timely_points``), each such
    message's delay plus the other direction's at its time, along the line through that
    direction's two timely messages around it (a drift between them is taken out; a
    wander's curvature is not), those two at most ``_BRACKET_SPACINGS`` of its usual
    spacings apart (``u`` at its messages ``ways``). Per direction; none asked to agree
    (``_agreed_least`` does)."""
    curves = []
    spacing = []
    for way, (t, y, timely) in zip(ways, points, strict=True):
        spacing.append(float(np.median(np.diff(np.sort(u[way])))) if way.size > 1 else 0.0)
        curves.append((t[timely], y[timely]))
    sums = []
    for (t, y), (t_o, y_o), gap in ((curves[0], curves[1], spacing[1]),
                                    (curves[1], curves[0], spacing[0])):
        if t_o.size < 2:
            continue
        j = np.searchsorted(t_o, t)
        inside = (j > 0) & (j < t_o.size)
        j = np.clip(j, 1, t_o.size - 1)
        # between two of the other's at most this far apart: a wander bends a longer chord
        inside &= t_o[j] - t_o[j - 1] <= _BRACKET_SPACINGS * gap
        sums.append(y[inside] + curve_at(t_o, y_o, t[inside]))
    return sums


def _extrapolated_sums(points: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
                       ) -> list[np.ndarray]:
    """The two-way sums of a pair whose directions take turns at being late, timely apart
    (one way in some exchanges, the other in the next): each direction's timely messages
    (``points``, ``_timely_points``) plus the other direction's at their times, along the
    least squares line through three or more of the other's timely messages, carried at
    most ``_BRACKET_SPACINGS`` of its usual spacings beyond them (a wander bends a line
    carried farther). Per direction; none asked to agree (``_agreed_least`` does)."""
    lines = []
    for t, y, timely in points:
        gap = float(np.median(np.diff(t))) if t.size > 1 else 0.0
        lines.append((t[timely], y[timely], gap))
    sums = []
    for (t, y, _), (t_o, y_o, gap) in ((lines[0], lines[1]), (lines[1], lines[0])):
        if t_o.size < 3 or t.size == 0:
            continue
        slope, icept = np.polyfit(t_o - t_o[0], y_o, 1)
        reach = _BRACKET_SPACINGS * gap
        near = (t >= t_o[0] - reach) & (t <= t_o[-1] + reach)
        sums.append(y[near] + icept + slope * (t[near] - t_o[0]))
    return sums


def _agreed_least(sums: list[np.ndarray], margin: float) -> float:
    """The least of the two-way ``sums``, or NaN unless two of them agree within ``margin``
    and the least is positive."""
    every = np.concatenate(sums) if sums else np.zeros(0)
    if every.size < 2:
        return np.nan
    least = float(np.min(every))
    agree = np.count_nonzero(every <= least + margin) >= 2
    return least if agree and least > 0.0 else np.nan


def above_reach(t: np.ndarray, y: np.ndarray, rate: float, margin: float) -> np.ndarray:
    """Which points lie more than ``margin`` above every other's reach: the least
    ``y[j] + rate * |t - t[j]|`` over the others (``t`` ascending), what a curve whose slope
    stays within ``rate`` allows through them. A run of late points, which the chord through
    neighbours lets pass at a run's ends, does not pass this once a timely point is within
    reach. ``y`` may hold several sequences over the same ``t`` along its last axis (+inf:
    no point, above every reach and reaching none)."""
    edge = np.full(y.shape[:-1] + (1,), np.inf)
    from_left = np.concatenate(
        [edge, np.minimum.accumulate(y - rate * t, axis=-1)[..., :-1]], axis=-1) + rate * t
    from_right = np.concatenate(
        [np.minimum.accumulate((y + rate * t)[..., ::-1], axis=-1)[..., ::-1][..., 1:], edge],
        axis=-1) - rate * t
    return y > np.minimum(from_left, from_right) + margin


def _off_chord(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each point's height above the line through its two neighbours (an end's: its two
    nearest; zero on any line, whatever the spacing). At least three points."""
    left = np.r_[1, np.arange(t.size - 2), t.size - 3]
    right = np.r_[2, np.arange(2, t.size), t.size - 2]
    return y - _line(t, t[left], y[left], t[right], y[right])


def _line(t: np.ndarray, t0: np.ndarray, y0: np.ndarray, t1: np.ndarray, y1: np.ndarray
          ) -> np.ndarray:
    span = t1 - t0
    frac = np.divide(t - t0, span, out=np.full(span.size, 0.5), where=span != 0)
    return y0 + frac * (y1 - y0)
