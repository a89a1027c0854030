"""Command line: ``cell2otf2 RUN_DIR -o ARCHIVE.otf2`` plus subcommands.

Thin typer commands only: each parses options, calls the pipeline, prints, and maps a
``CellOtf2Error`` to one message and its exit status (CONTRACT.md section 1). No traceback
reaches a user: anything unexpected is reported as an internal error with exit status 3.
Pipeline logic lives in the modules the commands call.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from .emit import DmaStyle
from .errors import EXIT_INPUT, EXIT_LOSSY, EXIT_USAGE, CellOtf2Error

SUBCOMMANDS = ("simulate", "check", "inspect", "report", "convert")

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Convert Cell BE trace runs (CBT 1) into OTF2. "
    "Usage: cell2otf2 RUN_DIR -o ARCHIVE.otf2 [options], or cell2otf2 COMMAND ...",
)


def _register() -> None:
    from .check import check_command

    if not any(c.name == "check" for c in app.registered_commands):
        app.command("check", help="Report every problem of RUN_DIR without converting it "
                    "(exit 0 clean, 1 contained damage, 3 refused).")(check_command)
    try:
        from . import cli_simulate
    except ImportError:  # the simulator is optional for conversion
        return
    app.command("simulate", help="Write a synthetic CBT 1 run with its ground truth.")(
        cli_simulate.simulate_command
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


@app.command("convert", help="Convert RUN_DIR to an OTF2 archive (the default command).")
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
        float, typer.Option("--read-delay-ticks", min=0.0,
                            help="assumed longest delay between a slot's reservation and its "
                                 "clock reading; 0 = the published algorithm's assumption")
    ] = 8.0,
) -> None:
    from .convert import convert
    from .order import OrderOptions

    progress = _Progress(not quiet)
    try:
        summary = convert(run_dir, output, force=force, dma_style=dma_style, alpha=alpha,
                          report=report, progress=progress,
                          order_options=OrderOptions(read_delay_ticks=read_delay_ticks))
    finally:
        progress.close()
    if not quiet and summary.rank == 0:  # a parallel conversion prints once
        typer.echo("\n".join(summary.lines()))
    raise SystemExit(EXIT_LOSSY if summary.lossy else 0)


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
    except KeyboardInterrupt:
        _fail("interrupted", EXIT_USAGE)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the contract: no traceback for any input
        _fail(f"internal error: {type(exc).__name__}: {exc}", EXIT_INPUT)


if __name__ == "__main__":
    main()
