"""``cell2otf2 check RUN_DIR``: every problem of a run, found the way conversion finds it, with
nothing written: ``check_run`` runs the conversion's own phases with a sink that passes events
and definitions through the writer's input checks instead of writing them, so a run it passes
converts (docs/design.md, docs/damage.md), then names the tracer bugs the dumps show
(``decode.tracer_bugs``) under the damage lines. Exit status 0 (no damage), 1 (contained damage,
one line per kind) or 3 (refused); a recognised tracer bug changes no status. It does not
repair, rewrite or convert anything."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..decode.tracer_bugs import TracerBug
from ..errors import EXIT_LOSSY, EXIT_OK, FormatError

if TYPE_CHECKING:
    from .options import ConvertOptions
    from .summary import Summary


@dataclass
class CheckResult:
    """What ``check_run`` found in a run that could be read."""

    run_dir: str
    processes: int
    records: int  # PPE + SPE records read from the dumps
    events: int  # OTF2 events a conversion would write
    lines: list[str] = field(default_factory=list)  # DamageLog.summary_lines()
    damage_total: int = 0  # records or slots affected, over every kind
    #: the tracer bugs the dumps show, with what to change (``decode.tracer_bugs.recognize``)
    tracer_bugs: list[TracerBug] = field(default_factory=list)

    @property
    def status(self) -> int:
        return EXIT_LOSSY if self.lines else EXIT_OK

    def report(self) -> list[str]:
        """Human lines: a head line, then the damage lines as the conversion summary has them."""
        head = (f"cell2otf2 check: {self.run_dir}: {self.processes} processes, "
                f"{self.records} records, {self.events} events to write")
        if not self.lines:
            lines = [head, "  lost or unusable records: none"]
        else:
            lines = [head, f"  lost or unusable input ({len(self.lines)} "
                            f"{'kind' if len(self.lines) == 1 else 'kinds'}):",
                     *(f"    {line}" for line in self.lines)]
        if self.tracer_bugs:
            lines += [f"  what the tracer did wrong ({len(self.tracer_bugs)} "
                      f"{'cause' if len(self.tracer_bugs) == 1 else 'causes'}):",
                      *(f"    {bug.line()}" for bug in self.tracer_bugs)]
        return lines


@dataclass
class Checked:
    """What the checking sink saw: events per location, as the writer would count them."""

    events_per_location: np.ndarray


def check_only(defs: Any, groups: Iterator, _tmp: Path, _name: str,
               _on_write: Callable[[int], None]) -> Checked:
    """The sink of ``check``: every piece of events and the definitions through the
    writer's input checks, nothing written."""
    from ..writer.checks import check_defs, check_events  # the writer's refusals, no writing

    counts = np.zeros(len(defs.locations), dtype=np.int64)
    for _locations, pieces in groups:
        for piece in ([pieces] if isinstance(pieces, np.ndarray) else pieces):
            check_events(defs, piece)
            counts += np.bincount(piece["loc"], minlength=counts.size)[: counts.size]
            del piece
        # let go of this group's pieces (they hold its record table) before the next group
        # is loaded, as the writer does: else two groups' tables are held at once
        del pieces
    check_defs(defs)
    return Checked(counts)


def check_run(run_dir: str | Path, options: ConvertOptions | None = None) -> CheckResult:
    """Find every problem of ``run_dir`` without writing; raises what conversion would raise.
    The options are ``convert``'s (None: the defaults): the same phases run with them, so the
    damage lines (the summary's ``unusable``, nodes placed only by their start readings
    included) and the exit status are the conversion's."""
    # imported here, not with the module: the driver brings every stage's modules
    from ..decode.tracer_bugs import recognize_run
    from .driver import StageClock, run_phases
    from .options import ConvertOptions
    from .spill import Spill
    from .team_serial import SerialTeam

    options = ConvertOptions() if options is None else options
    spill = Spill(Path(tempfile.gettempdir())
                  / f".cell2otf2-check-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        done = run_phases(SerialTeam(sink=check_only), Path(run_dir), spill.directory,
                          "check", StageClock(), spill, options, report_pairs=False)
    except FormatError as first:
        first.more += [e for e in _other_dump_refusals(Path(run_dir), first)
                       if str(e) not in {str(m) for m in first.more}]
        raise
    finally:
        spill.close()
    assert done is not None  # a serial team is its own root
    summary, whole = done.summary, done.whole
    return CheckResult(
        run_dir=str(run_dir),
        processes=summary.processes,
        records=summary.records_in,
        events=summary.events_written,
        lines=_unusable(summary, options.accept_unsynchronized_nodes),
        damage_total=whole.damage.total(),
        tracer_bugs=recognize_run(run_dir),
    )


def _unusable(summary: Summary, accept_unsynchronized_nodes: bool) -> list[str]:
    """The conversion summary's lost or unusable input, as ``convert`` would list it."""
    summary.accept_unsynchronized_nodes = accept_unsynchronized_nodes
    return summary.unusable()


def _other_dump_refusals(run_dir: Path, first: FormatError) -> list[FormatError]:
    """Every dump refused on its own (header, framing), beside the refusal ``first`` that
    stopped the pipeline: a run with two bad dumps gets both named."""
    from ..damage import DamageLog
    from ..input.manifest import load_manifest
    from ..input.reader import read_dump

    try:
        man = load_manifest(run_dir)
    except FormatError:
        return []  # the manifest itself was refused: its problems are in ``first``
    found = []
    for p in man.processes:
        path = man.dump_path(p.rank)
        if str(path) == first.file:
            continue
        try:
            DamageLog().extend(read_dump(path, man, p.rank).damage)
        except FormatError as exc:
            found.append(exc)
    return found
