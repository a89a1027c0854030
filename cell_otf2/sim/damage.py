"""Damage on request: one kind per docs/format.md section 8 item, applied to the last rank of an
otherwise clean run, record-level kinds on the record table and slot-level kinds on the slots,
each logged for the truth (the kinds and what they log: docs/simulator.md). It does not decide
whether a reader copes."""

from __future__ import annotations

import numpy as np

from ..input import format as fmt
from .buffer import KIND_BLOCK, KIND_GAP, KIND_PPE, SLOT_DTYPE, Slots
from .driver import ProcessSim
from .records import PPE, SPE, empty
from .workloads import R_MPI, R_SPE_MAIN

RECORD_KINDS = ("unknown-code", "undefined-id", "no-exit", "no-run-end", "unmatched-mailbox",
                "unmatched-mpi")
#: the last two are tracer bugs (what a tracer that breaks the format writes), not loss
SLOT_KINDS = ("gap", "backwards-timebase", "block-overrun", "late-block-header",
              "overcounted-blocks")
KINDS = ("truncate", *SLOT_KINDS, *RECORD_KINDS)
P, S = fmt.PpeCode, fmt.SpeCode


def _pick(rng: np.random.Generator, idx: np.ndarray) -> int:
    if len(idx) == 0:
        raise ValueError("the run has no record or slot this damage changes")
    return int(idx[len(idx) // 2 + int(rng.integers(0, max(1, len(idx) // 4)))
                   if len(idx) > 4 else 0])


def apply_record_damage(kind: str, recs_by_rank: dict[int, np.ndarray],
                        procs: list[ProcessSim], rng: np.random.Generator,
                        log: list[dict]) -> None:
    if kind not in RECORD_KINDS:
        return
    rank = max(recs_by_rank)
    r = recs_by_rank[rank]
    ppe = r["core"] == PPE
    spe = r["core"] == SPE
    detail = ""
    if kind == "unknown-code":
        i = _pick(rng, np.flatnonzero(ppe & (r["actor"] == 0) & (r["code"] != P.ENTER)))
        r["code"][i] = 0x01EE
        r["dmg"][i] = 1
        detail = "PPE record code 0x01EE"
    elif kind == "undefined-id":
        i = _pick(rng, np.flatnonzero(ppe & (r["code"] == P.COUNTER)))
        r["a"][i] = 999
        r["dmg"][i] = 1
        detail = "PPE COUNTER names undefined counter 999"
    elif kind == "no-exit":
        ctx = int(rng.integers(0, procs[rank].opts.spes))
        gone = spe & (r["actor"] == ctx) & (
            (r["code"] == S.EXIT) | ((r["code"] == S.LEAVE) & (r["a"] == R_SPE_MAIN)))
        end = np.flatnonzero(ppe & (r["code"] == P.CTX_RUN_END) & (r["a"] == ctx))
        r["b"][end] = int(fmt.StopReason.RUNTIME_EXCEPTION)
        r["dmg"][end] = 1
        recs_by_rank[rank] = r = r[~gone]
        detail = f"context {ctx}: no EXIT, CTX_RUN_END reason 3"
    elif kind == "no-run-end":
        ctx = int(rng.integers(0, procs[rank].opts.spes))
        gone = ppe & (r["code"] == P.CTX_RUN_END) & (r["a"] == ctx)
        begin = np.flatnonzero(ppe & (r["code"] == P.CTX_RUN_BEGIN) & (r["a"] == ctx))
        r["dmg"][begin] = 1
        recs_by_rank[rank] = r = r[~gone]
        detail = f"context {ctx}: CTX_RUN_BEGIN without CTX_RUN_END"
    elif kind == "unmatched-mailbox":
        ctx = int(rng.integers(0, procs[rank].opts.spes))
        reads = np.flatnonzero(ppe & (r["a"] == ctx) & (
            (r["code"] == P.OUT_MBOX_READ_BEGIN) | (r["code"] == P.OUT_MBOX_READ_END)))
        gone = reads[-2:]
        writes = np.flatnonzero(spe & (r["actor"] == ctx) & (
            (r["code"] == S.OUT_MBOX_WRITE_BEGIN) | (r["code"] == S.OUT_MBOX_WRITE_END)))
        r["dmg"][writes[-2:]] = 1
        keep = np.ones(len(r), bool)
        keep[gone] = False
        recs_by_rank[rank] = r = r[keep]
        detail = f"context {ctx}: last outbound mailbox value never read"
    elif kind == "unmatched-mpi":
        main = np.flatnonzero(ppe & (r["actor"] == 0))
        t_last = float(r["t"][main].max())
        t0 = t_last - 3.0 * procs[rank].us  # before the final LEAVE of main
        prev = float(r["t"][main][r["t"][main] < t0].max())
        ts = np.linspace(prev, t0, 5)[1:4]
        add = empty(3)
        add["t"] = ts
        add["core"] = PPE
        add["code"] = [P.ENTER, P.MPI_SEND, P.LEAVE]
        add["a"] = [R_MPI["send"], 0, R_MPI["send"]]
        add["b"][1] = (0 << 32) | 999
        add["c"][1] = 64
        add["dmg"] = 1
        add["uid"] = r["uid"].max() + 1 + np.arange(3)
        recs_by_rank[rank] = np.concatenate([r, add])
        detail = "rank sends tag 999 to rank 0 on MPI_COMM_WORLD; nobody receives it"
    log.append({"kind": kind, "rank": rank, "detail": detail})


def _remake(slots: Slots, meta: np.ndarray, raw: np.ndarray) -> Slots:
    return Slots(meta, raw, slots.layout, slots.spe_buffer_records, slots.spe_buffers,
                 slots.slots_reserved)


def apply_slot_damage(kind: str, rank: int, slots: Slots, rng: np.random.Generator,
                      log: list[dict], last_rank: int | None = None) -> Slots:
    """Slot-level kinds, for the last rank only (``last_rank``)."""
    if kind not in SLOT_KINDS or (last_rank is not None and rank != last_rank):
        return slots
    meta, raw = slots.meta, slots.raw
    if kind == "gap":
        heads = np.flatnonzero(meta["kind"] == KIND_BLOCK)
        h = _pick(rng, heads[: max(1, len(heads) // 2)])
        res0 = int(meta["res"][h])
        lost = np.flatnonzero((meta["res"] == res0) | (meta["res"] == res0 + 1))
        first, n_lost = int(lost[0]), len(lost)
        ticket = int(first)  # no earlier GAP: tickets equal slot indices before this one
        gap_meta = np.zeros(1, SLOT_DTYPE)
        gap_meta["kind"] = KIND_GAP
        gap_meta["t_read"] = np.nan
        gap_meta["t_res"] = np.nan
        gap_meta["uid"] = -1
        gap_meta["ctx"] = -1
        gap_meta["interval"] = -1
        gap_meta["dmg"] = 1
        gap_raw = np.zeros(1, slots.layout.ppe)
        g = gap_raw.view(slots.layout.gap)
        g["code"] = fmt.ControlCode.GAP
        g["lost"] = n_lost
        g["first_ticket"] = ticket
        meta = np.concatenate([meta[:first], gap_meta, meta[first + n_lost:]])
        # np.concatenate would canonicalize the byte order of the structured dtype
        new_raw = np.empty(len(raw) - n_lost + 1, slots.layout.ppe)
        new_raw[:first] = raw[:first]
        new_raw[first] = gap_raw[0]
        new_raw[first + 1:] = raw[first + n_lost:]
        raw = new_raw
        log.append({"kind": kind, "rank": rank, "gap_slot": first, "first_ticket": ticket,
                    "lost_slots": n_lost,
                    "detail": f"{n_lost} slots from ticket {ticket} lost, GAP at slot {first}"})
    elif kind == "backwards-timebase":
        main = np.flatnonzero((meta["kind"] == KIND_PPE) & (raw["thread"] == 0))
        i = _pick(rng, main[1 : max(2, len(main) // 3)])  # early: later cuts keep it
        prev = main[np.searchsorted(main, i) - 1]
        raw["timebase"][i] = raw["timebase"][prev] - np.uint64(1000)
        meta["dmg"][i] = 1
        log.append({"kind": kind, "rank": rank, "slot": int(i),
                    "detail": f"slot {i}: timebase 1000 ticks below slot {prev} (thread 0)"})
    elif kind == "block-overrun":
        v = raw.view(slots.layout.block)
        heads = np.flatnonzero((meta["kind"] == KIND_BLOCK) & (v["count"] >= 2))
        h = int(heads[-1])
        keep = h + 1 + int(v["count"][h]) // 2
        meta["dmg"][h] = 1
        meta, raw = meta[:keep], raw[:keep]
        missing = int(v["count"][h]) - (keep - h - 1)
        log.append({"kind": kind, "rank": rank, "header_slot": h, "missing_records": missing,
                    "detail": f"dump ends {missing} records short of the block at slot {h}"})
    elif kind == "late-block-header":
        meta, raw = _late_block_headers(slots, meta, raw, rank, log)
    elif kind == "overcounted-blocks":
        v = raw.view(slots.layout.block)
        heads = np.flatnonzero((meta["kind"] == KIND_BLOCK)
                               & (v["count"] < slots.spe_buffer_records))
        if not heads.size:
            raise ValueError("every block is full: no count can grow within spe_buffer_records")
        v["count"][heads] += 1
        meta["dmg"][heads] = 1
        log.append({"kind": kind, "rank": rank, "header_slots": heads.tolist(),
                    "detail": f"{heads.size} block headers (those not full) declare one record "
                              "more than follows them"})
    return _remake(slots, meta, raw)


def _late_block_headers(slots: Slots, meta: np.ndarray, raw: np.ndarray, rank: int,
                        log: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Every block header but each context's last reads its decrementer one tick after the
    next block's first record was made (a tracer that reads it after the buffer's DMA, not
    right after the reservation): the decrementer rises from the header to that record."""
    heads = np.flatnonzero(meta["kind"] == KIND_BLOCK)
    if heads.size < 2:
        raise ValueError("the run has no context with two blocks")
    by_ctx = heads[np.lexsort((heads, meta["ctx"][heads]))]  # each context's, in slot order
    has_next = np.flatnonzero(meta["ctx"][by_ctx][1:] == meta["ctx"][by_ctx][:-1])
    late, next_head = by_ctx[has_next], by_ctx[has_next + 1]
    head_decr = raw.view(slots.layout.block)["decr"]
    record_decr = raw.view(slots.layout.spe)["decr"]
    first_next = next_head + 1  # every block has at least one record
    head_decr[late] = (record_decr[first_next].astype(np.int64) - 1) % (1 << 32)
    meta["t_read"][late] = meta["t_read"][first_next]
    meta["dmg"][late] = 1
    log.append({"kind": "late-block-header", "rank": rank, "header_slots": late.tolist(),
                "detail": f"{late.size} block headers read their decrementer one tick after "
                          "the next block's first record"})
    return meta, raw


def truncation(kinds: list[str], rank: int, n_bytes: int, slots: Slots,
               rng: np.random.Generator, log: list[dict], last_rank: int) -> int:
    """Byte length to keep: the full file, or cut inside a slot near the end."""
    if "truncate" not in kinds or rank != last_rank:
        return n_bytes
    n_slots = (n_bytes - fmt.HEADER_SIZE) // fmt.SLOT_SIZE
    extra = 0 if "block-overrun" in kinds else int(rng.integers(0, max(1, n_slots // 10)))
    keep_slots = max(1, n_slots - 1 - extra)  # with block-overrun: only the last slot is cut
    cut = fmt.HEADER_SIZE + keep_slots * fmt.SLOT_SIZE + int(rng.integers(1, fmt.SLOT_SIZE))
    log.append({"kind": "truncate", "rank": rank, "cut_byte": cut, "partial_slot": keep_slots,
                "lost_slots": n_slots - keep_slots,
                "detail": f"file cut at byte {cut} inside slot {keep_slots}"})
    return cut
