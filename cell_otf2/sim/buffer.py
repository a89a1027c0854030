"""The shared trace buffer of one process: blocks, reservations, slots, bytes.

Input: the process's records (``records.REC_DTYPE``, ``t`` = true time of each clock reading)
and the decrementer intervals of its contexts. Output: ``Slots``, one row per slot in slot
order with its true reading and reservation times, and the encoded dump bytes.

- PPE record: reserved ``min(U(0.2, 8), gap/2)`` ticks before its timebase reading (``gap`` =
  time since the thread's previous record, so program order is slot order);
  ``timebase = floor(node timebase at the reading)``.
- SPE records are grouped per context, in program order, into blocks of
  ``spe_buffer_records``; the block is reserved ``min(U(1, 4), gap/3)`` ticks after its last
  record, its header decr read ``min(U(0, 8), gap/3)`` after that (``gap`` = time to the
  context's next record), so every record precedes its header and the header precedes the
  next record. ``buffer`` alternates 0/1 with ``spe_buffers`` 2; the last block has flags bit 0.
- Slots follow reservation order; ``ticket`` is the header's slot index.

Encoding goes through ``cell_otf2.format`` dtypes only. This module does not apply damage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import format as fmt
from .clocks import NodeClock
from .records import PPE, SPE
from .spu import ContextClock

KIND_PPE, KIND_SPE, KIND_BLOCK, KIND_GAP = 0, 1, 2, 3

SLOT_DTYPE = np.dtype(
    [
        ("kind", "u1"),
        ("res", "<i8"),  # reservation index (slot-order rank of the reservation)
        ("t_read", "<f8"),  # true time of the clock reading (NaN for GAP)
        ("t_res", "<f8"),  # true time of the reservation
        ("uid", "<i8"),  # record uid, -1 for block headers and GAPs
        ("ctx", "<i4"),  # context of SPE records and headers, -1 otherwise
        ("interval", "<i4"),  # decrementer interval of the reading, -1 for PPE/GAP
        ("dmg", "u1"),
    ]
)


@dataclass
class Slots:
    """One process's dump before serialization."""

    meta: np.ndarray  # SLOT_DTYPE, one per slot
    raw: np.ndarray  # layout.ppe array, one per slot (view it with other dtypes to edit)
    layout: fmt.Layout
    spe_buffer_records: int
    spe_buffers: int
    slots_reserved: int

    def to_bytes(self, rank: int, timebase_hz: int) -> bytes:
        head = self.layout.new_header()
        head["spe_buffer_records"] = self.spe_buffer_records
        head["spe_buffers"] = self.spe_buffers
        head["rank"] = rank
        head["timebase_hz"] = timebase_hz
        head["slots_reserved"] = self.slots_reserved
        return head.tobytes() + self.raw.tobytes()


def _capped(rng: np.random.Generator, lo: float, hi: float, cap: np.ndarray) -> np.ndarray:
    return np.minimum(rng.uniform(lo, hi, size=len(cap)), cap)


def build_slots(
    recs: np.ndarray,
    node: NodeClock,
    clocks: dict[int, ContextClock],
    layout: fmt.Layout,
    spe_buffer_records: int,
    spe_buffers: int,
    rng: np.random.Generator,
) -> Slots:
    """Turn one process's records into slots (see the module docstring)."""
    B = max(1, int(spe_buffer_records))
    # ---- PPE records: reservation just before the reading, per thread in program order
    ppe = recs[recs["core"] == PPE]
    ppe = ppe[np.lexsort((ppe["uid"], ppe["t"], ppe["actor"]))]
    prev_gap = np.full(len(ppe), np.inf)
    if len(ppe) > 1:
        same = ppe["actor"][1:] == ppe["actor"][:-1]
        prev_gap[1:] = np.where(same, ppe["t"][1:] - ppe["t"][:-1], np.inf)
    ppe_res = ppe["t"] - _capped(rng, 0.2, 8.0, prev_gap / 2.0)

    # ---- SPE records: blocks per context
    spe = recs[recs["core"] == SPE]
    spe = spe[np.lexsort((spe["uid"], spe["t"], spe["actor"]))]
    ctx = spe["actor"].astype(np.int64)
    n_spe = len(spe)
    # position within its context
    starts = np.flatnonzero(np.r_[True, ctx[1:] != ctx[:-1]]) if n_spe else np.zeros(0, int)
    ctx_start = np.repeat(starts, np.diff(np.r_[starts, n_spe])) if n_spe else starts
    pos = np.arange(n_spe) - ctx_start
    block_in_ctx = pos // B
    new_block = np.r_[True, (ctx[1:] != ctx[:-1]) | (block_in_ctx[1:] != block_in_ctx[:-1])] \
        if n_spe else np.zeros(0, bool)
    blk_first = np.flatnonzero(new_block)
    blk_of_rec = np.cumsum(new_block) - 1
    n_blocks = len(blk_first)
    blk_last = np.r_[blk_first[1:], n_spe] - 1
    blk_count = blk_last - blk_first + 1
    blk_ctx = ctx[blk_first]
    blk_seq = block_in_ctx[blk_first]
    is_last_of_ctx = np.r_[blk_ctx[1:] != blk_ctx[:-1], True] if n_blocks else np.zeros(0, bool)
    t_last = spe["t"][blk_last]
    next_gap = np.where(is_last_of_ctx, 30.0,
                        np.r_[spe["t"][np.minimum(blk_last + 1, n_spe - 1)]] - t_last) \
        if n_blocks else np.zeros(0)
    blk_res = t_last + np.maximum(_capped(rng, 1.0, 4.0, next_gap / 3.0), 0.0)
    blk_read = blk_res + _capped(rng, 0.0, 8.0, next_gap / 3.0)

    # ---- reservation order
    n_ppe = len(ppe)
    res_t = np.concatenate([ppe_res, blk_res])
    res_size = np.concatenate([np.ones(n_ppe, np.int64), 1 + blk_count])
    order = np.argsort(res_t, kind="stable")
    size_sorted = res_size[order]
    first_slot_sorted = np.concatenate([[0], np.cumsum(size_sorted)[:-1]]).astype(np.int64)
    first_slot = np.empty_like(first_slot_sorted)
    first_slot[order] = first_slot_sorted
    res_rank = np.empty(len(order), np.int64)
    res_rank[order] = np.arange(len(order))
    n_slots = int(res_size.sum())

    meta = np.zeros(n_slots, SLOT_DTYPE)
    meta["uid"] = -1
    meta["ctx"] = -1
    meta["interval"] = -1
    raw = np.zeros(n_slots, layout.ppe)
    v_spe = raw.view(layout.spe)
    v_blk = raw.view(layout.block)

    # PPE slots
    ps = first_slot[:n_ppe]
    meta["kind"][ps] = KIND_PPE
    meta["res"][ps] = res_rank[:n_ppe]
    meta["t_read"][ps] = ppe["t"]
    meta["t_res"][ps] = ppe_res
    meta["uid"][ps] = ppe["uid"]
    meta["dmg"][ps] = ppe["dmg"]
    raw["code"][ps] = ppe["code"]
    raw["thread"][ps] = ppe["actor"]
    raw["a"][ps] = ppe["a"].astype(np.uint32)
    raw["timebase"][ps] = node.tb_floor(ppe["t"]).astype(np.uint64)
    raw["b"][ps] = ppe["b"]
    raw["c"][ps] = ppe["c"]

    # block headers and their records
    hs = first_slot[n_ppe:]
    meta["kind"][hs] = KIND_BLOCK
    meta["res"][hs] = res_rank[n_ppe:]
    meta["t_read"][hs] = blk_read
    meta["t_res"][hs] = blk_res
    meta["ctx"][hs] = blk_ctx
    v_blk["code"][hs] = fmt.ControlCode.BLOCK
    v_blk["ctx"][hs] = blk_ctx
    v_blk["seq"][hs] = blk_seq
    v_blk["count"][hs] = blk_count
    v_blk["buffer"][hs] = (blk_seq % 2) if spe_buffers == 2 else 0
    v_blk["flags"][hs] = np.where(is_last_of_ctx, fmt.BLOCK_FLAG_LAST, 0)
    v_blk["ticket"][hs] = hs.astype(np.uint64)
    rs = hs[blk_of_rec] + 1 + (np.arange(n_spe) - blk_first[blk_of_rec])
    meta["kind"][rs] = KIND_SPE
    meta["res"][rs] = res_rank[n_ppe:][blk_of_rec]
    meta["t_read"][rs] = spe["t"]
    meta["t_res"][rs] = blk_res[blk_of_rec]
    meta["uid"][rs] = spe["uid"]
    meta["ctx"][rs] = ctx
    meta["dmg"][rs] = spe["dmg"]
    v_spe["code"][rs] = spe["code"]
    v_spe["a"][rs] = spe["a"].astype(np.uint16)
    v_spe["b"][rs] = spe["b"]
    v_spe["c"][rs] = spe["c"]
    v_spe["d"][rs] = spe["d"]
    # decrementer readings of records and headers
    for c, clock in clocks.items():
        sel_r = rs[ctx == c]
        sel_h = hs[blk_ctx == c]
        for sel, view in ((sel_r, v_spe), (sel_h, v_blk)):
            if len(sel) == 0:
                continue
            interval, decr = clock.readings(meta["t_read"][sel])
            meta["interval"][sel] = interval
            view["decr"][sel] = decr.astype(np.uint32)
    return Slots(meta, raw, layout, B, spe_buffers, n_slots)
