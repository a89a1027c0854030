"""``cell2otf2 check RUN_DIR``: every problem of a run, found the way conversion finds it,
with nothing written.

``check_run(run_dir)`` runs the whole conversion pipeline except the writer: read, decode,
match, order, sync, record times, and ``emit`` (which finds undefined region, program and
counter ids), then the writer's own input checks on the event table and definitions. So the
damage it reports is exactly what ``cell2otf2 RUN -o A.otf2`` would put in its summary
(``DamageLog.summary_lines``), and a run it passes converts.

Outcomes (``CheckResult.status``, the command's exit status):
- 0: no damage;
- 1: contained damage (docs/damage.md); ``lines`` holds one line per kind, with the first
  file and slot index;
- 3: refused: ``check_run`` raises the pipeline's ``CellOtf2Error`` (a ``FormatError``
  naming the file, offset or slot, field, expected and found), as conversion would, with
  every other dump that is refused on its own (and every missing dump) in its ``more``;
  the command lists them all.

``check_command`` is the typer command (registered by ``cli._register``); it prints
``CheckResult.report()`` and exits with the status.

It does not repair, rewrite or convert anything, and creates no file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from .convert import analyze
from .emit.events import emit
from .errors import EXIT_LOSSY, EXIT_OK, FormatError


@dataclass
class CheckResult:
    """What ``check_run`` found in a run that could be read."""

    run_dir: str
    processes: int
    records: int  # PPE + SPE records read from the dumps
    events: int  # OTF2 events a conversion would write
    lines: list[str] = field(default_factory=list)  # DamageLog.summary_lines()
    damage_total: int = 0  # records or slots affected, over every kind

    @property
    def status(self) -> int:
        return EXIT_LOSSY if self.lines else EXIT_OK

    def report(self) -> list[str]:
        """Human lines: a head line, then the damage lines as the conversion summary has them."""
        head = (f"cell2otf2 check: {self.run_dir}: {self.processes} processes, "
                f"{self.records} records, {self.events} events to write")
        if not self.lines:
            return [head, "  lost or unusable records: none"]
        return [head, f"  lost or unusable input ({len(self.lines)} kinds):",
                *(f"    {line}" for line in self.lines)]


def check_run(run_dir: str | Path) -> CheckResult:
    """Find every problem of ``run_dir`` without writing; raises what conversion would raise."""
    from .writer.checks import check_defs, check_events  # the writer's refusals, no writing

    try:
        pipe = analyze(Path(run_dir))
    except FormatError as first:
        first.more += [e for e in _other_dump_refusals(Path(run_dir), first)
                       if str(e) not in {str(m) for m in first.more}]
        raise
    defs, events, _ = emit(pipe.decoded, pipe.matches, pipe.sync, pipe.damage)
    check_events(defs, events)
    check_defs(defs)
    dec = pipe.decoded
    return CheckResult(
        run_dir=str(run_dir),
        processes=dec.manifest.n_ranks,
        records=int(dec.records_total),
        events=int(events.size),
        lines=pipe.damage.summary_lines(),
        damage_total=pipe.damage.total(),
    )


def _other_dump_refusals(run_dir: Path, first: FormatError) -> list[FormatError]:
    """Every dump refused on its own (header, framing), beside the refusal ``first`` that
    stopped the pipeline: a run with two bad dumps gets both named."""
    from .damage import DamageLog
    from .manifest import load_manifest
    from .reader import read_dump

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


def check_command(
    run_dir: Annotated[Path, typer.Argument(readable=False,  # our own message, exit 3
                                             help="CBT 1 run directory (holds run.json)")],
    quiet: Annotated[bool, typer.Option("--quiet", help="print nothing, exit status only")]
    = False,
) -> None:
    """Report every problem of RUN_DIR without converting it (writes nothing)."""
    try:
        result = check_run(run_dir)  # any other CellOtf2Error: one message, exit 3 (cli.main)
    except FormatError as exc:
        if not exc.more:
            raise  # one problem: one message, as conversion prints it (cli.main)
        if not quiet:
            problems = [exc, *exc.more]
            typer.echo(f"cell2otf2 check: {run_dir}: refused, {len(problems)} "
                       f"problem{'s' if len(problems) > 1 else ''}:", err=True)
            for p in problems:
                typer.echo(f"  {p}", err=True)
        raise SystemExit(exc.exit_status) from None
    if not quiet:
        typer.echo("\n".join(result.report()))
    raise SystemExit(result.status)
