"""Straight lines for node pairs whose two directions take turns at being late (one timely in
the first exchanges, the other in the last): the lower support lines of ``estimate`` then tilt
until late messages touch them, hundreds of ppm in a short run, and pin nothing. Here the
common slope is the one that brings the most messages of both directions within ``near`` of
their lower lines (the middle of the best slopes on a grid within the rate limit), refined by
least squares over those messages, each direction about its own mean; the pair's offset
difference lies midway between the two lower lines. It knows nothing of windows or wander: a
line per pair over the whole run, for pairs the support lines left unpinned."""

from __future__ import annotations

import numpy as np

from .disagree import two_way_centres

#: a line is taken when this share of the pair's stretches has a message on it
_COVER = 0.8


def counted_lines(group: np.ndarray, fwd: np.ndarray, t: np.ndarray, r: np.ndarray,
                  near: float, limit: float, groups: np.ndarray, n_grid: int = 161
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per group of ``groups`` (messages: ``group``, ``fwd`` their direction, ``t`` their
    time about the run's middle, ``r`` their delay), the offset difference ``d0 + beta * t``
    midway between the two directions' lower lines, sloped alike and opposite within
    ``limit`` (ticks per tick), and ``support``: the fewer, of the two directions, of the
    messages within ``near`` of their line; per message, whether it lies above its line by
    more than ``near`` (late, under that line). NaN / 0 / False for a group without three
    messages each way on its line or without a line over most of its stretches."""
    d0 = np.full(groups.size, np.nan)
    beta = np.zeros(groups.size)
    support = np.zeros(groups.size)
    off = np.zeros(group.size, dtype=bool)
    grid = np.linspace(-limit, limit, n_grid)
    for i, g in enumerate(groups.tolist()):
        sel = np.flatnonzero(group == g)
        back = (~fwd[sel]).astype(np.int64)
        n_each = int(np.bincount(back, minlength=2).min())
        if n_each < 2:
            continue
        t_sel, rs = t[sel], r[sel]
        ts = np.where(back == 0, t_sel, -t_sel)  # backward: the opposite slope
        score = _scores(grid, ts, rs, back, near)
        best = np.flatnonzero(score == score.max())
        middle = float(grid[best[best.size // 2]])
        use = _on_lines(rs - middle * ts, back, near)
        slope = _common_slope(ts[use], rs[use], back[use])
        b = float(np.clip(slope, -limit, limit)) if np.isfinite(slope) else middle
        y = rs - b * ts
        on = _on_lines(y, back, near)
        counts = [int(np.count_nonzero(on & (back == k))) for k in (0, 1)]
        if min(counts) < 3:
            continue
        if _covered(t_sel, on, max(4, n_each // 2)) < _COVER:
            continue  # stretches where neither direction is on its line: not a line
        if not _off_is_late(t_sel, y, back, on, n_each, near):
            continue  # off the line and not late: the clocks' difference is not a line
        lows = [float(y[back == k].min()) for k in (0, 1)]
        d0[i], beta[i], support[i] = 0.5 * (lows[0] - lows[1]), b, float(min(counts))
        off[sel[~on]] = True
    return d0, beta, support, off


def _on_lines(y: np.ndarray, back: np.ndarray, near: float) -> np.ndarray:
    """Which of ``y`` lie within ``near`` of their direction's least (``back`` 0 / 1)."""
    lows = np.array([y[back == k].min() for k in (0, 1)])
    return y <= lows[back] + near


def _scores(grid: np.ndarray, ts: np.ndarray, rs: np.ndarray, back: np.ndarray,
            near: float, cells: int = 1 << 21) -> np.ndarray:
    """Per slope of ``grid``, how many of the messages lie within ``near`` of their
    direction's lower line at that slope; a few slopes at a time (a long run's pair holds
    hundreds of thousands of messages)."""
    out = np.zeros(grid.size, np.int64)
    step = max(1, cells // max(rs.size, 1))
    ways = [back == k for k in (0, 1)]
    for s in range(0, grid.size, step):
        ys = rs[None, :] - grid[s:s + step, None] * ts[None, :]
        low = np.stack([ys[:, w].min(axis=1) for w in ways], axis=1)
        out[s:s + step] = (ys <= low[:, back] + near).sum(axis=1)
    return out


def _covered(t: np.ndarray, on: np.ndarray, n_bins: int) -> float:
    """The share of the pair's stretches (its span cut in ``n_bins``) that have messages and
    a message on its line."""
    at = _stretch(t, n_bins)
    if at is None:
        return 1.0
    have = np.bincount(at, minlength=n_bins) > 0
    hit = np.bincount(at[on], minlength=n_bins) > 0
    return float(hit[have].sum() / max(have.sum(), 1))


def _off_is_late(t: np.ndarray, y: np.ndarray, back: np.ndarray, on: np.ndarray,
                 n_bins: int, near: float) -> bool:
    """Are the messages off the line late? Per stretch of the run (``n_bins``, about one
    exchange each) with messages both ways, the least ``y`` each way summed: twice the least
    latency plus any lateness, whatever the clocks' difference does
    (``disagree.two_way_centres`` keeps the stretches within ``near`` of the least such
    sum). A stretch with a message off the line must be one it leaves out in at least half
    of such stretches; where the difference of the clocks bends or steps, the messages
    leave the line without being late, and the sums stay level."""
    at = _stretch(t, n_bins)
    if at is None or on.all():
        return True
    both = np.ones(n_bins, dtype=bool)
    for k in (0, 1):
        both &= np.bincount(at[back == k], minlength=n_bins) > 0
    judged = both & (np.bincount(at[~on], minlength=n_bins) > 0)
    if not judged.any():
        return True
    _, level, _ = two_way_centres(y, np.zeros(y.size, np.int64), back, at, 1, n_bins, near)
    late = np.ones(n_bins, dtype=bool)
    late[level] = False
    return bool(np.mean(late[judged]) >= 0.5)


def _stretch(t: np.ndarray, n_bins: int) -> np.ndarray | None:
    """Each time's stretch of the span of ``t`` cut in ``n_bins`` (None: no span)."""
    span = float(t.max() - t.min())
    if span <= 0:
        return None
    return np.minimum(((t - t.min()) / span * n_bins).astype(np.int64), n_bins - 1)


def _common_slope(ts: np.ndarray, rs: np.ndarray, back: np.ndarray) -> float:
    """Least-squares slope of ``rs`` over ``ts``, each direction about its own means."""
    num = den = 0.0
    for k in (0, 1):
        mine = back == k
        if mine.sum() < 1:
            return float("nan")
        dt = ts[mine] - ts[mine].mean()
        num += float(dt @ (rs[mine] - rs[mine].mean()))
        den += float(dt @ dt)
    return num / den if den > 0 else float("nan")
