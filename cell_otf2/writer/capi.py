"""The OTF2 library's C side as the writer uses it: the event writer's C functions as ctypes
objects fetched once per process (``CApi``, ``c_api``), the compiled per-event loop
(``_evtwrite``) bound to the same functions where ``native.helper`` gives it, the library's
error reports collected instead of printed (``LibraryErrors``, ``library_errors``). It writes
nothing itself and knows nothing of archives or event tables; why it calls C this way is in
docs/performance.md.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any

import _otf2
import numpy as np

from ..errors import OutputError
from ..model import (
    ATTR_DMA_TAG,
    ATTR_EA,
    ATTR_LIST_ELEMENTS,
    ATTR_LS_ADDRESS,
    ATTR_MFC_OPCODE,
    ATTR_PHYSICAL_SPU,
    EVENT_DTYPE,
    Ev,
)
from ..native import helper
from .otf2_internals import c_function

if TYPE_CHECKING:  # ctypes documents it as ctypes._CFuncPtr; typeshed declares it here
    from _ctypes import CFuncPtr

_log = logging.getLogger(__name__)

#: C signatures of the event writer calls, after (writer, attribute list, time): "I" uint32_t,
#: "B" uint8_t, "Q" uint64_t, "q" int64_t, "p" pointer. Used to bind nothing and check
#: everything: see CApi
_SIGNATURES = {
    "OTF2_EvtWriter_Enter": "I",  # region
    "OTF2_EvtWriter_Leave": "I",
    "OTF2_EvtWriter_MpiSend": "IIIQ",  # receiver, comm, tag, length
    "OTF2_EvtWriter_MpiRecv": "IIIQ",  # sender, comm, tag, length
    "OTF2_EvtWriter_MpiIsend": "IIIQQ",  # ... request id
    "OTF2_EvtWriter_MpiIrecv": "IIIQQ",
    "OTF2_EvtWriter_MpiIsendComplete": "Q",
    "OTF2_EvtWriter_MpiIrecvRequest": "Q",
    "OTF2_EvtWriter_MpiCollectiveBegin": "",
    "OTF2_EvtWriter_MpiCollectiveEnd": "BIIQQ",  # op, comm, root, sent, received
    "OTF2_EvtWriter_RmaGet": "IIQQ",  # window, remote, bytes, matching id
    "OTF2_EvtWriter_RmaPut": "IIQQ",
    "OTF2_EvtWriter_RmaOpCompleteBlocking": "IQ",  # window, matching id
    "OTF2_EvtWriter_Metric": "IBpp",  # metric, number of values, type ids, values
    "OTF2_EvtWriter_RmaWinCreate": "I",  # window
    "OTF2_EvtWriter_RmaWinDestroy": "I",
    "OTF2_EvtWriter_ProgramBegin": "IIp",  # program name (string ref), arguments, their refs
    "OTF2_EvtWriter_ProgramEnd": "q",  # exit status (int64_t)
}


class CApi:
    """The event writer's C functions as ctypes function objects, fetched once.

    The hot loop is what a conversion spends most of its time in, and most of a ctypes call's
    cost is converting its arguments. So the functions are loaded through ``ctypes.PyDLL`` (a
    call keeps the GIL instead of releasing and re-acquiring it around a C function that runs
    for tens of nanoseconds; the OTF2 library calls back into Python only for its flush
    callback, which takes the GIL it already has) and are called *without* ``argtypes``, with
    arguments that need no conversion object: pointers and uint64_t values as ready ``c_void_p``
    / ``c_uint64`` objects (times are made in C by ``map(c_uint64, ...)`` as the calls consume
    them), uint32_t and uint8_t values as Python ints (ctypes passes an int as a C int, which
    has the bit pattern of any value below 2^32; ``check_events`` refuses larger ones). That
    is about twice as fast per call as ``argtypes`` converting every argument.
    ``_SIGNATURES`` records each function's parameters.
    """

    def __init__(self) -> None:
        def fetch(name: str) -> CFuncPtr:
            fn = c_function(name, keep_gil=True)  # a function object of our own
            fn.restype = ctypes.c_int
            return fn

        self.enter = fetch("OTF2_EvtWriter_Enter")
        self.leave = fetch("OTF2_EvtWriter_Leave")
        self.mpi_send = fetch("OTF2_EvtWriter_MpiSend")
        self.mpi_recv = fetch("OTF2_EvtWriter_MpiRecv")
        self.mpi_isend = fetch("OTF2_EvtWriter_MpiIsend")
        self.mpi_irecv = fetch("OTF2_EvtWriter_MpiIrecv")
        self.mpi_isend_complete = fetch("OTF2_EvtWriter_MpiIsendComplete")
        self.mpi_irecv_request = fetch("OTF2_EvtWriter_MpiIrecvRequest")
        self.mpi_coll_begin = fetch("OTF2_EvtWriter_MpiCollectiveBegin")
        self.mpi_coll_end = fetch("OTF2_EvtWriter_MpiCollectiveEnd")
        self.rma_get = fetch("OTF2_EvtWriter_RmaGet")
        self.rma_put = fetch("OTF2_EvtWriter_RmaPut")
        self.rma_complete = fetch("OTF2_EvtWriter_RmaOpCompleteBlocking")
        self.metric = fetch("OTF2_EvtWriter_Metric")
        self.attr_add_u64 = fetch("OTF2_AttributeList_AddUint64")  # list, attribute (I), Q
        #: Ev -> its C function for the kinds called as f(writer, None, time, ref)
        self.region_fns = np.empty(max(Ev) + 1, dtype=object)
        self.region_fns[Ev.ENTER] = self.enter
        self.region_fns[Ev.LEAVE] = self.leave
        #: called like Enter and Leave: f(writer, attribute list, time, window)
        self.rma_win_create = fetch("OTF2_EvtWriter_RmaWinCreate")
        self.rma_win_destroy = fetch("OTF2_EvtWriter_RmaWinDestroy")
        self.win_fns = {Ev.RMA_WIN_CREATE: self.rma_win_create,
                        Ev.RMA_WIN_DESTROY: self.rma_win_destroy}
        #: f(writer, attribute list, time, program name string ref, 0 arguments, NULL)
        self.program_begin = fetch("OTF2_EvtWriter_ProgramBegin")
        #: f(writer, attribute list, time, exit status)
        self.program_end = fetch("OTF2_EvtWriter_ProgramEnd")
        self.metric_types = (ctypes.c_uint8 * 1)(_otf2.TYPE_UINT64.value)  # OTF2_Type[1]
        self.metric_types_at = ctypes.c_void_p(ctypes.addressof(self.metric_types))
        #: the C loop (``_evtwrite``) bound to the same functions, once ``use_compiled`` found
        #: it there; else None
        self.compiled_loop: ModuleType | None = None


#: ``_evtwrite.bind``'s function table, in its order
_C_FUNCTIONS = ("enter", "leave", "mpi_send", "mpi_recv", "mpi_isend", "mpi_irecv",
                "mpi_isend_complete", "mpi_irecv_request", "mpi_coll_begin", "mpi_coll_end",
                "rma_get", "rma_put", "rma_complete", "metric", "attr_add_u64",
                "rma_win_create", "rma_win_destroy", "program_begin", "program_end")
#: the EVENT_DTYPE columns the C loop reads, with the C type it reads them as
_C_COLUMNS = {"loc": "<u4", "type": "u1", "ref": "<u4", "time": "<i8",
              **{f"p{k}": "<u8" for k in range(1, 7)}}


def _bind_compiled(api: CApi, evtwrite: ModuleType) -> bool:
    """Hand ``evtwrite`` (the compiled helper) the addresses of ``api``'s C functions, the
    row layout of ``EVENT_DTYPE``, the DMA attribute refs and OTF2's type id of uint64_t.
    False (the ctypes path) if a column the C loop reads changed its type."""
    fields = EVENT_DTYPE.fields
    if fields is None or any(name not in fields or fields[name][0] != np.dtype(kind)
           for name, kind in _C_COLUMNS.items()):
        return False
    evtwrite.bind(
        tuple(address(getattr(api, name)) for name in _C_FUNCTIONS),
        (EVENT_DTYPE.itemsize, *(fields[name][1] for name in _C_COLUMNS)),
        (ATTR_DMA_TAG, ATTR_MFC_OPCODE, ATTR_LIST_ELEMENTS, ATTR_EA, ATTR_LS_ADDRESS,
         ATTR_PHYSICAL_SPU),
        _otf2.TYPE_UINT64.value,
    )
    return True


def compiled_callbacks() -> tuple[int, int] | None:
    """Addresses of the compiled helper's ``OTF2_FlushCallbacks`` (every buffer flushed, no
    GIL taken) and ``OTF2_LockingCallbacks`` (pthread mutexes); None where ``native.helper``
    does not give ``_evtwrite``."""
    evtwrite = helper("evtwrite")
    if evtwrite is None:
        return None
    return evtwrite.flush_callbacks(), evtwrite.locking_callbacks()


def use_compiled(api: CApi) -> bool:
    """Write (and check) through the compiled loop: ``native.helper`` gives it, and it is
    bound to ``api``'s functions (on first use; the ctypes path where a column it reads
    changed its type)."""
    evtwrite = helper("evtwrite")
    if evtwrite is None:
        return False
    if api.compiled_loop is None and _bind_compiled(api, evtwrite):
        api.compiled_loop = evtwrite
    return api.compiled_loop is not None


#: OTF2_ErrorCallback: (userData, file, line, function, errorCode, msgFormatString, va_list)
_ERROR_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                                   ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int,
                                   ctypes.c_char_p, ctypes.c_void_p)
#: OTF2 error codes that mean the device is full (ENOSPC, EDQUOT)
_NO_SPACE_CODES = frozenset({_otf2.ERROR_ENOSPC.value, _otf2.ERROR_EDQUOT.value})
#: OTF2 codes below this are warnings and debug notes, not errors
_FIRST_ERROR_CODE = 1


class LibraryErrors:
    """The OTF2 library's error reports, collected instead of printed on stderr (its default
    handler prints one ``[OTF2] src/...`` line per layer of a failure), so a failure becomes
    one message of ours. Registered once per process (``library_errors``)."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.messages: list[str] = []
        self._callback = _ERROR_CALLBACK(self._on_error)  # referenced as long as registered
        register = c_function("OTF2_Error_RegisterCallback")
        register.argtypes = [_ERROR_CALLBACK, ctypes.c_void_p]
        register.restype = ctypes.c_void_p
        register(self._callback, None)

    def _on_error(self, _user: int | None, _file: bytes | None, _line: int,
                  function: bytes | None, code: int, message: bytes | None,
                  _va: int | None) -> int:
        text = (message or b"").decode("utf-8", "replace")
        _log.debug("the OTF2 library reports error code %s in %s: %s", code,
                   (function or b"?").decode("utf-8", "replace"), text)
        if len(self.codes) < 64:
            self.codes.append(int(code))
            self.messages.append(text)
        return code

    def clear(self) -> None:
        self.codes.clear()
        self.messages.clear()

    @property
    def failed(self) -> bool:
        """Did the library report an error (not a warning) since ``clear``?"""
        return any(c >= _FIRST_ERROR_CODE for c in self.codes)

    @property
    def no_space(self) -> bool:
        return any(c in _NO_SPACE_CODES for c in self.codes)

    def failure(self, where: str) -> OutputError:
        """One ``OutputError`` for what the library reported while writing ``where``."""
        if self.no_space:
            return OutputError(f"no space left on the device writing {where}", no_space=True)
        errors = [(c, m) for c, m in zip(self.codes, self.messages, strict=True)
                  if c >= _FIRST_ERROR_CODE]
        if not errors:
            return OutputError(f"{where}: the OTF2 library failed")
        code, message = errors[0]
        name = _otf2.Error_GetName(_otf2.ErrorCode(code))
        return OutputError(f"{where}: the OTF2 library failed: {name}"
                           + (f": {message}" if message and "%" not in message else ""))


@functools.cache
def library_errors() -> LibraryErrors:
    """The process's ``LibraryErrors`` (registered with the library on first use)."""
    return LibraryErrors()


_API: CApi | None = None


def c_api() -> CApi:
    """The process's ``CApi`` (fetched on first use)."""
    global _API
    if _API is None:
        _API = CApi()
    return _API


def address(pointer: Any) -> int:
    """The address a ctypes pointer, C function or handle holds, 0 for NULL (``Any``: the
    bindings' handles are untyped)."""
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0
