"""Write one OTF2 archive from ``ArchiveDefs`` and an ``EVENT_DTYPE`` table (CONTRACT.md 2, 3).

The only module of the project that imports the OTF2 bindings for writing. It goes below the
high-level ``otf2.Writer`` and talks to the C library through ``_otf2`` directly:

- **Definitions** are written with explicit refs, so every ref is the list index in
  ``ArchiveDefs`` (location ref = index in ``defs.locations``, location-group ref = index in
  ``defs.location_groups``, region ref = index, ...). Nothing is merged by value, paradigms are
  written once each, and the clock properties are exactly ``defs.clock``
  (``realtime_timestamp = ClockProps.realtime_ns``, never the time the conversion ran).
- **Events** go through the C entry points (``OTF2_EvtWriter_Enter`` ...) as ctypes function
  objects whose argument types are bound once per process. Each location is written in one
  pass over its slice of the table, with its columns converted to Python lists once; per event
  there is one table lookup on the type and one C call (RMA events add five attribute calls).

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
- Location properties are written as OTF2 strings.
- Every location gets an event file, even one with no events.

Checked before anything is written (``WriterInputError``): the dtype, the locations are sorted
and exist, time is non-negative and never decreases within a location (the C library would fail
with error 78 halfway through), every type is an ``Ev`` and every ref exists; in the
definitions, every parent, group, member and location a definition names exists and location
names are unique. Not checked: the
semantics of the events (matching sends and receives, balanced Enter/Leave, ...) and whether
``defs.clock`` agrees with the event times; those belong to the stages that build the table.
The writer never sorts and never changes a timestamp.
"""

from __future__ import annotations

import ctypes
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
    Ev.METRIC: "metrics",
}


class WriterInputError(ValueError):
    """The definitions or the event table break the writer's contract (an earlier stage's bug)."""


@dataclass
class WriteStats:
    """What ``write_archive`` wrote."""

    events_per_location: np.ndarray  # int64, indexed by location ref
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


class _CApi:
    """ctypes function objects of the event writer with argument types set once."""

    def __init__(self) -> None:
        lib = _otf2.conf.lib
        vp, u8, u32, u64 = ctypes.c_void_p, ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64

        def bind(name: str, *argtypes: type) -> ctypes._CFuncPtr:
            fn = lib[name]  # item access returns a private function object, not the shared one
            fn.argtypes = list(argtypes)
            fn.restype = ctypes.c_int
            return fn

        head = (vp, vp, u64)  # writer, attribute list, time
        self.enter = bind("OTF2_EvtWriter_Enter", *head, u32)
        self.leave = bind("OTF2_EvtWriter_Leave", *head, u32)
        # receiver/sender, comm, tag, length
        self.mpi_send = bind("OTF2_EvtWriter_MpiSend", *head, u32, u32, u32, u64)
        self.mpi_recv = bind("OTF2_EvtWriter_MpiRecv", *head, u32, u32, u32, u64)
        self.mpi_isend = bind("OTF2_EvtWriter_MpiIsend", *head, u32, u32, u32, u64, u64)
        self.mpi_irecv = bind("OTF2_EvtWriter_MpiIrecv", *head, u32, u32, u32, u64, u64)
        self.mpi_isend_complete = bind("OTF2_EvtWriter_MpiIsendComplete", *head, u64)
        self.mpi_irecv_request = bind("OTF2_EvtWriter_MpiIrecvRequest", *head, u64)
        self.mpi_coll_begin = bind("OTF2_EvtWriter_MpiCollectiveBegin", *head)
        # collective op, comm, root, sent, received
        self.mpi_coll_end = bind("OTF2_EvtWriter_MpiCollectiveEnd", *head, u8, u32, u32, u64, u64)
        # window, remote, bytes, matching id
        self.rma_get = bind("OTF2_EvtWriter_RmaGet", *head, u32, u32, u64, u64)
        self.rma_put = bind("OTF2_EvtWriter_RmaPut", *head, u32, u32, u64, u64)
        self.rma_complete = bind("OTF2_EvtWriter_RmaOpCompleteBlocking", *head, u32, u64)
        # metric, number of values, type ids, values
        self.metric = bind("OTF2_EvtWriter_Metric", *head, u32, u8, vp, vp)
        self.attr_add_u64 = bind("OTF2_AttributeList_AddUint64", vp, u32, u64)


_API: _CApi | None = None


def _api() -> _CApi:
    global _API
    if _API is None:
        _API = _CApi()
    return _API


def _address(pointer: object) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


# --------------------------------------------------------------------------------------------
# Checks of the event table
# --------------------------------------------------------------------------------------------


def _check_events(defs: ArchiveDefs, events: np.ndarray) -> None:
    if not isinstance(events, np.ndarray) or events.dtype != EVENT_DTYPE:
        raise WriterInputError(f"events must be an EVENT_DTYPE array, got {type(events).__name__}"
                              f" of dtype {getattr(events, 'dtype', None)}")
    if events.size == 0:
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
    known = np.isin(types, np.array([int(e) for e in Ev], dtype=types.dtype))
    if not known.all():
        i = int(np.argmin(known))
        raise WriterInputError(f"event {i}: unknown event type {int(types[i])}")
    for kind, list_name in _REF_KIND.items():
        sel = types == kind
        if not sel.any():
            continue
        n_defs = len(getattr(defs, list_name))
        refs = events["ref"][sel]
        if int(refs.max()) >= n_defs:
            i = int(np.flatnonzero(sel)[int(np.argmax(refs >= n_defs))])
            raise WriterInputError(f"event {i} ({kind.name}): ref {int(events['ref'][i])} "
                                  f"is not one of the {n_defs} {list_name}")
    _check_ranks(defs, events)


def _check_ranks(defs: ArchiveDefs, events: np.ndarray) -> None:
    """Peer ranks (p1) and collective roots (p2) must be ranks of the event's communicator."""
    comm_size = np.array([len(c.members) for c in defs.communicators] or [0], dtype=np.int64)
    win_size = np.array([comm_size[w.comm] for w in defs.rma_windows] or [0], dtype=np.int64)
    types, refs = events["type"], events["ref"].astype(np.int64)
    checks = [
        ((Ev.MPI_SEND, Ev.MPI_RECV, Ev.MPI_ISEND, Ev.MPI_IRECV), "p1", comm_size, "peer rank"),
        ((Ev.RMA_GET, Ev.RMA_PUT), "p1", win_size, "remote rank"),
        ((Ev.MPI_COLL_END,), "p2", comm_size, "root rank"),
    ]
    for kinds, column, size, what in checks:
        sel = np.isin(types, np.array([int(k) for k in kinds], dtype=types.dtype))
        if not sel.any():
            continue
        rank = events[column][sel]
        bad = rank >= size[refs[sel]].astype(np.uint64)
        if column == "p2":
            bad &= rank != UNDEFINED_UINT32
        if bad.any():
            i = int(np.flatnonzero(sel)[int(np.argmax(bad))])
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
            self.handle = _otf2.Archive_Open(
                str(archive_dir), archive_name, _otf2.FILEMODE_WRITE, 1024 * 1024,
                4 * 1024 * 1024, _otf2.SUBSTRATE_POSIX, _otf2.COMPRESSION_NONE,
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


def _write_location_events(api: _CApi, writer: int, attrs: int, rows: np.ndarray) -> None:
    """Write one location's rows, in order. The per-event hot loop of the converter.

    Enter and Leave (most events) go straight to their C function through a table indexed by
    the type; every other kind goes through a small closure that picks its parameters from the
    columns. Return codes are OR-ed together and checked once at the end.
    """
    types = rows["type"].tolist()
    refs = rows["ref"].tolist()
    times = rows["time"].tolist()
    region_events = (None, api.enter, api.leave)  # indexed by Ev.ENTER = 1, Ev.LEAVE = 2
    bad = 0
    if max(types, default=0) <= Ev.LEAVE:  # Enter/Leave only: nothing else to look at
        for ty, ref, t in zip(types, refs, times, strict=True):
            bad |= region_events[ty](writer, None, t, ref)
    else:
        other = _other_event_writers(api, writer, attrs, rows)
        last_region_type = int(Ev.LEAVE)  # a plain int: comparing with the enum is slower
        for i, (ty, ref, t) in enumerate(zip(types, refs, times, strict=True)):
            if ty <= last_region_type:
                bad |= region_events[ty](writer, None, t, ref)
            else:
                bad |= other[ty](i, t, ref)
    if bad:
        raise OutputError("the OTF2 library refused events (its messages are above)")


def _other_event_writers(
    api: _CApi, w: int, attrs: int, rows: np.ndarray
) -> list[Callable[[int, int, int], int] | None]:
    """Per Ev value, a function (row index, time, ref) -> return code for the non-region kinds."""
    p1, p2, p3, p4, p5, p6 = (rows[f"p{k}"].tolist() for k in range(1, 7))
    add = api.attr_add_u64
    metric_types = (ctypes.c_uint8 * 1)(_otf2.TYPE_UINT64.value)  # OTF2_Type[1]
    metric_values = (ctypes.c_uint64 * 1)()  # OTF2_MetricValue[1], the unsigned member
    enter, get, put, complete = api.enter, api.rma_get, api.rma_put, api.rma_complete

    def dma_attributes(i: int) -> int:
        packed = p4[i]  # tag | opcode << 8 | list elements << 16 (model.Ev)
        return (
            add(attrs, ATTR_DMA_TAG, packed & 0xFF)
            | add(attrs, ATTR_MFC_OPCODE, (packed >> 8) & 0xFF)
            | add(attrs, ATTR_LIST_ELEMENTS, packed >> 16)
            | add(attrs, ATTR_EA, p5[i])
            | add(attrs, ATTR_LS_ADDRESS, p6[i])
        )

    def metric(i: int, t: int, ref: int) -> int:
        metric_values[0] = p1[i]
        return api.metric(w, None, t, ref, 1, metric_types, metric_values)

    # OTF2 empties the attribute list after every event written with it
    by_type: dict[Ev, Callable[[int, int, int], int]] = {
        Ev.MPI_SEND: lambda i, t, ref: api.mpi_send(w, None, t, p1[i], ref, p2[i], p3[i]),
        Ev.MPI_RECV: lambda i, t, ref: api.mpi_recv(w, None, t, p1[i], ref, p2[i], p3[i]),
        Ev.MPI_ISEND: lambda i, t, ref: api.mpi_isend(w, None, t, p1[i], ref, p2[i], p3[i],
                                                      p4[i]),
        Ev.MPI_ISEND_COMPLETE: lambda i, t, ref: api.mpi_isend_complete(w, None, t, p4[i]),
        Ev.MPI_IRECV_REQUEST: lambda i, t, ref: api.mpi_irecv_request(w, None, t, p4[i]),
        Ev.MPI_IRECV: lambda i, t, ref: api.mpi_irecv(w, None, t, p1[i], ref, p2[i], p3[i],
                                                      p4[i]),
        Ev.MPI_COLL_BEGIN: lambda i, t, ref: api.mpi_coll_begin(w, None, t),
        Ev.MPI_COLL_END: lambda i, t, ref: api.mpi_coll_end(w, None, t, p1[i], ref, p2[i],
                                                            p3[i], p4[i]),
        Ev.RMA_GET: lambda i, t, ref: dma_attributes(i) | get(w, attrs, t, ref, p1[i], p2[i],
                                                              p3[i]),
        Ev.RMA_PUT: lambda i, t, ref: dma_attributes(i) | put(w, attrs, t, ref, p1[i], p2[i],
                                                              p3[i]),
        Ev.RMA_OP_COMPLETE_BLOCKING: lambda i, t, ref: complete(w, None, t, ref, p3[i]),
        Ev.METRIC: metric,
        Ev.ENTER_OFF_SPU: lambda i, t, ref: (add(attrs, ATTR_PHYSICAL_SPU, p1[i])
                                             | enter(w, attrs, t, ref)),
    }
    table: list[Callable[[int, int, int], int] | None] = [None] * (max(Ev) + 1)
    for kind, fn in by_type.items():
        table[kind] = fn
    return table


def _write_events(
    archive: _Archive,
    events: np.ndarray,
    locations: list[int],
    progress: Callable[[int], None] | None,
) -> None:
    """Open, fill and close the event writer of every location in ``locations`` (ascending)."""
    api = _api()
    attr_list = _otf2.AttributeList_New()
    attrs = _address(attr_list)
    if not attrs:
        raise OutputError("OTF2 could not allocate an attribute list")
    lows = np.searchsorted(events["loc"], locations, side="left").tolist()
    highs = np.searchsorted(events["loc"], locations, side="right").tolist()
    done = reported = 0
    try:
        for loc, lo, hi in zip(locations, lows, highs, strict=True):
            writer, writer_at = archive.location_writer(loc)
            try:
                for start in range(lo, hi, PROGRESS_EVENTS):
                    stop = min(start + PROGRESS_EVENTS, hi)
                    _write_location_events(api, writer_at, attrs, events[start:stop])
                    done += stop - start
                    if progress is not None and done - reported >= PROGRESS_EVENTS:
                        progress(done)
                        reported = done
            finally:
                archive.close_location_writer(writer)
    finally:
        _otf2.AttributeList_Delete(attr_list)
    if progress is not None and (reported != done or done == 0):
        progress(done)


class _Strings:
    """The global string table: get-or-create by value, ref 0 is the empty string."""

    def __init__(self) -> None:
        self.refs: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        ref = self.refs.get(text)
        if ref is None:
            ref = self.refs[text] = len(self.refs)
        return ref


def _check_defs(defs: ArchiveDefs) -> None:
    for i, node in enumerate(defs.system_nodes):
        if node.name == "0":
            raise WriterInputError(f"system node {i} is named '0': ViTE aborts on such a node "
                                   f"(CONTRACT.md section 3)")
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
        s(obj.name), s(obj.value)

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
            value.stringRef = s(prop.value)
            _otf2.GlobalDefWriter_WriteLocationProperty(
                g, prop.loc, s(prop.name), _otf2.TYPE_STRING, value
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


def write_archive(
    defs: ArchiveDefs,
    events: np.ndarray,
    archive_dir: Path,
    archive_name: str,
    progress: Callable[[int], None] | None = None,
    *,
    collectives=None,
    locations: np.ndarray | None = None,
    counts: np.ndarray | None = None,
) -> WriteStats:
    """Write ``archive_dir/archive_name.otf2``, ``.def`` and the event folder.

    ``events`` is an ``EVENT_DTYPE`` array sorted by (loc, time, seq). ``progress`` is called
    with the number of events written so far, every ``PROGRESS_EVENTS`` events and at the end.
    Raises ``WriterInputError`` for a table that breaks its contract (before writing anything)
    and ``OutputError`` when the archive cannot be written.

    Parallel writing (``collectives``, an ``otf2_mpi.MpiCollectives``): every process of its
    communicator calls this with the same ``archive_dir`` and its own events; ``locations``
    (ascending) are the location refs whose event files this process writes, each location by
    exactly one process, and ``events`` hold only those locations; ``counts`` are the events
    per location of the whole archive. Only the master (rank 0) writes the global definitions
    (``defs``, with ``counts``); a failure while writing events is agreed on, so every process
    closes the archive and raises. Without ``collectives``: every location, counts from
    ``events``.
    """
    t_start = time.perf_counter()
    _check_events(defs, events)
    _check_defs(defs)
    n_loc = len(defs.locations)
    own = np.bincount(events["loc"], minlength=n_loc).astype(np.int64)
    locs = list(range(n_loc)) if locations is None else [int(x) for x in locations]
    if events.size and locations is not None and not np.isin(events["loc"], locs).all():
        bad = int(events["loc"][~np.isin(events["loc"], locs)][0])
        raise WriterInputError(f"an event of location {bad}, which this process does not write")
    counts = own if counts is None else np.asarray(counts, dtype=np.int64)
    per_type = np.bincount(events["type"], minlength=max(Ev) + 1)
    master = collectives is None or collectives.is_master
    try:
        archive = _Archive(Path(archive_dir), archive_name, collectives)
        try:
            _otf2.Archive_SetCreator(archive.handle, defs.creator)
            if defs.system_nodes:
                _otf2.Archive_SetMachineName(archive.handle, defs.system_nodes[0].name)
            failure: Exception | None = None
            try:
                _write_events(archive, events, locs, progress)
            except (OutputError, _otf2.Error) as exc:
                if collectives is None:
                    raise
                failure = exc
            if collectives is not None:
                collectives.agree(failure)  # raises on every process if one failed
            archive.close_event_files()
            if master:
                _write_definitions(archive, defs, counts)
        finally:
            archive.close()
    except _otf2.Error as exc:
        raise OutputError(f"{Path(archive_dir) / archive_name}.otf2: the OTF2 library failed: "
                          f"{exc.name}: {exc.description}") from exc
    return WriteStats(
        events_per_location=own,
        events_per_type={e: int(per_type[e]) for e in Ev if per_type[e]},
        seconds=time.perf_counter() - t_start,
    )


def write_ceiling(n_events: int, tmpdir: Path) -> float:
    """Events per second for Enter/Leave pairs pushed through the same C entry points.

    Writes ``n_events`` (rounded up to even) to one location of a scratch archive in a fresh
    directory under ``tmpdir`` with nothing else to do per event, the ceiling of
    ``write_archive``'s hot loop, and removes the scratch archive again.
    """
    n_pairs = max(1, (n_events + 1) // 2)
    scratch = Path(tempfile.mkdtemp(prefix="write-ceiling-", dir=tmpdir))
    try:
        archive = _Archive(scratch, "ceiling")
        api = _api()
        enter, leave = api.enter, api.leave
        times = list(range(n_pairs))
        try:
            writer, w = archive.location_writer(0)
            try:
                bad = 0
                t0 = time.perf_counter()
                for t in times:
                    bad |= enter(w, None, t, 0)
                    bad |= leave(w, None, t, 0)
                seconds = time.perf_counter() - t0
            finally:
                archive.close_location_writer(writer)
            if bad:
                raise OutputError("the OTF2 library refused events (its messages are above)")
        finally:
            archive.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 2 * n_pairs / seconds if seconds > 0 else float("inf")
