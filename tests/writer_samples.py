"""A hand-built archive for the writer's tests: two MPI processes on two nodes; rank 0 has a PPE
thread, an SPE context in an accelerator group created by the process, and a main-memory
pseudo-location; an MPI communicator over the two main threads, a mailbox communicator over
all four locations, a DMA window on the mailbox communicator. Every Ev kind occurs at least
once (``sample_defs``, ``sample_events``).
"""

from __future__ import annotations

import numpy as np

from cell_otf2.model import (
    EVENT_DTYPE,
    ArchiveDefs,
    ClockProps,
    Communicator,
    Ev,
    GroupType,
    Location,
    LocationGroup,
    LocationProperty,
    LocationType,
    Metric,
    Paradigm,
    Region,
    RegionRole,
    RmaWindow,
    SystemNode,
    SystemNodeDomain,
)

CLOCK = ClockProps(
    timer_resolution=14_318_000, global_offset=100, trace_length=300,
    realtime_ns=1_600_000_000_123_456_789,
)
PPE0, PPE1, SPE, MEM = range(4)  # location refs
LOC_NAMES = [
    "PPE thread 0 (rank 0)", "PPE thread 0 (rank 1)", "SPE ctx 0 (rank 0)",
    "Main memory (rank 0)",
]
REGIONS = [
    Region("main", RegionRole.FUNCTION),
    Region("MPI_Send", RegionRole.POINT2POINT, Paradigm.MPI),
    Region("MPI_Recv", RegionRole.POINT2POINT, Paradigm.MPI),
    Region("MPI_Allreduce", RegionRole.COLL_ALL2ALL, Paradigm.MPI),
    Region("fft_spu", RegionRole.FUNCTION, Paradigm.CELL),
    Region("mfc_read_tag_status", RegionRole.RMA, Paradigm.CELL),
    Region("off SPU", RegionRole.FUNCTION, Paradigm.CELL),
    Region("spe_in_mbox_write", RegionRole.FUNCTION, Paradigm.CELL),
    Region("spu_read_in_mbox", RegionRole.FUNCTION, Paradigm.CELL),
    Region("MPI_Isend", RegionRole.POINT2POINT, Paradigm.MPI),
    Region("MPI_Irecv", RegionRole.POINT2POINT, Paradigm.MPI),
    Region("MPI_Wait", RegionRole.POINT2POINT, Paradigm.MPI),
]
R = {r.name: i for i, r in enumerate(REGIONS)}
WORLD, MBOX = 0, 1  # communicator refs
ALLREDUCE = 11  # OTF2 CollectiveOp value
GET_P4 = 5 | 0x40 << 8  # tag 5, MFC opcode GET (0x40), no list
PUT_P4 = 6 | 0x24 << 8 | 3 << 16  # tag 6, opcode PUTL (0x24), 3 list elements


def sample_defs() -> ArchiveDefs:
    return ArchiveDefs(
        clock=ClockProps(**vars(CLOCK)),
        creator="cell2otf2 0.1.0 (test)",
        system_nodes=[
            SystemNode("Cell cluster", "machine", None, SystemNodeDomain.MACHINE),
            SystemNode("qs20-a", "node", 0, SystemNodeDomain.SHARED_MEMORY),
            SystemNode("qs20-b", "node", 0, SystemNodeDomain.SHARED_MEMORY),
            SystemNode("SPE complex (qs20-a)", "spe complex", 1,
                       SystemNodeDomain.ACCELERATOR_DEVICE),
        ],
        location_groups=[
            LocationGroup("MPI rank 0", GroupType.PROCESS, 1),
            LocationGroup("MPI rank 1", GroupType.PROCESS, 2),
            LocationGroup("SPEs (rank 0)", GroupType.ACCELERATOR, 3, creating_group=0),
        ],
        locations=[
            Location(LOC_NAMES[PPE0], LocationType.CPU_THREAD, 0),
            Location(LOC_NAMES[PPE1], LocationType.CPU_THREAD, 1),
            Location(LOC_NAMES[SPE], LocationType.ACCELERATOR_STREAM, 2),
            Location(LOC_NAMES[MEM], LocationType.CPU_THREAD, 0),
        ],
        regions=list(REGIONS),
        metrics=[Metric("PPE cycles", "cycles")],
        communicators=[
            Communicator("MPI_COMM_WORLD", (PPE0, PPE1), Paradigm.MPI),
            Communicator("Cell mailboxes", (PPE0, PPE1, SPE, MEM), Paradigm.CELL),
        ],
        rma_windows=[RmaWindow("DMA (rank 0)", MBOX)],
        location_properties=[
            LocationProperty(MEM, "cell2otf2::main_memory", "true"),
            LocationProperty(SPE, "cell2otf2::sync_bound_ticks", "12"),
        ],
    )


def _rows() -> list[tuple]:
    E = Ev
    return [
        # (loc, type, ref, time, p1, p2, p3, p4, p5, p6)
        (PPE0, E.PROGRAM_BEGIN, 0, 100),
        (PPE0, E.ENTER, R["main"], 100),
        (PPE0, E.METRIC, 0, 110, 12345),
        (PPE0, E.ENTER, R["spe_in_mbox_write"], 120),
        (PPE0, E.MPI_SEND, MBOX, 125, SPE, 1, 4),  # mailbox: receiver rank = location ref
        (PPE0, E.LEAVE, R["spe_in_mbox_write"], 130),
        (PPE0, E.ENTER, R["MPI_Send"], 200),
        (PPE0, E.MPI_SEND, WORLD, 205, 1, 42, 1024),
        (PPE0, E.LEAVE, R["MPI_Send"], 210),
        (PPE0, E.ENTER, R["MPI_Isend"], 220),
        (PPE0, E.MPI_ISEND, WORLD, 221, 1, 43, 8, 7),
        (PPE0, E.LEAVE, R["MPI_Isend"], 222),
        (PPE0, E.ENTER, R["MPI_Wait"], 230),
        (PPE0, E.MPI_ISEND_COMPLETE, 0, 231, 0, 0, 0, 7),
        (PPE0, E.LEAVE, R["MPI_Wait"], 232),
        (PPE0, E.ENTER, R["MPI_Allreduce"], 300),
        (PPE0, E.MPI_COLL_BEGIN, 0, 301),
        (PPE0, E.MPI_COLL_END, WORLD, 310, ALLREDUCE, 0xFFFFFFFF, 8, 16),
        (PPE0, E.LEAVE, R["MPI_Allreduce"], 311),
        (PPE0, E.LEAVE, R["main"], 400),
        (PPE0, E.PROGRAM_END, 0, 400),
        (PPE1, E.ENTER, R["main"], 100),
        (PPE1, E.ENTER, R["MPI_Recv"], 200),
        (PPE1, E.MPI_RECV, WORLD, 215, 0, 42, 1024),
        (PPE1, E.LEAVE, R["MPI_Recv"], 216),
        (PPE1, E.ENTER, R["MPI_Irecv"], 217),
        (PPE1, E.MPI_IRECV_REQUEST, 0, 218, 0, 0, 0, 9),
        (PPE1, E.LEAVE, R["MPI_Irecv"], 219),
        (PPE1, E.ENTER, R["MPI_Wait"], 225),
        (PPE1, E.MPI_IRECV, WORLD, 226, 0, 43, 8, 9),
        (PPE1, E.LEAVE, R["MPI_Wait"], 227),
        (PPE1, E.ENTER, R["MPI_Allreduce"], 300),
        (PPE1, E.MPI_COLL_BEGIN, 0, 302),
        (PPE1, E.MPI_COLL_END, WORLD, 312, ALLREDUCE, 0xFFFFFFFF, 8, 16),
        (PPE1, E.LEAVE, R["MPI_Allreduce"], 313),
        (PPE1, E.LEAVE, R["main"], 400),
        (SPE, E.RMA_WIN_CREATE, 0, 140),  # the DMA window, where it is used (Score-P's way)
        (SPE, E.ENTER, R["fft_spu"], 140),
        (SPE, E.ENTER, R["spu_read_in_mbox"], 150),
        (SPE, E.MPI_RECV, MBOX, 160, PPE0, 1, 4),
        (SPE, E.LEAVE, R["spu_read_in_mbox"], 161),
        (SPE, E.RMA_GET, 0, 170, MEM, 16384, 1, GET_P4, 0x10000000, 0x4000),
        (SPE, E.RMA_PUT, 0, 175, MEM, 128, 2, PUT_P4, 0x20000, 0x8000),
        (SPE, E.ENTER, R["mfc_read_tag_status"], 180),
        (SPE, E.RMA_OP_COMPLETE_BLOCKING, 0, 190, 0, 0, 1),
        (SPE, E.RMA_OP_COMPLETE_BLOCKING, 0, 190, 0, 0, 2),
        (SPE, E.LEAVE, R["mfc_read_tag_status"], 191),
        (SPE, E.ENTER_OFF_SPU, R["off SPU"], 250, 3),
        (SPE, E.LEAVE, R["off SPU"], 260),
        (SPE, E.ENTER, R["fft_spu"], 265),  # an Enter right after the off-SPU one: no attribute
        (SPE, E.LEAVE, R["fft_spu"], 270),
        (SPE, E.LEAVE, R["fft_spu"], 280),
        (SPE, E.RMA_WIN_DESTROY, 0, 280),
    ]


def sample_events() -> np.ndarray:
    rows = _rows()
    events = np.zeros(len(rows), EVENT_DTYPE)
    for i, (loc, ty, ref, t, *params) in enumerate(rows):
        events[i]["loc"], events[i]["type"], events[i]["ref"] = loc, ty, ref
        events[i]["time"], events[i]["seq"] = t, i
        for k, value in enumerate(params, start=1):
            events[i][f"p{k}"] = value
    return events
