"""The per-event loops of emit: ``written_span`` finds the records to write and their time
span, ``take_field`` gathers a field of chosen records, ``select_refs`` maps their id
fields to definition refs, ``layout_own`` lays own events out by counting, ``fill_rows``
writes the packed rows of a piece of the table's own events, ``region_flags`` finds the
locations whose Enter and Leave do not balance and nest; each through the compiled helper
``cell_otf2/native/_emitloops.c`` where ``native.helper`` gives it and the arrays allow it,
else through numpy, with the same result either way (``tests/test_emitloops.py``).
``RecordBits`` is an event parameter made of bit fields of the event's record, which both
paths compute without gathering whole record rows."""

from __future__ import annotations

import sys

import numpy as np

from ..model import EVENT_DTYPE, dtype_fields
from ..native import helper

_LITTLE = sys.byteorder == "little"


class RecordBits:
    """An event parameter taken from the event's record: the OR of ``(record[field] >> shift)
    & mask << left`` over ``terms`` of (field, shift, mask, left), on 64-bit unsigned record
    fields."""

    def __init__(self, *terms: tuple[str, int, int, int]) -> None:
        self.terms = terms

    def values(self, records: np.ndarray, rec: np.ndarray) -> np.ndarray:
        """The parameter of the events of records ``rec`` (numpy)."""
        out = np.zeros(rec.size, dtype=np.uint64)
        for name, shift, mask, left in self.terms:
            v = records[name][rec].astype(np.uint64, copy=False)
            out |= ((v >> np.uint64(shift)) & np.uint64(mask)) << np.uint64(left)
        return out

    def spec(self, records: np.ndarray) -> np.ndarray | None:
        """The terms as ``_emitloops`` takes them (field offset, shift, mask, left), or None
        when a field is not a 64-bit unsigned integer in native order."""
        rows = []
        for name, shift, mask, left in self.terms:
            dt, off = dtype_fields(records.dtype)[name][:2]
            if dt.kind != "u" or dt.itemsize != 8 or not _native(dt):
                return None
            rows.append((off, shift, np.uint64(mask).view(np.int64), left))
        return np.array(rows, dtype=np.int64).reshape(-1, 4)


def _native(dt: np.dtype) -> bool:
    return dt.byteorder in ("=", "|") or (dt.byteorder == "<") == _LITTLE


def _index_ok(a: np.ndarray) -> bool:
    return a.dtype in (np.int32, np.int64) and _native(a.dtype)


def written_span(records: np.ndarray, usable: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The records to write (``usable`` and with a code, not 0) and the least and greatest
    time among them ((0, 0) when none)."""
    fields = dtype_fields(records.dtype)
    c_helper = helper("emitloops")
    if (c_helper is not None and records.ndim == 1 and records.flags.c_contiguous
            and fields["code"][0].str == ("<u2" if _LITTLE else ">u2")
            and fields["time"][0].str == ("<i8" if _LITTLE else ">i8")
            and usable.dtype == np.bool_ and usable.shape == records.shape):
        good = np.empty(records.size, dtype=bool)
        span = np.empty(2, dtype=np.int64)
        c_helper.written_span(records.view(np.uint8).reshape(-1) if records.size else b"",
                              records.dtype.itemsize, fields["code"][1], fields["time"][1],
                              np.ascontiguousarray(usable), good, span)
        return (good, int(span[0]), int(span[1])) if good.any() else (good, 0, 0)
    good = usable & (records["code"] != 0)
    t_good = records["time"][good]  # one pass over the record rows for both ends
    first, last = (int(t_good.min()), int(t_good.max())) if t_good.size else (0, 0)
    return good, first, last


def take_field(records: np.ndarray, name: str, idx: np.ndarray) -> np.ndarray:
    """``records[name][idx]`` for a uint64 field (the rows ahead asked for early)."""
    dt, off = dtype_fields(records.dtype)[name][:2]
    c_helper = helper("emitloops")
    if (c_helper is not None and dt.str == ("<u8" if _LITTLE else ">u8") and records.ndim == 1
            and records.flags.c_contiguous and _index_ok(idx)):
        out = np.empty(idx.size, dtype=np.uint64)
        c_helper.take_field(records.view(np.uint8).reshape(-1) if records.size else b"",
                            records.dtype.itemsize, off, np.ascontiguousarray(idx),
                            idx.dtype == np.int64, out)
        return out.view(dt)
    return records[name][idx]


def select_refs(records: np.ndarray, name: str, idx: np.ndarray, good: np.ndarray,
                table: dict[int, int], written: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Of records ``idx`` those with ``good``, in order: the ones whose id in field ``name``
    (uint64) ``table`` maps (marked in ``written``), their refs (int32), and the others; in
    one pass. None where the compiled helper cannot (the caller takes numpy's way)."""
    dt, off = dtype_fields(records.dtype)[name][:2]
    c_helper = helper("emitloops")
    if (c_helper is None or not table or min(table) < 0 or max(table) >= 1 << 16
            or min(table.values()) < 0 or max(table.values()) >= 1 << 31
            or dt.str != ("<u8" if _LITTLE else ">u8") or records.ndim != 1
            or not records.flags.c_contiguous or not _index_ok(idx)
            or good.dtype != np.bool_ or written.dtype != np.bool_
            or good.size != records.size or written.size != records.size
            or not written.flags.c_contiguous):
        return None
    direct = np.full(max(table) + 2, -1, dtype=np.int32)  # last entry: out of range
    direct[list(table)] = list(table.values())
    i, ref, bad = np.empty_like(idx), np.empty(idx.size, np.int32), np.empty_like(idx)
    n_ok, n_bad = c_helper.select_refs(
        records.view(np.uint8).reshape(-1) if records.size else b"", records.dtype.itemsize,
        off, np.ascontiguousarray(idx), idx.dtype == np.int64, np.ascontiguousarray(good),
        direct, written, i, ref, bad)
    return i[:n_ok], ref[:n_ok], bad[:n_bad]


# -- layout by counting


def layout_own(base: np.ndarray, recs: list[np.ndarray], index: type) -> list[np.ndarray]:
    """Own positions of the events of parts with records ``recs`` (each ascending; the parts
    in fill order: by seq offset, then add order): ``base[r]`` (the own events of the records
    before ``r``, written into ``base``: n_rec + 1 entries) plus the events of record ``r``
    before it in fill order (several of one record in one part: in part order). Positions of
    dtype ``index``."""
    n_rec = base.size - 1
    c_helper = helper("emitloops")
    if (c_helper is not None and _index_ok(base) and base.flags.c_contiguous
            and all(r.dtype == index for r in recs) and _index_ok(np.empty(0, index))):
        poss: list[np.ndarray] = [np.empty(r.size, dtype=index) for r in recs]
        c_helper.layout_own(base, base.dtype == np.int64,
                            tuple(np.ascontiguousarray(r) for r in recs), tuple(poss),
                            np.dtype(index) == np.int64)
        return poss
    counts = np.zeros(n_rec, dtype=np.int32)  # own events per record
    for rec in recs:
        if rec.size < 2 or bool((rec[1:] > rec[:-1]).all()):
            counts[rec] += 1
        else:  # ascending with repeats: add each run's length once
            r, n = runs(rec)
            counts[r] += n
    base[0] = 0
    np.cumsum(counts, out=base[1:])
    fill = counts  # the counts' memory, as the running fill per record
    fill[:] = 0
    poss = []
    for rec in recs:
        if rec.size < 2 or bool((rec[1:] > rec[:-1]).all()):
            pos = (base[rec] + fill[rec]).astype(index)
            fill[rec] += 1
        else:  # several events of one record in one part (a wait completes several DMAs)
            first, n = runs(rec)
            start = np.cumsum(n) - n  # where each run starts in the part
            occ = np.arange(rec.size) - np.repeat(start, n)
            pos = (base[rec] + fill[rec] + occ).astype(index)
            fill[first] += n.astype(fill.dtype)
        poss.append(pos)
    return poss


def runs(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of an ascending array and how often each occurs, in order."""
    start = np.flatnonzero(np.concatenate([[True], r[1:] != r[:-1]]))
    return r[start], np.diff(np.append(start, r.size))


# -- the rows of a piece

#: the columns of an event row besides loc, time and seq
COLUMNS = ("type", "ref", "p1", "p2", "p3", "p4", "p5", "p6")
_LAYOUT = np.array([dtype_fields(EVENT_DTYPE)[f][1] for f in
                    ("loc", "type", "ref", "time", "seq", *COLUMNS[2:])], dtype=np.int64)
_EVENT_OK = (_LITTLE and [EVENT_DTYPE[f].str for f in dtype_fields(EVENT_DTYPE)]
             == ["<u4", "|u1", "<u4", "<i8", "<u8", "<u8", "<u8", "<u8", "<u8", "<u8", "<u8"])


def _column(v, records: np.ndarray, rec: np.ndarray):
    """One column as ``_emitloops.fill_own`` takes it, or None (numpy then)."""
    if v is None:
        return (0, None, 0, 0)
    if isinstance(v, RecordBits):
        spec = v.spec(records)
        return None if spec is None else (3, spec, 0, 0)
    if callable(v):
        v = v(np.take(records, rec))
    if isinstance(v, (int, np.integer)) or (isinstance(v, np.ndarray) and v.ndim == 0):
        if np.asarray(v).dtype.kind not in "iub":
            return None
        return (1, int(v), 0, 0)
    v = np.asarray(v)
    if v.dtype.kind not in "iub" or v.dtype.itemsize not in (1, 2, 4, 8) or not _native(v.dtype):
        return None
    v = np.ascontiguousarray(v)
    return (2, v, v.dtype.itemsize, int(v.dtype.kind == "i"))


def fill_rows(e: np.ndarray, records: np.ndarray, parts: list[tuple], own_lo: int,
              own_hi: int, f_ins: np.ndarray, loc_lo: int, bounds: np.ndarray) -> None:
    """Write the rows of a piece's own events into ``e``. ``parts``: (rec, pos, typ, offset,
    cols) per event part, its events of records ``rec`` at own positions ``pos`` (strictly
    ascending, in ``[own_lo, own_hi)``); an event's row is ``pos - own_lo`` plus the
    foreign events inserted at or before ``pos`` (``f_ins``, ascending, int64), with location
    ``loc_lo + i`` where ``bounds[i] <= pos < bounds[i + 1]`` (int64: the own positions of the
    piece's locations), the time of its record, type ``typ`` (one for all or one per event),
    seq ``8 * rec + offset``, and the columns ``cols`` (ref, p1 .. p6: scalar, array per
    event, function of record rows or ``RecordBits``; missing ones zero). Every byte of those
    rows is written."""
    rest = parts
    c_helper = helper("emitloops")
    if (c_helper is not None and _EVENT_OK and e.dtype == EVENT_DTYPE and e.flags.c_contiguous
            and records.ndim == 1 and records.flags.c_contiguous
            and dtype_fields(records.dtype)["time"][0].str == "<i8"):
        specs, rest = [], []
        for rec, pos, typ, offset, cols in parts:
            spec = ([_column(typ if name == "type" else cols.get(name), records, rec)
                     for name in COLUMNS]
                    if _index_ok(rec) and pos.dtype == rec.dtype else [None])
            if all(c is not None for c in spec):
                specs.append((np.ascontiguousarray(rec), np.ascontiguousarray(pos),
                              rec.dtype == np.int64, int(offset), tuple(spec)))
            else:
                rest.append((rec, pos, typ, offset, cols))
        layout = np.concatenate([_LAYOUT, [dtype_fields(records.dtype)["loc"][1],
                                           dtype_fields(records.dtype)["time"][1]]])
        c_helper.fill_rows(e.view(np.uint8).reshape(-1), EVENT_DTYPE.itemsize, layout,
                           records.view(np.uint8).reshape(-1) if records.size else b"",
                           records.dtype.itemsize, int(own_lo), int(own_hi),
                           np.ascontiguousarray(f_ins, dtype=np.int64), int(loc_lo),
                           np.ascontiguousarray(bounds, dtype=np.int64), tuple(specs))
    for rec, pos, typ, offset, cols in rest:
        _fill_numpy(e, records, rec, pos, own_lo, f_ins, loc_lo, bounds, typ, offset, cols)


def _fill_numpy(e, records, rec, pos, own_lo, f_ins, loc_lo, bounds, typ, offset, cols):
    """``fill_rows`` for one part, through numpy."""
    rows = pos.astype(np.int64) - own_lo + np.searchsorted(f_ins, pos, side="right")
    e["loc"][rows] = loc_lo + np.searchsorted(bounds, pos, side="right") - 1
    e["time"][rows] = records["time"][rec]
    e["seq"][rows] = rec.astype(np.uint64) * np.uint64(8) + np.uint64(offset)
    taken = None
    for name in COLUMNS:
        v = typ if name == "type" else cols.get(name)
        if v is None:
            v = 0
        elif isinstance(v, RecordBits):
            v = v.values(records, rec)
        elif callable(v):
            if taken is None:
                taken = np.take(records, rec)
            v = v(taken)
        e[name][rows] = v


# -- Enter/Leave check

#: region refs the compiled check takes (its codes are ref + 1 in 32 bits, signed)
_MAX_REF = (1 << 31) - 2


def region_flags(own_start: np.ndarray, parts: list, f_code: np.ndarray,
                 f_insert: np.ndarray, f_start: np.ndarray) -> np.ndarray | None:
    """Per location, whether its Enter and Leave events fail to balance and nest (a Leave not
    of the innermost open region, or a region open at the end), or None when the compiled
    helper cannot check them (numpy then: ``balance``). ``own_start``: where each location's
    own positions start (one more entry than locations); ``parts``: the own region events as
    (pos, ref, step) with pos strictly ascending and step +1 (Enter) or -1 (Leave);
    ``f_code``: per foreign event in final order, ``step * (ref + 1)`` or 0; ``f_insert``:
    their insertion points; ``f_start``: where each location's foreign events start."""
    c_helper = helper("emitloops")
    if c_helper is None:
        return None
    specs = []
    for pos, ref, step in parts:
        col = _column(ref, np.zeros(0, EVENT_DTYPE), pos)
        if (col is None or col[0] == 3 or not _index_ok(pos)
                or (col[0] == 2 and col[1].size and int(col[1].max()) > _MAX_REF)
                or (col[0] == 2 and col[1].size and col[3] and int(col[1].min()) < 0)
                or (col[0] == 1 and not 0 <= col[1] <= _MAX_REF)):
            return None
        specs.append((np.ascontiguousarray(pos), pos.dtype == np.int64, col, int(step)))
    flags = np.zeros(own_start.size - 1, dtype=np.uint8)
    c_helper.region_walk(np.ascontiguousarray(own_start, dtype=np.int64), tuple(specs),
                         np.ascontiguousarray(f_code, dtype=np.int32),
                         np.ascontiguousarray(f_insert, dtype=np.int64),
                         np.ascontiguousarray(f_start, dtype=np.int64), flags)
    return flags.view(bool)
