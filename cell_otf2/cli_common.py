"""Small helpers the typer commands share (``cli.py``, ``sim/cli.py``): option checks that
answer in our own words, shell completion of their values, plain-word counts, and the writing
of a command's result to a stdout that may be full or closed. No command and no pipeline
logic here."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from enum import Enum

import typer


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
