"""Within a node no message is written reversed, read back from the archive: over a family
of short cluster runs (2-4 nodes, 0.1-0.3 s, MPI every 10 ms, seeds 0-15), where the SPE
solver's relaxation (slot order taken as exact) reverses a mailbox message by a fraction of
a tick in about one run of four, the offsets are moved to keep it (``sync/keep_messages.py``)
and the summary's count is the archive's. With that step taken out, the same runs hold
reversed mailbox messages: the family does make the case."""

from __future__ import annotations

from pathlib import Path

import pytest
from otf2check import read_events

from cell_otf2.run.conversion import convert
from cell_otf2.sim.run import simulate_run
from cell_otf2.sync import synchronize

SEEDS = range(16)


def _reversed(archive: Path) -> int:
    rb = read_events(archive)
    return (sum(m.recv_time < m.send_time for m in rb.messages)
            + sum(o.complete_time is not None and o.complete_time < o.issue_time
                  for o in rb.rma))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    out = []
    for seed in SEEDS:
        nodes = 2 + seed % 3
        run = tmp_path_factory.mktemp("kept") / f"run{seed}"
        simulate_run(run, "cluster", seed, nodes=nodes, ranks=2 * nodes, spes=2,
                     exchange_s=0.01, duration_s=(0.1, 0.2, 0.3)[seed % 3], wander_us=0.0,
                     wander_period_s=240.0, topology="ring", max_ppm=50.0, imbalance=0.01,
                     shift_bytes=4096, drift_segments=1)
        out.append(run)
    return out


def test_no_message_within_a_node_written_reversed(runs, tmp_path):
    for run in runs:
        anchor = tmp_path / f"{run.name}.otf2"
        summary = convert(run, anchor)
        assert _reversed(anchor) == summary.order_violations == 0, run.name


def test_without_keeping_them_the_family_reverses_messages(runs, tmp_path, monkeypatch):
    monkeypatch.setattr(synchronize, "keep_messages", lambda *args: None)
    found = []
    for run in runs:
        anchor = tmp_path / f"{run.name}.otf2"
        summary = convert(run, anchor)
        found.append(_reversed(anchor))
        assert found[-1] == summary.order_violations, run.name
    assert sum(n > 0 for n in found) >= 4, found
