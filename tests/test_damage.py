"""Damaged runs (FORMAT.md 3.7): contained and counted, never a crash, never a silent change.

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
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from otf2check import otf2_print_ok, read_events  # noqa: E402

from cell_otf2 import format as fmt  # noqa: E402
from cell_otf2.cli import main as cli_main  # noqa: E402
from cell_otf2.convert import analyze  # noqa: E402
from cell_otf2.manifest import load_manifest  # noqa: E402
from cell_otf2.reader import read_dump  # noqa: E402

P, S = fmt.PpeCode, fmt.SpeCode

#: small runs the edited scenarios start from
BASES = {
    "unbuffered": dict(workload="fft", spes=2, phases=2, chunks=3, spe_buffer_records=1,
                       spe_buffers=1),
    "hybrid": dict(workload="hybrid", spes=1, ranks=2, nodes=1, phases=2, chunks=2),
}


def simulate(out: Path, seed: int = 5, **opts) -> Path:
    sim = pytest.importorskip("cell_otf2.simulate")
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
    truth = pytest.importorskip("cell_otf2.truth").load_truth(run)
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
    pipe = analyze(run)
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
    truth = pytest.importorskip("cell_otf2.truth").load_truth(run)
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
    slot = first_ppe(run, 1, P.MPI_IRECV)
    edit_slot(run, 1, slot, "ppe", b=(0x80000001 << 32) | 7)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    assert got["undefined_id"] == (1, f"rank00001.cbt slot {slot}")
    assert_archive_valid(tmp_path / "a.otf2")


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
    edit_slot(run, 0, slot, "ppe", a=999)
    status, got = convert_cli(run, tmp_path / "a.otf2", capsys)
    assert status == 1
    assert got == {"undefined_id": (1, f"rank00000.cbt slot {slot}")}
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
