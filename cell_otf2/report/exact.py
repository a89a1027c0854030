"""Numbers over every event of the archive (``load.Exact``), never over the drawn sample.
``category_ticks`` is each location's exclusive time per ``derive.Cat``; ``transfers`` pairs
every DMA issue with its completion (RmaGet/RmaPut with RmaOpCompleteBlocking, or a send on the
"DMA" communicator with its receive); ``mpi_messages`` pairs every MPI send with its receive.
Pairing is by the (channel, sequence) keys ``load`` assigns; numpy only.
"""

from __future__ import annotations

import numpy as np

from .derive import SHOWN_CATS, Cat, region_category
from .load import CommClass, K, Loaded, LocClass

#: one DMA command: data from src to dst, issued at t_issue by issuer, completed at t_done
XFER = np.dtype([("issuer", "<i4"), ("src", "<i4"), ("dst", "<i4"), ("t_issue", "<i8"),
                 ("t_done", "<i8"), ("bytes", "<i8")])
#: one MPI point-to-point message
MESSAGE = np.dtype([("src", "<i4"), ("dst", "<i4"), ("t_send", "<i8"), ("t_recv", "<i8"),
                    ("bytes", "<i8")])


def category_ticks(loaded: Loaded) -> np.ndarray:
    """(n_locs, len(Cat)) exclusive ticks per category over the whole run (NOT_RUNNING 0)."""
    cat = region_category(loaded)
    ex = loaded.exact.exclusive[:, : cat.size]
    out = np.zeros((loaded.n_locs, len(Cat)))
    for c in SHOWN_CATS:
        out[:, c] = ex[:, cat == c].sum(axis=1)
    return out


def _pair(log: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For each row index in ``a``, the index in ``b``'s rows with the same (chan, seq), -1."""
    out = np.full(a.size, -1, np.int64)
    if a.size == 0 or b.size == 0:
        return out
    m = int(max(log["seq"][a].max(), log["seq"][b].max())) + 1
    ka = log["chan"][a] * m + log["seq"][a]
    kb = log["chan"][b] * m + log["seq"][b]
    _, ia, ib = np.intersect1d(ka, kb, assume_unique=True, return_indices=True)
    out[ia] = b[ib]
    return out


def transfers(loaded: Loaded) -> np.ndarray:
    """XFER rows, one per DMA command of the archive (t_done -1 when never completed)."""
    log = loaded.exact.log
    kind = log["kind"]
    issue = np.flatnonzero((kind == K.GET) | (kind == K.PUT))
    done = _pair(log, issue, np.flatnonzero(kind == K.RMA_DONE))
    get = kind[issue] == K.GET
    rma = np.zeros(issue.size, XFER)
    rma["issuer"] = log["loc"][issue]
    rma["src"] = np.where(get, log["partner"][issue], log["loc"][issue])
    rma["dst"] = np.where(get, log["loc"][issue], log["partner"][issue])
    rma["t_issue"], rma["bytes"] = log["time"][issue], log["bytes"][issue]
    rma["t_done"] = np.where(done >= 0, log["time"][np.maximum(done, 0)], -1)
    dma = np.flatnonzero(loaded.comm_class == CommClass.DMA)
    on_dma = np.isin(log["ref"], dma)
    send = np.flatnonzero((kind == K.SEND) & on_dma)
    recv = _pair(log, send, np.flatnonzero((kind == K.RECV) & on_dma))
    msg = np.zeros(send.size, XFER)
    msg["src"], msg["t_issue"] = log["loc"][send], log["time"][send]
    msg["dst"] = np.where(recv >= 0, log["loc"][np.maximum(recv, 0)], log["partner"][send])
    msg["t_done"] = np.where(recv >= 0, log["time"][np.maximum(recv, 0)], -1)
    msg["bytes"] = log["bytes"][send]
    # the SPE that issued the command: the receiver of a get, the sender of a put
    spe_dst = loaded.loc_class[np.maximum(msg["dst"], 0)] == LocClass.SPE
    msg["issuer"] = np.where(spe_dst & (msg["dst"] >= 0), msg["dst"], msg["src"])
    return np.concatenate([rma, msg])


def latency_ticks(xfer: np.ndarray) -> np.ndarray:
    """Issue to completion of the completed commands, in ticks."""
    done = xfer["t_done"] >= 0
    return (xfer["t_done"][done] - xfer["t_issue"][done]).astype(np.float64)


def mpi_messages(loaded: Loaded) -> np.ndarray:
    """MESSAGE rows, one per MPI send paired with its receive (in send order)."""
    log = loaded.exact.log
    mpi = np.flatnonzero(loaded.comm_class == CommClass.MPI)
    on_mpi = np.isin(log["ref"], mpi)
    send = np.flatnonzero((log["kind"] == K.SEND) & on_mpi)
    recv = _pair(log, send, np.flatnonzero((log["kind"] == K.RECV) & on_mpi))
    send, recv = send[recv >= 0], recv[recv >= 0]
    out = np.zeros(send.size, MESSAGE)
    out["src"], out["t_send"] = log["loc"][send], log["time"][send]
    out["dst"], out["t_recv"] = log["loc"][recv], log["time"][recv]
    out["bytes"] = log["bytes"][send]
    return out
