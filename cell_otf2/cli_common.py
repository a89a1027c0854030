"""Small helpers the typer commands share (``cli.py``, ``sim/cli.py``): option checks that
answer in our own words, shell completion of their values, and plain-word counts. No command
and no pipeline logic here.
"""

from __future__ import annotations

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
