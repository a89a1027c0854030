"""Write one OTF2 archive from ``ArchiveDefs`` and an ``EVENT_DTYPE`` table (docs/archive.md).

The only module of the project that imports the OTF2 bindings for writing. It goes below the
high-level ``otf2.Writer`` and talks to the C library through ``_otf2`` directly:

- **Definitions** are written with explicit refs, so every ref is the list index in
  ``ArchiveDefs`` (location ref = index in ``defs.locations``, location-group ref = index in
  ``defs.location_groups``, region ref = index, ...). Nothing is merged by value, paradigms are
  written once each, and the clock properties are exactly ``defs.clock``
  (``realtime_timestamp = ClockProps.realtime_ns``, never the time the conversion ran).
- **Events** are written by a C loop (``_evtwrite``, built at install time from
  ``_evtwrite.c``) over each location's rows, calling the same C entry points as below, in the
  same order, with the same arguments (byte-identical archives). Where it is not built (no C
  compiler at install) they go through the C entry points (``OTF2_EvtWriter_Enter`` ...) as
  ctypes function objects fetched once per process (``_CApi``: through ``PyDLL``, called
  without ``argtypes`` with ready argument objects, about twice as fast per call as
  ``argtypes`` conversion). Each
  location is written in one pass over its slice of the table, its columns converted to Python
  lists once; the events are one ``map(operator.call, ...)`` over C functions (Enter/Leave)
  and small per-kind functions (the rest), so there is no Python bytecode per Enter/Leave
  event and one C call per event (RMA events add five attribute calls). The table may come in
  pieces of whole locations (``emit.EventChunks``), so it never has to exist at once.
  ``write_ceiling`` / ``write_mix_ceiling`` time the same calls with nothing else to do.

Choices where the contract leaves room (also in the final report of issue 3):

- ``Paradigm.CELL`` (SPE programs, mailboxes, signals, DMA) is written as OTF2 paradigm
  ``USER``, which ``Paradigm.USER`` shares; its Paradigm definition is named "User", class
  PROCESS. OTF2 has no Cell paradigm; ``UNKNOWN`` is meant for "not known", and the accelerator
  paradigms (CUDA, OpenCL, ...) would claim an API that was not used. USER is what a
  hand-instrumented user-level library gets. Each OTF2 paradigm is defined once.
- ``RegionRole.USER`` is written as OTF2 role ``CODE`` (OTF2 has no user role).
- Communicators: per OTF2 paradigm one ``COMM_LOCATIONS`` group holding every location that is
  a member of a communicator of that paradigm (sorted by location ref), then per communicator
  one ``COMM_GROUP`` whose members are indexes into that list in rank order, as the OTF2
  standard requires. Group refs: the COMM_LOCATIONS groups first, then the COMM_GROUPs in
  communicator order. (ViTE 1.2 prints "New comm group ... Not yet implemented" and "cannot
  find rank" for these but draws every message; a Comm pointing at a COMM_LOCATIONS group
  would silence it and fail ``otf2-print -Werror``.)
- Metrics: metric i is written as metric member i and metric class i (one member each,
  ``ABSOLUTE_POINT``, ``ASYNCHRONOUS``, recorder kind CPU, unsigned 64-bit values).
- Location properties are written as OTF2 STRING, DOUBLE or UINT64 after their value's
  Python type (str, float, int).
- Every location gets an event file, even one with no events.

Checked before anything is written (``WriterInputError``; for a table in pieces, before each
piece is written): the dtype, the locations are sorted and exist, time is non-negative and
never decreases within a location (the C library would fail with error 78 halfway through),
every type is an ``Ev``, every ref exists and values passed as 32- or 8-bit C parameters fit
them; in the
definitions, every parent, group, member and location a definition names exists and location
names are unique. Not checked: the
semantics of the events (matching sends and receives, balanced Enter/Leave, ...) and whether
``defs.clock`` agrees with the event times; those belong to the stages that build the table.
The writer never sorts and never changes a timestamp.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import operator
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any

import _otf2
import numpy as np

from .errors import OutputError
from .model import (
    ATTR_DMA_TAG,
    ATTR_EA,
    ATTR_LIST_ELEMENTS,
    ATTR_LS_ADDRESS,
    ATTR_MFC_OPCODE,
    ATTR_PHYSICAL_SPU,
    EVENT_DTYPE,
    ArchiveDefs,
    AttrType,
    Ev,
    GroupType,
    LocationType,
    Paradigm,
    RegionRole,
    SystemNodeDomain,
)

try:  # the per-event loop in C, built at install time when a C compiler is there (setup.py)
    from . import _evtwrite
except ImportError:
    _evtwrite = None

#: progress is reported after every this many events
PROGRESS_EVENTS = 100_000

UNDEFINED_UINT32 = 0xFFFFFFFF

_ROLE = {
    RegionRole.FUNCTION: _otf2.REGION_ROLE_FUNCTION,
    RegionRole.WRAPPER: _otf2.REGION_ROLE_WRAPPER,
    RegionRole.RMA: _otf2.REGION_ROLE_RMA,
    RegionRole.POINT2POINT: _otf2.REGION_ROLE_POINT2POINT,
    RegionRole.COLL_ONE2ALL: _otf2.REGION_ROLE_COLL_ONE2ALL,
    RegionRole.COLL_ALL2ONE: _otf2.REGION_ROLE_COLL_ALL2ONE,
    RegionRole.COLL_ALL2ALL: _otf2.REGION_ROLE_COLL_ALL2ALL,
    RegionRole.COLL_OTHER: _otf2.REGION_ROLE_COLL_OTHER,
    RegionRole.BARRIER: _otf2.REGION_ROLE_BARRIER,
    RegionRole.USER: _otf2.REGION_ROLE_CODE,  # OTF2 has no "user" role; CODE is a code block
    RegionRole.DATA_TRANSFER: _otf2.REGION_ROLE_DATA_TRANSFER,
}

#: model paradigm -> (OTF2 paradigm, name written in its Paradigm definition, class)
_PARADIGM = {
    Paradigm.USER: (_otf2.PARADIGM_USER, "User", _otf2.PARADIGM_CLASS_PROCESS),
    Paradigm.MPI: (_otf2.PARADIGM_MPI, "MPI", _otf2.PARADIGM_CLASS_PROCESS),
    Paradigm.CELL: (_otf2.PARADIGM_USER, "User", _otf2.PARADIGM_CLASS_PROCESS),
}

_DOMAIN = {
    SystemNodeDomain.MACHINE: _otf2.SYSTEM_TREE_DOMAIN_MACHINE,
    SystemNodeDomain.SHARED_MEMORY: _otf2.SYSTEM_TREE_DOMAIN_SHARED_MEMORY,
    SystemNodeDomain.ACCELERATOR_DEVICE: _otf2.SYSTEM_TREE_DOMAIN_ACCELERATOR_DEVICE,
}

_GROUP_TYPE = {
    GroupType.PROCESS: _otf2.LOCATION_GROUP_TYPE_PROCESS,
    GroupType.ACCELERATOR: _otf2.LOCATION_GROUP_TYPE_ACCELERATOR,
}

_LOCATION_TYPE = {
    LocationType.CPU_THREAD: _otf2.LOCATION_TYPE_CPU_THREAD,
    LocationType.ACCELERATOR_STREAM: _otf2.LOCATION_TYPE_ACCELERATOR_STREAM,
}

_ATTR_TYPE = {AttrType.UINT64: _otf2.TYPE_UINT64, AttrType.STRING: _otf2.TYPE_STRING}

#: which definition list each event type's ``ref`` points into
_REF_KIND = {
    Ev.ENTER: "regions",
    Ev.LEAVE: "regions",
    Ev.ENTER_OFF_SPU: "regions",
    Ev.MPI_SEND: "communicators",
    Ev.MPI_RECV: "communicators",
    Ev.MPI_ISEND: "communicators",
    Ev.MPI_IRECV: "communicators",
    Ev.MPI_COLL_END: "communicators",
    Ev.RMA_GET: "rma_windows",
    Ev.RMA_PUT: "rma_windows",
    Ev.RMA_OP_COMPLETE_BLOCKING: "rma_windows",
    Ev.RMA_WIN_CREATE: "rma_windows",
    Ev.RMA_WIN_DESTROY: "rma_windows",
    Ev.METRIC: "metrics",
}


class WriterInputError(ValueError):
    """The definitions or the event table break the writer's contract (an earlier stage's bug)."""


@dataclass
class WriteStats:
    """What ``write_archive`` wrote."""

    #: int64, indexed by location ref (parallel writing: of every process)
    events_per_location: np.ndarray
    events_per_type: dict[Ev, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def n_events(self) -> int:
        return int(self.events_per_location.sum())

    @property
    def events_per_second(self) -> float:
        return self.n_events / self.seconds if self.seconds > 0 else 0.0


# --------------------------------------------------------------------------------------------
# C entry points, bound once
# --------------------------------------------------------------------------------------------


#: C signatures of the event writer calls, after (writer, attribute list, time): "I" uint32_t,
#: "B" uint8_t, "Q" uint64_t, "p" pointer. Used to bind nothing and check everything: see _CApi
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
}


class _CApi:
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
        lib = ctypes.PyDLL(_otf2.conf.lib._name)  # the library the bindings loaded

        def fetch(name: str) -> ctypes._CFuncPtr:
            fn = lib[name]  # item access returns a private function object, not the shared one
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
        self.metric_types = (ctypes.c_uint8 * 1)(_otf2.TYPE_UINT64.value)  # OTF2_Type[1]
        self.metric_types_at = ctypes.c_void_p(ctypes.addressof(self.metric_types))
        #: the C loop (``_evtwrite``) is bound to the same functions, if built
        self.compiled = _evtwrite is not None and _bind_compiled(self)


#: ``_evtwrite.bind``'s function table, in its order
_C_FUNCTIONS = ("enter", "leave", "mpi_send", "mpi_recv", "mpi_isend", "mpi_irecv",
                "mpi_isend_complete", "mpi_irecv_request", "mpi_coll_begin", "mpi_coll_end",
                "rma_get", "rma_put", "rma_complete", "metric", "attr_add_u64",
                "rma_win_create", "rma_win_destroy")
#: the EVENT_DTYPE columns the C loop reads, with the C type it reads them as
_C_COLUMNS = {"loc": "<u4", "type": "u1", "ref": "<u4", "time": "<i8",
              **{f"p{k}": "<u8" for k in range(1, 7)}}


def _bind_compiled(api: _CApi) -> bool:
    """Hand ``_evtwrite`` the addresses of ``api``'s C functions, the row layout of
    ``EVENT_DTYPE``, the DMA attribute refs and OTF2's type id of uint64_t. False (the ctypes
    path) if a column the C loop reads changed its type."""
    fields = EVENT_DTYPE.fields
    if any(name not in fields or fields[name][0] != np.dtype(kind)
           for name, kind in _C_COLUMNS.items()):
        return False
    _evtwrite.bind(
        tuple(_address(getattr(api, name)) for name in _C_FUNCTIONS),
        (EVENT_DTYPE.itemsize, *(fields[name][1] for name in _C_COLUMNS)),
        (ATTR_DMA_TAG, ATTR_MFC_OPCODE, ATTR_LIST_ELEMENTS, ATTR_EA, ATTR_LS_ADDRESS,
         ATTR_PHYSICAL_SPU),
        _otf2.TYPE_UINT64.value,
    )
    return True


#: set (to anything non-empty) to write through the ctypes path even where ``_evtwrite`` is
#: built: for the test that compares the two paths' archives and for bench/throughput.py only
PYTHON_PATH_VARIABLE = "CELL2OTF2_PYTHON_WRITER"


def _use_compiled(api: _CApi) -> bool:
    return api.compiled and not os.environ.get(PYTHON_PATH_VARIABLE)


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
        register = ctypes.CDLL(_otf2.conf.lib._name).OTF2_Error_RegisterCallback
        register.argtypes = [_ERROR_CALLBACK, ctypes.c_void_p]
        register.restype = ctypes.c_void_p
        register(self._callback, None)

    def _on_error(self, _user, _file, _line, _function, code, message, _va) -> int:
        if len(self.codes) < 64:
            self.codes.append(int(code))
            self.messages.append((message or b"").decode("utf-8", "replace"))
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
            exc = OutputError(f"no space left on the device writing {where}")
            exc.no_space = True
            return exc
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


_API: _CApi | None = None


def _api() -> _CApi:
    global _API
    if _API is None:
        _API = _CApi()
    return _API


#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: blocks below this come from the heap, not from mmap: above OTF2's 1 MiB event chunks
HEAP_BLOCKS_BELOW = 4 << 20
#: free memory at the top of the heap kept instead of given back to the system
HEAP_KEPT = 64 << 20
#: False: leave glibc's malloc as it is (bench/throughput.py measures both)
TUNE_MALLOC = True
_MALLOC_TUNED = [False]


def _tune_malloc() -> None:
    """Once per process: tell glibc to serve OTF2's 1 MiB event chunks from the heap and keep
    them when freed. A location's event writer takes chunks as its events fill them and frees
    them when it is closed; by default glibc hands such blocks back to the system (munmap, or
    trimming the top of the heap), so the next location faults the same memory in afresh (page
    faults cost about 2 ms per MiB on this VM). On the 7.8 M events of the 6 M-record run:
    minor page faults 72.7 k -> 34.2 k, write_archive 0.91 -> 0.71 CPU s (medians of 9
    alternating runs). Not glibc (no ``mallopt``): nothing."""
    if _MALLOC_TUNED[0] or not TUNE_MALLOC:
        return
    _MALLOC_TUNED[0] = True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCKS_BELOW)
    mallopt(_M_TRIM_THRESHOLD, HEAP_KEPT)


def _address(pointer: object) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


# --------------------------------------------------------------------------------------------
# Checks of the event table
# --------------------------------------------------------------------------------------------


def check_events(defs: ArchiveDefs, events: np.ndarray) -> None:
    if not isinstance(events, np.ndarray) or events.dtype != EVENT_DTYPE:
        raise WriterInputError(f"events must be an EVENT_DTYPE array, got {type(events).__name__}"
                              f" of dtype {getattr(events, 'dtype', None)}")
    if events.size == 0:
        return
    if _compiled_check(defs, events):
        return
    loc = events["loc"]
    n_loc = len(defs.locations)
    if int(loc.max()) >= n_loc:
        i = int(np.argmax(loc >= n_loc))
        raise WriterInputError(f"event {i}: location ref {int(loc[i])} does not exist "
                              f"({n_loc} locations defined)")
    down = np.flatnonzero(loc[1:] < loc[:-1])
    if down.size:
        i = int(down[0]) + 1
        raise WriterInputError(f"event {i}: events are not sorted by location "
                              f"(location {int(loc[i])} after {int(loc[i - 1])})")
    t = events["time"]
    if int(t.min()) < 0:
        i = int(np.argmax(t < 0))
        raise WriterInputError(f"event {i}: negative timestamp {int(t[i])} on location "
                              f"'{defs.locations[int(loc[i])].name}'")
    back = np.flatnonzero((t[1:] < t[:-1]) & (loc[1:] == loc[:-1]))
    if back.size:
        i = int(back[0]) + 1
        raise WriterInputError(
            f"event {i}: time goes backwards on location {int(loc[i])} "
            f"'{defs.locations[int(loc[i])].name}': {int(t[i])} after {int(t[i - 1])} "
            f"({back.size} such events; the table must be sorted by (loc, time, seq))"
        )
    types = events["type"]
    rows = _RowsByType(types)
    unknown = [k for k in rows.present if k not in _EV_VALUES]
    if unknown:
        i = int(np.argmin(np.isin(types, np.array(sorted(_EV_VALUES), dtype=types.dtype))))
        raise WriterInputError(f"event {i}: unknown event type {int(types[i])}")
    for kind, list_name in _REF_KIND.items():
        sel = rows.of(kind)
        if not sel.size:
            continue
        n_defs = len(getattr(defs, list_name))
        refs = events["ref"][sel]
        if int(refs.max()) >= n_defs:
            i = int(sel[int(np.argmax(refs >= n_defs))])
            raise WriterInputError(f"event {i} ({kind.name}): ref {int(events['ref'][i])} "
                                  f"is not one of the {n_defs} {list_name}")
    _check_ranks(defs, events, rows)
    _check_widths(events, rows)


_EV_VALUES = frozenset(int(e) for e in Ev)


def _compiled_check(defs: ArchiveDefs, events: np.ndarray) -> bool:
    """True if ``_evtwrite.check`` passes the table in one pass over its rows (the same rules
    as the numpy checks below, which then only run to name what a failing table breaks)."""
    api = _api()
    if not _use_compiled(api):
        return False
    comm_size = np.array([len(c.members) for c in defs.communicators], dtype=np.int64)
    win_size = np.array([comm_size[w.comm] if 0 <= w.comm < comm_size.size else 0
                         for w in defs.rma_windows], dtype=np.int64)
    return _evtwrite.check(np.ascontiguousarray(events), len(defs.locations), len(defs.regions),
                           comm_size.size, win_size.size, len(defs.metrics),
                           comm_size.tobytes(), win_size.tobytes()) < 0


class _RowsByType:
    """Row indexes of a table grouped by event type (one stable radix sort of the 8-bit
    types): ``of(kind, ...)`` are the rows of those kinds, ascending."""

    def __init__(self, types: np.ndarray) -> None:
        self.order = np.argsort(types, kind="stable")
        self.bounds = np.zeros(257, dtype=np.int64)
        np.cumsum(np.bincount(types, minlength=256), out=self.bounds[1:])
        self.present = [k for k in range(256) if self.bounds[k + 1] > self.bounds[k]]

    def of(self, *kinds: int) -> np.ndarray:
        parts = [self.order[self.bounds[k]:self.bounds[k + 1]] for k in kinds]
        return parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))


#: (kinds, column, limit): parameters the C functions take as uint32_t / uint8_t
_NARROW = (
    ((Ev.MPI_SEND, Ev.MPI_RECV, Ev.MPI_ISEND, Ev.MPI_IRECV), "p1", 1 << 32),
    ((Ev.MPI_SEND, Ev.MPI_RECV, Ev.MPI_ISEND, Ev.MPI_IRECV, Ev.MPI_COLL_END), "p2", 1 << 32),
    ((Ev.RMA_GET, Ev.RMA_PUT), "p1", 1 << 32),
    ((Ev.MPI_COLL_END,), "p1", 1 << 8),
)


def _check_widths(events: np.ndarray, rows: _RowsByType) -> None:
    """Values passed as uint32_t or uint8_t must fit (ctypes would cut them silently)."""
    types = events["type"]
    for kinds, column, limit in _NARROW:
        sel = rows.of(*kinds)
        if not sel.size:
            continue
        big = events[column][sel] >= np.uint64(limit)
        if big.any():
            i = int(sel[int(np.argmax(big))])
            raise WriterInputError(
                f"event {i} ({Ev(int(types[i])).name}): {column} = {int(events[column][i])} does "
                f"not fit its {'uint8_t' if limit == 256 else 'uint32_t'} parameter")


def _check_ranks(defs: ArchiveDefs, events: np.ndarray, rows: _RowsByType) -> None:
    """Peer ranks (p1) and collective roots (p2) must be ranks of the event's communicator."""
    comm_size = np.array([len(c.members) for c in defs.communicators] or [0], dtype=np.int64)
    win_size = np.array([comm_size[w.comm] for w in defs.rma_windows] or [0], dtype=np.int64)
    types, refs = events["type"], events["ref"]
    checks = [
        ((Ev.MPI_SEND, Ev.MPI_RECV, Ev.MPI_ISEND, Ev.MPI_IRECV), "p1", comm_size, "peer rank"),
        ((Ev.RMA_GET, Ev.RMA_PUT), "p1", win_size, "remote rank"),
        ((Ev.MPI_COLL_END,), "p2", comm_size, "root rank"),
    ]
    for kinds, column, size, what in checks:
        sel = rows.of(*kinds)
        if not sel.size:
            continue
        rank = events[column][sel]
        bad = rank >= size[refs[sel].astype(np.int64)].astype(np.uint64)
        if column == "p2":
            bad &= rank != UNDEFINED_UINT32
        if bad.any():
            i = int(sel[int(np.argmax(bad))])
            raise WriterInputError(
                f"event {i} ({Ev(int(types[i])).name}): {what} {int(events[column][i])} is not "
                f"a rank of its communicator (size {int(size[refs[i]])})"
            )


# --------------------------------------------------------------------------------------------
# The archive
# --------------------------------------------------------------------------------------------


def _pre_flush(*_args: object) -> object:
    return _otf2.FLUSH


class _Archive:
    """An OTF2 archive open for writing, closed exactly once."""

    def __init__(self, archive_dir: Path, archive_name: str, collectives=None) -> None:
        """``collectives``: an ``otf2_mpi.MpiCollectives`` for parallel writing (every process
        of its communicator opens the same archive; the master checks the entries, and all
        agree on the opening before OTF2's first collective step, setting the callbacks),
        None for one writing process."""
        archive_dir = Path(archive_dir)
        self.collectives = collectives
        self.handle = None
        where = f"{archive_dir / archive_name}.otf2: cannot create the archive"
        failure: OutputError | None = None
        try:
            for entry in (archive_dir / f"{archive_name}.otf2", archive_dir / archive_name):
                if entry.exists() and (collectives is None or collectives.is_master):
                    raise OutputError(f"{entry}: already exists (the OTF2 library will not "
                                      f"overwrite an archive)")
            archive_dir.mkdir(parents=True, exist_ok=True)
            # chunk sizes: 1 MiB per event buffer; 256 KiB (OTF2's smallest) per definition
            # buffer, which grows by chunks as needed: a 4 MiB chunk per location's (empty)
            # local definition writer cost 2-3 ms each to set up and tear down
            self.handle = _otf2.Archive_Open(
                str(archive_dir), archive_name, _otf2.FILEMODE_WRITE, 1024 * 1024,
                256 * 1024, _otf2.SUBSTRATE_POSIX, _otf2.COMPRESSION_NONE,
            )
            # the callbacks must stay referenced as long as the archive is open
            self._flush_callbacks = _otf2.FlushCallbacks(pre_flush=_pre_flush, post_flush=None)
            _otf2.Archive_SetFlushCallbacks(self.handle, self._flush_callbacks, None)
        except OutputError as exc:
            failure = exc
        except (_otf2.Error, OSError) as exc:
            failure = OutputError(f"{where}: {exc}")
            failure.__cause__ = exc
        if collectives is not None:
            # an archive opened here but failed elsewhere is left open: OTF2 aborts the process
            # when closing one without collective callbacks, and closing it serially would
            # write an anchor file into a directory being removed
            collectives.agree(failure)
        elif failure is not None:
            raise failure
        try:
            if collectives is None:
                _otf2.Archive_SetSerialCollectiveCallbacks(self.handle)
            else:
                collectives.install(self.handle)
            _otf2.Archive_OpenEvtFiles(self.handle)
            _otf2.Archive_OpenDefFiles(self.handle)
        except (_otf2.Error, OSError) as exc:
            raise OutputError(f"{where}: {exc}") from exc
        self._evt_files_open = True
        self._def_files_open = True

    def close_event_files(self) -> None:
        if self._evt_files_open:
            self._evt_files_open = False
            _otf2.Archive_CloseEvtFiles(self.handle)
        if self._def_files_open:
            self._def_files_open = False
            _otf2.Archive_CloseDefFiles(self.handle)

    def close(self) -> None:
        if self.handle is None:
            return
        try:
            self.close_event_files()
        finally:
            handle, self.handle = self.handle, None
            _otf2.Archive_Close(handle)

    def location_writer(self, loc: int) -> tuple[object, int]:
        """Open the event writer of one location; returns (handle, address for the C calls)."""
        # an empty local definition file per location, as the otf2 bindings write it: readers
        # then find every location's definitions where they look for them
        def_writer = _otf2.Archive_GetDefWriter(self.handle, loc)
        _otf2.Archive_CloseDefWriter(self.handle, def_writer)
        writer = _otf2.Archive_GetEvtWriter(self.handle, loc)
        if not writer:
            raise OutputError(f"OTF2 could not open the event writer of location {loc}")
        return writer, _address(writer)

    def close_location_writer(self, writer: object) -> None:
        _otf2.Archive_CloseEvtWriter(self.handle, writer)


def _write_location_events(api: _CApi, writer: int, attrs: int, rows: np.ndarray,
                            per_type: np.ndarray | None = None) -> None:
    """Write one location's rows, in order. The per-event hot loop of the converter.

    ``per_type`` (int64, indexed by Ev): in C (``_evtwrite.write``, the same calls in the same
    order, no Python call per event), adding the events of each type to ``per_type``.
    Otherwise through ctypes, as follows.
    Every event is one ``fn(writer, None, time, ref)`` call made by ``map`` in C (no Python
    bytecode per event; arguments as ``_CApi`` explains): ``fn`` is the C function itself for
    Enter and Leave (most events); for every other kind a small function of this chunk that
    takes that kind's further parameters from iterators over their columns (events of one
    kind are consumed in order) and makes the C call(s). The first non-zero return code stops
    the writing.
    """
    if per_type is not None:
        try:
            code = _evtwrite.write(writer, attrs, np.ascontiguousarray(rows), per_type)
        except LookupError as exc:  # check_events refuses unknown kinds before writing
            raise WriterInputError(f"event type {exc} has no writer") from None
        if code:
            raise library_errors().failure("the event files")
        return
    types = rows["type"]
    fns = api.region_fns[types]
    if types.size and int(types.max()) > Ev.LEAVE:
        _add_other_event_writers(api, ctypes.c_void_p(attrs), rows, fns)
    times = map(ctypes.c_uint64, rows["time"].tolist())
    if any(map(operator.call, fns.tolist(), repeat(ctypes.c_void_p(writer)), repeat(None), times,
               rows["ref"].tolist())):
        raise library_errors().failure("the event files")


#: shared ``c_uint64`` objects of the values 0 .. 4095 (made on first use)
_SMALL_U64: np.ndarray | None = None


def _u64_objects(values: np.ndarray) -> list[ctypes.c_uint64]:
    """``c_uint64`` objects of ``values`` that repeat (tags, opcodes, sizes, Local Store
    addresses): one shared object per distinct value, since ctypes passes an object as it is
    while making one per event costs about as much as the call's own argument handling."""
    global _SMALL_U64
    if values.size and int(values.max()) < 4096:
        if _SMALL_U64 is None:
            _SMALL_U64 = np.empty(4096, dtype=object)
            _SMALL_U64[:] = list(map(ctypes.c_uint64, range(4096)))
        return _SMALL_U64[values.astype(np.intp)].tolist()
    if values.size >= 64:
        distinct, inverse = np.unique(values, return_inverse=True)
        if 4 * distinct.size <= values.size:
            objects = np.empty(distinct.size, dtype=object)
            objects[:] = list(map(ctypes.c_uint64, distinct.tolist()))
            return objects[inverse].tolist()
    return list(map(ctypes.c_uint64, values.tolist()))


def _add_other_event_writers(api: _CApi, attrs: ctypes.c_void_p, rows: np.ndarray,
                             fns: np.ndarray) -> None:
    """Fill ``fns`` at the non-region events with functions (writer, _, time, ref) -> code."""
    by_type = _RowsByType(rows["type"])
    add = api.attr_add_u64

    def ints(values: np.ndarray) -> Callable[[], int]:  # uint32_t / uint8_t parameters
        return iter(values.tolist()).__next__

    def shared(values: np.ndarray) -> Callable[[], ctypes.c_uint64]:  # uint64_t, repeating
        return iter(_u64_objects(values)).__next__

    def longs(values: np.ndarray) -> Callable[[], ctypes.c_uint64]:  # uint64_t, distinct
        return map(ctypes.c_uint64, values.tolist()).__next__

    for kind in (k for k in by_type.present if k > Ev.LEAVE):
        sel = by_type.of(kind)

        def p(k: int, sel=sel) -> np.ndarray:
            return rows[f"p{k}"][sel]

        if kind in (Ev.RMA_WIN_CREATE, Ev.RMA_WIN_DESTROY):
            for i in sel.tolist():  # (item by item: numpy would read a ctypes function as a
                fns[i] = api.win_fns[kind]  # buffer; two events per location)
            continue
        if kind == Ev.ENTER_OFF_SPU:
            spu, enter = shared(p(1)), api.enter

            def fn(w, _, t, ref, spu=spu, enter=enter):
                return add(attrs, ATTR_PHYSICAL_SPU, spu()) | enter(w, attrs, t, ref)
        elif kind in (Ev.RMA_GET, Ev.RMA_PUT):
            packed = p(4)  # tag | opcode << 8 | list elements << 16 (model.Ev)
            tag, opcode = shared(packed & 0xFF), shared((packed >> 8) & 0xFF)
            elements = shared(packed >> 16)
            ea, ls = longs(p(5)), shared(p(6))
            remote, size, match = ints(p(1)), shared(p(2)), longs(p(3))
            rma = api.rma_get if kind == Ev.RMA_GET else api.rma_put

            # OTF2 empties the attribute list after every event written with it
            def fn(w, _, t, ref, tag=tag, opcode=opcode, elements=elements, ea=ea, ls=ls,
                   remote=remote, size=size, match=match, rma=rma):
                return (add(attrs, ATTR_DMA_TAG, tag())
                        | add(attrs, ATTR_MFC_OPCODE, opcode())
                        | add(attrs, ATTR_LIST_ELEMENTS, elements())
                        | add(attrs, ATTR_EA, ea())
                        | add(attrs, ATTR_LS_ADDRESS, ls())
                        | rma(w, attrs, t, ref, remote(), size(), match()))
        elif kind == Ev.METRIC:
            values = np.ascontiguousarray(p(1), dtype=np.uint64)
            # OTF2_MetricValue[1] of each event: its value's address in ``values``
            address = map(ctypes.c_void_p,
                          (values.ctypes.data + 8 * np.arange(values.size)).tolist()).__next__
            metric, types_at = api.metric, api.metric_types_at

            def fn(w, _, t, ref, address=address, metric=metric, values=values,
                   types_at=types_at):
                return metric(w, None, t, ref, 1, types_at, address())
        elif kind == Ev.RMA_OP_COMPLETE_BLOCKING:
            match, complete = longs(p(3)), api.rma_complete

            def fn(w, _, t, ref, match=match, complete=complete):
                return complete(w, None, t, ref, match())
        elif kind in (Ev.MPI_SEND, Ev.MPI_RECV):
            peer, tag, size = ints(p(1)), ints(p(2)), shared(p(3))
            call = api.mpi_send if kind == Ev.MPI_SEND else api.mpi_recv

            def fn(w, _, t, ref, peer=peer, tag=tag, size=size, call=call):
                return call(w, None, t, peer(), ref, tag(), size())
        elif kind in (Ev.MPI_ISEND, Ev.MPI_IRECV):
            peer, tag, size, request = ints(p(1)), ints(p(2)), shared(p(3)), longs(p(4))
            call = api.mpi_isend if kind == Ev.MPI_ISEND else api.mpi_irecv

            def fn(w, _, t, ref, peer=peer, tag=tag, size=size, request=request, call=call):
                return call(w, None, t, peer(), ref, tag(), size(), request())
        elif kind in (Ev.MPI_ISEND_COMPLETE, Ev.MPI_IRECV_REQUEST):
            request = longs(p(4))
            call = (api.mpi_isend_complete if kind == Ev.MPI_ISEND_COMPLETE
                    else api.mpi_irecv_request)

            def fn(w, _, t, ref, request=request, call=call):
                return call(w, None, t, request())
        elif kind == Ev.MPI_COLL_BEGIN:
            begin = api.mpi_coll_begin

            def fn(w, _, t, ref, begin=begin):
                return begin(w, None, t)
        elif kind == Ev.MPI_COLL_END:
            op, root, sent, received = ints(p(1)), ints(p(2)), shared(p(3)), shared(p(4))
            end = api.mpi_coll_end

            def fn(w, _, t, ref, op=op, root=root, sent=sent, received=received, end=end):
                return end(w, None, t, op(), ref, root(), sent(), received())
        else:  # check_events refuses unknown kinds before anything is written
            raise WriterInputError(f"event type {kind} has no writer")
        fns[sel] = fn


def _location_bounds(loc: np.ndarray, first: int, last: int) -> np.ndarray:
    """Where each location ``first .. last + 1`` starts in the sorted column ``loc``: binary
    searches on the (strided) column itself for a few locations, a contiguous copy for many."""
    if last - first < 4096:
        return np.array([bisect.bisect_left(loc, k) for k in range(first, last + 1)]
                        + [loc.size], dtype=np.int64)
    return np.searchsorted(loc, np.arange(first, last + 2), side="left")


class _EventStream:
    """Writes the event table piece by piece, in groups of locations (``begin`` .. ``end``;
    one group of every location this process writes, unless ``EventGroups``): within a group
    pieces cover consecutive location ranges in order; each location is written in one go
    (the C library's writer of a location is opened once), and exactly once over all groups;
    locations no piece has get an empty event file, except when the groups name every
    location this process writes (``named_only``: parallel ``EventGroups``)."""

    def __init__(self, archive: _Archive, defs: ArchiveDefs,
                 progress: Callable[[int], None] | None,
                 locations: np.ndarray | None = None, named_only: bool = False) -> None:
        self.archive = archive
        self.defs = defs
        self.n_locations = len(defs.locations)
        #: the locations whose event files this process writes (all, unless writing in parallel)
        self.owned = np.ones(self.n_locations, dtype=bool)
        if locations is not None:
            self.owned[:] = False
            self.owned[np.asarray(locations, dtype=np.int64)] = True
        self.written = np.zeros(self.n_locations, dtype=bool)  # files done, all groups
        self.mine = self.owned.copy()  # the current group's locations
        self.named_only = named_only
        self.progress = progress
        self.api = _api()
        self.compiled = _use_compiled(self.api)
        self.next_loc = 0  # locations before it are written
        self.done = self.reported = 0
        self.counts = np.zeros(self.n_locations, dtype=np.int64)
        self.per_type = np.zeros(max(Ev) + 1, dtype=np.int64)
        self.attr_list = _otf2.AttributeList_New()
        self.attrs = _address(self.attr_list)
        if not self.attrs:
            raise OutputError("OTF2 could not allocate an attribute list")

    def write(self, events: np.ndarray, checked: bool = False) -> None:
        if not events.size:
            return
        if not checked:
            check_events(self.defs, events)
        loc_column = events["loc"]  # sorted (checked)
        first, last = int(loc_column[0]), int(loc_column[-1])
        bounds = _location_bounds(loc_column, first, last)
        per_loc = np.diff(bounds)
        if not self.mine[first:last + 1][per_loc > 0].all():
            bad = first + int(np.flatnonzero((per_loc > 0) & ~self.mine[first:last + 1])[0])
            raise WriterInputError(f"an event of location {bad}, which this process does not "
                                   "write")
        if first < self.next_loc:
            raise WriterInputError(f"events of location {first} come after those of location "
                                   f"{self.next_loc - 1} (pieces must follow location order)")
        self.counts[first:last + 1] += per_loc
        per_type = self.per_type if self.compiled else None  # the C loop counts types
        if per_type is None:
            self.per_type += np.bincount(events["type"], minlength=self.per_type.size)
        self._empty_until(first)
        for loc in range(first, last + 1):
            lo, hi = int(bounds[loc - first]), int(bounds[loc - first + 1])
            if not self.mine[loc]:
                continue  # no events (checked above): another process writes its file
            writer, writer_at = self.archive.location_writer(loc)
            try:
                for start in range(lo, hi, PROGRESS_EVENTS):
                    stop = min(start + PROGRESS_EVENTS, hi)
                    _write_location_events(self.api, writer_at, self.attrs, events[start:stop],
                                           per_type)
                    self.done += stop - start
                    if self.progress is not None and self.done - self.reported >= PROGRESS_EVENTS:
                        self.progress(self.done)
                        self.reported = self.done
            finally:
                self.archive.close_location_writer(writer)
        self.next_loc = last + 1

    def _empty_until(self, stop: int) -> None:
        for loc in range(self.next_loc, stop):
            if not self.mine[loc]:
                continue
            writer, _ = self.archive.location_writer(loc)
            self.archive.close_location_writer(writer)
        self.next_loc = max(self.next_loc, stop)

    def begin(self, locations: np.ndarray | None) -> None:
        """Start a group: ``locations`` (None: every location this process writes), of which
        none may have been written by an earlier group."""
        mine = self.owned.copy()
        if locations is not None:
            mine[:] = False
            mine[np.asarray(locations, dtype=np.int64)] = True
            if (mine & ~self.owned).any() or (mine & self.written).any():
                loc = int(np.flatnonzero(mine & (self.written | ~self.owned))[0])
                raise WriterInputError(f"location {loc} is in a group but was written before "
                                       "or is not this process's")
        self.mine = mine & ~self.written
        self.next_loc = 0

    def end(self) -> None:
        """End a group: empty event files for its locations that had no events."""
        self._empty_until(self.n_locations)
        self.written |= self.mine

    def finish(self) -> None:
        if not self.named_only:
            self.begin(None)  # the locations no group named: empty files
            self.end()
        if self.progress is not None and (self.reported != self.done or self.done == 0):
            self.progress(self.done)

    def close(self) -> None:
        if self.attr_list is not None:
            _otf2.AttributeList_Delete(self.attr_list)
            self.attr_list = None


class _Strings:
    """The global string table: get-or-create by value, ref 0 is the empty string."""

    def __init__(self) -> None:
        self.refs: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        ref = self.refs.get(text)
        if ref is None:
            ref = self.refs[text] = len(self.refs)
        return ref


def check_defs(defs: ArchiveDefs) -> None:
    for i, node in enumerate(defs.system_nodes):
        if node.name == "0":
            raise WriterInputError(f"system node {i} is named '0': ViTE aborts on such a node "
                                   f"(docs/archive.md, System tree)")
        if node.parent is not None and not 0 <= node.parent < i:
            raise WriterInputError(f"system node {i} '{node.name}': parent {node.parent} must be "
                                  f"defined before it")
    for i, group in enumerate(defs.location_groups):
        if not 0 <= group.system_node < len(defs.system_nodes):
            raise WriterInputError(f"location group {i} '{group.name}': no system node "
                                  f"{group.system_node}")
        if group.creating_group is not None and not (
            0 <= group.creating_group < len(defs.location_groups)
        ):
            raise WriterInputError(f"location group {i} '{group.name}': no creating group "
                                  f"{group.creating_group}")
    for i, loc in enumerate(defs.locations):
        if not 0 <= loc.group < len(defs.location_groups):
            raise WriterInputError(f"location {i} '{loc.name}': no location group {loc.group}")
    names = [loc.name for loc in defs.locations]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise WriterInputError(f"location name '{dup}' is used twice (names must be unique)")
    for i, comm in enumerate(defs.communicators):
        if any(not 0 <= m < len(defs.locations) for m in comm.members):
            raise WriterInputError(f"communicator {i} '{comm.name}': a member is not a location")
        if len(set(comm.members)) != len(comm.members):
            raise WriterInputError(f"communicator {i} '{comm.name}': a location is a member twice")
    for i, win in enumerate(defs.rma_windows):
        if not 0 <= win.comm < len(defs.communicators):
            raise WriterInputError(f"RMA window {i} '{win.name}': no communicator {win.comm}")
    for prop in defs.location_properties:
        if not 0 <= prop.loc < len(defs.locations):
            raise WriterInputError(f"location property '{prop.name}': no location {prop.loc}")


def _write_definitions(archive: _Archive, defs: ArchiveDefs, counts: np.ndarray) -> None:
    """Write every global definition with ref = its index in ``defs``."""
    s = _Strings()
    undefined_node = _otf2.UNDEFINED_SYSTEM_TREE_NODE
    undefined_group = _otf2.UNDEFINED_LOCATION_GROUP

    # communicator groups: one COMM_LOCATIONS group per OTF2 paradigm, one COMM_GROUP per comm
    comm_locations: dict[int, list[int]] = {}
    for comm in defs.communicators:
        members = comm_locations.setdefault(_PARADIGM[comm.paradigm][0].value, [])
        members.extend(comm.members)
    comm_locations = {p: sorted(set(m)) for p, m in comm_locations.items()}
    locations_group_ref = {p: ref for ref, p in enumerate(comm_locations)}

    used_paradigms: dict[int, tuple[object, str, object]] = {}
    for paradigm in [r.paradigm for r in defs.regions] + [c.paradigm for c in defs.communicators]:
        otf2_paradigm, name, cls = _PARADIGM[paradigm]
        used_paradigms.setdefault(otf2_paradigm.value, (otf2_paradigm, name, cls))

    # intern every string first: a definition must not refer to a string written after it
    for _, name, _ in used_paradigms.values():
        s(name)
    for obj in defs.attributes:
        s(obj.name), s(obj.description)
    for obj in defs.system_nodes:
        s(obj.name), s(obj.class_name)
    for obj in [*defs.location_groups, *defs.locations, *defs.regions]:
        s(obj.name)
    for obj in defs.metrics:
        s(obj.name), s(obj.unit)
    for paradigm in comm_locations:
        s(f"{used_paradigms[paradigm][1]} communicator locations")
    for obj in [*defs.communicators, *defs.rma_windows]:
        s(obj.name)
    for obj in defs.location_properties:
        s(obj.name)
        if isinstance(obj.value, str):
            s(obj.value)

    g = _otf2.Archive_GetGlobalDefWriter(archive.handle)
    try:
        clock = defs.clock
        _otf2.GlobalDefWriter_WriteClockProperties(
            g, clock.timer_resolution, clock.global_offset, clock.trace_length, clock.realtime_ns
        )
        for text, ref in s.refs.items():
            _otf2.GlobalDefWriter_WriteString(g, ref, text)
        for otf2_paradigm, name, cls in used_paradigms.values():
            _otf2.GlobalDefWriter_WriteParadigm(g, otf2_paradigm, s.refs[name], cls)
        for ref, a in enumerate(defs.attributes):
            _otf2.GlobalDefWriter_WriteAttribute(
                g, ref, s(a.name), s(a.description), _ATTR_TYPE[a.type]
            )
        for ref, node in enumerate(defs.system_nodes):
            parent = undefined_node if node.parent is None else node.parent
            _otf2.GlobalDefWriter_WriteSystemTreeNode(
                g, ref, s(node.name), s(node.class_name), parent
            )
            _otf2.GlobalDefWriter_WriteSystemTreeNodeDomain(g, ref, _DOMAIN[node.domain])
        for ref, group in enumerate(defs.location_groups):
            creator = undefined_group if group.creating_group is None else group.creating_group
            _otf2.GlobalDefWriter_WriteLocationGroup(
                g, ref, s(group.name), _GROUP_TYPE[group.type], group.system_node, creator
            )
        for ref, loc in enumerate(defs.locations):
            _otf2.GlobalDefWriter_WriteLocation(
                g, ref, s(loc.name), _LOCATION_TYPE[loc.type], int(counts[ref]), loc.group
            )
        for prop in defs.location_properties:
            value = _otf2.AttributeValue()
            if isinstance(prop.value, str):
                value.stringRef, otf2_type = s(prop.value), _otf2.TYPE_STRING
            elif isinstance(prop.value, float):
                value.float64, otf2_type = prop.value, _otf2.TYPE_DOUBLE
            else:
                value.uint64, otf2_type = int(prop.value), _otf2.TYPE_UINT64
            _otf2.GlobalDefWriter_WriteLocationProperty(
                g, prop.loc, s(prop.name), otf2_type, value
            )
        for ref, region in enumerate(defs.regions):
            name = s(region.name)
            _otf2.GlobalDefWriter_WriteRegion(
                g, ref, name, name, 0, _ROLE[region.role], _PARADIGM[region.paradigm][0],
                _otf2.REGION_FLAG_NONE, 0, 0, 0,
            )
        for paradigm, members in comm_locations.items():
            _otf2.GlobalDefWriter_WriteGroup(
                g, locations_group_ref[paradigm],
                s(f"{used_paradigms[paradigm][1]} communicator locations"),
                _otf2.GROUP_TYPE_COMM_LOCATIONS, _otf2.Paradigm(paradigm),
                _otf2.GROUP_FLAG_NONE, members,
            )
        next_group = len(comm_locations)
        for ref, comm in enumerate(defs.communicators):
            paradigm = _PARADIGM[comm.paradigm][0]
            index = {loc: i for i, loc in enumerate(comm_locations[paradigm.value])}
            _otf2.GlobalDefWriter_WriteGroup(
                g, next_group + ref, s(comm.name), _otf2.GROUP_TYPE_COMM_GROUP, paradigm,
                _otf2.GROUP_FLAG_NONE, [index[m] for m in comm.members],
            )
        for ref, metric in enumerate(defs.metrics):
            _otf2.GlobalDefWriter_WriteMetricMember(
                g, ref, s(metric.name), 0, _otf2.METRIC_TYPE_OTHER, _otf2.METRIC_ABSOLUTE_POINT,
                _otf2.TYPE_UINT64, _otf2.BASE_DECIMAL, 0, s(metric.unit),
            )
        for ref in range(len(defs.metrics)):
            _otf2.GlobalDefWriter_WriteMetricClass(
                g, ref, [ref], _otf2.METRIC_ASYNCHRONOUS, _otf2.RECORDER_KIND_CPU
            )
        for ref, comm in enumerate(defs.communicators):
            _otf2.GlobalDefWriter_WriteComm(
                g, ref, s(comm.name), next_group + ref, _otf2.UNDEFINED_COMM, _otf2.COMM_FLAG_NONE
            )
        for ref, win in enumerate(defs.rma_windows):
            _otf2.GlobalDefWriter_WriteRmaWin(
                g, ref, s(win.name), win.comm, _otf2.RMA_WIN_FLAG_NONE
            )
    finally:
        _otf2.Archive_CloseGlobalDefWriter(archive.handle, g)


class EventGroups:
    """Events handed to ``write_archive`` as groups written one after the other: each group
    is ``(locations, pieces)``, the location refs (ascending) whose event files it writes and
    its events as an array or an iterable of pieces over those locations in location order.
    The groups' locations are disjoint but need not follow each other (a group of nodes holds
    every fourth rank's locations, say); a location no group names gets an empty event file.
    The groups are taken one at a time, so a caller can build each group's events only when
    the writer reaches it (``driver.py``).

    In parallel writing the groups of all processes together name every location exactly once
    (``locations`` is then None): a location named by no group of this process is written by
    another, so the groups may be decided while writing (``write_share.WriteShare`` passes
    locations not yet written from a busy process to an idle one)."""

    def __init__(self, groups: Iterable[tuple[np.ndarray, np.ndarray | Iterable[np.ndarray]]]
                 ) -> None:
        self.groups = groups


def write_archive(
    defs: ArchiveDefs,
    events: np.ndarray | Iterable[np.ndarray] | EventGroups,
    archive_dir: Path,
    archive_name: str,
    progress: Callable[[int], None] | None = None,
    *,
    collectives=None,
    locations: np.ndarray | None = None,
    counts: np.ndarray | None = None,
) -> WriteStats:
    """Write ``archive_dir/archive_name.otf2``, ``.def`` and the event folder.

    ``events`` is an ``EVENT_DTYPE`` array sorted by (loc, time, seq), or an iterable of such
    arrays covering consecutive location ranges in location order (``emit.EventChunks``, so
    the whole table never has to exist at once). ``progress`` is called with the number of
    events written so far, every ``PROGRESS_EVENTS`` events and at the end. Raises
    ``WriterInputError`` for a table that breaks its contract (a single array: before writing
    anything; pieces: before writing that piece, into the archive being written, which the
    caller then discards) and ``OutputError`` when the archive cannot be written.

    Parallel writing (``collectives``, an ``otf2_mpi.MpiCollectives``): every process of its
    communicator calls this with the same ``archive_dir`` and its own events; ``locations``
    (ascending) are the location refs whose event files this process writes, each location by
    exactly one process, and ``events`` (an array or pieces) hold only those locations;
    ``counts`` are the events per location of the whole archive (None: summed over the
    processes after writing). Only the master (rank 0)
    writes the global definitions (``defs``, with ``counts``); a failure while writing events
    is agreed on, so every process closes the archive and raises. Without ``collectives``:
    every location, counts from ``events``.

    ``events`` may also be ``EventGroups``: each group's locations are written from its
    pieces, in the groups' order; without ``collectives`` the locations no group names get
    empty event files and counts come from the events; with them, ``locations`` must be None
    and each process writes exactly the locations its groups name.
    """
    t_start = time.perf_counter()
    _tune_malloc()
    whole = isinstance(events, np.ndarray)
    if whole:
        check_events(defs, events)
    check_defs(defs)
    n_loc = len(defs.locations)
    locs = None if locations is None else np.asarray(locations, dtype=np.int64)
    if locs is not None and locs.size and not (0 <= locs.min() and locs.max() < n_loc):
        raise WriterInputError(f"locations to write must lie in 0..{n_loc - 1}")
    master = collectives is None or collectives.is_master
    stream: _EventStream | None = None
    errors = library_errors()
    errors.clear()
    anchor = f"{Path(archive_dir) / archive_name}.otf2"
    try:
        archive = _Archive(Path(archive_dir), archive_name, collectives)
        try:
            _otf2.Archive_SetCreator(archive.handle, defs.creator)
            if defs.system_nodes:
                _otf2.Archive_SetMachineName(archive.handle, defs.system_nodes[0].name)
            failure: Exception | None = None
            groups: Any = ()
            try:
                grouped = isinstance(events, EventGroups)
                if grouped and collectives is not None and locs is not None:
                    raise WriterInputError("in parallel writing, event groups name the "
                                           "locations themselves (locations=None)")
                stream = _EventStream(archive, defs, progress, locs,
                                      named_only=grouped and collectives is not None)
                if grouped:
                    groups = events.groups
                else:
                    groups = [(locs, [events] if whole else events)]
                for group_locs, pieces in groups:
                    stream.begin(group_locs)
                    single = isinstance(pieces, np.ndarray)
                    if single:
                        check_events(defs, pieces)
                    for piece in ([pieces] if single else pieces):
                        stream.write(piece, checked=whole or single)
                    stream.end()
                    piece = pieces = None  # the group's events go before the next is built
                stream.finish()
            except (OutputError, WriterInputError, _otf2.Error) as exc:
                if collectives is None:
                    raise
                failure = exc
                close = getattr(groups, "close", None)
                if close is not None:  # a generator of groups may owe other processes answers
                    close()
            if collectives is not None:
                collectives.agree(failure)  # raises on every process if one failed
                if counts is None:  # what every process wrote
                    counts = collectives.comm.allreduce(stream.counts)
            archive.close_event_files()
            counts = stream.counts if counts is None else np.asarray(counts, dtype=np.int64)
            if master:
                _write_definitions(archive, defs, counts)
        finally:
            if stream is not None:
                stream.close()
            archive.close()
    except _otf2.Error as exc:
        if errors.codes:
            raise errors.failure(anchor) from exc
        raise OutputError(f"{anchor}: the OTF2 library failed: "
                          f"{exc.name}: {exc.description}") from exc
    except OutputError as exc:
        if errors.no_space and not getattr(exc, "no_space", False):
            raise errors.failure(anchor) from exc
        raise
    if errors.failed:  # reported but not returned (e.g. closing the anchor file)
        raise errors.failure(anchor)
    per_type = stream.per_type
    return WriteStats(
        events_per_location=counts,
        events_per_type={e: int(per_type[e]) for e in Ev if per_type[e]},
        seconds=time.perf_counter() - t_start,
    )


def write_ceiling(n_events: int, tmpdir: Path) -> float:
    """Events per second for Enter/Leave pairs pushed through the same C entry points.

    Writes ``n_events`` (rounded up to even) to one location of a scratch archive in a fresh
    directory under ``tmpdir`` with nothing else to do per event: the calls are made exactly
    as ``write_archive``'s hot loop makes them (``map`` over prepared lists), only the calls
    are timed. The scratch archive is removed again.
    """
    n_pairs = max(1, (n_events + 1) // 2)
    rows = np.zeros(2 * n_pairs, EVENT_DTYPE)
    rows["type"][0::2], rows["type"][1::2] = Ev.ENTER, Ev.LEAVE
    rows["time"] = np.arange(rows.size) // 2
    return _timed_calls(rows, tmpdir)


def write_mix_ceiling(per_type: dict[str, int], tmpdir: Path) -> float:
    """Events per second for a given mix of event kinds (``Ev`` name -> count), as
    ``write_ceiling`` but with every kind's C calls (RMA events with their five attributes).

    The kinds are interleaved evenly in one location; parameters are zeros (ref 0: the
    scratch archive has no definitions, which only a reader would notice). Only the calls are
    timed, so this is what writing that mix costs with nothing else to do.
    """
    counts = {Ev[name]: int(n) for name, n in per_type.items() if int(n) > 0}
    total = sum(counts.values())
    if not total:
        return float("inf")
    types = np.concatenate([np.full(n, int(kind), dtype=np.uint8) for kind, n in counts.items()])
    # even interleaving: event k of a kind with n events sits at (k + 0.5) / n of the run
    frac = np.concatenate([(np.arange(n) + 0.5) / n for n in counts.values()])
    rows = np.zeros(total, EVENT_DTYPE)
    rows["type"] = types[np.argsort(frac, kind="stable")]
    rows["time"] = np.arange(total)
    return _timed_calls(rows, tmpdir)


#: CPU seconds of the last ceiling measurement (for benchmarks on a shared machine)
LAST_CEILING_CPU_SECONDS = [0.0]


def _timed_calls(rows: np.ndarray, tmpdir: Path) -> float:
    scratch = Path(tempfile.mkdtemp(prefix="write-ceiling-", dir=tmpdir))
    try:
        archive = _Archive(scratch, "ceiling")
        api = _api()
        attr_list = _otf2.AttributeList_New()
        try:
            writer, w = archive.location_writer(0)
            try:
                fns = api.region_fns[rows["type"]]
                if rows.size and int(rows["type"].max()) > Ev.LEAVE:
                    _add_other_event_writers(api, ctypes.c_void_p(_address(attr_list)), rows,
                                             fns)
                fns_list, times, refs = fns.tolist(), rows["time"].tolist(), rows["ref"].tolist()
                t0, c0 = time.perf_counter(), time.process_time()
                bad = any(map(operator.call, fns_list, repeat(ctypes.c_void_p(w)),
                              repeat(None), map(ctypes.c_uint64, times), refs))
                seconds = time.perf_counter() - t0
                LAST_CEILING_CPU_SECONDS[0] = time.process_time() - c0
            finally:
                archive.close_location_writer(writer)
            if bad:
                raise library_errors().failure("the event files")
        finally:
            _otf2.AttributeList_Delete(attr_list)
            archive.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows.size / seconds if seconds > 0 else float("inf")
