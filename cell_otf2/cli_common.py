"""Small helpers the typer commands share (``cli.py``, ``sim/cli.py``): option checks
that answer in our own words. No command and no pipeline logic here.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import typer


def choice(enum: type[Enum]) -> Callable[[str | None], str | None]:
    """An option callback accepting only the values of ``enum``: "'foo' is not one of 'rma',
    'messages'" instead of typer's "Value error, ...". Declare the option as ``str`` with
    ``metavar`` listing the values."""
    values = [str(e.value) for e in enum]

    def check(value: str | None) -> str | None:
        if value is not None and value not in values:
            raise typer.BadParameter(f"{value!r} is not one of "
                                     + ", ".join(repr(v) for v in values))
        return value

    return check
