"""The team of one: a conversion in this process alone, as ``driver.run_phases`` and
``conversion.convert`` ask a team (``team_mpi.MpiTeam`` is the other). Every collective is
the identity, every root step runs here, the output is staged and committed here, and the
events go to a sink: the OTF2 writer by default, or ``check``'s, which writes nothing. It
does not convert anything itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from ..damage import DamageLog
from ..decode.decoder import build_locations
from ..input.dumps import Progress
from ..input.manifest import Manifest
from ..model import ArchiveDefs, RunLayout
from .output import SPILL_FOLDER, ArchiveTarget, RunInputs
from .summary import Summary
from .team import EventGroup, Written

#: ``sink(defs, groups, tmp, name, on_write)``: takes the definitions and the event groups
#: (``(locations, pieces)`` per group of nodes) and returns what was written
Sink = Callable[[ArchiveDefs, Iterator[EventGroup], Path, str, Callable[[int], None]], Written]

T = TypeVar("T")


def write_otf2(defs: ArchiveDefs, groups: Iterator[EventGroup], tmp: Path, name: str,
               on_write: Callable[[int], None]) -> Written:
    """The default sink: the archive ``name`` written into ``tmp``."""
    from ..writer.archive import write_archive  # the only importer of otf2
    from ..writer.events import EventGroups

    return write_archive(defs, EventGroups(groups), tmp, name, progress=on_write)


class SerialTeam:
    """The one process of a serial conversion."""

    rank, size = 0, 1
    handed = (0, 0)  # nothing is handed to another process

    def __init__(self, sink: Sink = write_otf2) -> None:
        self.sink = sink

    # collectives ------------------------------------------------------------------------

    def run(self, _step: str, fn: Callable[[], T]) -> T:
        return fn()

    def on_root(self, _step: str, fn: Callable[[], T]) -> T | None:
        """``fn()`` on the root (here), None on the other processes."""
        return fn()

    def from_root(self, fn: Callable[[], T]) -> T:
        """The root's ``fn()`` on every process."""
        return fn()

    def gather(self, value: T) -> list[T] | None:
        return [value]

    def allgather(self, value: T) -> list[T]:
        return [value]

    def bcast(self, value: T) -> T:
        return value

    def scatter(self, values: list[T] | None) -> T:
        assert values is not None  # the root (this process) always has them
        return values[0]

    def allreduce(self, value: T) -> T:
        return value

    # the run's share, layout and events ---------------------------------------------------

    def my_ranks(self, man: Manifest, dump_bytes: list[int]) -> list[int]:
        return [p.rank for p in man.processes]

    def layout(self, man: Manifest, summaries: list, damage: DamageLog) -> RunLayout:
        locations, contexts, _ = build_locations(man, summaries, damage)
        return RunLayout(locations, contexts, [d.name for d in summaries],
                         [d.spe_buffer_records for d in summaries])

    def write(self, defs: ArchiveDefs, own: Iterator[EventGroup], tmp: Path, name: str,
              on_write: Callable[[int], None]) -> Written:
        return self.sink(defs, own, tmp, name, on_write)

    # the output ------------------------------------------------------------------------------

    def open_output(self, archive: str | Path, report: str | Path | None, force: bool,
                    run_dir: str | Path) -> ArchiveTarget:
        """The output target, checked and prepared (missing folders are made)."""
        target = ArchiveTarget(archive, report, run_dir)
        target.prepare(force, RunInputs.of(run_dir))
        return target

    @contextmanager
    def staged(self, target: ArchiveTarget) -> Iterator[Path]:
        """The staging directory; committed into place when the block ends normally."""
        with target.staged() as tmp:
            yield Path(tmp)

    def spill_directory(self, tmp: Path) -> Path:
        return tmp / SPILL_FOLDER

    def failed(self, target: ArchiveTarget, _exc: BaseException) -> None:
        """After any failure or interruption: the folders ``open_output`` made go again."""
        target.remove_made()

    def finish(self, summary: Summary | None) -> Summary:
        """The summary, on every process."""
        assert summary is not None  # this process is the root
        return summary

    def local_progress(self, progress: Progress | None) -> Progress | None:
        """The progress display (this process is the root)."""
        return progress
