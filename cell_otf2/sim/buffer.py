"""The shared trace buffer of one simulated process: from its records (``records.REC_DTYPE``, true
reading times) and its contexts' decrementer intervals, ``Slots`` (one row per slot in slot
order with its true reading and reservation times) and the encoded dump bytes, through
``cell_otf2.input.format`` dtypes only (reservation rules: docs/simulator.md). It does not apply
damage."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..input import format as fmt
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


def _void(a: np.ndarray) -> np.ndarray:
    """``a`` seen as opaque items: structured gathers and scatters run as plain copies."""
    return a.view(np.dtype((np.void, a.dtype.itemsize)))


def _take(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return _void(a)[idx].view(a.dtype)


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
    ppe = _take(recs, recs["core"] == PPE)
    ppe = _take(ppe, np.lexsort((ppe["uid"], ppe["t"], ppe["actor"])))
    prev_gap = np.full(len(ppe), np.inf)
    if len(ppe) > 1:
        same = ppe["actor"][1:] == ppe["actor"][:-1]
        prev_gap[1:] = np.where(same, ppe["t"][1:] - ppe["t"][:-1], np.inf)
    ppe_res = ppe["t"] - _capped(rng, 0.2, 8.0, prev_gap / 2.0)

    # ---- SPE records: blocks per context
    spe = _take(recs, recs["core"] == SPE)
    spe = _take(spe, np.lexsort((spe["uid"], spe["t"], spe["actor"])))
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

    # ---- fill: each kind as a contiguous array, then whole 32-byte slots scattered in place
    meta = np.empty(n_slots, SLOT_DTYPE)
    raw = np.empty(n_slots, layout.ppe)
    raw_v, meta_v = _void(raw), _void(meta)

    ps = first_slot[:n_ppe]
    m = np.zeros(n_ppe, SLOT_DTYPE)
    m["kind"] = KIND_PPE
    m["res"] = res_rank[:n_ppe]
    m["t_read"] = ppe["t"]
    m["t_res"] = ppe_res
    m["uid"] = ppe["uid"]
    m["ctx"] = -1
    m["interval"] = -1
    m["dmg"] = ppe["dmg"]
    meta_v[ps] = _void(m)
    x = np.zeros(n_ppe, layout.ppe)
    x["code"] = ppe["code"]
    x["thread"] = ppe["actor"]
    x["a"] = ppe["a"].astype(np.uint32)
    x["timebase"] = node.tb_floor(ppe["t"]).astype(np.uint64)
    x["b"] = ppe["b"]
    x["c"] = ppe["c"]
    raw_v[ps] = _void(x)

    # decrementer readings: contexts are contiguous in both spe[] and the block arrays
    rec_iv = np.empty(n_spe, np.int32)
    rec_decr = np.empty(n_spe, np.uint64)
    blk_iv = np.empty(n_blocks, np.int32)
    blk_decr = np.empty(n_blocks, np.uint64)
    for c, clock in clocks.items():
        lo, hi = np.searchsorted(ctx, [c, c + 1])
        if hi > lo:
            rec_iv[lo:hi], rec_decr[lo:hi] = clock.readings(spe["t"][lo:hi])
        blo, bhi = np.searchsorted(blk_ctx, [c, c + 1])
        if bhi > blo:
            blk_iv[blo:bhi], blk_decr[blo:bhi] = clock.readings(blk_read[blo:bhi])

    hs = first_slot[n_ppe:]
    m = np.zeros(n_blocks, SLOT_DTYPE)
    m["kind"] = KIND_BLOCK
    m["res"] = res_rank[n_ppe:]
    m["t_read"] = blk_read
    m["t_res"] = blk_res
    m["uid"] = -1
    m["ctx"] = blk_ctx
    m["interval"] = blk_iv
    meta_v[hs] = _void(m)
    x = np.zeros(n_blocks, layout.block)
    x["code"] = fmt.ControlCode.BLOCK
    x["ctx"] = blk_ctx
    x["decr"] = blk_decr.astype(np.uint32)
    x["seq"] = blk_seq
    x["count"] = blk_count
    x["buffer"] = (blk_seq % 2) if spe_buffers == 2 else 0
    x["flags"] = np.where(is_last_of_ctx, fmt.BLOCK_FLAG_LAST, 0)
    x["ticket"] = hs.astype(np.uint64)
    raw_v[hs] = _void(x)

    rs = hs[blk_of_rec] + 1 + (np.arange(n_spe) - blk_first[blk_of_rec])
    m = np.zeros(n_spe, SLOT_DTYPE)
    m["kind"] = KIND_SPE
    m["res"] = res_rank[n_ppe:][blk_of_rec]
    m["t_read"] = spe["t"]
    m["t_res"] = blk_res[blk_of_rec]
    m["uid"] = spe["uid"]
    m["ctx"] = ctx
    m["interval"] = rec_iv
    m["dmg"] = spe["dmg"]
    meta_v[rs] = _void(m)
    x = np.zeros(n_spe, layout.spe)
    x["code"] = spe["code"]
    x["a"] = spe["a"].astype(np.uint16)
    x["decr"] = rec_decr.astype(np.uint32)
    x["b"] = spe["b"]
    x["c"] = spe["c"]
    x["d"] = spe["d"]
    raw_v[rs] = _void(x)
    return Slots(meta, raw, layout, B, spe_buffers, n_slots)
