"""Runs of seconds whose node clocks change rate, centred between all messages (our hybrid
workload: one-way rings closed by collectives, no symmetric kind): the centring's curve
windows were at least 0.5 s long, so a run under 5 s had fewer than ten of them, too few to
choose any model but a line, and a rate change early in the run left the map microseconds
off there (simulated, default clocks: four drift segments; 0.74-1.92 us RMS and up to 8.3 us
max before). Windows are now 1/64 of a run shorter than 32 s; a longer run's are as before.
Measured against the simulator's truth at every record of the other nodes."""

from __future__ import annotations

import numpy as np
import pytest
from node_oracle import errors_us, load, ours_to_ref

from cell_otf2.sim.run import simulate_run
from cell_otf2.sync.nodefit.curves import node_curves
from cell_otf2.sync.nodefit.points import POINT_DTYPE, LpOptions

HZ = 14_318_000.0


def windows_of(span_s: float, per_direction: int) -> int:
    """How many curve windows the centring gives two nodes exchanging ``per_direction``
    messages each way, evenly over ``span_s``."""
    t = np.linspace(0.0, span_s * HZ, per_direction)
    pts = np.zeros(2 * per_direction, POINT_DTYPE)
    pts["a"][:per_direction], pts["b"][per_direction:] = 1, 1
    pts["ta"] = np.r_[t, t]
    pts["tb"] = pts["ta"] + 50.0
    centers, _ = node_curves(pts, 2, 0, np.zeros(2), HZ, LpOptions())
    return int(centers.size)


@pytest.mark.parametrize("span_s, windows", [(1.0, 65), (4.0, 65), (31.0, 65), (64.0, 65),
                                             (120.0, 65), (600.0, 65), (3600.0, 361)])
def test_a_run_of_seconds_has_the_windows_of_a_longer_one(span_s, windows):
    """Messages every 100 ms each way, or denser: windows of 1/64 of the run (the last
    point, at the run's end, opens a 65th), at most 10 s. Before, at least 0.5 s: a run of
    1 s had 3, one of 4 s 9, one of 31 s 63."""
    assert windows_of(span_s, max(int(span_s * 10), 4096)) == windows


def test_sparse_messages_still_hold_several_points_per_window():
    assert windows_of(4.0, 40) == 6  # 40 messages each way over 4 s: 8 per window


@pytest.mark.parametrize("seed, run_s", [(5, 1.0), (5, 4.0), (9, 1.0), (9, 4.0)])
def test_a_rate_change_in_a_short_run_is_followed(tmp_path, seed, run_s):
    """Before: 0.91 / 1.92 / 1.50 / 0.86 us RMS, 2.4-7.3 us max."""
    run = tmp_path / "run"
    simulate_run(run, "hybrid", seed=seed, nodes=4, ranks=8, spes=1, chunks=1,
                 duration_s=run_s, compute_s=0.005, max_ppm=50.0)
    d = load(run)
    assert all(m is not None for m in d.ours)
    err = np.concatenate(list(errors_us(d, ours_to_ref(d)).values()))
    rms, most = float(np.sqrt(np.mean(err ** 2))), float(np.abs(err).max())
    assert rms <= 0.4 and most <= 1.5, (rms, most)
