"""The per-record loops of reading and decoding: ``frame_chunk`` frames a chunk of a dump's
slots into the reader's tables (the reader's own numpy framer is its fallback),
``gather_fields`` copies chosen fields of chosen rows of one structured table into another,
``readings`` puts an SPE context's clock readings in program order, ``unwrap`` and
``run_locals`` unwrap them and give each its local time in its live interval,
``split_live`` assigns them to live intervals,
``wrap_room`` says which steps may hide a wrap, ``place_readings`` writes them to their
record rows and anchors,
``dma_completions`` finds each DMA command's completing tag wait; all through the compiled
helper ``cell_otf2/native/_decodeloops.c`` where ``native.helper`` gives it and the tables
allow it, else through numpy, with the same result either way
(``tests/test_decodeloops.py``). It decides nothing of the decoding itself."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import helper

_SPECS: dict[tuple, np.ndarray | None] = {}
_NATIVE = "<" if sys.byteorder == "little" else ">"


def _fields(dtype: np.dtype) -> Mapping[str, tuple[Any, ...]]:
    """A structured dtype's fields: name -> (dtype, offset[, title])."""
    fields = dtype.fields
    if fields is None:
        raise TypeError(f"{dtype} is not a structured dtype")
    return fields


def _spec(dst_dtype: np.dtype, src_dtype: np.dtype, pairs: tuple) -> np.ndarray | None:
    """The field table of ``_decodeloops.gather`` for these dtypes, or None when a field is
    not an integer of 1, 2, 4 or 8 bytes (the numpy path then)."""
    key = (dst_dtype, src_dtype, pairs)
    if key in _SPECS:
        return _SPECS[key]
    rows: list[tuple[int, int, int, int, int, int]] = []
    spec: np.ndarray | None = None
    for d, s in pairs:
        dt, doff = _fields(dst_dtype)[d][:2]
        st, soff = _fields(src_dtype)[s][:2]
        if (dt.kind not in "iu" or st.kind not in "iu" or dt.itemsize not in (1, 2, 4, 8)
                or st.itemsize not in (1, 2, 4, 8)
                or (dt.itemsize > 1 and dt.byteorder not in ("=", "|", _NATIVE))):
            break
        swap = st.itemsize > 1 and st.byteorder not in ("=", "|", _NATIVE)
        rows.append((soff, st.itemsize, doff, dt.itemsize, int(swap), int(st.kind == "i")))
    else:
        spec = np.array(rows, dtype=np.int64).reshape(-1, 6)
    _SPECS[key] = spec
    return spec


def compiled_framing() -> bool:
    """True where ``frame_chunk`` can run now (the reader asks once per dump and frames with
    numpy otherwise)."""
    return helper("decodeloops") is not None


def frame_chunk(raw: np.ndarray, start: int, code_swap: bool, table: np.ndarray,
                outputs: tuple[tuple[np.ndarray, np.dtype, tuple], ...], special: np.ndarray,
                state: np.ndarray, stats: np.ndarray,
                group: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """Frame the whole slots in ``raw`` (bytes; the first is slot ``start``) into the reader's
    four tables (``_decodeloops.frame`` says what every argument holds); ``outputs``: per
    table (PPE, blocks, GAPs, SPE) its array, the slot dtype its fields come from and
    ``(table field, slot field)`` pairs; ``group``: the next and the end row of the SPE
    table per context id (int64, 65536 each), when it is to be grouped by context. Only where
    ``compiled_framing()``: the reader's own numpy framer is the twin, chosen before the first
    chunk. A field that is not an integer of 1, 2, 4 or 8 bytes is a caller's error
    (ValueError): the reader's tables have none."""
    c_helper = helper("decodeloops")
    if c_helper is None:
        raise RuntimeError("frame_chunk: the compiled helper is not there (the reader asks "
                           "compiled_framing() first)")
    args: list = []
    for out, src, pairs in outputs:
        spec = _spec(out.dtype, src, pairs)
        if spec is None:
            raise ValueError("frame_chunk: a field is not an integer of 1, 2, 4 or 8 bytes")
        args += [out.view(np.uint8), out.dtype.itemsize, spec]
    c_helper.frame(raw, start, int(code_swap), table, *args, special, state, stats,
                   *(group or ()))


def gather_fields(dst: np.ndarray, src: np.ndarray, idx: np.ndarray,
                  pairs: tuple[tuple[str, str], ...],
                  columns: dict[str, np.ndarray | int] | None = None) -> None:
    """``dst[d] = src[s][idx]`` for every (d, s) of ``pairs``; ``len(dst) == len(idx)``.
    ``columns``: ``dst[name] = value`` besides (an array of one value per row, or one value
    for all), written in the same pass over ``dst``'s rows where compiled."""
    c_helper = helper("decodeloops")
    idx = np.asarray(idx)
    if len(dst) != idx.size:
        raise ValueError(f"gather_fields: {len(dst)} rows for {idx.size} indexes")
    columns = columns or {}
    spec = (_spec(dst.dtype, src.dtype, pairs)
            if c_helper is not None and dst.ndim == 1 and src.ndim == 1 and dst.flags.c_contiguous
            and src.flags.c_contiguous and dst.dtype.itemsize and src.dtype.itemsize
            and len(columns) <= 8 else None)
    if spec is not None:
        cols = []
        for name, value in columns.items():
            dt, off = _fields(dst.dtype)[name][:2]
            if dt.itemsize > 1 and dt.byteorder not in ("=", "|", _NATIVE):
                spec = None
                break
            v = np.ascontiguousarray(value, dtype=dt.newbyteorder("="))
            if v.ndim > 1 or v.size not in (1, idx.size):
                raise ValueError(f"gather_fields: column {name} of {v.size} values")
            cols.append((v.reshape(-1).view(np.uint8), dt.itemsize, off))
    if c_helper is None or spec is None:
        rows = np.take(src, idx)
        for d, s in pairs:
            dst[d] = rows[s]
        for name, value in columns.items():
            dst[name] = value
        return
    if not idx.size:
        return
    c_helper.gather(dst.view(np.uint8), dst.dtype.itemsize,
                    src.view(np.uint8) if src.size else b"", src.dtype.itemsize,
                    np.ascontiguousarray(idx, dtype=np.int64), spec, tuple(cols))


#: the fields ``readings`` reads, with their types: of an SPE record, of a block header
_READING_SPE = (("slot", "=i8"), ("decr", "=u4"), ("code", "=u2"), ("b", "=u8"), ("block", "=i8"))
_READING_BLOCK = (("slot", "=i8"), ("present", "=u2"), ("decr", "=u4"))


def readings(spe: np.ndarray, rec_idx: np.ndarray, blocks: np.ndarray, blk_idx: np.ndarray,
             write_code: int) -> tuple[np.ndarray, ...]:
    """One SPE context's clock readings in program order: its records (rows ``rec_idx`` of
    the SPE table ``spe``, in slot order) and its blocks' headers (rows ``blk_idx`` of
    ``blocks``, in slot order), each header read after its block's records (sort key
    ``2 * slot`` of a record, ``2 * (slot + present) + 1`` of a header). Returns per reading
    its decrementer ``raw`` (int64), ``is_rec``, ``which`` (its row), ``write_new`` (of a
    record of code ``write_code``: the low 32 bits of its ``b``, else -1), ``reading_block``
    (its block: a record's, or the header's own) and ``head_slot`` (that block's slot)."""
    c_helper = helper("decodeloops")
    rec_idx = np.asarray(rec_idx, dtype=np.int64)
    blk_idx = np.asarray(blk_idx, dtype=np.int64)
    if (c_helper is not None and spe.ndim == 1 and blocks.ndim == 1 and spe.flags.c_contiguous
            and blocks.flags.c_contiguous and spe.dtype.itemsize and blocks.dtype.itemsize
            and all(_fields(spe.dtype)[f][0] == np.dtype(t) for f, t in _READING_SPE)
            and all(_fields(blocks.dtype)[f][0] == np.dtype(t) for f, t in _READING_BLOCK)):
        t = rec_idx.size + blk_idx.size
        out = (np.empty(t, np.int64), np.empty(t, np.bool_), np.empty(t, np.int64),
               np.empty(t, np.int64), np.empty(t, np.int64), np.empty(t, np.int64))
        spe_off = np.array([_fields(spe.dtype)[f][1] for f, _ in _READING_SPE], dtype=np.int64)
        blk_off = np.array([_fields(blocks.dtype)[f][1] for f, _ in _READING_BLOCK],
                           dtype=np.int64)
        if c_helper.readings(spe.view(np.uint8), spe.dtype.itemsize, spe_off, rec_idx,
                             blocks.view(np.uint8), blocks.dtype.itemsize, blk_off,
                             blk_idx, int(write_code), *out):
            return out
    rows = np.take(spe, rec_idx)
    keys = np.concatenate([2 * rows["slot"],
                           2 * (blocks["slot"][blk_idx] + blocks["present"][blk_idx]) + 1])
    raw = np.concatenate([rows["decr"], blocks["decr"][blk_idx]]).astype(np.int64)
    is_rec = np.concatenate([np.ones(rec_idx.size, bool), np.zeros(blk_idx.size, bool)])
    which = np.concatenate([rec_idx, blk_idx])
    po = np.argsort(keys, kind="stable")
    raw, is_rec, which = raw[po], is_rec[po], which[po]
    # the records keep their order among the readings: ``which[is_rec]`` is ``rec_idx``
    write_new = np.full(raw.size, -1, dtype=np.int64)
    is_write = rows["code"] == write_code
    dw = np.zeros(raw.size, dtype=bool)  # ``which`` indexes blocks where not is_rec
    dw[is_rec] = is_write
    write_new[dw] = (rows["b"][is_write] & np.uint64(0xFFFFFFFF)).astype(np.int64)
    reading_block = which.copy()
    reading_block[is_rec] = rows["block"]
    return raw, is_rec, which, write_new, reading_block, blocks["slot"][reading_block]


def unwrap(raw: np.ndarray) -> tuple[np.ndarray, int]:
    """One SPE context's decrementer readings (``raw``, int64 in 0 .. 2^32 - 1, program
    order) unwrapped: ``cum[i]`` = the sum of the steps ``(raw[j - 1] - raw[j]) mod 2^32``
    for j <= i, and how many steps are 2^31 or more."""
    c_helper = helper("decodeloops")
    if c_helper is not None and raw.dtype == np.int64 and raw.ndim == 1:
        cum = np.empty(raw.size, dtype=np.int64)
        big = c_helper.unwrap(np.ascontiguousarray(raw), cum)
        return cum, int(big)
    steps = np.zeros(raw.size, dtype=np.int64)
    if raw.size > 1:
        steps[1:] = (raw[:-1] - raw[1:]) & 0xFFFFFFFF
    return np.cumsum(steps), int((steps >= 1 << 31).sum())


def split_live(raw: np.ndarray, cum: np.ndarray, write_new: np.ndarray, stop: np.ndarray,
               start: np.ndarray, before: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """``intervals.split_intervals``' walk in one compiled pass: per reading its interval
    (int32), per interval after the first what started it (kind: 1 a switch, 2 a DECR_WRITE;
    ref: the switch's index or the write's reading) and the number of intervals; None where
    not compiled (the caller's Python loop does it). All arrays int64 (``before``: None or one
    per switch)."""
    c_helper = helper("decodeloops")
    if c_helper is None:
        return None
    n = raw.size
    room = stop.size + int((write_new >= 0).sum())
    interval = np.empty(n, dtype=np.int32)
    kind = np.empty(room, dtype=np.int8)
    ref = np.empty(room, dtype=np.int64)
    c = np.ascontiguousarray
    n_iv = c_helper.split_live(
        c(raw, np.int64), c(cum, np.int64), c(write_new, np.int64), c(stop, np.int64),
        c(start, np.int64), c(before if before is not None else stop[:0], np.int64),
        before is not None, interval, kind, ref)
    return interval, kind[:n_iv - 1], ref[:n_iv - 1], int(n_iv)


def run_locals(raw: np.ndarray, cum: np.ndarray, interval: np.ndarray) -> np.ndarray:
    """Per reading, ``-raw[f] + (cum[i] - cum[f])``, f the first reading of its run of equal
    ``interval`` (int32; ``unwrap``'s ``cum``)."""
    c_helper = helper("decodeloops")
    if (c_helper is not None and raw.dtype == np.int64 and cum.dtype == np.int64
            and interval.dtype == np.int32 and raw.ndim == 1):
        local = np.empty(raw.size, dtype=np.int64)
        c_helper.run_locals(np.ascontiguousarray(raw), np.ascontiguousarray(cum),
                            np.ascontiguousarray(interval), local)
        return local
    first = np.ones(raw.size, dtype=bool)
    first[1:] = interval[1:] != interval[:-1]
    first_idx = np.flatnonzero(first)
    f = first_idx[np.cumsum(first) - 1]  # each reading's run's first reading
    return -raw[f] + (cum - cum[f])


def wrap_room(raw: np.ndarray, interval: np.ndarray, reading_block: np.ndarray,
              pos: np.ndarray, span: np.ndarray, slack: float, trusted: bool,
              broken: np.ndarray, lost_before: np.ndarray) -> np.ndarray | None:
    """``decode._wrap_candidates``' rule per reading in one compiled pass (``pos``: each
    block row's window, ``span``: each window's ``hi - lo``); None where not compiled (the
    caller's numpy does it)."""
    c_helper = helper("decodeloops")
    if c_helper is None:
        return None
    out = np.empty(raw.size, dtype=np.bool_)
    c_helper.wrap_room(
        np.ascontiguousarray(raw, dtype=np.int64),
        np.ascontiguousarray(interval, dtype=np.int32),
        np.ascontiguousarray(reading_block, dtype=np.int64),
        np.ascontiguousarray(pos, dtype=np.int64),
        np.ascontiguousarray(span, dtype=np.float64), float(slack), bool(trusted),
        np.ascontiguousarray(broken, dtype=np.bool_).view(np.uint8),
        np.ascontiguousarray(lost_before, dtype=np.bool_).view(np.uint8),
        out.view(np.uint8))
    return out


#: the record row fields ``place_readings`` writes, with their types
_PLACED = (("loc", "=u4"), ("anchor", "=i8"), ("domain", "=i4"), ("local", "=i8"))


def place_readings(rows: np.ndarray, loc: int, is_rec: np.ndarray, reading_block: np.ndarray,
                   which: np.ndarray, interval: np.ndarray, local: np.ndarray, dom0: int,
                   block_anchor: np.ndarray, anchor_pos: np.ndarray,
                   anchor_domain: np.ndarray, anchor_local: np.ndarray) -> None:
    """One SPE context's decoded readings (``readings``' order) to their places (in one
    compiled pass where it can): the k-th record reading's ``loc``, anchor (``block_anchor``
    of its block), domain (``dom0 + interval``) and ``local`` into row k of ``rows``; a block
    header's domain and local into ``anchor_domain`` / ``anchor_local`` at
    ``anchor_pos[which]``."""
    fields: Mapping[str, tuple[Any, ...]] = rows.dtype.fields or {}
    c_helper = helper("decodeloops")
    if not (c_helper is not None and rows.ndim == 1 and rows.flags.c_contiguous
            and all(f in fields and fields[f][0] == np.dtype(t) for f, t in _PLACED)
            and anchor_domain.dtype == np.int32 and anchor_local.dtype == np.int64
            and anchor_domain.flags.c_contiguous and anchor_local.flags.c_contiguous):
        dom = dom0 + interval
        rows["loc"] = loc
        rows["anchor"] = block_anchor[reading_block[is_rec]]
        rows["domain"] = dom[is_rec]
        rows["local"] = local[is_rec]
        header = anchor_pos[which[~is_rec]]
        anchor_domain[header] = dom[~is_rec]
        anchor_local[header] = local[~is_rec]
        return
    offsets = np.array([fields[f][1] for f, _ in _PLACED], dtype=np.int64)
    c_helper.place_readings(
        rows.view(np.uint8).reshape(-1) if rows.size else bytearray(), rows.dtype.itemsize,
        offsets, int(loc), np.ascontiguousarray(is_rec, dtype=np.bool_).view(np.uint8),
        np.ascontiguousarray(reading_block, dtype=np.int64),
        np.ascontiguousarray(which, dtype=np.int64),
        np.ascontiguousarray(interval, dtype=np.int32),
        np.ascontiguousarray(local, dtype=np.int64), int(dom0),
        np.ascontiguousarray(block_anchor, dtype=np.int64),
        np.ascontiguousarray(anchor_pos, dtype=np.int64), anchor_domain, anchor_local)


def group_u16(table: np.ndarray, field: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row indexes of ``table`` grouped by its 16-bit unsigned ``field`` (the table's own
    values when None), ascending within a group (a stable sort), and where each key's group
    starts: key k's rows are ``order[start[k]:start[k + 1]]``. ``order`` is int32 below 2^31
    rows, else int64."""
    keys = table if field is None else table[field]
    start = np.zeros((1 << 16) + 1, dtype=np.int64)
    wide = table.size >= 1 << 31
    c_helper = helper("decodeloops")
    if (c_helper is not None and table.ndim == 1 and table.flags.c_contiguous
            and table.dtype.itemsize and keys.dtype.kind == "u" and keys.dtype.itemsize == 2
            and keys.dtype.byteorder in ("=", "|", _NATIVE)):
        offset = 0 if field is None else _fields(table.dtype)[field][1]
        order = np.empty(table.size, dtype=np.int64 if wide else np.int32)
        c_helper.group16(table.view(np.uint8).reshape(-1) if table.size else b"",
                         table.dtype.itemsize, offset, order, start)
        return order, start
    keys = np.asarray(keys, dtype=np.uint16)
    np.cumsum(np.bincount(keys, minlength=1 << 16), out=start[1:])
    order = np.argsort(keys, kind="stable")  # a radix sort for 16-bit keys
    return (order if wide else order.astype(np.int32)), start


def time_bounds(rec: np.ndarray, usable: np.ndarray,
                n_domains: int) -> tuple[np.ndarray, np.ndarray, tuple[int, int] | None]:
    """Over the records (``RECORD_DTYPE``) that are ``usable`` and have a code (not 0): per
    domain the least and the greatest time (int64 max and -1 for a domain without one;
    records of domain -1 are left out), and the least and greatest over all (None: none)."""
    none = np.iinfo(np.int64).max
    first = np.full(n_domains, none, dtype=np.int64)
    last = np.full(n_domains, -1, dtype=np.int64)
    fields = _fields(rec.dtype)
    native = all(fields[f][0] == np.dtype(t) for f, t in
                 (("code", "=u2"), ("domain", "=i4"), ("time", "=i8")))
    c_helper = helper("decodeloops")
    if (c_helper is not None and native and rec.ndim == 1 and rec.flags.c_contiguous
            and usable.dtype == np.bool_ and usable.size == rec.size):
        ends = np.array([none, np.iinfo(np.int64).min], dtype=np.int64)
        if rec.size:
            c_helper.time_bounds(rec.view(np.uint8).reshape(-1), rec.dtype.itemsize,
                                 fields["code"][1], fields["domain"][1],
                                 fields["time"][1], np.ascontiguousarray(usable),
                                 first, last, ends)
        return first, last, (None if ends[0] > ends[1] else (int(ends[0]), int(ends[1])))
    written = usable & (rec["code"] != 0)
    t = rec["time"][written]
    span = (int(t.min()), int(t.max())) if t.size else None
    has = rec["domain"][written] >= 0
    dom, t = rec["domain"][written][has], t[has]
    if dom.size:
        # per run of equal domains (a location's records are one range) its min and max,
        # then per domain over its few runs
        run = np.flatnonzero(np.concatenate([[True], dom[1:] != dom[:-1]]))
        np.minimum.at(first, dom[run], np.minimum.reduceat(t, run))
        np.maximum.at(last, dom[run], np.maximum.reduceat(t, run))
    return first, last, span


def dma_completions(issue: np.ndarray, tag: np.ndarray, waits: np.ndarray, status: np.ndarray,
                    epoch: np.ndarray) -> np.ndarray:
    """Per DMA command (record indexes ``issue``, ascending; ``tag`` 0..255), the first tag
    wait (record indexes ``waits``, ascending, their ``status`` masks) after it whose status
    has bit ``tag``, or -1: none, a tag of 64 or more, or one in another loss ``epoch``
    (indexed by record: a tag wait in a lost block between them may have been the one)."""
    c_helper = helper("decodeloops")
    if c_helper is not None and (issue.size < 2 or bool((issue[1:] > issue[:-1]).all())) and (
            waits.size < 2 or bool((waits[1:] > waits[:-1]).all())):
        out = np.empty(issue.size, dtype=np.int64)
        c_helper.dma_complete(np.ascontiguousarray(issue, dtype=np.int64),
                              np.ascontiguousarray(tag, dtype=np.int64),
                              np.ascontiguousarray(waits, dtype=np.int64),
                              np.ascontiguousarray(status, dtype=np.uint64),
                              np.ascontiguousarray(epoch, dtype=np.int32), out)
        return out
    # bit k of every wait's status as row k (tags of 64 and more have no bit: never met)
    status = np.ascontiguousarray(status, dtype="<u8")
    bits = np.unpackbits(status.view(np.uint8).reshape(-1, 8), axis=1,
                         bitorder="little").T.astype(bool)
    complete = np.full(issue.size, -1, dtype=np.int64)
    by_tag = np.argsort(tag, kind="stable")
    tag_start = np.searchsorted(tag[by_tag], np.arange(257))
    for t in np.unique(tag).tolist():
        w = waits[bits[t]] if t < 64 else waits[:0]
        sel = by_tag[tag_start[t]:tag_start[t + 1]]
        pos = np.searchsorted(w, issue[sel], side="right")
        ok = pos < w.size
        ok[ok] = epoch[w[pos[ok]]] == epoch[issue[sel[ok]]]
        complete[sel[ok]] = w[pos[ok]]
    return complete
