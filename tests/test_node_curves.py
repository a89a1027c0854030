"""The node fit's model choice (cell_otf2.sync.nodefit.curves) against the plain loops its
faster forms replaced, which must give the same floats: the bend search's dynamic program
taken a block of ends at a time (random noisy piecewise-linear curves, ties included, every
piece length), the knot count without building the knots, and the knot fit with its pulls
computed once per knot count."""

from __future__ import annotations

import numpy as np
import pytest

from cell_otf2.sync.nodefit import curves
from cell_otf2.sync.nodefit.points import LpOptions

HZ = 14_318_000


def _bend_knots_loop(centers, v, o, hz, width=0.0, sigma=None):
    """``curves._bend_knots`` as it was: one end at a time."""
    ok = np.isfinite(v)
    if width <= 0:
        width = float(centers[1] - centers[0]) if centers.size > 1 else 1.0
    t, v = (centers[ok] - centers[0]) / width, v[ok]
    m = max(int(o.min_windows), 2)
    n = t.size
    if n < 2 * m + 1:
        return np.zeros(0)
    if sigma is None:
        sigma = curves._noise(v)
    penalty = max(25.0 * sigma ** 2, (o.bend_us * 1e-6 * hz) ** 2)
    sse = curves._piece_costs(t, v)
    best = np.full(n + 1, np.inf)
    cut = np.full(n + 1, -1)
    best[m:] = sse[0, m:]
    for e in range(2 * m + 1, n + 1):
        left_out = np.arange(m, e - m)
        c = best[left_out] + penalty + sse[left_out + 1, e]
        k = int(np.argmin(c))
        if c[k] < best[e]:
            best[e], cut[e] = c[k], left_out[k]
    gaps = []
    end = n
    while cut[end] >= 0:
        gaps.append(int(cut[end]))
        end = int(cut[end])
    gaps.sort()
    bounds = [0, *[x for g in gaps for x in (g, g + 1)], n]
    lines = [curves._line(t[a:b], v[a:b]) for a, b in zip(bounds[::2], bounds[1::2],
                                                           strict=True)]
    knots = []
    for g, (b1, r1), (b2, r2) in zip(gaps, lines[:-1], lines[1:], strict=True):
        x = (b2 - b1) / (r1 - r2) if r1 != r2 else t[g]
        knots.append(min(max(x, t[g] - 1.0), t[g] + 1.0))
    return np.asarray(knots) * width + centers[0]


def _curve(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 160))
    width = float(rng.uniform(0.5, 10.0)) * HZ
    centers = 1e9 + (np.arange(n) + 0.5) * width
    bends = np.sort(rng.uniform(0, n, int(rng.integers(0, 6))))
    rates = rng.normal(0, 20e-6 * width, bends.size + 1)
    idx = np.arange(n, dtype=np.float64)
    v = rates[0] * idx
    for b, r0, r1 in zip(bends, rates[:-1], rates[1:], strict=True):
        v = v + (r1 - r0) * np.maximum(idx - b, 0.0)
    v = v + rng.normal(0, float(rng.choice([0.0, 1.0, 20.0, 200.0])), n)
    if seed % 4 == 0:  # integer ticks: ties between left-out windows
        v = np.round(v / 50.0) * 50.0
    if seed % 5 == 0 and n > 3:  # windows no message reached
        v[rng.integers(0, n, n // 4)] = np.nan
    return centers, v, width


@pytest.mark.parametrize("seed", range(80))
def test_bend_search_a_block_of_ends_at_a_time_as_one_at_a_time(seed):
    centers, v, width = _curve(seed)
    for m in (2, 3, 4, 7):
        o = LpOptions(min_windows=m)
        want = _bend_knots_loop(centers, v, o, HZ)
        got = curves._bend_knots(centers, v, o, HZ)
        assert np.array_equal(got, want), (m, got, want)
        sigma = float(np.random.default_rng(seed).uniform(0, 100))
        want = _bend_knots_loop(centers, v, o, HZ, width, sigma)
        got = curves._bend_knots(centers, v, o, HZ, width, sigma)
        assert np.array_equal(got, want), (m, got, want)


@pytest.mark.parametrize("seed", range(60))
def test_knot_count_is_the_knots_size(seed):
    rng = np.random.default_rng(seed)
    lo, hi = 1e9, 1e9 + float(rng.uniform(0, 1e10))
    bends = rng.uniform(lo - 1e9, hi + 1e9, int(rng.integers(0, 5)))
    if seed % 3 == 0 and bends.size:
        bends[0] = lo  # a bend on an end
    for longest in (np.inf, (hi - lo) / 50, (hi - lo) / 7, (hi - lo) / 3 + 1.0, hi - lo,
                    2 * (hi - lo)):
        assert curves._knot_count(bends, lo, hi, longest) == \
            curves.node_knots(bends, lo, hi, longest).size
    assert np.array_equal(curves.node_knots(np.zeros(0), lo, hi, np.inf),
                          np.unique(np.r_[lo, hi]))


@pytest.mark.parametrize("seed", range(30))
def test_knot_fit_with_pulls_kept_as_computed_each_time(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 30))
    x = np.sort(rng.uniform(0, 100, int(rng.integers(0, 60))))
    kr = np.linspace(0, 100, k)
    h = curves._hat_basis(x, kr)
    y = rng.normal(0, 5, x.size)
    d = np.zeros((max(k - 2, 0), k))
    i = np.arange(k - 2)
    d[i, i], d[i, i + 1], d[i, i + 2] = 1.0, -2.0, 1.0
    try:
        want = np.linalg.solve(h.T @ h + 1e-6 * (d.T @ d) + 1e-18 * np.eye(k), h.T @ y)
    except np.linalg.LinAlgError:
        lhs = np.r_[h, 1e-3 * d, 1e-9 * np.eye(k)]
        want = np.linalg.lstsq(lhs, np.r_[y, np.zeros(d.shape[0] + k)], rcond=None)[0]
    for _ in range(2):  # the second time from the kept pulls
        assert np.array_equal(curves._fit_basis(h, y, k), want)
