"""Message points between simulated node clocks for the node fit's tests: linear clocks
(``linear_clocks``) and messages one way round a ring of them (``one_way_ring``), which only
the fallback centring fits. Nothing else."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cell_otf2.sync.nodefit.points import POINT_DTYPE

HZ = 14_318_000.0


@dataclass
class LinearClocks:
    """Per node the timebase at the run's start and its rate (node 0: the reference)."""

    start: np.ndarray
    rate: np.ndarray

    def local(self, node: np.ndarray, t_s: np.ndarray) -> np.ndarray:
        """The timebase of ``node`` at ``t_s`` seconds into the run (whole ticks)."""
        return np.floor(self.start[node] + t_s * HZ * self.rate[node])


def linear_clocks(rng: np.random.Generator, n_nodes: int, t0: float = 2.0e11,
                  ppm: float = 30.0) -> LinearClocks:
    """Clocks started at random, rates within ``ppm``; node 0 starts at ``t0``, rate 1."""
    start = rng.uniform(1e10, 1e11, n_nodes)
    start[0] = t0
    rate = 1.0 + rng.uniform(-ppm, ppm, n_nodes) * 1e-6
    rate[0] = 1.0
    return LinearClocks(start, rate)


def one_way_ring(rng: np.random.Generator, clocks: LinearClocks, n: int, span_s: float,
                 kind: int = 0) -> np.ndarray:
    """``n`` messages from a random node to the next round the ring, sent at random over
    ``span_s`` seconds, 5-12 us on the way (POINT_DTYPE, ``before`` and ``after`` numbered)."""
    n_nodes = clocks.start.size
    a = rng.integers(0, n_nodes, n)
    b = (a + 1) % n_nodes
    ts = rng.uniform(0.0, span_s, n)
    tr = ts + rng.uniform(5.0, 12.0, n) * 1e-6
    pts = np.zeros(n, POINT_DTYPE)
    pts["a"], pts["b"], pts["kind"] = a, b, kind
    pts["ta"], pts["tb"] = clocks.local(a, ts), clocks.local(b, tr)
    pts["before"] = pts["after"] = np.arange(n)
    return pts
