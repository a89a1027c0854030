"""The one driver gives the same archive and sync report whatever team runs it and however the
nodes are grouped: every multi-node golden case (tests/golden.py) converted by the serial team
and by the MPI team (``mpiexec -n 2``), each with the whole run as one group and with one node
per group (every group but one spilled to disk), must give exactly the golden archive (its
files and its otf2-print text) and sync report, and the same summary as the serial one-group
conversion (apart from the line naming the converter processes)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import golden
import pytest
from archive_compare import summary_body
from paths import ENV, ROOT

pytestmark = pytest.mark.skipif(shutil.which("otf2-print") is None,
                                reason="the archives are compared as otf2-print prints them")
EXPECTED = golden.load_expected()
#: the golden cases with more than one node (grouping and the MPI partition matter)
CASES = [c for c in golden.CASES if c.name in ("sample-two-nodes-hybrid", "sim-hybrid",
                                                "sim-damaged-hybrid", "sim-four-nodes-messages")]
GROUPINGS = {
    "one-group": "",
    "node-per-group": "driver.IN_MEMORY_BYTES = 0\ndriver.GROUP_BYTES = 1\n",
}
MPIEXEC = shutil.which("mpiexec")
HAVE_MPI = MPIEXEC is not None and importlib.util.find_spec("mpi4py") is not None


def _script(work: Path, grouping: str) -> Path:
    """A converter entry that sets the grouping, then runs the command line."""
    path = work / "convert.py"
    path.write_text("import sys\nimport cell_otf2.run.driver as driver\n" + GROUPINGS[grouping]
                    + "from cell_otf2.cli import main\nmain(sys.argv[1:])\n")
    return path


def _team(team: str, script: Path) -> tuple[list[str], dict[str, str]]:
    """The command prefix and environment that run ``script`` as ``team``."""
    env = dict(ENV, PYTHONPATH=os.pathsep.join([str(ROOT), ENV.get("PYTHONPATH", "")]))
    if team == "serial":
        env["CELL2OTF2_SERIAL"] = "1"
        return [sys.executable, str(script)], env
    env.pop("CELL2OTF2_SERIAL", None)
    cmd = [MPIEXEC, "-n", team.split("-")[1], "--oversubscribe", "-x", "PYTHONPATH"]
    if os.geteuid() == 0:
        cmd += ["--allow-run-as-root"]
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return [*cmd, sys.executable, str(script)], env


def _params():
    for case in CASES:
        for team in ("serial", "mpi-2"):
            for grouping in GROUPINGS:
                marks = [pytest.mark.mpi, pytest.mark.skipif(
                    not HAVE_MPI, reason="needs mpiexec and mpi4py")] if team != "serial" else []
                yield pytest.param(case, team, grouping, marks=marks,
                                   id=f"{case.name}-{team}-{grouping}")


@pytest.fixture(scope="module")
def serial_summary(tmp_path_factory):
    """The summary of a case's serial one-group conversion (which is the golden
    one), made once per case for the other teams and groupings to compare with."""
    made: dict[str, str] = {}

    def get(case: golden.Case) -> str:
        if case.name not in made:
            ref = tmp_path_factory.mktemp(case.name) / "ref"
            golden.produce_conversion(case, ref, check=False)
            made[case.name] = (ref / "log" / "convert.stdout").read_text()
        return made[case.name]

    return get


@pytest.mark.parametrize(("case", "team", "grouping"), list(_params()))
def test_every_team_and_grouping_writes_the_golden_archive(case, team, grouping, tmp_path,
                                                           serial_summary):
    expected = EXPECTED[case.name]
    prefix, env = _team(team, _script(tmp_path, grouping))
    work = tmp_path / "case"
    got = golden.produce_conversion(case, work, prefix=prefix, env=env, check=False)
    assert got["convert/status"] == expected["convert/status"], \
        (work / "log" / "convert.stderr").read_text()
    written = {k: v for k, v in got.items() if k.startswith("archive/") or k == "sync report"}
    golden_written = {k: v for k, v in expected.items()
                      if k.startswith("archive/") or k == "sync report"}
    problems = golden.compare(case.name, golden_written, written)
    assert not problems, "\n".join(problems)
    out = (work / "log" / "convert.stdout").read_text()
    assert "Traceback" not in (work / "log" / "convert.stderr").read_text()
    if team == "serial" and grouping == "one-group":
        assert golden.text_output(golden.normalize_summary(out.encode())) == \
            expected["convert/stdout"]
    else:
        assert summary_body(out) == summary_body(serial_summary(case))
    if team != "serial":
        assert f"on {team.split('-')[1]} converter processes" in out
        assert out.count("cell2otf2:") == 1  # one summary, from process 0
    assert not list((work / "out").glob(".*"))  # no staging or spill directory left
