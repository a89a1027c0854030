"""Node pairs whose messages of a symmetric kind came late one way in every exchange (a busy
receiver whose receives all complete in a later ``MPI_Waitall``). The estimate's assumption, the
same least latency both ways, would centre such a pair between a timely and a late direction:
off by half the lateness, up to milliseconds. Per kind and node pair, a direction is timely when
its fastest delay per window lies, over the run, within a quarter of the lateness margin of the
line through its neighbours' (robustly: the median), and scattered when beyond the margin.
Adding to a late message's delay the timely direction's at the same time (along its fastest
messages per window, its own late windows left out) gives what no smooth error of the clocks
changes: twice the least latency plus that message's lateness; the least such sum over the run,
against its usual value over the kind's node pairs (the median of those within the margin of the
least), is the lateness of the direction in every exchange. ``late_one_way`` names the
directions late by more than the margin; the estimate replaces their messages by the timely
direction's, mirrored (``mirrored``), so that such a pair is centred where its timely direction
takes half the kind's usual two-way sum: an assumption (a kind's least latency alike on every
node pair) made only there. It decides nothing where fewer than three node pairs share a kind or
fewer than two agree on its usual sum, where no direction is timely or both are, or where the
late direction was timely once."""

from __future__ import annotations

import numpy as np

from .points import curve_at


def late_one_way(r: np.ndarray, d_key: np.ndarray, u: np.ndarray, width: float,
                 n_kinds: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """The directions late in every exchange and their kinds' usual two-way sums: per
    direction key (``d_key`` = group * 2 + backward, group = pair * ``n_kinds`` + kind;
    every message of a kind with messages both ways, ``r`` its delay under any curves whose
    error is smooth over a few windows, ``u`` its time, ``width`` the windows' width), the
    scattered directions of timely/scattered pairs whose two-way sum exceeds their kind's
    usual one by more than ``margin``, and that usual sum (twice the kind's usual least
    latency: the median of the kind's pairs within ``margin`` of its least)."""
    none = (np.zeros(0, np.int64), np.zeros(0))
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
    slow = np.full(n_dir // 2, -1)
    for g in np.unique(d_key // 2).tolist():
        ways = [slice(bounds[2 * g + s], bounds[2 * g + s + 1]) for s in (0, 1)]
        if any(w.stop - w.start < 4 for w in ways):
            continue
        dev = [_off_chord(ft[w], fr[w]) for w in ways]
        scatter = [1.4826 * float(np.median(np.abs(d))) for d in dev]
        late = int(np.argmax(scatter))
        timely = ways[1 - late]
        keep = dev[1 - late] <= margin / 2.0  # its windows late that way too: out
        if scatter[late] > margin and scatter[1 - late] < margin / 4.0:
            slow[g] = late
            mine = by_dir[starts[2 * g + late]:starts[2 * g + late + 1]]
            t_late, r_late = u[mine], r[mine]
        else:  # both timely (or no telling): the fastest of each window one way
            t_late, r_late = ft[ways[0]], fr[ways[0]]
            timely = ways[1]
            keep = dev[1] <= margin / 2.0
        if keep.sum() < 2:
            continue
        two_way[g] = float(np.min(r_late + curve_at(ft[timely][keep], fr[timely][keep],
                                                    t_late)))
    kind = np.arange(n_dir // 2) % n_kinds
    keys: list[int] = []
    sums: list[float] = []
    for k in np.unique(kind[np.isfinite(two_way)]).tolist():
        of_k = np.isfinite(two_way) & (kind == k)
        if of_k.sum() < 3:
            continue
        # the kind's usual two-way sum: the median of the pairs within the margin of its
        # least (a pair late by a constant, which no test here tells, does not raise it)
        near = of_k & (two_way <= float(np.min(two_way[of_k])) + margin)
        if near.sum() < 2:
            continue
        usual = float(np.median(two_way[near]))
        for g in np.flatnonzero(of_k & (slow >= 0) & (two_way > usual + margin)).tolist():
            keys.append(2 * g + int(slow[g]))
            sums.append(usual)
    if not keys:
        return none
    return np.array(keys, np.int64), np.array(sums)


def mirrored(d_key: np.ndarray, late: np.ndarray, usual: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How the directions ``late`` give way: which messages to keep (those of no late
    direction), which to mirror in their place (the timely direction's of the same kind and
    pair) and, per mirrored message, its kind's ``usual`` two-way sum. A message mirrored is
    sent where and when its original was received and received where its original was sent,
    ``usual`` after that was sent: under any curves its delay is ``usual`` minus its
    original's, so the pair is centred where the timely direction takes half the kind's
    usual two-way sum."""
    keep = ~np.isin(d_key, late)
    timely_of = np.full(int(max(d_key.max(), late.max())) + 2, -1)
    timely_of[late ^ 1] = np.arange(late.size)
    which = np.flatnonzero(timely_of[d_key] >= 0)
    return keep, which, usual[timely_of[d_key[which]]]


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
