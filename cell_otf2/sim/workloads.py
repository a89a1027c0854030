"""Workload shapes (Cell SDK benchmark-like) and the manifest ids they use: a ``Workload`` fixes the
SPE loop (``bodies.LoopSpec``), chunks per phase, the values the PPE writes into each inbound
mailbox at a release and which extras run (PPE signals, SPE-to-SPE DMA and SNDSIG, MPI), or marks
the iteration-synchronous ``cluster`` program (``cluster.py``). This module holds data only."""

from __future__ import annotations

from dataclasses import dataclass

from ..input import format as fmt
from .bodies import LoopSpec

# manifest ids (one table for every workload)
R_MAIN, R_SPE_RUN, R_SPE_MAIN, R_COMPUTE = 1, 2, 10, 11
R_MPI = {"send": 20, "recv": 21, "isend": 22, "irecv": 23, "waitall": 24,
         "allreduce": 25, "barrier": 26, "bcast": 27, "reduce": 28, "alltoall": 29}
REGIONS = [
    {"id": R_MAIN, "name": "main", "core": "ppe", "kind": "function"},
    {"id": R_SPE_RUN, "name": "spe_context_run", "core": "ppe", "kind": "spe_runtime"},
    {"id": R_SPE_MAIN, "name": "spu_main", "core": "spe", "kind": "function"},
    {"id": R_COMPUTE, "name": "compute_chunk", "core": "spe", "kind": "user"},
] + [
    {"id": rid, "name": "MPI_" + name.capitalize() if name != "waitall" else "MPI_Waitall",
     "core": "ppe", "kind": "mpi"}
    for name, rid in R_MPI.items()
]
C_FLOPS, C_DMA_BYTES, C_PHASE = 1, 2, 3
COUNTERS = [
    {"id": C_FLOPS, "name": "flops", "unit": "flop", "core": "spe"},
    {"id": C_DMA_BYTES, "name": "dma_bytes", "unit": "bytes", "core": "spe"},
    {"id": C_PHASE, "name": "phase", "unit": "1", "core": "ppe"},
]
PROGRAM_ID = 1


@dataclass(frozen=True)
class Workload:
    name: str
    loop: LoopSpec
    chunks: int
    release_values: int
    ppe_signals: bool
    spe_to_spe: bool
    mpi: bool
    default_phases: int
    default_spes: int
    #: iterations of the cluster program (``cluster.py``) instead of mailbox-barrier phases
    cluster: bool = False


def _loop(get_op, put_op, nbytes, elems, compute, get_lat, put_lat, flops):
    return LoopSpec(get_op, put_op, nbytes, elems, compute, get_lat, put_lat, flops, R_COMPUTE)


M = fmt.MfcOpcode
WORKLOADS: dict[str, Workload] = {
    "fft": Workload("fft", _loop(M.GET, M.PUT, 16384, (0, 0), (20.0, 0.2), (1.0, 3.0),
                                 (1.0, 3.0), 81920), 32, 6, True, False, False, 8, 16),
    "matmul": Workload("matmul", _loop(M.GETL, M.PUTL, 4096, (4, 16), (8.0, 0.3), (20.0, 40.0),
                                       (5.0, 15.0), 131072), 64, 2, False, False, False, 6, 8),
    "blackscholes": Workload("blackscholes", _loop(M.GET, M.PUT, 16384, (0, 0),
                                                   (1.2e8, 0.4), (2.0, 4.0), (2.0, 4.0),
                                                   10**11), 4, 2, False, False, False, 4, 8),
    "julia": Workload("julia", _loop(None, M.PUTF, 16384, (0, 0), (200.0, 0.3), (1.0, 1.0),
                                     (2.0, 5.0), 4 * 10**6), 16, 2, False, True, False, 6, 8),
    "hybrid": Workload("hybrid", _loop(M.GET, M.PUT, 16384, (0, 0), (20.0, 0.2), (1.0, 3.0),
                                       (1.0, 3.0), 81920), 16, 2, False, False, True, 6, 4),
    # compute_us is set from --exchange-s; one DMA-get / compute / DMA-put round by default
    "cluster": Workload("cluster", _loop(M.GET, M.PUT, 16384, (0, 0), (2e6, 0.0), (1.0, 3.0),
                                         (1.0, 3.0), 81920), 1, 1, False, False, True, 16, 2,
                        cluster=True),
}


def phase_estimate_us(w: Workload, chunks: int) -> float:
    """Rough length of one phase in microseconds (to turn --duration-s into phases)."""
    lp = w.loop
    per_chunk = max(lp.compute_us[0], lp.get_lat_us[1]) + 2.0
    return chunks * per_chunk + 50.0
