"""Every input and output channel answered precisely, ``check`` and ``convert`` of one mind.
Manifest numbers bounded before anything is sized by them; manifest strings checked (NUL, lone
surrogates, paths that name no file inside the run, ``application: null``); dumps whose size
claims gigabytes read in chunks; output names OTF2 cannot take and outputs that name the input
refused with exit 4 before any work; a full or closed stdout changing no exit status (inspect:
4); ``check`` listing what ``convert`` lists (unsynchronized nodes) with the same status; damage
that does not move with ``--alpha`` or ``--read-delay-ticks``; ``inspect`` of a dump cut inside
its first blocks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from paths import ENV, SAMPLES

from cell_otf2.errors import FormatError
from cell_otf2.input.manifest import load_manifest
from cell_otf2.input.reader import read_dump
from cell_otf2.run.check import check_run
from cell_otf2.run.conversion import convert
from cell_otf2.run.options import ConvertOptions

SMALL = SAMPLES / "wraps-heartbeats"
SWITCHES = SAMPLES / "context-switch-compensated"
#: the small three-node run whose nodes no MPI message links both ways
THREE_NODES = dict(workload="matmul", seed=15, spes=1, ranks=3, nodes=3, phases=1, chunks=2)


def cli(*args: str | bytes, stdout=subprocess.PIPE, timeout: float = 120
        ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cell_otf2", *args], stdout=stdout,
                          stderr=subprocess.PIPE, env=ENV, timeout=timeout)


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("truth.*"))
    return dst


def edit_manifest(run: Path, edit) -> Path:
    doc = json.loads((run / "run.json").read_text())
    edit(doc)
    (run / "run.json").write_text(json.dumps(doc))
    return run


def kinds(lines: list[str]) -> list[str]:
    return [line.split(":", 1)[0] for line in lines]


# ---- 1. manifest numbers and claimed sizes ----------------------------------------------------

@pytest.mark.parametrize("key, value", [("cell_chips", 2147483648), ("cell_chips", 65),
                                        ("spes_per_chip", 9)])
def test_node_sizes_bounded_by_real_machines(tmp_path, key, value):
    run = edit_manifest(copy_run(SMALL, tmp_path / "run"),
                        lambda d: d["nodes"][0].__setitem__(key, value))
    with pytest.raises(FormatError) as exc:
        load_manifest(run)
    assert exc.value.field == f"nodes[0].{key}"
    assert "out of range" in str(exc.value) and str(value) in str(exc.value)


def test_huge_cell_chips_refused_at_once_by_convert_and_check(tmp_path):
    run = edit_manifest(copy_run(SMALL, tmp_path / "run"),
                        lambda d: d["nodes"][0].__setitem__("cell_chips", 2147483648))
    for args in ([str(run), "-o", str(tmp_path / "a.otf2")], ["check", str(run)]):
        r = cli(*args, timeout=60)
        assert r.returncode == 3, r.stderr
        assert b"nodes[0].cell_chips" in r.stderr and b"internal error" not in r.stderr
    assert not (tmp_path / "a.otf2").exists()


def test_sparse_dump_is_read_in_chunks_not_sized_by_its_length(tmp_path):
    """A dump extended by a 512 MiB hole: the framing tables grow with what the file holds,
    not with the slot count its size claims (which asked for 2.5 GiB at 2 GiB)."""
    run = copy_run(SMALL, tmp_path / "run")
    dump = run / "rank00000.cbt"
    os.truncate(dump, 512 << 20)
    man = load_manifest(run)
    tracemalloc.start()
    try:
        d = read_dump(dump, man, 0, spe_records=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert d.n_slots == ((512 << 20) - 64) // 32
    assert peak < 64 << 20, f"{peak >> 20} MiB for a 512 MiB hole"


@pytest.mark.slow
def test_sparse_two_gib_dump_converts_within_little_memory(tmp_path):
    run = copy_run(SMALL, tmp_path / "run")
    os.truncate(run / "rank00000.cbt", 2 << 30)
    limit = 1536 << 20  # address space: the old framer asked for 2.5 GiB in one table

    def small_address_space():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    p = subprocess.run([sys.executable, "-m", "cell_otf2", "check", str(run)],
                       capture_output=True, text=True, env=ENV, timeout=300,
                       preexec_fn=small_address_space)
    assert p.returncode == 1, p.stderr
    assert "unknown_code" in p.stdout and "internal error" not in p.stderr


# ---- 2. manifest strings; output names ---------------------------------------------------------

@pytest.mark.parametrize("where, value, needle", [
    (("processes", 0, "path"), "rank00000.cbt\u0000x", "NUL character"),
    (("processes", 0, "path"), "rank00000.cbt/", "ends in a separator"),
    (("processes", 0, "path"), "../run/rank00000.cbt", "leaves the run directory"),
    (("processes", 0, "path"), ".", "names the run directory itself"),
    (("counters", 0, "unit"), "fl\udc80op", "lone surrogate"),
    (("regions", 0, "name"), "main\u0000", "NUL character"),
    (("application",), None, "wrong type"),
    (("nodes", 0, "name"), "a\u0000b", "NUL character"),
])
def test_manifest_strings_checked_with_their_json_path(tmp_path, where, value, needle):
    run = copy_run(SAMPLES / "fft-16spe", tmp_path / "run")

    def edit(doc):
        target = doc
        for key in where[:-1]:
            target = target[key]
        target[where[-1]] = value
        if where == ("nodes", 0, "name"):
            for p in doc["processes"]:
                p["node"] = value

    edit_manifest(run, edit)
    if where[0] == "counters" and not json.loads((run / "run.json").read_text())["counters"]:
        pytest.skip("no counter")
    with pytest.raises(FormatError) as exc:
        load_manifest(run)
    path = ".".join(f"[{k}]" if isinstance(k, int) else k for k in where).replace(".[", "[")
    assert exc.value.field == path, str(exc.value)
    assert needle in str(exc.value)


def test_two_spellings_of_one_dump_are_one_path(tmp_path):
    run = copy_run(SAMPLES / "two-nodes-hybrid", tmp_path / "run")
    doc = json.loads((run / "run.json").read_text())
    doc["processes"][1]["path"] = "./" + doc["processes"][0]["path"]
    (run / "run.json").write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="duplicate path"):
        load_manifest(run)


def test_non_utf8_output_name_is_an_output_problem_before_any_work(tmp_path):
    out = os.fsencode(tmp_path / "out") + b"/arch\xff.otf2"
    r = cli(str(SMALL), "-o", out)
    assert r.returncode == 4, r.stderr
    assert b"not UTF-8" in r.stderr and b"0xFF" in r.stderr
    assert b"internal error" not in r.stderr
    assert not (tmp_path / "out").exists()  # nothing made: refused before any work


@pytest.mark.parametrize("name", ["rank00000.cbt", "", "run.json"])
def test_output_naming_the_input_is_exit_4(tmp_path, name):
    run = copy_run(SMALL, tmp_path / "run")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    for force in ([], ["--force"]):
        r = cli(str(run), "-o", str(run / name) if name else str(run), *force)
        assert r.returncode == 4, r.stderr
        assert b"never written over the input" in r.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


# ---- 3. stdout ----------------------------------------------------------------------------------

def _closed_pipe():
    r, w = os.pipe()
    os.close(r)
    return w


@pytest.mark.slow
@pytest.mark.parametrize("channel", ["full", "closed-pipe"])
def test_summary_stdout_full_or_closed_keeps_the_status(tmp_path, channel):
    archive = tmp_path / "out" / "a.otf2"
    out = open("/dev/full", "wb") if channel == "full" else _closed_pipe()  # noqa: SIM115
    try:
        r = cli(str(SMALL), "-o", str(archive), stdout=out)
    finally:
        out.close() if channel == "full" else os.close(out)
    normal = cli(str(SMALL), "-o", str(tmp_path / "b.otf2"))
    assert r.returncode == normal.returncode in (0, 1), r.stderr
    assert archive.exists()
    err = r.stderr.decode()
    assert err.count("\n") == 1 and "the summary could not be written to stdout" in err
    assert "is in place" in err and "internal error" not in err


@pytest.mark.slow
@pytest.mark.parametrize("channel", ["full", "closed-pipe"])
def test_check_and_inspect_with_a_full_or_closed_stdout(channel):
    for command, status in (("check", None), ("inspect", 4)):
        out = open("/dev/full", "wb") if channel == "full" else _closed_pipe()  # noqa: SIM115
        try:
            r = cli(command, str(SMALL), stdout=out)
        finally:
            out.close() if channel == "full" else os.close(out)
        expected = cli(command, str(SMALL)).returncode if status is None else status
        assert r.returncode == expected, r.stderr
        assert b"could not be written to stdout" in r.stderr
        assert b"internal error" not in r.stderr


# ---- 4. check and convert of one mind ------------------------------------------------------------

def test_check_reports_unsynchronized_nodes_as_convert_does(simulated, tmp_path):
    run = simulated(**THREE_NODES)
    summary = convert(run, tmp_path / "a.otf2")
    result = check_run(run)
    assert "unsynchronized_node" in kinds(summary.unusable())
    assert result.lines == summary.unusable()
    assert result.status == 1 == (1 if summary.lossy else 0)
    accepted = check_run(run, ConvertOptions(accept_unsynchronized_nodes=True))
    assert accepted.lines == [] and accepted.status == 0


@pytest.mark.slow
def test_check_command_exit_status_for_unsynchronized_nodes(simulated):
    run = simulated(**THREE_NODES)
    r = cli("check", str(run))
    assert r.returncode == 1 and b"unsynchronized_node" in r.stdout
    r = cli("check", str(run), "--accept-unsynchronized-nodes")
    assert r.returncode == 0, r.stdout


@pytest.fixture
def appended(tmp_path) -> Path:
    """The context-switch sample with its dump appended to itself."""
    run = copy_run(SWITCHES, tmp_path / "appended")
    dump = run / "rank00000.cbt"
    dump.write_bytes(dump.read_bytes() * 2)
    return run


@pytest.mark.parametrize("alpha, delay", [(0.0, 0.0), (0.857, 0.0), (1.0, 0.0), (0.5, 8.0),
                                          (0.143, 1000.0)])
def test_damage_does_not_move_with_the_offsets(appended, tmp_path, alpha, delay):
    default = check_run(appended)
    options = ConvertOptions.of(alpha=alpha, read_delay_ticks=delay)
    summary = convert(appended, tmp_path / "a.otf2", options)
    checked = check_run(appended, options)
    assert kinds(summary.unusable()) == kinds(default.lines), (alpha, delay)
    assert checked.lines == summary.unusable()
    assert "unclosed_region" not in kinds(default.lines)  # off-SPU regions never straddle


# ---- 5. inspect ----------------------------------------------------------------------------------

@pytest.mark.parametrize("cut", [448, 1000])
def test_inspect_of_a_dump_cut_inside_its_first_blocks(tmp_path, cut):
    from cell_otf2.run.run_info import inspect

    run = copy_run(SAMPLES / "fft-16spe", tmp_path / "run")
    os.truncate(run / "rank00000.cbt", cut)
    info = inspect(run)
    assert info.to_dict()
    assert any("records" in line for line in info.lines())


# ---- found by the fuzzer ------------------------------------------------------------------------

def test_mpi_receive_in_a_run_without_any_send(tmp_path):
    """A slot turned into an MPI_IRECV in a run with no MPI send at all: no channel exists,
    the receive is unmatched damage (was an IndexError in MPI pairing)."""
    run = copy_run(SAMPLES / "fft-16spe", tmp_path / "run")
    dump = run / "rank00000.cbt"
    data = bytearray(dump.read_bytes())
    order = "little" if data[4] == ord("L") else "big"
    for at in range(64, len(data), 32):
        if int.from_bytes(data[at:at + 2], order) == 0x0114:  # a CTX_DESTROY
            data[at:at + 2] = (0x0135).to_bytes(2, order)  # MPI_IRECV
            data[at + 4:at + 8] = (0).to_bytes(4, order)  # MPI_COMM_WORLD
            break
    else:
        pytest.fail("no CTX_DESTROY in the sample")
    dump.write_bytes(bytes(data))
    summary = convert(run, tmp_path / "a.otf2")
    assert "unmatched_mpi" in kinds(summary.unusable())
    assert check_run(run).lines == summary.unusable()


@pytest.mark.parametrize("seed, case", [(203, 1815), (203, 44), (204, 880)])
def test_lost_times_do_not_move_with_the_offsets(tmp_path, seed, case):
    """Fuzzer cases whose records left 0..2^63 ticks at the default offsets only: lost at
    either bound, so at every alpha (``unusable_time`` came and went with ``--alpha``)."""
    import fuzz

    bases = fuzz.make_bases(seed)
    _base, files, _muts = fuzz.make_case(case, seed, bases)
    run = tmp_path / "run"
    run.mkdir()
    for name, data in files.items():
        (run / name).write_bytes(bytes(data))
    found = {alpha: kinds(convert(run, tmp_path / f"a{alpha}.otf2",
                                  ConvertOptions(alpha=alpha)).unusable())
             for alpha in (0.5, 1.0, 0.857, 0.0)}
    assert len({tuple(k) for k in found.values()}) == 1, found


def test_one_sided_offsets_lose_the_same_records_at_every_alpha(tmp_path):
    """Fuzzer case (seed 301, case 2476): with ``--read-delay-ticks 2^31`` an SPE interval is
    bounded from above only; its offset follows the placed domains, so it moves with
    ``--alpha``: at alpha 0 its records fell below 0 ticks and were lost, at 0.5 and 1 they
    were written. Its loss is decided at the offsets alpha 0 and alpha 1 give."""
    import fuzz

    bases = fuzz.make_bases(301)
    _base, files, _muts = fuzz.make_case(2476, 301, bases)
    run = tmp_path / "run"
    run.mkdir()
    for name, data in files.items():
        (run / name).write_bytes(bytes(data))
    found = {}
    for alpha in (0.0, 0.5, 1.0):
        options = ConvertOptions.of(alpha=alpha, read_delay_ticks=2.0**31)
        summary = convert(run, tmp_path / f"a{alpha}.otf2", options)
        found[alpha] = summary.unusable()
        assert check_run(run, options).lines == found[alpha]
    assert found[0.0] == found[0.5] == found[1.0], found
    assert "unusable_time" in kinds(found[0.0])
