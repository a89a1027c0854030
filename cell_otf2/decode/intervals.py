"""SPE live intervals: ``split_intervals`` assigns each of one context's decrementer readings
(record and block-header ``decr`` values, in program order) to a live interval, given its DECR_WRITE
readings and CTX_SWITCH STOP/START pairs, and computes ``local = -unwrapped(decr)`` by the rules
of docs/format.md sections 6-7; steps of 2^31 ticks or more are reported in ``big_steps`` unless
the caller says which split (``force_split``). Vectorized per context (docs/design.md). It does
not know about records, slots or files, and does not estimate offsets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..native.record_loops import run_locals, split_live, unwrap

MOD = 1 << 32
HALF = 1 << 31


@dataclass
class IntervalSplit:
    """Result of ``split_intervals`` for one context."""

    interval: np.ndarray  # int32 per reading: its interval number
    local: np.ndarray  # int64 per reading: -unwrapped(decr) within its interval
    n_intervals: int
    #: per interval k > 0, what started it: ("switch", switch index), ("write", reading index
    #: of the DECR_WRITE) or ("wrap", index of the reading after a step >= 2^31); interval 0
    #: is ("first", -1)
    starts: list[tuple[str, int]]
    big_steps: np.ndarray  # reading indexes i whose step from reading i-1 is >= 2^31


def split_intervals(
    raw: np.ndarray,
    write_new: np.ndarray,
    stop_values: np.ndarray,
    start_values: np.ndarray,
    split_big_steps: bool = False,
    force_split: np.ndarray | None = None,
    certain_before: np.ndarray | None = None,
) -> IntervalSplit:
    """Assign readings to live intervals.

    ``raw``: raw 32-bit decrementer readings in program order. ``write_new``: per reading, the
    value written by a DECR_WRITE whose reading this is, or -1. ``stop_values`` /
    ``start_values``: the context's CTX_SWITCH pairs in order.
    """
    raw = np.asarray(raw, dtype=np.int64)
    write_new = np.asarray(write_new, dtype=np.int64)
    cum, n_big = unwrap(raw)
    stop_values = np.asarray(stop_values, dtype=np.int64).reshape(-1)
    start_values = np.asarray(start_values, dtype=np.int64).reshape(-1)
    before = (None if certain_before is None
              else np.asarray(certain_before, dtype=np.int64).reshape(-1))
    compiled = split_live(raw, cum, write_new, stop_values, start_values, before)
    if compiled is not None:
        interval, kinds, refs, n_intervals = compiled
        names = ("first", "switch", "write")
        starts = [("first", -1)] + [(names[c], r) for c, r in
                                    zip(kinds.tolist(), refs.tolist(), strict=True)]
    else:
        interval, starts, n_intervals = _walk(raw, cum, write_new, stop_values,
                                              start_values, before)
    return _finish(raw, cum, n_big, interval, starts, n_intervals, split_big_steps,
                   force_split)


def _walk(raw: np.ndarray, cum: np.ndarray, write_new: np.ndarray, stop_values: np.ndarray,
          start_values: np.ndarray, certain_before: np.ndarray | None
          ) -> tuple[np.ndarray, list[tuple[str, int]], int]:
    """``split_intervals``' walk over the readings, switch by switch and write by write (the
    twin of the compiled ``loops.split_live``): each reading's interval, what started each
    interval and their number."""
    n = raw.size
    writes = np.flatnonzero(write_new >= 0)
    n_switch = len(stop_values)
    interval = np.empty(n, dtype=np.int32)
    starts: list[tuple[str, int]] = [("first", -1)]
    k = 0  # current interval
    s = 0  # next pending switch
    i0 = 0  # first unassigned reading
    p = int(raw[0]) if n else 0  # value the current interval counted from
    w_ptr = 0
    while i0 < n:
        while w_ptr < writes.size and writes[w_ptr] < i0:
            w_ptr += 1
        seg_end = int(writes[w_ptr]) if w_ptr < writes.size else n - 1
        j = seg_end + 1
        if s < n_switch:
            stop = int(stop_values[s])
            known = int(certain_before[s]) if certain_before is not None else 0
            r = min(known, seg_end + 1) - 1  # last reading certainly before the STOP
            if r >= i0:
                # the first pass of the STOP value after reading r
                limit = int(cum[r]) + (int(raw[r]) - stop) % MOD
                j = int(np.searchsorted(cum[i0 : seg_end + 1], limit, side="right")) + i0
            else:
                d_stop = (p - stop) % MOD
                base = (p - int(raw[i0])) % MOD
                limit = d_stop - base + int(cum[i0])
                j = int(np.searchsorted(cum[i0 : seg_end + 1], limit, side="right")) + i0
                if base > d_stop:
                    j = i0
        if j <= seg_end:
            # readings i0..j-1 are before switch s; the next reading starts a new interval
            interval[i0:j] = k
            k += 1
            starts.append(("switch", s))
            p = int(start_values[s])
            s += 1
            i0 = j
            continue
        interval[i0 : seg_end + 1] = k
        i0 = seg_end + 1
        if write_new[seg_end] >= 0:
            k += 1
            starts.append(("write", seg_end))
            p = int(write_new[seg_end])
    # switches after the last reading still start (empty) intervals
    while s < n_switch:
        k += 1
        starts.append(("switch", s))
        s += 1
    return interval, starts, k + 1


def _finish(raw: np.ndarray, cum: np.ndarray, n_big: int, interval: np.ndarray,
            starts: list[tuple[str, int]], n_intervals: int, split_big_steps: bool,
            force_split: np.ndarray | None) -> IntervalSplit:
    """The wraps that may be hidden (split into intervals of their own when asked) and every
    reading's local time, after the walk."""
    n = raw.size
    big = np.zeros(0, dtype=np.int64)
    if n and (force_split is not None or n_big != 0):
        first = np.ones(n, dtype=bool)
        first[1:] = interval[1:] != interval[:-1]
        # the steps that may hide a wrap: those of 2^31 or more, unless the caller says
        candidates = (np.diff(cum, prepend=cum[:1]) >= HALF if force_split is None
                      else force_split)
        big = np.flatnonzero(candidates & ~first)
        if split_big_steps and big.size:
            # an ambiguous wrap count: the readings after it get an interval of their own
            is_big = np.zeros(n, dtype=np.int32)
            is_big[big] = 1
            shift = np.cumsum(is_big)
            # each old interval keeps its start, followed by the wraps inside it (big is
            # ascending, so the wraps of interval k are one run of it): one merge, not a scan
            # of every wrap per interval
            where = np.searchsorted(interval[big], np.arange(len(starts) + 1))
            wraps = [("wrap", i) for i in big.tolist()]
            new_starts: list[tuple[str, int]] = []
            for k_old, start in enumerate(starts):
                new_starts.append(start)
                new_starts.extend(wraps[where[k_old]:where[k_old + 1]])
            interval = interval + shift.astype(np.int32)
            starts = new_starts
            n_intervals += int(big.size)
    # each run of equal interval numbers is one interval (a split wrap starts a run of its
    # own): its readings' times count from its first
    local = run_locals(raw, cum, interval)
    return IntervalSplit(interval, local, n_intervals, starts, big)
