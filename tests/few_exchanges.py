"""A cluster run of a few MPI exchanges, simulated, its node maps fitted and judged against
its truth: the shape the node fit's few-exchange tests share (2 ranks and 2 SPEs a node,
drift up to 50 ppm, a 4 KiB one-way shift beside the halo). It asserts nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from node_oracle import errors_us, load, ours_to_ref

from cell_otf2.sim.run import simulate_run


def few_exchange_run(run: Path, seed: int, nodes: int, topology: str, exchanges: int,
                     exchange_s: float, wander_us: float, period_s: float,
                     imbalance: float, drift_pieces: int = 1) -> tuple[float, float]:
    """Simulate the run into ``run`` (``drift_pieces``: the drift changes at that many even
    knots) and fit its node maps: (the largest |rate| of a node's map in ppm, the RMS error
    in us at the records of every node but the reference)."""
    simulate_run(run, "cluster", seed, nodes=nodes, ranks=2 * nodes, spes=2,
                 exchange_s=exchange_s, duration_s=exchanges * exchange_s,
                 wander_us=wander_us, wander_period_s=period_s, topology=topology,
                 max_ppm=50.0, imbalance=imbalance, shift_bytes=4096,
                 drift_segments=drift_pieces)
    d = load(run)
    rates = [abs(m.rate - 1.0) * 1e6 for m in d.ours if m is not None]
    err = np.concatenate(list(errors_us(d, ours_to_ref(d)).values()))
    return max(rates), float(np.sqrt(np.mean(err ** 2)))
