"""Decoded, matched and synchronized trace -> OTF2 definitions and the sorted event table.

This is docs/archive.md as code: the system tree, location groups (process group ref = MPI
rank), locations (rank r's main thread is location r), regions with roles, metrics, communicators
(the manifest's, "Cell mailboxes" and "DMA", both with rank = location ref), the DMA RMA
window, attributes, location properties and clock properties (its Time); and one event row
per OTF2 event, vectorized per record kind, sorted by (location, time, seq).

Choices where the contract leaves room (README "Mapping details"):
- records that are points in time but not OTF2 events (CTX_CREATE, CTX_LOAD, CTX_DESTROY,
  SIGNAL_WRITE, DECR_WRITE) are written as zero-length regions named after the call;
  CTX_RUN_BEGIN..CTX_RUN_END is the region "spe_context_run" on the PPE thread, unless the
  manifest declares a PPE region of that name (whose ENTER/LEAVE already mark the call; the
  same for every fixed region named after a call, on its core); HEARTBEAT
  records carry no information but time and are counted, not written;
- the SPE program run is the region named after the program (START..EXIT);
- a context's accelerator group hangs below the SPE complex of the chip its first recorded
  SPU belongs to (``first_spus``: its first CTX_SWITCH), below the node when no record names
  one; chips no context is known to have run on get no system tree node (the physical SPU
  of every switch is on its "off SPU" region);
- process groups are named "MPI Rank N" as Score-P names them;
- every location's Enter/Leave balance and nest, also where records were lost
  (``_balance``); the DMA window is created at the first and destroyed at the last event of
  each location issuing DMA;
- a node named "0" is written as "node 0", an application named "0" as machine "machine 0"
  (a free viewer aborts on a system tree node named "0");
- each SPE location carries ``cell2otf2::sync_bound_ticks`` (its worst bound in ticks, an
  OTF2 DOUBLE, +inf when unbounded) and
  ``cell2otf2::sync_intervals``: one ``FIRST:LAST:WIDTH`` entry per live interval of the
  context in interval order, joined by ``;``. FIRST and LAST are the archive timestamps
  (ticks) of the interval's first and last record that has a time (``-:-`` when none has);
  WIDTH is upper - lower of its offset in ticks with one decimal (the worst over its
  segments when undecidable wraps split it), or ``unbounded``.
  Example: ``"81234567:81290000:9.0;81299001:81350000:12.5"``.

It neither matches nor synchronizes; it reads ``records['time']`` as final.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields

import numpy as np

from . import __version__
from . import format as fmt
from .damage import DamageKind, DamageLog
from .decode import Decoded
from .manifest import RegionKind
from .match import Matches, MsgKind
from .model import (
    EVENT_DTYPE,
    ArchiveDefs,
    ClockProps,
    Communicator,
    DmaStyle,
    DomainKind,
    Ev,
    GroupType,
    Location,
    LocationGroup,
    LocationProperty,
    LocationType,
    LocKind,
    Metric,
    Paradigm,
    Region,
    RegionRole,
    RmaWindow,
    SystemNode,
    SystemNodeDomain,
)
from .timing import SyncResult

P = fmt.PpeCode
S = fmt.SpeCode


_MPI_CODES = np.array([P.MPI_SEND, P.MPI_RECV, P.MPI_ISEND, P.MPI_IRECV, P.MPI_ISEND_COMPLETE,
                       P.MPI_IRECV_REQUEST, P.MPI_COLL_BEGIN, P.MPI_COLL_END], dtype=np.uint16)

#: CBT collective op number -> OTF2 CollectiveOp value
OTF2_COLL_OP = np.array([0, 1, 2, 4, 6, 8, 12, 11, 13, 14], dtype=np.uint64)

_MPI_ROLES = (
    ("barrier", RegionRole.BARRIER),
    ("reduce_scatter", RegionRole.COLL_ALL2ALL),
    ("allreduce", RegionRole.COLL_ALL2ALL),
    ("allgather", RegionRole.COLL_ALL2ALL),
    ("alltoall", RegionRole.COLL_ALL2ALL),
    ("scan", RegionRole.COLL_ALL2ALL),
    ("bcast", RegionRole.COLL_ONE2ALL),
    ("scatter", RegionRole.COLL_ONE2ALL),
    ("gather", RegionRole.COLL_ALL2ONE),
    ("reduce", RegionRole.COLL_ALL2ONE),
)

# fixed extra regions: name -> role
_CELL_REGIONS = {
    "mfc_read_tag_status": RegionRole.RMA,
    "off SPU": RegionRole.FUNCTION,
    "spe_context_run": RegionRole.WRAPPER,
    "spe_context_create": RegionRole.WRAPPER,
    "spe_program_load": RegionRole.WRAPPER,
    "spe_context_destroy": RegionRole.WRAPPER,
    "spe_in_mbox_write": RegionRole.POINT2POINT,
    "spe_out_mbox_read": RegionRole.POINT2POINT,
    "spe_out_intr_mbox_read": RegionRole.POINT2POINT,
    "spe_signal_write": RegionRole.POINT2POINT,
    "spu_read_in_mbox": RegionRole.POINT2POINT,
    "spu_write_out_mbox": RegionRole.POINT2POINT,
    "spu_write_out_intr_mbox": RegionRole.POINT2POINT,
    "spu_read_signal": RegionRole.POINT2POINT,
    "spu_write_decrementer": RegionRole.FUNCTION,
}

#: the core whose calls the fixed regions stand for ("off SPU" is no call)
_CELL_CORE = {name: ("ppe" if name.startswith("spe_") else "spe")
              for name in _CELL_REGIONS if name != "off SPU"}

# span regions: (BEGIN code, END code, region name)
_SPANS = (
    (P.IN_MBOX_WRITE_BEGIN, P.IN_MBOX_WRITE_END, "spe_in_mbox_write"),
    (P.OUT_MBOX_READ_BEGIN, P.OUT_MBOX_READ_END, "spe_out_mbox_read"),
    (P.OUT_INTR_MBOX_READ_BEGIN, P.OUT_INTR_MBOX_READ_END, "spe_out_intr_mbox_read"),
    (P.CTX_RUN_BEGIN, P.CTX_RUN_END, "spe_context_run"),
    (S.IN_MBOX_READ_BEGIN, S.IN_MBOX_READ_END, "spu_read_in_mbox"),
    (S.OUT_MBOX_WRITE_BEGIN, S.OUT_MBOX_WRITE_END, "spu_write_out_mbox"),
    (S.OUT_INTR_MBOX_WRITE_BEGIN, S.OUT_INTR_MBOX_WRITE_END, "spu_write_out_intr_mbox"),
    (S.SIGNAL_READ_BEGIN, S.SIGNAL_READ_END, "spu_read_signal"),
    (S.TAG_WAIT_BEGIN, S.TAG_WAIT_END, "mfc_read_tag_status"),
)
# point records written as zero-length regions
_POINTS = (
    (P.CTX_CREATE, "spe_context_create"),
    (P.CTX_LOAD, "spe_program_load"),
    (P.CTX_DESTROY, "spe_context_destroy"),
    (P.SIGNAL_WRITE, "spe_signal_write"),
    (S.DECR_WRITE, "spu_write_decrementer"),
)

PROP_SYNC_BOUND = "cell2otf2::sync_bound_ticks"
PROP_PSEUDO = "cell2otf2::pseudo_location"
PROP_SYNC_INTERVALS = "cell2otf2::sync_intervals"


@dataclass
class EmitStats:
    events: int = 0
    messages: int = 0  # mailbox + signal + MPI messages written as send/receive pairs
    dma: int = 0
    dma_completed: int = 0
    heartbeats: int = 0
    records_written: int = 0  # records that produced at least one event
    by_type: dict[str, int] = field(default_factory=dict)

    def add(self, other: EmitStats) -> None:
        """Count ``other``'s events too (another group's or process's)."""
        for f in fields(self):
            if f.name != "by_type":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        for k, v in other.by_type.items():
            self.by_type[k] = self.by_type.get(k, 0) + v


class _Part:
    """One ``_Events.add`` call: events of one kind, each tied to the record that makes it."""

    __slots__ = ("rec", "pos", "offset", "typ", "ref", "params", "loc", "time", "pin", "sub",
                 "anchor", "seq")

    def __init__(self, rec, offset, typ, ref, params, loc=None, time=None) -> None:
        #: foreign events placed by rule, not by time: None (by time and seq), "start" (before
        #: a location's first event), "end" (after its last), "own" (right before the own
        #: Leave of record ``anchor``); ``sub`` orders events of one place
        self.pin: str | None = None
        self.sub = 0
        self.anchor = None
        #: the events' tie-break seq in the table when not their record's (pinned events: one
        #: that keeps the table in (location, time, seq) order)
        self.seq = None
        self.rec = rec  # record index per event, ascending (own) or as given (foreign)
        self.pos = None  # own events: index in the sequence of all own events, in order
        self.offset = offset  # seq offset within the record (0..7)
        self.typ = typ
        self.ref = ref  # scalar or array per event
        self.params = params  # name -> scalar, array per event, or a function of record rows
        self.loc = loc  # foreign events only: destination location per event
        self.time = time  # foreign events only: time per event

    @property
    def size(self) -> int:
        return int(self.rec.size)

    def take(self, sel) -> _Part:
        """The events ``sel`` (a slice or index array) of this part."""
        def cut(v):
            return v[sel] if isinstance(v, np.ndarray) and v.ndim else v
        part = _Part(self.rec[sel], self.offset, self.typ, cut(self.ref),
                     {k: cut(v) for k, v in self.params.items()}, cut(self.loc), cut(self.time))
        part.pos = cut(self.pos)
        part.pin, part.sub, part.anchor = self.pin, cut(self.sub), cut(self.anchor)
        part.seq = cut(self.seq)
        return part


def _runs(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of an ascending array and how often each occurs, in order."""
    start = np.flatnonzero(np.concatenate([[True], r[1:] != r[:-1]]))
    return r[start], np.diff(np.append(start, r.size))


def _param(v):
    """An event parameter as ``_Part`` keeps it: a function of the events' record rows
    (computed when a piece of the table is built) or an array / scalar (64-bit integer
    arrays whose values fit 32 bits are kept in 32 bits)."""
    if callable(v):
        return v
    v = np.asarray(v)
    if v.ndim and v.dtype.kind in "iu" and v.dtype.itemsize == 8 and v.size:
        if int(v.min()) >= 0 and int(v.max()) < 1 << 32:
            return v.astype(np.uint32)
    return v


class _Events:
    """Accumulates event columns, one ``add`` call per record kind (never per event), and lays
    them out in (location, time, seq) order without sorting the table.

    Every event belongs to a record ``seq // 8`` (its tie-break ``seq``). An *own* event is on
    its record's location at its record's time; records of one location are in program order
    with non-decreasing times (``timing.apply_times``), so a location's own events in (time,
    seq) order are simply its records' events in record order, each record's by seq offset
    and then in ``add`` order (what a stable sort by (loc, time, seq) gives too). They are
    placed by counting: events per record, then a running fill per record. A *foreign* event
    (a context switch's "off SPU" on the SPE location, a DMA message on its target) is
    inserted where (time, seq) puts it among its location's events: before the equal-time
    ones when its record precedes the location's records, after them otherwise.
    """

    def __init__(self, records: np.ndarray, n_locations: int,
                 loc_first_rec: np.ndarray | None = None) -> None:
        #: record indexes and event positions fit 32 bits below 2^31 records (half the memory)
        self.index = np.int32 if records.size < 1 << 30 else np.int64
        self.records = records
        self.rec_loc = records["loc"]
        self.rec_time = records["time"]
        self.loc_first_rec = loc_first_rec  # where each location's records start
        self.n_locations = n_locations
        self.own_parts: list[_Part] = []
        self.foreign: list[_Part] = []
        self.laid_out = False

    def own(self, rec: np.ndarray, offset: int, typ: int, ref, **p) -> None:
        """Events on the location of records ``rec``, at their times, tie-break seq
        ``8 * rec + offset``."""
        rec = np.asarray(rec).astype(self.index, copy=False)
        if rec.size:
            self.own_parts.append(_Part(rec, int(offset), int(typ), _param(ref),
                                        {k: _param(v) for k, v in p.items()}))

    def add(self, loc, typ: int, ref, time, seq, **p) -> None:
        """Events anywhere: each is own or foreign as its location and time say."""
        loc = np.asarray(loc)
        n = loc.size
        if n == 0:
            return
        seq = np.broadcast_to(np.asarray(seq, dtype=np.uint64), (n,))
        rec = (seq >> np.uint64(3)).astype(self.index)
        offsets = seq & np.uint64(7)
        time = np.broadcast_to(np.asarray(time), (n,))
        own = (self.rec_loc[rec] == loc) & (self.rec_time[rec] == time)
        ref = np.asarray(ref)
        params = {k: _param(v) for k, v in p.items()}

        def cut(v, sel):
            return v[sel] if isinstance(v, np.ndarray) and v.ndim else v

        for k in np.unique(offsets).tolist():
            for is_own in (True, False):
                sel = (offsets == k) & (own if is_own else ~own)
                if not sel.any():
                    continue
                idx = np.flatnonzero(sel) if not sel.all() else slice(None)
                part = _Part(rec[idx], int(k), int(typ), cut(ref, idx),
                             {name: cut(v, idx) for name, v in params.items()})
                if is_own:
                    self.own_parts.append(part)
                else:
                    part.loc = loc[idx].astype(np.int64)
                    part.time = time[idx].astype(np.int64)
                    self.foreign.append(part)

    #: order key of pinned events among the foreign events at one insertion point
    _PHASE = {"start": -1, None: 0, "own": 1, "end": 2}

    def pin(self, where: str, loc, typ: int, ref, sub=0, anchor=None, last: bool = False,
            seq=None, **p) -> None:
        """Foreign events placed by rule (``_Part.pin``) on locations ``loc`` (each with
        records): at ``where`` = "start" or "end" of the location (at its first or last event's
        time; ``last``: after the "end" events without it), or "own": right before the own
        Leave of record ``anchor`` (at its time). ``sub`` orders the events of one place."""
        loc = np.asarray(loc, dtype=np.int64)
        if not loc.size:
            return
        first = self.loc_first_rec
        if first is None:
            first = np.zeros(self.n_locations + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.rec_loc, minlength=self.n_locations), out=first[1:])
            self.loc_first_rec = first
        rec = (np.asarray(anchor, dtype=np.int64) if where == "own"
               else first[loc] if where == "start" else first[loc + 1] - 1)
        part = _Part(rec.astype(self.index), 7, int(typ), _param(np.broadcast_to(ref, loc.shape)
                                                                  .copy()),
                     {k: _param(v) for k, v in p.items()}, loc,
                     np.zeros(loc.size, dtype=np.int64))
        part.pin = where
        part.sub = np.broadcast_to(np.asarray(sub, dtype=np.int64) + (1 << 20 if last else 0),
                                   loc.shape).copy()
        part.anchor = rec if where == "own" else None
        part.seq = np.broadcast_to(np.asarray(
            seq if where == "own" else 0 if where == "start" else 1 << 63, dtype=np.uint64),
            loc.shape).copy()
        self.foreign.append(part)
        self.laid_out = False

    # -- layout

    def _own_pos(self, rec: np.ndarray, typ: int) -> np.ndarray:
        """Own positions of the events of type ``typ`` of records ``rec`` (one each)."""
        out = np.full(rec.size, -1, dtype=np.int64)
        for part in self.own_parts:
            if part.typ != typ or not part.size:
                continue
            at = np.minimum(np.searchsorted(part.rec, rec), part.size - 1)
            hit = part.rec[at] == rec
            out[hit] = part.pos[at[hit]]
        return out

    def _layout(self) -> None:
        """Own positions by counting; foreign insertion points; location starts."""
        if self.laid_out:
            return
        self.laid_out = True
        n_rec = self.rec_loc.size
        # parts with records out of order (messages, completions) are sorted by record once
        unique = []  # per part: each record at most once (strictly ascending)
        for i, part in enumerate(self.own_parts):
            r = part.rec
            if r.size > 1 and not (r[1:] >= r[:-1]).all():
                self.own_parts[i] = part = part.take(np.argsort(r, kind="stable"))
                r = part.rec
            unique.append(r.size < 2 or bool((r[1:] > r[:-1]).all()))
        counts = np.zeros(n_rec, dtype=np.int32)  # own events per record
        for part, once in zip(self.own_parts, unique, strict=True):
            if once:
                counts[part.rec] += 1
            else:  # ascending with repeats: add each run's length once
                r, n = _runs(part.rec)
                counts[r] += n
        total = sum(part.size for part in self.own_parts)
        base = np.zeros(n_rec + 1, dtype=self.index if total < 1 << 30 else np.int64)
        np.cumsum(counts, out=base[1:])
        fill = counts  # the counts' memory, as the running fill per record
        fill[:] = 0
        order = sorted(range(len(self.own_parts)), key=lambda k: self.own_parts[k].offset)
        for k in order:  # stable: add order kept among equal offsets
            part, r = self.own_parts[k], self.own_parts[k].rec
            if not unique[k]:  # several events of one record in one part (a wait completes
                #                several DMAs): in part order
                first, n = _runs(r)
                start = np.cumsum(n) - n  # where each run starts in the part
                occ = np.arange(r.size) - np.repeat(start, n)
                part.pos = (base[r] + fill[r] + occ).astype(self.index)
                fill[first] += n.astype(fill.dtype)
            else:
                part.pos = (base[r] + fill[r]).astype(self.index)
                fill[r] += 1
        del fill
        self.n_own = int(base[-1])
        # own events of location L: own positions [own_start[L], own_start[L + 1])
        rec_loc = self.rec_loc
        loc_first_rec = self.loc_first_rec
        if loc_first_rec is None:
            loc_first_rec = np.zeros(self.n_locations + 1, dtype=np.int64)
            np.cumsum(np.bincount(rec_loc, minlength=self.n_locations), out=loc_first_rec[1:])
            self.loc_first_rec = loc_first_rec
        self.own_start = base[loc_first_rec]
        # foreign events: destination location, insertion point among its own events
        if self.foreign:
            f_loc = np.concatenate([p.loc for p in self.foreign])
            f_time = np.concatenate([p.time for p in self.foreign])
            f_seq = np.concatenate([p.rec.astype(np.int64) * 8 + p.offset
                                    for p in self.foreign])
            own_time = np.zeros(self.n_own, dtype=np.int64)
            for part in self.own_parts:
                own_time[part.pos] = self.rec_time[part.rec]
            pins = [(p.pin, p.size) for p in self.foreign]
            f_pin = np.concatenate([np.full(n, self._PHASE[w], dtype=np.int8)
                                    for w, n in pins])
            f_sub = np.concatenate([np.broadcast_to(np.asarray(p.sub, np.int64), (p.size,))
                                    for p in self.foreign])
            insert = np.zeros(f_loc.size, dtype=np.int64)
            timed = f_pin == 0
            for loc in np.unique(f_loc[timed]).tolist():
                sel = np.flatnonzero((f_loc == loc) & timed)
                lo, hi = int(self.own_start[loc]), int(self.own_start[loc + 1])
                times = own_time[lo:hi]
                before = f_seq[sel] < 8 * int(loc_first_rec[loc])
                left = np.searchsorted(times, f_time[sel], side="left")
                right = np.searchsorted(times, f_time[sel], side="right")
                insert[sel] = lo + np.where(before, left, right)
            if not timed.all():
                self._place_pins(f_loc, f_time, f_pin, insert, own_time, timed)
            order = np.lexsort((f_sub, f_seq, f_time, f_pin, insert, f_loc))
            self.f_order = order
            self.f_loc = f_loc[order]
            self.f_insert = insert[order]
        else:
            self.f_order = np.zeros(0, dtype=np.int64)
            self.f_loc = np.zeros(0, dtype=np.int64)
            self.f_insert = np.zeros(0, dtype=np.int64)
        n_before = np.searchsorted(self.f_loc, np.arange(self.n_locations + 1), side="left")
        #: final index of location L's first event
        self.loc_start = self.own_start + n_before
        self.size = self.n_own + int(self.f_loc.size)

    def _place_pins(self, f_loc, f_time, f_pin, insert, own_time, timed) -> None:
        """Insertion points and times of the pinned foreign events (``pin``), in place; their
        parts' ``time`` too, for ``table``."""
        n = self.n_locations
        own_n = np.diff(self.own_start)
        # each location's first and last time over its own and its timed foreign events
        big = np.iinfo(np.int64).max
        t_first = np.full(n, big, dtype=np.int64)
        t_last = np.full(n, -1, dtype=np.int64)
        has = own_n > 0
        t_first[has] = own_time[self.own_start[:-1][has]]
        t_last[has] = own_time[self.own_start[1:][has] - 1]
        np.minimum.at(t_first, f_loc[timed], f_time[timed])
        np.maximum.at(t_last, f_loc[timed], f_time[timed])
        at = 0
        for part in self.foreign:
            k = slice(at, at + part.size)
            at += part.size
            if part.pin is None:
                continue
            loc = part.loc
            if part.pin == "start":
                insert[k], part.time = self.own_start[loc], t_first[loc]
            elif part.pin == "end":
                insert[k], part.time = self.own_start[loc + 1], t_last[loc]
            else:
                pos = self._own_pos(np.asarray(part.anchor), Ev.LEAVE)
                insert[k], part.time = pos, own_time[pos]
            f_time[k] = part.time

    def counts_per_type(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for part in (*self.own_parts, *self.foreign):
            out[part.typ] = out.get(part.typ, 0) + part.size
        return out

    def table(self, loc_lo: int = 0, loc_hi: int | None = None,
              buffer: np.ndarray | None = None) -> np.ndarray:
        """The events of locations ``loc_lo .. loc_hi - 1``, sorted by (loc, time, seq)
        (built in ``buffer`` when given)."""
        self._layout()
        loc_hi = self.n_locations if loc_hi is None else loc_hi
        start, stop = int(self.loc_start[loc_lo]), int(self.loc_start[loc_hi])
        own_lo, own_hi = int(self.own_start[loc_lo]), int(self.own_start[loc_hi])
        if buffer is None:
            e = np.zeros(stop - start, EVENT_DTYPE)
        else:
            e = buffer[:stop - start]
            e.view(np.uint8)[:] = 0  # one memset (fields left out of an event are zero)
        e["loc"] = np.repeat(np.arange(loc_lo, loc_hi, dtype=np.uint32),
                             np.diff(self.loc_start[loc_lo:loc_hi + 1]))
        # the range's records are one range too: their times as one contiguous column
        r_lo, r_hi = int(self.loc_first_rec[loc_lo]), int(self.loc_first_rec[loc_hi])
        times = np.ascontiguousarray(self.rec_time[r_lo:r_hi])
        # foreign events of the range and where they go
        f_lo, f_hi = np.searchsorted(self.f_loc, [loc_lo, loc_hi], side="left")
        f_ins = self.f_insert[f_lo:f_hi]
        f_final = f_ins + np.arange(f_lo, f_hi) - start
        # an own event at own position q moves by the foreign events inserted at or before it
        shift_all = self.f_insert  # sorted by (loc, insert): also sorted by insert

        def own_final(pos: np.ndarray) -> np.ndarray:
            return pos + np.searchsorted(shift_all, pos, side="right") - start

        own_range = np.array([own_lo, own_hi], dtype=self.index)  # same dtype: no conversion
        for part in self.own_parts:
            lo, hi = np.searchsorted(part.pos, own_range, side="left")
            if hi <= lo:
                continue
            q = part.take(slice(lo, hi))
            at = own_final(q.pos)
            e["time"][at] = times[q.rec - r_lo]
            self._fill(e, at, q)
        if f_hi > f_lo:
            sources = np.concatenate([np.full(p.size, i) for i, p in enumerate(self.foreign)])
            within = np.concatenate([np.arange(p.size) for p in self.foreign])
            idx = self.f_order[f_lo:f_hi]
            for i, part in enumerate(self.foreign):
                mine = sources[idx] == i
                if not mine.any():
                    continue
                q = part.take(within[idx[mine]])
                at = f_final[mine]
                e["time"][at] = q.time
                self._fill(e, at, q)
        return e

    def _fill(self, e: np.ndarray, at: np.ndarray, q: _Part) -> None:
        e["type"][at] = q.typ
        e["ref"][at] = q.ref
        e["seq"][at] = (q.rec.astype(np.uint64) * np.uint64(8) + np.uint64(q.offset)
                        if q.seq is None else q.seq)
        rows = None  # the events' record rows, gathered once for every parameter taken from them
        for name, v in q.params.items():
            if callable(v):
                if rows is None:
                    rows = np.take(self.records, q.rec)
                v = v(rows)
            e[name][at] = v


def build_definitions(dec: Decoded, result: SyncResult, first: int, last: int,
                      sync_intervals: dict[int, str] | None = None,
                      first_spu: dict[int, int] | None = None
                      ) -> tuple[ArchiveDefs, dict]:
    """All definitions; returns them and the lookups emit needs (region refs etc.).

    ``sync_intervals`` (location -> property value, as ``sync_intervals_property`` makes it)
    is given by a caller whose ``dec`` holds no records (the parallel converter's process 0,
    which gathers the values from the processes that hold them); else it is computed here.
    ``first_spu`` (SPE location -> physical SPU, as ``first_spus`` makes it) likewise.
    """
    man = dec.manifest
    p0 = man.processes[0]
    hz = man.timebase_hz
    realtime = p0.start_realtime_ns + round((first - p0.start_timebase) * 1e9 / hz)
    defs = ArchiveDefs(
        clock=ClockProps(timer_resolution=hz, global_offset=first,
                         trace_length=max(0, last - first), realtime_ns=int(realtime)),
        creator=f"cell2otf2 {__version__}",
    )
    machine = man.application or "Cell machine"
    machine = machine if machine != "0" else "machine 0"
    defs.system_nodes.append(SystemNode(machine, "machine", None, SystemNodeDomain.MACHINE))
    if first_spu is None:
        first_spu = first_spus(dec)
    # the chip each context's SPU belongs to (None: no CTX_SWITCH says which SPU it ran on)
    ctx_chip: dict[int, int | None] = {}
    for r, _, loc in dec.contexts[["rank", "ctx", "loc"]].tolist():
        node = man.nodes[man.node_of_rank(r)]
        spu = first_spu.get(int(loc), -1)
        ctx_chip[int(loc)] = (spu // node.spes_per_chip
                              if 0 <= spu < node.cell_chips * node.spes_per_chip else None)
    node_sys, chip_sys = [], {}  # chip_sys: (node index, chip) -> system tree node
    used_chips = {(man.node_of_rank(int(r)), ctx_chip[int(loc)])
                  for r, loc in dec.contexts[["rank", "loc"]].tolist()
                  if ctx_chip[int(loc)] is not None}
    for k, node in enumerate(man.nodes):
        name = node.name if node.name != "0" else "node 0"
        node_sys.append(len(defs.system_nodes))
        defs.system_nodes.append(SystemNode(name, "node", 0, SystemNodeDomain.SHARED_MEMORY))
        parent = node_sys[-1]
        for c in range(node.cell_chips):
            if (k, c) in used_chips:  # only chips an SPE context is known to have run on
                chip_sys[k, c] = len(defs.system_nodes)
                defs.system_nodes.append(SystemNode(
                    f"{name} chip {c} SPE complex", "spe complex", parent,
                    SystemNodeDomain.ACCELERATOR_DEVICE))
    n = man.n_ranks
    for p in man.processes:
        defs.location_groups.append(LocationGroup(f"MPI Rank {p.rank}", GroupType.PROCESS,
                                                  node_sys[man.node_of_rank(p.rank)]))
    # per rank: one accelerator group per chip its contexts ran on (chip order), then one
    # below the node itself for the contexts whose chip no record says
    accel_group: dict[int, int] = {}  # SPE location -> its group
    for r in range(n):
        locs = dec.contexts["loc"][dec.contexts["rank"] == r].tolist()
        k = man.node_of_rank(r)
        chips = sorted({ctx_chip[int(x)] for x in locs if ctx_chip[int(x)] is not None})
        for chip in [*chips, None]:
            mine = [int(x) for x in locs if ctx_chip[int(x)] == chip]
            if not mine:
                continue
            for x in mine:
                accel_group[x] = len(defs.location_groups)
            name = f"SPEs (rank {r})" if chip is None else f"SPEs (rank {r}, chip {chip})"
            defs.location_groups.append(LocationGroup(
                name, GroupType.ACCELERATOR,
                node_sys[k] if chip is None else chip_sys[k, chip], creating_group=r))
    for r, kind, idx in dec.locations.tolist():
        if kind == LocKind.PPE_THREAD:
            defs.locations.append(Location(f"PPE thread {idx} (rank {r})",
                                           LocationType.CPU_THREAD, r))
        elif kind == LocKind.MAIN_MEMORY:
            defs.locations.append(Location(f"Main memory (rank {r})", LocationType.CPU_THREAD,
                                           r))
            defs.location_properties.append(LocationProperty(len(defs.locations) - 1,
                                                             PROP_PSEUDO, "main memory"))
        else:
            defs.locations.append(Location(f"SPE ctx {idx} (rank {r})",
                                           LocationType.ACCELERATOR_STREAM,
                                           accel_group[len(defs.locations)]))
    # worst sync bound per SPE location
    doms = dec.domains
    width = result.upper - result.lower
    for loc in np.unique(doms["loc"][doms["loc"] >= 0]).tolist():
        w = width[doms["loc"] == loc]
        w = w[np.isfinite(w)]
        # a number (OTF2 DOUBLE): ticks, or +inf when no interval is bounded on both sides
        value = round(float(w.max()), 1) if w.size else float("inf")
        defs.location_properties.append(LocationProperty(int(loc), PROP_SYNC_BOUND, value))
    if sync_intervals is None:
        sync_intervals = sync_intervals_property(dec, result)
    for loc, value in sorted(sync_intervals.items()):
        defs.location_properties.append(LocationProperty(loc, PROP_SYNC_INTERVALS, value))
    # regions: manifest regions, programs, Cell regions
    region_ref: dict[int, int] = {}
    for reg in man.regions:
        region_ref[reg.id] = len(defs.regions)
        if reg.kind == RegionKind.mpi:
            low = reg.name.lower()
            role = next((r for key, r in _MPI_ROLES if key in low), RegionRole.POINT2POINT)
            defs.regions.append(Region(reg.name, role, Paradigm.MPI))
        elif reg.kind == RegionKind.spe_runtime:
            defs.regions.append(Region(reg.name, RegionRole.WRAPPER, Paradigm.CELL))
        elif reg.kind == RegionKind.user:
            defs.regions.append(Region(reg.name, RegionRole.USER, Paradigm.USER))
        else:
            defs.regions.append(Region(reg.name, RegionRole.FUNCTION, Paradigm.USER))
    program_ref: dict[int, int] = {}
    names = {r.name for r in defs.regions}
    for prog in man.programs:
        program_ref[prog.id] = len(defs.regions)
        name = prog.name if prog.name not in names else f"{prog.name} (SPE program)"
        defs.regions.append(Region(name, RegionRole.FUNCTION, Paradigm.CELL))
    cell_ref: dict[str, int | None] = {}
    declared = {(r.name, str(r.core)) for r in man.regions}
    for name, role in _CELL_REGIONS.items():
        if (name, _CELL_CORE.get(name)) in declared:
            # the tracer's ENTER/LEAVE of the manifest's region of that name already mark
            # the call on that core: its records give no second, nested region
            cell_ref[name] = None
            continue
        cell_ref[name] = len(defs.regions)
        defs.regions.append(Region(name if name not in names else f"{name} (cell2otf2)",
                                   role, Paradigm.CELL))
    metric_ref = {}
    for c in man.counters:
        metric_ref[c.id] = len(defs.metrics)
        defs.metrics.append(Metric(c.name, c.unit))
    comm_ref = {}
    for c in man.communicators:
        comm_ref[c.id] = len(defs.communicators)
        defs.communicators.append(Communicator(c.name, tuple(c.ranks), Paradigm.MPI))
    all_locs = tuple(range(len(defs.locations)))
    mbox_comm = len(defs.communicators)
    defs.communicators.append(Communicator("Cell mailboxes", all_locs, Paradigm.CELL))
    dma_comm = len(defs.communicators)
    defs.communicators.append(Communicator("DMA", all_locs, Paradigm.CELL))
    defs.rma_windows.append(RmaWindow("DMA", dma_comm))
    lookups = dict(region=region_ref, program=program_ref, cell=cell_ref, metric=metric_ref,
                   comm=comm_ref, mbox_comm=mbox_comm, dma_comm=dma_comm, window=0)
    return defs, lookups


def sync_intervals_property(dec: Decoded, result: SyncResult) -> dict[int, str]:
    """SPE location -> its ``cell2otf2::sync_intervals`` value (format: module docstring)."""
    doms = dec.domains
    rec = dec.records
    usable = result.usable if result.usable is not None else np.ones(rec.size, bool)
    has_time = usable & (rec["code"] != 0) & (rec["domain"] >= 0)
    none = np.iinfo(np.int64).max
    first = np.full(doms.size, none, dtype=np.int64)
    np.minimum.at(first, rec["domain"][has_time], rec["time"][has_time])
    last = np.full(doms.size, -1, dtype=np.int64)
    np.maximum.at(last, rec["domain"][has_time], rec["time"][has_time])
    width = result.upper - result.lower
    iv = np.flatnonzero((doms["kind"] == DomainKind.SPE_INTERVAL) & (doms["loc"] >= 0))
    # one entry per (location, interval): the segments after undecidable wraps are merged
    per: dict[tuple[int, int], list[int]] = {}
    for k in iv.tolist():
        per.setdefault((int(doms["loc"][k]), int(doms["interval"][k])), []).append(k)
    out: dict[int, list[str]] = {}
    for (loc, _), ks in sorted(per.items()):
        t0, t1 = int(first[ks].min()), int(last[ks].max())
        w = width[ks]
        w = w[np.isfinite(w)]
        out.setdefault(loc, []).append(
            (f"{t0}:{t1}:" if t0 != none else "-:-:")
            + (f"{float(w.max()):.1f}" if w.size else "unbounded"))
    return {loc: ";".join(parts) for loc, parts in out.items()}


def first_spus(dec: Decoded) -> dict[int, int]:
    """SPE location -> the physical SPU of its first CTX_SWITCH record in slot order (a STOP
    names the SPU of the run it ends, the context's first run; a START whose STOP was lost,
    the SPU of the run it begins). Contexts without CTX_SWITCH are left out: no record says
    where they ran."""
    rec = dec.records
    sw = np.flatnonzero(rec["code"] == P.CTX_SWITCH)
    if not sw.size:
        return {}
    rank = dec.locations["rank"][rec["loc"][sw]]
    key = np.lexsort((rec["slot"][sw], rec["a"][sw], rank))
    sw, rank = sw[key], rank[key]
    ctx = rec["a"][sw].astype(np.int64)
    first = np.ones(sw.size, dtype=bool)
    first[1:] = (rank[1:] != rank[:-1]) | (ctx[1:] != ctx[:-1])
    out = {}
    for r, c, spu in zip(rank[first].tolist(), ctx[first].tolist(),
                         (rec["c"][sw[first]] >> np.uint64(32)).tolist(), strict=True):
        loc = dec.loc_of(int(r), int(c))
        if loc >= 0:
            out[int(loc)] = int(spu)
    return out


def _lookup(table: dict[int, int], keys: np.ndarray) -> np.ndarray:
    """Map ids through ``table``; -1 where undefined."""
    keys = np.asarray(keys, dtype=np.int64)
    if not table:
        return np.full(keys.size, -1, dtype=np.int64)
    if 0 <= min(table) and max(table) < 1 << 16:  # ids as indexes into a table
        direct = np.full(max(table) + 2, -1, dtype=np.int64)  # last entry: out of range
        direct[list(table)] = list(table.values())
        return direct[np.clip(keys, -1, direct.size - 1)]
    ids = np.array(sorted(table), dtype=np.int64)
    refs = np.array([table[int(k)] for k in ids], dtype=np.int64)
    at = np.minimum(np.searchsorted(ids, keys), ids.size - 1)
    return np.where(ids[at] == keys, refs[at], -1)


def emit(dec: Decoded, matches: Matches, result: SyncResult, damage: DamageLog,
         dma_style: DmaStyle = DmaStyle.RMA, mpi_paired: np.ndarray | None = None,
         chunk_events: int | None = None, rma_id_offset: np.ndarray | None = None,
         sync_intervals: dict[int, str] | None = None
         ) -> tuple[ArchiveDefs, np.ndarray | EventChunks, EmitStats]:
    """Build the definitions and the sorted event table.

    ``mpi_paired`` (bool per record): the MPI point-to-point records whose message has both
    ends usable, when a parallel conversion decided it across processes; None: from
    ``matches.messages``. With ``chunk_events``, the table comes as ``EventChunks``: pieces of
    whole locations of about that many events each, built one at a time as they are iterated
    (for streaming into the writer with bounded memory). ``rma_id_offset`` (one per rank of the
    run): added to the RMA matching ids of each rank's transfers, when the records are a
    parallel conversion's share and the ids must count the whole run's transfers; None: the
    ids count the transfers given, in record order. ``sync_intervals``: the locations'
    ``sync_intervals_property`` when the caller has it already (``build_definitions``).
    """
    rec = dec.records
    usable = result.usable if result.usable is not None else np.ones(rec.size, bool)
    good = usable & (rec["code"] != 0)
    t = rec["time"]
    first = int(t[good].min()) if good.any() else 0
    last = int(t[good].max()) if good.any() else 0
    defs, lk = build_definitions(dec, result, first, last, sync_intervals)
    ev = _Events(rec, dec.locations.size, dec.location_starts())
    stats = EmitStats()
    code = rec["code"]
    loc = rec["loc"]
    written = np.zeros(rec.size, dtype=bool)
    counted = np.zeros(rec.size, dtype=bool)  # not written, already in the damage log
    loc_rank = dec.locations["rank"]

    def rank_of(i: np.ndarray) -> np.ndarray:  # ranks of records ``i``
        return loc_rank[loc[i]]

    # record indexes grouped by code (a stable radix sort of the 16-bit codes), once
    by_code, code_bounds = dec.code_index()

    def sel(*codes) -> np.ndarray:
        idx = [by_code[code_bounds[c]:code_bounds[c + 1]] for c in codes]
        i = idx[0] if len(idx) == 1 else np.sort(np.concatenate(idx))
        return i[good[i]]

    def undefined(idx: np.ndarray, what: str) -> None:
        if idx.size:
            counted[idx] = True
            i = int(idx[0])
            damage.add(DamageKind.undefined_id, dec.dump_names[int(loc_rank[loc[i]])],
                       int(rec["slot"][i]), int(idx.size), f"{what} never defined: "
                       "the record is not written")

    # ---- regions from ENTER/LEAVE (PPE and SPE)
    for enter, leave in ((P.ENTER, P.LEAVE), (S.ENTER, S.LEAVE)):
        for c, typ in ((enter, Ev.ENTER), (leave, Ev.LEAVE)):
            i = sel(c)
            ref = _lookup(lk["region"], rec["a"][i].astype(np.int64))
            undefined(i[ref < 0], "region id")
            i, ref = i[ref >= 0], ref[ref >= 0]
            ev.own(i, 0, typ, ref)
            written[i] = True
    # ---- SPE program runs: START .. EXIT as the program's region
    prog_of_loc = np.full(dec.locations.size, -1, dtype=np.int64)
    for c in dec.contexts.tolist():
        prog_of_loc[c[2]] = lk["program"].get(int(c[6]), -1)
    for c, typ in ((S.START, Ev.ENTER), (S.EXIT, Ev.LEAVE)):
        i = sel(c)
        ref = prog_of_loc[loc[i]]
        undefined(i[ref < 0], "SPE program of the context (CTX_LOAD missing or unknown id)")
        i, ref = i[ref >= 0], ref[ref >= 0]
        ev.own(i, 1 if typ == Ev.LEAVE else 0, typ, ref)
        written[i] = True
    # ---- spans BEGIN..END as regions
    for b_code, e_code, name in _SPANS:  # (no region: the manifest's region marks the call)
        ref = lk["cell"][name]
        i = sel(b_code)
        if ref is not None:
            ev.own(i, 0, Ev.ENTER, ref)
        written[i] = True
        i = sel(e_code)
        if ref is not None:
            ev.own(i, 4, Ev.LEAVE, ref)
        written[i] = True
    for p_code, name in _POINTS:
        ref = lk["cell"][name]
        i = sel(p_code)
        if ref is not None:
            ev.own(i, 0, Ev.ENTER, ref)
            ev.own(i, 4, Ev.LEAVE, ref)
        written[i] = True
    # ---- context switches: "off SPU" on the SPE location
    sw = sel(P.CTX_SWITCH)
    spe_loc = np.array([dec.loc_of(int(r), int(c)) for r, c in
                        zip(rank_of(sw).tolist(), rec["a"][sw].tolist(), strict=True)],
                       dtype=np.int64)
    stop = rec["b"][sw] == fmt.SwitchType.STOP
    ok = spe_loc >= 0
    i = sw[stop & ok]
    ev.add(spe_loc[stop & ok], Ev.ENTER_OFF_SPU, lk["cell"]["off SPU"], t[i], _seq(i),
           p1=rec["c"][i] >> np.uint64(32))
    i = sw[~stop & ok]
    ev.add(spe_loc[~stop & ok], Ev.LEAVE, lk["cell"]["off SPU"], t[i], _seq(i))
    written[sw[ok]] = True
    # ---- counters
    for c in (P.COUNTER, S.COUNTER):
        i = sel(c)
        ref = _lookup(lk["metric"], rec["a"][i].astype(np.int64))
        undefined(i[ref < 0], "counter id")
        i, ref = i[ref >= 0], ref[ref >= 0]
        ev.own(i, 0, Ev.METRIC, ref, p1=lambda rows: rows["b"])
        written[i] = True
    # ---- mailbox and signal messages (send inside the writer's span, receive before END's
    #      Leave)
    m = matches.messages
    m = m[good[m["send"]] & good[m["recv"]] & (m["kind"] != MsgKind.MPI)]
    msg_tag = m["kind"].astype(np.uint64)
    s, r = m["send"], m["recv"]
    ev.own(s, 1, Ev.MPI_SEND, lk["mbox_comm"],
           p1=m["recv_loc"], p2=msg_tag, p3=4)
    ev.own(r, 2, Ev.MPI_RECV, lk["mbox_comm"],
           p1=m["send_loc"], p2=msg_tag, p3=4)
    stats.messages += int(m.size)
    # SNDSIG records are written by their message only
    snd = sel(S.DMA)
    snd = snd[np.isin(rec["a"][snd], [0xA0, 0xA1, 0xA2])]
    written[snd] = True
    # ---- MPI
    mpi = matches.messages[matches.messages["kind"] == MsgKind.MPI]
    mpi = mpi[good[mpi["send"]] & good[mpi["recv"]]]
    paired = np.zeros(rec.size, dtype=bool)
    paired[mpi["send"]] = paired[mpi["recv"]] = True
    if mpi_paired is not None:
        paired |= mpi_paired & good
    _emit_mpi(ev, rec, loc, sel, lk, written, counted, undefined,
              np.array([len(c.members) for c in defs.communicators], dtype=np.uint64), paired)
    mm = matches.messages
    stats.messages += int((mm["kind"] == MsgKind.MPI).sum())
    # ---- DMA
    d = matches.dma
    keep = good[d["issue"]]
    if not keep.all():
        d = d[keep]
    del keep
    i = d["issue"]
    opcode = rec["a"][i]
    is_get = (opcode >= 0x40) & (opcode <= 0x46)
    comp = d["complete"]
    has_c = comp >= 0
    has_c[has_c] = good[comp[has_c]]
    stats.dma, stats.dma_completed = int(d.size), int(has_c.sum())
    written[i] = True
    if dma_style == DmaStyle.RMA:
        match_id = np.arange(d.size, dtype=np.uint32 if d.size < 1 << 32 else np.uint64)
        if rma_id_offset is not None:
            match_id = match_id + np.asarray(rma_id_offset, np.uint64)[rank_of(i)]
        # what only depends on the DMA record is taken from it when the table is built
        u8, low32 = np.uint64(8), np.uint64(0xFFFFFFFF)

        def packed(rows):  # tag | opcode << 8 | list elements << 16 (model.Ev)
            d_ = rows["d"]
            return ((d_ & np.uint64(0xFF)) | (rows["a"].astype(np.uint64) << u8)
                    | (((d_ >> u8) & np.uint64(0xFFFF)) << np.uint64(16)))

        for getput, typ in ((is_get, Ev.RMA_GET), (~is_get, Ev.RMA_PUT)):
            k = i[getput]
            ev.own(k, 0, typ, lk["window"], p1=d["target"][getput],
                   p2=lambda rows: rows["c"] & low32, p3=match_id[getput], p4=packed,
                   p5=lambda rows: rows["b"], p6=lambda rows: rows["c"] >> np.uint64(32))
        c = comp[has_c]
        ev.own(c, 3, Ev.RMA_OP_COMPLETE_BLOCKING, lk["window"],
               p3=match_id[has_c])
        # the window exists on each location that issues transfers, from its first event to
        # its last (as Score-P creates a device window where it is used)
        users = np.unique(loc[i]).astype(np.int64)
        ev.pin("start", users, Ev.RMA_WIN_CREATE, lk["window"])
        ev.pin("end", users, Ev.RMA_WIN_DESTROY, lk["window"], last=True)
    else:
        # GET: the target sends at issue, the SPE receives at completion; PUT the other way
        nbytes = rec["c"][i] & np.uint64(0xFFFFFFFF)
        tag = rec["d"][i] & np.uint64(0xFF)
        c_ok = has_c
        src_loc = np.where(is_get, d["target"], d["loc"])
        dst_loc = np.where(is_get, d["loc"], d["target"])
        k, c = i[c_ok], comp[c_ok]
        ev.add(src_loc[c_ok], Ev.MPI_SEND, lk["dma_comm"], t[k], _seq(k),
               p1=dst_loc[c_ok], p2=tag[c_ok], p3=nbytes[c_ok])
        ev.add(dst_loc[c_ok], Ev.MPI_RECV, lk["dma_comm"], t[c], _seq(c, 3),
               p1=src_loc[c_ok], p2=tag[c_ok], p3=nbytes[c_ok])
    # ---- what is left: heartbeats (time only) and anything not written
    hb = sel(S.HEARTBEAT)
    stats.heartbeats = int(hb.size)
    written[hb] = True
    _balance(ev, rec["slot"], loc_rank, dec.dump_names, damage)
    ev._layout()
    stats.events = int(ev.size)
    stats.records_written = int(written.sum())
    stats.by_type = {Ev(k).name: v for k, v in sorted(ev.counts_per_type().items()) if v}
    left = np.flatnonzero(good & ~written & ~counted)
    if left.size:
        undefined_codes = sorted({int(x) for x in code[left][:1000]})
        damage.add(DamageKind.undefined_id, dec.dump_names[int(loc_rank[loc[left[0]]])],
                   int(rec["slot"][left[0]]), int(left.size),
                   f"records not written (codes {[hex(x) for x in undefined_codes]})")
    if chunk_events is None:
        return defs, ev.table(), stats
    return defs, EventChunks(ev, chunk_events), stats


_REGION_EVENTS = {int(Ev.ENTER): 1, int(Ev.ENTER_OFF_SPU): 1, int(Ev.LEAVE): -1}


def _balance(ev: _Events, slot: np.ndarray, loc_rank: np.ndarray, dump_names: list[str],
             damage: DamageLog) -> None:
    """Keep every location's Enter and Leave events balanced and nested, also where records
    were lost: a region still open when an enclosing region is left is closed by a Leave
    right before that Leave, one still open at the location's end by a Leave at its last
    event (innermost first); a Leave of a region that is not open is not written. Each
    repair is counted (``unclosed_region``, ``leave_without_enter``).

    The check is vectorized over every Enter/Leave in final order: per location, the depth
    never below 0, 0 at the end, and at each depth level Enter and Leave alternating with the
    same region. Only the locations that fail it are walked one event at a time."""
    ev._layout()
    parts = [(True, k, p) for k, p in enumerate(ev.own_parts) if p.typ in _REGION_EVENTS]
    inv = None
    f_at = np.cumsum([0] + [p.size for p in ev.foreign])
    if ev.foreign:
        inv = np.empty(ev.f_order.size, dtype=np.int64)
        inv[ev.f_order] = np.arange(ev.f_order.size)
        parts += [(False, k, p) for k, p in enumerate(ev.foreign) if p.typ in _REGION_EVENTS]
    if not parts:
        return
    final, locs, step, refs, src, idx = [], [], [], [], [], []
    for own, k, p in parts:
        if own:
            pos = p.pos.astype(np.int64)
            final.append(pos + np.searchsorted(ev.f_insert, pos, side="right"))
            locs.append(ev.rec_loc[p.rec].astype(np.int64))
        else:
            j = inv[f_at[k]:f_at[k + 1]]
            final.append(ev.f_insert[j] + j)
            locs.append(p.loc.astype(np.int64))
        step.append(np.full(p.size, _REGION_EVENTS[p.typ], dtype=np.int64))
        refs.append(np.broadcast_to(np.asarray(p.ref, dtype=np.int64), (p.size,)))
        src.append(np.full(p.size, len(src), dtype=np.int64))
        idx.append(np.arange(p.size))
    order = np.argsort(np.concatenate(final), kind="stable")
    loc = np.concatenate(locs)[order]
    d = np.concatenate(step)[order]
    ref = np.concatenate(refs)[order]
    depth = np.cumsum(d)
    starts = np.flatnonzero(np.concatenate([[True], loc[1:] != loc[:-1]]))
    base = np.concatenate([[0], depth[starts[1:] - 1]])
    depth -= np.repeat(base, np.diff(np.append(starts, loc.size)))
    bad = np.zeros(loc.size, dtype=bool)
    ends = np.append(starts[1:], loc.size) - 1
    bad[starts] |= depth[ends] != 0
    low = np.minimum.reduceat(depth, starts) < 0
    bad[starts[low]] = True
    level = depth + (d < 0)
    g = np.lexsort((level, loc))  # stable: final order within a (location, level)
    lv, dd, rr, ll = level[g], d[g], ref[g], loc[g]
    new = np.concatenate([[True], (ll[1:] != ll[:-1]) | (lv[1:] != lv[:-1])])
    grp_start = np.maximum.accumulate(np.where(new, np.arange(g.size), 0))
    odd = (np.arange(g.size) - grp_start) % 2 == 1
    wrong = np.where(odd, dd != -1, dd != 1)
    wrong[1:] |= odd[1:] & (rr[1:] != rr[:-1])
    if not wrong.any() and not bad.any():
        return
    flagged = np.unique(np.concatenate([ll[wrong], loc[bad]]))
    src_all = np.concatenate(src)[order]
    idx_all = np.concatenate(idx)[order]
    drop: dict[int, list[int]] = {}
    closers: list[tuple] = []  # (where, loc, ref, sub, anchor: (own?, part, index))
    unclosed: dict[int, list[int]] = {}  # rank -> slots of the Enters closed
    unopened: dict[int, list[int]] = {}

    def rec_of(j: int) -> int:
        return int(parts[int(src_all[j])][2].rec[int(idx_all[j])])

    for L in flagged.tolist():
        lo = int(np.searchsorted(loc, L, side="left"))
        hi = int(np.searchsorted(loc, L, side="right"))
        rank = int(loc_rank[L])
        stack: list[int] = []
        for j in range(lo, hi):
            if d[j] > 0:
                stack.append(j)
                continue
            r = int(ref[j])
            open_refs = [int(ref[x]) for x in stack]
            if open_refs and open_refs[-1] == r:
                stack.pop()
            elif r in open_refs:
                sub = 0
                while int(ref[stack[-1]]) != r:
                    x = stack.pop()
                    closers.append(("before", L, int(ref[x]), sub, j))
                    unclosed.setdefault(rank, []).append(int(slot[rec_of(x)]))
                    sub += 1
                stack.pop()
            else:
                drop.setdefault(int(src_all[j]), []).append(int(idx_all[j]))
                unopened.setdefault(rank, []).append(int(slot[rec_of(j)]))
        for sub, x in enumerate(reversed(stack)):
            closers.append(("end", L, int(ref[x]), sub, None))
            unclosed.setdefault(rank, []).append(int(slot[rec_of(x)]))
    for kind, found, what in ((DamageKind.unclosed_region, unclosed, "region left open"),
                              (DamageKind.leave_without_enter, unopened,
                               "Leave of a region not open")):
        for rank, slots in found.items():
            damage.add(kind, dump_names[rank], min(slots), len(slots),
                       f"{what}: repaired so that Enter and Leave balance")
    # closers first (they refer to the layout before the drops), then the drops
    for where, L, r, sub, j in closers:
        if where == "end":
            ev.pin("end", [L], Ev.LEAVE, r, sub=sub)
            continue
        own, _, p = parts[int(src_all[j])]
        e = int(idx_all[j])
        if own:
            ev.pin("own", [L], Ev.LEAVE, r, sub=sub, anchor=[int(p.rec[e])],
                   seq=int(p.rec[e]) * 8 + p.offset)
        else:  # right before a foreign Leave: its time and seq, a lower sub
            part = _Part(p.rec[e:e + 1], p.offset, int(Ev.LEAVE), _param(np.array([r])), {},
                         np.array([L], dtype=np.int64), np.array([int(p.time[e])]))
            part.sub = np.array([sub - (1 << 10)], dtype=np.int64)
            ev.foreign.append(part)
    for s, gone in drop.items():
        own, k, p = parts[s]
        keep = np.ones(p.size, dtype=bool)
        keep[gone] = False
        if own:
            ev.own_parts[k] = p.take(np.flatnonzero(keep))
        else:
            ev.foreign[k] = p.take(np.flatnonzero(keep))
    ev.laid_out = False


class EventChunks:
    """The event table in pieces of whole locations, each sorted by (loc, time, seq), built
    when iterated (so the whole table never exists at once). ``size`` = events in all
    pieces; ``seconds`` / ``cpu_seconds`` = wall / CPU time spent building them so far."""

    def __init__(self, events: _Events, chunk_events: int) -> None:
        self._events = events
        self.size = events.size
        self.seconds = self.cpu_seconds = 0.0
        #: build every piece in one buffer: a piece is then valid only until the next one is
        #: built (for a consumer that is done with each piece before taking the next, like
        #: the writer; it saves fresh memory, which costs page faults, per piece)
        self.reuse_buffer = False
        self.chunk_events = chunk_events
        self.n_locations = events.n_locations
        #: events before each location (one more entry than locations)
        self.loc_start = events.loc_start
        cuts = [0]
        while cuts[-1] < self.n_locations:
            cuts.append(self.piece_end(cuts[-1]))
        self.ranges = list(zip(cuts[:-1], cuts[1:], strict=True))

    def piece_end(self, lo: int, stop: int | None = None) -> int:
        """End (exclusive) of the piece that starts at location ``lo``: after the location where
        the running count reaches ``chunk_events``, or ``stop`` (default: every location)."""
        stop = self.n_locations if stop is None else stop
        starts = self.loc_start
        end = int(np.searchsorted(starts[:stop], starts[lo] + self.chunk_events, side="left"))
        return min(max(end, lo + 1), stop)

    def counts(self) -> np.ndarray:
        """Events per location (int64, one per location), known before any piece is built."""
        return np.diff(self.loc_start).astype(np.int64)

    def build(self, lo: int, hi: int, buffer: np.ndarray | None = None) -> np.ndarray:
        """The events of locations ``lo`` .. ``hi`` - 1 (in ``buffer`` when given, which must
        hold them), counting the time into ``seconds`` / ``cpu_seconds``."""
        t0, c0 = time.perf_counter(), time.process_time()
        table = self._events.table(lo, hi, buffer)
        self.seconds += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        return table

    def piece_buffer(self) -> np.ndarray | None:
        """One buffer for the largest piece of ``ranges`` (None unless ``reuse_buffer``)."""
        if not (self.reuse_buffer and self.ranges):
            return None
        starts = self.loc_start
        largest = max(int(starts[hi] - starts[lo]) for lo, hi in self.ranges)
        return np.empty(largest, EVENT_DTYPE)

    def __iter__(self):
        buffer = self.piece_buffer()
        for lo, hi in self.ranges:
            yield self.build(lo, hi, buffer)


class _Sparse:
    """A column known at some records only (``index``, ascending): ``column[i]`` for i among
    them."""

    def __init__(self, index: np.ndarray, values: np.ndarray) -> None:
        self.index, self.values = index, values

    def __getitem__(self, i: np.ndarray) -> np.ndarray:
        return self.values[np.searchsorted(self.index, i)]


def _seq(i: np.ndarray, offset: int = 0) -> np.ndarray:
    """Tie-break of the events of records ``i``: 8 * record index + offset."""
    return i.astype(np.uint64) * np.uint64(8) + np.uint64(offset)


def _emit_mpi(ev, rec, loc, sel, lk, written, counted, undefined, comm_size,
              paired) -> None:
    """MPI records. A point-to-point record is written only when ``match`` paired it with its
    partner (``paired``) and both have a time: OTF2 readers pair sends and receives by order,
    so one without its partner would shift every later message of its channel onto the wrong
    partner. The others were counted by ``match`` (unmatched_mpi, undefined_id) or have no
    time; their call regions are still written; an ISEND's ISEND_COMPLETE and an IRECV's
    IRECV_REQUEST go with it. A collective whose root is outside its communicator is counted
    here and not written."""
    # the MPI records' fields, indexed like the records but held for MPI records only
    mpi = np.sort(np.concatenate([sel(c) for c in _MPI_CODES.tolist()]))
    comm = _Sparse(mpi, _lookup(lk["comm"], rec["a"][mpi].astype(np.int64)))
    size = _Sparse(mpi, np.where(comm.values >= 0, comm_size[np.maximum(comm.values, 0)], 0))
    b, c = rec["b"][mpi], rec["c"][mpi]
    peer, tag = _Sparse(mpi, b >> np.uint64(32)), _Sparse(mpi, b & np.uint64(0xFFFFFFFF))
    req, low = _Sparse(mpi, c >> np.uint64(32)), _Sparse(mpi, c & np.uint64(0xFFFFFFFF))
    for c, typ in ((P.MPI_SEND, Ev.MPI_SEND), (P.MPI_RECV, Ev.MPI_RECV)):
        i = sel(c)
        ok = (comm[i] >= 0) & (peer[i] < size[i]) & paired[i]
        counted[i[~ok]] = True
        i = i[ok]
        ev.own(i, 1, typ, comm[i], p1=peer[i], p2=tag[i], p3=rec["c"][i])
        written[i] = True
    dropped = np.zeros(rec.size, dtype=bool)
    issued = []
    for c, typ in ((P.MPI_ISEND, Ev.MPI_ISEND), (P.MPI_IRECV, Ev.MPI_IRECV)):
        i = sel(c)
        issued.append(i)
        ok = (comm[i] >= 0) & (peer[i] < size[i]) & paired[i]
        counted[i[~ok]] = dropped[i[~ok]] = True
        i = i[ok]
        ev.own(i, 1, typ, comm[i], p1=peer[i], p2=tag[i], p3=low[i],
               p4=req[i])
        written[i] = True
    for (c, typ), requests, later in zip(((P.MPI_ISEND_COMPLETE, Ev.MPI_ISEND_COMPLETE),
                                          (P.MPI_IRECV_REQUEST, Ev.MPI_IRECV_REQUEST)),
                                         issued, (True, False), strict=True):
        i = sel(c)
        # a request is pending from its ISEND to its ISEND_COMPLETE (from its IRECV_REQUEST
        # to its IRECV) on one location: in (location, request, program order) order the
        # partner of a dropped ISEND is the next entry, of a dropped IRECV the previous one
        both = np.concatenate([requests, i])
        key = (loc[both].astype(np.uint64) << np.uint64(32)) | (req[both] & np.uint64(2**32 - 1))
        both, key = both[np.lexsort((both, key))], np.sort(key)
        first, second = (both[:-1], both[1:]) if later else (both[1:], both[:-1])
        go = (key[1:] == key[:-1]) & dropped[first] & (rec["code"][second] == c)
        counted[second[go]] = True
        i = i[~counted[i]]
        ev.own(i, 1, typ, 0, p4=req[i])
        written[i] = True
    i = sel(P.MPI_COLL_BEGIN)
    ev.own(i, 1, Ev.MPI_COLL_BEGIN, 0)
    written[i] = True
    i = sel(P.MPI_COLL_END)
    i = i[comm[i] >= 0]
    bad_root = (tag[i] >= size[i]) & (tag[i] != np.uint64(0xFFFFFFFF))
    undefined(i[bad_root], "collective root (a rank outside its communicator)")
    i = i[~bad_root]
    op = np.minimum(peer[i], np.uint64(9)).astype(np.int64)
    ev.own(i, 1, Ev.MPI_COLL_END, comm[i], p1=OTF2_COLL_OP[op],
           p2=tag[i], p3=req[i], p4=low[i])
    written[i] = True
