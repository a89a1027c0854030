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
from ..input.manifest import Core, Manifest, RegionKind

#: the records whose entry gap is measured
RECEIVE_CODES = np.array([fmt.PpeCode.MPI_RECV, fmt.PpeCode.MPI_IRECV], np.uint16)
_ENTER, _LEAVE = int(fmt.PpeCode.ENTER), int(fmt.PpeCode.LEAVE)


def receive_entry_ticks(records: np.ndarray, manifest: Manifest,
                        sel: np.ndarray | None = None) -> np.ndarray:
    """Per record of ``records`` (RECORD_DTYPE, in (location, slot) order), or per index of
    ``sel`` into them: for an MPI_RECV or MPI_IRECV record whose location's last ENTER or
    LEAVE of an MPI region before it is an ENTER (the receive lies inside that call), the
    timebase ticks from that ENTER to the receive; NaN for every other record."""
    idx = np.arange(records.size) if sel is None else np.asarray(sel, dtype=np.int64)
    out = np.full(idx.size, np.nan)
    code = np.ascontiguousarray(records["code"])  # one pass over the wide records
    at = np.flatnonzero(np.isin(code[idx], RECEIVE_CODES))
    mpi_ids = np.array([r.id for r in manifest.regions
                        if r.kind == RegionKind.mpi and r.core == Core.ppe], np.uint64)
    if at.size == 0 or mpi_ids.size == 0:
        return out
    recv = idx[at]
    edge = (code == _ENTER) | (code == _LEAVE)
    edge[edge] = np.isin(records["a"][edge] & np.uint64(0xFFFFFFFF), mpi_ids)
    marks = np.flatnonzero(edge)
    if marks.size == 0:
        return out
    j = np.searchsorted(marks, recv) - 1
    m = marks[np.maximum(j, 0)]
    domain = records["domain"][m]
    inside = ((j >= 0) & (code[m] == _ENTER) & (domain >= 0)
              & (records["loc"][m] == records["loc"][recv])
              & (domain == records["domain"][recv]))
    gap = (records["local"][recv] - records["local"][m]).astype(np.float64)
    out[at[inside]] = gap[inside]
    return out
