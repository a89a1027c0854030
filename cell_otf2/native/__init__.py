"""The one switch between the optional compiled helpers (the C sources here, built by setup.py
into ``cell_otf2.native._<name>``) and their numpy twins: ``helper(name)`` is the only way the
package reaches a compiled helper, and gives the module, or None where it is not built or the
environment variable ``CELL2OTF2_NO_NATIVE`` is set (to anything but empty), asked at every
call so that tests can run both ways in one process. Every wrapper asks it the same way and
falls back the same way: its numpy twin gives the same result, in the wrapper itself, or (the
few whose twin is its caller's own code) the wrapper returns None and the caller runs the
twin. A wrapper also takes its twin where the arrays' layout does not suit the C loop. This
module holds no loop and no pipeline logic of its own, and decides nothing about results:
both ways give the same tables and byte-identical archives."""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType

#: set to anything but empty: every wrapper takes its numpy twin, and no helper is imported
OFF_VARIABLE = "CELL2OTF2_NO_NATIVE"
#: the compiled helpers, by the name ``helper`` takes (their modules are ``_<name>``)
HELPERS = ("decodeloops", "syncloops", "graphloops", "emitloops", "evtwrite", "evtread")


def switched_off() -> bool:
    """True where the environment asks for the numpy twins everywhere."""
    return bool(os.environ.get(OFF_VARIABLE))


@functools.cache
def _built(name: str) -> ModuleType | None:
    """The compiled helper ``name`` imported once, or None where it is not built."""
    try:
        return importlib.import_module(f"{__name__}._{name}")
    except ImportError:  # built without a C compiler: its numpy twin does the same
        return None


def helper(name: str) -> ModuleType | None:
    """The compiled helper ``name`` (one of ``HELPERS``) to call now, or None: not built, or
    switched off (``OFF_VARIABLE``); the caller then takes its numpy twin."""
    if name not in HELPERS:
        raise ValueError(f"no compiled helper {name!r} (there are {', '.join(HELPERS)})")
    if switched_off():
        return None
    return _built(name)
