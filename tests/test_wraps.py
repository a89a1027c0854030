"""Decrementer wraps over families of simulated runs, against the simulator's ground truth.

Heartbeats are written only when needed (docs/format.md 6.8), so a context without any is no
evidence of damage. Clean runs (heartbeats where a step reaches 2^31 or 2^30 ticks, none at all
where the slot order or the mailboxes still prove no wrap hides) must convert without damage,
with one report interval per live interval and bounds as tight as if every step were known; runs
whose steps really hide wraps must be decided from the order or reported, in records, and never
moved by a whole wrap silently. Deciding wraps must take memory linear in the run. """

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import minirun  # noqa: E402
import numpy as np
import pytest
from cellbench import evaluate as ev  # noqa: E402
from cellbench.analysis import analyze  # noqa: E402
from paths import ENV

from cell_otf2.decode import decoder as decode  # noqa: E402
from cell_otf2.decode.intervals import MOD  # noqa: E402
from cell_otf2.input import format as fmt  # noqa: E402
from cell_otf2.model import OrderOptions  # noqa: E402
from cell_otf2.run.summary import interval_widths, sync_report  # noqa: E402
from cell_otf2.sim.run import simulate_run  # noqa: E402
from cell_otf2.sim.truth import load_truth  # noqa: E402

#: the bounds these tests compare with the truth are the guaranteed mode's (docs/sync-report.md
#: 5.1: they hold for read delays up to 8 ticks; the default mode can miss by the delay)
GUARANTEED = OrderOptions(read_delay_ticks=8.0)

HB_NEEDED = 1 << 31  # docs/format.md 6.8: a heartbeat only where a step would reach 2^31 ticks


def _run(tmp_path: Path, seed: int, **opts) -> Path:
    run = tmp_path / "run"
    simulate_run(run, "blackscholes", seed, **opts)
    return run


def _spe_truth_errors(pipe, truth) -> tuple[np.ndarray, np.ndarray]:
    """Per written SPE record: |time - true time| and its domain's bound width."""
    dec, res = pipe.decoded, pipe.sync
    rec = dec.records
    sel = (rec["domain"] >= dec.n_nodes) & res.usable
    true_t = ev.true_record_times(dec, truth)
    err = np.abs(rec["time"][sel].astype(np.float64) - true_t[sel])
    width = (res.upper - res.lower)[rec["domain"][sel]]
    return err, width


def _assert_truth_within_bounds(pipe, truth) -> None:
    """Every bounded interval's true offset lies in its bounds, every written SPE record is
    within its bound of its true time: nothing is off by a wrap without saying so."""
    dec, res = pipe.decoded, pipe.sync
    true = ev.true_offsets(dec, truth)
    spe = ev.interval_mask(dec) & np.isfinite(res.lower) & np.isfinite(res.upper)
    assert spe.any()
    assert np.all(true[spe] >= res.lower[spe] - 1e-6), (true - res.lower)[spe].min()
    assert np.all(true[spe] <= res.upper[spe] + 1e-6), (res.upper - true)[spe].min()
    err, width = _spe_truth_errors(pipe, truth)
    ok = np.isfinite(width)
    assert np.all(err[ok] <= width[ok] + 2), (err[ok] - width[ok]).max()


def _heartbeats_per_context(pipe) -> np.ndarray:
    rec = pipe.decoded.records
    hb = rec["loc"][rec["code"] == decode.S.HEARTBEAT]
    spe_locs = pipe.decoded.contexts["loc"]
    return np.array([int((hb == loc).sum()) for loc in spe_locs.tolist()])


# ------------------------------------------------------------------------------------------
# clean runs: no damage, one interval per live interval, tight bounds, truth inside them
# ------------------------------------------------------------------------------------------

#: id -> simulator options; each a clean run (no step hides a wrap) of another shape
CLEAN = {
    # a long run: 9 minutes, 8 contexts, PPE polls every ~2 s, heartbeats only when needed
    "long-9min-poll2s": dict(spes=8, phases=1, chunks=4, compute_s=120, poll_s=2.0,
                              heartbeat_ticks=HB_NEEDED, seed=3),
    "poll-0.5s-one-record-blocks": dict(spes=3, phases=1, chunks=5, compute_s=100,
                                        poll_s=0.5, heartbeat_ticks=HB_NEEDED,
                                        spe_buffer_records=1, spe_buffers=1, seed=11),
    "poll-30s-2-phases": dict(spes=4, phases=2, chunks=3, compute_s=130, poll_s=30.0,
                              heartbeat_ticks=HB_NEEDED, spe_buffer_records=4, seed=12),
    "no-poll-heartbeats-when-needed": dict(spes=4, phases=2, chunks=4, compute_s=125,
                                           heartbeat_ticks=HB_NEEDED, seed=13),
    "no-poll-default-heartbeats": dict(spes=4, phases=2, chunks=4, seed=14),
    # no heartbeats, steps < 2^31: the mailbox exchanges pin each phase (no PPE polls)
    "no-heartbeats-mailboxes-only": dict(spes=4, phases=3, chunks=4, compute_s=90,
                                         heartbeats=False, seed=15),
    "no-heartbeats-poll-5s-long": dict(spes=2, phases=4, chunks=6, compute_s=110,
                                       heartbeats=False, poll_s=5.0, seed=16),
    "no-heartbeats-short-steps-many-blocks": dict(spes=6, phases=3, chunks=8, compute_s=20,
                                                  heartbeats=False, spe_buffer_records=2,
                                                  seed=17),
    # a PS3's 79.8 MHz timebase wraps every 54 s: heartbeats every 27 s when needed
    "ps3-79.8MHz-poll-1s": dict(spes=4, phases=1, chunks=4, compute_s=20,
                                timebase_hz=79_800_000, poll_s=1.0,
                                heartbeat_ticks=HB_NEEDED, seed=18),
    "ps3-79.8MHz-no-heartbeats": dict(spes=3, phases=2, chunks=3, compute_s=15,
                                      timebase_hz=79_800_000, heartbeats=False, seed=19),
}


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_run_converts_clean(tmp_path, monkeypatch, name):
    opts = dict(CLEAN[name])
    run = _run(tmp_path, opts.pop("seed"), **opts)
    truth = load_truth(run)
    pipe = analyze(run, order_options=GUARANTEED)
    assert not pipe.damage.summary_lines()  # exit status 0
    report = sync_report(pipe)
    assert report["lost"]["records"] == 0
    want = {(int(i["rank"]), int(i["ctx"]), int(i["interval"])): int(i["readings"])
            for i in truth.intervals}
    got = {(i["rank"], i["ctx"], i["interval"]): i["readings"] for i in report["intervals"]}
    assert got == want  # one report interval per live interval, with all its readings
    _assert_truth_within_bounds(pipe, truth)
    width = interval_widths(pipe.decoded.domains, pipe.sync.upper - pipe.sync.lower)
    assert np.isfinite(width).all()
    if name.startswith("long"):  # the family is not degenerate: some needed a heartbeat
        beats = _heartbeats_per_context(pipe)
        assert (beats > 0).any() and (beats == 0).any(), beats
    # as tight as the same run unwrapped with every step taken at face value (true here)
    monkeypatch.setattr(decode, "_wrap_candidates", lambda *a, **k: np.zeros(a[5].size, bool))
    plain = analyze(run, order_options=GUARANTEED)
    assert pipe.decoded.domains.size >= plain.decoded.domains.size
    base = interval_widths(plain.decoded.domains, plain.sync.upper - plain.sync.lower)
    assert np.allclose(width, base), (width, base)


# ------------------------------------------------------------------------------------------
# steps that really hide wraps: decided where the order allows one count, else reported
# ------------------------------------------------------------------------------------------

#: id -> simulator options of runs whose compute steps (320-400 s) really hide wraps; no
#: record pins the end of such a step (it may lie anywhere between two block headers), so
#: where the wrap went is open even when PPE polls give the headers' times to the second
HIDDEN = {
    "poll-10s-one-record-blocks": dict(spes=2, phases=1, chunks=3, compute_s=360,
                                       poll_s=10.0, heartbeats=False, spe_buffer_records=1,
                                       spe_buffers=1, seed=21),
    "poll-20s-one-record-blocks-3-spes": dict(spes=3, phases=2, chunks=2, compute_s=340,
                                              poll_s=20.0, heartbeats=False,
                                              spe_buffer_records=1, spe_buffers=1, seed=22),
    "mailboxes-only-16-record-blocks": dict(spes=3, phases=1, chunks=3, compute_s=360,
                                            heartbeats=False, seed=23),
    "mailboxes-only-2-phases": dict(spes=2, phases=2, chunks=4, compute_s=330,
                                    heartbeats=False, spe_buffer_records=4, seed=24),
}


@pytest.mark.parametrize("name", sorted(HIDDEN))
def test_hidden_wraps_reported_in_records(tmp_path, name):
    opts = dict(HIDDEN[name])
    run = _run(tmp_path, opts.pop("seed"), **opts)
    truth = load_truth(run)
    pipe = analyze(run, order_options=GUARANTEED)
    kinds = {e.kind: e for e in pipe.damage.entries()}
    dec = pipe.decoded
    n_spe = int((dec.records["domain"] >= dec.n_nodes).sum())
    err, width = _spe_truth_errors(pipe, truth)
    # the run does hide wraps: some steps are more than 2^32 ticks long in truth
    true_t = ev.true_record_times(dec, truth)
    rec = dec.records
    spe = np.flatnonzero(rec["domain"] >= dec.n_nodes)
    same = rec["loc"][spe][1:] == rec["loc"][spe][:-1]
    assert (np.diff(true_t[spe])[same] > MOD).any()
    _assert_truth_within_bounds(pipe, truth)
    assert "unresolved_wrap" in kinds
    counted = kinds["unresolved_wrap"].count
    # records, not steps: no more than there are SPE records, and at least every record
    # whose time is off by half a wrap or more (those must be among the ones reported)
    assert 0 < counted <= n_spe
    assert counted >= int((err >= MOD / 2).sum())
    assert sync_report(pipe)["lost"]["records"] >= counted
    assert len(sync_report(pipe)["intervals"]) == truth.intervals.size


@pytest.mark.parametrize("order", [">", "<"])
@pytest.mark.parametrize("wait", [3_000_000_000, 5_000_000_000, 9_000_000_000,
                                  3 * MOD + 5, 20_000_000_000])
def test_wrap_hidden_in_a_mailbox_wait_is_decided(tmp_path, wait, order):
    """An SPE waits ``wait`` ticks in its inbound mailbox read (no heartbeat) while the PPE
    sleeps: every record is flushed on its own, so the read's BEGIN is bound by the PPE's
    sleep and its END by the PPE's write, and the slot order fixes how many wraps (0 to 4)
    the wait hid, exactly; no damage, and every record at its true time within its bound."""
    run = tmp_path / "run"
    minirun.build(run, order, records_per_block=1, wait=wait)
    pipe = analyze(run, order_options=GUARANTEED)
    assert not pipe.damage.summary_lines()
    dec, res = pipe.decoded, pipe.sync
    rec = dec.records
    spe = rec["domain"] >= dec.n_nodes
    true_t = np.array([150, 160, 170, 260, 270, 280 + wait, 500 + wait, 510 + wait,
                       600 + wait])
    width = (res.upper - res.lower)[rec["domain"][spe]]
    assert np.isfinite(width).all()
    assert np.all(np.abs(rec["time"][spe] - true_t) <= width + 1), rec["time"][spe] - true_t
    assert len(sync_report(pipe)["intervals"]) == 1


# ------------------------------------------------------------------------------------------
# memory linear in the run
# ------------------------------------------------------------------------------------------

_LIMITED = """
import resource, sys
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from cellbench.analysis import analyze
pipe = analyze(sys.argv[1])
print(len(pipe.decoded.links), len(pipe.damage.entries()))
"""


def test_deciding_many_wraps_fits_in_linear_memory(tmp_path):
    """Thousands of candidate steps (no heartbeats, no PPE record during minutes of compute):
    the all-pairs bound table this needed before (domains^2 * 8 bytes: it asked for 11 GiB
    here) cannot be allocated under a 1.5 GiB address-space limit; single-source searches
    over the constraints fit."""
    run = tmp_path / "run"
    simulate_run(run, "blackscholes", 4, spes=16, phases=60, heartbeats=False)
    limit = int(1.5 * (1 << 30))
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY and soft < limit:
        pytest.skip("this process already runs under a tighter address-space limit")
    out = subprocess.run([sys.executable, "-c", _LIMITED, str(run), str(limit)],
                         capture_output=True, text=True, timeout=600, env=ENV)
    assert out.returncode == 0, out.stderr[-2000:]
    links, damage = (int(x) for x in out.stdout.split())
    assert links > 15_000  # the candidates: (links)^2 * 8 bytes would be gigabytes
    assert damage == 0


def test_corrupt_ppe_reading_does_not_shorten_a_window(tmp_path):
    """The PPE record right after the block that ends a 5e9-tick mailbox wait reads 300 (a
    corrupt timebase): it is dropped as running backwards, and must not serve as the end of
    that block's window, which would then look too short to hide the wrap it does hide."""
    run = tmp_path / "run"
    wait = 5_000_000_000
    minirun.build(run, records_per_block=1, wait=wait)
    path = run / "rank00000.cbt"
    data = bytearray(path.read_bytes())
    slots = np.frombuffer(data, dtype=fmt.BIG.ppe, offset=fmt.HEADER_SIZE)
    at = int(np.flatnonzero(slots["code"] == fmt.PpeCode.OUT_MBOX_READ_BEGIN)[0])
    row = np.frombuffer(data, dtype=fmt.BIG.ppe, count=1,
                        offset=fmt.HEADER_SIZE + at * fmt.SLOT_SIZE)
    assert int(row["timebase"][0]) == 301 + wait
    row["timebase"] = 301
    path.write_bytes(bytes(data))
    pipe = analyze(run, order_options=GUARANTEED)
    assert [e.kind for e in pipe.damage.entries()] == ["backwards_timebase"]
    dec, res = pipe.decoded, pipe.sync
    rec = dec.records
    spe = rec["domain"] >= dec.n_nodes
    true_t = np.array([150, 160, 170, 260, 270, 280 + wait, 500 + wait, 510 + wait,
                       600 + wait])
    width = (res.upper - res.lower)[rec["domain"][spe]]
    assert np.all(np.abs(rec["time"][spe] - true_t) <= width + 1), rec["time"][spe] - true_t
