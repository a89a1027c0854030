"""How long after its MPI call's entry each receive was recorded (``receive_entry_ticks``). A
receive is recorded once the message is complete, inside the MPI call that completed it
(``MPI_Recv``, or the wait or test of a non-blocking receive): recorded as the call began, the
message had arrived before it, and its record says when the receiver looked, not when the
message came; recorded later, the call waited for it. Read from the ENTER and LEAVE records of
the manifest's MPI regions on the receive's own thread. It pairs no message and judges no
lateness (the node fit does)."""

from __future__ import annotations

import numpy as np

from ..input import format as fmt
from ..input.manifest import Core, RegionKind
from ..model import Decoded

#: the records whose entry gap is measured
RECEIVE_CODES = (int(fmt.PpeCode.MPI_RECV), int(fmt.PpeCode.MPI_IRECV))
_ENTER = int(fmt.PpeCode.ENTER)


def receive_entry_ticks(dec: Decoded, sel: np.ndarray | None = None) -> np.ndarray:
    """Per record of ``dec``, or per index of ``sel`` into its records (ascending): for an
    MPI_RECV or MPI_IRECV record whose location's last ENTER or LEAVE of an MPI region
    before it is an ENTER (the receive lies inside that call), the timebase ticks from that
    ENTER to the receive; NaN for every other record. The records of each code come from
    ``dec.code_index`` (no pass over the whole table)."""
    records = dec.records
    by_code, start = dec.code_index()

    def of(*codes: int) -> np.ndarray:
        return np.sort(np.concatenate([by_code[start[c]:start[c + 1]] for c in codes]
                                      ).astype(np.int64))

    out = np.full(records.size if sel is None else sel.size, np.nan)
    recv = of(*RECEIVE_CODES)
    mpi_ids = np.array([r.id for r in dec.manifest.regions
                        if r.kind == RegionKind.mpi and r.core == Core.ppe], np.uint64)
    if recv.size == 0 or mpi_ids.size == 0:
        return out
    marks = of(_ENTER, int(fmt.PpeCode.LEAVE))
    marks = marks[np.isin(records["a"][marks] & np.uint64(0xFFFFFFFF), mpi_ids)]
    if marks.size == 0:  # no MPI call's ENTER or LEAVE (a tracer that records none)
        return out
    j = np.searchsorted(marks, recv) - 1
    m = marks[np.maximum(j, 0)]
    domain = records["domain"][m]
    inside = ((j >= 0) & (records["code"][m] == _ENTER) & (domain >= 0)
              & (records["loc"][m] == records["loc"][recv])
              & (domain == records["domain"][recv]))
    recv, m = recv[inside], m[inside]
    gap = (records["local"][recv] - records["local"][m]).astype(np.float64)
    if sel is None:
        out[recv] = gap
        return out
    pos = np.searchsorted(sel, recv)  # the receives among ``sel``
    hit = pos < sel.size
    hit[hit] = sel[pos[hit]] == recv[hit]
    out[pos[hit]] = gap[hit]
    return out
