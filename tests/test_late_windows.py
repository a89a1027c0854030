"""The missed-drift pass's test of late windows (``estimate._late_windows``): a window with
messages both ways is late when the sum of its two fastest residuals lies above the pair's
least sum; the direction that rose far above its own least is the late one, and the other,
risen by under a tenth of that, stays timely, where the pair has three windows or more whose
sum is not late (fewer: both are set aside, as before). A chain whose links are received late one
way in most exchanges and whose clocks' drift steps (the node family's three worst rate-step
runs, which were 23-537 us RMS off with both directions of a late window set aside) is then
followed to within tens of microseconds, against the simulator's truth."""

from __future__ import annotations

import numpy as np
import pytest
from estimate_run import curve_errors, estimate_curves
from node_oracle import load

from cell_otf2.sim.run import simulate_run
from cell_otf2.sync.nodefit import estimate

LATE = 80.0  # ticks


def windows(drift: np.ndarray, late_fwd: np.ndarray, late_bwd: np.ndarray):
    """One node pair, one kind: per window the fastest residual each way under curves off by
    ``drift`` (forward +drift, backward -drift, least latency 10), plus any lateness."""
    n = drift.size
    fwd = 10.0 + drift + late_fwd
    bwd = 10.0 - drift + late_bwd
    floor = np.concatenate([fwd, bwd])  # key = d_key * n + window, d_key 0 / 1
    key = np.arange(2 * n)
    d_key = np.repeat([0, 1], n)
    return estimate._late_windows(floor, key, d_key, n, LATE).reshape(2, n)


def test_the_late_direction_alone_is_set_aside():
    drift = np.linspace(-600.0, 600.0, 12)  # a missed drift: hundreds of ticks
    late_bwd = np.where(np.arange(12) % 3 == 0, 0.0, 50_000.0)  # late in 2 windows of 3
    late = windows(drift, np.zeros(12), late_bwd)
    assert not late[0].any()
    assert (late[1] == (late_bwd > 0)).all()


def test_both_late_stay_late():
    late_fwd = np.where(np.arange(10) == 4, 40_000.0, 0.0)
    late_bwd = np.where(np.arange(10) == 4, 30_000.0, 0.0)
    late = windows(np.zeros(10), late_fwd, late_bwd)
    assert late[0, 4] and late[1, 4]
    assert late.sum() == 2


def test_too_few_good_windows_tell_nothing():
    late_bwd = np.where(np.arange(6) < 4, 50_000.0, 0.0)  # two windows not late
    late = windows(np.linspace(-600.0, 600.0, 6), np.zeros(6), late_bwd)
    assert (late[0] == late[1]).all() and late[0, :4].all()


def test_a_small_rise_on_both_sides_is_not_told_apart():
    late_bwd = np.where(np.arange(10) == 2, 150.0, 0.0)
    late_fwd = np.where(np.arange(10) == 2, 20.0, 0.0)  # 20 > a tenth of 150
    late = windows(np.zeros(10), late_fwd, late_bwd)
    assert late[0, 2] and late[1, 2]


@pytest.mark.parametrize("seed, nodes, exchange_s, duration_s, wander_us, steps", [
    (5, 4, 7.0, 900.0, 0.0, 5),
    (3, 4, 2.0, 600.0, 0.0, 8),
    (7, 8, 1.0, 300.0, 5.0, 6),
])
def test_rate_step_chains_are_followed(tmp_path, seed, nodes, exchange_s, duration_s,
                                       wander_us, steps):
    run = tmp_path / "run"
    simulate_run(run, "cluster", seed, nodes=nodes, ranks=2 * nodes, spes=2,
                 exchange_s=exchange_s, duration_s=duration_s, wander_us=wander_us,
                 wander_period_s=240.0, topology="chain", max_ppm=50.0, imbalance=0.01,
                 shift_bytes=4096, drift_segments=steps)
    d = load(run)
    err = np.concatenate(list(curve_errors(d, estimate_curves(d)).values()))
    assert np.sqrt(np.mean(err ** 2)) < 60e-6
