"""Enter/Leave repair of an event table: every location's Enter and Leave events are made to
balance and nest, also where records were lost, by closing regions left open and dropping
Leaves of regions not open, each repair counted in the damage log (docs/archive.md section
16). It writes no other event and decides nothing about which records become events.
"""

from __future__ import annotations

import numpy as np

from ..damage import DamageKind, DamageLog
from ..model import Ev
from .kernels import region_flags
from .table import EventPart, EventTable, event_param, one_type

_REGION_EVENTS = {int(Ev.ENTER): 1, int(Ev.ENTER_OFF_SPU): 1, int(Ev.LEAVE): -1}
#: region codes (step * (ref + 1)) the compiled check takes
_MAX_CODE = (1 << 31) - 1


def balance_regions(ev: EventTable, slot: np.ndarray, loc_rank: np.ndarray,
                    dump_names: list[str], damage: DamageLog) -> None:
    """Keep every location's Enter and Leave events balanced and nested, also where records
    were lost: a region still open when an enclosing region is left is closed by a Leave
    right before that Leave, one still open at the location's end by a Leave at its last
    event (innermost first); a Leave of a region that is not open is not written. Each
    repair is counted (``unclosed_region``, ``leave_without_enter``).

    The check (``_flagged``) is one compiled stack walk per location, or vectorized over
    every Enter/Leave in final order. Only the locations that fail it are walked here one
    event at a time."""
    ev.layout()
    parts = [(True, k, p) for k, p in enumerate(ev.own_parts)
             if one_type(p) in _REGION_EVENTS]
    inv = None
    f_at = np.cumsum([0] + [p.size for p in ev.foreign])
    if ev.foreign:
        inv = np.empty(ev.f_order.size, dtype=np.int64)
        inv[ev.f_order] = np.arange(ev.f_order.size)
        parts += [(False, k, p) for k, p in enumerate(ev.foreign)
                  if one_type(p) in _REGION_EVENTS]
    if not parts:
        return
    flagged = _flagged(ev, parts, inv, f_at)
    if not flagged.size:
        return
    drop: dict[int, list[int]] = {}
    closers: list[tuple] = []  # (where, loc, ref, sub, anchor: (part, index))
    unclosed: dict[int, list[int]] = {}  # rank -> slots of the Enters closed
    unopened: dict[int, list[int]] = {}
    for L in flagged.tolist():
        d, ref, src_all, idx_all = _location_events(ev, parts, inv, f_at, L)

        def rec_of(j: int, src_all=src_all, idx_all=idx_all) -> int:
            return int(parts[int(src_all[j])][2].rec[int(idx_all[j])])

        rank = int(loc_rank[L])
        stack: list[int] = []
        for j in range(d.size):
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
                    closers.append(("before", L, int(ref[x]), sub,
                                    (int(src_all[j]), int(idx_all[j]))))
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
        own, _, p = parts[j[0]]
        e = j[1]
        if own:
            ev.pin("own", [L], Ev.LEAVE, r, sub=sub, anchor=[int(p.rec[e])],
                   seq=int(p.rec[e]) * 8 + p.offset)
        else:  # right before a foreign Leave: its time and seq, a lower sub
            part = EventPart(p.rec[e:e + 1], p.offset, int(Ev.LEAVE),
                             event_param(np.array([r])), {},
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


def _final_positions(ev: EventTable, parts: list, inv, f_at, k: int,
                     sel: slice | np.ndarray = slice(None)) -> np.ndarray:
    """Final positions (int64) of the events ``sel`` of region part ``k``."""
    own, j, p = parts[k]
    if own:
        pos = p.pos[sel].astype(np.int64)
        return pos + np.searchsorted(ev.f_insert, pos, side="right")
    at = inv[f_at[j]:f_at[j + 1]][sel]
    return ev.f_insert[at] + at


def _location_events(ev: EventTable, parts: list, inv, f_at, L: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The region events of location ``L`` in final order: step (+1 Enter, -1 Leave), ref,
    region part and index in it."""
    lo, hi = int(ev.loc_start[L]), int(ev.loc_start[L + 1])
    final, step, refs, src, idx = [], [], [], [], []
    for k, (own, _j, p) in enumerate(parts):
        if own:  # own positions of L are a range, each part's ascending
            r_lo, r_hi = int(ev.own_start[L]), int(ev.own_start[L + 1])
            a, b = np.searchsorted(p.pos, np.array([r_lo, r_hi], dtype=p.pos.dtype))
            sel = np.arange(a, b)
        else:
            sel = np.flatnonzero(p.loc == L)
        f = _final_positions(ev, parts, inv, f_at, k, sel)
        keep = (f >= lo) & (f < hi)
        sel = sel[keep]
        final.append(f[keep])
        step.append(np.full(sel.size, _REGION_EVENTS[p.typ], dtype=np.int8))
        ref = np.asarray(p.ref, dtype=np.int64)
        refs.append(ref[sel] if ref.ndim else np.full(sel.size, int(ref), dtype=np.int64))
        src.append(np.full(sel.size, k, dtype=np.int64))
        idx.append(sel)
    order = np.argsort(np.concatenate(final), kind="stable")
    step_all, refs_all, src_all, idx_all = (np.concatenate(x)[order]
                                            for x in (step, refs, src, idx))
    return step_all, refs_all, src_all, idx_all


def _flagged(ev: EventTable, parts: list, inv, f_at) -> np.ndarray:
    """The locations whose Enter and Leave events fail to balance and nest, ascending:
    through ``kernels.region_flags`` (one stack walk per location) where it can, else
    vectorized over every Enter/Leave in final order: per location, the depth never below 0,
    0 at the end, and at each depth level Enter and Leave alternating with the same region
    (the same locations)."""
    own = [(p.pos, p.ref, _REGION_EVENTS[p.typ]) for is_own, _k, p in parts if is_own]
    f_code = np.zeros(ev.f_loc.size, dtype=np.int64)
    for is_own, k, p in parts:
        if not is_own:
            f_code[inv[f_at[k]:f_at[k + 1]]] = _REGION_EVENTS[p.typ] * (
                np.asarray(p.ref, dtype=np.int64) + 1)
    if not f_code.size or (f_code.min() >= -_MAX_CODE and f_code.max() <= _MAX_CODE):
        f_start = np.searchsorted(ev.f_loc, np.arange(ev.n_locations + 1), side="left")
        flags = region_flags(ev.own_start, own, f_code.astype(np.int32), ev.f_insert,
                             f_start)
        if flags is not None:
            return np.flatnonzero(flags)
    final = [_final_positions(ev, parts, inv, f_at, k) for k in range(len(parts))]
    step = [np.full(p.size, _REGION_EVENTS[p.typ], dtype=np.int8) for _o, _k, p in parts]
    refs = [np.broadcast_to(np.asarray(p.ref, dtype=np.int64), (p.size,))
            for _o, _k, p in parts]
    # final positions are distinct: order by them through a table over every position (no
    # sort), and read each event's location off the location starts
    final_all = np.concatenate(final)
    del final
    by_pos = np.full(ev.size, -1, dtype=np.int64)
    by_pos[final_all] = np.arange(final_all.size)
    fin = np.flatnonzero(by_pos >= 0)
    order = by_pos[fin]
    del by_pos, final_all
    loc = np.searchsorted(ev.loc_start, fin, side="right") - 1
    del fin
    d = np.concatenate(step)[order]
    ref = np.concatenate(refs)[order]
    depth = np.cumsum(d, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate([[True], loc[1:] != loc[:-1]]))
    base = np.concatenate([[0], depth[starts[1:] - 1]])
    depth -= np.repeat(base, np.diff(np.append(starts, loc.size)))
    bad = np.zeros(loc.size, dtype=bool)
    ends = np.append(starts[1:], loc.size) - 1
    bad[starts] |= depth[ends] != 0
    low = np.minimum.reduceat(depth, starts) < 0
    bad[starts[low]] = True
    level = depth + (d < 0)
    wrong_locs = _alternation_failures(loc, level, d, ref)
    return np.unique(np.concatenate([wrong_locs, loc[bad]]))


def _alternation_failures(loc: np.ndarray, level: np.ndarray, d: np.ndarray,
                          ref: np.ndarray) -> np.ndarray:
    """Locations (with repeats) where, at some depth level, Enter and Leave do not alternate
    starting with an Enter, or a Leave's region is not its Enter's. ``loc`` is ascending (the
    events in final order). Level by level when there are few levels (each one pass over the
    events, no sort), else by one stable sort by (location, level)."""
    lo, hi = (int(level.min()), int(level.max())) if level.size else (0, -1)
    if hi - lo < 64:
        found = []
        for v in range(lo, hi + 1):
            at = np.flatnonzero(level == v)
            if not at.size:
                continue
            found.append(_wrong_in_groups(loc[at], d[at], ref[at]))
        return np.concatenate(found) if found else np.zeros(0, loc.dtype)
    g = np.lexsort((level, loc))  # stable: final order within a (location, level)
    key = loc[g] * (hi - lo + 2) + (level[g] - lo)
    return loc[g][_wrong_mask(key, d[g], ref[g])]


def _wrong_in_groups(ll: np.ndarray, dd: np.ndarray, rr: np.ndarray) -> np.ndarray:
    wrong = _wrong_mask(ll, dd, rr)
    return ll[wrong] if wrong.any() else ll[:0]


def _wrong_mask(group: np.ndarray, dd: np.ndarray, rr: np.ndarray) -> np.ndarray:
    """Per event of runs of equal ``group``: the first of its run and not an Enter, of the same
    kind as the event before it in its run, or a Leave of another region than that event (a
    run breaks the Enter, Leave, Enter, ... alternation, or a Leave closes another region, iff
    one of its events is marked)."""
    n = group.size
    wrong = np.empty(n, bool)
    new = group[1:] != group[:-1]
    wrong[0] = dd[0] != 1
    leave = dd[1:] == -1
    wrong[1:] = np.where(new, leave, (dd[1:] == dd[:-1]) | (leave & (rr[1:] != rr[:-1])))
    return wrong
