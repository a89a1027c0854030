"""End to end: CBT 1 runs -> archive, checked like a user would (README, docs/archive.md).

Every archive must pass otf2-print, read back with the otf2 reader with exactly the events the
input implies (counted per kind and per location from the raw dump, independently of the
converter's own mapping code), pair every message and DMA, and keep each location's time
non-decreasing. Synchronization is checked against the simulator's ground truth.
"""

from __future__ import annotations

import json
from pathlib import Path

import minirun  # noqa: E402
import numpy as np
import pytest
from cellbench.analysis import analyze  # noqa: E402
from otf2check import check_archive, otf2_print_ok, read_events, vite_render  # noqa: E402

from cell_otf2 import convert  # noqa: E402
from cell_otf2.cli import main as cli_main  # noqa: E402
from cell_otf2.model import OrderOptions  # noqa: E402

# ------------------------------------------------------------------------------------------
# the hand-built run: exact content, exact truth
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", [">", "<"])
@pytest.mark.parametrize("per_block", [1, 4])
def test_minirun_converts_exactly(tmp_path, order, per_block):
    run = tmp_path / "run"
    minirun.build(run, order, per_block)
    summary = convert(run, tmp_path / "out" / "a.otf2", report=tmp_path / "rep.json")
    assert not summary.lossy, summary.damage
    anchor = tmp_path / "out" / "a.otf2"
    check_archive(anchor, run)
    rb = read_events(anchor)
    assert [m.tag for m in rb.messages if m.comm == "Cell mailboxes"] == [1, 2]
    (op,) = rb.rma
    assert op.remote == "Main memory (rank 0)" and op.bytes == 4096 and op.kind == "RmaGet"
    assert op.attrs["DMA tag"] == 3 and op.attrs["MFC opcode"] == 0x40
    # rank 0's PPE records carry their raw timebase (docs/archive.md 2)
    enters = [e.time for e in rb.events if e.loc == "PPE thread 0 (rank 0)"]
    assert enters[0] == 101
    clock = rb.defs.clock
    assert clock["timer_resolution"] == minirun.HZ and clock["global_offset"] == 101
    rep = json.loads((tmp_path / "rep.json").read_text())
    (iv,) = rep["intervals"]
    assert iv["lower_ticks"] <= minirun.SPE_OFFSET + 1 <= iv["upper_ticks"]
    assert rep["relaxation_ticks"] == 0.0
    names = [loc[0] for loc in rb.defs.locations]
    assert names == ["PPE thread 0 (rank 0)", "Main memory (rank 0)", "SPE ctx 0 (rank 0)"]
    props = rb.defs.location_properties
    assert "cell2otf2::sync_bound_ticks" in props["SPE ctx 0 (rank 0)"]


# ------------------------------------------------------------------------------------------
# simulator runs
# ------------------------------------------------------------------------------------------

SIM_CASES = {
    "fft-big-buffered": dict(workload="fft", spes=8, phases=3, chunks=8),
    "fft-little-unbuffered": dict(workload="fft", spes=4, phases=2, chunks=6, byte_order="L",
                                  spe_buffer_records=1),
    "fft-switches-compensated": dict(workload="fft", spes=8, spus=3, phases=3, chunks=6),
    "fft-switches-restored": dict(workload="fft", spes=6, spus=2, phases=3, chunks=6,
                                  decrementer_restore="restored", byte_order="L"),
    "fft-decr-writes": dict(workload="fft", spes=4, phases=3, chunks=6, decr_writes=True),
    "matmul": dict(workload="matmul", spes=4, phases=2, chunks=6),
    "blackscholes": dict(workload="blackscholes", spes=4, phases=2, chunks=4),
    "julia": dict(workload="julia", spes=6, phases=2, chunks=6),
}


def _simulate(out: Path, case: dict, seed: int = 3) -> Path:
    sim = pytest.importorskip("cell_otf2.sim.run")
    sim.simulate_run(out, seed=seed, **case)
    return out


@pytest.fixture(scope="module", params=sorted(SIM_CASES))
def sim_run(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param) / "run"
    try:
        _simulate(out, SIM_CASES[request.param])
    except (ValueError, KeyError, NotImplementedError) as exc:  # workload not built yet
        pytest.skip(f"simulator cannot make {request.param}: {exc}")
    return request.param, out


def test_simulated_run_converts(sim_run, tmp_path):
    name, run = sim_run
    anchor = tmp_path / "a.otf2"
    summary = convert(run, anchor)
    assert not summary.lossy, summary.damage
    assert summary.order_violations == 0
    check_archive(anchor, run)


#: read delay -> how far the truth may lie outside a bound loosened by the relaxation: the
#: default (slot order exact, docs/sync-report.md) bounds have the published algorithm's meaning and
#: the simulator's readings trail their reservations by up to 8 ticks, so the truth lies
#: within 4 ticks of them (3 but after a restored context switch); with
#: ``--read-delay-ticks 8`` (guaranteed mode) inside them
TRUTH_BEYOND_BOUND = {0.0: 4.0, 8.0: 0.0}


@pytest.mark.parametrize("read_delay", sorted(TRUTH_BEYOND_BOUND))
def test_sync_against_truth(sim_run, read_delay):
    """Every record's synchronized time is within its interval's bound of the truth."""
    truth_mod = pytest.importorskip("cell_otf2.sim.truth")
    name, run = sim_run
    truth = truth_mod.load_truth(run)
    pipe = analyze(run, order_options=OrderOptions(read_delay_ticks=read_delay))
    beyond = TRUTH_BEYOND_BOUND[read_delay]
    dec, res = pipe.decoded, pipe.sync
    rec = dec.records
    rank = dec.locations["rank"][rec["loc"]]
    has = rec["domain"] >= 0
    true_t = np.empty(rec.size)
    for r, times in truth.slot_time.items():
        sel = rank == r
        true_t[sel] = times[rec["slot"][sel]]
    err = rec["time"][has] - true_t[has]
    width = (res.upper - res.lower)[rec["domain"][has]]
    slack = width + 2 * (res.relaxation + beyond) + 1  # + rounding of the result
    bad = np.abs(err) > slack
    assert not bad.any(), (name, np.abs(err).max(), int(bad.sum()))
    # interval offsets: truth inside the bounds loosened by the relaxation
    tv = {(int(i["rank"]), int(i["ctx"]), int(i["interval"])): float(i["offset_ticks"])
          for i in truth.intervals}
    d = dec.domains
    iv = np.flatnonzero(d["kind"] == 1)
    assert len(tv) == iv.size, "interval numbering differs from the truth's"
    for k in iv.tolist():
        key = (int(d["rank"][k]), int(d["ctx"][k]), int(d["interval"][k]))
        if not np.isfinite(res.lower[k]) or not np.isfinite(res.upper[k]):
            continue
        loose = res.relaxation + beyond + 1
        assert res.lower[k] - loose <= tv[key] <= res.upper[k] + loose
    # dense workloads: the well-observed intervals are tight
    if name.startswith(("fft", "matmul")) and "restored" not in name:
        big = iv[d["readings"][iv] >= 50]
        width = (res.upper - res.lower)[big]
        assert width.size and np.mean(width) <= 40.0, width


# ------------------------------------------------------------------------------------------
# the command line (README: Command line)
# ------------------------------------------------------------------------------------------


def _cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        cli_main(args)
    return int(exc.value.code or 0)


def test_cli_statuses_and_refusal(tmp_path, capsys):
    run = tmp_path / "run"
    minirun.build(run)
    out = tmp_path / "o" / "a.otf2"
    assert _cli([str(run), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "events written" in text and "lost or unusable records: none" in text
    before = out.read_bytes()
    assert _cli([str(run), "-o", str(out)]) == 4  # exists
    assert "exists" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert _cli([str(run), "-o", str(out), "--force", "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    assert _cli([str(run), "-o", str(tmp_path / "x.txt")]) == 2
    assert _cli([str(tmp_path / "missing"), "-o", str(tmp_path / "m.otf2")]) == 3
    assert not (tmp_path / "m.otf2").exists()


def test_cli_bad_dump_names_file_and_field(tmp_path, capsys):
    run = tmp_path / "run"
    minirun.build(run)
    dump = run / "rank00000.cbt"
    data = bytearray(dump.read_bytes())
    data[5] = 2  # version
    dump.write_bytes(bytes(data))
    assert _cli([str(run), "-o", str(tmp_path / "a.otf2")]) == 3
    err = capsys.readouterr().err
    assert "rank00000.cbt" in err and "version" in err and "Traceback" not in err
    assert not list(tmp_path.glob("a*"))


def test_dma_as_messages_vite(tmp_path):
    run = tmp_path / "run"
    minirun.build(run)
    anchor = tmp_path / "m.otf2"
    convert(run, anchor, dma_style="messages")
    otf2_print_ok(anchor)
    rb = read_events(anchor)
    dma = [m for m in rb.messages if m.comm == "DMA"]
    assert len(dma) == 1 and dma[0].sender == "Main memory (rank 0)"
    assert not rb.rma
    lines = vite_render(anchor, tmp_path / "m.svg")
    if lines is None:
        pytest.skip("ViTE (Debian package vite) is not installed")
    assert lines == len(rb.messages)


@pytest.mark.parametrize("jump", [3_000_000_000, 6_000_000_000])
def test_missing_heartbeat_wrap_decided_from_order(tmp_path, jump):
    """Steps that may hide wraps (no heartbeats): decided from slot order (no damage) or left
    open (damage, counted in the records after the open step), and never a timestamp outside
    its bounds."""
    run = tmp_path / "run"
    minirun.build(run, jump=jump)
    pipe = analyze(run)
    kinds = {e.kind: e for e in pipe.damage.entries()}
    # 3e9 ticks: one wrap count fits the order; 6e9: a whole wrap hides behind a short step
    # and the order cannot tell where: said, and the truth still inside the bounds
    assert ("unresolved_wrap" in kinds) == (jump > (1 << 32))
    if jump > (1 << 32):  # records after the first open step: at most the 9 SPE records
        assert 1 <= kinds["unresolved_wrap"].count <= 9
    rec = pipe.decoded.records
    spe = rec["domain"] > 0
    # SPE records are read at exactly these node times (minirun's SPE list)
    true_t = np.array([t for t in _spe_true_times(jump)], dtype=np.int64)
    got = rec["time"][spe]
    width = (pipe.sync.upper - pipe.sync.lower)[rec["domain"][spe]]
    assert np.all(np.abs(got - true_t) <= width + 1), (got - true_t, width)


def _spe_true_times(jump: int) -> list[int]:
    times = [150, 160, 170, 260, 270, 280, 500, 510, 600]
    return [t + jump if t >= 490 else t for t in times]


def test_interval_spanning_wraps_before_a_switch(tmp_path):
    """An interval that wraps several times before its STOP is cut at the right pass of the
    STOP value (the readings of blocks flushed before the STOP are certainly before it)."""
    sim = pytest.importorskip("cell_otf2.sim.run")
    truth_mod = pytest.importorskip("cell_otf2.sim.truth")
    run = tmp_path / "run"
    sim.simulate_run(run, "blackscholes", 5, spes=5, phases=2, chunks=4, spus=3)
    truth = truth_mod.load_truth(run)
    d = analyze(run).decoded.domains
    want = {(int(i["rank"]), int(i["ctx"]), int(i["interval"])): int(i["readings"])
            for i in truth.intervals}
    got = {(int(r["rank"]), int(r["ctx"]), int(r["interval"])): int(r["readings"])
           for r in d[d["kind"] == 1]}
    assert got == want
