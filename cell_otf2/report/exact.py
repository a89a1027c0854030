"""Numbers over every event of the archive (``load.Exact``), never over the drawn sample.
``category_ticks`` is each location's exclusive time per ``derive.Cat``; ``transfers`` pairs
every DMA issue with its completion (RmaGet/RmaPut with RmaOpCompleteBlocking, or a send on the
"DMA" communicator with its receive); ``mpi_messages`` pairs every MPI send with its receive.
Pairing is by the (channel, sequence) keys ``load`` assigns; numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .derive import SHOWN_CATS, Cat, region_category
from .load import Columns, CommClass, Exact, K, Loaded, LocClass, Log


@dataclass
class Xfer(Columns):
    """DMA commands, one array per column: data from ``src`` to ``dst`` (location refs, int32),
    issued at ``t_issue`` by ``issuer``, completed at ``t_done`` (-1 never), ``bytes`` (int64
    ticks and bytes); ``xfer["src"]`` reads a column."""

    issuer: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    t_issue: np.ndarray
    t_done: np.ndarray
    bytes: np.ndarray


#: one MPI point-to-point message
MESSAGE = np.dtype([("src", "<i4"), ("dst", "<i4"), ("t_send", "<i8"), ("t_recv", "<i8"),
                    ("bytes", "<i8")])


def exact_of(loaded: Loaded) -> Exact:
    """The archive's exact sums and log; ``load`` always fills them in (the field has a
    default only because it follows fields without one)."""
    assert loaded.exact is not None, "a Loaded from load() has its exact part"
    return loaded.exact


def category_ticks(loaded: Loaded) -> np.ndarray:
    """(n_locs, len(Cat)) exclusive ticks per category over the whole run (NOT_RUNNING 0)."""
    cat = region_category(loaded)
    ex = exact_of(loaded).exclusive[:, : cat.size]
    out = np.zeros((loaded.n_locs, len(Cat)))
    for c in SHOWN_CATS:
        out[:, c] = ex[:, cat == c].sum(axis=1)
    return out


def _pair(log: Log, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each row index in ``a``, the index in ``b``'s rows with the same (chan, seq), -1.
    A (chan, seq) key occurs at most once per side (``load`` numbers each side apart): when
    ``b``'s sequence numbers of each channel are 0, 1, ... (``load`` numbers every event of
    a channel), a key's place is its channel's start plus its sequence number, no sort."""
    out = np.full(a.size, -1, np.int64)
    if a.size == 0 or b.size == 0:
        return out
    chan, seq = log["chan"], log["seq"]
    ca, sa, cb, sb = chan[a], seq[a], chan[b], seq[b]
    if min(int(ca.min()), int(cb.min()), int(sa.min()), int(sb.min())) >= 0:
        n_chan = int(max(ca.max(), cb.max())) + 1
        count = np.bincount(cb, minlength=n_chan)
        if (sb < count[cb]).all():
            start = np.cumsum(count) - count
            place = np.full(b.size, -1, np.int64)
            place[start[cb] + sb] = b
            ok = np.flatnonzero(sa < count[ca])
            out[ok] = place[start[ca[ok]] + sa[ok]]
            return out
    m = int(max(sa.max(), sb.max())) + 1
    ka = ca * m + sa
    kb = cb * m + sb
    order = np.argsort(kb)
    kb = kb[order]
    at = np.minimum(np.searchsorted(kb, ka), kb.size - 1)
    hit = kb[at] == ka
    out[hit] = b[order[at[hit]]]
    return out


def transfers(loaded: Loaded) -> Xfer:
    """One row per DMA command of the archive (t_done -1 when never completed). Worked out
    once per ``Loaded`` (kept in its ``extra``: three figures and the table use it); the
    columns are shared, not to be changed."""
    cached = loaded.extra.get("transfers")
    if cached is not None:
        return cached
    log = exact_of(loaded).log
    kind, time, loc_of = log["kind"], log["time"], log["loc"]
    issue = np.flatnonzero((kind == K.GET) | (kind == K.PUT))
    done = _pair(log, issue, np.flatnonzero(kind == K.RMA_DONE))
    get = kind[issue] == K.GET
    loc, partner = loc_of[issue], log["partner"][issue]
    rma = Xfer(issuer=loc, src=np.where(get, partner, loc), dst=np.where(get, loc, partner),
               t_issue=time[issue], t_done=np.where(done >= 0, time[np.maximum(done, 0)], -1),
               bytes=log["bytes"][issue])
    dma = np.flatnonzero(loaded.comm_class == CommClass.DMA)
    msgs = np.flatnonzero((kind == K.SEND) | (kind == K.RECV))
    on_dma = msgs[np.isin(log["ref"][msgs], dma)] if dma.size else msgs[:0]
    send = on_dma[kind[on_dma] == K.SEND]
    out = rma
    if send.size:
        recv = _pair(log, send, on_dma[kind[on_dma] == K.RECV])
        src = loc_of[send]
        dst = np.where(recv >= 0, loc_of[np.maximum(recv, 0)], log["partner"][send])
        # the SPE that issued the command: the receiver of a get, the sender of a put
        spe_dst = loaded.loc_class[np.maximum(dst, 0)] == LocClass.SPE
        msg = Xfer(issuer=np.where(spe_dst & (dst >= 0), dst, src), src=src, dst=dst,
                   t_issue=time[send], t_done=np.where(recv >= 0, time[np.maximum(recv, 0)], -1),
                   bytes=log["bytes"][send])
        out = Xfer(**{f.name: np.concatenate([rma[f.name], msg[f.name]])
                      for f in fields(Xfer)})
    loaded.extra["transfers"] = out
    return out


def latency_ticks(xfer: Xfer) -> np.ndarray:
    """Issue to completion of the completed commands, in ticks."""
    done = xfer["t_done"] >= 0
    return (xfer["t_done"][done] - xfer["t_issue"][done]).astype(np.float64)


def mpi_messages(loaded: Loaded) -> np.ndarray:
    """MESSAGE rows, one per MPI send paired with its receive (in send order)."""
    log = exact_of(loaded).log
    mpi = np.flatnonzero(loaded.comm_class == CommClass.MPI)
    kind = log["kind"]
    msgs = np.flatnonzero((kind == K.SEND) | (kind == K.RECV))
    on_mpi = msgs[np.isin(log["ref"][msgs], mpi)]
    send = on_mpi[kind[on_mpi] == K.SEND]
    recv = _pair(log, send, on_mpi[kind[on_mpi] == K.RECV])
    send, recv = send[recv >= 0], recv[recv >= 0]
    out = np.zeros(send.size, MESSAGE)
    out["src"], out["t_send"] = log["loc"][send], log["time"][send]
    out["dst"], out["t_recv"] = log["loc"][recv], log["time"][recv]
    out["bytes"] = log["bytes"][send]
    return out
