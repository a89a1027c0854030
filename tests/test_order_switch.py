"""Context-switch constraints (``order.py``) against the simulator's ground truth.

A small run with more contexts than SPUs, per decrementer restore mode: every switch and
continuity constraint holds for the true offsets, the solved bounds contain every true offset
without relaxation, and the STOP/START values narrow the bounds against the constraints built
from the readings around each switch alone (what ``order.py`` built before).
"""

from __future__ import annotations

import numpy as np
import pytest
from cellbench import evaluate as ev
from cellbench.analysis import analyze

from cell_otf2.model import Constraints, LinkKind, OrderOptions
from cell_otf2.sim.run import simulate_run
from cell_otf2.sim.truth import load_truth
from cell_otf2.sync.order import build_constraints
from cell_otf2.sync.synchronize import synchronize

#: the guaranteed mode (``--read-delay-ticks 8``): bounds hold for every reading that trails
#: its reservation by up to 8 ticks, so the truth lies inside them (the default's exact
#: slot order leaves it within a few ticks: tests/test_convert.py, tests/test_solver.py)
GUARANTEED = OrderOptions(read_delay_ticks=8)

CASE = dict(workload="fft", spes=8, spus=3, phases=4, chunks=8)
ALL = frozenset({"slot_order", "block", "semantic", "switch", "continuity", "program"})


@pytest.fixture(scope="module", params=["compensated", "restored"])
def switch_run(request, tmp_path_factory):
    run = tmp_path_factory.mktemp(f"switch-{request.param}") / "run"
    simulate_run(run, seed=5, decrementer_restore=request.param, **CASE)
    pipe = analyze(run, order_options=GUARANTEED)
    truth = load_truth(run)
    return request.param, pipe, ev.true_offsets(pipe.decoded, truth)


def _readings_only(pipe) -> Constraints:
    """The constraints with the switch links of the readings around each switch only: the
    last reading before STOP before the STOP record, START before the first reading after."""
    dec = pipe.decoded
    base = build_constraints(dec, pipe.matches, OrderOptions(sources=ALL - {"switch"},
                                                             read_delay_ticks=8))
    sw = dec.links[dec.links["kind"] == LinkKind.SWITCH]
    rec = dec.records
    stop, start = rec[sw["stop_rec"]], rec[sw["start_rec"]]
    src = np.r_[stop["domain"], sw["next"]].astype(np.int64)
    dst = np.r_[sw["prev"], start["domain"]].astype(np.int64)
    w = np.r_[stop["local"] - sw["last_local_prev"].astype(np.float64),
              sw["first_local_next"] - start["local"].astype(np.float64)]
    return Constraints(np.r_[base.src, src], np.r_[base.dst, dst], np.r_[base.weight, w])


def test_switch_constraints_hold_for_the_truth(switch_run):
    mode, pipe, true_off = switch_run
    dec = pipe.decoded
    assert (dec.links["kind"] == LinkKind.SWITCH).sum() >= 10, "the run must switch"
    cons = build_constraints(dec, pipe.matches, OrderOptions(sources=frozenset(
        {"switch", "continuity"})))
    assert cons.counts["switch"] > 0
    ok = np.isfinite(true_off[cons.src]) & np.isfinite(true_off[cons.dst])
    assert ok.mean() > 0.9
    slack = cons.weight[ok] - (true_off[cons.dst[ok]] - true_off[cons.src[ok]])
    assert slack.min() >= 0.0, (mode, slack.min())


def test_switch_bounds_contain_the_truth_and_narrow(switch_run):
    mode, pipe, true_off = switch_run
    dec = pipe.decoded
    mask = ev.interval_mask(dec)
    res = pipe.sync
    assert res.relaxation == 0.0
    assert ev.coverage(true_off, res.lower, res.upper, mask) == 1.0
    now = ev.width_stats(res.lower, res.upper, mask)
    old_res = synchronize(dec, _readings_only(pipe))
    assert ev.coverage(true_off, old_res.lower, old_res.upper, mask) == 1.0
    before = ev.width_stats(old_res.lower, old_res.upper, mask)
    assert now["bounded"] == before["bounded"] == mask.sum()
    # each interval at most as wide as before, and narrower on average
    assert np.all(res.upper - res.lower <= old_res.upper - old_res.lower + 1e-9)
    gain = before["mean"] - now["mean"]
    if mode == "compensated":
        # the interval before every switch is bounded from below by the kernel's restore
        # reading (after START, ``delta`` after the save): its width is a few ticks plus the
        # upper side's slack
        prev = dec.links["prev"][dec.links["kind"] == LinkKind.SWITCH]
        assert np.max((res.upper - res.lower)[prev]) <= 30.0
        assert now["mean"] <= 15.0 and gain >= 5.0, (now, before)
    else:
        assert gain >= 0.5, (now, before)


def test_contexts_off_their_spu_for_more_than_a_decrementer_pass(tmp_path):
    """The kernel's off ticks are known mod 2^32 only: a context off its SPU for more than
    2^32 ticks must not be joined by the compensated links (it made the system infeasible by
    2^32 ticks and pushed bounds off the truth)."""
    run = tmp_path / "run"
    simulate_run(run, seed=5, workload="blackscholes", spes=5, phases=2, chunks=4, spus=3)
    pipe = analyze(run, order_options=GUARANTEED)
    dec = pipe.decoded
    sw = dec.links[dec.links["kind"] == LinkKind.SWITCH]
    rec = dec.records
    off = rec["local"][sw["start_rec"]].astype(np.float64) - rec["local"][sw["stop_rec"]]
    assert (off > 2.0**32).sum() >= 2, off / 2**32
    assert pipe.sync.relaxation == 0.0
    true_off = ev.true_offsets(dec, load_truth(run))
    mask = ev.interval_mask(dec)
    assert ev.coverage(true_off, pipe.sync.lower, pipe.sync.upper, mask) == 1.0
    assert ev.width_stats(pipe.sync.lower, pipe.sync.upper, mask)["unbounded"] == 0
