"""The conversion, as the Python API ``cell_otf2.convert`` (and so the command line) starts
it: ``convert`` picks the
team (``team_mpi.MpiTeam`` under an MPI launch of more than one process, else
``team_serial.SerialTeam``), checks and prepares the output paths against the run
(``output.py``), runs the phases (``driver.run_phases``) into a staging directory, commits the
archive with its sync report, and returns the ``summary.Summary``. It prints nothing
(progress goes through the ``progress`` callback) and holds no stage's logic."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..input.dumps import Progress
from .driver import RootResult, StageClock, run_phases
from .options import ConvertOptions
from .output import ArchiveTarget
from .spill import Spill
from .summary import Summary, sync_report
from .team import Team


def launched_team() -> Team:
    """The MPI team when started by an MPI launcher with more than one process, else the
    serial team; nothing touches MPI without such a launch."""
    from .team_mpi import MpiTeam, launched_world
    from .team_serial import SerialTeam

    world = launched_world()
    return SerialTeam() if world is None else MpiTeam(world)


def convert(run_dir: str | Path, archive: str | Path, options: ConvertOptions | None = None, *,
            force: bool = False, report: str | Path | None = None,
            progress: Progress | None = None) -> Summary:
    """Convert one run directory into an OTF2 archive with ``options`` (checked when they
    were made; None: the defaults); returns the summary (on every process of an MPI team,
    with its ``rank``).

    A node placed only by the manifest's start readings makes the summary ``lossy`` (exit 1)
    unless ``options.accept_unsynchronized_nodes``. On any failure or interruption the output
    path is left as it was: the staging directory is removed, and so are the folders the
    output needed."""
    options = ConvertOptions() if options is None else options
    wall0 = time.perf_counter()
    team = launched_team()
    progress = team.local_progress(progress)
    target = team.open_output(archive, report, force, run_dir)
    try:
        with team.staged(target) as tmp:
            spill = Spill(team.spill_directory(tmp))
            try:
                done = run_phases(team, Path(run_dir), tmp, target.name, StageClock(progress),
                                  spill, options, progress, report_pairs=report is not None)
            finally:
                target.spilled = spill.used  # for the space a full disk says is needed
                spill.close()
            if report is not None:  # moved into place with the archive
                team.on_root("report", lambda: stage_sync_report(target, done))
    except BaseException as exc:
        team.failed(target, exc)
        raise
    summary = None if done is None else done.summary  # the root's
    if summary is not None:
        summary.run_dir, summary.archive = str(run_dir), str(archive)
        summary.wall_seconds = time.perf_counter() - wall0
    summary = team.finish(summary)
    summary.accept_unsynchronized_nodes = options.accept_unsynchronized_nodes
    return summary


def stage_sync_report(target: ArchiveTarget, done: RootResult | None) -> None:
    """The root's sync report JSON, staged beside the archive."""
    assert done is not None  # run on the root, which has the whole run
    target.stage_report(json.dumps(sync_report(done.whole), indent=1) + "\n")
