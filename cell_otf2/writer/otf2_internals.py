"""Every use the project makes of the OTF2 Python bindings beyond their public functions, in
one place, each with the reason no public way serves: the OTF2 C library the bindings load
(the writer's event calls, its error callback and its compiled callbacks, and the report
reader's compiled callbacks, all call its C functions directly through ctypes) and the
reference number of a definition read back by ``otf2.reader`` (the report reader). The writer
and ``report/load.py`` use these functions, never the bindings' internals themselves;
tests/test_otf2_internals.py fails, naming the assumption, when a release of the bindings
changes one. Importing this module loads neither the bindings nor the library. Nothing here
opens, reads or writes an archive.
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # ctypes documents it as ctypes._CFuncPtr; typeshed declares it here
    from _ctypes import CFuncPtr


def library_path() -> str:
    """The file of the OTF2 C library the bindings load (their bundled copy). Imports the
    bindings (which load the library) on first use, not with this module."""
    import _otf2.Config

    # The bindings load the library with ctypes and expose the handle only as
    # ``_otf2.conf.lib``, whose file name ctypes keeps in a private attribute. Their
    # configuration module's ``lib_path`` is the function that handle was loaded from: loading
    # the same file again gives the same library (dlopen counts references), so the C
    # functions fetched here are the ones the bindings call, on the same archives.
    return str(_otf2.Config.lib_path())


@functools.cache
def c_library(keep_gil: bool) -> ctypes.CDLL:
    """The OTF2 C library through a ctypes handle of our own: ``keep_gil`` (``PyDLL``) for
    calls that keep the GIL (the writer's hot loop: tens of nanoseconds per call, cheaper
    than releasing and taking it again), else calls that release it, as the bindings' do."""
    return (ctypes.PyDLL if keep_gil else ctypes.CDLL)(library_path())


def c_function(name: str, *, keep_gil: bool = False) -> CFuncPtr:
    """A new ctypes function object for the library's C function ``name``: item access, so
    setting its ``argtypes`` or ``restype`` changes no other caller's (the bindings set theirs
    anew on each call of their attribute-access function objects)."""
    return c_library(keep_gil)[name]


def function_address(name: str) -> int:
    """The address of the library's C function ``name`` (for the compiled helpers)."""
    return ctypes.cast(c_function(name), ctypes.c_void_p).value or 0


def definition_ref(definition: Any) -> int:
    """The reference number (OTF2 ``*Ref``) of a definition ``otf2.reader`` read: what the
    event callbacks give as location, region, communicator or window."""
    # otf2's definition objects keep their reference in ``_ref`` and offer no public accessor;
    # its own reader and writer use ``_ref`` the same way. Refs needed to map the events'
    # numbers onto the definitions (a registry's iteration order is not a public promise).
    # ``definition`` is Any: otf2 ships no types.
    return int(definition._ref)
