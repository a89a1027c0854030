"""Slot arrays of every dump -> the decoded trace: locations, records in program order, clock
domains with local times (``intervals.split_intervals``), the slot-order anchor stream and the
links between intervals (docs/design.md), with contained damage recorded (undefined ids, a PPE
timebase running backwards, missing blocks, unpaired CTX_SWITCH records, decrementer steps that
may hide a wrap). It does not match messages (``match.py``), build constraints (``order.py``)
or correct time (``synchronize.py``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..damage import DamageKind, DamageLog
from ..input import format as fmt
from ..input.manifest import Manifest
from ..input.reader import Dump
from ..model import (
    ANCHOR_DTYPE,
    CONTEXT_DTYPE,
    DOMAIN_DTYPE,
    LINK_DTYPE,
    LOCATION_DTYPE,
    RECORD_DTYPE,
    SPE_IN_RECORD_DTYPE,
    Decoded,
    DomainKind,
    LinkKind,
    LocKind,
    RunLayout,
)
from ..native import pages, whole_rows
from ..native.record_loops import gather_fields, group_u16, place_readings, readings, wrap_room
from .intervals import HALF, MOD, split_intervals

P = fmt.PpeCode
S = fmt.SpeCode


#: the fields of a PPE record that its record row takes (its timebase as its local time)
_PPE_FIELDS = (("code", "code"), ("slot", "slot"), ("a", "a"), ("b", "b"), ("c", "c"),
               ("local", "timebase"))
#: the fields of an SPE record that its record row takes as they are
_SPE_FIELDS = tuple((f, f) for f in ("code", "slot", "a", "b", "c", "d"))
_PPE_CTX_CODES = np.array(
    [c for c in P if P.CTX_CREATE <= c <= P.SIGNAL_WRITE], dtype=np.uint16
)


@dataclass
class _DumpSummary:
    """What the locations and their record counts need from one dump (so that decoding can
    read the dumps one at a time)."""

    rank: int
    name: str
    spe_buffer_records: int
    thread_counts: np.ndarray  # PPE records per thread id
    ctx_counts: np.ndarray  # SPE records per context id
    creates: np.ndarray  # the CTX_CREATE and CTX_LOAD PPE rows
    loads: np.ndarray
    block_ctx: np.ndarray  # context ids of the blocks, ascending
    block_ctx_first: np.ndarray  # slot of each such context's first block

    def matches(self, dump: Dump) -> bool:
        """Is ``dump`` the one summarized (same rank and records per thread and context)?"""
        other = _DumpSummary.of(dump)
        return (self.rank == other.rank and np.array_equal(self.thread_counts,
                                                           other.thread_counts)
                and np.array_equal(self.ctx_counts, other.ctx_counts)
                and np.array_equal(self.block_ctx, other.block_ctx))

    @classmethod
    def of(cls, dump: Dump) -> _DumpSummary:
        ppe = dump.ppe
        block_ctx, first = np.unique(dump.blocks["ctx"], return_index=True)
        # SPE records per context: its blocks' records (what ``np.bincount`` of the records'
        # contexts gives, from the small block table)
        per_ctx = np.bincount(dump.blocks["ctx"], weights=dump.blocks["present"],
                              minlength=1).astype(np.int64)
        used = np.flatnonzero(per_ctx)
        per_ctx = per_ctx[:int(used[-1]) + 1 if used.size else 1]
        return cls(dump.rank, dump.name, dump.spe_buffer_records,
                   np.bincount(ppe["thread"].astype(np.int64), minlength=1), per_ctx,
                   ppe[ppe["code"] == P.CTX_CREATE], ppe[ppe["code"] == P.CTX_LOAD],
                   block_ctx, dump.blocks["slot"][first])


def build_locations(
    manifest: Manifest, dumps: list[_DumpSummary], damage: DamageLog
) -> tuple[np.ndarray, np.ndarray, dict[tuple[int, int], int]]:
    n = manifest.n_ranks
    rows: list[tuple[int, int, int]] = [(r, int(LocKind.PPE_THREAD), 0) for r in range(n)]
    ctx_rows: list[tuple] = []
    for dump in dumps:
        r = dump.rank
        threads = np.flatnonzero(dump.thread_counts).tolist()
        rows.extend((r, int(LocKind.PPE_THREAD), int(t)) for t in threads if t != 0)
        rows.append((r, int(LocKind.MAIN_MEMORY), 0))
        creates, loads = dump.creates, dump.loads
        # a context id above 0xFFFF fits no block header (u16): such a CTX_CREATE defines
        # nothing (``_check_ctx_refs`` counts it)
        created = {int(c): i for i, c in enumerate(creates["a"].tolist()) if c <= 0xFFFF}
        in_blocks = set(dump.block_ctx.tolist())
        for ctx in sorted(set(created) | in_blocks):
            ls_ea = ps_ea = 0
            if ctx in created:
                row = creates[created[ctx]]
                ls_ea, ps_ea = int(row["b"]), int(row["c"])
            prog = loads["b"][loads["a"] == ctx]
            ctx_rows.append((r, ctx, len(rows), ctx in created, ls_ea, ps_ea,
                             # ids past int64 cannot be stored: taken as undefined
                             int(prog[0]) if prog.size and prog[0] < 1 << 63 else -1))
            rows.append((r, int(LocKind.SPE_CONTEXT), ctx))
        missing = sorted(in_blocks - set(created))
        if missing:
            first = dump.block_ctx_first[np.isin(dump.block_ctx, missing)].min()
            damage.add(DamageKind.undefined_id, dump.name, int(first), len(missing),
                       f"SPE context(s) {missing} wrote blocks but were never created "
                       "(CTX_CREATE missing): their Local Store is unknown for DMA targets")
    locations = np.array(rows, dtype=LOCATION_DTYPE)
    contexts = np.array([tuple(c) for c in ctx_rows], dtype=CONTEXT_DTYPE)
    ctx_loc = {(int(c["rank"]), int(c["ctx"])): int(c["loc"]) for c in contexts}
    return locations, contexts, ctx_loc


def summarize(dump: Dump) -> _DumpSummary:
    """What ``decode`` needs of a dump before decoding any (see ``decode``'s ``summaries``)."""
    return _DumpSummary.of(dump)


def decode(manifest: Manifest, dumps: list[Dump], damage: DamageLog,
           split_ambiguous_wraps: bool = True, layout: RunLayout | None = None,
           release: bool = False, summaries: list[_DumpSummary] | None = None,
           allocate: Callable[[int], np.ndarray] | None = None) -> Decoded:
    """Decode every dump (one per rank, in rank order) of a run.

    The locations and their record counts come from a summary of every dump (``summarize``)
    before any is decoded; a caller that has them passes ``summaries`` (one per dump given),
    and ``dumps`` is then indexed once per dump, in order, so it may be a sequence that reads
    each dump when indexed (``bench/cellbench/analysis.py`` passes one: only one dump is then
    in memory at a time; that sequence, not decode, makes sure a dump read again is the one
    summarized).

    With ``layout`` the dumps may be any subset of the run's (in rank order): locations,
    contexts and the per-rank lists are the whole run's, records, anchors and interval domains
    those of the given dumps (node domains are always every node's). The location damage of
    ``build_locations`` is then the caller's to record.

    ``release``: empty each dump's record arrays once it is decoded (for a caller that drops
    the dumps afterwards: the records table then never coexists with all of them).

    ``allocate(n)``: the zeroed ``RECORD_DTYPE`` table of n rows the records are written to
    (``spill.py`` maps a file); default ``np.zeros``.
    """
    if summaries is None:
        summaries = [_DumpSummary.of(dumps[i]) for i in range(len(dumps))]
    if layout is None:
        locations, contexts, ctx_loc = build_locations(manifest, summaries, damage)
        dump_names = [d.name for d in summaries]
        buffer_records = [d.spe_buffer_records for d in summaries]
    else:
        locations, contexts = layout.locations, layout.contexts
        ctx_loc = {(int(c["rank"]), int(c["ctx"])): int(c["loc"]) for c in contexts}
        dump_names, buffer_records = layout.dump_names, layout.spe_buffer_records
    loc_key = {(int(r), int(k), int(i)): n for n, (r, k, i) in enumerate(locations.tolist())}
    n_nodes = len(manifest.nodes)
    domains: list[np.ndarray] = [np.array([(int(DomainKind.NODE), i, -1, -1, -1, 0, -1, 0)
                                           for i in range(n_nodes)], dtype=DOMAIN_DTYPE)]
    n_domains = n_nodes
    anchor_parts: list[np.ndarray] = []
    link_parts: list[np.ndarray] = []
    # per rank of the run with ``layout`` (the others keep NO_LOSS), else per dump given
    cuts = np.full(manifest.n_ranks if layout is not None else len(dumps), NO_LOSS)
    anchor_base = 0
    slots_lost = blocks_missing = records_total = 0
    # every record is written straight to its place in program order (location, slot): a
    # location's records are one range, ``loc_start``, counted before anything is decoded
    loc_count = np.zeros(locations.size, dtype=np.int64)
    for summary in summaries:
        for kind, per in ((LocKind.PPE_THREAD, summary.thread_counts),
                          (LocKind.SPE_CONTEXT, summary.ctx_counts)):
            for i in np.flatnonzero(per).tolist():
                loc_count[loc_key[(summary.rank, int(kind), i)]] += per[i]
    loc_start = np.zeros(locations.size + 1, dtype=np.int64)
    np.cumsum(loc_count, out=loc_start[1:])
    n_records = int(loc_start[-1])
    records = (allocate(n_records) if allocate is not None
               else pages.zeros(n_records, RECORD_DTYPE))
    loss_epoch = np.zeros(records.size, dtype=np.int32)
    if hasattr(dumps, "rows_for"):  # ``dumps.Dumps``: SPE records read into their rows
        dumps.rows_for = lambda i: _spe_rows(records, loc_start, loc_key, summaries[i])
    for dump_index in range(len(dumps)):
        dump = dumps[dump_index]
        r = dump.rank
        node = manifest.node_of_rank(r)
        slots_lost += int(dump.gaps["lost"].sum()) if dump.gaps.size else 0
        records_total += dump.ppe.size + dump.spe.size
        ppe, blocks, spe = dump.ppe, dump.blocks, dump.spe

        # ---- PPE records: location, node domain, raw timebase, in one pass over the rows
        # (the records grouped by thread once, a stable radix sort: slot order kept)
        by_thread, thread_bounds = _group(ppe["thread"])
        threads = np.flatnonzero(np.diff(thread_bounds))
        thread_loc = np.zeros(thread_bounds.size - 1, dtype=np.uint32)
        thread_loc[threads] = [loc_key[(r, int(LocKind.PPE_THREAD), t)]
                               for t in threads.tolist()]
        prec = np.zeros(ppe.size, RECORD_DTYPE)
        gather_fields(prec, ppe, np.arange(ppe.size), _PPE_FIELDS,
                      {"loc": thread_loc[ppe["thread"]], "domain": node})
        _check_backwards(prec, dump.name, damage)
        _check_ctx_refs(prec, ppe, r, ctx_loc, dump.name, damage)
        # every context's blocks, grouped once (a stable radix sort of the 16-bit context
        # ids: each group stays in slot order)
        blk_by_ctx, blk_ctx_bounds = _group(blocks, "ctx")
        blk_groups = [(ctx, blk_by_ctx[blk_ctx_bounds[ctx]:blk_ctx_bounds[ctx + 1]]) for ctx
                      in np.flatnonzero(np.diff(blk_ctx_bounds)).tolist()]
        ppe_epoch, spe_epoch, cut = _losses(dump, prec, blk_groups)
        cuts[r if layout is not None else dump_index] = cut
        # final place of each PPE record: its thread's range, in slot order
        ppe_final = np.empty(ppe.size, dtype=np.int64)
        for t in threads.tolist():
            idx = by_thread[thread_bounds[t]:thread_bounds[t + 1]]
            lo = loc_start[loc_key[(r, int(LocKind.PPE_THREAD), t)]]
            ppe_final[idx] = lo + np.arange(idx.size)
        loss_epoch[ppe_final] = ppe_epoch
        # read into their rows of ``records`` (``_spe_rows``): only the columns decoding
        # finds are still to be written, and each SPE record's row is ``spe_base`` + its row
        # of ``spe``; else ``spe_final`` holds it per row of ``spe``
        in_place = spe.dtype == SPE_IN_RECORD_DTYPE
        spe_final = None if in_place else np.empty(spe.size, dtype=np.int64)
        spe_range = _spe_range(loc_start, loc_key, summaries[dump_index]) if in_place else None
        spe_base = spe_range[0] if spe_range is not None else 0

        # ---- anchors: PPE records and block headers in slot order
        n_anchor = ppe.size + blocks.size
        anchors = np.zeros(n_anchor, ANCHOR_DTYPE)
        anchors["rank"] = r
        anchor_slot = np.concatenate([ppe["slot"], blocks["slot"]])
        order = np.argsort(anchor_slot, kind="stable")
        anchors["slot"] = anchor_slot[order]
        pos = np.empty(n_anchor, dtype=np.int64)
        pos[order] = np.arange(n_anchor)
        prec["anchor"] = anchor_base + pos[: ppe.size]
        block_anchor = anchor_base + pos[ppe.size:]
        anchor_dom = np.empty(n_anchor, dtype=np.int32)
        anchor_loc = np.empty(n_anchor, dtype=np.int64)
        anchor_dom[pos[: ppe.size]] = prec["domain"]
        anchor_loc[pos[: ppe.size]] = prec["local"]

        # ---- SPE records: each context's are one range of ``records``
        blocks_missing += _check_seq(blocks, dump.name, damage, blk_groups)
        # every context's records and switches, grouped once (stable radix sorts of the 16-bit
        # context ids: each group stays in slot order; records read grouped already are)
        spe_by_ctx, spe_ctx_bounds = ((None, _context_bounds(summaries[dump_index].ctx_counts,
                                                             spe.size))
                                      if dump.spe_by_context else _group(spe, "ctx"))
        switches = np.flatnonzero(ppe["code"] == P.CTX_SWITCH)
        sw_ctx = ppe["a"][switches]
        switches = switches[sw_ctx <= 0xFFFF]  # no block names a wider id
        sw_by_ctx, sw_ctx_bounds = _group(ppe["a"][switches].astype(np.uint16))
        switches = switches[sw_by_ctx]
        # PPE readings that bound SPE windows: not those found running backwards (a corrupt
        # reading could make a window look short)
        clocked = prec["domain"] >= 0
        ppe_slot, ppe_tb = ppe["slot"][clocked], ppe["timebase"][clocked].astype(np.int64)
        # a HEARTBEAT anywhere in the dump: its SPE library keeps readings < 2^31 apart (a
        # pass over every SPE record, made only if some step is a candidate without it)
        trusted = functools.cache(lambda spe=spe: bool((spe["code"] == S.HEARTBEAT).any()))
        # every context's CTX_RUN_BEGIN slots, grouped once (slot order within a context)
        run_begins = _by_context(ppe, P.CTX_RUN_BEGIN)
        for ctx, blk_idx in blk_groups:
            loc = ctx_loc[(r, int(ctx))]
            first, end = int(spe_ctx_bounds[ctx]), int(spe_ctx_bounds[ctx + 1])
            rec_idx = (np.arange(first, end) if spe_by_ctx is None
                       else spe_by_ctx[first:end])
            lo = int(loc_start[loc])
            if spe_final is not None:  # (read into their rows, they need no map)
                if spe_by_ctx is None:  # the context's records are one range of ``spe``
                    spe_final[first:end] = np.arange(lo, lo + rec_idx.size)
                else:
                    spe_final[rec_idx] = lo + np.arange(rec_idx.size)
            # readings in program order (each block's records, then its header), their
            # blocks and the low 32 bits of each DECR_WRITE's new value
            raw, is_rec, which, write_new, reading_block, head_slot = readings(
                spe, rec_idx, blocks, blk_idx, S.DECR_WRITE)
            sw_stop, sw_start, sw_recs = _switch_pairs(
                ppe[switches[sw_ctx_bounds[ctx]:sw_ctx_bounds[ctx + 1]]], ctx, dump.name, damage)
            run_begin = run_begins(ctx)
            # readings of blocks whose header precedes a STOP in slot order were certainly
            # made before it: the STOP value is the first pass after them (an interval can
            # span several wraps before its STOP)
            stop_slots = sw_recs[:, 0]
            before = (np.searchsorted(np.maximum.accumulate(head_slot), stop_slots)
                      if stop_slots.size else stop_slots)
            args = (raw, write_new, sw_stop[:, 0], sw_start[:, 0])
            plain = split_intervals(*args, certain_before=before)
            force = _wrap_candidates(ppe_slot, ppe_tb, blocks, blk_idx, reading_block, raw,
                                     plain.interval, run_begin, trusted)
            split = (split_intervals(*args, split_big_steps=split_ambiguous_wraps,
                                     force_split=force, certain_before=before)
                     if force.any() else plain)
            dom0 = n_domains
            domains.append(_interval_domains(split, node, r, int(ctx), loc))
            n_domains += split.n_intervals
            # records in program order are the context's records in slot order: their rows
            # written in one pass (every field but ``time``, zero until synchronized), the
            # headers' readings to their anchors
            rows = records[lo:lo + rec_idx.size]
            if not in_place:
                gather_fields(rows, spe, rec_idx, _SPE_FIELDS)
            place_readings(rows, loc, is_rec, reading_block, which, split.interval,
                           split.local, dom0, block_anchor, pos[ppe.size:], anchor_dom,
                           anchor_loc)
            links, stop_slot, start_slot = _links(split, raw, dom0, which, is_rec, write_new,
                                                  sw_stop, sw_start, sw_recs)
            if links.size:
                # STOP and START slots to record indexes; a DECR_WRITE's SPE record (its index
                # in ``spe``) to its row
                switch = links["kind"] == LinkKind.SWITCH
                at = np.searchsorted(ppe["slot"], stop_slot[switch])
                links["stop_rec"][switch] = ppe_final[at]
                at = np.searchsorted(ppe["slot"], start_slot[switch])
                links["start_rec"][switch] = ppe_final[at]
                write = ~switch & (links["write_rec"] >= 0)
                links["write_rec"][write] = (spe_base + links["write_rec"][write]
                                             if spe_final is None
                                             else spe_final[links["write_rec"][write]])
                link_parts.append(links)
        anchors["domain"] = anchor_dom
        anchors["local"] = anchor_loc
        # the PPE records (checked and dropped above) to their places
        whole_rows.put(records, ppe_final, prec)
        if spe_epoch is not None:  # (None: every SPE record of epoch 0, as ``loss_epoch`` starts)
            if spe_final is None:
                loss_epoch[spe_base:spe_base + spe.size] = spe_epoch
            else:
                loss_epoch[spe_final] = spe_epoch
        del prec, ppe_final, spe_final, spe_epoch, ppe_epoch
        if release:
            dump.ppe, dump.blocks, dump.spe = dump.ppe[:0], dump.blocks[:0], dump.spe[:0]
            del ppe, blocks, spe, ppe_slot, ppe_tb, spe_by_ctx, blk_by_ctx
        anchor_parts.append(anchors)
        anchor_base += n_anchor

    links = whole_rows.concatenate(link_parts) if link_parts else np.zeros(0, LINK_DTYPE)
    dec = Decoded(
        manifest=manifest,
        dump_names=dump_names,
        spe_buffer_records=buffer_records,
        locations=locations,
        contexts=contexts,
        records=records,
        anchors=(whole_rows.concatenate(anchor_parts) if anchor_parts
                 else np.zeros(0, ANCHOR_DTYPE)),
        domains=whole_rows.concatenate(domains),
        links=links,
        n_nodes=n_nodes,
        slots_lost=slots_lost,
        blocks_missing=blocks_missing,
        records_total=records_total,
        ctx_loc=ctx_loc,
        loss_epoch=loss_epoch,
        loss_cut=cuts.astype(np.int64),
    )
    dec.know_location_starts(loc_start)
    return dec


def _group(keys: np.ndarray, field: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indexes grouped by a 16-bit key (stable: slot order kept within a group) and the
    bounds of each key's group: group k is ``order[bounds[k]:bounds[k + 1]]``. With
    ``field``, ``keys`` is a table and its 16-bit unsigned ``field`` the key (read in place:
    no copy of the strided column)."""
    if field is None:
        keys = np.asarray(keys, dtype=np.uint16)
    order, bounds = group_u16(keys, field)
    return order.astype(np.int64), bounds


def _by_context(ppe: np.ndarray, code: int) -> Callable[[int], np.ndarray]:
    """The slots of ``ppe``'s records of ``code``, grouped once by the context they name
    (``a``): the function gives one context's, in slot order (a pass over the PPE records
    for all contexts, not one per context)."""
    idx = np.flatnonzero(ppe["code"] == code)
    ctx = ppe["a"][idx].astype(np.uint64)
    order = np.argsort(ctx, kind="stable")
    ctx, slots = ctx[order], ppe["slot"][idx[order]]

    def of(c: int) -> np.ndarray:
        key = np.uint64(c)
        return slots[np.searchsorted(ctx, key):np.searchsorted(ctx, key, side="right")]

    return of


#: no loss in a process: a cut beyond every slot
NO_LOSS = np.int64(1 << 62)


def _context_bounds(ctx_counts: np.ndarray, n: int) -> np.ndarray:
    """Where each context id's rows begin in an SPE table of ``n`` rows grouped by context
    already, with ``ctx_counts`` records per context id: context c's rows are
    ``bounds[c]:bounds[c + 1]`` (``_group``'s bounds, without its order: the identity)."""
    bounds = np.zeros((1 << 16) + 1, dtype=np.int64)
    np.cumsum(ctx_counts, out=bounds[1:ctx_counts.size + 1])
    bounds[ctx_counts.size + 1:] = n
    return bounds


def _spe_range(loc_start: np.ndarray, loc_key: dict,
               summary: _DumpSummary) -> tuple[int, int] | None:
    """The rows (first, end) of the record table that the SPE records of ``summary``'s dump
    take, when its contexts' ranges follow one another in context order (as the reader
    groups them); None when they do not, or it has none."""
    ctxs = np.flatnonzero(summary.ctx_counts)
    if not ctxs.size:
        return None
    starts = np.array([loc_start[loc_key[(summary.rank, int(LocKind.SPE_CONTEXT), int(c))]]
                       for c in ctxs.tolist()], dtype=np.int64)
    counts = summary.ctx_counts[ctxs].astype(np.int64)
    lo = int(starts[0])
    if not np.array_equal(starts, lo + np.cumsum(counts) - counts):
        return None
    return lo, lo + int(counts.sum())


def _spe_rows(records: np.ndarray, loc_start: np.ndarray, loc_key: dict,
              summary: _DumpSummary) -> np.ndarray | None:
    """``_spe_range``'s rows of ``records`` viewed as ``SPE_IN_RECORD_DTYPE``, for the reader
    to write the dump's SPE records into; None when there is no such range."""
    rows = _spe_range(loc_start, loc_key, summary)
    if rows is None or records.ndim != 1 or not records.flags.c_contiguous:
        return None
    return records[rows[0]:rows[1]].view(SPE_IN_RECORD_DTYPE)


def _losses(dump: Dump, prec: np.ndarray, blk_groups: list[tuple[int, np.ndarray]]
            ) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Where records of one process may be missing, so that pairing by count stops there.

    Returns the loss epoch of every PPE record and every SPE record (how many places before
    it, in its own stream, may have lost records of that stream; 0 = none; None for the SPE
    records when every one of them is of epoch 0) and the process's
    cut: the first slot position from which some record of any stream may be missing
    (``NO_LOSS`` if none). A lost record shifts every later k-th-with-k-th pairing of its
    stream, so ``match`` pairs only records of epoch 0 (docs/damage.md: a GAP must remove the
    order it would have given, never invent one).

    PPE streams (per process, slot order): from the first GAP, top-level slot with an undefined
    code or SPE record outside a block (each may have been a PPE record), or PPE record dropped
    for naming an undefined context. SPE streams (per context, seq order): at every block whose
    seq does not follow its predecessor's (blocks lost before it) and at a block holding fewer
    records than its count (its own records, and again after it). Losses at the very end (a
    file cut short) shift nothing and are not losses here. ``blk_groups``: each context id
    with its blocks' indexes, ascending.
    """
    first = [int(dump.gaps["slot"].min())] if dump.gaps.size else []
    first += [d.first_slot for d in dump.damage if d.first_slot is not None and d.kind in (
        DamageKind.unknown_code, DamageKind.spe_outside_block)]
    dropped = prec["slot"][prec["code"] == 0]  # ``_check_ctx_refs`` zeroes what it drops
    if dropped.size:
        first.append(int(dropped.min()))
    l_ppe = min(first, default=int(NO_LOSS))
    ppe_epoch = (prec["slot"] >= l_ppe).astype(np.int32)
    blocks = dump.blocks
    block_epoch = np.zeros(blocks.size, dtype=np.int32)
    cut = l_ppe
    for _, bi in blk_groups:
        seq = blocks["seq"][bi].astype(np.int64)
        skip = seq != np.concatenate([[-1], seq[:-1]]) + 1
        broken = blocks["present"][bi] < blocks["count"][bi]
        step = (skip | broken).astype(np.int32)
        step[1:] += broken[:-1]
        epoch = np.cumsum(step, dtype=np.int32)
        block_epoch[bi] = epoch
        if epoch[-1] > 0:
            good = bi[epoch == 0]
            cut = min(cut, int(blocks["slot"][good[-1]]) + 1 if good.size else 0)
    if not block_epoch.any():  # no SPE record may miss a predecessor: no pass over them
        return ppe_epoch, None, cut
    return ppe_epoch, block_epoch[dump.spe["block"]], cut


#: ticks by which clock readings may trail the order the slots give (PPE readings and block
#: headers alike), allowed on both ends of a window in ``_wrap_candidates``; tiny beside 2^32
WINDOW_SLACK = 1 << 16


def _wrap_candidates(p_slot, p_tb, blocks, blk_idx, reading_block, raw, interval, run_begin,
                     trusted: Callable[[], bool]) -> np.ndarray:
    """Per reading (program order): may the step before it hide a whole wrap? ``trusted``
    (whether the dump holds heartbeats, see ``_candidates``) is asked only when some step is
    a candidate without heartbeats: they only ever take candidates away."""
    args = (p_slot, p_tb, blocks, blk_idx, reading_block, raw, interval, run_begin)
    out = _candidates(*args, trusted=False)
    if out.any() and trusted():
        out = _candidates(*args, trusted=True)
    return out


def _candidates(p_slot, p_tb, blocks, blk_idx, reading_block, raw, interval, run_begin,
                trusted: bool) -> np.ndarray:
    """``_wrap_candidates``, knowing whether the dump holds heartbeats (``trusted``).

    The readings of the context's block j (its records, then its header) were made after
    block j-1's header was read and before the first PPE record after block j's header in
    slot order; block j-1's header after the last PPE record before it. So all of them lie in
    a window of node time ``[lo_j, hi_j]`` (for the first block ``lo`` is the context's last
    CTX_RUN_BEGIN before it). Within one live interval the steps of a window sum to their
    apparent ticks A plus 2^32 per hidden wrap, and at most ``hi - lo``: when that is below
    A + 2^32, no step of the window hides a wrap. Otherwise (or when no PPE record bounds
    the window) each of its steps is a candidate, for the order constraints to decide
    (``synchronize.synchronize``). Absent heartbeats prove nothing; present ones (``trusted``:
    anywhere in the dump) prove an SPE library that keeps consecutive readings < 2^31 apart
    (docs/format.md 6.8), so then only steps of 2^31 or more, and steps across lost blocks or
    records (they may have been heartbeats), are candidates.

    One pass in C over the readings (``loops.wrap_room``) where built, else numpy over
    readings and blocks: memory linear in them.
    """
    n = raw.size
    out = np.zeros(n, dtype=bool)
    if n < 2 or not blk_idx.size:
        return out
    h_slot = blocks["slot"][blk_idx].astype(np.int64)
    nb = blk_idx.size
    inf = np.inf
    hi = np.full(nb, inf)
    lo = np.full(nb, -inf)
    if p_slot.size:
        tb = p_tb.astype(np.float64)
        hi_i = np.searchsorted(p_slot, h_slot)
        ok = hi_i < p_slot.size
        hi[ok] = tb[hi_i[ok]]
        lo_i = np.searchsorted(p_slot, h_slot[:-1]) - 1
        ok = lo_i >= 0
        lo[1:][ok] = tb[lo_i[ok]]
        begun = run_begin[run_begin < h_slot[0]]
        at = np.searchsorted(p_slot, begun.max(), side="right") - 1 if begun.size else -1
        if at >= 0:  # the CTX_RUN_BEGIN, or the last clocked PPE record before it
            lo[0] = tb[at]
    pos = np.full(int(blk_idx.max()) + 1, -1, dtype=np.int64)
    pos[blk_idx] = np.arange(nb)
    broken = lost_before = np.zeros(nb, dtype=bool)
    if trusted:
        # records lost before a block (seq skips) or inside it (fewer present than its
        # count) may have been heartbeats: the steps across them prove nothing
        seq = blocks["seq"][blk_idx].astype(np.int64)
        broken = blocks["present"][blk_idx] < blocks["count"][blk_idx]
        lost_before = np.zeros(nb, dtype=bool)
        lost_before[1:] = (seq[1:] != seq[:-1] + 1) | broken[:-1]
    compiled = wrap_room(raw, interval, reading_block, pos, hi - lo, 2 * WINDOW_SLACK,
                         trusted, broken, lost_before)
    if compiled is not None:
        return compiled
    win = pos[reading_block]
    step = np.zeros(n, dtype=np.int64)
    step[1:] = (raw[:-1] - raw[1:]) % MOD
    same = np.zeros(n, dtype=bool)
    same[1:] = interval[1:] == interval[:-1]
    step[~same] = 0
    # runs of readings of one window and one interval: their steps' apparent sum
    start = np.ones(n, dtype=bool)
    start[1:] = (win[1:] != win[:-1]) | ~same[1:]
    run = np.cumsum(start) - 1
    apparent = np.add.reduceat(step, np.flatnonzero(start)).astype(np.float64)
    room = (hi - lo)[win[start]] + 2 * WINDOW_SLACK >= apparent + MOD
    out = room[run] & same
    if trusted:
        first_of_win = np.zeros(n, dtype=bool)
        first_of_win[1:] = win[1:] != win[:-1]
        out &= (step >= HALF) | broken[win] | (first_of_win & lost_before[win])
    return out


#: passes of the outlier rule in ``_check_backwards`` before the running-maximum fallback
_BACKWARDS_PASSES = 32


def _check_backwards(prec: np.ndarray, name: str, damage: DamageLog) -> None:
    """A PPE timebase running backwards within a thread: no clock domain for that record.

    Which reading of a descending pair is wrong? The one farther from the median of the
    thread's readings around the pair (two before, two after): a reading pushed down (the
    record after it is fine) as well as one pushed up (a flipped high bit would otherwise
    turn every later record of the thread into a backwards one, and its own false time would
    constrain clocks). Repeated until the kept readings never decrease (after
    ``_BACKWARDS_PASSES`` passes, every reading below the running maximum goes). Readings are
    compared as the unsigned values they are.
    """
    if prec.size < 2:
        return
    order = np.lexsort((prec["slot"], prec["loc"]))
    loc = prec["loc"][order].astype(np.int64)
    tb = prec["local"][order].astype(np.float64)
    tb[prec["local"][order] < 0] += 2.0**64  # u64 readings of 2^63 and more
    drop = np.zeros(tb.size, dtype=bool)
    for _ in range(_BACKWARDS_PASSES):
        kept = np.flatnonzero(~drop)
        v, lk = tb[kept], loc[kept]
        same = lk[1:] == lk[:-1]
        desc = np.flatnonzero(same & (v[1:] < v[:-1]))
        if not desc.size:
            break
        # the median of the kept readings desc-2 .. desc+3 within the same thread
        first = np.searchsorted(lk, lk[desc], "left")
        last = np.searchsorted(lk, lk[desc], "right") - 1
        pos = desc[:, None] + np.arange(-2, 4)
        inside = (pos >= first[:, None]) & (pos <= last[:, None])
        med = np.nanmedian(np.where(inside, v[np.clip(pos, 0, v.size - 1)], np.nan), axis=1)
        blame = np.where(np.abs(v[desc] - med) > np.abs(v[desc + 1] - med), desc, desc + 1)
        drop[kept[blame]] = True
    else:
        kept = np.flatnonzero(~drop)
        v, lk = tb[kept], loc[kept]
        starts = np.flatnonzero(np.concatenate([[True], lk[1:] != lk[:-1]]))
        run_max = v.copy()
        for s, e in zip(starts, np.append(starts[1:], v.size), strict=True):
            run_max[s:e] = np.maximum.accumulate(v[s:e])
        drop[kept[1:][(lk[1:] == lk[:-1]) & (v[1:] < run_max[:-1])]] = True
    back = drop
    if back.any():
        idx = order[back]
        prec["domain"][idx] = -1
        damage.add(DamageKind.backwards_timebase, name, int(prec["slot"][idx].min()),
                   int(idx.size), "PPE timebase out of order with the readings around it in "
                   "its thread: the record keeps its place in program order but constrains "
                   "no clock and is placed at its predecessor's time")


def _check_ctx_refs(prec, ppe, rank, ctx_loc, name, damage) -> None:
    """PPE records naming a context that was never created nor wrote blocks."""
    is_ctx = np.isin(ppe["code"], _PPE_CTX_CODES) & (
        (ppe["code"] != P.CTX_CREATE) | (ppe["a"] > 0xFFFF))
    if not is_ctx.any():
        return
    known = np.array(sorted(c for (r, c) in ctx_loc if r == rank), dtype=np.int64)
    bad = is_ctx & ~np.isin(ppe["a"].astype(np.int64), known)
    if bad.any():
        prec["code"][bad] = 0  # dropped by every later stage
        damage.add(DamageKind.undefined_id, name, int(ppe["slot"][bad][0]), int(bad.sum()),
                   f"PPE record naming SPE context {int(ppe['a'][bad][0])}, never defined")


def _check_seq(blocks: np.ndarray, name: str, damage: DamageLog,
               blk_groups: list[tuple[int, np.ndarray]]) -> int:
    """Count blocks missing from each context's seq (0, 1, 2, ...); ``blk_groups``: each
    context id with its blocks' indexes, ascending."""
    missing = 0
    first_slot = None
    for _, bi in blk_groups:
        b = blocks[bi]
        seq = b["seq"].astype(np.int64)
        expect = np.arange(seq.size)
        if seq.size and (seq[-1] != seq.size - 1 or np.any(seq != expect)):
            # missing = highest seq + 1 - present (blocks lost in GAPs or cut off)
            gaps = np.diff(np.concatenate([[-1], seq])) - 1
            m = int(np.clip(gaps, 0, None).sum())
            if m:
                missing += m
                slot = int(b["slot"][np.argmax(gaps > 0)])
                first_slot = slot if first_slot is None else min(first_slot, slot)
    if missing:
        damage.add(DamageKind.missing_block, name, first_slot, missing,
                   "block seq numbers skip: blocks were lost (GAP or cut file); their order "
                   "constraints are gone, nothing is invented for them")
    return missing


def _switch_pairs(sw: np.ndarray, ctx: int, name: str, damage: DamageLog):
    """STOP/START pairs of one context (its CTX_SWITCH records ``sw``, in slot order) ->
    (stop values, start values: int64 columns; the pairs' (STOP slot, START slot) rows).

    A STOP opens a pair when none is open, a START closes the open one; every other record
    (a STOP while one is open, a START while none is, another kind, a STOP left open) is
    unusable. So the pairs are the first STOP of each run of STOPs (among the STOP and START
    records) with the first START of the run after it: found in one pass over the records,
    not a Python step per record."""
    kind = sw["b"]
    is_stop = kind == fmt.SwitchType.STOP
    st = np.flatnonzero(is_stop | (kind == fmt.SwitchType.START))
    stop_sym = is_stop[st]
    head = np.ones(st.size, dtype=bool)
    head[1:] = stop_sym[1:] != stop_sym[:-1]
    heads = np.flatnonzero(head)
    opened = np.flatnonzero(stop_sym[heads])  # heads of STOP runs ...
    opened = opened[opened + 1 < heads.size]  # ... that a START run follows
    stop_i, start_i = st[heads[opened]], st[heads[opened + 1]]
    bad = sw.size - 2 * stop_i.size
    if bad:
        damage.add(DamageKind.unusable_time, name, int(sw["slot"][0]), bad,
                   f"CTX_SWITCH records of SPE context {ctx} that do not form STOP/START pairs")
    value = (sw["c"] & np.uint64(0xFFFFFFFF)).astype(np.int64)
    slot = sw["slot"].astype(np.int64)
    recs = np.stack([slot[stop_i], slot[start_i]], axis=1).reshape(-1, 2)
    return value[stop_i].reshape(-1, 1), value[start_i].reshape(-1, 1), recs


def _interval_domains(split, node: int, rank: int, ctx: int, loc: int) -> np.ndarray:
    """The domain rows of one context's intervals (``DOMAIN_DTYPE``): the contract's interval
    number counts the intervals not started by an undecidable wrap, the segment the wraps
    since (0 for an interval of its own)."""
    n = split.n_intervals
    wrap = np.array([start[0] == "wrap" for start in split.starts], dtype=bool)
    own = ~wrap
    contract_k = np.cumsum(own) - 1
    last_own = np.maximum.accumulate(np.where(own, np.arange(n), 0))
    rows = np.zeros(n, DOMAIN_DTYPE)
    rows["kind"] = int(DomainKind.SPE_INTERVAL)
    rows["node"], rows["rank"], rows["ctx"], rows["loc"] = node, rank, ctx, loc
    rows["interval"] = contract_k
    rows["segment"] = np.arange(n) - last_own
    rows["readings"] = np.bincount(split.interval, minlength=n)
    return rows


def _links(split, raw, dom0, which, is_rec, write_new, sw_stop, sw_start, sw_recs
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Link rows (``LINK_DTYPE``) for every interval start that follows a non-empty interval,
    with the slots of each switch link's STOP and START records (-1 for other links; the
    caller turns them into record indexes, and a write link's ``write_rec``, an index of
    ``spe``, into its record's)."""
    interval = split.interval
    n = raw.size
    n_iv = split.n_intervals
    none = np.zeros(0, dtype=np.int64)
    if n == 0 or n_iv < 2:
        return np.zeros(0, LINK_DTYPE), none, none
    raw = np.asarray(raw, dtype=np.int64)
    local = np.asarray(split.local, dtype=np.int64)
    # first and last reading index of each interval (or -1)
    first = np.full(n_iv, -1, dtype=np.int64)
    last = np.full(n_iv, -1, dtype=np.int64)
    idx = np.arange(n)
    first[interval[::-1]] = idx[::-1]
    last[interval] = idx
    kinds = {"switch": 0, "write": 1, "wrap": 2, "first": 3}
    kind = np.array([kinds[start[0]] for start in split.starts[1:]], dtype=np.int8)
    ref = np.array([start[1] for start in split.starts[1:]], dtype=np.int64)
    k = np.arange(1, n_iv)
    keep = (last[k - 1] >= 0) & (first[k] >= 0)  # an empty interval on either side: no link
    k, kind, ref = k[keep], kind[keep], ref[keep]
    lp, fn = last[k - 1], first[k]
    rows = np.zeros(k.size, LINK_DTYPE)
    rows["prev"], rows["next"] = dom0 + k - 1, dom0 + k
    rows["start_value"] = rows["stop_rec"] = rows["start_rec"] = rows["write_rec"] = -1
    rows["last_local_prev"] = local_last = local[lp]
    rows["first_local_next"] = local_first = local[fn]
    stop_slot = np.full(k.size, -1, dtype=np.int64)
    start_slot = np.full(k.size, -1, dtype=np.int64)
    # a switch: the STOP's saved value and the START's restored one
    sw = np.flatnonzero(kind == 0)
    if sw.size:
        stop_v = np.asarray(sw_stop, dtype=np.int64)[ref[sw], 0]
        start_v = np.asarray(sw_start, dtype=np.int64)[ref[sw], 0]
        rows["kind"][sw] = LinkKind.SWITCH
        rows["value"][sw], rows["start_value"][sw] = stop_v, start_v
        rows["local_prev"][sw] = local_last[sw] + (raw[lp[sw]] - stop_v) % MOD
        rows["local_next"][sw] = local_first[sw] - (start_v - raw[fn[sw]]) % MOD
        slots = np.asarray(sw_recs, dtype=np.int64).reshape(-1, 2)[ref[sw]]
        stop_slot[sw], start_slot[sw] = slots[:, 0], slots[:, 1]
    # a DECR_WRITE: the value written, at its own reading
    wr = np.flatnonzero(kind == 1)
    if wr.size:
        v = np.asarray(write_new, dtype=np.int64)[ref[wr]]
        rows["kind"][wr] = LinkKind.WRITE
        rows["value"][wr] = v
        rows["local_prev"][wr] = local[ref[wr]]
        rows["local_next"][wr] = local_first[wr] - (v - raw[fn[wr]]) % MOD
        rec = np.asarray(is_rec, dtype=bool)[ref[wr]]
        rows["write_rec"][wr] = np.where(rec, np.asarray(which, dtype=np.int64)[ref[wr]], -1)
    # a wrap: unwrapped continuously, local_next would be local_last + step + m * 2^32
    wp = np.flatnonzero(kind == 2)
    if wp.size:
        rows["kind"][wp] = LinkKind.WRAP
        rows["value"][wp] = (raw[lp[wp]] - raw[fn[wp]]) % MOD
        rows["local_prev"][wp] = local_last[wp]
        rows["local_next"][wp] = local_first[wp]
    return rows, stop_slot, start_slot
