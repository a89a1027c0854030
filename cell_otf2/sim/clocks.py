"""True clocks of a simulated run: each node's timebase mapped to the reference (rank 0's node)
and back, exactly, through ``NodeClock.to_node`` / ``to_ref`` (a drift rate changing at a few
knots), so the simulator and the truth share one definition; SPE decrementers derive from
``to_node`` (``spu.py``). It does not read or write files and knows nothing about records."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def piecewise(x: np.ndarray | float, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Piecewise-linear map through the knots, extended linearly beyond both ends
    (``np.interp`` alone would clamp: a clock that stops)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.interp(x, xp, fp)
    lo, hi = x < xp[0], x > xp[-1]
    if np.any(lo):
        y = np.where(lo, fp[0] + (x - xp[0]) * (fp[1] - fp[0]) / (xp[1] - xp[0]), y)
    if np.any(hi):
        y = np.where(hi, fp[-1] + (x - xp[-1]) * (fp[-1] - fp[-2]) / (xp[-1] - xp[-2]), y)
    return y


@dataclass
class NodeClock:
    """One node's timebase as a piecewise-linear function of reference time."""

    name: str
    ref_knots: np.ndarray  # reference ticks, float64, strictly increasing
    node_knots: np.ndarray  # node timebase at those instants, float64, strictly increasing

    def to_node(self, t_ref: np.ndarray | float) -> np.ndarray:
        """Node timebase (real-valued ticks) at reference time ``t_ref``."""
        return piecewise(t_ref, self.ref_knots, self.node_knots)

    def to_ref(self, x_node: np.ndarray | float) -> np.ndarray:
        """Reference time at which the node timebase reads ``x_node``."""
        return piecewise(x_node, self.node_knots, self.ref_knots)

    def tb_floor(self, t_ref: np.ndarray | float) -> np.ndarray:
        """Integer timebase register value at reference time ``t_ref``."""
        return np.floor(self.to_node(t_ref)).astype(np.int64)

    def midpoint_map(self, t_mid: float) -> tuple[float, float]:
        """(offset, rate) with ``reference = offset + rate * node_timebase`` exact at ``t_mid``."""
        j = int(np.clip(np.searchsorted(self.ref_knots, t_mid) - 1, 0, len(self.ref_knots) - 2))
        rate = (self.ref_knots[j + 1] - self.ref_knots[j]) / (
            self.node_knots[j + 1] - self.node_knots[j]
        )
        x_mid = float(self.to_node(t_mid))
        return float(t_mid - rate * x_mid), float(rate)


def make_node_clock(
    rng: np.random.Generator,
    name: str,
    *,
    is_reference: bool,
    t_begin: float,
    t_end: float,
    start_timebase: int,
    max_ppm: float,
    segments: int = 4,
    wander_us: float = 0.0,
    wander_period_s: float = 240.0,
    hz: float = 14_318_000.0,
    hold: bool = False,
) -> NodeClock:
    """A node clock valid on [t_begin, t_end] (reference ticks), with margin on both sides.

    The reference node maps identically. Others start at ``start_timebase`` at ``t_begin`` and
    drift by a base rate within +-max_ppm plus a rate change of up to 30 % of max_ppm per
    segment, plus a sine of ``wander_us`` on the offset (its period ``wander_period_s`` within
    +-20 %, ``hz`` ticks a second) from ``t_begin`` to a fifth of the run past ``t_end``
    (the run may outlast its estimate), held beyond. ``hold``: the first and the last
    segments' rates continue before ``t_begin`` and after ``t_end`` (else the margins drift
    at rates of their own, as earlier versions did: a run that outlasts its estimate bends
    there). Without wander the random draws are those of earlier versions (same seed, same
    clocks).
    """
    margin = max(t_end - t_begin, 1.0) * 2.0 + 1e9
    if is_reference:
        knots = np.array([t_begin - margin, t_end + margin], dtype=np.float64)
        return NodeClock(name, knots, knots.copy())
    segments = max(1, segments)
    inner = np.linspace(t_begin, t_end, segments + 1)
    ref_knots = np.concatenate([[t_begin - margin], inner, [t_end + margin]])
    base = rng.uniform(-0.7, 0.7) * max_ppm
    wander = rng.uniform(-0.3, 0.3, size=len(ref_knots) - 1) * max_ppm
    ppm = np.clip(base + wander, -max_ppm, max_ppm)
    if hold:
        ppm[0], ppm[-1] = ppm[1], ppm[-2]
    rates = 1.0 + ppm * 1e-6  # node ticks per reference tick, per segment
    steps = np.diff(ref_knots) * rates
    node_knots = np.concatenate([[0.0], np.cumsum(steps)])
    # anchor: node timebase = start_timebase at t_begin (knot index 1)
    node_knots += float(start_timebase) - node_knots[1]
    if wander_us > 0 and wander_period_s > 0:
        period = wander_period_s * hz * rng.uniform(0.8, 1.2)
        phase = rng.uniform(0.0, 2.0 * np.pi)
        t_stop = t_end + 0.2 * (t_end - t_begin)
        n = int(np.ceil((t_stop - t_begin) / period * 128.0)) + 1
        grid = np.linspace(t_begin, t_stop, max(n, 2))
        near = np.abs(grid[:, None] - ref_knots[None, :]).min(axis=1) < 1.0
        ref_all = np.union1d(ref_knots, grid[~near])
        node_all = piecewise(ref_all, ref_knots, node_knots)
        arg = 2.0 * np.pi * (np.clip(ref_all, t_begin, t_stop) - t_begin) / period + phase
        node_all += wander_us * 1e-6 * hz * (np.sin(arg) - np.sin(phase))
        return NodeClock(name, ref_all, node_all)
    return NodeClock(name, ref_knots, node_knots)
