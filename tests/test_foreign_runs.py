"""Node clocks on the runs of a tracer model that is not ours (``../shared/foreign-runs``: 4
nodes, non-blocking halos whose receives are recorded at Waitall, a one-way ring of another
size, collectives; each node's true clock in ``clocks.json``). Converted as a user would, the
archive read back: no message received before its send, the summary's count equal to the
archive's, every node map within the accuracy targets against the true clocks over the run,
and the truth inside the stated bound of every piece. And the count is the archive's own: with
node clocks from the start times alone, messages come out reversed and the summary says how
many, exactly as the archive holds them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from otf2check import read_events

from cell_otf2.run.conversion import convert

FOREIGN = Path(__file__).resolve().parents[2] / "shared" / "foreign-runs"
#: run -> (RMS us, max us) targets over the run for every non-reference node
TARGETS = {"hybrid-wander-a": (0.5, 3.0), "hybrid-linear-b": (0.2, 0.5)}


def _clocks(run: Path):
    clk = json.loads((run / "clocks.json").read_text())
    t0 = clk["T0"]

    def node_tb(n: dict, t: np.ndarray) -> np.ndarray:
        amp, period, phase = n["wander"]
        return (n["a"] + t + np.floor((t - t0) * n["ppb"] / 1e9)
                + np.floor(amp * np.sin(2 * np.pi * (t - t0) / period + phase)))

    def to_ref(n: dict, x: np.ndarray) -> np.ndarray:
        t = x - n["a"]
        for _ in range(8):
            t = t - (node_tb(n, t) - x)
        return t

    return clk, node_tb, to_ref


def _reversed(archive: Path) -> int:
    rb = read_events(archive)
    return (sum(m.recv_time < m.send_time for m in rb.messages)
            + sum(o.complete_time is not None and o.complete_time < o.issue_time
                  for o in rb.rma))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_foreign_run_node_clocks(name, tmp_path):
    run = FOREIGN / name
    if not run.is_dir():
        pytest.skip(f"{run} is not here")
    anchor, report = tmp_path / "a.otf2", tmp_path / "a.json"
    summary = convert(run, anchor, report=report)
    assert not summary.lossy
    assert _reversed(anchor) == summary.order_violations == 0
    rep = json.loads(report.read_text())
    assert rep["order_violations"] == 0
    assert "node_latency" in rep["assumed"]
    clk, node_tb, to_ref = _clocks(run)
    hz = clk["timebase_hz"]
    # the run's span (its records: rank 0's node timebase is the reference's)
    t = np.linspace(clk["T0"] + 0.002 * hz, clk["T0"] + 495.5 * hz, 100_001)
    rms_target, max_target = TARGETS[name]
    for true, node in zip(clk["nodes"][1:], rep["nodes"][1:], strict=True):
        assert node["method"] == "fit" and node["estimate_error_ticks"] > 0
        seg = node["segments"]
        first = np.array([s["first_timebase"] for s in seg], dtype=np.float64)
        x = node_tb(true, t)
        k = np.clip(np.searchsorted(first, x, side="right") - 1, 0, len(seg) - 1)
        mapped = (np.array([s["offset_ticks"] for s in seg])[k]
                  + np.array([s["rate"] for s in seg])[k] * x)
        err = mapped - to_ref(true, x)
        err_us = err / hz * 1e6
        assert np.sqrt(np.mean(err_us ** 2)) <= rms_target, node["node"]
        assert np.abs(err_us).max() <= max_target, node["node"]
        bound = np.array([s["bound_ticks"] for s in seg])[k]
        assert (np.abs(err) <= bound + 1.0).all(), node["node"]
        assert node["bound_ticks"] == pytest.approx(max(s["bound_ticks"] for s in seg))


def test_order_violations_are_counted_from_the_archive(tmp_path, monkeypatch):
    """Node clocks from the start readings alone reverse messages of this run: the summary
    and the report count exactly the reversed pairs the archive holds."""
    run = FOREIGN / "hybrid-wander-a"
    if not run.is_dir():
        pytest.skip(f"{run} is not here")
    from cell_otf2.sync.nodefit import fit
    from cell_otf2.sync.synchronize import start_time_maps

    monkeypatch.setattr(fit, "fitted_node_maps",
                        lambda dec, matches, options=None, damage=None,
                        extents=None, entry_ticks=None: start_time_maps(dec))
    anchor, report = tmp_path / "a.otf2", tmp_path / "a.json"
    summary = convert(run, anchor, report=report)
    found = _reversed(anchor)
    assert found > 100
    assert summary.order_violations == found
    assert json.loads(report.read_text())["order_violations"] == found
