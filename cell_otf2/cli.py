"""Command line: ``cell2otf2 RUN_DIR -o ARCHIVE.otf2`` plus subcommands.

Thin typer commands only: each parses options, calls the pipeline, prints, and maps a
``CellOtf2Error`` to one message and its exit status (CONTRACT.md section 1). No traceback
reaches a user: anything unexpected is reported as an internal error with exit status 3.
Pipeline logic lives in the modules the commands call.
"""

from __future__ import annotations

import sys

import typer

from .errors import EXIT_INPUT, EXIT_USAGE, CellOtf2Error

SUBCOMMANDS = ("simulate", "check", "inspect", "report", "convert")

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Convert Cell BE trace runs (CBT 1) into OTF2. "
    "Usage: cell2otf2 RUN_DIR -o ARCHIVE.otf2 [options], or cell2otf2 COMMAND ...",
)


def _register() -> None:
    from . import cli_simulate

    app.command("simulate", help="Write a synthetic CBT 1 run with its ground truth.")(
        cli_simulate.simulate_command
    )


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
        _fail(str(exc), exc.exit_status)
    except KeyboardInterrupt:
        _fail("interrupted", EXIT_USAGE)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the contract: no traceback for any input
        _fail(f"internal error: {type(exc).__name__}: {exc}", EXIT_INPUT)


if __name__ == "__main__":
    main()
