"""Damaged runs (docs/damage.md): contained and counted, never a crash, never a silent change.

Scenarios are named after the damage they hold. Simulated runs get their damage either from
the simulator's ``damage`` option (with ground truth of where it is) or from byte edits of a
clean dump (``edit_slot``), for the kinds the simulator cannot make. Every scenario asserts
the exit status, the exact count of its damage kind in the summary, and that the archive is
valid; the simulator scenarios also compare every undamaged record's synchronized time with
the undamaged run's (same seed, same options) and with the truth, within the bounds.
"""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from cellbench.analysis import analyze  # noqa: E402
from otf2check import otf2_print_ok, read_events  # noqa: E402

from cell_otf2.cli import main as cli_main  # noqa: E402
from cell_otf2.decode.tracer_bugs import recognize_run  # noqa: E402
from cell_otf2.input import format as fmt  # noqa: E402
from cell_otf2.input.manifest import load_manifest  # noqa: E402
from cell_otf2.input.reader import read_dump  # noqa: E402
from cell_otf2.model import (
    LocKind,  # noqa: E402
    OrderOptions,  # noqa: E402
)

#: the guaranteed mode (``--read-delay-ticks 8``): bounds hold for every reading that trails
#: its reservation by up to 8 ticks, so the truth lies inside them (the default's exact
#: slot order leaves it within a few ticks: tests/test_convert.py, tests/test_solver.py)
GUARANTEED = OrderOptions(read_delay_ticks=8)

P, S = fmt.PpeCode, fmt.SpeCode

#: small runs the edited scenarios start from
BASES = {
    "unbuffered": dict(workload="fft", spes=2, phases=2, chunks=3, spe_buffer_records=1,
                       spe_buffers=1),
    "hybrid": dict(workload="hybrid", spes=1, ranks=2, nodes=1, phases=2, chunks=2),
}


def simulate(out: Path, seed: int = 5, **opts) -> Path:
    sim = pytest.importorskip("cell_otf2.sim.run")
    sim.simulate_run(out, seed=seed, **opts)
    return out


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    return {name: simulate(root / name, **opts) for name, opts in BASES.items()}


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        cli_main(args)
    return int(exc.value.code or 0)


def convert_cli(run: Path, anchor: Path, capsys) -> tuple[int, dict[str, tuple[int, str]]]:
    """Convert through the command line: exit status and {kind: (count, first place)}."""
    status = cli([str(run), "-o", str(anchor)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err, err
    return status, damage_counts(out)


def damage_counts(text: str) -> dict[str, tuple[int, str]]:
    """The summary's damage lines -> {kind: (count, 'file slot N' or 'file')}."""
    got = {}
    text = re.sub(r"\n {6,}(?=\S)", " ", text)  # a long line wrapped at 100 columns
    for m in re.finditer(r"^\s+(\w+): (\d+) .*?, first (?:at|in) (.+)$", text, re.M):
        got[m.group(1)] = (int(m.group(2)), m.group(3))
    return got


def dump_of(run: Path, rank: int = 0):
    man = load_manifest(run)
    return read_dump(man.dump_path(rank), man, rank)


def edit_slot(run: Path, rank: int, slot: int, view: str, **fields) -> None:
    """Set fields of one slot in rank's dump, through the format's dtype ``view``."""
    path = run / f"rank{rank:05d}.cbt"
    data = bytearray(path.read_bytes())
    lay = fmt.LAYOUTS[data[4]]
    dtype = getattr(lay, view)
    start = fmt.HEADER_SIZE + slot * fmt.SLOT_SIZE
    row = np.frombuffer(data, dtype=dtype, count=1, offset=start)
    for k, v in fields.items():
        row[k] = v
    path.write_bytes(bytes(data))


def assert_archive_valid(anchor: Path) -> None:
    otf2_print_ok(anchor)
    rb = read_events(anchor)
    for loc, times in rb.times.items():
        assert np.all(np.diff(times) >= 0), loc
    # mailbox and signal messages are written only in pairs; an MPI call is written even
    # when its partner was lost (it happened), so MPI receives may stand alone
    assert not [e for e in rb.unmatched_recvs if e.fields["communicator"] == "Cell mailboxes"]
    for msg in rb.messages:
        assert msg.recv_time >= msg.send_time, msg


# ------------------------------------------------------------------------------------------
# damage found by bench/fuzz.py: each crashed or miscounted before its fix
# ------------------------------------------------------------------------------------------


def test_unknown_codes_inside_blocks(bases, tmp_path, capsys):
    """More blocks than SPE records (one record per block, some unreadable): decode indexed
    the SPE records with block indexes (IndexError)."""
    run = copy_run(bases["unbuffered"], tmp_path / "run")
    d = dump_of(run)
    counters = d.spe["slot"][(d.spe["code"] == S.COUNTER) & (d.spe["ctx"] == 0)]
    for slot in counters[:3].tolist():
        edit_slot(run, 0, slot, "spe", code=0x02EE)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    assert got["unknown_code"] == (3, f"rank00000.cbt slot {int(counters[0])}")
    assert_archive_valid(tmp_path / "a.otf2")


def test_context_id_beyond_u16(bases, tmp_path, capsys):
    """A CTX_CREATE naming context 0xFFFFFFFF (no block header can carry it): the location
    table overflowed (OverflowError). Now the record defines nothing and is counted, and the
    context that wrote blocks is counted as never created."""
    run = copy_run(bases["unbuffered"], tmp_path / "run")
    d = dump_of(run)
    create = int(d.ppe["slot"][(d.ppe["code"] == P.CTX_CREATE) & (d.ppe["a"] == 0)][0])
    edit_slot(run, 0, create, "ppe", a=0xFFFFFFFF)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    first_block = int(d.blocks["slot"][d.blocks["ctx"] == 0][0])
    # one PPE record naming an impossible context, one context never created
    assert got["undefined_id"] == (2, f"rank00000.cbt slot {min(create, first_block)}")
    assert_archive_valid(tmp_path / "a.otf2")


def first_ppe(run: Path, rank: int, code: int) -> int:
    d = dump_of(run, rank)
    return int(d.ppe["slot"][d.ppe["code"] == code][0])


def gap_in_place(run: Path, rank: int, slot: int) -> None:
    """Replace one slot by a GAP that says it lost that one slot (framing unchanged)."""
    edit_slot(run, rank, slot, "gap", code=int(fmt.ControlCode.GAP), lost=1,
              first_ticket=slot, reserved0=0, reserved1=0, reserved2=0)


# ------------------------------------------------------------------------------------------
# synchronization stays sound around lost records
# ------------------------------------------------------------------------------------------


def truth_offsets_inside(run: Path, pipe) -> list:
    """Intervals whose true offset lies outside [lower, upper] (+1 for rounding)."""
    truth = pytest.importorskip("cell_otf2.sim.truth").load_truth(run)
    tv = {(int(i["rank"]), int(i["ctx"]), int(i["interval"])): float(i["offset_ticks"])
          for i in truth.intervals}
    d, res = pipe.decoded.domains, pipe.sync
    bad = []
    for k in np.flatnonzero(d["kind"] == 1).tolist():
        key = (int(d["rank"][k]), int(d["ctx"][k]), int(d["interval"][k]))
        if d["segment"][k] or key not in tv:
            continue
        lo, up, slack = res.lower[k], res.upper[k], res.relaxation + 1
        if not lo - slack <= tv[key] <= up + slack:
            bad.append((key, lo - tv[key], up - tv[key]))
    return bad


@pytest.mark.parametrize("seed", [0, 2, 7])
def test_gap_invents_no_order(tmp_path, seed):
    """A GAP that swallowed a block with mailbox records: pairing mailbox values by count
    across it matched later values with the wrong partners, which needed a relaxation of
    300 to 1300 ticks and put true offsets outside their bounds. Pairing stops at the loss."""
    run = simulate(tmp_path / "run", seed=seed, workload="fft", spes=4, phases=3, chunks=6,
                   damage=["gap"])
    pipe = analyze(run, order_options=GUARANTEED)
    assert pipe.damage.summary_lines()[0].startswith("gap: ")
    assert pipe.sync.relaxation == 0.0
    assert not truth_offsets_inside(run, pipe)


def test_lost_mpi_send_pairs_no_wrong_partner(bases, tmp_path):
    """One MPI_SEND lost in a GAP: the k-th send of its channel is no longer the k-th receive's
    partner. Every message still paired must be a true one (the simulator knows them)."""
    run = copy_run(bases["hybrid"], tmp_path / "run")
    d = dump_of(run, 0)
    sends = d.ppe["slot"][d.ppe["code"] == P.MPI_SEND]
    gap_in_place(run, 0, int(sends[sends.size // 2]))
    truth = pytest.importorskip("cell_otf2.sim.truth").load_truth(run)
    true_pairs = {tuple(m) for m in truth.messages[["send_rank", "send_slot", "recv_rank",
                                                    "recv_slot"]].tolist()}
    pipe = analyze(run)
    rec, locs = pipe.decoded.records, pipe.decoded.locations
    m = pipe.matches.messages
    m = m[m["kind"] == 5]
    got = set(zip(locs["rank"][rec["loc"][m["send"]]].tolist(), rec["slot"][m["send"]].tolist(),
                  locs["rank"][rec["loc"][m["recv"]]].tolist(), rec["slot"][m["recv"]].tolist(),
                  strict=True))
    assert got and got <= true_pairs, sorted(got - true_pairs)
    assert "unmatched_mpi" in {line.split(":")[0] for line in pipe.damage.summary_lines()}


# ------------------------------------------------------------------------------------------
# undefined ids: counted once, never written, never refused by the writer
# ------------------------------------------------------------------------------------------


def test_mpi_peer_outside_communicator(bases, tmp_path, capsys):
    """An MPI_IRECV naming peer 2^31 + 1 of a 2-rank communicator was written as it was and
    the writer refused the table (internal error). Now it is counted once and not written."""
    run = copy_run(bases["hybrid"], tmp_path / "run")
    d = dump_of(run, 1)
    slot = int(d.ppe["slot"][d.ppe["code"] == P.MPI_IRECV][-1])  # the earlier ones pair
    edit_slot(run, 1, slot, "ppe", b=(0x80000001 << 32) | 7)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    assert got["undefined_id"] == (1, f"rank00001.cbt slot {slot}")
    assert_archive_valid(tmp_path / "a.otf2")
    kinds = read_events(tmp_path / "a.otf2").kinds("PPE thread 0 (rank 1)")
    assert kinds["MpiIrecv"] > 0  # the dropped IRECV's IRECV_REQUEST went with it
    assert kinds["MpiIrecvRequest"] == kinds["MpiIrecv"]
    assert kinds["MpiIsendComplete"] == kinds["MpiIsend"]


def test_mpi_undefined_communicator_counted_once(bases, tmp_path, capsys):
    """An MPI_SEND on communicator 77 was counted by match and again by emit ("records not
    written"): two lines' worth for one record."""
    run = copy_run(bases["hybrid"], tmp_path / "run")
    slot = first_ppe(run, 0, P.MPI_SEND)
    edit_slot(run, 0, slot, "ppe", a=77)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    assert got["undefined_id"] == (1, f"rank00000.cbt slot {slot}")
    assert_archive_valid(tmp_path / "a.otf2")


def test_undefined_region_counted_once(bases, tmp_path, capsys):
    run = copy_run(bases["unbuffered"], tmp_path / "run")
    slot = first_ppe(run, 0, P.ENTER)
    d = dump_of(run)
    region = int(d.ppe["a"][d.ppe["slot"] == slot][0])  # entered once (main), left last
    leave = int(d.ppe["slot"][(d.ppe["code"] == P.LEAVE) & (d.ppe["a"] == region)][-1])
    edit_slot(run, 0, slot, "ppe", a=999)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    # the region's LEAVE is then a Leave whose Enter is not written: left out and counted
    assert got == {"undefined_id": (1, f"rank00000.cbt slot {slot}"),
                   "leave_without_enter": (1, f"rank00000.cbt slot {leave}")}
    assert_archive_valid(tmp_path / "a.otf2")


@pytest.mark.parametrize("op", [fmt.CollOp.GATHER, fmt.CollOp.BCAST])
def test_collective_root_outside_communicator(bases, tmp_path, capsys, op):
    """Both members agree on a rooted collective whose root (5) is no rank of the 2-rank
    communicator: gather crashed in match (IndexError), bcast was refused by the writer."""
    run = copy_run(bases["hybrid"], tmp_path / "run")
    slots = [first_ppe(run, r, P.MPI_COLL_END) for r in (0, 1)]
    for r, slot in enumerate(slots):
        edit_slot(run, r, slot, "ppe", b=(int(op) << 32) | 5)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    assert got["undefined_id"] == (2, f"rank00000.cbt slot {slots[0]}")
    assert_archive_valid(tmp_path / "a.otf2")


# ------------------------------------------------------------------------------------------
# PPE timebase out of order
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where,bit", [("middle", 62), ("first", 63), ("middle", 40)])
def test_timebase_spike_costs_one_record(bases, tmp_path, capsys, where, bit):
    """A flipped high timebase bit. Before: the spike was kept (its false time constrained the
    clocks) and every later record of the thread counted as running backwards; a flipped bit
    63 read as a negative time reached the writer (internal error). Now exactly the spiked
    record loses its clock, and the rest synchronizes as in the undamaged run."""
    run = copy_run(bases["unbuffered"], tmp_path / "run")
    d = dump_of(run)
    main = d.ppe[d.ppe["thread"] == 0]
    k = 0 if where == "first" else main.size // 2
    slot = int(main["slot"][k])
    edit_slot(run, 0, slot, "ppe", timebase=int(main["timebase"][k]) | (1 << bit))
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    assert got == {"backwards_timebase": (1, f"rank00000.cbt slot {slot}")}
    # explained as one reading out of line (the spike), found at the step back after it
    (bug,) = recognize_run(run)
    assert (bug.kind, bug.count, bug.slot) == ("backwards_timebase", 1, int(main["slot"][k + 1]))
    assert_archive_valid(tmp_path / "a.otf2")
    clean, damaged = analyze(bases["unbuffered"]), analyze(run)
    assert damaged.sync.relaxation == clean.sync.relaxation
    assert not truth_offsets_inside(run, damaged)
    same = damaged.decoded.records["slot"] != slot
    assert np.array_equal(damaged.decoded.records["time"][same],
                          clean.decoded.records["time"][same])


def test_every_spe_record_unreadable(bases, tmp_path, capsys):
    """Blocks but not one readable SPE record in the dump: the wrap check indexed the empty
    SPE record array (IndexError). Now the block headers alone are the contexts' readings."""
    run = copy_run(bases["unbuffered"], tmp_path / "run")
    d = dump_of(run)
    for slot in d.spe["slot"].tolist():
        edit_slot(run, 0, slot, "spe", code=0x02EE)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    assert got["unknown_code"] == (d.spe.size, f"rank00000.cbt slot {int(d.spe['slot'][0])}")
    assert_archive_valid(tmp_path / "a.otf2")


def test_local_store_address_near_2_64_gives_no_warning(bases, tmp_path):
    """A CTX_CREATE whose Local Store EA is 2^64 - 16: base + size wrapped around with a
    RuntimeWarning on the user's terminal, and the wrapped range matched no DMA."""
    run = copy_run(bases["unbuffered"], tmp_path / "run")
    slot = first_ppe(run, 0, P.CTX_CREATE)
    edit_slot(run, 0, slot, "ppe", b=(1 << 64) - 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipe = analyze(run)
    assert not pipe.damage.summary_lines()


# ------------------------------------------------------------------------------------------
# every damage kind of the simulator: exit status, exact counts, undamaged records unchanged
# ------------------------------------------------------------------------------------------

SIM_SPE = dict(workload="fft", spes=3, phases=3, chunks=5)
SIM_MPI = dict(workload="hybrid", spes=1, ranks=2, nodes=1, phases=2, chunks=3)

#: consequences a kind may have besides itself (records its loss leaves without partner)
#: a lost ENTER or LEAVE leaves a region open or a Leave without Enter: emit repairs and
#: counts both so every location's Enter/Leave balance (docs/archive.md, section 16)
REGION_REPAIRS = {"unclosed_region", "leave_without_enter"}
LOSS_FOLLOWS = {"no_exit", "no_run_end", "unmatched_mailbox", "unmatched_dma",
                "unmatched_mpi"} | REGION_REPAIRS
#: ... and a cut end: the last blocks of a context without heartbeats have no PPE record
#: after them to show that no wrap hides in their steps (decode's wrap check)
CUT_FOLLOWS = LOSS_FOLLOWS | {"slot_count_mismatch", "unresolved_wrap"}

#: scenario -> (simulator options, damage option, kinds beyond the named one it may cause)
SIM_SCENARIOS = {
    "truncated-dump": (SIM_SPE, "truncate", CUT_FOLLOWS),
    "gap-lost-block": (SIM_SPE, "gap", LOSS_FOLLOWS | {"missing_block"}),
    "block-past-end-of-file": (SIM_SPE, "block-overrun", CUT_FOLLOWS),
    "unknown-slot-code": (SIM_SPE, "unknown-code", LOSS_FOLLOWS),
    "undefined-counter-id": (SIM_SPE, "undefined-id", set()),
    "context-without-exit": (SIM_SPE, "no-exit", REGION_REPAIRS),
    "run-begin-without-run-end": (SIM_SPE, "no-run-end", REGION_REPAIRS),
    "mailbox-value-never-read": (SIM_SPE, "unmatched-mailbox", set()),
    "mpi-send-never-received": (SIM_MPI, "unmatched-mpi", set()),
    "timebase-runs-backwards": (SIM_SPE, "backwards-timebase", set()),
}

#: codes whose OTF2 event needs a partner (written only when paired) or that are not written
PARTNERED = {P.MPI_SEND, P.MPI_RECV, P.MPI_ISEND, P.MPI_IRECV, P.MPI_ISEND_COMPLETE,
             P.MPI_IRECV_REQUEST, S.HEARTBEAT, S.DMA}


@pytest.fixture(scope="module")
def clean_runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("clean")
    return {"spe": simulate(root / "spe", seed=11, **SIM_SPE),
            "mpi": simulate(root / "mpi", seed=11, **SIM_MPI)}


def expected_primary(kind: str, log: dict, truth, clean: Path) -> tuple[str, int, str | None]:
    """(summary kind, count, first place) the damage log of the simulator implies."""
    rank = log["rank"]
    file = f"rank{rank:05d}.cbt"
    touched = sorted(truth.damaged_slots[rank].tolist())
    if kind == "truncate":
        return "truncated_file", 1, f"{file} slot {log['partial_slot']}"
    if kind == "gap":
        return "gap", log["lost_slots"], f"{file} slot {log['gap_slot']}"
    if kind == "block-overrun":
        return "block_overrun", log["missing_records"], f"{file} slot {log['header_slot']}"
    if kind == "backwards-timebase":
        return "backwards_timebase", 1, f"{file} slot {log['slot']}"
    name = {"unknown-code": "unknown_code", "undefined-id": "undefined_id",
            "no-exit": "no_exit", "no-run-end": "no_run_end",
            "unmatched-mailbox": "unmatched_mailbox", "unmatched-mpi": "unmatched_mpi"}[kind]
    if kind in ("no-exit", "no-run-end"):
        return name, 1, None  # counted at the context run's first record, not a touched slot
    if kind == "unmatched-mpi":
        return name, 1, f"{file} slot {touched[1]}"  # ENTER, MPI_SEND, LEAVE were added
    return name, 1, f"{file} slot {touched[0]}"


def record_keys(pipe, truth) -> dict[tuple, int]:
    """Records by (rank, location kind, thread or ctx, code, true time): index; ambiguous
    keys (two records alike) are left out. The true time of a record's own reading does not
    depend on damage elsewhere, unlike its slot index."""
    rec, locs = pipe.decoded.records, pipe.decoded.locations
    keys: dict[tuple, int] = {}
    seen = set()
    for i, (loc, code, slot) in enumerate(zip(rec["loc"].tolist(), rec["code"].tolist(),
                                              rec["slot"].tolist(), strict=True)):
        r, kind, idx = locs[loc].tolist()
        key = (r, kind, idx, code, round(float(truth.slot_time[r][slot]), 3))
        if key in keys:
            seen.add(key)
        keys[key] = i
    return {k: v for k, v in keys.items() if k not in seen}


def records_removed(kind: str, log: dict, clean_pipe, truth) -> int:
    """How many records of the undamaged run the damage takes away (slot kinds edit the very
    slots the undamaged run has, so its slot indices say which)."""
    rank = log["rank"]
    rec, locs = clean_pipe.decoded.records, clean_pipe.decoded.locations
    slots = rec["slot"][locs["rank"][rec["loc"]] == rank]
    if kind in ("truncate", "block-overrun"):  # everything from the first slot not written
        return int((slots >= truth.summary["per_rank_slots"][rank]).sum())
    if kind == "gap":
        return int(((slots >= log["gap_slot"])
                    & (slots < log["gap_slot"] + log["lost_slots"])).sum())
    return {"no-exit": 2, "no-run-end": 1, "unmatched-mailbox": 2, "unknown-code": 1}.get(
        kind, 0)


@pytest.mark.parametrize("scenario", sorted(SIM_SCENARIOS))
def test_simulated_damage(scenario, clean_runs, tmp_path, capsys):
    opts, kind, may_follow = SIM_SCENARIOS[scenario]
    clean = clean_runs["mpi" if opts is SIM_MPI else "spe"]
    run = simulate(tmp_path / scenario, seed=11, damage=[kind], **opts)
    truth_mod = pytest.importorskip("cell_otf2.sim.truth")
    truth, clean_truth = truth_mod.load_truth(run), truth_mod.load_truth(clean)
    (log,) = [e for e in truth.damage if e["kind"] == kind]
    rank = log["rank"]

    # --- exit status and the summary's counts
    anchor = tmp_path / "out" / "a.otf2"
    status, got = convert_cli(run, anchor, capsys)
    assert status == 1
    name, count, first = expected_primary(kind, log, truth, clean)
    assert got[name][0] == count, got
    if first is not None:
        assert got[name][1] == first, got
    assert set(got) - {name} <= may_follow, got
    # loss is not a tracer bug: only the backwards timebase has an explanation (docs/damage.md)
    explained = [b.kind for b in recognize_run(run)]
    assert explained == (["backwards_timebase"] if kind == "backwards-timebase" else [])
    cut = clean_truth.summary["per_rank_slots"][rank] - truth.summary["per_rank_slots"][rank]
    if "slot_count_mismatch" in may_follow:  # every slot the cut took (header count)
        assert got["slot_count_mismatch"][0] == cut
    if kind == "gap":  # blocks whose header the GAP swallowed
        d = dump_of(clean, rank)
        lo, hi = log["gap_slot"], log["gap_slot"] + log["lost_slots"]
        lost_blocks = int(((d.blocks["slot"] >= lo) & (d.blocks["slot"] < hi)).sum())
        assert got.get("missing_block", (0, ""))[0] == lost_blocks
    assert_archive_valid(anchor)

    # --- the records: only the damaged ones are gone
    pipe, clean_pipe = analyze(run), analyze(clean)  # the archive's (default) times
    keys, clean_keys = record_keys(pipe, truth), record_keys(clean_pipe, clean_truth)
    gone, added = set(clean_keys) - set(keys), set(keys) - set(clean_keys)
    assert len(gone) == records_removed(kind, log, clean_pipe, truth)
    assert len(added) == (3 if kind == "unmatched-mpi" else 0)

    # --- no invented order: losing constraints never needs more loosening than none lost
    assert pipe.sync.relaxation <= clean_pipe.sync.relaxation
    # --- every undamaged record: time unchanged within the bounds, and in the archive
    both = sorted(set(keys) & set(clean_keys))
    i = np.array([keys[k] for k in both])
    c = np.array([clean_keys[k] for k in both])
    rec, crec, res, cres = pipe.decoded.records, clean_pipe.decoded.records, pipe.sync, \
        clean_pipe.sync
    r_of = pipe.decoded.locations["rank"][rec["loc"][i]]
    touched = np.array([rec["slot"][j] in set(truth.damaged_slots[int(r)].tolist())
                        for j, r in zip(i.tolist(), r_of.tolist(), strict=True)], dtype=bool)
    timed = (rec["domain"][i] >= 0) & (crec["domain"][c] >= 0) & res.usable[i] & ~touched
    assert timed.sum() > 0.9 * i.size
    i, c, r_of = i[timed], c[timed], r_of[timed]
    width = (res.upper - res.lower)[rec["domain"][i]]
    cwidth = (cres.upper - cres.lower)[crec["domain"][c]]
    one_sided = ~np.isfinite(width)  # within an unbounded side, any time is within bounds
    assert not one_sided.any() or "unresolved_wrap" in got
    arrive = i
    i, c, r_of, width, cwidth = (x[~one_sided] for x in (i, c, r_of, width, cwidth))
    t, ct = rec["time"][i], crec["time"][c]
    slack = width + cwidth + 2 * (res.relaxation + cres.relaxation) + 2
    assert np.all(np.abs(t - ct) <= slack), np.abs(t - ct).max()
    true_t = np.array([truth.slot_time[int(r)][s] for r, s in
                       zip(r_of.tolist(), rec["slot"][i].tolist(), strict=True)])
    # default mode: the truth lies within 3 ticks of the bounds (tests/test_convert.py)
    assert np.all(np.abs(t - true_t) <= width + 2 * (res.relaxation + 3) + 1)
    node_level = rec["domain"][i] < pipe.decoded.n_nodes
    assert np.array_equal(t[node_level], ct[node_level])  # PPE times are the raw timebase
    # ... and arrive in the archive: an event at that time on that location
    rb = read_events(anchor)
    locs, ctx_loc = pipe.decoded.locations, pipe.decoded.ctx_loc
    # a manifest PPE region "spe_context_run" is the run's one region: CTX_RUN_BEGIN/END
    # then give no event of their own (docs/archive.md, section 7)
    silent = ({P.CTX_RUN_BEGIN, P.CTX_RUN_END}
              if any(g.name == "spe_context_run" and g.core == "ppe"
                     for g in pipe.decoded.manifest.regions) else set())
    missing = []
    for j in arrive.tolist():
        code = int(rec["code"][j])
        if code in silent:
            continue
        if code in PARTNERED and not (code == S.DMA and int(rec["a"][j]) not in (0xA0, 0xA1,
                                                                                 0xA2)):
            continue
        r, lkind, idx = locs[rec["loc"][j]].tolist()
        if code == P.CTX_SWITCH:  # the "off SPU" region is on the SPE location
            lkind, idx = LocKind.SPE_CONTEXT, int(rec["a"][j])
        where = (f"PPE thread {idx} (rank {r})" if lkind == LocKind.PPE_THREAD
                 else f"SPE ctx {idx} (rank {r})")
        if code == P.COUNTER and lkind == LocKind.PPE_THREAD:
            where += " counters"  # a PPE thread's samples sit on its METRIC location
        if int(rec["time"][j]) not in rb.times[where]:
            missing.append((where, code, int(rec["slot"][j])))
    # a Leave whose Enter the damage took is left out (counted as leave_without_enter)
    left_out = got.get("leave_without_enter", (0, ""))[0]
    assert len(missing) <= left_out, missing[:10]
    assert ctx_loc  # the scenario has SPE contexts


def test_program_id_beyond_int64(bases, tmp_path, capsys):
    """A CTX_LOAD naming program 2^63 + 1 overflowed the context table (OverflowError). Now
    the context's program is undefined: its START and EXIT are counted and not written."""
    run = copy_run(bases["unbuffered"], tmp_path / "run")
    d = dump_of(run)
    load = int(d.ppe["slot"][(d.ppe["code"] == P.CTX_LOAD) & (d.ppe["a"] == 0)][0])
    edit_slot(run, 0, load, "ppe", b=(1 << 63) + 1)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    runs = d.spe[(d.spe["ctx"] == 0) & np.isin(d.spe["code"], [S.START, S.EXIT])]
    assert got == {"undefined_id": (runs.size, f"rank00000.cbt slot {int(runs['slot'][0])}")}
    assert_archive_valid(tmp_path / "a.otf2")


# ------------------------------------------------------------------------------------------
# damage that cannot be contained: refused with exit status 3 and one precise message
# ------------------------------------------------------------------------------------------


def _manifest_edit(run: Path, fn) -> None:
    import json

    doc = json.loads((run / "run.json").read_text())
    fn(doc)
    (run / "run.json").write_text(json.dumps(doc))


REFUSALS = {
    # scenario: (edit of the minirun, words the one message must hold)
    "not-cbt-magic": (lambda run: _poke(run, 0, b"ELF\x7f"), ["rank00000.cbt", "'magic'",
                                                            "not a CBT dump"]),
    "unsupported-version": (lambda run: _poke(run, 5, b"\x02"), ["rank00000.cbt", "'version'",
                                                                "expected 1, found 2"]),
    "rank-disagrees-with-manifest": (lambda run: _poke(run, 16, (7).to_bytes(4, "big")),
                                     ["rank00000.cbt", "'rank'", "expected 0, found 7"]),
    "timebase-disagrees-with-manifest": (
        lambda run: _poke(run, 24, (79_800_000).to_bytes(8, "big")),
        ["rank00000.cbt", "'timebase_hz'", "found 79800000"]),
    "manifest-not-json": (lambda run: (run / "run.json").write_text('{"format": "cbt",'),
                          ["run.json", "line 1"]),
    "manifest-missing-key": (lambda run: _manifest_edit(run, lambda d: d.pop("timebase_hz")),
                             ["run.json", "timebase_hz"]),
    "manifest-rank-gap": (lambda run: _manifest_edit(
        run, lambda d: d["processes"][0].update(rank=1)), ["run.json", "processes[0].rank"]),
    "dump-missing": (lambda run: (run / "rank00000.cbt").unlink(),
                     ["run.json", "processes[0].path", "rank00000.cbt"]),
    "dump-shorter-than-header": (lambda run: (run / "rank00000.cbt").write_bytes(b"CBT1B"),
                                 ["rank00000.cbt", "too short"]),
}


def _poke(run: Path, offset: int, data: bytes) -> None:
    path = run / "rank00000.cbt"
    raw = bytearray(path.read_bytes())
    raw[offset:offset + len(data)] = data
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("scenario", sorted(REFUSALS))
def test_refused_with_one_precise_message(scenario, tmp_path, capsys):
    import minirun

    run = tmp_path / "run"
    minirun.build(run)  # big-endian
    edit, words = REFUSALS[scenario]
    edit(run)
    for args in ([str(run), "-o", str(tmp_path / "out" / "a.otf2")], ["check", str(run)]):
        assert cli(args) == 3
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("cell2otf2: error: ")
        assert "Traceback" not in err and "internal error" not in err
        for w in words:
            assert w in err, (w, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing written


# ------------------------------------------------------------------------------------------
# no half-written archive: on failure or Ctrl-C the output path is as it was
# ------------------------------------------------------------------------------------------


def snapshot(directory: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for p in sorted(directory.rglob("*")):
        out[str(p.relative_to(directory))] = None if p.is_dir() else p.read_bytes()
    return out


@pytest.mark.parametrize("when", ["analyze", "write"])
@pytest.mark.parametrize("existing", [False, True])
def test_interrupted_conversion_leaves_the_output_as_it_was(tmp_path, capsys, monkeypatch,
                                                            when, existing):
    import minirun

    from cell_otf2.run import driver
    from cell_otf2.writer import archive

    run = tmp_path / "run"
    minirun.build(run)
    out = tmp_path / "out"
    anchor = out / "deeper" / "a.otf2"
    if existing:
        assert cli([str(run), "-o", str(anchor), "--quiet"]) == 0
    before = snapshot(tmp_path)

    def interrupt(*args, **kwargs):
        if when == "write":  # half an archive in the staging directory, then Ctrl-C
            directory, name = Path(args[2]), args[3]
            (directory / f"{name}.otf2").write_text("partial")
            (directory / name).mkdir()
        raise KeyboardInterrupt

    if when == "analyze":
        monkeypatch.setattr(driver, "emit", interrupt)
    else:
        monkeypatch.setattr(archive, "write_archive", interrupt)
    status = cli([str(run), "-o", str(anchor), "--force"])
    err = capsys.readouterr().err
    assert status != 0 and "Traceback" not in err
    assert snapshot(tmp_path) == before


def test_interval_that_loses_every_constraint_is_unbounded(bases, tmp_path, capsys):
    """Every PPE record lost in GAPs: nothing ties the SPE intervals to the node timebase any
    more. They are reported unbounded (null bounds) and their records counted, not written
    at a made-up offset."""
    import json

    run = copy_run(bases["unbuffered"], tmp_path / "run")
    d = dump_of(run)
    for slot in d.ppe["slot"].tolist():
        gap_in_place(run, 0, slot)
    report = tmp_path / "sync.json"
    status = cli([str(run), "-o", str(tmp_path / "a.otf2"), "--report", str(report)])
    got = damage_counts(capsys.readouterr().out)
    assert status == 1
    assert got["gap"][0] == d.ppe.size
    assert got["unusable_time"][0] == d.spe.size  # every SPE record, none written
    rep = json.loads(report.read_text())
    assert rep["intervals"] and all(iv["lower_ticks"] is None and iv["upper_ticks"] is None
                                    and iv["offset_ticks"] is None for iv in rep["intervals"])
    rb = read_events(tmp_path / "a.otf2")
    assert not [k for (loc, k) in rb.counts if loc.startswith("SPE")]
