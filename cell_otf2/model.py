"""Every type two stages share, in one place: the numpy structured dtypes and small dataclasses
of the decoded trace (records, slot-order anchors, clock domains and links: ``Decoded``,
``RunLayout``), of the pairs (``Matches`` and its message, DMA and pair dtypes), of the
constraints (``OrderOptions``, ``Constraints``), of the synchronization (``SyncSolution``,
``NodeMap``, ``SyncResult``), of what a run's stages produced together (``Pipeline``), and of
the archive to write (``ArchiveDefs``, ``EVENT_DTYPE``, ``DmaStyle``); never a Python object
per event. It knows neither bytes nor OTF2, computes nothing and checks nothing: the stages
that fill these shapes are their own modules."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from .damage import DamageLog
from .input.manifest import Manifest
from .native.record_loops import group_u16

# --------------------------------------------------------------------------------------------
# 1. Decoded trace
# --------------------------------------------------------------------------------------------

#: one usable input record, PPE or SPE, in per-location program order
RECORD_DTYPE = np.dtype(
    [
        ("loc", "<u4"),  # index into the location table
        ("code", "<u2"),  # CBT 1 slot code (PpeCode or SpeCode)
        ("slot", "<i8"),  # slot index in its process's dump (for messages and tie-breaks)
        ("domain", "<i4"),  # clock domain index, -1 if the record has no usable time
        ("local", "<i8"),  # local clock: PPE raw timebase; SPE -unwrapped(decr) in its interval
        ("a", "<u8"),
        ("b", "<u8"),
        ("c", "<u8"),
        ("d", "<u8"),
        ("anchor", "<i8"),  # index into the anchor table of its slot-order position: a PPE
        #                     record's own reading, an SPE record's block header
        ("time", "<i8"),  # reference ticks, filled after synchronization
    ]
)


def dtype_fields(dtype: np.dtype) -> MappingProxyType[str, tuple[Any, ...]]:
    """The fields of a structured dtype (numpy's ``dtype.fields``, typed as possibly None for
    a plain dtype, which every caller here rules out)."""
    fields = dtype.fields
    if fields is None:
        raise TypeError(f"{dtype} is not a structured dtype")
    return fields


#: an SPE record as the reader writes it straight into its row of ``RECORD_DTYPE`` (a view of
#: the record table): its own fields in place, its decrementer in the low bytes of ``local``
#: and its block's index in ``anchor``, until decoding writes those two
#: (numpy's stub types this dict form as a TypedDict that a literal of mixed lists does not
#: match: hence the ignore)
SPE_IN_RECORD_DTYPE = np.dtype({  # type: ignore[call-overload]
    "names": ["slot", "block", "code", "a", "decr", "b", "c", "d"],
    "formats": ["<i8", "<i8", "<u2", "<u8", "=u4", "<u8", "<u8", "<u8"],
    "offsets": [dtype_fields(RECORD_DTYPE)[f][1] for f in
                ("slot", "anchor", "code", "a", "local", "b", "c", "d")],
    "itemsize": RECORD_DTYPE.itemsize,
})


class CounterUse(NamedTuple):
    """A manifest counter some written record samples, and the PPE thread location that
    sampled it (-1: an SPE's sample). Hashable, so the shares' sets unite as they are."""

    counter: int
    ppe_thread: int


class LocKind(IntEnum):
    PPE_THREAD = 0
    SPE_CONTEXT = 1
    MAIN_MEMORY = 2


#: one OTF2 location of the converted run; its index is its location ref
LOCATION_DTYPE = np.dtype(
    [
        ("rank", "<i4"),
        ("kind", "u1"),  # LocKind
        ("index", "<i4"),  # PPE thread index or SPE context id; 0 for main memory
    ]
)

#: one SPE context of one process
CONTEXT_DTYPE = np.dtype(
    [
        ("rank", "<i4"),
        ("ctx", "<i4"),
        ("loc", "<i4"),
        ("created", "?"),  # a CTX_CREATE record defined it
        ("ls_ea", "<u8"),  # EA of its Local Store mapping (0 if unknown)
        ("ps_ea", "<u8"),  # EA of its problem-state area (0 if unmapped or unknown)
        ("program", "<i8"),  # program id of its CTX_LOAD, -1 if none
    ]
)

#: one entry of a process's slot-order stream: every PPE record and every SPE block header
ANCHOR_DTYPE = np.dtype(
    [
        ("rank", "<u4"),
        ("slot", "<i8"),  # slot index in the dump; slot order = reservation order
        ("domain", "<i4"),  # clock domain of the reading taken after the reservation
        ("local", "<i8"),  # that reading on the domain's local clock
    ]
)


class DomainKind(IntEnum):
    NODE = 0  # one node's timebase, shared by every PPE thread of every process on it
    SPE_INTERVAL = 1  # one live interval of one SPE context


#: one clock domain. Node domains come first: domain i < n_nodes is node i.
DOMAIN_DTYPE = np.dtype(
    [
        ("kind", "u1"),
        ("node", "<i4"),  # node index (for an interval: the node its process runs on)
        ("rank", "<i4"),  # -1 for a node domain
        ("ctx", "<i4"),  # -1 for a node domain
        ("interval", "<i4"),  # interval number within the context (docs/format.md 7), -1 for a node
        ("segment", "<i4"),  # part of the interval after 0, 1, 2 undecidable wraps (0 normally)
        ("loc", "<i4"),  # SPE location index, -1 for a node domain
        ("readings", "<i8"),  # decrementer readings in the interval (0 for a node domain)
    ]
)

# --------------------------------------------------------------------------------------------
# 2. The archive to write
# --------------------------------------------------------------------------------------------


class DmaStyle(StrEnum):
    """How DMA transfers are written (docs/archive.md section 10): RMA operations on a window,
    or messages (for viewers that draw only messages)."""

    RMA = "rma"
    MESSAGES = "messages"


class Ev(IntEnum):
    """OTF2 event types of the event table, with the meaning of ref and p1..p6 for each."""

    ENTER = 1  # ref region
    LEAVE = 2  # ref region
    MPI_SEND = 3  # ref comm, p1 receiver (rank in comm), p2 tag, p3 bytes
    MPI_RECV = 4  # ref comm, p1 sender (rank in comm), p2 tag, p3 bytes
    MPI_ISEND = 5  # ref comm, p1 receiver, p2 tag, p3 bytes, p4 request id
    MPI_ISEND_COMPLETE = 6  # p4 request id
    MPI_IRECV_REQUEST = 7  # p4 request id
    MPI_IRECV = 8  # ref comm, p1 sender, p2 tag, p3 bytes, p4 request id
    MPI_COLL_BEGIN = 9
    MPI_COLL_END = 10  # ref comm, p1 OTF2 CollectiveOp value, p2 root (0xFFFFFFFF none),
    #                    p3 bytes sent, p4 bytes received
    RMA_GET = 11  # ref window, p1 remote (rank in window's comm), p2 bytes, p3 matching id,
    #               p4 tag | opcode << 8 | list_elements << 16, p5 EA, p6 LS address
    RMA_PUT = 12  # as RMA_GET
    RMA_OP_COMPLETE_BLOCKING = 13  # ref window, p3 matching id
    METRIC = 14  # ref metric, p1 value (uint64)
    ENTER_OFF_SPU = 15  # ENTER of ref region with the physical-SPU attribute p1
    RMA_WIN_CREATE = 16  # ref window
    RMA_WIN_DESTROY = 17  # ref window
    PROGRAM_BEGIN = 18  # ref 0 (the archive's program: ``ArchiveDefs.program_name``)
    PROGRAM_END = 19  # ref 0; the exit status is not traced: written as OTF2's undefined


#: one OTF2 event. The table handed to the writer is sorted by (loc, time, seq).
EVENT_DTYPE = np.dtype(
    [
        ("loc", "<u4"),  # location ref
        ("type", "u1"),  # Ev
        ("ref", "<u4"),
        ("time", "<i8"),  # reference ticks
        ("seq", "<u8"),  # tie-break inside a location at equal time (program order)
        ("p1", "<u8"),
        ("p2", "<u8"),
        ("p3", "<u8"),
        ("p4", "<u8"),
        ("p5", "<u8"),
        ("p6", "<u8"),
    ]
)


class SystemNodeDomain(IntEnum):
    MACHINE = 0
    SHARED_MEMORY = 1
    ACCELERATOR_DEVICE = 2


@dataclass(frozen=True)
class SystemNode:
    name: str
    class_name: str  # e.g. "machine", "node", "spe complex"
    parent: int | None  # index into ArchiveDefs.system_nodes
    domain: SystemNodeDomain


class GroupType(IntEnum):
    PROCESS = 0
    ACCELERATOR = 1


@dataclass(frozen=True)
class LocationGroup:
    name: str
    type: GroupType
    system_node: int  # index into ArchiveDefs.system_nodes
    creating_group: int | None = None  # index into ArchiveDefs.location_groups


class LocationType(IntEnum):
    CPU_THREAD = 0
    ACCELERATOR_STREAM = 1
    METRIC = 2  # holds the samples of a MetricInstance's recorder, no events of its own


@dataclass(frozen=True)
class Location:
    name: str  # unique: the bindings merge definitions that are equal by value
    type: LocationType
    group: int  # index into ArchiveDefs.location_groups


class RegionRole(IntEnum):
    FUNCTION = 0
    WRAPPER = 1
    RMA = 2
    POINT2POINT = 3
    COLL_ONE2ALL = 4
    COLL_ALL2ONE = 5
    COLL_ALL2ALL = 6
    COLL_OTHER = 7
    BARRIER = 8
    USER = 9
    DATA_TRANSFER = 10


class Paradigm(IntEnum):
    USER = 0
    MPI = 1
    CELL = 2  # written as OTF2 paradigm "UNKNOWN"/user-defined by the writer


@dataclass(frozen=True)
class Region:
    name: str
    role: RegionRole
    paradigm: Paradigm = Paradigm.USER


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str


@dataclass(frozen=True)
class MetricInstance:
    """One metric class sampled by one location (the recorder), its values written on the
    METRIC location ``holder``; refs follow the metric classes' (one per ``Metric``)."""

    metric: int  # index into ArchiveDefs.metrics (its class)
    recorder: int  # location ref that sampled the values
    holder: int  # location ref (type METRIC) whose events hold them


@dataclass(frozen=True)
class Communicator:
    name: str
    members: tuple[int, ...]  # location refs; rank i in the communicator is members[i]
    paradigm: Paradigm


@dataclass(frozen=True)
class RmaWindow:
    name: str
    comm: int  # index into ArchiveDefs.communicators; remote ranks are ranks in it


class AttrType(IntEnum):
    UINT64 = 0
    STRING = 1


@dataclass(frozen=True)
class Attribute:
    name: str
    description: str
    type: AttrType = AttrType.UINT64


#: indexes of the fixed attributes in ArchiveDefs.attributes (the writer relies on them)
ATTR_DMA_TAG, ATTR_MFC_OPCODE, ATTR_LS_ADDRESS, ATTR_EA, ATTR_LIST_ELEMENTS, ATTR_PHYSICAL_SPU = (
    range(6)
)

FIXED_ATTRIBUTES = (
    Attribute("DMA tag", "MFC tag group of the DMA command (0..31)"),
    Attribute("MFC opcode", "MFC command opcode of the DMA command"),
    Attribute("LS address", "Local Store address of the DMA command"),
    Attribute("EA", "effective address of the DMA command"),
    Attribute("list elements", "elements of a DMA list command (0 for a plain command)"),
    Attribute("physical SPU", "physical SPU number on the node the context was switched off"),
)


@dataclass(frozen=True)
class LocationProperty:
    loc: int
    name: str
    value: str | float | int  # written as OTF2 STRING, DOUBLE or UINT64 by its Python type


@dataclass
class ClockProps:
    timer_resolution: int  # ticks per second (timebase_hz)
    global_offset: int  # first timestamp
    trace_length: int  # last - first
    realtime_ns: int  # wall clock (ns since epoch) at global_offset


#: the global string ref of ``ArchiveDefs.program_name``: the first string after the empty one
PROGRAM_NAME_STRING = 1


@dataclass
class ArchiveDefs:
    """Every OTF2 definition of one archive; refs are list indexes."""

    clock: ClockProps
    creator: str
    #: what ProgramBegin names (the writer writes it as string ref ``PROGRAM_NAME_STRING``;
    #: never empty: the empty string is ref 0)
    program_name: str = "program"
    system_nodes: list[SystemNode] = field(default_factory=list)
    location_groups: list[LocationGroup] = field(default_factory=list)
    locations: list[Location] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    metric_instances: list[MetricInstance] = field(default_factory=list)
    communicators: list[Communicator] = field(default_factory=list)
    rma_windows: list[RmaWindow] = field(default_factory=list)
    attributes: list[Attribute] = field(default_factory=lambda: list(FIXED_ATTRIBUTES))
    location_properties: list[LocationProperty] = field(default_factory=list)


# ------------------------------------------------------------------------------------------
# shapes the pipeline's stages hand each other (decode, match, order, sync)
# ------------------------------------------------------------------------------------------


class LinkKind:
    SWITCH = 1
    WRITE = 2
    WRAP = 3


#: what joins interval ``prev`` to interval ``next`` of one context
LINK_DTYPE = np.dtype(
    [
        ("prev", "<i4"),  # domain of the interval before
        ("next", "<i4"),  # domain of the interval after
        ("kind", "u1"),  # LinkKind
        ("value", "<i8"),  # decrementer value at the link: STOP's saved value (switch),
        #                    written value (write); the raw step mod 2^32 (wrap)
        ("start_value", "<i8"),  # START's restore value (switch), -1 otherwise
        ("local_prev", "<i8"),  # local time of ``value`` on the previous interval's clock
        ("local_next", "<i8"),  # local time of ``start_value`` (switch) or ``value`` (write)
        #                         on the next interval's clock
        ("last_local_prev", "<i8"),  # local time of the previous interval's last reading
        ("first_local_next", "<i8"),  # local time of the next interval's first reading
        ("stop_rec", "<i8"),  # record index of the CTX_SWITCH STOP, -1
        ("start_rec", "<i8"),  # record index of the CTX_SWITCH START, -1
        ("write_rec", "<i8"),  # record index of the DECR_WRITE, -1
    ]
)


@dataclass
class Decoded:
    manifest: Manifest
    dump_names: list[str]  # per rank, as messages name the file
    spe_buffer_records: list[int]
    locations: np.ndarray  # LOCATION_DTYPE
    contexts: np.ndarray  # CONTEXT_DTYPE
    records: np.ndarray  # RECORD_DTYPE, sorted by (loc, slot) = program order per location
    anchors: np.ndarray  # ANCHOR_DTYPE, sorted by (rank, slot)
    domains: np.ndarray  # DOMAIN_DTYPE; node domains first
    links: np.ndarray  # LINK_DTYPE
    n_nodes: int
    slots_lost: int = 0
    blocks_missing: int = 0
    records_total: int = 0  # PPE + SPE records read from the dumps
    ctx_loc: dict[tuple[int, int], int] = field(default_factory=dict)  # (rank, ctx) -> loc
    #: per record: possible losses before it in its stream (``_losses``); 0 = none, so pairing
    #: by count is certain up to it. None: not computed (every stream complete)
    loss_epoch: np.ndarray | None = None
    #: per rank: first slot position from which any record of the process may be missing
    loss_cut: np.ndarray | None = None

    #: groupings of ``records`` that several stages use, made once (``code_index``,
    #: ``location_starts``); they assume the codes and locations no longer change
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def loc_of(self, rank: int, ctx: int) -> int:
        return self.ctx_loc.get((rank, ctx), -1)

    def code_index(self) -> tuple[np.ndarray, np.ndarray]:
        """Record indexes grouped by code, ascending within a code (a stable sort of the
        16-bit codes, ``loops.group_u16``), and where each code's group starts: code c's
        records are ``order[start[c]:start[c + 1]]`` (int32 indexes below 2^31 records: half
        the memory)."""
        if "code_index" not in self._cache:
            self._cache["code_index"] = group_u16(self.records, "code")
        return self._cache["code_index"]

    def location_starts(self) -> np.ndarray:
        """Where each location's records start (records are sorted by location); the last
        entry is the number of records. Decoding, which lays the records out by these,
        hands them over (``know_location_starts``): no pass over the records for them."""
        if "location_starts" not in self._cache:
            start = np.zeros(self.locations.size + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.records["loc"], minlength=self.locations.size),
                      out=start[1:])
            self._cache["location_starts"] = start
        return self._cache["location_starts"]

    def know_location_starts(self, start: np.ndarray) -> None:
        """``location_starts`` as the one who laid the records out knows them (int64, one
        more than there are locations)."""
        self._cache["location_starts"] = start


@dataclass
class RunLayout:
    """What decoding some of a run's dumps needs to know of all of them (parallel conversion):
    every location and context in the run's numbering (as ``build_locations`` numbers them
    from every dump), and per rank its dump's name and SPE buffer size."""

    locations: np.ndarray  # LOCATION_DTYPE
    contexts: np.ndarray  # CONTEXT_DTYPE
    dump_names: list[str]
    spe_buffer_records: list[int]


class MsgKind:
    MBOX_IN = 1
    MBOX_OUT = 2
    MBOX_INTR = 3
    SIGNAL = 4
    MPI = 5


MSG_DTYPE = np.dtype(
    [
        ("kind", "u1"),  # MsgKind; for mailboxes and signals also the OTF2 tag
        ("send", "<i8"),  # record where the value was sent (writer's BEGIN / send call)
        ("recv", "<i8"),  # record where it was received (reader's END / receive)
        ("send_loc", "<i4"),
        ("recv_loc", "<i4"),
    ]
)


DMA_DTYPE = np.dtype(
    [
        ("issue", "<i8"),  # DMA record
        ("complete", "<i8"),  # completing TAG_WAIT_END record, -1 if none
        ("loc", "<i4"),  # issuing SPE location
        ("target", "<i4"),  # main-memory pseudo-location or target SPE location
        ("target_kind", "u1"),  # 0 main memory, 1 Local Store, 2 problem-state area
    ]
)


PAIR_DTYPE = np.dtype([("before", "<i8"), ("after", "<i8")])


@dataclass
class Matches:
    messages: np.ndarray  # MSG_DTYPE
    dma: np.ndarray  # DMA_DTYPE
    pairs: np.ndarray  # PAIR_DTYPE, within a node
    node_pairs: np.ndarray  # PAIR_DTYPE, MPI pairs between different nodes
    collectives: int = 0
    mpi_messages: int = 0


@dataclass(frozen=True)
class OrderOptions:
    """Slack assumed where the trace cannot measure it, in seconds; chosen conservatively."""

    restore_latency_s: float = 10e-6  # compensated restore: clock late by 0..this
    write_latency_s: float = 1e-6  # DECR_WRITE: write this long after its reading at most
    kernel_read_slack_ticks: int = 4  # kernel's two timebase readings vs the real instants
    #: how long after its reservation a clock is read at most (docs/format.md 6.3: "a few
    #: ticks"). 0 (default, docs/sync-report.md): slot-order pairs are taken as exact and the
    #: solver loosens every constraint by the least uniform amount that makes them feasible;
    #: D > 0 (the guaranteed mode): slot-order pairs are loosened by D so the bounds hold for
    #: any delay up to D
    read_delay_ticks: float = 0.0
    #: constraint sources to build (None: all): "slot_order", "block", "semantic", "switch",
    #: "continuity"; the published algorithm uses slot order only
    sources: frozenset[str] | None = None


@dataclass
class Constraints:
    src: np.ndarray  # int64
    dst: np.ndarray  # int64
    weight: np.ndarray  # float64: x[dst] - x[src] <= weight
    counts: dict[str, int] = field(default_factory=dict)  # constraints per source
    #: slacks used, in ticks, and ``slot_order``: "exact" or "read delay" (``OrderOptions``)
    assumed: dict[str, float | str] = field(default_factory=dict)
    #: per constraint: a message's (mailbox, signal, DMA, MPI or collective within a node),
    #: sound as it stands, kept exact where the relaxation would reverse it (None: none is)
    hard: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.src.size)


@dataclass(frozen=True)
class SyncSolution:
    """Per-domain clock offsets relative to the reference (true = offset + local)."""

    offset: np.ndarray  # float64[n]; NaN where unbounded ("none")
    lower: np.ndarray  # float64[n]; -inf where nothing bounds the domain from below
    upper: np.ndarray  # float64[n]; +inf where nothing bounds the domain from above
    bounded: np.ndarray  # <U5[n]: "both", "upper", "lower" or "none"
    relaxation: float  # ticks added to every weight to make the system feasible
    reference: int
    alpha: float
    n_constraints: int  # constraints given
    n_edges: int  # distinct constraints after collapsing parallel edges (self-loops included)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per step
    #: the offsets alpha 0 and alpha 1 give (each offset grows with alpha): the bounds where
    #: both exist, a one-sided domain's extremes as the placed domains move; NaN unbounded
    offset_low: np.ndarray | None = None
    offset_high: np.ndarray | None = None


@dataclass
class NodeMap:
    offset: float  # reference = offset + rate * node timebase
    rate: float
    bound: float | None  # largest uncertainty in reference ticks, None if unknown
    method: str  # "reference", "start-times", "fit"
    #: expected error of the estimate under the fit's stated assumption (reference ticks)
    estimate_error: float | None = None

    def to_reference(self, x: np.ndarray) -> np.ndarray:
        """Reference ticks of node timebase ``x``."""
        return self.offset + self.rate * np.asarray(x, dtype=np.float64)


@dataclass
class SyncResult:
    offset: np.ndarray  # per domain, node-timebase ticks (0 for node domains); NaN unbounded
    lower: np.ndarray
    upper: np.ndarray
    bounded: np.ndarray  # "both" | "upper" | "lower" | "none"
    relaxation: float  # the largest over nodes
    node_maps: list[NodeMap]
    solutions: list[SyncSolution] = field(default_factory=list)
    usable: np.ndarray | None = None  # per record
    order_violations: int = 0
    clamped: int = 0  # records held at their predecessor's time
    #: records with a clock written at an earlier record's time on their location (a later
    #: time came before them in program order)
    held_back: int = 0
    #: per node, the relaxation of its own solution (0 where nothing was solved)
    node_relaxation: np.ndarray | None = None
    #: the constraints actually solved (wrap links included), until the caller drops them
    constraints: Constraints | None = None
    #: the report's ``pairs`` (``pair_table``), once computed
    pairs: list[dict] | None = None
    #: per domain, the offsets alpha 0 and alpha 1 give (``SyncSolution.offset_low``)
    offset_low: np.ndarray | None = None
    offset_high: np.ndarray | None = None


@dataclass
class Pipeline:
    """Everything the stages produced for a run (or, for the whole run of a grouped
    conversion, its domains, bounds, counts and damage without records): what the summary,
    the sync report and the definitions are built from."""

    decoded: Decoded
    matches: Matches
    constraints: Constraints
    sync: SyncResult
    damage: DamageLog

    def synchronized(self) -> SynchronizedRun:
        """What the summary and the sync report read of it."""
        return SynchronizedRun(self.decoded, self.sync, self.constraints.counts,
                               self.constraints.assumed, self.damage)


@dataclass
class SynchronizedRun:
    """What the summary, the sync report and the definitions read of a synchronized run: its
    ``Decoded`` (for the whole run of a grouped conversion, without records), its bounds, its
    constraint counts and assumed slacks, and its damage. No matches or constraint arrays."""

    decoded: Decoded
    sync: SyncResult
    constraint_counts: dict[str, int]
    assumed: dict[str, float | str]
    damage: DamageLog
