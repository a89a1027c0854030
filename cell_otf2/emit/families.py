"""The CBT record families as OTF2 events, one function per family in the order ``emit`` calls
them: manifest regions (ENTER/LEAVE), SPE program runs, the calls written as regions (spans
and points: ``call_regions``), context switches, counters, mailbox and signal messages, MPI,
DMA (``DmaStyle``) and heartbeats (docs/archive.md sections 8-13). Each appends its events to
an ``EventTable`` and marks its records in a ``RecordLedger`` (written, or counted in the
damage log); none defines anything (``emit.definitions``), lays the table out
(``emit.table``) or repairs Enter/Leave (``emit.balance``).
"""

from __future__ import annotations

import numpy as np

from ..damage import DamageKind, DamageLog
from ..input import format as fmt
from ..model import Decoded, DmaStyle, Ev, LocKind, MsgKind
from .kernels import RecordBits, select_refs, take_field
from .table import EventTable, SparseColumn, event_seq, lookup_refs

P = fmt.PpeCode
S = fmt.SpeCode

_MPI_CODES = np.array([P.MPI_SEND, P.MPI_RECV, P.MPI_ISEND, P.MPI_IRECV, P.MPI_ISEND_COMPLETE,
                       P.MPI_IRECV_REQUEST, P.MPI_COLL_BEGIN, P.MPI_COLL_END], dtype=np.uint16)

#: CBT collective op number -> OTF2 CollectiveOp value
OTF2_COLL_OP = np.array([0, 1, 2, 4, 6, 8, 12, 11, 13, 14], dtype=np.uint64)

# span regions: (BEGIN code, END code, region name)
_SPANS = (
    (P.IN_MBOX_WRITE_BEGIN, P.IN_MBOX_WRITE_END, "spe_in_mbox_write"),
    (P.OUT_MBOX_READ_BEGIN, P.OUT_MBOX_READ_END, "spe_out_mbox_read"),
    (P.OUT_INTR_MBOX_READ_BEGIN, P.OUT_INTR_MBOX_READ_END, "spe_out_intr_mbox_read"),
    (P.CTX_RUN_BEGIN, P.CTX_RUN_END, "spe_context_run"),
    (S.IN_MBOX_READ_BEGIN, S.IN_MBOX_READ_END, "spu_read_in_mbox"),
    (S.OUT_MBOX_WRITE_BEGIN, S.OUT_MBOX_WRITE_END, "spu_write_out_mbox"),
    (S.OUT_INTR_MBOX_WRITE_BEGIN, S.OUT_INTR_MBOX_WRITE_END, "spu_write_out_intr_mbox"),
    (S.SIGNAL_READ_BEGIN, S.SIGNAL_READ_END, "spu_read_signal"),
    (S.TAG_WAIT_BEGIN, S.TAG_WAIT_END, "mfc_read_tag_status"),
)
#: event parameters taken from the record's fields when the table is built: b, the low and
#: high 32 bits of c, and a DMA's tag | opcode << 8 | list elements << 16 (model.Ev)
_ALL = (1 << 64) - 1
_B = RecordBits(("b", 0, _ALL, 0))
_C_LOW = RecordBits(("c", 0, 0xFFFFFFFF, 0))
_C_HIGH = RecordBits(("c", 32, _ALL, 0))
_DMA_PACKED = RecordBits(("d", 0, 0xFF, 0), ("a", 0, _ALL, 8), ("d", 8, 0xFFFF, 16))

# point records written as zero-length regions
_POINTS = (
    (P.CTX_CREATE, "spe_context_create"),
    (P.CTX_LOAD, "spe_program_load"),
    (P.CTX_DESTROY, "spe_context_destroy"),
    (P.SIGNAL_WRITE, "spe_signal_write"),
    (S.DECR_WRITE, "spu_write_decrementer"),
)


class RecordLedger:
    """The records to map and what became of each: ``written`` (gave an event, or is written
    by another record's events, or carries nothing to write) and ``counted`` (not written,
    already in the damage log); ``select`` gives the records of some codes that have a time."""

    def __init__(self, dec: Decoded, good: np.ndarray, damage: DamageLog,
                 coded: bool = True) -> None:
        self.dec = dec
        self.records = dec.records
        #: usable time (and, when ``coded``, a code: else the records without one, which no
        #: family selects, are left out where the unwritten records are counted)
        self.good = good
        self.coded = coded
        self.damage = damage
        self.loc = self.records["loc"]
        self.loc_rank = dec.locations["rank"]
        self.written = np.zeros(self.records.size, dtype=bool)
        self.counted = np.zeros(self.records.size, dtype=bool)
        # record indexes grouped by code (a stable radix sort of the 16-bit codes), once
        self.by_code, self.code_bounds = dec.code_index()
        #: the non-SNDSIG DMA records with a time and which are gets (from
        #: mailbox_and_signal_messages to dma)
        self.dma_gets: tuple[np.ndarray, np.ndarray] | None = None

    def select_refs(self, code: int, name: str, table: dict[int, int]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The records of ``code`` that have a time and whose id in field ``name`` ``table``
        defines (marked written), their refs, and those whose id it does not."""
        by_code, code_bounds = self.by_code, self.code_bounds
        found = select_refs(self.records, name, by_code[code_bounds[code]:code_bounds[code + 1]],
                            self.good, table, self.written)
        if found is not None:
            return found
        i = self.select(code)
        ref = lookup_refs(table, self.records[name][i].astype(np.int64))
        bad = ref < 0
        if bad.any():
            i, ref, bad = i[~bad], ref[~bad], i[bad]
        else:
            bad = i[:0]
        self.written[i] = True
        return i, ref, bad

    def rank_of(self, i: np.ndarray) -> np.ndarray:
        """Ranks of records ``i``."""
        return self.loc_rank[self.loc[i]]

    def select(self, *codes: int) -> np.ndarray:
        """Indexes of the records of ``codes`` that have a time, ascending."""
        by_code, code_bounds = self.by_code, self.code_bounds
        idx = [by_code[code_bounds[c]:code_bounds[c + 1]] for c in codes]
        i = idx[0] if len(idx) == 1 else np.sort(np.concatenate(idx))
        return i[self.good[i]]

    def undefined(self, idx: np.ndarray, what: str) -> None:
        """Records ``idx`` name an id ``what`` that was never defined: counted, not written."""
        if idx.size:
            self.counted[idx] = True
            i = int(idx[0])
            self.damage.add(DamageKind.undefined_id,
                            self.dec.dump_names[int(self.loc_rank[self.loc[i]])],
                            int(self.records["slot"][i]), int(idx.size), f"{what} never defined: "
                            "the record is not written")

    def count_unwritten(self) -> None:
        """Count the records with a time that neither gave an event nor were counted."""
        rec, loc, loc_rank = self.records, self.loc, self.loc_rank
        left = np.flatnonzero(self.good & ~self.written & ~self.counted)
        if left.size and not self.coded:
            left = left[rec["code"][left] != 0]
        if left.size:
            undefined_codes = sorted({int(x) for x in rec["code"][left][:1000]})
            self.damage.add(DamageKind.undefined_id,
                            self.dec.dump_names[int(loc_rank[loc[left[0]]])],
                            int(rec["slot"][left[0]]), int(left.size),
                            f"records not written (codes {[hex(x) for x in undefined_codes]})")


def regions(ev: EventTable, ledger: RecordLedger, region_ref: dict[int, int]) -> None:
    """ENTER/LEAVE records (PPE and SPE): Enter and Leave of the manifest region."""
    undefined = ledger.undefined
    for enter, leave in ((P.ENTER, P.LEAVE), (S.ENTER, S.LEAVE)):
        for c, typ in ((enter, Ev.ENTER), (leave, Ev.LEAVE)):
            i, ref, bad = ledger.select_refs(c, "a", region_ref)  # i: marked written
            undefined(bad, "region id")
            ev.own(i, 0, typ, ref)


def program_runs(ev: EventTable, ledger: RecordLedger, program_ref: dict[int, int]) -> None:
    """START .. EXIT of an SPE context: the region of the program its CTX_LOAD named."""
    dec, loc, sel, undefined, written = (ledger.dec, ledger.loc, ledger.select, ledger.undefined,
                                         ledger.written)
    prog_of_loc = np.full(dec.locations.size, -1, dtype=np.int64)
    for c in dec.contexts.tolist():
        prog_of_loc[c[2]] = program_ref.get(int(c[6]), -1)
    for c, typ in ((S.START, Ev.ENTER), (S.EXIT, Ev.LEAVE)):
        i = sel(c)
        ref = prog_of_loc[loc[i]]
        undefined(i[ref < 0], "SPE program of the context (CTX_LOAD missing or unknown id)")
        i, ref = i[ref >= 0], ref[ref >= 0]
        ev.own(i, 1 if typ == Ev.LEAVE else 0, typ, ref)
        written[i] = True


def call_regions(ev: EventTable, ledger: RecordLedger, cell_ref: dict[str, int | None]) -> None:
    """The calls written as fixed regions: BEGIN .. END spans, and point records as zero-length
    regions (none where the manifest's region of that name marks the call)."""
    sel, written = ledger.select, ledger.written
    for b_code, e_code, name in _SPANS:  # (no region: the manifest's region marks the call)
        ref = cell_ref[name]
        i = sel(b_code)
        if ref is not None:
            ev.own(i, 0, Ev.ENTER, ref)
        written[i] = True
        i = sel(e_code)
        if ref is not None:
            ev.own(i, 4, Ev.LEAVE, ref)
        written[i] = True
    for p_code, name in _POINTS:
        ref = cell_ref[name]
        i = sel(p_code)
        if ref is not None:
            ev.own(i, 0, Ev.ENTER, ref)
            ev.own(i, 4, Ev.LEAVE, ref)
        written[i] = True


def context_switches(ev: EventTable, ledger: RecordLedger, off_spu_ref: int) -> None:
    """CTX_SWITCH records: each STOP/START pair (paired per context in slot order as decoding
    pairs them, ``decode._switch_pairs``) as the region "off SPU" on the SPE location (with the
    physical SPU on its Enter), nothing on the PPE thread.

    The pair's Enter and Leave are adjacent among the location's own events: inserted where the
    STOP's time puts the Enter, the Leave at the START's time but no later than the location's
    next own record (no earlier than the Enter). Whatever the synchronized SPE times (they move
    with ``--alpha`` within their bounds), the region then never straddles an own Enter or
    Leave, so the repair of Enter/Leave nesting, and the damage it counts, is the same for
    every offset. Records outside a pair are counted by decoding (``unusable_time``) and not
    written."""
    dec, rec, t, written = ledger.dec, ledger.records, ledger.records["time"], ledger.written
    by_code, bounds = ledger.by_code, ledger.code_bounds
    sw = by_code[bounds[P.CTX_SWITCH]:bounds[P.CTX_SWITCH + 1]].astype(np.int64)
    spe_loc = _context_locations(dec, ledger.rank_of(sw), rec["a"][sw])
    ok = spe_loc >= 0
    written[sw[ok & ledger.good[sw]]] = True
    sw, spe_loc = sw[ok], spe_loc[ok]
    kind = rec["b"][sw]
    keep = (kind == fmt.SwitchType.STOP) | (kind == fmt.SwitchType.START)
    sw, spe_loc, kind = sw[keep], spe_loc[keep], kind[keep]
    if not sw.size:
        return
    # per context in slot order: the first STOP of each run of STOPs with the first START of
    # the run after it
    order = np.lexsort((rec["slot"][sw], spe_loc))
    sw, spe_loc, is_stop = sw[order], spe_loc[order], kind[order] == fmt.SwitchType.STOP
    head = np.ones(sw.size, dtype=bool)
    head[1:] = (is_stop[1:] != is_stop[:-1]) | (spe_loc[1:] != spe_loc[:-1])
    heads = np.flatnonzero(head)
    nxt = np.append(heads[1:], -1)
    pair = is_stop[heads] & (nxt >= 0)
    pair[pair] &= spe_loc[heads[pair]] == spe_loc[np.maximum(nxt[pair], 0)]
    stop, start = sw[heads[pair]], sw[nxt[pair]]
    loc = spe_loc[heads[pair]]
    timed = ledger.good[stop] & ledger.good[start]
    stop, start, loc = stop[timed], start[timed], loc[timed]
    if not stop.size:
        return
    t_stop = t[stop].astype(np.int64)
    t_leave = np.maximum(t[start].astype(np.int64), t_stop)
    # the location's next own record after the Enter's place (records of a location are in
    # program order with non-decreasing times, ``synchronize.apply_times``): the Leave goes
    # no later, so that both are inserted at one place (``EventTable.layout``'s rule)
    first = dec.location_starts()
    for L in np.unique(loc).tolist():
        mine = np.flatnonzero(loc == L)
        lo, hi = int(first[L]), int(first[L + 1])
        times = t[lo:hi][ledger.good[lo:hi]]  # the records that can have events
        if not times.size:  # no own record: nothing to keep the Leave before
            continue
        times = np.maximum.accumulate(times)  # (non-decreasing already: never a wrong place)
        before = stop[mine] < int(first[L])  # the layout's tie rule for foreign events
        at = np.where(before, np.searchsorted(times, t_stop[mine], side="left"),
                      np.searchsorted(times, t_stop[mine], side="right"))
        inside = at < times.size
        nxt_t = (times[np.minimum(at, max(times.size - 1, 0))].astype(np.int64)
                 - (~before).astype(np.int64))
        cap = np.where(inside, nxt_t, np.iinfo(np.int64).max)
        t_leave[mine] = np.maximum(np.minimum(t_leave[mine], cap), t_stop[mine])
    ev.add(loc, Ev.ENTER_OFF_SPU, off_spu_ref, t_stop, event_seq(stop),
           p1=rec["c"][stop] >> np.uint64(32))
    # the Leave's tie-break is its STOP's, one after it: an equal time keeps it after its Enter
    ev.add(loc, Ev.LEAVE, off_spu_ref, t_leave, event_seq(stop, 1))


def _context_locations(dec, rank: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """Per (rank, context id) pair: the context's location (``dec.loc_of``), -1 where the
    run has no such context; one sorted lookup, not a dict lookup per record."""
    items = sorted(dec.ctx_loc.items())
    keys = np.array([(r << 32) | c for (r, c), _ in items], dtype=np.int64)
    locs = np.array([v for _, v in items], dtype=np.int64)
    out = np.full(rank.size, -1, dtype=np.int64)
    if not keys.size:
        return out
    ctx = np.asarray(ctx)
    short = ctx <= 0xFFFFFFFF
    q = (np.asarray(rank).astype(np.int64) << 32) | np.where(short, ctx, 0).astype(np.int64)
    at = np.minimum(np.searchsorted(keys, q), keys.size - 1)
    hit = short & (keys[at] == q)
    out[hit] = locs[at[hit]]
    return out


def counters(ev: EventTable, ledger: RecordLedger, metric_ref: dict[int, int]) -> None:
    """COUNTER records (PPE and SPE): a Metric event of the manifest counter."""
    undefined = ledger.undefined
    for c in (P.COUNTER, S.COUNTER):
        i, ref, bad = ledger.select_refs(c, "a", metric_ref)  # i: marked written
        undefined(bad, "counter id")
        ev.own(i, 0, Ev.METRIC, ref, p1=_B)


def mailbox_and_signal_messages(ev: EventTable, ledger: RecordLedger, messages: np.ndarray,
                                 mbox_comm: int) -> int:
    """Mailbox and signal values as messages on "Cell mailboxes" (send inside the writer's span,
    receive before END's Leave); SNDSIG records are written by their message only. Returns
    the messages written."""
    rec, good, sel, written = ledger.records, ledger.good, ledger.select, ledger.written
    m = messages
    m = m[good[m["send"]] & good[m["recv"]] & (m["kind"] != MsgKind.MPI)]
    msg_tag = m["kind"].astype(np.uint64)
    s, r = m["send"], m["recv"]
    ev.own(s, 1, Ev.MPI_SEND, mbox_comm,
           p1=m["recv_loc"], p2=msg_tag, p3=4)
    ev.own(r, 2, Ev.MPI_RECV, mbox_comm,
           p1=m["send_loc"], p2=msg_tag, p3=4)
    # SNDSIG records are written by their message only
    dma_rec = sel(S.DMA)
    a = take_field(rec, "a", dma_rec)
    sig = (a >= 0xA0) & (a <= 0xA2)
    written[dma_rec[sig]] = True
    # which of the other DMA records are gets, for ``dma`` (which would read the rows again)
    ledger.dma_gets = (dma_rec[~sig], _is_get(a[~sig]))
    return int(m.size)


def mpi(ev: EventTable, ledger: RecordLedger, messages: np.ndarray,
        mpi_paired: np.ndarray | None, comm_ref: dict[int, int], comm_size: np.ndarray) -> int:
    """MPI records (``mpi_paired``: as ``emit`` says; ``comm_size``: members per communicator
    ref); returns the MPI messages ``match`` found. A point-to-point record is written only
    when ``match`` paired it with its partner and both have a time: OTF2 readers pair sends
    and receives by order, so one without its partner would shift every later message of its
    channel onto the wrong partner. The others were counted by ``match`` (unmatched_mpi,
    undefined_id) or have no time; their call regions are still written; an ISEND's
    ISEND_COMPLETE and an IRECV's IRECV_REQUEST go with it. A collective whose root is outside
    its communicator is counted here and not written."""
    rec, loc, good, sel = ledger.records, ledger.loc, ledger.good, ledger.select
    written, counted, undefined = ledger.written, ledger.counted, ledger.undefined
    pairs = messages[messages["kind"] == MsgKind.MPI]
    pairs = pairs[good[pairs["send"]] & good[pairs["recv"]]]
    paired = np.zeros(rec.size, dtype=bool)
    paired[pairs["send"]] = paired[pairs["recv"]] = True
    if mpi_paired is not None:
        paired |= mpi_paired & good
    # the MPI records' fields, indexed like the records but held for MPI records only
    held = np.sort(np.concatenate([sel(c) for c in _MPI_CODES.tolist()]))
    comm = SparseColumn(held, lookup_refs(comm_ref, rec["a"][held].astype(np.int64)))
    size = SparseColumn(held, np.where(comm.values >= 0,
                                       comm_size[np.maximum(comm.values, 0)], 0))
    b, c = rec["b"][held], rec["c"][held]
    low32 = np.uint64(0xFFFFFFFF)
    peer, tag = SparseColumn(held, b >> np.uint64(32)), SparseColumn(held, b & low32)
    req, low = SparseColumn(held, c >> np.uint64(32)), SparseColumn(held, c & low32)
    for c, typ in ((P.MPI_SEND, Ev.MPI_SEND), (P.MPI_RECV, Ev.MPI_RECV)):
        i = sel(c)
        ok = (comm[i] >= 0) & (peer[i] < size[i]) & paired[i]
        counted[i[~ok]] = True
        i = i[ok]
        ev.own(i, 1, typ, comm[i], p1=peer[i], p2=tag[i], p3=rec["c"][i])
        written[i] = True
    dropped = np.zeros(rec.size, dtype=bool)
    issued = []
    for c, typ in ((P.MPI_ISEND, Ev.MPI_ISEND), (P.MPI_IRECV, Ev.MPI_IRECV)):
        i = sel(c)
        issued.append(i)
        ok = (comm[i] >= 0) & (peer[i] < size[i]) & paired[i]
        counted[i[~ok]] = dropped[i[~ok]] = True
        i = i[ok]
        ev.own(i, 1, typ, comm[i], p1=peer[i], p2=tag[i], p3=low[i],
               p4=req[i])
        written[i] = True
    for (c, typ), requests, later in zip(((P.MPI_ISEND_COMPLETE, Ev.MPI_ISEND_COMPLETE),
                                          (P.MPI_IRECV_REQUEST, Ev.MPI_IRECV_REQUEST)),
                                         issued, (True, False), strict=True):
        i = sel(c)
        # a request is pending from its ISEND to its ISEND_COMPLETE (from its IRECV_REQUEST
        # to its IRECV) on one location: in (location, request, program order) order the
        # partner of a dropped ISEND is the next entry, of a dropped IRECV the previous one
        both = np.concatenate([requests, i])
        key = (loc[both].astype(np.uint64) << np.uint64(32)) | (req[both] & np.uint64(2**32 - 1))
        both, key = both[np.lexsort((both, key))], np.sort(key)
        first, second = (both[:-1], both[1:]) if later else (both[1:], both[:-1])
        go = (key[1:] == key[:-1]) & dropped[first] & (rec["code"][second] == c)
        counted[second[go]] = True
        i = i[~counted[i]]
        ev.own(i, 1, typ, 0, p4=req[i])
        written[i] = True
    i = sel(P.MPI_COLL_BEGIN)
    ev.own(i, 1, Ev.MPI_COLL_BEGIN, 0)
    written[i] = True
    i = sel(P.MPI_COLL_END)
    i = i[comm[i] >= 0]
    bad_root = (tag[i] >= size[i]) & (tag[i] != np.uint64(0xFFFFFFFF))
    undefined(i[bad_root], "collective root (a rank outside its communicator)")
    i = i[~bad_root]
    op = np.minimum(peer[i], np.uint64(9)).astype(np.int64)
    ev.own(i, 1, Ev.MPI_COLL_END, comm[i], p1=OTF2_COLL_OP[op],
           p2=tag[i], p3=req[i], p4=low[i])
    written[i] = True
    return int((messages["kind"] == MsgKind.MPI).sum())


def dma(ev: EventTable, ledger: RecordLedger, transfers: np.ndarray, dma_style: DmaStyle,
        window: int, dma_comm: int, rma_id_offset: np.ndarray | None) -> tuple[int, int]:
    """DMA records: RmaGet / RmaPut with their completions and the window's lifetime
    (``DmaStyle.RMA``), or each completed command as a message on "DMA"
    (``DmaStyle.MESSAGES``). ``rma_id_offset``: as ``emit`` says. Returns the transfers and
    the completed ones."""
    rec, t, good, written = ledger.records, ledger.records["time"], ledger.good, ledger.written
    d = transfers
    # record indexes as the event table keeps them (contiguous, 32-bit below 2^30 records)
    i = d["issue"].astype(ev.index)
    keep = good[i]
    if not keep.all():
        d, i = d[keep], i[keep]
    del keep
    issuer = d["loc"]  # the DMA records' location (not read off the record rows again)
    known, ledger.dma_gets = ledger.dma_gets, None  # what mailbox_and_signal_messages read
    is_get = (known[1] if known is not None and np.array_equal(known[0], i)
              else _is_get(take_field(rec, "a", i)))
    del known
    comp = d["complete"].astype(ev.index)
    has_c = (comp >= 0) & good[np.maximum(comp, 0)]
    written[i] = True
    if dma_style == DmaStyle.RMA:
        match_id = np.arange(d.size, dtype=np.uint32 if d.size < 1 << 32 else np.uint64)
        if rma_id_offset is not None:
            offset = np.asarray(rma_id_offset, np.uint64)
            if offset.size and int(offset.max()) + d.size < 1 << 32:  # ids in 32 bits
                offset = offset.astype(np.uint32)
            match_id = match_id + offset[ledger.loc_rank][issuer]  # per location, then gathered
        # what only depends on the DMA record is taken from it when the table is built
        # one part with a type per event (a DMA record gives one event: the same table as a
        # part per type, without splitting every column)
        typ = np.full(d.size, Ev.RMA_PUT, dtype=np.uint8)
        typ[is_get] = Ev.RMA_GET
        ev.own(i, 0, typ, window, p1=d["target"], p2=_C_LOW, p3=match_id, p4=_DMA_PACKED,
               p5=_B, p6=_C_HIGH)
        c = comp[has_c]
        ev.own(c, 3, Ev.RMA_OP_COMPLETE_BLOCKING, window,
               p3=match_id[has_c])
        # the window exists on each location that issues transfers, from its first event to
        # its last (as Score-P creates a device window where it is used)
        # (the transfers come a context at a time: the sort is over one per run of issuers)
        heads = np.flatnonzero(issuer[1:] != issuer[:-1]) + 1
        users = np.unique(np.concatenate([issuer[:1], issuer[heads]])).astype(np.int64)
        ev.pin("start", users, Ev.RMA_WIN_CREATE, window)
        ev.pin("end", users, Ev.RMA_WIN_DESTROY, window, last=True)
    else:
        # GET: the target sends at issue, the SPE receives at completion; PUT the other way
        nbytes = rec["c"][i] & np.uint64(0xFFFFFFFF)
        tag = rec["d"][i] & np.uint64(0xFF)
        c_ok = has_c
        src_loc = np.where(is_get, d["target"], d["loc"])
        dst_loc = np.where(is_get, d["loc"], d["target"])
        k, c = i[c_ok], comp[c_ok]
        ev.add(src_loc[c_ok], Ev.MPI_SEND, dma_comm, t[k], event_seq(k),
               p1=dst_loc[c_ok], p2=tag[c_ok], p3=nbytes[c_ok])
        ev.add(dst_loc[c_ok], Ev.MPI_RECV, dma_comm, t[c], event_seq(c, 3),
               p1=src_loc[c_ok], p2=tag[c_ok], p3=nbytes[c_ok])
    return int(d.size), int(has_c.sum())


def _is_get(opcode: np.ndarray) -> np.ndarray:
    """Which DMA commands (their opcodes, field a) are gets."""
    return (opcode >= 0x40) & (opcode <= 0x46)


def program_begin_end(ev: EventTable, ledger: RecordLedger) -> None:
    """ProgramBegin before the first event and ProgramEnd after the last of each process's
    main thread (PPE thread 0), at their times, as Score-P writes them on every process's
    master location: the program's name, no arguments, no exit status (a CBT run records
    neither). A main thread without any event gets neither."""
    loc = ledger.dec.locations
    main = np.flatnonzero((loc["kind"] == LocKind.PPE_THREAD) & (loc["index"] == 0))
    main = main[ev.has_timed_events()[main]]
    ev.pin("start", main, Ev.PROGRAM_BEGIN, 0, sub=-1)  # before a window's creation
    ev.pin("end", main, Ev.PROGRAM_END, 0, sub=1, last=True)  # after its destruction


def heartbeats(ledger: RecordLedger) -> int:
    """HEARTBEAT records: time only, nothing to write; returns how many."""
    hb = ledger.select(S.HEARTBEAT)
    ledger.written[hb] = True
    return int(hb.size)
