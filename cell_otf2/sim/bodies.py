"""Vectorized SPE phase bodies: ``dma_loop`` builds every record of one context's phase with numpy,
the double-buffered DMA / compute loop of the Cell SDK samples (its shape and timing:
docs/simulator.md). It does not know about mailboxes, scheduling or clocks; times are reference
ticks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..input import format as fmt
from .records import SPE, empty

W = fmt.WaitMode.ALL


@dataclass(frozen=True)
class LoopSpec:
    """Shape of one workload's loop (durations in microseconds)."""

    get_op: int | None  # MFC opcode of the prefetch, None for no GETs
    put_op: int | None
    chunk_bytes: int
    list_elems: tuple[int, int]  # (lo, hi) list elements for list opcodes
    compute_us: tuple[float, float]  # mean, relative spread
    get_lat_us: tuple[float, float]  # uniform range
    put_lat_us: tuple[float, float]
    flops_per_chunk: int
    compute_region: int


def _dma_fields(op: int, ea: np.ndarray, ls: np.ndarray, tag: np.ndarray, spec: LoopSpec,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(ea)
    if op & fmt.MFC_LIST_BIT:
        elems = rng.integers(spec.list_elems[0], spec.list_elems[1] + 1, size=n).astype(np.uint64)
        nbytes = elems * np.uint64(spec.chunk_bytes)
    else:
        elems = np.zeros(n, np.uint64)
        nbytes = np.full(n, spec.chunk_bytes, np.uint64)
    c = (ls.astype(np.uint64) << np.uint64(32)) | nbytes
    d = tag.astype(np.uint64) | (elems << np.uint64(8))
    return ea.astype(np.uint64), c, d


def dma_loop(
    rng: np.random.Generator,
    t0: float,
    n: int,
    spec: LoopSpec,
    ctx: int,
    ea_in: int,
    ea_out: int,
    tag_base: int,
    ticks_per_us: float,
) -> tuple[np.ndarray, float]:
    """All records of ``n`` loop iterations starting at ``t0``; returns (rows, t_end)."""
    us = ticks_per_us
    n = max(1, int(n))
    eps = rng.uniform(2.0, 6.0, size=n)
    gaps = rng.uniform(2.0, 8.0, size=(n, 4))  # wait_end->get, get->enter, leave->put, put->wait
    mean, spread = spec.compute_us
    comp = np.maximum(mean * us * (1.0 + spread * rng.uniform(-1.0, 1.0, size=n)), 12.0)
    has_get = spec.get_op is not None
    lat_get = rng.uniform(*spec.get_lat_us, size=n + 1) * us if has_get else np.zeros(n + 1)
    lat_get = np.maximum(lat_get, 1.0)
    g0 = rng.uniform(2.0, 8.0)
    # E[i] = END of iteration i's wait
    work = gaps[:, 0] + gaps[:, 1] + comp + gaps[:, 2] + gaps[:, 3]
    first_end = t0 + max(g0, lat_get[0]) + eps[0]
    step = np.maximum(work[:-1], gaps[:-1, 0] + lat_get[1:n]) + eps[1:]
    e = first_end + np.concatenate([[0.0], np.cumsum(step)])
    w_begin = np.empty(n)
    w_begin[0] = t0 + g0
    w_begin[1:] = e[:-1] + work[:-1]
    t_get = e + gaps[:, 0]
    t_enter = t_get + gaps[:, 1]
    t_leave = t_enter + comp
    t_counter = t_leave - np.minimum(comp * 0.1, 4.0)
    t_put = t_leave + gaps[:, 2]
    fw = t_put[-1] + gaps[-1, 3]
    tags = (tag_base + (np.arange(n) % 2)).astype(np.uint64)
    masks = np.uint64(1) << tags
    has_put = spec.put_op is not None
    lat_put = rng.uniform(*spec.put_lat_us, size=n) * us if has_put else np.zeros(n)
    lat_put = np.maximum(lat_put, 1.0)
    # completing wait of PUT(i): E[i+2], or the final wait for the last two
    fe = fw + rng.uniform(2.0, 6.0)
    if has_put:
        tail = t_put[-2:] + lat_put[-2:]
        fe = max(fe, float(tail.max()) + rng.uniform(2.0, 6.0))
    limit = np.full(n, fe)
    if n > 2:
        limit[: n - 2] = np.minimum(e[2:], t_get[1 : n - 1])  # also before buffer reuse
    put_done = np.minimum(t_put + lat_put, t_put + 0.5 * (limit - t_put))

    cols = 8  # per iteration: WB WE GET ENTER COUNTER LEAVE PUT (+1 spare)
    rows = empty(n * cols).reshape(n, cols)
    keep = np.ones((n, cols), bool)
    keep[:, 7] = False
    rows["core"] = SPE
    rows["actor"] = ctx
    rows["t"][:, 0] = w_begin
    rows["code"][:, 0] = fmt.SpeCode.TAG_WAIT_BEGIN
    rows["a"][:, 0] = int(W)
    rows["b"][:, 0] = masks
    rows["t"][:, 1] = e
    rows["code"][:, 1] = fmt.SpeCode.TAG_WAIT_END
    rows["b"][:, 1] = masks
    ls_base = np.uint64(0x10000)
    ls_of = lambda k: ls_base + (k % 2).astype(np.uint64) * np.uint64(0x8000)  # noqa: E731
    idx = np.arange(n)
    if spec.get_op is not None:
        nxt = idx + 1
        ea, c, d = _dma_fields(
            spec.get_op, np.uint64(ea_in) + nxt.astype(np.uint64) * np.uint64(spec.chunk_bytes),
            ls_of(nxt), (tag_base + nxt % 2).astype(np.uint64), spec, rng)
        rows["t"][:, 2] = t_get
        rows["code"][:, 2] = fmt.SpeCode.DMA
        rows["a"][:, 2] = spec.get_op
        rows["b"][:, 2] = ea
        rows["c"][:, 2] = c
        rows["d"][:, 2] = d
        rows["done"][:, 2] = t_get + lat_get[1:]
        keep[n - 1, 2] = False
    else:
        keep[:, 2] = False
    rows["t"][:, 3] = t_enter
    rows["code"][:, 3] = fmt.SpeCode.ENTER
    rows["a"][:, 3] = spec.compute_region
    rows["t"][:, 4] = t_counter
    rows["code"][:, 4] = fmt.SpeCode.COUNTER
    rows["a"][:, 4] = 1
    rows["b"][:, 4] = spec.flops_per_chunk
    rows["t"][:, 5] = t_leave
    rows["code"][:, 5] = fmt.SpeCode.LEAVE
    rows["a"][:, 5] = spec.compute_region
    if spec.put_op is not None:
        ea, c, d = _dma_fields(
            spec.put_op, np.uint64(ea_out) + idx.astype(np.uint64) * np.uint64(spec.chunk_bytes),
            ls_of(idx), tags, spec, rng)
        rows["t"][:, 6] = t_put
        rows["code"][:, 6] = fmt.SpeCode.DMA
        rows["a"][:, 6] = spec.put_op
        rows["b"][:, 6] = ea
        rows["c"][:, 6] = c
        rows["d"][:, 6] = d
        rows["done"][:, 6] = put_done
    else:
        keep[:, 6] = False
    body = rows[keep]
    # the prefetch of chunk 0 before the loop, and the final wait for both tags
    pre = empty(1)
    if spec.get_op is not None:
        ea, c, d = _dma_fields(spec.get_op, np.array([ea_in], np.uint64),
                               np.array([0x10000], np.uint64), np.array([tag_base], np.uint64),
                               spec, rng)
        pre["t"] = t0
        pre["code"] = fmt.SpeCode.DMA
        pre["a"] = spec.get_op
        pre["b"], pre["c"], pre["d"] = ea, c, d
        pre["done"] = t0 + lat_get[0]
    post = empty(2)
    both = np.uint64((1 << tag_base) | (1 << (tag_base + 1)))
    post["t"] = [fw, fe]
    post["code"] = [fmt.SpeCode.TAG_WAIT_BEGIN, fmt.SpeCode.TAG_WAIT_END]
    post["a"][0] = int(W)
    post["b"] = both
    parts = ([pre] if has_get else []) + [body, post]
    out = np.concatenate(parts)
    out["core"] = SPE
    out["actor"] = ctx
    return out, float(fe)
