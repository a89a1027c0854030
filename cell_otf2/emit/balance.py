"""Enter/Leave repair of an event table: every location's Enter and Leave events are made to
balance and nest, also where records were lost, by closing regions left open and dropping
Leaves of regions not open, each repair counted in the damage log (docs/archive.md section
16). It writes no other event and decides nothing about which records become events.
"""

from __future__ import annotations

import numpy as np

from ..damage import DamageKind, DamageLog
from ..model import Ev
from .table import EventPart, EventTable, event_param

_REGION_EVENTS = {int(Ev.ENTER): 1, int(Ev.ENTER_OFF_SPU): 1, int(Ev.LEAVE): -1}


def balance_regions(ev: EventTable, slot: np.ndarray, loc_rank: np.ndarray,
                    dump_names: list[str], damage: DamageLog) -> None:
    """Keep every location's Enter and Leave events balanced and nested, also where records
    were lost: a region still open when an enclosing region is left is closed by a Leave
    right before that Leave, one still open at the location's end by a Leave at its last
    event (innermost first); a Leave of a region that is not open is not written. Each
    repair is counted (``unclosed_region``, ``leave_without_enter``).

    The check is vectorized over every Enter/Leave in final order: per location, the depth
    never below 0, 0 at the end, and at each depth level Enter and Leave alternating with the
    same region. Only the locations that fail it are walked one event at a time."""
    ev.layout()
    parts = [(True, k, p) for k, p in enumerate(ev.own_parts) if p.typ in _REGION_EVENTS]
    inv = None
    f_at = np.cumsum([0] + [p.size for p in ev.foreign])
    if ev.foreign:
        inv = np.empty(ev.f_order.size, dtype=np.int64)
        inv[ev.f_order] = np.arange(ev.f_order.size)
        parts += [(False, k, p) for k, p in enumerate(ev.foreign) if p.typ in _REGION_EVENTS]
    if not parts:
        return
    final, step, refs = [], [], []
    for own, k, p in parts:
        if own:
            pos = p.pos.astype(np.int64)
            final.append(pos + np.searchsorted(ev.f_insert, pos, side="right"))
        else:
            j = inv[f_at[k]:f_at[k + 1]]
            final.append(ev.f_insert[j] + j)
        step.append(np.full(p.size, _REGION_EVENTS[p.typ], dtype=np.int8))
        refs.append(np.broadcast_to(np.asarray(p.ref, dtype=np.int64), (p.size,)))
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
    if not wrong_locs.size and not bad.any():
        return
    flagged = np.unique(np.concatenate([wrong_locs, loc[bad]]))
    sizes = np.array([p.size for _own, _k, p in parts], dtype=np.int64)
    src_all = np.repeat(np.arange(len(parts)), sizes)[order]
    idx_all = (np.arange(order.size) - np.repeat(np.cumsum(sizes) - sizes, sizes))[order]
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
