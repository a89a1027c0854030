"""The per-record loops of ordering and synchronization: ``block_pairs`` finds the block
constraints of ``order.build_constraints``, ``place`` gives one location's records their
times for ``synchronize.apply_times`` (their node's clock map, then ``settle``),
``reversed_count`` counts the matched pairs written in reverse order (``reversed_pairs``, its
numpy twin's core, also for other tables); all through
the compiled helper ``cell_otf2/native/_syncloops.c`` where ``native.helper`` gives it and
the tables and maps have the expected layout, else through numpy, with the same result
either way (``tests/test_syncloops.py``). It decides no constraint's soundness and solves
nothing."""

from __future__ import annotations

import numpy as np

from ..model import ANCHOR_DTYPE, RECORD_DTYPE, NodeMap
from . import helper

Triple = tuple[np.ndarray, np.ndarray, np.ndarray]


def _offset(dtype: np.dtype, name: str) -> int:
    fields = dtype.fields
    assert fields is not None, "a structured dtype"
    return int(fields[name][1])


def _compiled_layout(rec: np.ndarray, anc: np.ndarray | None = None) -> bool:
    """The record (and anchor) table as the compiled loops take it."""
    return (rec.dtype == RECORD_DTYPE and rec.ndim == 1 and rec.flags.c_contiguous
            and (anc is None or (anc.dtype == ANCHOR_DTYPE and anc.ndim == 1
                                 and anc.flags.c_contiguous)))


def pairs(d_before: np.ndarray, t_before: np.ndarray, d_after: np.ndarray,
          t_after: np.ndarray) -> Triple:
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
    c_helper = helper("syncloops")
    if c_helper is not None and _compiled_layout(rec, anc) and rec.size:
        out = c_helper.block_pairs(
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
    c_helper = helper("syncloops")
    if (c_helper is not None and _compiled_layout(part) and usable.dtype == np.bool_
            and usable.flags.c_contiguous and len(usable) == len(part) == ref_t.size == has.size):
        return c_helper.settle(ref_t, has, part, RECORD_DTYPE.itemsize,
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


class NodeMaps:
    """The node clock maps of a run as ``place`` takes them: per node a kind (-1 none, 0
    ``NodeMap``'s straight line, 1 a piecewise-linear map, a class with ``piecewise_linear``
    set, ``nodefit.fit.PiecewiseMap``), offset and rate, and the knots. ``native_kinds`` is
    False when a map is of another kind (``place`` then takes the numpy path)."""

    def __init__(self, node_maps: list) -> None:
        self.maps = node_maps
        n = len(node_maps)
        self.kind = np.full(n, -1, dtype=np.int64)
        self.offset = np.zeros(n)
        self.rate = np.zeros(n)
        self.knot_start = np.zeros(n + 1, dtype=np.int64)
        knots_node: list[np.ndarray] = []
        knots_ref: list[np.ndarray] = []
        #: every map of a kind the compiled loop computes
        self.native_kinds = True
        for i, m in enumerate(node_maps):
            if m is None:
                pass
            elif type(m).to_reference is NodeMap.to_reference:
                self.kind[i] = 0
                self.offset[i], self.rate[i] = float(m.offset), float(m.rate)
            elif getattr(type(m), "piecewise_linear", False) and m.knots_node.size >= 2:
                self.kind[i] = 1
                knots_node.append(np.asarray(m.knots_node, dtype=np.float64))
                knots_ref.append(np.asarray(m.knots_ref, dtype=np.float64))
            else:
                self.native_kinds = False
            self.knot_start[i + 1] = self.knot_start[i] + (
                knots_node[-1].size if self.kind[i] == 1 else 0)
        self.knots_node = np.concatenate(knots_node) if knots_node else np.zeros(0)
        self.knots_ref = np.concatenate(knots_ref) if knots_ref else np.zeros(0)


def reversed_count(rec: np.ndarray, usable: np.ndarray, pairs: np.ndarray, first: str,
                   then: str) -> int:
    """How many rows of ``pairs`` (a structured array whose int64 fields ``first`` and
    ``then`` index ``rec``; a negative index: no such record, the row left out) have both
    records ``usable`` and the ``then`` record's time below the ``first`` record's."""
    c_helper = helper("syncloops")
    fields = pairs.dtype.fields
    if (c_helper is not None and fields is not None and _compiled_layout(rec)
            and usable.dtype == np.bool_ and usable.flags.c_contiguous
            and len(usable) == len(rec) and pairs.ndim == 1 and pairs.flags.c_contiguous
            and fields[first][0] == np.dtype("<i8") and fields[then][0] == np.dtype("<i8")):
        return int(c_helper.reversed_count(rec, RECORD_DTYPE.itemsize,
                                           _offset(RECORD_DTYPE, "time"), usable, pairs,
                                           pairs.dtype.itemsize, _offset(pairs.dtype, first),
                                           _offset(pairs.dtype, then)))
    a, b = pairs[first], pairs[then]
    ok = (a >= 0) & (b >= 0)
    return reversed_pairs(rec["time"], usable, a[ok], b[ok])


def reversed_pairs(times: np.ndarray, usable: np.ndarray, first: np.ndarray,
                   then: np.ndarray) -> int:
    """How many pairs (record ``first[i]`` happened before record ``then[i]``: a message's
    send and receive, a DMA's issue and completion) have both records written and the second
    written at an earlier time than the first: ``times`` are the record times as written
    (any table's: the root's gathered MPI records as well as a group's records)."""
    both = usable[first] & usable[then]
    return int(np.count_nonzero(times[then][both] < times[first][both]))


def _nodes(node: np.ndarray) -> list[int]:
    """The distinct values of ``node``, ascending; without sorting when there is one (a
    location's records sit on one node)."""
    if node.size and node.min() == node.max():
        return [int(node[0])]
    return np.unique(node).tolist()


def place(part: np.ndarray, dom_offset: np.ndarray, dom_node: np.ndarray, maps: NodeMaps,
          usable: np.ndarray) -> tuple[int, int, int, int, int, int]:
    """One location's records (``part``, RECORD_DTYPE rows) their times: a record of domain
    d reads node time ``dom_offset[d + 1] + local`` on node ``dom_node[d + 1]`` (index 0:
    no domain, NaN and -1), which its node's map turns into reference ticks; then ``settle``
    (same return value). ``dom_node`` int64; every node a domain of ``part`` names must
    have a map."""
    c_helper = helper("syncloops")
    if (c_helper is not None and maps.native_kinds and _compiled_layout(part)
            and usable.dtype == np.bool_
            and usable.flags.c_contiguous and len(usable) == len(part)
            and dom_offset.dtype == np.float64 and dom_node.dtype == np.int64):
        return c_helper.place(part, RECORD_DTYPE.itemsize, _offset(RECORD_DTYPE, "domain"),
                              _offset(RECORD_DTYPE, "local"), _offset(RECORD_DTYPE, "time"),
                              dom_offset, dom_node, maps.kind, maps.offset, maps.rate,
                              maps.knot_start, maps.knots_node, maps.knots_ref, usable)
    dom = part["domain"].astype(np.int64) + 1
    has = dom > 0
    node_t = dom_offset[dom] + part["local"]  # NaN without a domain or an offset
    node = dom_node[dom]
    ref_t = np.full(len(part), np.nan)
    for i in _nodes(node[has]):
        sel = node == i
        ref_t[sel] = maps.maps[i].to_reference(node_t[sel])
    return settle(ref_t, has, part, usable)
