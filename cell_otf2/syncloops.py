"""The per-record loops of ordering and synchronization: ``block_pairs`` finds the block
constraints of ``order.build_constraints``, ``settle`` gives one location's records their
times for ``synchronize.apply_times``; both through the compiled helper
``cell_otf2/_syncloops.c`` where it is built (setup.py, optional) and the tables have the
expected layout, else through numpy, with the same result either way
(``tests/test_syncloops.py``). It decides no constraint's soundness and solves nothing."""

from __future__ import annotations

import os

import numpy as np

from .model import ANCHOR_DTYPE, RECORD_DTYPE

try:
    from . import _syncloops
except ImportError:  # built without a C compiler: numpy does the same
    _syncloops = None

#: set (to anything but empty) in the environment: the numpy path even where C is built
PYTHON_PATH_VARIABLE = "CELL2OTF2_PYTHON_LOOPS"
#: False: always the numpy path (tests compare both)
COMPILED = _syncloops is not None and not os.environ.get(PYTHON_PATH_VARIABLE)

Triple = tuple[np.ndarray, np.ndarray, np.ndarray]


def _offset(dtype: np.dtype, name: str) -> int:
    return int(dtype.fields[name][1])


def _compiled_layout(rec: np.ndarray, anc: np.ndarray | None = None) -> bool:
    return (COMPILED and rec.dtype == RECORD_DTYPE and rec.ndim == 1
            and rec.flags.c_contiguous
            and (anc is None or (anc.dtype == ANCHOR_DTYPE and anc.ndim == 1
                                 and anc.flags.c_contiguous)))


def pairs(d_before, t_before, d_after, t_after) -> Triple:
    """Happened-before pairs -> (src, dst, weight) in ``solver.solve``'s convention, dropping
    same-domain and unusable ones."""
    d_before = np.asarray(d_before, dtype=np.int64)
    d_after = np.asarray(d_after, dtype=np.int64)
    keep = (d_before >= 0) & (d_after >= 0) & (d_before != d_after)
    w = np.asarray(t_after, dtype=np.float64)[keep] - np.asarray(t_before, np.float64)[keep]
    return d_after[keep], d_before[keep], w


def block_pairs(rec: np.ndarray, anc: np.ndarray) -> tuple[Triple, Triple]:
    """The two block constraints, each (src, dst, weight), in record order: a record read
    before its block's header on another clock (header's domain minus the record's), and a
    block's first SPE record after the previous block's header on another clock (the
    record's minus that header's; without the read delay, which the caller adds)."""
    if _compiled_layout(rec, anc) and rec.size:
        out = _syncloops.block_pairs(
            rec, RECORD_DTYPE.itemsize, _offset(RECORD_DTYPE, "loc"),
            _offset(RECORD_DTYPE, "code"), _offset(RECORD_DTYPE, "domain"),
            _offset(RECORD_DTYPE, "local"), _offset(RECORD_DTYPE, "anchor"), anc,
            ANCHOR_DTYPE.itemsize, _offset(ANCHOR_DTYPE, "domain"),
            _offset(ANCHOR_DTYPE, "local"))
        arrays = [np.frombuffer(b, dtype=np.float64 if k % 3 == 2 else np.int64)
                  for k, b in enumerate(out)]
        return (arrays[0], arrays[1], arrays[2]), (arrays[3], arrays[4], arrays[5])
    head_domain = anc["domain"][rec["anchor"]]
    rec_domain = rec["domain"]
    cross = np.flatnonzero((rec_domain >= 0) & (head_domain >= 0)
                           & (rec_domain != head_domain))
    inside = pairs(rec_domain[cross], rec["local"][cross], head_domain[cross],
                   anc["local"][rec["anchor"][cross]])
    del head_domain
    if rec.size > 1:
        first = np.flatnonzero((rec["loc"][1:] == rec["loc"][:-1])
                               & (rec["anchor"][1:] != rec["anchor"][:-1])
                               & (rec["code"][1:] >> 8 == 2)) + 1
        prev_head = anc[rec["anchor"][first - 1]]
        after = pairs(prev_head["domain"], prev_head["local"], rec["domain"][first],
                      rec["local"][first])
    else:
        empty = np.zeros(0, dtype=np.int64)
        after = (empty, empty.copy(), np.zeros(0))
    return inside, after


def settle(ref_t: np.ndarray, has: np.ndarray, part: np.ndarray, usable: np.ndarray
           ) -> tuple[int, int, int, int, int, int]:
    """One location's records' times from their reference times ``ref_t`` (NaN: nothing
    bounds them) and ``has`` (they read a clock): fills ``part['time']`` and ``usable``
    (both of the location's length) and returns (order violations, records without a clock
    given a neighbour's time, unbounded records, the first one's index or -1, lost records,
    the first one's index or -1). A time outside 0..2^63 is lost; the others are rounded to
    the nearest tick; a record without a clock, and one below an earlier time, takes the
    greatest time before it (the least after it when there is none); a location without any
    time has none."""
    ref_t = np.ascontiguousarray(ref_t, dtype=np.float64)
    has = np.ascontiguousarray(has, dtype=bool)
    if (_compiled_layout(part) and usable.dtype == np.bool_ and usable.flags.c_contiguous
            and len(usable) == len(part) == ref_t.size == has.size):
        return _syncloops.settle(ref_t, has, part, RECORD_DTYPE.itemsize,
                                 _offset(RECORD_DTYPE, "time"), usable)
    unbounded = has & np.isnan(ref_t)
    # OTF2 time is unsigned: a time before the reference's zero (or past 2^63) comes from a
    # corrupt reading and cannot be written
    outside = has & ~unbounded & ((ref_t < 0) | (ref_t >= 2.0**63))
    ok = ~unbounded & ~outside
    seg = np.where(ok & has, np.rint(np.nan_to_num(ref_t, nan=0.0)), -(2**62))
    seg = seg.astype(np.int64)
    # records without a clock take the predecessor's time (the successor's when there is
    # none, no time at all when the location has none); never decrease
    timed = ok & has
    run = np.maximum.accumulate(np.where(timed, seg, -(2**62)))
    violations = int((timed & (seg < run)).sum())
    clamped = int((ok & ~has).sum())
    first = np.minimum.accumulate(np.where(timed, seg, 2**62)[::-1])[::-1]
    run = np.where(run < 0, first, run)
    ok &= run < 2**62
    part["time"] = np.where(ok, run, seg)
    usable[:] = ok
    lost = outside | (~ok & ~unbounded & ~outside)
    n_unbounded, n_lost = int(unbounded.sum()), int(lost.sum())
    return (violations, clamped, n_unbounded, int(np.argmax(unbounded)) if n_unbounded else -1,
            n_lost, int(np.argmax(lost)) if n_lost else -1)
