"""The generic event-table engine: ``EventTable`` collects OTF2 events in parts (one call per
record kind, never per event), each tied to the record that makes it, and lays them out in
(location, time, seq) order by counting instead of sorting; ``table`` builds the packed
``EVENT_DTYPE`` rows of a range of locations, ``EventChunks`` hands them out in pieces of whole
locations; ``SparseColumn``, ``event_seq`` and ``lookup_refs`` are the column helpers the
mapping uses. It knows no CBT record and no definition: which events each record gives is
``emit.families``', their Enter/Leave repair ``emit.balance``'.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..model import EVENT_DTYPE, Ev
from ..native import pages
from .kernels import RecordBits, fill_rows, layout_own

#: an event parameter as ``EventPart`` keeps it (``event_param``): one value for all events,
#: one per event, the record bits it is taken from, or a function of the events' record rows
EventParam = np.ndarray | int | RecordBits | Callable[[np.ndarray], np.ndarray]


class EventPart:
    """One ``EventTable.add`` call: events of one kind, each tied to the record that makes it."""

    __slots__ = ("rec", "pos", "offset", "typ", "ref", "params", "loc", "time", "pin", "sub",
                 "anchor", "seq")

    def __init__(self, rec: np.ndarray, offset: int, typ: int | np.ndarray, ref: EventParam,
                 params: dict[str, EventParam], loc: np.ndarray | None = None,
                 time: np.ndarray | None = None) -> None:
        #: foreign events placed by rule, not by time: None (by time and seq), "start" (before
        #: a location's first event), "end" (after its last), "own" (right before the own
        #: Leave of record ``anchor``); ``sub`` orders events of one place
        self.pin: str | None = None
        self.sub: int | np.ndarray = 0
        self.anchor: np.ndarray | None = None
        #: the events' tie-break seq in the table when not their record's (pinned events: one
        #: that keeps the table in (location, time, seq) order)
        self.seq: np.ndarray | None = None
        self.rec = rec  # record index per event, ascending (own) or as given (foreign)
        #: own events: index in the sequence of all own events, in order (set by ``layout``)
        self.pos: np.ndarray | None = None
        self.offset = offset  # seq offset within the record (0..7)
        self.typ = typ  # Ev, or uint8 per event (never for Enter / Leave: ``one_type``)
        self.ref = ref  # scalar or array per event
        self.params = params  # name -> scalar, array per event, or a function of record rows
        self.loc = loc  # foreign events only: destination location per event
        self.time = time  # foreign events only: time per event

    @property
    def size(self) -> int:
        return int(self.rec.size)

    def take(self, sel: slice | np.ndarray) -> EventPart:
        """The events ``sel`` (a slice or index array) of this part."""
        def cut(v):
            return v[sel] if isinstance(v, np.ndarray) and v.ndim else v
        part = EventPart(self.rec[sel], self.offset, cut(self.typ), cut(self.ref),
                         {k: cut(v) for k, v in self.params.items()}, cut(self.loc),
                         cut(self.time))
        part.pos = cut(self.pos)
        part.pin, part.sub, part.anchor = self.pin, cut(self.sub), cut(self.anchor)
        part.seq = cut(self.seq)
        return part


def event_param(v: EventParam) -> EventParam:
    """An event parameter as ``EventPart`` keeps it: a function of the events' record rows
    (computed when a piece of the table is built) or an array / scalar (64-bit integer
    arrays whose values fit 32 bits are kept in 32 bits)."""
    if callable(v) or isinstance(v, RecordBits):
        return v
    v = np.asarray(v)
    if v.ndim and v.dtype.kind in "iu" and v.dtype.itemsize == 8 and v.size:
        if int(v.min()) >= 0 and int(v.max()) < 1 << 32:
            return v.astype(np.uint32)
    return v


class EventTable:
    """Accumulates event columns, one ``add`` call per record kind (never per event), and lays
    them out in (location, time, seq) order without sorting the table.

    Every event belongs to a record ``seq // 8`` (its tie-break ``seq``). An *own* event is on
    its record's location at its record's time; records of one location are in program order
    with non-decreasing times (``synchronize.apply_times``), so a location's own events in (time,
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
        self.index: type[np.signedinteger[Any]] = (np.int32 if records.size < 1 << 30
                                                   else np.int64)
        self.records = records
        self.rec_loc = records["loc"]
        self.rec_time = records["time"]
        self.loc_first_rec = loc_first_rec  # where each location's records start
        self.n_locations = n_locations
        self.own_parts: list[EventPart] = []
        self.foreign: list[EventPart] = []
        self.laid_out = False

    def own(self, rec: np.ndarray, offset: int, typ: int | np.ndarray, ref, **p) -> None:
        """Events on the location of records ``rec``, at their times, tie-break seq
        ``8 * rec + offset``; ``typ`` one type for all, or one per event (uint8; for events
        that are neither Enter nor Leave, which are ``one_type``)."""
        rec = np.asarray(rec).astype(self.index, copy=False)
        typ = np.asarray(typ, dtype=np.uint8) if isinstance(typ, np.ndarray) else int(typ)
        if rec.size:
            self.own_parts.append(EventPart(rec, int(offset), typ, event_param(ref),
                                            {k: event_param(v) for k, v in p.items()}))

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
        params = {k: event_param(v) for k, v in p.items()}

        def cut(v, sel):
            return v[sel] if isinstance(v, np.ndarray) and v.ndim else v

        for k in np.unique(offsets).tolist():
            for is_own in (True, False):
                sel = (offsets == k) & (own if is_own else ~own)
                if not sel.any():
                    continue
                idx = np.flatnonzero(sel) if not sel.all() else slice(None)
                part = EventPart(rec[idx], int(k), int(typ), cut(ref, idx),
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
        """Foreign events placed by rule (``EventPart.pin``) on locations ``loc`` (each with
        records): at ``where`` = "start" or "end" of the location (at its first or last event's
        time; ``last``: after the "end" events without it), or "own": right before the own
        Leave of record ``anchor`` (at its time). ``sub`` orders the events of one place."""
        loc = np.asarray(loc, dtype=np.int64)
        if not loc.size:
            return
        first = self._loc_first_rec()
        rec = (np.asarray(anchor, dtype=np.int64) if where == "own"
               else first[loc] if where == "start" else first[loc + 1] - 1)
        part = EventPart(rec.astype(self.index), 7, int(typ),
                         event_param(np.broadcast_to(ref, loc.shape).copy()),
                         {k: event_param(v) for k, v in p.items()}, loc,
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

    def _loc_first_rec(self) -> np.ndarray:
        """Where each location's records start (the records are ordered by location), and
        the end of the last."""
        first = self.loc_first_rec
        if first is None:
            first = np.zeros(self.n_locations + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.rec_loc, minlength=self.n_locations), out=first[1:])
            self.loc_first_rec = first
        return first

    def has_timed_events(self) -> np.ndarray:
        """Per location, whether it has an event placed by its own time (own, or foreign and
        not pinned): where "start" and "end" pins find a time."""
        has = np.zeros(self.n_locations, dtype=bool)
        if self.own_parts:  # records ordered by location: which locations' runs hold a mark
            marked = np.zeros(self.rec_loc.size, dtype=bool)
            for part in self.own_parts:
                marked[part.rec] = True
            first = self._loc_first_rec()
            held = np.flatnonzero(first[1:] > first[:-1])
            has[held] = np.logical_or.reduceat(marked, first[held])
        for part in self.foreign:
            if part.pin is None and part.loc is not None:
                has[part.loc] = True
        return has

    # -- layout

    def _own_pos(self, rec: np.ndarray, typ: int) -> np.ndarray:
        """Own positions of the events of type ``typ`` of records ``rec`` (one each)."""
        out = np.full(rec.size, -1, dtype=np.int64)
        for part in self.own_parts:
            if one_type(part) != typ or not part.size:
                continue
            assert part.pos is not None  # called after ``layout``
            at = np.minimum(np.searchsorted(part.rec, rec), part.size - 1)
            hit = part.rec[at] == rec
            out[hit] = part.pos[at[hit]]
        return out

    def layout(self) -> None:
        """Own positions by counting; foreign insertion points; location starts."""
        if self.laid_out:
            return
        self.laid_out = True
        n_rec = self.rec_loc.size
        # parts with records out of order (messages, completions) are sorted by record once
        for i, part in enumerate(self.own_parts):
            r = part.rec
            if r.size > 1 and not (r[1:] >= r[:-1]).all():
                self.own_parts[i] = part.take(np.argsort(r, kind="stable"))
        total = sum(part.size for part in self.own_parts)
        base = np.empty(n_rec + 1, dtype=self.index if total < 1 << 30 else np.int64)
        # fill order: by seq offset, add order kept among equal offsets (a stable sort)
        fill_order = sorted(range(len(self.own_parts)),
                            key=lambda k: self.own_parts[k].offset)
        for k, pos in zip(fill_order,
                          layout_own(base, [self.own_parts[k].rec for k in fill_order],
                                     self.index), strict=True):
            self.own_parts[k].pos = pos
        self.n_own = int(base[-1])
        # own events of location L: own positions [own_start[L], own_start[L + 1])
        loc_first_rec = self._loc_first_rec()
        self.own_start = base[loc_first_rec]
        # foreign events: destination location, insertion point among its own events
        if self.foreign:
            f_loc = np.concatenate([p.loc for p in self.foreign])
            f_time = np.concatenate([p.time for p in self.foreign])
            f_seq = np.concatenate([p.rec.astype(np.int64) * 8 + p.offset
                                    for p in self.foreign])
            # a record's own events are consecutive, at its time: the times of own positions
            # are read off the records where needed, never for every own event (each pass
            # over the record rows' times costs a pass over the whole record table)

            def own_time(pos: np.ndarray) -> np.ndarray:
                return self.rec_time[np.searchsorted(base, pos, side="right") - 1]
            pins = [(p.pin, p.size) for p in self.foreign]
            f_pin = np.concatenate([np.full(n, self._PHASE[w], dtype=np.int8)
                                    for w, n in pins])
            f_sub = np.concatenate([np.broadcast_to(np.asarray(p.sub, np.int64), (p.size,))
                                    for p in self.foreign])
            insert = np.zeros(f_loc.size, dtype=np.int64)
            timed = f_pin == 0
            for loc in np.unique(f_loc[timed]).tolist():
                sel = np.flatnonzero((f_loc == loc) & timed)
                lo = int(self.own_start[loc])
                r_lo, r_hi = int(loc_first_rec[loc]), int(loc_first_rec[loc + 1])
                times = np.repeat(self.rec_time[r_lo:r_hi], np.diff(base[r_lo:r_hi + 1]))
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

    def _place_pins(self, f_loc, f_time, f_pin, insert, own_time: Callable, timed) -> None:
        """Insertion points and times of the pinned foreign events (``pin``), in place; their
        parts' ``time`` too, for ``table``."""
        n = self.n_locations
        own_n = np.diff(self.own_start)
        # each location's first and last time over its own and its timed foreign events
        big = np.iinfo(np.int64).max
        t_first = np.full(n, big, dtype=np.int64)
        t_last = np.full(n, -1, dtype=np.int64)
        has = own_n > 0
        t_first[has] = own_time(self.own_start[:-1][has])
        t_last[has] = own_time(self.own_start[1:][has] - 1)
        np.minimum.at(t_first, f_loc[timed], f_time[timed])
        np.maximum.at(t_last, f_loc[timed], f_time[timed])
        at = 0
        for part in self.foreign:
            k = slice(at, at + part.size)
            at += part.size
            if part.pin is None:
                continue
            loc = part.loc
            assert loc is not None  # every foreign part has its locations
            if part.pin == "start":
                insert[k], part.time = self.own_start[loc], t_first[loc]
            elif part.pin == "end":
                insert[k], part.time = self.own_start[loc + 1], t_last[loc]
            else:
                pos = self._own_pos(np.asarray(part.anchor), Ev.LEAVE)
                insert[k], part.time = pos, own_time(pos)
            f_time[k] = part.time

    def counts_per_type(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for part in (*self.own_parts, *self.foreign):
            if isinstance(part.typ, np.ndarray):
                n = np.bincount(part.typ, minlength=1)
                for k in np.flatnonzero(n).tolist():
                    out[k] = out.get(k, 0) + int(n[k])
            else:
                out[part.typ] = out.get(part.typ, 0) + part.size
        return out

    def table(self, loc_lo: int = 0, loc_hi: int | None = None,
              buffer: np.ndarray | None = None) -> np.ndarray:
        """The events of locations ``loc_lo .. loc_hi - 1``, sorted by (loc, time, seq)
        (built in ``buffer`` when given)."""
        self.layout()
        loc_hi = self.n_locations if loc_hi is None else loc_hi
        start, stop = int(self.loc_start[loc_lo]), int(self.loc_start[loc_hi])
        own_lo, own_hi = int(self.own_start[loc_lo]), int(self.own_start[loc_hi])
        e = np.empty(stop - start, EVENT_DTYPE) if buffer is None else buffer[:stop - start]
        # foreign events of the range and where they go
        f_lo, f_hi = np.searchsorted(self.f_loc, [loc_lo, loc_hi], side="left")
        f_ins = self.f_insert[f_lo:f_hi]
        # own events: each part's rows of the range, every byte written (an own event at own
        # position q lands at q - own_lo plus the range's foreign events inserted at or
        # before q)
        own_range = np.array([own_lo, own_hi], dtype=self.index)  # same dtype: no conversion
        bounds = self.own_start[loc_lo:loc_hi + 1].astype(np.int64)
        parts = []
        for part in self.own_parts:
            assert part.pos is not None  # ``layout`` placed every own part
            lo, hi = np.searchsorted(part.pos, own_range, side="left")
            if hi <= lo:
                continue
            q = part.take(slice(lo, hi))
            parts.append((q.rec, q.pos, q.typ, q.offset, {"ref": q.ref, **q.params}))
        fill_rows(e, self.records, parts, own_lo, own_hi, f_ins, loc_lo, bounds)
        if f_hi > f_lo:
            f_final = f_ins + np.arange(f_lo, f_hi) - start
            e.view(np.uint8).reshape(e.size, -1)[f_final] = 0  # fields left out are zero
            e["loc"][f_final] = self.f_loc[f_lo:f_hi]
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

    def _fill(self, e: np.ndarray, at: np.ndarray, q: EventPart) -> None:
        e["type"][at] = q.typ
        e["ref"][at] = q.ref
        e["seq"][at] = (q.rec.astype(np.uint64) * np.uint64(8) + np.uint64(q.offset)
                        if q.seq is None else q.seq)
        self._fill_params(e, at, q)

    def _fill_params(self, e: np.ndarray, at: np.ndarray, q: EventPart) -> None:
        rows = None  # the events' record rows, gathered once for every parameter taken from them
        for name, v in q.params.items():
            if isinstance(v, RecordBits):
                v = v.values(self.records, q.rec)
            elif callable(v):
                if rows is None:
                    rows = np.take(self.records, q.rec)
                v = v(rows)
            e[name][at] = v


class EventChunks:
    """The event table in pieces of whole locations, each sorted by (loc, time, seq), built
    when iterated (so the whole table never exists at once). ``size`` = events in all
    pieces; ``seconds`` / ``cpu_seconds`` = wall / CPU time spent building them so far."""

    def __init__(self, events: EventTable, chunk_events: int) -> None:
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
        return pages.zeros(largest, EVENT_DTYPE)  # mapped at once: it is all written

    def __iter__(self) -> Iterator[np.ndarray]:
        buffer = self.piece_buffer()
        for lo, hi in self.ranges:
            yield self.build(lo, hi, buffer)


def one_type(part: EventPart) -> int | None:
    """The type of every event of ``part``, or None when it has one per event."""
    return None if isinstance(part.typ, np.ndarray) else part.typ


class SparseColumn:
    """A column known at some records only (``index``, ascending): ``column[i]`` for i among
    them."""

    def __init__(self, index: np.ndarray, values: np.ndarray) -> None:
        self.index, self.values = index, values

    def __getitem__(self, i: np.ndarray) -> np.ndarray:
        return self.values[np.searchsorted(self.index, i)]


def event_seq(i: np.ndarray, offset: int = 0) -> np.ndarray:
    """Tie-break of the events of records ``i``: 8 * record index + offset."""
    return i.astype(np.uint64) * np.uint64(8) + np.uint64(offset)



def lookup_refs(table: dict[int, int], keys: np.ndarray) -> np.ndarray:
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
