"""Command line: ``cell2otf2 RUN_DIR -o ARCHIVE.otf2`` (``convert``) plus ``check``, ``inspect``
(``run_info.py``), ``report`` (``cell_otf2.report``; exit 2 when matplotlib is missing) and
``simulate``: thin typer commands that parse options, call the pipeline, print, and map a
``CellOtf2Error`` to one message and its exit status. Anything unexpected is an internal error:
one message and exit 70, its traceback only with ``--debug`` (or ``CELL2OTF2_DEBUG=1``);
Ctrl-C prints ``cell2otf2: interrupted`` and exits 130 once the command has cleaned up
(docs/design.md). The process-wide settings of the command (``process_setup``) and its logging
are made here and in ``__main__``, never by the library. Pipeline logic lives in the modules
the commands call."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
import typer.core
import typer.main

from . import signals
from .cli_common import (
    DEBUG_HINT,
    DEBUG_VARIABLE,
    PlainHelpCommand,
    choice,
    complete,
    configure_logging,
    debug_from_environment,
    debug_option,
    debugging,
    finite,
    print_result,
    read_delay,
)
from .errors import (
    EXIT_INPUT,
    EXIT_LOSSY,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_SOFTWARE,
    EXIT_USAGE,
    CellOtf2Error,
)
from .model import DmaStyle
from .process_setup import single_host_transport, tune_malloc
from .progress import TerminalProgress

_log = logging.getLogger(__name__)

SUBCOMMANDS = ("simulate", "check", "inspect", "report", "convert")
#: what ``cell2otf2 report`` says when matplotlib is missing
NEEDS_MATPLOTLIB = "cell2otf2 report needs matplotlib: pip install 'cell2otf2[report]'"

#: the exit statuses, as every command's help lists them
EXIT_HELP = ("\b\nExit status: 0 converted; 1 converted with lost or unusable input (listed\n"
             "in the summary); 2 wrong usage; 3 input unreadable or not CBT 1; 4 output\n"
             "problem; 70 internal error (a bug: --debug prints its traceback); 130\n"
             "interrupted (143 SIGTERM, 129 SIGHUP).")
#: options that belong to the program, not to the default ``convert`` command
PROGRAM_OPTIONS = ("--help", "-h", "--version", "-V", "--install-completion",
                   "--show-completion")

app = typer.Typer(
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: no <bool>/<str> type noise, readable at 80 columns
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    help="Convert Cell BE trace runs (CBT 1) into synchronized OTF2 archives.\n\n"
    "\b\ncell2otf2 RUN_DIR -o ARCHIVE.otf2 [OPTIONS]   convert (the default command)\n"
    "cell2otf2 COMMAND [ARGS]...                  check, inspect, report, simulate",
    epilog=EXIT_HELP,
)


def _version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"cell2otf2 {__version__}")
        raise typer.Exit()


@app.callback()
def _program(
    version: Annotated[bool, typer.Option(
        "--version", "-V", callback=_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """Convert Cell BE trace runs (CBT 1) into synchronized OTF2 archives."""


class _Interrupted(SystemExit):
    """The exit after Ctrl-C (or SIGTERM, SIGHUP), once its message is printed."""


def _interrupted(exc: BaseException | None = None) -> None:
    typer.echo(f"cell2otf2: {signals.describe(exc)}", err=True)
    signals.forget_unhandled_interrupt()
    raise _Interrupted(signals.exit_status(exc))


#: the ``--debug`` option every command gets (``_interruptible``); eager, so that it is on
#: before the other options' checks run
DEBUG_PARAMETER = inspect.Parameter(
    "debug", inspect.Parameter.KEYWORD_ONLY, default=False,
    annotation=Annotated[bool, typer.Option(
        "--debug", is_eager=True, callback=debug_option,
        help=f"print diagnostics and an internal error's traceback on stderr (also: "
             f"{DEBUG_VARIABLE}=1)")])


def _interruptible(func: Callable[..., None]) -> Callable[..., None]:
    """A command: Ctrl-C inside it is one message and 130 (143 for SIGTERM), whatever typer
    does, and it takes ``--debug`` besides its own options (typer reads the parameters from
    ``__signature__``; the option's callback has done its work when the command runs)."""
    signature = inspect.signature(func, eval_str=True)

    @functools.wraps(func)
    def run(*args: object, debug: bool = False, **kwargs: object) -> None:
        try:
            func(*args, **kwargs)
        except KeyboardInterrupt as exc:
            _interrupted(exc)

    # inspect.signature reads a function's __signature__ (documented); typeshed declares no
    # such attribute on functions
    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), DEBUG_PARAMETER])
    return run


def _click_command(only: str | None = None) -> typer.core.TyperGroup:
    """The command line as click runs it, every command with the plain help layout. Built
    through typer's public ``get_command`` rather than by calling ``app``, which would also
    replace the process's ``sys.excepthook``. ``only``: the subcommand the arguments name;
    the group then holds that command alone (click runs only the one named, and building
    every command's parameters from its signature costs each run 20-30 ms); None: all, for
    the program's own help and options."""
    for info in app.registered_commands:
        if info.cls is typer.core.TyperCommand:  # typer's default: every command declared here
            info.cls = PlainHelpCommand
    every = app.registered_commands
    if only is not None:
        app.registered_commands = [info for info in every if info.name == only]
    try:
        command = typer.main.get_command(app)
    finally:
        app.registered_commands = every
    if not isinstance(command, typer.core.TyperGroup):  # one command and no callback: typer
        command = typer.main.get_command(app)  # makes it the program itself; all of them
    assert isinstance(command, typer.core.TyperGroup)  # an app of several commands
    return command


def _register(command: str | None = None) -> None:
    """Add ``simulate`` to the commands, unless ``command`` names another one (importing the
    simulator costs every conversion 10 ms otherwise)."""
    if command not in (None, "simulate"):
        return
    if any(c.name == "simulate" for c in app.registered_commands):
        return
    try:
        from .sim import cli as sim_cli
    except ImportError:  # the simulator is optional for conversion
        return
    app.command("simulate", help="Write a synthetic CBT 1 run with its ground truth into "
                "OUT_DIR (a new or empty folder, or a previous simulated run with --force).",
                short_help="Write a synthetic CBT 1 run with its ground truth.")(
        _interruptible(sim_cli.simulate_command)
    )


#: every command's argument, named the same way in every command's help
RUN_DIR_HELP = "CBT 1 run directory (holds run.json)"
QUIET_HELP = "print nothing (the exit status says how it went)"
JSON_HELP = "print the summary as one JSON object instead of lines"


@app.command("convert", help="Convert RUN_DIR to an OTF2 archive (the default command: "
             "cell2otf2 RUN_DIR -o ARCHIVE.otf2).", epilog=EXIT_HELP,
             short_help="Convert RUN_DIR to an OTF2 archive (the default command).")
@_interruptible
def convert_command(
    run_dir: Annotated[Path, typer.Argument(
        readable=False, metavar="RUN_DIR",  # readable=False: our own message, exit 3
        help=RUN_DIR_HELP)],
    output: Annotated[
        str, typer.Option("-o", "--output", metavar="ARCHIVE.otf2",
                          help="archive anchor, e.g. out/run.otf2 (also writes out/run.def "
                               "and out/run/)")
    ],
    force: Annotated[
        bool, typer.Option("-f", "--force",
                           help="replace a previous archive or report (never anything else)")
    ] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help=QUIET_HELP)] = False,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP + " (cell_otf2.Summary's "
                                          "fields, plus lossy)")] = False,
    report: Annotated[
        Path | None, typer.Option("--report", metavar="FILE.json",
                                  help="write the synchronization report (JSON) here")
    ] = None,
    dma_style: Annotated[
        str, typer.Option("--dma-style", metavar="rma|messages", callback=choice(DmaStyle),
                          autocompletion=complete(DmaStyle),
                          help="DMA as RMA records or as messages")
    ] = DmaStyle.RMA.value,
    alpha: Annotated[
        float, typer.Option("--alpha", min=0.0, max=1.0, callback=finite, metavar="A",
                            help="where offsets sit between their bounds (0 lower, 1 upper)")
    ] = 0.5,
    read_delay_ticks: Annotated[
        float, typer.Option("--read-delay-ticks", callback=read_delay, metavar="D",
                            help="guaranteed mode: bounds hold for any delay up to D ticks "
                                 "between a slot's reservation and its clock reading; 0: "
                                 "slot order exact, least uniform relaxation")
    ] = 0.0,
    accept_unsynchronized_nodes: Annotated[
        bool, typer.Option("--accept-unsynchronized-nodes",
                           help="exit 0 even if a node is placed only by its start readings")
    ] = False,
) -> None:
    from . import convert

    progress = TerminalProgress(not quiet)
    try:
        summary = convert(run_dir, output, force=force, dma_style=dma_style, alpha=alpha,
                          report=report, read_delay_ticks=read_delay_ticks,
                          accept_unsynchronized_nodes=accept_unsynchronized_nodes,
                          progress=progress)
    finally:
        progress.close()
    if not quiet and summary.rank == 0:  # a parallel conversion prints once
        text = (json.dumps(summary.to_dict(), indent=1) if as_json
                else "\n".join(summary.lines()))
        # the archive is in place: a summary stdout cannot take changes nothing (README)
        print_result(text, "the summary", f"the archive {output} is in place")
    raise SystemExit(EXIT_LOSSY if summary.lossy else 0)


@app.command("check", help="Report every problem of RUN_DIR without converting it; writes "
             "nothing (exit 0 clean, 1 contained damage, 3 refused).",
             short_help="Report every problem of RUN_DIR without converting it.")
@_interruptible
def check_command(
    run_dir: Annotated[Path, typer.Argument(readable=False, metavar="RUN_DIR",
                                             help=RUN_DIR_HELP)],
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help=QUIET_HELP)] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help=JSON_HELP + " (run_dir, processes, records, events, damage, "
        "damage_total, lossy, tracer_bugs)")] = False,
    dma_style: Annotated[
        str, typer.Option("--dma-style", metavar="rma|messages", callback=choice(DmaStyle),
                          autocompletion=complete(DmaStyle),
                          help="as convert's (the events checked are those it would write)")
    ] = DmaStyle.RMA.value,
    alpha: Annotated[
        float, typer.Option("--alpha", min=0.0, max=1.0, callback=finite, metavar="A",
                            help="as convert's (no damage depends on it)")
    ] = 0.5,
    read_delay_ticks: Annotated[
        float, typer.Option("--read-delay-ticks", callback=read_delay, metavar="D",
                            help="as convert's (no damage depends on it)")
    ] = 0.0,
    accept_unsynchronized_nodes: Annotated[
        bool, typer.Option("--accept-unsynchronized-nodes",
                           help="as convert's: a node placed only by its start readings is "
                                "not unusable input")
    ] = False,
) -> None:
    from .errors import FormatError
    from .run.check import check_run
    from .run.options import ConvertOptions
    from .run.summary import plural

    try:
        # any other CellOtf2Error: one message, exit 3 (main)
        result = check_run(run_dir, ConvertOptions.of(dma_style, alpha, read_delay_ticks,
                                                      accept_unsynchronized_nodes))
    except FormatError as exc:
        if not exc.more:
            raise  # one problem: one message, as conversion prints it (main)
        if not quiet:
            problems = [exc, *exc.more]
            typer.echo(f"cell2otf2 check: {run_dir}: refused, "
                       f"{plural(len(problems), 'problem')}:", err=True)
            for p in problems:
                typer.echo(f"  {p}", err=True)
        raise SystemExit(exc.exit_status) from None
    if quiet:
        raise SystemExit(result.status)
    if as_json:
        text = json.dumps({"run_dir": result.run_dir, "processes": result.processes,
                           "records": result.records, "events": result.events,
                           "damage": result.lines, "damage_total": result.damage_total,
                           "lossy": bool(result.lines),
                           "tracer_bugs": [bug.to_dict() for bug in result.tracer_bugs]},
                          indent=1)
    else:
        head = (f"cell2otf2 check: {result.run_dir}: {plural(result.processes, 'process')}, "
                f"{plural(result.records, 'record')}, "
                f"{plural(result.events, 'event')} to write")
        text = "\n".join([head, *result.report()[1:]])
    # the exit status is the verdict: a stdout that cannot take the report changes none
    print_result(text, "the check's report", f"exit status {result.status} is its verdict")
    raise SystemExit(result.status)


@app.command("inspect", help="Show what RUN_DIR holds: processes, nodes, SPE contexts, "
             "records per kind, blocks, lost slots, clock spans, context switches, "
             "decrementer writes and wraps (exit 0 inspected, 3 refused).",
             short_help="Show what RUN_DIR holds, without converting it.")
@_interruptible
def inspect_command(
    run_dir: Annotated[Path, typer.Argument(readable=False, metavar="RUN_DIR",  # exit 3
                                             help=RUN_DIR_HELP)],
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object (keys: README, inspect)")
    ] = False,
) -> None:
    from .run.run_info import inspect

    info = inspect(run_dir)  # a CellOtf2Error becomes one message and exit 3 in main
    text = json.dumps(info.to_dict(), indent=1) if as_json else "\n".join(info.lines())
    # what inspect prints is all it makes: stdout that cannot take it is an output problem
    raise SystemExit(EXIT_OK if print_result(text, "the inspection") else EXIT_OUTPUT)


@app.command("report", help="Draw figures, contexts.csv and an index.html from a converted "
             "ARCHIVE into DIR: a new or empty folder, or a previous report with --force "
             "(needs matplotlib, the optional 'report' extra).",
             short_help="Draw figures and an index.html from a converted ARCHIVE.")
@_interruptible
def report_command(
    archive: Annotated[Path, typer.Argument(metavar="ARCHIVE",
                                            help="OTF2 anchor file written by cell2otf2, "
                                                 "e.g. out/run.otf2")],
    output: Annotated[Path, typer.Option("-o", "--output", metavar="DIR",
                                         help="folder for the report: new or empty, or a "
                                              "previous report (with --force)")],
    force: Annotated[
        bool, typer.Option("-f", "--force",
                           help="replace a previous report in DIR (never anything else)")
    ] = False,
    max_events: Annotated[
        int, typer.Option("--max-events", min=1,
                          help="draw the timeline from at most this many events (a sample "
                          "beyond it; every other figure and table counts all events)")
    ] = 200_000,
    sync_report: Annotated[
        Path | None, typer.Option("--sync-report", metavar="FILE.json",
                                  help="the conversion's --report JSON, for its headline numbers")
    ] = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help=QUIET_HELP)] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="print what was written as one JSON object (index_html, figures, csv, "
        "skipped, events, sampled)")] = False,
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
    from .report.progress import ProgressLine

    progress = ProgressLine(enabled=not quiet)
    try:
        result = render_report(archive, output, max_events=max_events,
                               sync_report=sync_report, progress=progress, force=force)
    finally:
        progress.close()
    if quiet:
        raise SystemExit(EXIT_OK)
    if as_json:
        typer.echo(json.dumps({
            "index_html": str(result.index_html), "figures": [str(f) for f in result.figures],
            "csv": None if result.csv is None else str(result.csv), "skipped": result.skipped,
            "events": result.total_events, "sampled": result.sampled}, indent=1))
        raise SystemExit(EXIT_OK)
    typer.echo(f"cell2otf2 report: {result.index_html}")
    for fig in result.figures:
        typer.echo(f"  {fig}")
    if result.csv is not None:
        typer.echo(f"  {result.csv}")
    raise SystemExit(EXIT_OK)


def _fail(message: str, status: int) -> None:
    typer.echo(f"cell2otf2: error: {message}", err=True)
    raise SystemExit(status)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    signals.install()
    configure_logging(debug=debug_from_environment())
    # the command's own process: before any conversion initializes MPI or allocates
    single_host_transport(os.environ)
    tune_malloc()
    try:
        if args and args[0] not in SUBCOMMANDS and args[0] not in PROGRAM_OPTIONS:
            args = ["convert", *args]  # the default command, options first or not
        only = args[0] if args and args[0] in SUBCOMMANDS else None
        _register(only)
        _click_command(only).main(args=args, prog_name="cell2otf2", standalone_mode=True)
    except CellOtf2Error as exc:
        if exc.secondary:  # another converter process printed it
            raise SystemExit(exc.exit_status) from None
        more = len(getattr(exc, "more", []))
        hint = (f" (and {more} more problem{'s' if more > 1 else ''}: 'cell2otf2 check' "
                "lists them all)") if more else ""
        _fail(str(exc) + hint, exc.exit_status)
    except KeyboardInterrupt as exc:  # outside a command, e.g. while typer parses
        _interrupted(exc)
    except SystemExit as exc:
        cause = None if isinstance(exc, _Interrupted) else _interrupt_behind(exc)
        if exc.code == signals.EXIT_INTERRUPTED and cause is not None:
            _interrupted(cause)  # typer's own Ctrl-C exit (130, silent): say it
        raise
    except Exception as exc:  # noqa: BLE001 - the contract: no traceback for any input
        cause = _interrupt_behind(exc) or signals.received()
        if cause is not None:  # what the interruption broke (an import it stopped, say)
            _interrupted(cause)
        _internal_error(exc)


def _internal_error(exc: Exception) -> None:
    """An unexpected exception, a bug: one message and exit 70; its traceback (before the
    message) with ``--debug``."""
    if debugging():
        _log.debug("the internal error's traceback:", exc_info=exc)
        hint = ""
    else:
        hint = f" (a bug in cell2otf2; {DEBUG_HINT})"
    _fail(f"internal error: {type(exc).__name__}: {exc}{hint}", EXIT_SOFTWARE)


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (or ``signals.Terminated``) ``exc`` was raised while handling
    (typer: Exit(130) from it), or None."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, KeyboardInterrupt):
            return e
        seen.add(id(e))
        todo += [e.__cause__, e.__context__]
    return None


if __name__ == "__main__":
    main()
