"""The fallback centring (``lp_maps``) on more nodes than its node-pair terms reach: a
collective's orders between nodes farther apart than that (neither the reference) are no
rows of its program, whose size then grows with the nodes, not with their pairs; the node
fit still keeps every one of them ordered (they stay hard constraints). A one-way ring of
20 nodes whose only way back is a barrier every second, every pair of nodes ordered by it."""

from __future__ import annotations

import numpy as np
import pytest
from ring_points import HZ, linear_clocks, one_way_ring

from cell_otf2.sync.nodefit.fit import fit_points
from cell_otf2.sync.nodefit.lp import lp_maps
from cell_otf2.sync.nodefit.points import ORDER_ONLY, POINT_DTYPE, LpOptions, map_to_reference
from cell_otf2.sync.nodefit.program import near_in_node_order

NODES = 20


def ring_with_barriers(seed: int) -> np.ndarray:
    """Messages one way round a ring of ``NODES`` linear clocks (kind 1) over 40 s, and a
    barrier every second: each node's entry before every other node's exit (order only)."""
    rng = np.random.default_rng(seed)
    clocks = linear_clocks(rng, NODES)
    parts = [one_way_ring(rng, clocks, 4000, 40.0, kind=1)]
    for k in np.arange(0.5, 40.0, 1.0):
        enter = k + rng.uniform(0.0, 200e-6, NODES)
        leave = enter.max() + rng.uniform(5e-6, 30e-6, NODES)
        u, w = np.nonzero(~np.eye(NODES, dtype=bool))
        order = np.zeros(u.size, POINT_DTYPE)
        order["a"], order["b"], order["kind"] = u, w, ORDER_ONLY
        order["ta"], order["tb"] = clocks.local(u, enter[u]), clocks.local(w, leave[w])
        parts.append(order)
    pts = np.concatenate(parts)
    pts["before"] = pts["after"] = np.arange(pts.size)
    return pts


def test_far_orders_are_no_rows_of_the_fallback_program():
    pts = ring_with_barriers(4)
    reach = LpOptions().pair_reach
    assert NODES > 2 * reach + 1  # some pairs lie beyond the pair terms
    far = (~near_in_node_order(pts["a"].astype(np.int64), pts["b"].astype(np.int64), NODES,
                               reach)
           & (pts["kind"] == ORDER_ONLY) & (pts["a"] != 0) & (pts["b"] != 0))
    assert far.sum() > 1000
    every = lp_maps(pts, NODES, 0, HZ)
    near = lp_maps(pts[~far], NODES, 0, HZ)
    for n in range(1, NODES):
        assert every[n] is not None and near[n] is not None
        x = np.linspace(pts["ta"][pts["a"] == n].min(), pts["ta"][pts["a"] == n].max(), 50)
        assert np.array_equal(map_to_reference(every[n], x), map_to_reference(near[n], x))


def test_far_orders_stay_hard_constraints():
    pts = ring_with_barriers(5)
    fit = fit_points(pts, NODES, 0, HZ)
    assert all(m is not None for m in fit.maps)
    assert fit.reversed == 0  # counted over every point given, the far orders' too
    assert fit.points == pts.size


def test_far_orders_kept_where_a_node_has_no_other_way_back():
    """A one-way chain 0 -> 1 -> ... -> 19 whose only ways back are collectives of two
    nodes: {0, 1}, {1, 10} and {10, 19}, the last two farther apart than the pair terms
    reach and without the reference. Without their orders nodes 2-19 would have no way back
    to the reference and no map; with them every node is centred."""
    rng = np.random.default_rng(6)
    clocks = linear_clocks(rng, NODES)
    n = 4000
    a = rng.integers(0, NODES - 1, n)
    ts = rng.uniform(0.0, 40.0, n)
    chain = np.zeros(n, POINT_DTYPE)
    chain["a"], chain["b"], chain["kind"] = a, a + 1, 1
    chain["ta"] = clocks.local(a, ts)
    chain["tb"] = clocks.local(a + 1, ts + rng.uniform(5.0, 12.0, n) * 1e-6)
    parts = [chain]
    for members in ((0, 1), (1, 10), (10, 19)):
        u = np.array(members * 40)
        w = np.array(members[::-1] * 40)
        k = np.repeat(np.arange(0.5, 40.0, 1.0), 2)
        order = np.zeros(u.size, POINT_DTYPE)
        order["a"], order["b"], order["kind"] = u, w, ORDER_ONLY
        order["ta"], order["tb"] = clocks.local(u, k), clocks.local(w, k + 20e-6)
        parts.append(order)
    pts = np.concatenate(parts)
    pts["before"] = pts["after"] = np.arange(pts.size)
    maps = lp_maps(pts, NODES, 0, HZ)
    assert all(m is not None for m in maps)


def test_row_generation_reaches_the_whole_programs_optimum(monkeypatch):
    """The fallback's programs solved by row generation (rows added per round: per column
    the one a solution breaks most) end at the optimum of all their rows at once (every row
    in the first round): the same objective, spin by spin."""
    from dataclasses import replace

    from cell_otf2.sync.nodefit import highs

    seen: list[float] = []
    solve = highs.GrowingLp.solve

    def recorded(self):  # noqa: ANN001, ANN202
        x = solve(self)
        seen.append(float(self.cost @ x))
        return x

    monkeypatch.setattr(highs.GrowingLp, "solve", recorded)
    pts = ring_with_barriers(7)
    lp_maps(pts, NODES, 0, HZ, replace(LpOptions(), spins=1))
    generated = seen[-1]
    seen.clear()
    lp_maps(pts, NODES, 0, HZ, replace(LpOptions(), spins=1, start_us=1e9, start_us_many=1e9))
    assert len(seen) == 1  # every row at first: one solve
    assert generated == pytest.approx(seen[0], rel=1e-9, abs=1e-6)
