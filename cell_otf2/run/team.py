"""What the conversion's phases (``driver.run_phases``) and ``conversion.convert`` ask of a
team of converter processes, as a ``typing.Protocol``: ``team_serial.SerialTeam`` (one process)
and ``team_mpi.MpiTeam`` (every process of an MPI launch) are the two. Collectives (gather,
scatter, broadcast, reduce) are the identity for a team of one; a step run through ``run`` or
``on_root`` is agreed on by every process (a failure on one is raised on all). It declares the
interface only: no team's behaviour lives here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from ..damage import DamageLog
from ..input.dumps import Progress
from ..input.manifest import Manifest
from ..model import ArchiveDefs, RunLayout
from .output import ArchiveTarget
from .summary import Summary

T = TypeVar("T")

#: the events of one group of nodes as the writer takes them: its location indexes and its
#: event table in pieces
EventGroup = tuple[np.ndarray, Any]


class Written(Protocol):
    """What a sink returns: the events it took per location."""

    events_per_location: np.ndarray


class Team(Protocol):
    """The converter processes of one conversion, as the phases use them."""

    rank: int  # this process (0: the root)
    size: int  # processes of the team
    #: (locations, events) this process handed to another while writing
    handed: tuple[int, int]

    # steps and collectives ---------------------------------------------------------------

    def run(self, step: str, fn: Callable[[], T]) -> T:
        """``fn()`` on every process, its failure agreed on."""

    def on_root(self, step: str, fn: Callable[[], T]) -> T | None:
        """``fn()`` on the root, None on the other processes (an agreed step)."""

    def from_root(self, fn: Callable[[], T]) -> T:
        """The root's ``fn()`` on every process."""

    def gather(self, value: T) -> list[T] | None:
        """Every process's ``value`` on the root, None elsewhere."""

    def allgather(self, value: T) -> list[T]:
        """Every process's ``value`` on every process."""

    def bcast(self, value: T) -> T:
        """The root's ``value`` on every process."""

    def scatter(self, values: list[T] | None) -> T:
        """The root's ``values[q]`` on process q."""

    def allreduce(self, value: T) -> T:
        """The sum of every process's ``value`` on every process."""

    # the run's share, layout and events -------------------------------------------------

    def my_ranks(self, man: Manifest, dump_bytes: list[int]) -> list[int]:
        """The ranks (whole nodes) whose dumps this process converts."""

    def layout(self, man: Manifest, summaries: list, damage: DamageLog) -> RunLayout:
        """The whole run's location layout, from this process's dump summaries."""

    def write(self, defs: ArchiveDefs, own: Iterator[EventGroup], tmp: Path, name: str,
              on_write: Callable[[int], None]) -> Written:
        """The definitions and this process's event groups into the team's sink."""

    # the output ---------------------------------------------------------------------------

    def open_output(self, archive: str | Path, report: str | Path | None, force: bool,
                    run_dir: str | Path) -> ArchiveTarget:
        """The output target, checked and prepared."""

    def staged(self, target: ArchiveTarget) -> AbstractContextManager[Path]:
        """The staging directory on every process; committed when the block ends normally."""

    def spill_directory(self, tmp: Path) -> Path:
        """Where this process spills its groups of nodes."""

    def failed(self, target: ArchiveTarget, exc: BaseException) -> None:
        """After any failure or interruption: undo what ``open_output`` made."""

    def finish(self, summary: Summary | None) -> Summary:
        """The root's summary on every process."""

    def local_progress(self, progress: Progress | None) -> Progress | None:
        """The progress display, on the process that shows it."""
