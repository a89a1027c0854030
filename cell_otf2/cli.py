"""Command line: ``cell2otf2 RUN_DIR -o ARCHIVE.otf2`` plus subcommands.

Thin typer commands only: each parses options, calls the pipeline, prints, and maps a
``CellOtf2Error`` to one message and its exit status (CONTRACT.md section 1). No traceback
reaches a user: anything unexpected is reported as an internal error with exit status 3.
Pipeline logic lives in the modules the commands call.

Commands: ``convert`` (the default: ``cell2otf2 RUN_DIR -o A.otf2``), ``check``, ``inspect``
(``inspect.py``; exit 0 whenever the run could be read, damaged or not, 3 when refused),
``report`` (``cell_otf2.report.render_report``; needs the optional matplotlib, exit 2 with
the install command when it is missing) and ``simulate``.

Ctrl-C anywhere prints ``cell2otf2: interrupted`` on stderr and exits with status 130
(128 + SIGINT, the shell convention), after the interrupted command has cleaned up (a
conversion leaves its output path as it was). Typer would otherwise exit 130 silently (or
print "Aborted!" and exit 1 in older versions, which would read as "converted with losses").
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from .emit import DmaStyle
from .errors import EXIT_INPUT, EXIT_LOSSY, EXIT_OK, EXIT_USAGE, CellOtf2Error

SUBCOMMANDS = ("simulate", "check", "inspect", "report", "convert")
#: exit status after Ctrl-C (128 + SIGINT)
EXIT_INTERRUPTED = 130
#: what ``cell2otf2 report`` says when matplotlib is missing
NEEDS_MATPLOTLIB = "cell2otf2 report needs matplotlib: pip install 'cell2otf2[report]'"

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Convert Cell BE trace runs (CBT 1) into OTF2. "
    "Usage: cell2otf2 RUN_DIR -o ARCHIVE.otf2 OPTIONS..., or cell2otf2 COMMAND ...",
)


class _Interrupted(SystemExit):
    """The exit after Ctrl-C, once its message is printed."""


def _interrupted() -> None:
    typer.echo("cell2otf2: interrupted", err=True)
    raise _Interrupted(EXIT_INTERRUPTED)


def _interruptible(func: Callable[..., None]) -> Callable[..., None]:
    """Ctrl-C inside a command: one message and ``EXIT_INTERRUPTED``, whatever typer does."""

    @functools.wraps(func)  # typer reads the signature through __wrapped__
    def run(*args: object, **kwargs: object) -> None:
        try:
            func(*args, **kwargs)
        except KeyboardInterrupt:
            _interrupted()

    return run


def _register() -> None:
    from .check import check_command

    if any(c.name == "check" for c in app.registered_commands):
        return
    app.command("check", help="Report every problem of RUN_DIR without converting it "
                "(exit 0 clean, 1 contained damage, 3 refused).")(_interruptible(check_command))
    try:
        from . import cli_simulate
    except ImportError:  # the simulator is optional for conversion
        return
    app.command("simulate", help="Write a synthetic CBT 1 run with its ground truth.")(
        _interruptible(cli_simulate.simulate_command)
    )


class _Progress:
    """One self-overwriting line on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.last = ""

    def __call__(self, stage: str, fraction: float) -> None:
        if not self.enabled:
            return
        text = f"\r{stage:>6} {100 * min(1.0, fraction):5.1f}%"
        if text != self.last:
            sys.stderr.write(text)
            sys.stderr.flush()
            self.last = text

    def close(self) -> None:
        if self.enabled and self.last:
            sys.stderr.write("\r" + " " * 20 + "\r")
            sys.stderr.flush()


def _read_delay(value: float) -> float:
    """``--read-delay-ticks``: finite, 0 .. 2^31 ticks (``order.MAX_READ_DELAY_TICKS``)."""
    from .order import check_read_delay

    try:
        return check_read_delay(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@app.command("convert", help="Convert RUN_DIR to an OTF2 archive (the default command).")
@_interruptible
def convert_command(
    run_dir: Annotated[Path, typer.Argument(help="CBT 1 run directory (holds run.json)")],
    output: Annotated[
        str, typer.Option("-o", "--output", help="archive anchor, e.g. out/run.otf2")
    ],
    force: Annotated[
        bool, typer.Option("--force", help="replace an existing archive")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="print nothing")] = False,
    report: Annotated[
        Path | None, typer.Option("--report", help="write the sync report (JSON) here")
    ] = None,
    dma_style: Annotated[
        DmaStyle, typer.Option("--dma-style", help="DMA as RMA records or as messages")
    ] = DmaStyle.RMA,
    alpha: Annotated[
        float, typer.Option("--alpha", min=0.0, max=1.0,
                            help="where offsets sit between their bounds (0 lower, 1 upper)")
    ] = 0.5,
    read_delay_ticks: Annotated[
        float, typer.Option("--read-delay-ticks", callback=_read_delay,
                            help="guaranteed mode: bounds hold for any delay up to D ticks "
                                 "between a slot's reservation and its clock reading; 0 "
                                 "(default): slot order exact, least uniform relaxation")
    ] = 0.0,
    accept_unsynchronized_nodes: Annotated[
        bool, typer.Option("--accept-unsynchronized-nodes",
                           help="exit 0 even if a node is placed only by its start readings")
    ] = False,
) -> None:
    from .convert import convert
    from .order import OrderOptions

    progress = _Progress(not quiet)
    try:
        summary = convert(run_dir, output, force=force, dma_style=dma_style, alpha=alpha,
                          report=report, progress=progress,
                          order_options=OrderOptions(read_delay_ticks=read_delay_ticks),
                          accept_unsynchronized_nodes=accept_unsynchronized_nodes)
    finally:
        progress.close()
    if not quiet and summary.rank == 0:  # a parallel conversion prints once
        typer.echo("\n".join(summary.lines()))
    raise SystemExit(EXIT_LOSSY if summary.lossy else 0)


@app.command("inspect", help="Show what RUN_DIR holds: processes, nodes, SPE contexts, "
             "records per kind, blocks, lost slots, clock spans, context switches, "
             "decrementer writes and wraps (exit 0 inspected, 3 refused).")
@_interruptible
def inspect_command(
    run_dir: Annotated[Path, typer.Argument(help="CBT 1 run directory (holds run.json)")],
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object (keys: see cell_otf2.inspect)")
    ] = False,
) -> None:
    from .inspect import inspect

    info = inspect(run_dir)  # a CellOtf2Error becomes one message and exit 3 in main
    if as_json:
        typer.echo(json.dumps(info.to_dict(), indent=1))
    else:
        typer.echo("\n".join(info.lines()))
    raise SystemExit(EXIT_OK)


@app.command("report", help="Draw figures and an index.html from a converted ARCHIVE "
             "(needs matplotlib, the optional 'report' extra).")
@_interruptible
def report_command(
    archive: Annotated[Path, typer.Argument(help="OTF2 anchor file written by cell2otf2")],
    output: Annotated[Path, typer.Option("-o", "--output", help="directory for the report")],
    max_events: Annotated[
        int, typer.Option("--max-events", min=1,
                          help="draw at most this many events (a sample beyond it)")
    ] = 200_000,
    sync_report: Annotated[
        Path | None, typer.Option("--sync-report",
                                  help="the conversion's --report JSON, for its headline numbers")
    ] = None,
) -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        typer.echo(NEEDS_MATPLOTLIB, err=True)
        raise SystemExit(EXIT_USAGE)
    try:
        from .report import render_report
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] == "matplotlib":
            typer.echo(NEEDS_MATPLOTLIB, err=True)
            raise SystemExit(EXIT_USAGE) from None
        _fail(f"the report renderer (cell_otf2.report) cannot be loaded: {exc}", EXIT_INPUT)
    result = render_report(archive, output, max_events=max_events, sync_report=sync_report)
    typer.echo(f"cell2otf2 report: {result.index_html}")
    for fig in result.figures:
        typer.echo(f"  {fig}")
    raise SystemExit(EXIT_OK)


def _fail(message: str, status: int) -> None:
    typer.echo(f"cell2otf2: error: {message}", err=True)
    raise SystemExit(status)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    _register()
    if args and not args[0].startswith("-") and args[0] not in SUBCOMMANDS:
        args = ["convert", *args]
    try:
        app(args=args, prog_name="cell2otf2", standalone_mode=True)
    except CellOtf2Error as exc:
        if getattr(exc, "secondary", False):  # another converter process printed it
            raise SystemExit(exc.exit_status) from None
        _fail(str(exc), exc.exit_status)
    except KeyboardInterrupt:  # outside a command, e.g. while typer parses
        _interrupted()
    except SystemExit as exc:
        if (exc.code == EXIT_INTERRUPTED and not isinstance(exc, _Interrupted)
                and _caused_by_ctrl_c(exc)):
            _interrupted()  # typer's own Ctrl-C exit (130, silent): say it
        raise
    except Exception as exc:  # noqa: BLE001 - the contract: no traceback for any input
        _fail(f"internal error: {type(exc).__name__}: {exc}", EXIT_INPUT)


def _caused_by_ctrl_c(exc: BaseException) -> bool:
    """Was ``exc`` raised while handling a KeyboardInterrupt (typer: Exit(130) from it)?"""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        todo += [e.__cause__, e.__context__]
    return False


if __name__ == "__main__":
    main()
