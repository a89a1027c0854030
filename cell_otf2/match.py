"""Pair what belongs together in a ``Decoded`` trace: mailbox and signal values, DMA commands and
their completing tag wait, MPI messages (pairs between nodes apart, ``node_pairs``), collectives
and context runs with their START/EXIT, as numpy arrays of record indexes, plus happened-before
pairs for ``order.py``; pairing by count stops at the first possible loss of a stream, and what
is left unmatched is counted as damage (rules: docs/design.md, docs/damage.md). It does not look
at time (except to report value mismatches) and does not build constraints."""

from __future__ import annotations

import numpy as np

from . import format as fmt
from .damage import DamageKind, DamageLog
from .loops import dma_completions, gather_fields
from .model import DMA_DTYPE, MSG_DTYPE, PAIR_DTYPE, Decoded, LocKind, Matches, MsgKind

P = fmt.PpeCode
S = fmt.SpeCode


#: what pairing reads of every DMA record (``_Builder.dma_records``)
_DMA_FIELDS_DTYPE = np.dtype([("a", "<u8"), ("b", "<u8"), ("d", "<u8")])
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
        # PPE records that name a context, grouped by code, in slot order
        ctx_codes = [c for c in P if P.CTX_CREATE <= c <= P.SIGNAL_WRITE]
        sel = self.code_records(*ctx_codes)
        sel = sel[np.lexsort((self.rec["slot"][sel], self.rec["code"][sel]))]
        codes = self.rec["code"][sel]
        self.ppe_by_code = {int(c): sel[codes == c] for c in np.unique(codes).tolist()}
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
            gather_fields(fields, self.rec, idx, tuple((f, f) for f in _DMA_FIELDS_DTYPE.names))
            self._dma = idx, fields
        return self._dma

    def loc_range(self, loc: int) -> tuple[int, int]:
        return int(self.loc_start[loc]), int(self.loc_start[loc + 1])

    def ppe_ctx_records(self, rank: int, ctx: int, code: int) -> np.ndarray:
        """PPE records of ``code`` naming ``ctx`` in ``rank``, in slot order."""
        idx = self.ppe_by_code.get(int(code))
        if idx is None:
            return np.zeros(0, dtype=np.int64)
        return idx[(self.rec["a"][idx] == ctx) & (self.loc_rank[idx] == rank)]


def _pair_begin_end(begins: np.ndarray, ends: np.ndarray):
    """Pair BEGIN k with END k of one side (both already in order); trims to the shorter."""
    n = min(begins.size, ends.size)
    return begins[:n], ends[:n]


def match(dec: Decoded, damage: DamageLog, mpi: bool = True) -> Matches:
    """Pair every matchable record of the decoded trace.

    ``mpi=False`` leaves MPI records unpaired (a parallel conversion holds only some processes'
    records and pairs MPI over every process's MPI records, ``team_mpi.py``)."""
    b = _Builder(dec, damage)
    for c in dec.contexts.tolist():
        rank, ctx, loc = int(c[0]), int(c[1]), int(c[2])
        _mailboxes(b, rank, ctx, loc)
        _runs(b, rank, ctx, loc)
    _signals(b)
    dma = _dma(b)
    n_mpi, n_coll = _mpi(b) if mpi else (0, 0)
    def cat(parts: list[np.ndarray], dt: np.dtype) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dt)

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
    snd_target = np.full(dma.size, -1, dtype=np.int64)
    snd_reg = np.zeros(dma.size, dtype=np.int64)
    ea = fields["b"][sig].astype(np.int64)
    for i, c in enumerate(ctxs.tolist()):
        ps = int(c[5])
        if ps == 0:
            continue
        same_rank = b.loc_rank[dma] == c[0]
        for reg, off in ((1, fmt.SIGNAL1_PS_OFFSET), (2, fmt.SIGNAL2_PS_OFFSET)):
            hit = same_rank & (ea == ps + off)
            snd_target[hit] = i
            snd_reg[hit] = reg
    unknown = dma[snd_target < 0]
    b.lost(DamageKind.undefined_id, unknown,
           "SNDSIG whose EA is no signal register of a known context")
    for i, c in enumerate(ctxs.tolist()):
        rank, ctx, loc = int(c[0]), int(c[1]), int(c[2])
        for reg in (1, 2):
            ppe_w = b.ppe_ctx_records(rank, ctx, P.SIGNAL_WRITE)
            ppe_w = ppe_w[rec["b"][ppe_w] == reg]
            spe_w = dma[(snd_target == i) & (snd_reg == reg)]
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
    # k-th within each channel
    sends, recvs = [], []
    s_ch = {tuple(k): i for i, k in enumerate(np.unique(s_key.T, axis=0).tolist())}
    s_lab = np.array([s_ch[tuple(k)] for k in s_key.T.tolist()], dtype=np.int64)
    r_lab = np.array([s_ch.get(tuple(k), -1) for k in r_key.T.tolist()], dtype=np.int64)
    unmatched = [r_idx[r_lab < 0]]
    for ch in range(len(s_ch)):
        ss = s_idx[s_lab == ch]
        rr = r_idx[r_lab == ch]
        late = np.flatnonzero(np.concatenate([mpi_epoch[ss] != 0, [True]]))[0], np.flatnonzero(
            np.concatenate([mpi_epoch[rr] != 0, [True]]))[0]
        n = min(ss.size, rr.size, *late)
        sends.append(ss[:n])
        recvs.append(rr[:n])
        unmatched += [ss[n:], rr[n:]]
    sends_a = np.concatenate(sends) if sends else np.zeros(0, np.int64)
    recvs_a = np.concatenate(recvs) if recvs else np.zeros(0, np.int64)
    b.lost(DamageKind.unmatched_mpi, np.concatenate(unmatched),
           "MPI message without partner")
    n_msgs = sends_a.size
    if n_msgs:
        b.add_msgs(MsgKind.MPI, sends_a, recvs_a)
        cross = node_of[b.loc_rank[sends_a]] != node_of[b.loc_rank[recvs_a]]
        b.add_pairs(sends_a[~cross], recvs_a[~cross])
        b.add_pairs(sends_a[cross], recvs_a[cross], cross_node=True)
    n_coll = _collectives(b, node_of, mpi_epoch)
    return n_msgs, n_coll


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
        per_rank = {r: sel[b.loc_rank[sel] == r] for r in comm.ranks}
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
        members = len(comm.ranks)
        for j in range(n):
            o = int(op[j])
            if o in (fmt.CollOp.BCAST, fmt.CollOp.SCATTER):
                src, dst = [int(root[j])], range(members)
            elif o in (fmt.CollOp.GATHER, fmt.CollOp.REDUCE):
                src, dst = range(members), [int(root[j])]
            elif o == fmt.CollOp.SCAN:
                src = dst = None
            else:  # barrier and all-to-all kinds
                src, dst = range(members), range(members)
            if src is None:
                bb = [(bg[i, j], e[k, j]) for k in range(members) for i in range(k + 1)]
            else:
                bb = [(bg[i, j], e[k, j]) for i in src for k in dst
                      if i < members and k < members]  # a root outside: emit counts it
            bb = [(x, y) for x, y in bb if x >= 0 and x != y]
            if not bb:
                continue
            arr = np.array(bb, dtype=np.int64)
            cross = node_of[b.loc_rank[arr[:, 0]]] != node_of[b.loc_rank[arr[:, 1]]]
            b.add_pairs(arr[~cross, 0], arr[~cross, 1])
            b.add_pairs(arr[cross, 0], arr[cross, 1], cross_node=True)
    return instances
