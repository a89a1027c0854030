"""The MPI team under mpiexec: locations handed from a slow process to idle ones while
writing still give the serial archive; a damaged run converted by more processes than it has
nodes; a refused dump (every process exits 3, the message is printed once, the output path
stays as it was), an existing archive, a bug on one process (the job is aborted, nobody
waits), OTF2 refusing the archive on one process; and the launch detection and node partition
without MPI. That the MPI team writes the serial archive for every grouping is
``tests/test_equivalence.py``."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from archive_compare import same_archive, summary_body

from cell_otf2 import cli
from cell_otf2.input.manifest import load_manifest
from cell_otf2.process_setup import single_host_transport
from cell_otf2.run.team_mpi import (
    SERIAL_VAR,
    launched_size,
    launched_world,
    partition,
)

pytestmark = pytest.mark.mpi  # every test here launches mpiexec or needs mpi4py

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = shutil.which("mpiexec")
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None  # found, not imported

needs_mpi = pytest.mark.skipif(
    MPIEXEC is None or not HAVE_MPI4PY,
    reason="needs mpiexec (Debian openmpi-bin) and mpi4py (pip install 'cell2otf2[mpi]')",
)


def _mpiexec(n: int, args: list[str], timeout: float = 180,
             script: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(SERIAL_VAR, None)
    cmd = [MPIEXEC, "-n", str(n)]
    version = subprocess.run([MPIEXEC, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        cmd += ["--oversubscribe", "-x", "PYTHONPATH"]
        if os.geteuid() == 0:
            cmd += ["--allow-run-as-root"]
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd += [sys.executable, *([str(script)] if script else ["-m", "cell_otf2.cli"]), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def _serial(args: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        cli.main(args)
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.fixture(scope="module")
def runs(simulated) -> dict[str, Path]:
    return {"four_nodes": simulated("four-nodes"), "damaged": simulated("damaged-hybrid")}


#: the end of every injection script: run the command line with the script's arguments
_RUN_CLI = "from cell_otf2.cli import main\nmain(sys.argv[1:])\n"

#: a converter whose pieces are 40 events, which hands over any number of events, and whose
#: process 0 takes 50 ms more per piece it builds for itself: the others run out of their own
#: locations first and ask it for more
_SLOW_PROCESS_0 = (
    "import sys, time\n"
    "from mpi4py import MPI\n"
    "import cell_otf2.run.driver as driver\n"
    "import cell_otf2.writer.share as share\n"
    "from cell_otf2.emit.table import EventChunks\n"
    "driver.CHUNK_EVENTS = 40\n"
    "share.GIVE_MIN = 1\n"
    "real = EventChunks.build\n"
    "def build(self, lo, hi, buffer=None):\n"
    "    if MPI.COMM_WORLD.Get_rank() == 0 and buffer is not None:\n"
    "        time.sleep(0.05)\n"
    "    return real(self, lo, hi, buffer)\n"
    "EventChunks.build = build\n"
)


@needs_mpi
@pytest.mark.parametrize("n_proc", [2, 3])
def test_locations_handed_over_while_writing_give_the_serial_archive(runs, tmp_path, capsys,
                                                                    n_proc):
    """A slow process hands its last locations to idle ones (``write_share``): every location
    still written once, the archive and summary are the serial ones."""
    run = runs["four_nodes"]
    s_anchor, p_anchor = tmp_path / "s" / "a.otf2", tmp_path / "p" / "a.otf2"
    status, out, _ = _serial([str(run), "-o", str(s_anchor)], capsys)
    script = tmp_path / "slow.py"
    script.write_text(_SLOW_PROCESS_0 + _RUN_CLI)
    par = _mpiexec(n_proc, [str(run), "-o", str(p_anchor)], script=script)
    assert (status, par.returncode) == (0, 0), par.stderr
    handed = re.search(r"(\d+) locations \((\d+) events\) handed to a less busy process",
                       par.stdout)
    assert handed and int(handed[1]) > 0 and int(handed[2]) > 0, par.stdout
    assert summary_body(par.stdout) == summary_body(out)
    same_archive(s_anchor, p_anchor)


@needs_mpi
def test_write_failure_while_handing_over_fails_every_process(runs, tmp_path):
    """Process 0 fails writing its third piece while the other waits for its locations: both
    exit with the output error, nobody hangs, nothing is left at the output path."""
    inject = _SLOW_PROCESS_0 + (
        "import cell_otf2.writer.events as writer\n"
        "from cell_otf2.errors import OutputError\n"
        "real_write = writer.EventStream.write\n"
        "calls = [0]\n"
        "def write(self, events, checked=False):\n"
        "    calls[0] += 1\n"
        "    if MPI.COMM_WORLD.Get_rank() == 0 and calls[0] == 3:\n"
        "        raise OutputError('injected: disk full')\n"
        "    return real_write(self, events, checked)\n"
        "writer.EventStream.write = write\n"
    ) + _RUN_CLI
    script = tmp_path / "fail.py"
    script.write_text(inject)
    par = _mpiexec(2, [str(runs["four_nodes"]), "-o", str(tmp_path / "a.otf2")], timeout=120,
                   script=script)
    assert par.returncode == 4, par.stderr
    assert par.stderr.count("injected: disk full") == 1
    assert not (tmp_path / "a.otf2").exists() and not (tmp_path / "a").exists()


@needs_mpi
def test_damaged_run_idle_process_dma_as_messages(runs, tmp_path, capsys):
    """A damaged run on two nodes converted by three processes (one converts nothing but
    still opens the archive): same archive, same damage lines, both exit 1."""
    run = runs["damaged"]
    s_anchor, p_anchor = tmp_path / "s" / "a.otf2", tmp_path / "p" / "a.otf2"
    args = ["--dma-style", "messages", "--alpha", "0.25"]
    status, out, _ = _serial([str(run), "-o", str(s_anchor), *args], capsys)
    par = _mpiexec(3, [str(run), "-o", str(p_anchor), *args])
    assert status == par.returncode == 1, par.stderr  # converted, with lost input
    body = summary_body(par.stdout)
    assert "on 3 converter processes" in par.stdout
    assert sum("unmatched_mpi" in ln or "gap" in ln for ln in body) == 2
    assert body == summary_body(out)
    same_archive(s_anchor, p_anchor)


@needs_mpi
def test_refused_dump_every_process_exits_3_output_untouched(runs, tmp_path):
    """The dump of the last rank (converted by process 1) is not CBT 1: process 1 prints the
    reader's message, process 0 stays silent, both exit 3 and nothing is left behind."""
    run = tmp_path / "run"
    shutil.copytree(runs["four_nodes"], run)
    man = load_manifest(run)
    dump = man.dump_path(man.n_ranks - 1)
    data = bytearray(dump.read_bytes())
    data[0:4] = b"XXXX"
    dump.write_bytes(bytes(data))
    out_dir = tmp_path / "out" / "deeper"
    par = _mpiexec(2, [str(run), "-o", str(out_dir / "a.otf2")])
    assert par.returncode == 3, par.stderr
    errors = [ln for ln in par.stderr.splitlines() if ln.startswith("cell2otf2: error:")]
    assert len(errors) == 1 and dump.name in errors[0] and "magic" in errors[0]
    assert par.stdout == ""
    assert not (tmp_path / "out").exists()  # the directories -o would have created: gone


@needs_mpi
def test_existing_archive_refused_by_every_process(runs, tmp_path):
    anchor = tmp_path / "a.otf2"
    anchor.write_text("not an archive")
    par = _mpiexec(2, [str(runs["four_nodes"]), "-o", str(anchor)])
    assert par.returncode == 4, par.stderr
    assert par.stderr.count("cell2otf2: error:") == 1  # one message, from process 0
    assert "exists and is not an OTF2 anchor file" in par.stderr  # never replaced
    assert anchor.read_text() == "not an archive"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.otf2"]


@needs_mpi
def test_unexpected_error_on_one_process_aborts_all(runs, tmp_path):
    """A bug on process 1 (injected) ends the whole job with one message; nobody hangs."""
    inject = (
        "import sys\n"
        "import cell_otf2.run.team_mpi as par\n"
        "real = par._layout_part\n"
        "def broken(man, summaries, damage):\n"
        "    from mpi4py import MPI\n"
        "    if MPI.COMM_WORLD.Get_rank() == 1:\n"
        "        raise RuntimeError('injected')\n"
        "    return real(man, summaries, damage)\n"
        "par._layout_part = broken\n"
    ) + _RUN_CLI
    script = tmp_path / "broken.py"
    script.write_text(inject)
    par = _mpiexec(2, [str(runs["four_nodes"]), "-o", str(tmp_path / "a.otf2")], timeout=120,
                   script=script)
    assert par.returncode != 0
    assert ("internal error on converter process 1 (decode): RuntimeError: injected"
            in par.stderr)
    assert not (tmp_path / "a.otf2").exists()


@needs_mpi
def test_archive_refused_by_one_process_fails_all(runs, tmp_path):
    """OTF2 cannot open the archive on process 1 (injected): every process exits 4 before
    OTF2's first collective step, the message is printed once, nothing is left behind."""
    inject = (
        "import sys\n"
        "from mpi4py import MPI\n"
        "import _otf2\n"
        "real = _otf2.Archive_Open\n"
        "def refuse(*args):\n"
        "    if MPI.COMM_WORLD.Get_rank() == 1:\n"
        "        raise OSError('injected: no space left')\n"
        "    return real(*args)\n"
        "_otf2.Archive_Open = refuse\n"
    ) + _RUN_CLI
    script = tmp_path / "refuse.py"
    script.write_text(inject)
    out = tmp_path / "out"
    out.mkdir()
    par = _mpiexec(2, [str(runs["four_nodes"]), "-o", str(out / "a.otf2")], timeout=120,
                   script=script)
    assert par.returncode == 4, par.stderr
    errors = [ln for ln in par.stderr.splitlines() if ln.startswith("cell2otf2: error:")]
    assert len(errors) == 1 and "injected: no space left" in errors[0]
    assert list(out.iterdir()) == []  # the staging directory is gone too


def test_launch_detection_from_the_environment(monkeypatch):
    assert launched_size({}) is None
    assert launched_size({"OMPI_COMM_WORLD_SIZE": "4"}) == 4
    assert launched_size({"PMI_SIZE": "1"}) == 1  # MPICH/Hydra, srun --mpi=pmi2
    assert launched_size({"PMIX_RANK": "0"}) == -1  # srun --mpi=pmix: size from MPI itself
    assert launched_size({"SLURM_NTASKS": "8"}) is None  # a batch script is no launch
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert launched_world() is None  # no launcher: the serial path, mpi4py not imported
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")
    assert launched_world() is None
    # the serial conversions of this module ran here without initializing MPI
    assert "mpi4py.MPI" not in sys.modules
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv(SERIAL_VAR, "1")
    assert launched_world() is None


def test_partition_gives_whole_nodes_balanced_by_bytes(simulated):
    run = simulated(workload="hybrid", seed=2, ranks=8, nodes=4, spes=1, phases=1, chunks=1)
    man = load_manifest(run)
    sizes = [100] * man.n_ranks
    sizes[0] = sizes[1] = 1000  # node 0 is the heaviest
    owner = partition(man, sizes, 2)
    load = np.zeros(2)
    for p in man.processes:
        load[owner[man.node_of_rank(p.rank)]] += sizes[p.rank]
    assert owner[0] == 0 and set(owner[1:].tolist()) == {1}  # 2000 vs 3 x 200
    assert load.tolist() == [2000, 600]
    assert partition(man, sizes, 8).tolist() == [0, 1, 2, 3]  # more processes than nodes
    assert partition(man, [5] * man.n_ranks, 1).tolist() == [0, 0, 0, 0]


def test_single_host_launch_chooses_shared_memory_messaging():
    """Open MPI with every process local and no messaging layer chosen: ob1 (shared memory);
    a user's choice, a launch over several hosts and other launchers are left alone."""
    local = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    env = dict(local)
    single_host_transport(env)
    assert env["OMPI_MCA_pml"] == "ob1"
    for env in (dict(local, OMPI_MCA_pml="ucx"), {**local, "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
                {"PMI_SIZE": "2"}, {}):
        before = dict(env)
        single_host_transport(env)
        assert env == before

