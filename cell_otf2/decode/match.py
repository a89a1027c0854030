"""Pair what belongs together in a ``Decoded`` trace: mailbox and signal values, DMA commands and
their completing tag wait, MPI messages (pairs between nodes apart, ``node_pairs``), collectives
and context runs with their START/EXIT, as numpy arrays of record indexes, plus happened-before
pairs for ``order.py``; pairing by count stops at the first possible loss of a stream, and what
is left unmatched is counted as damage (rules: docs/design.md, docs/damage.md). It does not look
at time (except to report value mismatches) and does not build constraints."""

from __future__ import annotations

import numpy as np

from ..damage import DamageKind, DamageLog
from ..input import format as fmt
from ..model import DMA_DTYPE, MSG_DTYPE, PAIR_DTYPE, Decoded, LocKind, Matches, MsgKind
from ..native import whole_rows
from ..native.record_loops import dma_completions, gather_fields

P = fmt.PpeCode
S = fmt.SpeCode


#: what pairing reads of every DMA record (``_Builder.dma_records``)
_DMA_FIELDS = ("a", "b", "d")
_DMA_FIELDS_DTYPE = np.dtype([(name, "<u8") for name in _DMA_FIELDS])
#: ``a`` of a DMA record that is a SNDSIG (a signal write), not a transfer
_SNDSIG = [0xA0, 0xA1, 0xA2]

_CAPACITY = {MsgKind.MBOX_IN: 4, MsgKind.MBOX_OUT: 1, MsgKind.MBOX_INTR: 1}

# (kind, PPE BEGIN, PPE END, SPE BEGIN, SPE END, PPE writes?)
_MAILBOXES = (
    (MsgKind.MBOX_IN, P.IN_MBOX_WRITE_BEGIN, P.IN_MBOX_WRITE_END,
     S.IN_MBOX_READ_BEGIN, S.IN_MBOX_READ_END, True),
    (MsgKind.MBOX_OUT, P.OUT_MBOX_READ_BEGIN, P.OUT_MBOX_READ_END,
     S.OUT_MBOX_WRITE_BEGIN, S.OUT_MBOX_WRITE_END, False),
    (MsgKind.MBOX_INTR, P.OUT_INTR_MBOX_READ_BEGIN, P.OUT_INTR_MBOX_READ_END,
     S.OUT_INTR_MBOX_WRITE_BEGIN, S.OUT_INTR_MBOX_WRITE_END, False),
)


class _Builder:
    def __init__(self, dec: Decoded, damage: DamageLog) -> None:
        self.dec = dec
        self.damage = damage
        self.rec = dec.records
        self.msgs: list[np.ndarray] = []
        self.pairs: list[np.ndarray] = []
        self.node_pairs: list[np.ndarray] = []
        # records are sorted by location: each location's range, found once, and each
        # record's rank from them (no pass over the wide rows)
        self.loc_start = dec.location_starts()
        self.loc_rank = np.repeat(dec.locations["rank"], np.diff(self.loc_start))
        # record indexes grouped by code, ascending
        self.by_code, self.code_start = dec.code_index()
        # PPE records that name a context, grouped once by (code, context) in slot order:
        # ``ppe_ctx_records`` looks a group up instead of scanning every record of its code
        # once per context
        self.ppe_index, self.ppe_keys, self.ppe_bounds = self._ppe_groups(dec)
        self.epoch = (dec.loss_epoch if dec.loss_epoch is not None
                      else np.zeros(self.rec.size, dtype=np.int32))
        self._dma: tuple[np.ndarray, np.ndarray] | None = None

    # -- helpers
    def sound(self, idx: np.ndarray) -> int:
        """How many leading entries of ``idx`` (one stream, in order) no loss precedes."""
        late = np.flatnonzero(self.epoch[idx] != 0)
        return int(late[0]) if late.size else int(idx.size)

    def file_of(self, rec_idx: int) -> str:
        return self.dec.dump_names[int(self.loc_rank[rec_idx])]

    def lost(self, kind: DamageKind, idx: np.ndarray, what: str) -> None:
        if idx.size:
            first = int(idx[np.argmin(self.rec["slot"][idx])])
            self.damage.add(kind, self.file_of(first), int(self.rec["slot"][first]),
                            int(idx.size), what)

    def add_pairs(self, before: np.ndarray, after: np.ndarray, cross_node: bool = False) -> None:
        p = np.zeros(before.size, PAIR_DTYPE)
        p["before"], p["after"] = before, after
        (self.node_pairs if cross_node else self.pairs).append(p)

    def add_msgs(self, kind: int, send: np.ndarray, recv: np.ndarray) -> None:
        m = np.zeros(send.size, MSG_DTYPE)
        m["kind"], m["send"], m["recv"] = kind, send, recv
        m["send_loc"] = self.rec["loc"][send]
        m["recv_loc"] = self.rec["loc"][recv]
        self.msgs.append(m)

    def code_records(self, *codes: int) -> np.ndarray:
        """Indexes of the records with any of ``codes``, ascending."""
        parts = [self.by_code[self.code_start[c]:self.code_start[c + 1]] for c in codes]
        return parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))

    def spe_ctx_records(self, loc: int, code: int) -> np.ndarray:
        lo, hi = self.loc_range(loc)
        idx = self.code_records(code)
        # bounds of the index's own type: a Python int would make searchsorted convert the
        # whole (int32) index to int64 first, every call
        t = idx.dtype.type
        return idx[np.searchsorted(idx, t(lo)):np.searchsorted(idx, t(hi))]

    def dma_records(self) -> tuple[np.ndarray, np.ndarray]:
        """Every DMA record (indexes, ascending) and its ``a``, ``b`` and ``d``, gathered in
        one pass over the wide rows and kept (SNDSIG targets and DMA commands both use them)."""
        if self._dma is None:
            idx = self.code_records(S.DMA)
            fields = np.empty(idx.size, _DMA_FIELDS_DTYPE)
            gather_fields(fields, self.rec, idx, tuple((f, f) for f in _DMA_FIELDS))
            self._dma = idx, fields
        return self._dma

    def held(self, ranks: np.ndarray) -> np.ndarray:
        """Per rank of ``ranks``: has any location of that rank a record here? A group of
        nodes holds some ranks' records, but its contexts table is the whole run's: the
        contexts of the other ranks pair nothing and are skipped, not scanned."""
        n = int(max(self.dec.locations["rank"].max(initial=-1), np.max(ranks, initial=-1))) + 1
        present = np.zeros(n, dtype=bool)
        present[self.dec.locations["rank"][np.diff(self.loc_start) > 0]] = True
        return present[np.asarray(ranks, dtype=np.int64)]

    def loc_range(self, loc: int) -> tuple[int, int]:
        return int(self.loc_start[loc]), int(self.loc_start[loc + 1])

    def _ppe_groups(self, dec: Decoded) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The PPE records naming a context (codes CTX_CREATE .. SIGNAL_WRITE) of one of
        ``dec``'s contexts, sorted by (code, context, slot); the distinct (code, context)
        keys, ascending, and where each key's records start and end in that order. A
        record's context is its (rank, ``a``); one naming no context of the table is in no
        group (no query asks for it)."""
        ctx_key = np.unique(_ctx_key(dec.contexts["rank"], dec.contexts["ctx"]))
        codes = np.array(_PPE_CTX_CODES, dtype=np.int64)
        sel = self.code_records(*_PPE_CTX_CODES)
        a = self.rec["a"][sel]
        short = a <= np.uint64(0xFFFFFFFF)
        key = _ctx_key(self.loc_rank[sel], np.where(short, a, 0))
        g = np.minimum(np.searchsorted(ctx_key, key), max(ctx_key.size - 1, 0))
        named = short & (ctx_key[g] == key) if ctx_key.size else np.zeros(sel.size, bool)
        sel, g = sel[named], g[named]
        group = (np.searchsorted(codes, self.rec["code"][sel].astype(np.int64)) * ctx_key.size
                 + g)
        order = np.lexsort((self.rec["slot"][sel], group))
        sel, group = sel[order], group[order]
        keys, first = np.unique(group, return_index=True)
        bounds = np.append(first, group.size)
        self._ctx_keys, self._codes = ctx_key, codes
        return sel, keys, bounds

    def ppe_ctx_records(self, rank: int, ctx: int, code: int) -> np.ndarray:
        """PPE records of ``code`` naming ``ctx`` in ``rank``, in slot order."""
        empty = np.zeros(0, dtype=np.int64)
        ck = _ctx_key(np.array([rank]), np.array([ctx]))[0]
        c = int(np.searchsorted(self._codes, int(code)))
        g = int(np.searchsorted(self._ctx_keys, ck))
        if (c >= self._codes.size or self._codes[c] != int(code) or g >= self._ctx_keys.size
                or self._ctx_keys[g] != ck):
            return empty
        at = int(np.searchsorted(self.ppe_keys, c * self._ctx_keys.size + g))
        if at >= self.ppe_keys.size or self.ppe_keys[at] != c * self._ctx_keys.size + g:
            return empty
        return self.ppe_index[self.ppe_bounds[at]:self.ppe_bounds[at + 1]]


#: the PPE codes that name a context in ``a``
_PPE_CTX_CODES = [int(c) for c in P if P.CTX_CREATE <= c <= P.SIGNAL_WRITE]


def _ctx_key(rank: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """(rank, context id below 2^32) as one int64, ordered as the pairs are."""
    return (np.asarray(rank).astype(np.int64) << 32) | np.asarray(ctx).astype(np.int64)


def _pair_begin_end(begins: np.ndarray, ends: np.ndarray):
    """Pair BEGIN k with END k of one side (both already in order); trims to the shorter."""
    n = min(begins.size, ends.size)
    return begins[:n], ends[:n]


def match(dec: Decoded, damage: DamageLog, mpi: bool = True) -> Matches:
    """Pair every matchable record of the decoded trace.

    ``mpi=False`` leaves MPI records unpaired (a parallel conversion holds only some processes'
    records and pairs MPI over every process's MPI records, ``team_mpi.py``)."""
    b = _Builder(dec, damage)
    for c in dec.contexts[b.held(dec.contexts["rank"])].tolist():
        rank, ctx, loc = int(c[0]), int(c[1]), int(c[2])
        _mailboxes(b, rank, ctx, loc)
        _runs(b, rank, ctx, loc)
    _signals(b)
    dma = _dma(b)
    n_mpi, n_coll = _mpi(b) if mpi else (0, 0)
    def cat(parts: list[np.ndarray], dt: np.dtype) -> np.ndarray:
        return whole_rows.concatenate(parts) if parts else np.zeros(0, dt)

    return Matches(
        messages=cat(b.msgs, MSG_DTYPE),
        dma=dma,
        pairs=cat(b.pairs, PAIR_DTYPE),
        node_pairs=cat(b.node_pairs, PAIR_DTYPE),
        collectives=n_coll,
        mpi_messages=n_mpi,
    )


def _mailboxes(b: _Builder, rank: int, ctx: int, loc: int) -> None:
    for kind, ppe_begin, ppe_end, spe_begin, spe_end, ppe_writes in _MAILBOXES:
        pb = b.ppe_ctx_records(rank, ctx, ppe_begin)
        pe = b.ppe_ctx_records(rank, ctx, ppe_end)
        sb = b.spe_ctx_records(loc, spe_begin)
        se = b.spe_ctx_records(loc, spe_end)
        if not (pb.size or pe.size or sb.size or se.size):
            continue
        # after a possible loss the k-th BEGIN, END or value may belong to another partner
        cp = min(b.sound(pb), b.sound(pe))
        cs = min(b.sound(sb), b.sound(se))
        late_w, late_r = (pb[cp:], sb[cs:]) if ppe_writes else (sb[cs:], pb[cp:])
        b.lost(DamageKind.unmatched_mailbox, np.concatenate([late_w, late_r]),
               f"mailbox value after lost slots (SPE context {ctx}): pairing by count is no "
               "longer certain, not matched")
        pb, pe = _pair_begin_end(pb[:cp], pe[:cp])
        sb, se = _pair_begin_end(sb[:cs], se[:cs])
        wb, we, rb, re_ = (pb, pe, sb, se) if ppe_writes else (sb, se, pb, pe)
        n = min(wb.size, rb.size)
        b.lost(DamageKind.unmatched_mailbox, np.concatenate([wb[n:], rb[n:]]),
               f"mailbox value without partner (SPE context {ctx})")
        if n == 0:
            continue
        # value check: the value sits in the writer's BEGIN (SPE) or END (PPE) record
        wval = b.rec["b"][we[:n]] if ppe_writes else b.rec["b"][wb[:n]]
        rval = b.rec["b"][re_[:n]]
        bad = np.flatnonzero(wval != rval)
        if bad.size:
            b.lost(DamageKind.unmatched_mailbox, re_[bad],
                   f"mailbox value read differs from the value written (SPE context {ctx}); "
                   "matched by count (docs/format.md 6.4)")
        b.add_msgs(kind, wb[:n], re_[:n])
        b.add_pairs(wb[:n], re_[:n])  # value entered before it left
        cap = _CAPACITY[kind]
        if we.size > cap:
            k = np.arange(min(rb.size, we.size - cap))
            b.add_pairs(rb[k], we[k + cap])  # a write blocks while the mailbox is full


def _runs(b: _Builder, rank: int, ctx: int, loc: int) -> None:
    """CTX_RUN_BEGIN -> START and EXIT (and its block) -> CTX_RUN_END, k-th with k-th."""
    begins = b.ppe_ctx_records(rank, ctx, P.CTX_RUN_BEGIN)
    ends = b.ppe_ctx_records(rank, ctx, P.CTX_RUN_END)
    starts = b.spe_ctx_records(loc, S.START)
    exits = b.spe_ctx_records(loc, S.EXIT)
    n = min(b.sound(begins), b.sound(starts))
    b.add_pairs(begins[:n], starts[:n])
    n = min(b.sound(exits), b.sound(ends))
    b.add_pairs(exits[:n], ends[:n])
    if begins.size > ends.size:
        b.lost(DamageKind.no_run_end, begins[ends.size:],
               f"SPE context {ctx}: CTX_RUN_BEGIN without CTX_RUN_END")
    if starts.size > exits.size:
        b.lost(DamageKind.no_exit, starts[exits.size:],
               f"SPE context {ctx}: context run without EXIT record")


def _signals(b: _Builder) -> None:
    """Signal writes (PPE SIGNAL_WRITE, SPE SNDSIG) -> SIGNAL_READ_END of the target."""
    dec, rec = b.dec, b.rec
    ctxs = dec.contexts
    # SNDSIG targets: EA at problem-state offset 0x1400C (register 1) or 0x1C00C (register 2)
    dma, fields = b.dma_records()
    sig = np.isin(fields["a"], _SNDSIG)
    dma = dma[sig]
    ea = fields["b"][sig].astype(np.int64)
    snd_target, snd_reg = _signal_targets(ctxs, b.loc_rank[dma].astype(np.int64), ea)
    unknown = dma[snd_target < 0]
    b.lost(DamageKind.undefined_id, unknown,
           "SNDSIG whose EA is no signal register of a known context")
    # each (context, register)'s SNDSIG writes, ascending, found once
    known = np.flatnonzero(snd_target >= 0)
    known = known[np.lexsort((known, snd_reg[known], snd_target[known]))]
    w_key = snd_target[known] * 3 + snd_reg[known]
    held = b.held(ctxs["rank"])
    for i, c in enumerate(ctxs.tolist()):
        if not held[i]:
            continue
        rank, ctx, loc = int(c[0]), int(c[1]), int(c[2])
        for reg in (1, 2):
            ppe_w = b.ppe_ctx_records(rank, ctx, P.SIGNAL_WRITE)
            ppe_w = ppe_w[rec["b"][ppe_w] == reg]
            spe_w = dma[known[np.searchsorted(w_key, i * 3 + reg):
                              np.searchsorted(w_key, i * 3 + reg, side="right")]]
            writes = np.concatenate([ppe_w, spe_w])
            reads = b.spe_ctx_records(loc, S.SIGNAL_READ_END)
            reads = reads[rec["a"][reads] == reg]
            if not (writes.size or reads.size):
                continue
            # order writes by their slot-order position (an SPE write's block comes later)
            w_slot = dec.anchors["slot"][rec["anchor"][writes]]
            po = np.argsort(w_slot, kind="stable")
            writes, w_slot = writes[po], w_slot[po]
            # writes come from several streams: certain only before the process's first loss
            cut = dec.loss_cut[rank] if dec.loss_cut is not None else np.iinfo(np.int64).max
            cw = min(b.sound(writes), int(np.searchsorted(w_slot, cut)))
            cr = b.sound(reads)
            if cw < writes.size or cr < reads.size:
                b.lost(DamageKind.unmatched_mailbox, np.concatenate([writes[cw:], reads[cr:]]),
                       f"signal after lost slots (context {ctx}, register {reg}): pairing by "
                       "count is no longer certain, not matched")
            writes, reads = writes[:cw], reads[:cr]
            n = min(writes.size, reads.size)
            if reads.size > writes.size:
                b.lost(DamageKind.unmatched_mailbox, reads[n:],
                       f"signal read without a write (context {ctx}, register {reg})")
            b.add_msgs(MsgKind.SIGNAL, writes[:n], reads[:n])
            if np.unique(rec["loc"][writes]).size <= 1:
                b.add_pairs(writes[:n], reads[:n])


def _signal_targets(ctxs: np.ndarray, rank: np.ndarray, ea: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per SNDSIG (its process's ``rank``, its ``ea`` as int64): the index in ``ctxs`` of the
    context whose signal register it writes (-1: none) and the register (1, 2; 0: none). The
    register's EA is the context's problem-state EA plus the register's offset; where two
    (context, register) share an EA in one process the later, in table then register order,
    is the target. One lookup in a sorted table instead of a pass per context."""
    rows = [(int(c[0]), int(c[5]) + off, i, reg) for i, c in enumerate(ctxs.tolist())
            if int(c[5]) != 0
            for reg, off in ((1, fmt.SIGNAL1_PS_OFFSET), (2, fmt.SIGNAL2_PS_OFFSET))
            if int(c[5]) + off < 1 << 63]
    target = np.full(ea.size, -1, dtype=np.int64)
    reg = np.zeros(ea.size, dtype=np.int64)
    if not rows or not ea.size:
        return target, reg
    # the last row of each (rank, EA) wins
    table = np.array(rows, dtype=np.int64)
    at = _pair_search(table[:, 0], table[:, 1], rank, ea)
    hit = at >= 0
    target[hit], reg[hit] = table[at[hit], 2], table[at[hit], 3]
    return target, reg


def _pair_search(k1: np.ndarray, k2: np.ndarray, q1: np.ndarray, q2: np.ndarray
                 ) -> np.ndarray:
    """Per query pair (``q1``, ``q2``): the index of the last row of the table (``k1``,
    ``k2``) that holds that pair, or -1. One sort of table and queries together."""
    n = k1.size
    order = np.lexsort((np.arange(n + q1.size), np.concatenate([k2, q2]),
                        np.concatenate([k1, q1])))
    is_row = order < n
    pos = np.arange(order.size)
    # per sorted position: the last table row at or before it (rows of one pair come
    # before its queries, in table order)
    last = np.maximum.accumulate(np.where(is_row, pos, -1))
    q_pos = np.flatnonzero(~is_row)
    out = np.full(q1.size, -1, dtype=np.int64)
    prev = last[q_pos]
    found = prev >= 0
    row = np.where(found, order[np.maximum(prev, 0)], 0)
    qi = order[q_pos] - n
    same = found & (k1[row] == q1[qi]) & (k2[row] == q2[qi]) if n else found
    out[qi[same]] = row[same]
    return out


def _dma(b: _Builder) -> np.ndarray:
    """DMA commands -> target location and completing TAG_WAIT_END."""
    dec, rec = b.dec, b.rec
    every, fields = b.dma_records()
    out = np.zeros(every.size, DMA_DTYPE)  # every DMA record at most, cut to size at the end
    n_out = 0
    mem_loc = {int(r): i for i, (r, k, _) in enumerate(dec.locations.tolist())
               if k == LocKind.MAIN_MEMORY}
    ctxs = dec.contexts
    t = every.dtype.type  # searchsorted with bounds of the index's own type (no conversion)
    for c in ctxs.tolist():
        rank, loc = int(c[0]), int(c[2])
        lo, hi = b.loc_range(loc)
        mine = slice(int(np.searchsorted(every, t(lo))), int(np.searchsorted(every, t(hi))))
        command = ~np.isin(fields["a"][mine], _SNDSIG)
        issue = every[mine][command]
        if not issue.size:
            continue
        waits = b.spe_ctx_records(loc, S.TAG_WAIT_END)
        tag = (fields["d"][mine][command] & 0xFF).astype(np.int64)
        complete = dma_completions(issue, tag, waits, rec["b"][waits], b.epoch)
        # target: another context's Local Store / problem-state area of this process, or memory
        ea = fields["b"][mine][command]
        target = np.full(issue.size, mem_loc[rank], dtype=np.int64)
        tkind = np.zeros(issue.size, dtype=np.uint8)
        areas = [(o[2], kind, base, size) for o in ctxs[ctxs["rank"] == rank].tolist()
                 for kind, base, size in ((1, o[4], fmt.LS_SIZE), (2, o[5], fmt.PS_SIZE))
                 if base]
        if areas:
            # only the commands whose EA lies between the lowest area and the end of the
            # highest can hit one (most go to main memory); later areas win, as they come
            low = min(a[2] for a in areas)
            top = min(max(a[2] + a[3] for a in areas), 1 << 64) - 1
            near = np.flatnonzero((ea >= np.uint64(low)) & (ea <= np.uint64(top)))
            ea_near = ea[near]
            for loc_o, kind, base, size in areas:
                b0 = np.uint64(base)
                # ea - base, not base + size: a base near 2^64 must not wrap (nor warn)
                hit = near[(ea_near >= b0) & (ea_near - b0 < np.uint64(size))]
                target[hit], tkind[hit] = loc_o, kind
        d = out[n_out:n_out + issue.size]
        n_out += issue.size
        d["issue"], d["complete"], d["loc"] = issue, complete, loc
        d["target"], d["target_kind"] = target, tkind
        b.lost(DamageKind.unmatched_dma, issue[complete < 0],
               "DMA command with no later tag wait for its tag: written as issued, "
               "never completed")
    out.resize(n_out, refcheck=False)
    return out


def _mpi(b: _Builder) -> tuple[int, int]:
    """MPI point-to-point by the non-overtaking rule, nonblocking requests, collectives."""
    dec, rec = b.dec, b.rec
    comms = dec.manifest.communicator_by_id
    node_of = np.array([dec.manifest.node_of_rank(r) for r in range(dec.manifest.n_ranks)])
    send_codes = [P.MPI_SEND, P.MPI_ISEND]
    recv_codes = [P.MPI_RECV, P.MPI_IRECV]
    s_idx = b.code_records(*send_codes)
    r_idx = b.code_records(*recv_codes)
    n_msgs = 0

    def world(idx: np.ndarray, peer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = np.full(idx.size, -1, dtype=np.int64)
        ok = np.zeros(idx.size, dtype=bool)
        for cid in np.unique(rec["a"][idx]).tolist():
            sel = rec["a"][idx] == cid
            comm = comms.get(int(cid))
            if comm is None:
                continue
            ranks = np.array(comm.ranks, dtype=np.int64)
            p = peer[sel]
            good = p < ranks.size
            w = np.full(p.size, -1, dtype=np.int64)
            w[good] = ranks[p[good]]
            out[sel], ok[sel] = w, good
        return out, ok

    s_peer = (rec["b"][s_idx] >> np.uint64(32)).astype(np.int64)
    r_peer = (rec["b"][r_idx] >> np.uint64(32)).astype(np.int64)
    s_dst, s_ok = world(s_idx, s_peer)
    r_src, r_ok = world(r_idx, r_peer)
    b.lost(DamageKind.undefined_id, np.concatenate([s_idx[~s_ok], r_idx[~r_ok]]),
           "MPI record naming an undefined communicator or a peer outside it")
    # such a record belonged to some channel of its process: channels of that process are
    # paired by count only before it, as before a lost slot
    mpi_epoch = b.epoch.copy() if not (s_ok.all() and r_ok.all()) else b.epoch
    for bad in (s_idx[~s_ok], r_idx[~r_ok]):
        for r in np.unique(b.loc_rank[bad]).tolist():
            first = int(rec["slot"][bad[b.loc_rank[bad] == r]].min())
            mpi_epoch[(b.loc_rank == r) & (rec["slot"] >= first)] += 1
    s_idx, s_dst = s_idx[s_ok], s_dst[s_ok]
    r_idx, r_src = r_idx[r_ok], r_src[r_ok]
    s_src = b.loc_rank[s_idx].astype(np.int64)
    r_dst = b.loc_rank[r_idx].astype(np.int64)
    s_key = np.stack([rec["a"][s_idx].astype(np.int64), s_src, s_dst,
                      (rec["b"][s_idx] & np.uint64(0xFFFFFFFF)).astype(np.int64)])
    r_key = np.stack([rec["a"][r_idx].astype(np.int64), r_src, r_dst,
                      (rec["b"][r_idx] & np.uint64(0xFFFFFFFF)).astype(np.int64)])
    # order within a channel: slot order of the process (one buffer per process)
    s_ord = np.lexsort((rec["slot"][s_idx], *s_key[::-1]))
    r_ord = np.lexsort((rec["slot"][r_idx], *r_key[::-1]))
    s_idx, s_key = s_idx[s_ord], s_key[:, s_ord]
    r_idx, r_key = r_idx[r_ord], r_key[:, r_ord]
    # k-th within each channel: the channels are the distinct send keys (in their sorted
    # order, as the sends are); a receive whose key no send has is unmatched
    s_lab, r_lab, n_ch = _channels(s_key, r_key)
    s_pos = _position_in_group(s_lab)
    r_pos = _position_in_group(r_lab)
    # per channel: how many pair up (before the first record of a possible loss on either
    # side, and no more than either side has)
    n_pair = np.bincount(s_lab, minlength=n_ch)
    r_has = r_lab >= 0
    np.minimum(n_pair, np.bincount(r_lab[r_has], minlength=n_ch), out=n_pair)
    for lab, pos, idx in ((s_lab, s_pos, s_idx), (r_lab, r_pos, r_idx)):
        late = (lab >= 0) & (mpi_epoch[idx] != 0)
        np.minimum.at(n_pair, lab[late], pos[late])
    s_paired = s_pos < n_pair[s_lab]
    # (a receive of no channel reads the 0 appended: a run may have receives and no send)
    r_paired = r_has & (r_pos < np.append(n_pair, 0)[np.where(r_has, r_lab, n_ch)])
    sends_a = s_idx[s_paired].astype(np.int64)
    recvs_a = r_idx[r_paired].astype(np.int64)
    # the unmatched: receives of no channel, then per channel its sends and its receives
    late_s, late_r = np.flatnonzero(~s_paired), np.flatnonzero(r_has & ~r_paired)
    unmatched = np.concatenate([r_idx[~r_has], s_idx[late_s], r_idx[late_r]])
    ch = np.concatenate([s_lab[late_s], r_lab[late_r]])
    side = np.concatenate([np.zeros(late_s.size, np.int8), np.ones(late_r.size, np.int8)])
    tail = np.lexsort((side, ch))  # stable: each side keeps its order within a channel
    n_none = int((~r_has).sum())
    unmatched[n_none:] = unmatched[n_none:][tail]
    b.lost(DamageKind.unmatched_mpi, unmatched, "MPI message without partner")
    n_msgs = sends_a.size
    if n_msgs:
        b.add_msgs(MsgKind.MPI, sends_a, recvs_a)
        cross = node_of[b.loc_rank[sends_a]] != node_of[b.loc_rank[recvs_a]]
        b.add_pairs(sends_a[~cross], recvs_a[~cross])
        b.add_pairs(sends_a[cross], recvs_a[cross], cross_node=True)
    n_coll = _collectives(b, node_of, mpi_epoch)
    return n_msgs, n_coll


def _channels(s_key: np.ndarray, r_key: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Channel labels of sends and receives (keys: one column per record, rows compared
    lexicographically; the sends sorted by key): the index of the key among the distinct send
    keys in sorted order, -1 for a receive whose key no send has; and the number of channels.
    Each key row is coded as one int64 that keeps the order (each column's values numbered
    densely, the numbers combined in mixed radix), so that one searchsorted finds them; keys
    too varied for 63 bits take np.unique over rows instead."""
    ns = s_key.shape[1]
    if not ns:
        return (np.zeros(0, np.int64), np.full(r_key.shape[1], -1, np.int64), 0)
    both = np.concatenate([s_key, r_key], axis=1)
    code = np.zeros(both.shape[1], dtype=np.int64)
    room = np.iinfo(np.int64).max
    for col in both:
        values, number = np.unique(col, return_inverse=True)
        if values.size > room:
            return _channels_by_rows(s_key, r_key)
        room //= max(1, values.size)
        code = code * values.size + number.reshape(-1)
    s_code, r_code = code[:ns], code[ns:]
    head = np.ones(ns, dtype=bool)
    head[1:] = s_code[1:] != s_code[:-1]
    distinct = s_code[head]
    at = np.minimum(np.searchsorted(distinct, r_code), distinct.size - 1)
    return (np.cumsum(head) - 1, np.where(distinct[at] == r_code, at, -1).astype(np.int64),
            int(distinct.size))


def _channels_by_rows(s_key: np.ndarray, r_key: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, int]:
    """``_channels`` by np.unique over the key rows (any keys)."""
    ns = s_key.shape[1]
    both = np.concatenate([s_key, r_key], axis=1).T
    uniq, inverse = np.unique(both, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    # which distinct keys are send keys, and their number among them
    is_send = np.zeros(uniq.shape[0], dtype=bool)
    is_send[inverse[:ns]] = True
    label = np.where(is_send, np.cumsum(is_send) - 1, -1)
    return label[inverse[:ns]], label[inverse[ns:]], int(is_send.sum())


def _position_in_group(label: np.ndarray) -> np.ndarray:
    """Per entry of ``label`` (grouped: equal labels adjacent): its place in its group."""
    n = label.size
    if not n:
        return np.zeros(0, np.int64)
    start = np.ones(n, dtype=bool)
    start[1:] = label[1:] != label[:-1]
    first = np.flatnonzero(start)
    return np.arange(n) - np.repeat(first, np.diff(np.append(first, n)))


def _collectives(b: _Builder, node_of: np.ndarray, epoch: np.ndarray) -> int:
    """Instances of collectives; pairs BEGIN -> END by the operation's kind."""
    dec, rec = b.dec, b.rec
    ends = b.code_records(P.MPI_COLL_END)
    begins = b.code_records(P.MPI_COLL_BEGIN)
    # BEGIN -> next END on the same location (records sorted by loc, program order)
    pos = np.searchsorted(ends, begins)
    ok = pos < ends.size
    ok[ok] = rec["loc"][ends[pos[ok]]] == rec["loc"][begins[ok]]
    begin_of_end = np.full(ends.size, -1, dtype=np.int64)
    begin_of_end[pos[ok]] = begins[ok]
    instances = 0
    for cid, comm in dec.manifest.communicator_by_id.items():
        sel = ends[(rec["a"][ends] == cid)]
        if not sel.size:
            continue
        # each member's ENDs on this communicator, in record order (grouped once)
        members_of = np.unique(np.asarray(comm.ranks, dtype=np.int64))
        sel_rank = b.loc_rank[sel].astype(np.int64)
        by_rank = np.argsort(sel_rank, kind="stable")
        lo = np.searchsorted(sel_rank[by_rank], members_of)
        hi = np.searchsorted(sel_rank[by_rank], members_of, side="right")
        per_rank = {int(r): sel[by_rank[a:z]] for r, a, z in
                    zip(members_of.tolist(), lo.tolist(), hi.tolist(), strict=True)}
        per_rank = {r: per_rank[r] for r in comm.ranks}
        n = min(v.size for v in per_rank.values())
        # the k-th END of every member is one instance only before a possible loss, and only
        # while the members agree on what the instance was (operation and root)
        late = [np.flatnonzero(np.concatenate([epoch[v] != 0, [True]]))[0]
                for v in per_rank.values()]
        n = min(n, *late)
        if n:
            fields = np.stack([rec["b"][per_rank[r][:n]] for r in comm.ranks])
            differ = np.flatnonzero((fields != fields[0]).any(axis=0))
            n = int(differ[0]) if differ.size else n
        for v in per_rank.values():
            if v.size > n:
                b.lost(DamageKind.unmatched_mpi, v[n:],
                       f"collective on communicator {cid} not joined by every member, after "
                       "lost slots, or not agreeing on its operation and root")
        instances += n
        if n == 0:
            continue
        # matrix [member, instance] of END and BEGIN record indexes
        e = np.stack([per_rank[r][:n] for r in comm.ranks])
        bg = begin_of_end[np.searchsorted(ends, e)]
        op = (rec["b"][e[0]] >> np.uint64(32)).astype(np.int64)
        root = (rec["b"][e[0]] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        member_node = node_of[np.asarray(comm.ranks, dtype=np.int64)]
        same = member_node[:, None] == member_node[None, :]
        b.add_pairs(*_collective_pairs(bg, e, op, root, same))
        b.add_pairs(*_cross_node_pairs(bg, e, op, root, member_node, rec["local"]),
                    cross_node=True)
    return instances


def _collective_pairs(bg: np.ndarray, e: np.ndarray, op: np.ndarray, root: np.ndarray,
                      allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The happened-before pairs (BEGIN record, END record) of a communicator's instances,
    instance by instance: ``bg`` and ``e`` are [member, instance] BEGIN and END record
    indexes (BEGIN -1: none), ``op`` and ``root`` each instance's operation and root. One-to-all
    kinds (BCAST, SCATTER): the root's BEGIN before every END; all-to-one (GATHER, REDUCE):
    every BEGIN before the root's END; SCAN: member i's BEGIN before the END of every member
    k >= i; the rest (barrier, all-to-all kinds): every BEGIN before every END. Within an
    instance the pairs come BEGIN member by BEGIN member (SCAN: END member by END member);
    a root outside the communicator gives none (emit counts it); a missing BEGIN or a
    BEGIN that is its END gives no pair. ``allowed``: [BEGIN member, END member], the
    member pairs to give (default: all)."""
    m, _ = e.shape
    every = np.arange(m)
    src_all, dst_all = np.repeat(every, m), np.tile(every, m)
    i_scan, k_scan = _scan_members(m)
    if allowed is not None:
        ok = allowed[src_all, dst_all]
        src_all, dst_all = src_all[ok], dst_all[ok]
        ok = allowed[i_scan, k_scan]
        i_scan, k_scan = i_scan[ok], k_scan[ok]
    one_to_all, all_to_one, scan, everyone = _collective_kinds(op)
    parts = []  # (instance, BEGIN member, END member), per kind
    for kind, src, dst in ((everyone, src_all, dst_all), (scan, i_scan, k_scan)):
        j = np.flatnonzero(kind)
        if j.size and src.size:
            parts.append((np.repeat(j, src.size), np.tile(src, j.size),
                          np.tile(dst, j.size)))
    for kind, rooted_src in ((one_to_all, True), (all_to_one, False)):
        j = np.flatnonzero(kind & (root < m))
        if j.size and m:
            r = np.repeat(root[j], m)
            other = np.tile(every, j.size)
            i, k = (r, other) if rooted_src else (other, r)
            ok = np.ones(i.size, dtype=bool) if allowed is None else allowed[i, k]
            parts.append((np.repeat(j, m)[ok], i[ok], k[ok]))
    return _in_instance_order(parts, bg, e)


def _cross_node_pairs(bg: np.ndarray, e: np.ndarray, op: np.ndarray, root: np.ndarray,
                      member_node: np.ndarray, local: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of ``_collective_pairs`` between members on different nodes, as the node
    clock fit needs them: per instance and ordered pair of nodes only the latest BEGIN on
    the one (node timebase, ``local``) before the earliest END on the other, which implies
    every other pair of the two nodes (a node's ranks share its clock, and clock maps
    increase); SCAN's pairs, which are not every BEGIN before every END, all of them.
    An instance gives at most nodes x (nodes - 1) pairs, not members squared."""
    m, _ = e.shape
    one_to_all, all_to_one, scan, everyone = _collective_kinds(op)
    cross = member_node[:, None] != member_node[None, :]
    parts = []  # (instance, BEGIN member, END member), per kind
    j = np.flatnonzero(scan)
    if j.size:  # every pair, as ``_collective_pairs`` gives it, of these instances only
        i_scan, k_scan = _scan_members(m)
        ok = cross[i_scan, k_scan]
        i_scan, k_scan = i_scan[ok], k_scan[ok]
        parts.append((np.repeat(j, i_scan.size), np.tile(i_scan, j.size),
                      np.tile(k_scan, j.size)))
    nodes, node_at = np.unique(member_node, return_inverse=True)
    t_begin = np.where(bg >= 0, local[np.maximum(bg, 0)].astype(np.float64), -np.inf)
    t_end = local[e].astype(np.float64)
    latest = np.zeros((nodes.size, e.shape[1]), np.int64)  # [node, instance]: a member
    earliest = np.zeros_like(latest)
    for u in range(nodes.size):
        on = np.flatnonzero(node_at == u)
        latest[u] = on[np.argmax(t_begin[on], axis=0)]
        earliest[u] = on[np.argmin(t_end[on], axis=0)]
    uu, ww = np.nonzero(~np.eye(nodes.size, dtype=bool))  # ordered pairs of nodes
    j = np.flatnonzero(everyone)
    if j.size and uu.size:
        parts.append((np.repeat(j, uu.size), latest[uu][:, j].T.reshape(-1),
                      earliest[ww][:, j].T.reshape(-1)))
    for kind, rooted_src in ((one_to_all, True), (all_to_one, False)):
        j = np.flatnonzero(kind & (root < m))
        if not j.size:
            continue
        r = root[j]
        other = np.tile(np.arange(nodes.size), j.size)
        jj = np.repeat(j, nodes.size)
        rr = np.repeat(r, nodes.size)
        ok = other != node_at[rr]
        jj, rr, other = jj[ok], rr[ok], other[ok]
        if rooted_src:
            parts.append((jj, rr, earliest[other, jj]))
        else:
            parts.append((jj, latest[other, jj], rr))
    return _in_instance_order(parts, bg, e)


def _scan_members(m: int) -> tuple[np.ndarray, np.ndarray]:
    """SCAN's (BEGIN member, END member) pairs of ``m`` members, END member by END member:
    member i's BEGIN before the END of every member k >= i."""
    every = np.arange(m)
    k_scan = np.repeat(every, every + 1)
    i_scan = np.concatenate([np.arange(k + 1) for k in range(m)]) if m else every
    return i_scan, k_scan


def _collective_kinds(op: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per instance: one-to-all, all-to-one, SCAN, every BEGIN before every END."""
    one_to_all = np.isin(op, [fmt.CollOp.BCAST, fmt.CollOp.SCATTER])
    all_to_one = np.isin(op, [fmt.CollOp.GATHER, fmt.CollOp.REDUCE])
    scan = op == fmt.CollOp.SCAN
    return one_to_all, all_to_one, scan, ~(one_to_all | all_to_one | scan)


def _in_instance_order(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                       bg: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(BEGIN, END) records of (instance, BEGIN member, END member) triples, instance by
    instance (stable: each kind's own order within one), without the pairs that have no
    BEGIN or whose BEGIN is their END."""
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    inst = np.concatenate([p[0] for p in parts])
    i = np.concatenate([p[1] for p in parts])
    k = np.concatenate([p[2] for p in parts])
    order = np.argsort(inst, kind="stable")  # each instance's pairs, in their own order
    inst, i, k = inst[order], i[order], k[order]
    before, after = bg[i, inst], e[k, inst]
    keep = (before >= 0) & (before != after)
    return before[keep].astype(np.int64), after[keep].astype(np.int64)
