"""``cell2otf2 check RUN_DIR``: the conversion's findings, the same words, nothing written."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import minirun  # noqa: E402
import pytest

from cell_otf2.cli import main as cli_main  # noqa: E402
from cell_otf2.errors import FormatError  # noqa: E402
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
