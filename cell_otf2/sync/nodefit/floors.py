"""Where the estimate's joint rounds fit lines, each node pair's centring between the floors of
its two directions (``floor_lift``): per direction its least residual, so that the pair sits
midway between its fastest messages both ways; and for a pair whose one direction came late in
every exchange and was replaced by the other's messages mirrored (``oneway.mirrored``), the
floor that places its timely direction's least latency at half its kind's usual two-way sum,
that sum taken from the fit itself (the node pairs of the kind whose both directions are
timely); where they fit smooth curves, that mirrored centring alone. It chooses no messages,
fits nothing and knows nothing of windows or curves."""

from __future__ import annotations

import numpy as np


def floor_lift(resid: np.ndarray, d_key: np.ndarray, n_dir: int, n_min: int, near: float,
               latency: np.ndarray | None = None, n_kinds: int = 0,
               mirrored: np.ndarray | None = None, mirrored_only: bool = False
               ) -> np.ndarray:
    """Per equation, what to add to its delay so that a refit centres its node pair between
    the floors of its two directions. ``resid``: each equation's residual under the fit,
    ``d_key``: its direction (group * 2 + backward, group = pair * ``n_kinds`` + kind),
    ``n_dir``: the number of direction keys. A fit on the lifted delays moves each node
    pair's offset by half the difference of its two directions' lifts.

    A direction's floor is its least residual; a group whose directions have fewer than
    ``n_min`` equations each within ``near`` of their least gets no lift (too few for the
    least to be near the least latency). ``latency``: per group the fit's latency (the
    group's own column), with ``n_kinds`` and ``mirrored`` (the direction keys whose
    messages are the other direction's mirrored): a mirrored direction's floor is the one
    under which the pair's timely direction takes half the kind's usual two-way sum. A
    group's two-way sum, twice its latency plus both floors, does not depend on the pair's
    offset; the kind's usual sum is the median of those of its groups not mirrored, with
    ``n_min`` equations each way and as many near the least, or where it has none the least
    positive sum of its groups not mirrored with ``n_min`` equations each way (a mirrored
    group's own floors give none: its second direction's floor mirrors its first's slowest
    message, so centring between them moved the pair by half its spread of delays; a 6-node
    chain with a link late one way in every exchange came out 1.1 us off). A mirrored
    direction whose timely one has fewer than ``n_min`` equations keeps its own floor (runs
    of a few exchanges, where a least sum is noise: a 6-node chain of four exchanges 1.2 ->
    2.0 us RMS without that), and so does every one of a kind no pair gives a sum (lines
    that miss a rate step leave sums of thousands of ticks below zero). ``mirrored_only``:
    only the groups with a mirrored direction are lifted (smooth curves, whose least
    residuals of a pair timely both ways carry the curve's own noise; a mirrored direction's
    floor still comes from its kind's usual sum: an 8-node chain whose clocks wander 15 us
    over a minute, with one link late one way in every exchange, 1.59 -> 1.17 us RMS)."""
    low, count = least_and_near(resid, d_key, n_dir, near)
    count = np.r_[count, np.zeros(count.size % 2, dtype=count.dtype)]
    enough = np.repeat(np.minimum(count[0::2], count[1::2]) >= n_min, 2)[:n_dir]
    if mirrored_only:
        enough[:] = False
    if latency is not None and mirrored is not None and mirrored.size and n_kinds > 0:
        equations = np.bincount(d_key, minlength=count.size)
        low, enough = _mirrored_floors(low, enough, count, equations, n_min, latency, n_kinds,
                                       mirrored)
    lift = np.where(enough & np.isfinite(low), low, 0.0)
    return lift[d_key]


def least_and_near(values: np.ndarray, key: np.ndarray, n_keys: int, near: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per key (``0 .. n_keys - 1``): the least of its ``values`` (inf where it has none) and
    how many of them lie within ``near`` of it."""
    least = np.full(n_keys, np.inf)
    np.minimum.at(least, key, values)
    return least, np.bincount(key[values <= least[key] + near], minlength=n_keys)


def _mirrored_floors(low: np.ndarray, enough: np.ndarray, count: np.ndarray,
                     equations: np.ndarray, n_min: int, latency: np.ndarray, n_kinds: int,
                     mirrored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``low`` and ``enough`` with each mirrored direction's floor set from its kind's usual
    two-way sum (``floor_lift``); ``count``: per direction its equations near the least,
    ``equations``: all of them."""
    n_dir = low.size
    n_g = (n_dir + 1) // 2
    lows = np.r_[low, np.full(2 * n_g - n_dir, np.inf)]
    lat = np.full(n_g, np.nan)
    lat[:min(n_g, latency.size)] = latency[:n_g]
    two_way = 2.0 * lat + lows[0::2] + lows[1::2]  # NaN or inf where a direction is missing
    mirrored = mirrored[(mirrored >= 0) & (mirrored < n_dir)]
    is_mirrored = np.zeros(n_g, dtype=bool)
    is_mirrored[mirrored // 2] = True
    kind = np.arange(n_g) % n_kinds
    each = np.minimum(equations[0::2], equations[1::2])[:n_g]
    usable = np.isfinite(two_way) & (two_way > 0.0) & ~is_mirrored & (each >= n_min)
    timely = usable & (np.minimum(count[0::2], count[1::2])[:n_g] >= n_min)
    usual = np.full(n_kinds, np.nan)
    for k in np.unique(kind[usable]).tolist():
        of_k = kind == k
        usual[k] = (float(np.median(two_way[timely & of_k])) if (timely & of_k).any()
                    else float(np.min(two_way[usable & of_k])))
    low = low.copy()
    enough = enough.copy()
    for key in mirrored.tolist():
        g, other = key // 2, key ^ 1
        u = usual[kind[g]]
        if (other < n_dir and np.isfinite(u) and np.isfinite(lat[g])
                and np.isfinite(low[other]) and equations[other] >= n_min):
            low[key] = u - 2.0 * lat[g] - low[other]
            enough[key] = enough[other] = True
    return low, enough
