"""Apply synchronization: solve each node's constraints (``solver.solve``, the node's timebase as
reference), map each node's timebase to the reference node's (the node fit of ``nodefit/`` when
given, else the manifest's start readings), join wrap-split interval segments where one wrap
count fits, and give every record its time in integer reference ticks, never decreasing per
location (docs/design.md). It does not build constraints and writes nothing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..damage import DamageKind, DamageLog
from ..decode.intervals import MOD
from ..model import Constraints, Decoded, DomainKind, LinkKind, Matches, NodeMap, SyncResult
from ..native.sync_loops import NodeMaps, place, reversed_count
from .keep_messages import keep_messages
from .solver import pair_width_stats, solve


def start_time_maps(dec: Decoded) -> list[NodeMap]:
    """Node maps from the manifest's start readings (timebase and wall clock per process)."""
    man = dec.manifest
    hz = man.timebase_hz
    p0 = man.processes[0]
    maps: list[NodeMap | None] = [None] * len(man.nodes)
    ref_node = man.node_of_rank(0)
    maps[ref_node] = NodeMap(0.0, 1.0, 0.0, "reference")
    for p in man.processes:
        n = man.node_of_rank(p.rank)
        if maps[n] is not None:
            continue
        ref_ticks = p0.start_timebase + (p.start_realtime_ns - p0.start_realtime_ns) * hz / 1e9
        maps[n] = NodeMap(float(ref_ticks - p.start_timebase), 1.0, None, "start-times")
    for i, m in enumerate(maps):
        if m is None:  # a node without processes: nothing on it is ever mapped
            maps[i] = NodeMap(0.0, 1.0, None, "unused")
    return maps  # type: ignore[return-value]


#: rounds of deciding wrap counts and solving again with the decided ones joined
_WRAP_ROUNDS = 8
#: ticks of slack on either side of a wrap decision (bounds are loosened by the relaxation
#: already; the readings' truncation to whole ticks on both sides of the step)
_WRAP_TOL = 2.0


def _wrap_chains(links: np.ndarray) -> np.ndarray:
    """Chain number of every WRAP link (sorted by ``prev``): the links of one live interval
    follow each other, each one's ``next`` segment being the following one's ``prev``."""
    if not links.size:
        return np.zeros(0, dtype=np.int64)
    new = np.ones(links.size, dtype=bool)
    new[1:] = links["prev"][1:] != links["next"][:-1]
    return np.cumsum(new) - 1


def _decide_wraps(links: np.ndarray, chain: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                  m: np.ndarray) -> int:
    """Wrap counts the bounds of the segments allow only one value for; fills ``m`` (-1 =
    undecided) in place and returns how many it decided.

    Across WRAP link k, x[next] - x[prev] = c_k + m_k * 2^32 with m_k >= 0 (c_k from the
    readings). Along a chain of segments s_0, s_1, ... of one live interval put
    y[s_j] = x[s_j] - (c_0 + ... + c_{j-1}) - 2^32 * (decided m's before s_j): y never
    decreases and steps by 2^32 per hidden wrap. ``lower``/``upper`` bound every x against
    the node's timebase (the two single-source searches of ``solver.solve``), so they bound y.
    A link k hides no wrap when some segment at or before it and some after it are less than
    2^32 apart in y (a prefix maximum of the lower bounds against a suffix minimum of the
    upper ones); segments so joined share their y, and between two such groups the wrap count
    is decided when exactly one whole number of wraps fits their bounds. Memory and time
    linear in the links.
    """
    before = int((m >= 0).sum())
    c = (links["local_prev"].astype(np.float64) + links["value"] - links["local_next"])
    for ch in np.unique(chain[m < 0]).tolist():
        k = np.flatnonzero(chain == ch)
        seg = np.concatenate([links["prev"][k[:1]], links["next"][k]]).astype(np.int64)
        shift = np.concatenate([[0.0], np.cumsum(c[k] + np.where(m[k] > 0, m[k], 0) * MOD)])
        lo, hi = lower[seg] - shift, upper[seg] - shift
        lo = np.where(np.isnan(lo), -np.inf, lo)
        hi = np.where(np.isnan(hi), np.inf, hi)
        open_ = m[k] < 0
        # a prefix of segments against a suffix: nothing hidden between them
        zero = (np.minimum.accumulate(hi[::-1])[::-1][1:]
                - np.maximum.accumulate(lo)[:-1]) < MOD - _WRAP_TOL
        m[k[open_ & zero]] = 0
        open_ = m[k] < 0
        if not open_.any():
            continue
        # groups of segments joined by decided links: one y each
        group = np.concatenate([[0], np.cumsum(open_)])
        g_lo = np.full(group[-1] + 1, -np.inf)
        g_hi = np.full(group[-1] + 1, np.inf)
        np.maximum.at(g_lo, group, lo)
        np.minimum.at(g_hi, group, hi)
        b = np.flatnonzero(open_)  # link b joins group[b] and group[b] + 1
        gl, gh = group[b], group[b] + 1
        lo_d, hi_d = g_lo[gh] - g_hi[gl], g_hi[gh] - g_lo[gl]
        fin = np.isfinite(lo_d) & np.isfinite(hi_d)
        m_lo = np.maximum(0, np.ceil((np.where(fin, lo_d, 0) - _WRAP_TOL) / MOD))
        m_hi = np.floor((np.where(fin, hi_d, 0) + _WRAP_TOL) / MOD)
        one = fin & (m_lo == m_hi)
        m[k[b[one]]] = m_lo[one].astype(np.int64)
    return int((m >= 0).sum()) - before


def _joined(links: np.ndarray, chain: np.ndarray, m: np.ndarray, n: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Segments joined by decided wrap counts as one clock: per domain, the domain standing
    for its run of joined segments (``rep``) and its offset from it in ticks
    (x[d] = x[rep[d]] + shift[d]; 0 and itself for every other domain). Exact integers: both
    segments read the same decrementer."""
    rep = np.arange(n, dtype=np.int64)
    shift = np.zeros(n, dtype=np.int64)
    done = m >= 0
    gap = np.where(done, links["local_prev"] + links["value"] - links["local_next"]
                   + np.maximum(m, 0) * MOD, 0).astype(np.int64)
    start = np.ones(links.size, dtype=bool)
    start[1:] = chain[1:] != chain[:-1]
    start |= ~done  # a run of joined segments begins at an open link or a chain's start
    first = np.flatnonzero(start)
    run = np.cumsum(start) - 1
    root = np.where(done[first], links["prev"][first], links["next"][first]).astype(np.int64)
    total = np.cumsum(gap)
    before = total[first] - gap[first]
    nxt = links["next"][done].astype(np.int64)
    rep[nxt] = root[run[done]]
    shift[nxt] = total[done] - before[run[done]]
    return rep, shift.astype(np.float64)


def synchronize(dec: Decoded, cons: Constraints, alpha: float = 0.5,
                node_maps: list[NodeMap] | None = None,
                damage: DamageLog | None = None) -> SyncResult:
    """Solve every node's SPE intervals against that node's timebase.

    Segments of a live interval that ``decode`` split at a step that may hide wraps are joined
    again where the bounds decide the wrap count (``_decide_wraps``): solved again as one
    clock (``_joined``: their offsets differ by ticks known exactly from the readings), until
    a round decides nothing more. What stays
    open is damage counted in records: those of the segments after the first open link of
    their interval, which their own constraints still place."""
    result = _synchronize(dec, cons, alpha, node_maps)
    links = dec.links[dec.links["kind"] == LinkKind.WRAP]
    if not links.size:
        _contradicting_order(dec, result, damage)
        return result
    links = links[np.argsort(links["prev"], kind="stable")]
    chain = _wrap_chains(links)
    m = np.full(links.size, -1, dtype=np.int64)
    for _ in range(_WRAP_ROUNDS):
        if not _decide_wraps(links, chain, result.lower, result.upper, m):
            break
        cons.counts["wrap_decided"] = int((m >= 0).sum())
        rep, shift = _joined(links, chain, m, dec.domains.size)
        merged = Constraints(rep[cons.src], rep[cons.dst],
                             cons.weight + shift[cons.src] - shift[cons.dst], cons.counts,
                             cons.assumed, hard=cons.hard)
        result = _synchronize(dec, merged, alpha, node_maps)
        for values in (result.offset, result.lower, result.upper, result.offset_low,
                       result.offset_high):
            if values is not None:  # ``_synchronize`` sets every one
                values[:] = values[rep] + shift
        result.bounded[:] = result.bounded[rep]
    open_ = m < 0
    if open_.any() and damage is not None:
        # every segment after an open link of its chain
        after = np.zeros(links.size, dtype=bool)
        for ch in np.unique(chain[open_]).tolist():
            k = np.flatnonzero(chain == ch)
            after[k] = np.cumsum(open_[k]) > 0
        rec_dom = dec.records["domain"].astype(np.int64)
        rank_of = dec.domains["rank"].astype(np.int64)
        step_rank = rank_of[links["next"][open_].astype(np.int64)]
        for rank in np.unique(step_rank).tolist():
            doms = links["next"][after].astype(np.int64)
            doms = doms[rank_of[doms] == rank]
            on = np.zeros(dec.domains.size + 1, dtype=bool)  # the last: no domain (-1)
            on[doms] = True
            steps = int((step_rank == rank).sum())
            hit = on[rec_dom]
            slot = int(dec.records["slot"][hit].min()) if hit.any() else None
            damage.add(DamageKind.unresolved_wrap, dec.dump_names[rank], slot, int(hit.sum()),
                       "decrementer steps whose wrap count neither slot order nor the other "
                       "constraints decide (no heartbeat, no PPE record bounding them): the "
                       "records after each are placed by their own constraints only, as their "
                       "bounds say", occurrences=steps)
    _contradicting_order(dec, result, damage)
    return result


#: a node relaxation from this many ticks on (half a decrementer period) is no lost slot's or
#: read delay's (those need hundreds to thousands of ticks, docs/damage.md): the slot order
#: and the clock readings contradict each other, as a tracer bug leaves them
CONTRADICTING_RELAXATION = float(1 << 31)


def _contradicting_order(dec: Decoded, result: SyncResult, damage: DamageLog | None) -> None:
    """Count as damage the SPE records of each node whose relaxation reaches
    ``CONTRADICTING_RELAXATION``, per dump (its first such slot): they are
    written, at times that may be off by that much."""
    if damage is None or result.node_relaxation is None:
        return
    bad = np.flatnonzero(result.node_relaxation >= CONTRADICTING_RELAXATION)
    if not bad.size:
        return
    doms = dec.domains
    dom_bad = np.isin(doms["node"], bad) & (doms["kind"] == DomainKind.SPE_INTERVAL)
    rec_dom = dec.records["domain"].astype(np.int64)
    hit = np.flatnonzero((rec_dom >= 0) & dom_bad[np.maximum(rec_dom, 0)])
    hit_rank = dec.locations["rank"][dec.records["loc"][hit]]
    for rank in np.unique(hit_rank).tolist():
        mine = hit[hit_rank == rank]
        relax = float(result.node_relaxation[int(doms["node"][rec_dom[mine[0]]])])
        damage.add(DamageKind.contradicting_order, dec.dump_names[rank],
                   int(dec.records["slot"][mine].min()), int(mine.size),
                   f"relaxation {relax:.0f} ticks: the slot order contradicts the decrementer "
                   "readings (a tracer bug: check names it where the dumps show one)")


def _synchronize(dec: Decoded, cons: Constraints, alpha: float,
                 node_maps: list[NodeMap] | None) -> SyncResult:
    doms = dec.domains
    n = doms.size
    offset = np.zeros(n)
    lower = np.zeros(n)
    upper = np.zeros(n)
    offset_low = np.zeros(n)
    offset_high = np.zeros(n)
    bounded = np.full(n, "both", dtype="<U5")
    relaxation = 0.0
    node_relaxation = np.zeros(dec.n_nodes)
    solutions = []
    node_of_dom = doms["node"]
    for node in range(dec.n_nodes):
        members = np.flatnonzero(node_of_dom == node)
        if members.size <= 1:
            continue
        local_index = np.full(n, -1, dtype=np.int64)
        local_index[members] = np.arange(members.size)
        s, d = local_index[cons.src], local_index[cons.dst]
        keep = (s >= 0) & (d >= 0)
        ref = int(local_index[node])
        sol = solve(members.size, s[keep], d[keep], cons.weight[keep], ref, alpha)
        if sol.relaxation > 0 and cons.hard is not None:  # messages the relaxation reversed
            kept = keep_messages(members.size, s[keep], d[keep], cons.weight[keep],
                                 cons.hard[keep], ref, sol.offset, sol.relaxation)
            if kept is not None:  # the bounds widened to the offsets where they left them
                moved = kept[0]
                sol = replace(sol, offset=moved, lower=np.fmin(sol.lower, moved),
                              upper=np.fmax(sol.upper, moved))
        offset[members], lower[members], upper[members] = sol.offset, sol.lower, sol.upper
        offset_low[members], offset_high[members] = sol.offset_low, sol.offset_high
        bounded[members] = sol.bounded
        relaxation = max(relaxation, sol.relaxation)
        node_relaxation[node] = sol.relaxation
        solutions.append(sol)
    is_node = doms["kind"] == DomainKind.NODE
    offset[is_node] = lower[is_node] = upper[is_node] = 0.0
    offset_low[is_node] = offset_high[is_node] = 0.0
    bounded[is_node] = "both"
    return SyncResult(offset, lower, upper, bounded, relaxation,
                      node_maps or start_time_maps(dec), solutions,
                      node_relaxation=node_relaxation, constraints=cons,
                      offset_low=offset_low, offset_high=offset_high)


#: the report's pairs cost one Dijkstra over a node's domains per pair domain and direction:
#: the pair domains of a node are all of them while domains x pair domains stays within this,
#: else an evenly spaced subset of at least ``PAIRS_MIN_DOMAINS`` (the report's ``domains`` <
#: ``of``), which bounds the report's time per node (docs/performance.md)
PAIRS_BUDGET = 1000 * 1000
PAIRS_MIN_DOMAINS = 100


def pair_table(dec: Decoded, result: SyncResult, max_domains: int | None = None) -> list[dict]:
    """The report's ``pairs`` (docs/sync-report.md): per node with SPE intervals, the published
    Table 1 figures over its node domain and its SPE intervals bounded from both sides (at
    most ``max_domains`` in all, evenly spaced; default from ``PAIRS_BUDGET``), in the
    constraints ``result`` solved, loosened by that node's relaxation
    (``solver.pair_width_stats``: error of a pair = width of the two domains' relative offset;
    memory linear in the node's domains). Stores them in ``result.pairs`` too. Needs
    ``result.constraints``."""
    if result.pairs is not None:
        return result.pairs
    cons = result.constraints
    if cons is None:
        raise ValueError("pair_table needs the constraints the result solved")
    doms = dec.domains
    names = [n.name for n in dec.manifest.nodes]
    out = []
    iv = (doms["kind"] == DomainKind.SPE_INTERVAL) & (result.bounded == "both")
    for node in np.unique(doms["node"][iv]).tolist():
        members = np.flatnonzero(doms["node"] == node)
        index = np.full(doms.size, -1, dtype=np.int64)
        index[members] = np.arange(members.size)
        s, d = index[cons.src], index[cons.dst]
        ok = (s >= 0) & (d >= 0)
        mine = np.flatnonzero(iv & (doms["node"] == node))
        total = mine.size
        most = (max_domains if max_domains is not None
                else max(PAIRS_MIN_DOMAINS, PAIRS_BUDGET // members.size))
        if mine.size > most - 1:
            mine = mine[np.linspace(0, mine.size - 1, most - 1).round().astype(np.int64)]
        keep = np.r_[node, mine]
        relax = (float(result.node_relaxation[node]) if result.node_relaxation is not None
                 else float(result.relaxation))
        st = pair_width_stats(members.size, s[ok], d[ok], cons.weight[ok], relax,
                              index[keep], np.arange(keep.size) > 0, int(index[node]))
        out.append({"node": names[node], "max_all_ticks": st["max_all"],
                    "max_spe_ticks": st["max_spe"], "mean_spe_ppe_ticks": st["mean_spe_ppe"],
                    "mean_spe_spe_ticks": st["mean_spe_spe"], "domains": int(keep.size),
                    "of": int(total) + 1})
    result.pairs = out
    return out


def apply_times(dec: Decoded, result: SyncResult, damage: DamageLog) -> None:
    """Fill ``dec.records['time']`` (reference ticks) and ``result.usable``.

    Location by location (each location's records are one range and sit on one node), so no
    temporary spans the whole record table."""
    rec = dec.records
    # offset and node per domain; index 0 stands for "no domain" (-1): NaN, no node
    dom_offset = np.concatenate([[np.nan], result.offset])
    dom_node = np.concatenate([[-1], dec.domains["node"]]).astype(np.int64)
    maps = NodeMaps(result.node_maps)
    usable = np.zeros(rec.size, dtype=bool)
    unbounded_n = lost_n = clamped = violations = 0
    unbounded_first = lost_first = -1
    starts = dec.location_starts()
    # the offsets at either end of what --alpha may choose (alpha 0 and 1; one-sided domains
    # follow the placed ones): a record whose time leaves 0..2^63 at one of them is lost
    # whatever offset is used (a result without them, given offsets only: those offsets)
    low = result.offset if result.offset_low is None else result.offset_low
    high = result.offset if result.offset_high is None else result.offset_high
    dom_lower = np.concatenate([[np.nan], low])
    dom_upper = np.concatenate([[np.nan], high])
    width = np.nan_to_num(np.abs(dom_upper - dom_lower), nan=0.0)
    for s, e in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
        if s == e:
            continue
        v, c, n_unbounded, at_unbounded, n_lost, at_lost = place(
            rec[s:e], dom_offset, dom_node, maps, usable[s:e])
        n_lost, at_lost = _lost_at_bounds(rec[s:e], usable[s:e], n_lost, at_lost, width,
                                          (dom_lower, dom_upper), dom_node, maps)
        violations += v
        clamped += c
        if n_unbounded:
            unbounded_n += n_unbounded
            unbounded_first = s + at_unbounded if unbounded_first < 0 else unbounded_first
        if n_lost:
            lost_n += n_lost
            lost_first = s + at_lost if lost_first < 0 else lost_first
    for n, at, message in (
        (unbounded_n, unbounded_first, "records of a live interval that no order constraint "
         "bounds: no offset is made up, the records are not written"),
        (lost_n, lost_first, "records whose time falls outside 0..2^63 ticks (a corrupt "
         "reading), or without a clock on a location that has none: not written"),
    ):
        if n:
            rank = int(dec.locations["rank"][rec["loc"][at]])
            damage.add(DamageKind.unusable_time, dec.dump_names[rank], int(rec["slot"][at]), n,
                       message)
    result.usable = usable
    result.held_back = violations
    result.clamped = clamped


def _lost_at_bounds(part: np.ndarray, usable: np.ndarray, n_lost: int, at_lost: int,
                    width: np.ndarray, bounds: tuple[np.ndarray, np.ndarray],
                    dom_node: np.ndarray, maps: NodeMaps) -> tuple[int, int]:
    """One location's records placed (``usable``) that would fall outside 0..2^63 ticks
    with their domains' offsets at their lower or upper bound: made unusable and added to
    the lost (``n_lost``, first at ``at_lost``), so that what is lost does not depend on
    where the offsets sit. Only a location whose times come within its widest bound of the
    edges is placed again (twice, on copies)."""
    if not usable.any():
        return n_lost, at_lost
    t = part["time"][usable]
    w = float(width[part["domain"].astype(np.int64) + 1].max()) * 1.001 + 2.0
    if float(t.min()) - w > 0 and float(t.max()) + w < 2.0**63:
        return n_lost, at_lost
    keep = usable.copy()
    for offsets in bounds:
        scratch = part.copy()
        ok = np.zeros(len(part), dtype=bool)
        place(scratch, offsets, dom_node, maps, ok)
        keep &= ok
    gone = np.flatnonzero(usable & ~keep)
    if gone.size:
        usable[gone] = False
        n_lost += int(gone.size)
        at_lost = int(gone[0]) if n_lost == gone.size else min(at_lost, int(gone[0]))
    return n_lost, at_lost


def written_order_violations(dec: Decoded, matches: Matches, usable: np.ndarray) -> int:
    """The matched pairs of ``matches`` (messages, mailboxes, signals, DMA issue and
    completion) whose written times (``dec.records['time']``, after ``apply_times``) are
    reversed."""
    rec = dec.records  # a DMA without completion (complete -1) is left out
    return (reversed_count(rec, usable, matches.messages, "send", "recv")
            + reversed_count(rec, usable, matches.dma, "issue", "complete"))
