"""The events of an archive, location by location: ``EventStream`` takes the event table
(whole, in pieces of whole locations, or in ``EventGroups`` of locations) and writes each
location's rows in one pass through the compiled loop, or through ctypes calls where it is not
built (``add_other_event_writers`` makes the per-kind calls), gives every location it writes an
event file, even an empty one, counts the events per location and kind, and reports progress.
A location with a METRIC location (``ArchiveDefs.metric_instances``) has its Metric events of
the instanced classes written there instead, right after its own, by the same process.
It writes no definitions, never sorts and never changes a timestamp; how the calls are made
fast is in docs/performance.md.
"""

from __future__ import annotations

import bisect
import ctypes
import operator
from collections.abc import Callable, Iterable
from itertools import repeat

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
    PROGRAM_NAME_STRING,
    ArchiveDefs,
    Ev,
)
from ..native import whole_rows
from .capi import CApi, address, c_api, library_errors, use_compiled
from .checks import RowsByType, WriterInputError, check_events
from .open_archive import OpenArchive

#: ProgramEnd's exit status: OTF2_UNDEFINED_INT64 (a CBT run does not record it)
UNDEFINED_EXIT_STATUS = -(1 << 63)

#: progress is reported after every this many events
PROGRESS_EVENTS = 100_000


def _write_location_events(api: CApi, writer: int, attrs: int, rows: np.ndarray,
                            per_type: np.ndarray | None = None) -> None:
    """Write one location's rows, in order. The per-event hot loop of the converter.

    ``per_type`` (int64, indexed by Ev): in C (``_evtwrite.write``, the same calls in the same
    order, no Python call per event), adding the events of each type to ``per_type``.
    Otherwise through ctypes, as follows.
    Every event is one ``fn(writer, None, time, ref)`` call made by ``map`` in C (no Python
    bytecode per event; arguments as ``CApi`` explains): ``fn`` is the C function itself for
    Enter and Leave (most events); for every other kind a small function of this chunk that
    takes that kind's further parameters from iterators over their columns (events of one
    kind are consumed in order) and makes the C call(s). The first non-zero return code stops
    the writing.
    """
    if per_type is not None:
        assert api.compiled_loop is not None, "per_type is given only with the compiled loop"
        try:
            code = api.compiled_loop.write(writer, attrs, np.ascontiguousarray(rows), per_type)
        except LookupError as exc:  # check_events refuses unknown kinds before writing
            raise WriterInputError(f"event type {exc} has no writer") from None
        if code:
            raise library_errors().failure("the event files")
        return
    types = rows["type"]
    fns = api.region_fns[types]
    if types.size and int(types.max()) > Ev.LEAVE:
        add_other_event_writers(api, ctypes.c_void_p(attrs), rows, fns)
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


def add_other_event_writers(api: CApi, attrs: ctypes.c_void_p, rows: np.ndarray,
                            fns: np.ndarray) -> None:
    """Fill ``fns`` at the non-region events with functions (writer, _, time, ref) -> code."""
    by_type = RowsByType(rows["type"])
    add = api.attr_add_u64

    def ints(values: np.ndarray) -> Callable[[], int]:  # uint32_t / uint8_t parameters
        return iter(values.tolist()).__next__

    def shared(values: np.ndarray) -> Callable[[], ctypes.c_uint64]:  # uint64_t, repeating
        return iter(_u64_objects(values)).__next__

    def longs(values: np.ndarray) -> Callable[[], ctypes.c_uint64]:  # uint64_t, distinct
        return map(ctypes.c_uint64, values.tolist()).__next__

    fn: Callable[..., int]  # (writer, _, time, ref) -> code, the kind's own parameters bound
    for kind in (k for k in by_type.present if k > Ev.LEAVE):
        sel = by_type.of(kind)

        def p(k: int, sel=sel) -> np.ndarray:
            return rows[f"p{k}"][sel]

        if kind in (Ev.RMA_WIN_CREATE, Ev.RMA_WIN_DESTROY):
            win_fn = api.win_fns[Ev(kind)]
            for i in sel.tolist():  # (item by item: numpy would read a ctypes function as a
                fns[i] = win_fn  # buffer; two events per location)
            continue
        if kind == Ev.ENTER_OFF_SPU:
            spu, enter = shared(p(1)), api.enter

            def enter_off_spu(w, _, t, ref, spu=spu, enter=enter):
                return add(attrs, ATTR_PHYSICAL_SPU, spu()) | enter(w, attrs, t, ref)
            fn = enter_off_spu
        elif kind in (Ev.RMA_GET, Ev.RMA_PUT):
            packed = p(4)  # tag | opcode << 8 | list elements << 16 (model.Ev)
            tag, opcode = shared(packed & 0xFF), shared((packed >> 8) & 0xFF)
            elements = shared(packed >> 16)
            ea, ls = longs(p(5)), shared(p(6))
            remote, size, match = ints(p(1)), shared(p(2)), longs(p(3))
            rma = api.rma_get if kind == Ev.RMA_GET else api.rma_put

            # OTF2 empties the attribute list after every event written with it
            def rma_transfer(w, _, t, ref, tag=tag, opcode=opcode, elements=elements, ea=ea,
                             ls=ls, remote=remote, size=size, match=match, rma=rma):
                return (add(attrs, ATTR_DMA_TAG, tag())
                        | add(attrs, ATTR_MFC_OPCODE, opcode())
                        | add(attrs, ATTR_LIST_ELEMENTS, elements())
                        | add(attrs, ATTR_EA, ea())
                        | add(attrs, ATTR_LS_ADDRESS, ls())
                        | rma(w, attrs, t, ref, remote(), size(), match()))
            fn = rma_transfer
        elif kind == Ev.METRIC:
            values = np.ascontiguousarray(p(1), dtype=np.uint64)
            # OTF2_MetricValue[1] of each event: its value's address in ``values``
            address = map(ctypes.c_void_p,
                          (values.ctypes.data + 8 * np.arange(values.size)).tolist()).__next__
            metric, types_at = api.metric, api.metric_types_at

            def metric_value(w, _, t, ref, address=address, metric=metric, values=values,
                             types_at=types_at):
                return metric(w, None, t, ref, 1, types_at, address())
            fn = metric_value
        elif kind == Ev.RMA_OP_COMPLETE_BLOCKING:
            match, complete = longs(p(3)), api.rma_complete

            def rma_complete(w, _, t, ref, match=match, complete=complete):
                return complete(w, None, t, ref, match())
            fn = rma_complete
        elif kind in (Ev.MPI_SEND, Ev.MPI_RECV):
            peer, msg_tag, size = ints(p(1)), ints(p(2)), shared(p(3))
            call = api.mpi_send if kind == Ev.MPI_SEND else api.mpi_recv

            def mpi_send_recv(w, _, t, ref, peer=peer, msg_tag=msg_tag, size=size, call=call):
                return call(w, None, t, peer(), ref, msg_tag(), size())
            fn = mpi_send_recv
        elif kind in (Ev.MPI_ISEND, Ev.MPI_IRECV):
            peer, msg_tag, size, request = ints(p(1)), ints(p(2)), shared(p(3)), longs(p(4))
            call = api.mpi_isend if kind == Ev.MPI_ISEND else api.mpi_irecv

            def mpi_isend_irecv(w, _, t, ref, peer=peer, msg_tag=msg_tag, size=size,
                                request=request, call=call):
                return call(w, None, t, peer(), ref, msg_tag(), size(), request())
            fn = mpi_isend_irecv
        elif kind in (Ev.MPI_ISEND_COMPLETE, Ev.MPI_IRECV_REQUEST):
            request = longs(p(4))
            call = (api.mpi_isend_complete if kind == Ev.MPI_ISEND_COMPLETE
                    else api.mpi_irecv_request)

            def mpi_request(w, _, t, ref, request=request, call=call):
                return call(w, None, t, request())
            fn = mpi_request
        elif kind == Ev.MPI_COLL_BEGIN:
            begin = api.mpi_coll_begin

            def mpi_coll_begin(w, _, t, ref, begin=begin):
                return begin(w, None, t)
            fn = mpi_coll_begin
        elif kind == Ev.MPI_COLL_END:
            op, root, sent, received = ints(p(1)), ints(p(2)), shared(p(3)), shared(p(4))
            end = api.mpi_coll_end

            def mpi_coll_end(w, _, t, ref, op=op, root=root, sent=sent, received=received,
                             end=end):
                return end(w, None, t, op(), ref, root(), sent(), received())
            fn = mpi_coll_end
        elif kind == Ev.PROGRAM_BEGIN:
            program_begin, name = api.program_begin, PROGRAM_NAME_STRING

            def begin_program(w, _, t, ref, program_begin=program_begin, name=name):
                return program_begin(w, None, t, name, 0, None)
            fn = begin_program
        elif kind == Ev.PROGRAM_END:
            program_end, status = api.program_end, ctypes.c_int64(UNDEFINED_EXIT_STATUS)

            def end_program(w, _, t, ref, program_end=program_end, status=status):
                return program_end(w, None, t, status)
            fn = end_program
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


class EventStream:
    """Writes the event table piece by piece, in groups of locations (``begin`` .. ``end``;
    one group of every location this process writes, unless ``EventGroups``): within a group
    pieces cover consecutive location ranges in order; each location is written in one go
    (the C library's writer of a location is opened once), and exactly once over all groups;
    locations no piece has get an empty event file, except when the groups name every
    location this process writes (``named_only``: parallel ``EventGroups``)."""

    def __init__(self, archive: OpenArchive, defs: ArchiveDefs,
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
        self.api = c_api()
        self.compiled = use_compiled(self.api)
        self.next_loc = 0  # locations before it are written
        self.done = self.reported = 0
        self.counts = np.zeros(self.n_locations, dtype=np.int64)
        #: the METRIC location holding each location's counter samples (-1: none), and
        #: whether (holder, metric class) has an instance there (else the class's samples stay
        #: on the recorder)
        self.holder = np.full(self.n_locations, -1, dtype=np.int64)
        self.instanced = np.zeros((self.n_locations, max(1, len(defs.metrics))), dtype=bool)
        for instance in defs.metric_instances:
            self.holder[instance.recorder] = instance.holder
            self.instanced[instance.holder, instance.metric] = True
        # a holder's file is written with its recorder's, by the process that writes that
        self.owned[self.holder[self.holder >= 0]] = False
        self.per_type = np.zeros(max(Ev) + 1, dtype=np.int64)
        self.attr_list = _otf2.AttributeList_New()
        self.attrs = address(self.attr_list)
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
        per_type = self.per_type if self.compiled else None  # the C loop counts types
        if per_type is None:
            self.per_type += np.bincount(events["type"], minlength=self.per_type.size)
        self._empty_until(first)
        # each location's writer is closed once the next one is open: the close (its events
        # flushed to its file, under the archive's lock) may then run in the archive's
        # closing thread while the next location is written
        previous = None
        try:
            for loc in range(first, last + 1):
                lo, hi = int(bounds[loc - first]), int(bounds[loc - first + 1])
                if not self.mine[loc]:
                    continue  # no events (checked above): another process writes its file
                rows, samples = self._split_samples(loc, events[lo:hi])
                for at, its_rows in ((loc, rows), (int(self.holder[loc]), samples)):
                    if at < 0:
                        continue
                    writer, writer_at = self.archive.location_writer(at)
                    if previous is not None:
                        self.archive.close_location_writer(previous)
                    previous = writer
                    self.counts[at] += its_rows.size
                    self._write_rows(writer_at, its_rows, per_type)
        finally:
            if previous is not None:
                self.archive.close_location_writer(previous)
        self.next_loc = last + 1

    def _split_samples(self, loc: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``rows`` of location ``loc`` as its own and its METRIC location's: the Metric events
        of a class instanced there (none without a holder). The moved events keep naming the
        class, not the instance: ViTE 1.2 crashes on a Metric event that names an instance."""
        holder = int(self.holder[loc])
        if holder < 0:
            return rows, rows[:0]
        instanced = self.instanced[holder]
        moved = rows["type"] == Ev.METRIC
        moved[moved] = instanced[rows["ref"][moved]]  # refs checked: < len(metrics)
        if not moved.any():
            return rows, rows[:0]
        return whole_rows.take(rows, ~moved), whole_rows.take(rows, moved)

    def _write_rows(self, writer_at: int, rows: np.ndarray, per_type: np.ndarray | None) -> None:
        """One location's rows, in pieces that report progress."""
        for start in range(0, rows.size, PROGRESS_EVENTS):
            stop = min(start + PROGRESS_EVENTS, rows.size)
            _write_location_events(self.api, writer_at, self.attrs, rows[start:stop], per_type)
            self.done += stop - start
            if self.progress is not None and self.done - self.reported >= PROGRESS_EVENTS:
                self.progress(self.done)
                self.reported = self.done

    def _empty_until(self, stop: int) -> None:
        for loc in range(self.next_loc, stop):
            if not self.mine[loc]:
                continue
            for at in (loc, int(self.holder[loc])):
                if at >= 0:
                    writer, _ = self.archive.location_writer(at)
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
    another, so the groups may be decided while writing (``parallel.WriteShare`` passes
    locations not yet written from a busy process to an idle one)."""

    def __init__(self, groups: Iterable[tuple[np.ndarray, np.ndarray | Iterable[np.ndarray]]]
                 ) -> None:
        self.groups = groups

