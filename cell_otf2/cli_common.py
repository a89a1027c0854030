"""Small helpers the typer commands share (``cli.py``, ``sim/cli.py``): option checks that
answer in our own words, shell completion of their values, the writing of a command's result
to a stdout that may be full or closed, the command line's logging (``configure_logging``,
``--debug`` and ``CELL2OTF2_DEBUG``) and the plain help layout (``PlainHelpCommand``). No
command and no pipeline logic here."""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from enum import Enum
from typing import Any, Protocol

import typer
import typer.core


def _values(enum: type[Enum]) -> list[str]:
    return [str(e.value) for e in enum]


def _refuse(value: str, values: list[str]) -> typer.BadParameter:
    return typer.BadParameter(f"{value!r} is not one of " + ", ".join(repr(v) for v in values))


def choice(enum: type[Enum]) -> Callable[[str | None], str | None]:
    """An option callback accepting only the values of ``enum``: "'foo' is not one of 'rma',
    'messages'" instead of typer's "Value error, ...". Declare the option as ``str`` with
    ``metavar`` listing the values and ``autocompletion=complete(enum)``."""
    values = _values(enum)

    def check(value: str | None) -> str | None:
        if value is not None and value not in values:
            raise _refuse(value, values)
        return value

    return check


def choices(enum: type[Enum]) -> Callable[[list[str] | None], list[str] | None]:
    """``choice`` for a repeatable option (``list[str]``): every value one of ``enum``'s."""
    values = _values(enum)

    def check(given: list[str] | None) -> list[str] | None:
        for value in given or []:
            if value not in values:
                raise _refuse(value, values)
        return given

    return check


def complete(enum: type[Enum]) -> Callable[[str], list[str]]:
    """Shell completion of an option's values: those of ``enum`` starting as typed."""
    values = _values(enum)

    def candidates(incomplete: str) -> list[str]:
        return [v for v in values if v.startswith(incomplete)]

    return candidates


def print_result(text: str, what: str, done: str = "") -> bool:
    """Write a command's result (``text`` and a newline) to stdout; True when it was taken.

    A stdout that cannot take it (a full device, a pipe whose reader has gone: EPIPE, as
    Python ignores SIGPIPE) gives one line on stderr naming ``what`` and ``done`` (what is
    true regardless) and False; stdout is then pointed at the null device, so that nothing
    fails again when the interpreter flushes it at exit. The caller decides the exit status.
    """
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return True
    except OSError as exc:
        why = exc.strerror or str(exc)
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, sys.stdout.fileno())
        finally:
            os.close(null)
    except (OSError, ValueError):
        pass
    try:
        sys.stderr.write(f"cell2otf2: {what} could not be written to stdout ({why})"
                         + (f"; {done}" if done else "") + "\n")
        sys.stderr.flush()
    except OSError:
        pass
    return False


def finite(value: float) -> float:
    """Refuse nan (which passes any min/max check) and infinities as usage errors."""
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def read_delay(value: float) -> float:
    """``--read-delay-ticks``: finite, 0 .. 2^31 ticks (``order.MAX_READ_DELAY_TICKS``)."""
    from .sync.order import check_read_delay

    try:
        return check_read_delay(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


# --------------------------------------------------------------------------------------------
# logging and --debug
# --------------------------------------------------------------------------------------------

#: set to anything but "" or "0" to do what ``--debug`` does, for every command
DEBUG_VARIABLE = "CELL2OTF2_DEBUG"
#: what the message of an internal error suggests
DEBUG_HINT = f"--debug or {DEBUG_VARIABLE}=1 prints its traceback"
#: the logger every module of the package logs under (``logging.getLogger(__name__)``)
PACKAGE_LOGGER = "cell_otf2"


def debug_from_environment(environ: Mapping[str, str] = os.environ) -> bool:
    """Does the environment ask for debugging output (``CELL2OTF2_DEBUG``)?"""
    return environ.get(DEBUG_VARIABLE, "") not in ("", "0")


class _StderrHandler(logging.Handler):
    """Writes each record to the ``sys.stderr`` of the moment (a test may have replaced it
    since the handler was installed) as ``cell2otf2: level: message``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging's own convention: report, never raise
            self.handleError(record)


class _Format(logging.Formatter):
    """``cell2otf2: error: ...`` as the command's own messages read; debugging records also
    name the module that logged them."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        level = record.levelname.lower()
        if record.levelno < logging.INFO:
            return f"cell2otf2: {level}: {record.name}: {text}"
        return f"cell2otf2: {level}: {text}"


_HANDLER = _StderrHandler()
_HANDLER.setFormatter(_Format())


def configure_logging(debug: bool) -> None:
    """The command line's logging: the package's records on stderr, warnings and errors only,
    or everything with ``debug``. Installed once per process; later calls change the level.
    The library itself configures nothing (``import cell_otf2`` leaves logging as it is)."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
    level = logging.DEBUG if debug else logging.WARNING
    logger.setLevel(level)
    _HANDLER.setLevel(level)


def debugging() -> bool:
    """Is debugging output on (``--debug`` or ``CELL2OTF2_DEBUG``)?"""
    return logging.getLogger(PACKAGE_LOGGER).isEnabledFor(logging.DEBUG)


def debug_option(value: bool) -> bool:
    """Callback of every command's eager ``--debug`` option: debugging output from the start
    of the command, option checks included."""
    if value:
        configure_logging(debug=True)
    return value


# --------------------------------------------------------------------------------------------
# help layout
# --------------------------------------------------------------------------------------------


class HelpFormatter(Protocol):
    """What the options section uses of click's help formatter (typer vendors click and
    exports no name for it)."""

    def section(self, name: str) -> AbstractContextManager[None]: ...

    def write_dl(self, rows: Sequence[tuple[str, str]]) -> None: ...


def _plain_type(shown: str) -> str:
    """typer's ``<int range>``, ``<float>``, ``<path>`` as click and other command lines write
    a value: ``INT``, ``FLOAT``, ``PATH``."""
    return shown.strip("<>").replace(" range", "").upper()


class PlainHelpCommand(typer.core.TyperCommand):
    """A typer command whose usage line and help read as click's and most command lines':
    typer writes a required argument as ``{RUN_DIR}`` in the usage line, ``RUN_DIR <path>`` in
    the help, and an option's value as ``--spes <int range>``. Here: ``RUN_DIR``,
    ``[RUN_DIR]`` when optional, and ``--spes INT``; a ``metavar`` is shown as given. Only
    click's public hooks for the usage line and the options section are overridden.

    ``ctx`` is click's ``Context``, which typer vendors under a private module: annotated
    ``Any``, as ``typer.Context`` (a subclass) would narrow the overridden methods."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, typer.core.TyperArgument):
                name = param.human_readable_name
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: Any, formatter: HelpFormatter) -> None:
        arguments: list[tuple[str, str]] = []
        options: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            name, text = record
            if isinstance(param, typer.core.TyperArgument):
                arguments.append((param.human_readable_name, text))
            elif isinstance(param, typer.core.TyperOption):
                shown = param.make_metavar(ctx)
                if param.metavar is None and shown:
                    name = name.replace(f" {shown}", f" {_plain_type(shown)}")
                options.append((name, text))
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
