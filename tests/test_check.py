"""``cell2otf2 check RUN_DIR``: the conversion's findings, the same words, nothing written."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import minirun  # noqa: E402
import numpy as np
import pytest
from paths import SAMPLES

from cell_otf2.cli import main as cli_main  # noqa: E402
from cell_otf2.decode.tracer_bugs import recognize_run
from cell_otf2.errors import FormatError  # noqa: E402
from cell_otf2.input import format as fmt
from cell_otf2.run.check import check_run  # noqa: E402
from cell_otf2.run.conversion import convert  # noqa: E402


def cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        cli_main(args)
    return int(exc.value.code or 0)


def tree(directory: Path) -> dict[str, tuple[int, float]]:
    """Every entry below ``directory`` with its size and modification time."""
    out = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.stat(p)
            out[os.path.relpath(p, directory)] = (st.st_size, st.st_mtime_ns)
    return out


def test_clean_run_exits_0_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    minirun.build(run)
    before = tree(tmp_path)
    assert cli(["check", str(run)]) == 0
    out, err = capsys.readouterr()
    assert "lost or unusable records: none" in out and err == ""
    assert tree(tmp_path) == before
    result = check_run(run)
    assert result.status == 0 and result.lines == [] and result.processes == 1
    assert result.records == 20  # minirun: 11 PPE + 9 SPE records


def test_damage_lines_are_the_conversion_summary_lines(tmp_path, capsys):
    sim = pytest.importorskip("cell_otf2.sim.run")
    run = tmp_path / "run"
    sim.simulate_run(run, "fft", 3, spes=3, phases=2, chunks=4, damage=["gap", "truncate"])
    before = tree(tmp_path)
    assert cli(["check", str(run)]) == 1
    checked = capsys.readouterr().out.splitlines()
    assert tree(tmp_path) == before  # nothing written, not even next to the run
    summary = convert(run, tmp_path / "out" / "a.otf2")
    assert summary.damage and checked[2:] == [f"    {line}" for line in summary.damage]
    kinds = {line.split(":")[0] for line in summary.damage}
    assert {"gap", "truncated_file"} <= kinds
    assert check_run(run).lines == summary.damage
    assert cli(["check", "--quiet", str(run)]) == 1
    assert capsys.readouterr().out == ""


def test_refused_run_exits_3_with_the_conversion_message(tmp_path, capsys):
    run = tmp_path / "run"
    minirun.build(run)
    dump = run / "rank00000.cbt"
    data = bytearray(dump.read_bytes())
    data[0:4] = b"CBT2"
    dump.write_bytes(bytes(data))
    assert cli(["check", str(run)]) == 3
    checked = capsys.readouterr().err
    assert cli([str(run), "-o", str(tmp_path / "a.otf2")]) == 3
    err = capsys.readouterr().err
    assert checked == err  # one problem: the conversion's one message
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "rank00000.cbt" in err and "'magic'" in err and "b'CBT2'" in err
    with pytest.raises(FormatError):
        check_run(run)
    assert not list(tmp_path.glob("a*"))


def test_check_lists_every_refusal_of_a_run(tmp_path):
    """Two missing dumps, or two dumps that are not CBT: both named, exit 3; convert names the
    first and says how many more there are."""
    import subprocess

    from cell_otf2.sim.run import simulate_run

    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "cell_otf2", *args], capture_output=True,
                              text=True, env=env, timeout=120)

    for how in ("missing", "not-cbt"):
        run = tmp_path / how
        simulate_run(run, "hybrid", 1, spes=1, ranks=3, nodes=2, phases=1)
        for rank in (1, 2):
            dump = run / f"rank{rank:05d}.cbt"
            if how == "missing":
                dump.unlink()
            else:
                dump.write_bytes(b"XXXX" + dump.read_bytes()[4:])
        r = cli("check", str(run))
        assert r.returncode == 3, r.stderr
        lines = r.stderr.strip().splitlines()
        assert "refused, 2 problems" in lines[0]
        assert any("rank00001.cbt" in x for x in lines[1:])
        assert any("rank00002.cbt" in x for x in lines[1:])
        if how == "missing":  # found together by the manifest's check
            r = cli(str(run), "-o", str(tmp_path / "a.otf2"))
            assert r.returncode == 3 and "and 1 more problem" in r.stderr, r.stderr


def test_the_checking_sink_lets_go_of_each_group_before_the_next():
    """A group's pieces hold its record table: the sink drops them before it asks for the
    next group (which the driver then loads), so two groups are never held at once."""
    import weakref

    from writer_samples import sample_defs, sample_events

    from cell_otf2.run.check import check_only

    class Pieces(list):
        pass

    made: list = []

    def groups():
        for _ in range(3):
            assert all(r() is None for r in made), "the previous group's pieces are held"
            pieces = Pieces([sample_events()])
            made.append(weakref.ref(pieces))
            yield None, pieces
            del pieces

    checked = check_only(sample_defs(), groups(), Path("."), "x", lambda _done: None)
    assert int(checked.events_per_location.sum()) == 3 * sample_events().size


# --- what the tracer did wrong: recognised from the dumps, printed under the damage lines

TRACER_BUG_KINDS = {"late-block-header": "late_block_header",
                    "overcounted-blocks": "block_count_too_large",
                    "backwards-timebase": "backwards_timebase"}
#: small runs of several workloads, clocks and buffer shapes (workload, options)
FAMILY = [("fft", dict(spes=3, phases=2, chunks=4)),
          ("julia", dict(spes=4, spus=2, phases=2, chunks=8, slice_ms=0.2,
                         byte_order="L")),
          ("fft", dict(spes=4, spus=2, phases=2, chunks=8, decrementer_restore="restored",
                       decr_writes=True)),
          ("matmul", dict(spes=3, phases=2, chunks=8)),
          ("hybrid", dict(ranks=2, nodes=2, spes=2, phases=2, chunks=4))]


def _dump_slots(run: Path) -> tuple[Path, np.ndarray, fmt.Layout]:
    """minirun's dump and its slots as PPE-layout rows (view them as others to edit)."""
    dump = run / "rank00000.cbt"
    lay = fmt.Layout(">")
    slots = np.frombuffer(dump.read_bytes()[fmt.HEADER_SIZE:], lay.ppe).copy()
    return dump, slots, lay


def _write(dump: Path, slots: np.ndarray) -> None:
    dump.write_bytes(dump.read_bytes()[:fmt.HEADER_SIZE] + slots.tobytes())


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("workload,options", FAMILY, ids=lambda v: v if isinstance(v, str)
                         else "-".join(f"{k}" for k in v))
def test_each_tracer_bug_is_named_and_clean_runs_get_no_explanation(tmp_path, seed, workload,
                                                                    options):
    """A family of simulated runs: without a tracer bug (clean, or with loss the simulator
    makes: a GAP, a cut file) nothing is explained; with one, exactly its kind, in the
    damaged rank's dump."""
    sim = pytest.importorskip("cell_otf2.sim.run")
    from cell_otf2.sim.truth import load_truth

    last = f"rank{options.get('ranks', 1) - 1:05d}.cbt"
    for damage in ([], ["gap", "truncate"], ["block-overrun"]):
        run = tmp_path / f"clean-{'-'.join(damage)}"
        sim.simulate_run(run, workload, seed, damage=damage, **options)
        assert recognize_run(run) == [], damage
    for sim_kind, kind in TRACER_BUG_KINDS.items():
        run = tmp_path / sim_kind
        try:
            sim.simulate_run(run, workload, seed, damage=[sim_kind], **options)
        except ValueError:  # overcounted-blocks: every block of this run is full
            assert sim_kind == "overcounted-blocks"
            continue
        bugs = recognize_run(run)
        assert [b.kind for b in bugs] == [kind], (sim_kind, bugs)
        (log,) = load_truth(run).damage
        bug = bugs[0]
        assert bug.file == last and bug.count >= 1
        if sim_kind == "backwards-timebase":
            assert (bug.slot, bug.count, bug.where) == (log["slot"], 1, "thread 0")
        else:  # the first header the simulator changed that the evidence can show
            assert bug.slot in log["header_slots"] and bug.count <= len(log["header_slots"])


def test_the_samples_show_no_tracer_bug():
    for run in sorted(p for p in SAMPLES.iterdir() if (p / "run.json").is_file()):
        assert recognize_run(run) == [], run.name


def test_check_prints_the_explanation_under_the_damage_lines(tmp_path, capsys):
    """The text and ``--json`` name the kind, first file and slot, count and what to change;
    the exit status stays the damage's (late headers the conversion took for wraps leave a
    slot order that contradicts the readings by many wraps: contained damage, exit 1)."""
    sim = pytest.importorskip("cell_otf2.sim.run")
    run = tmp_path / "run"
    sim.simulate_run(run, "matmul", 5, spes=4, phases=2, chunks=16,
                     damage=["late-block-header"])
    assert cli(["check", str(run)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "  lost or unusable input (1 kind):"
    assert out[2].startswith("    contradicting_order: ")
    assert out[3] == "  what the tracer did wrong (1 cause):"
    assert out[4].startswith("    late_block_header: ") and "first at rank00000.cbt slot" in out[4]
    assert "read the decrementer right after reserving the block's slots" in out[4]
    assert len(out) == 5
    assert cli(["check", "--json", str(run)]) == 1
    got = json.loads(capsys.readouterr().out)
    (bug,) = got["tracer_bugs"]
    assert {"kind", "file", "slot", "count", "explanation"} <= set(bug)
    assert bug["kind"] == "late_block_header" and bug["file"] == "rank00000.cbt"
    run = tmp_path / "over"
    sim.simulate_run(run, "fft", 3, spes=3, phases=2, chunks=4, damage=["overcounted-blocks"])
    assert cli(["check", str(run)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("  lost or unusable input") and out[2].startswith("    block_broken")
    assert out[-2] == "  what the tracer did wrong (1 cause):"
    assert out[-1].startswith("    block_count_too_large: 3 blocks, first at rank00000.cbt")
    assert check_run(run).tracer_bugs == recognize_run(run)


def test_clean_check_text_has_no_explanation(tmp_path, capsys):
    run = tmp_path / "run"
    minirun.build(run)
    assert cli(["check", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["  lost or unusable records: none"]
    assert cli(["check", "--json", str(run)]) == 0
    assert json.loads(capsys.readouterr().out)["tracer_bugs"] == []


@pytest.mark.parametrize("header_at,kind", [(200, "early_block_header"),
                                            (275, "late_block_header")])
def test_a_header_read_at_the_wrong_moment(tmp_path, header_at, kind):
    """minirun's first block (records 150..260, next block's first record at 270): a header
    reading from 200 was made before its own last record, one from 275 after the next
    block's first."""
    run = tmp_path / "run"
    minirun.build(run)
    dump, slots, lay = _dump_slots(run)
    head = int(np.flatnonzero(slots["code"] == fmt.ControlCode.BLOCK)[0])
    slots.view(lay.block)["decr"][head] = minirun.decr_at(header_at)
    _write(dump, slots)
    (bug,) = recognize_run(run)
    assert (bug.kind, bug.slot, bug.count, bug.where, bug.rank) == (kind, head, 1, "ctx 0", 0)


@pytest.mark.parametrize("how,kind", [("torn", "torn_timebase"),
                                      ("went-back", "timebase_went_back"),
                                      ("one-low", "backwards_timebase"),
                                      ("one-high", "backwards_timebase")])
def test_each_shape_of_a_backwards_timebase(tmp_path, how, kind):
    """A reading 2^32 ahead (a torn two-half read), the last four readings 500 ticks back
    (another clock), one reading 50 ticks back or 2^40 ahead (out of line): each its own
    explanation, at the lower reading of the step back."""
    run = tmp_path / "run"
    minirun.build(run)
    dump, slots, _ = _dump_slots(run)
    ppe = np.flatnonzero(slots["code"] >> 8 == fmt.SlotClass.PPE)
    if how == "torn":
        slots["timebase"][ppe[3]] += np.uint64(1 << 32)
        first = ppe[4]
    elif how == "went-back":
        slots["timebase"][ppe[-4:]] -= np.uint64(500)
        first = ppe[-4]
    elif how == "one-low":
        slots["timebase"][ppe[5]] = slots["timebase"][ppe[4]] - np.uint64(50)
        first = ppe[5]
    else:
        slots["timebase"][ppe[5]] |= np.uint64(1 << 40)  # a flipped bit
        first = ppe[6]
    _write(dump, slots)
    (bug,) = recognize_run(run)
    assert (bug.kind, bug.slot, bug.count, bug.where) == (kind, first, 1, "thread 0")
    assert check_run(run).status == 1  # contained as backwards_timebase damage


def test_a_block_count_past_a_whole_file_is_the_count(tmp_path):
    """The last block declares one record more than the file holds, the file ends at a slot
    boundary and holds every slot its header says was reserved: the count is wrong (a cut
    file, with slots_reserved larger than the file, is not explained: its damage line says
    it)."""
    run = tmp_path / "run"
    minirun.build(run)
    dump, slots, lay = _dump_slots(run)
    head = int(np.flatnonzero(slots["code"] == fmt.ControlCode.BLOCK)[-1])
    slots = slots[:head + 2]  # the dump ends with the last block, which holds EXIT only
    slots.view(lay.block)["count"][head] = 2

    def write(reserved: int) -> None:
        data = bytearray(dump.read_bytes()[:fmt.HEADER_SIZE])
        data[32:40] = reserved.to_bytes(8, "big")  # slots_reserved
        dump.write_bytes(bytes(data) + slots.tobytes())

    write(len(slots))
    (bug,) = recognize_run(run)
    assert (bug.kind, bug.slot, bug.count) == ("block_count_too_large", head, 1)
    assert "(by 1)" in bug.explanation
    write(len(slots) + 1)  # one reserved slot more than the file holds: a cut file
    assert recognize_run(run) == []


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("workload,options", FAMILY, ids=lambda v: v if isinstance(v, str)
                         else "-".join(f"{k}" for k in v))
def test_contradicting_order_only_where_a_tracer_broke_the_readings(tmp_path, seed, workload,
                                                                   options):
    """No clean run, and no run with the loss a simulator makes (GAPs, a cut file, a block
    running past the end), relaxes a node by half a decrementer period; late block headers,
    taken for wraps, do (in every run of the family: 2.6e11 ticks in one)."""
    sim = pytest.importorskip("cell_otf2.sim.run")
    for damage in ([], ["gap", "truncate"], ["block-overrun"]):
        run = tmp_path / f"clean-{'-'.join(damage)}"
        sim.simulate_run(run, workload, seed, damage=damage, **options)
        assert not any(line.startswith("contradicting_order") for line in check_run(run).lines)
    run = tmp_path / "late"
    sim.simulate_run(run, workload, seed, damage=["late-block-header"], **options)
    result = check_run(run)
    assert [line.split(":")[0] for line in result.lines] == ["contradicting_order"]
    assert result.status == 1
