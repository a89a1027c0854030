"""The archive's definitions from the decoded run and its synchronization: system tree,
location groups, locations and their properties, regions, metrics (and the PPE threads'
METRIC locations with their metric instances), communicators, the DMA
window and clock properties, in the order and with the names docs/archive.md sections 2-7
and 11-15 give, plus the lookups (id -> reference) the record families need. It writes no
event and reads no record time but to find the first and last timestamps and the
``sync_intervals`` property.
"""

from __future__ import annotations

import numpy as np

from .. import __version__
from ..input import format as fmt
from ..input.manifest import Core, RegionKind
from ..model import (
    ArchiveDefs,
    ClockProps,
    Communicator,
    CounterUse,
    Decoded,
    DomainKind,
    GroupType,
    Location,
    LocationGroup,
    LocationProperty,
    LocationType,
    LocKind,
    Metric,
    MetricInstance,
    Paradigm,
    Region,
    RegionRole,
    RmaWindow,
    SyncResult,
    SystemNode,
    SystemNodeDomain,
)
from ..native.record_loops import time_bounds
from ..sync.interval_bounds import interval_bounds

P = fmt.PpeCode

_MPI_ROLES = (
    ("barrier", RegionRole.BARRIER),
    ("reduce_scatter", RegionRole.COLL_ALL2ALL),
    ("allreduce", RegionRole.COLL_ALL2ALL),
    ("allgather", RegionRole.COLL_ALL2ALL),
    ("alltoall", RegionRole.COLL_ALL2ALL),
    ("scan", RegionRole.COLL_ALL2ALL),
    ("bcast", RegionRole.COLL_ONE2ALL),
    ("scatter", RegionRole.COLL_ONE2ALL),
    ("gather", RegionRole.COLL_ALL2ONE),
    ("reduce", RegionRole.COLL_ALL2ONE),
)

# fixed extra regions: name -> role
_CELL_REGIONS = {
    "mfc_read_tag_status": RegionRole.RMA,
    "off SPU": RegionRole.FUNCTION,
    "spe_context_run": RegionRole.WRAPPER,
    "spe_context_create": RegionRole.WRAPPER,
    "spe_program_load": RegionRole.WRAPPER,
    "spe_context_destroy": RegionRole.WRAPPER,
    "spe_in_mbox_write": RegionRole.POINT2POINT,
    "spe_out_mbox_read": RegionRole.POINT2POINT,
    "spe_out_intr_mbox_read": RegionRole.POINT2POINT,
    "spe_signal_write": RegionRole.POINT2POINT,
    "spu_read_in_mbox": RegionRole.POINT2POINT,
    "spu_write_out_mbox": RegionRole.POINT2POINT,
    "spu_write_out_intr_mbox": RegionRole.POINT2POINT,
    "spu_read_signal": RegionRole.POINT2POINT,
    "spu_write_decrementer": RegionRole.FUNCTION,
}

#: the core whose calls the fixed regions stand for ("off SPU" is no call)
_CELL_CORE = {name: ("ppe" if name.startswith("spe_") else "spe")
              for name in _CELL_REGIONS if name != "off SPU"}

PROP_SYNC_BOUND = "cell2otf2::sync_bound_ticks"
PROP_PSEUDO = "cell2otf2::pseudo_location"
PROP_SYNC_INTERVALS = "cell2otf2::sync_intervals"


def build_definitions(dec: Decoded, result: SyncResult, first: int, last: int,
                      sync_intervals: dict[int, str] | None = None,
                      first_spu: dict[int, int] | None = None,
                      counters_used: frozenset[CounterUse] | None = None
                      ) -> tuple[ArchiveDefs, dict]:
    """All definitions; returns them and the lookups the record families need (region refs etc.).

    ``sync_intervals`` (location -> property value, as ``sync_intervals_property`` makes it)
    is given by a caller whose ``dec`` holds no records (the parallel converter's process 0,
    which gathers the values from the processes that hold them); else it is computed here.
    ``first_spu`` (SPE location -> physical SPU, as ``first_spus`` makes it) likewise, and
    ``counters_used`` (the manifest counters some written record samples, as
    ``counters_written`` makes it over the whole run): a caller that emits a share of the run
    gives the whole run's set, so every share numbers the metrics alike.
    """
    man = dec.manifest
    p0 = man.processes[0]
    hz = man.timebase_hz
    realtime = p0.start_realtime_ns + round((first - p0.start_timebase) * 1e9 / hz)
    defs = ArchiveDefs(
        clock=ClockProps(timer_resolution=hz, global_offset=first,
                         trace_length=max(0, last - first), realtime_ns=int(realtime)),
        creator=f"cell2otf2 {__version__}",
        program_name=man.application or "program",
    )
    machine = man.application or "Cell machine"
    machine = machine if machine != "0" else "machine 0"
    defs.system_nodes.append(SystemNode(machine, "machine", None, SystemNodeDomain.MACHINE))
    if first_spu is None:
        first_spu = first_spus(dec)
    # the chip each context's SPU belongs to (None: no CTX_SWITCH says which SPU it ran on)
    ctx_chip: dict[int, int | None] = {}
    for r, _, loc in dec.contexts[["rank", "ctx", "loc"]].tolist():
        node = man.nodes[man.node_of_rank(r)]
        spu = first_spu.get(int(loc), -1)
        ctx_chip[int(loc)] = (spu // node.spes_per_chip
                              if 0 <= spu < node.cell_chips * node.spes_per_chip else None)
    node_sys, chip_sys = [], {}  # chip_sys: (node index, chip) -> system tree node
    used_chips = {(man.node_of_rank(int(r)), ctx_chip[int(loc)])
                  for r, loc in dec.contexts[["rank", "loc"]].tolist()
                  if ctx_chip[int(loc)] is not None}
    for k, node in enumerate(man.nodes):
        name = node.name if node.name != "0" else "node 0"
        node_sys.append(len(defs.system_nodes))
        defs.system_nodes.append(SystemNode(name, "node", 0, SystemNodeDomain.SHARED_MEMORY))
        parent = node_sys[-1]
        for c in range(node.cell_chips):
            if (k, c) in used_chips:  # only chips an SPE context is known to have run on
                chip_sys[k, c] = len(defs.system_nodes)
                defs.system_nodes.append(SystemNode(
                    f"{name} chip {c} SPE complex", "spe complex", parent,
                    SystemNodeDomain.ACCELERATOR_DEVICE))
    n = man.n_ranks
    for p in man.processes:
        defs.location_groups.append(LocationGroup(f"MPI Rank {p.rank}", GroupType.PROCESS,
                                                  node_sys[man.node_of_rank(p.rank)]))
    # per rank: one accelerator group per chip its contexts ran on (chip order), then one
    # below the node itself for the contexts whose chip no record says
    accel_group: dict[int, int] = {}  # SPE location -> its group
    for r in range(n):
        locs = dec.contexts["loc"][dec.contexts["rank"] == r].tolist()
        k = man.node_of_rank(r)
        chips = sorted({known_chip for x in locs
                        if (known_chip := ctx_chip[int(x)]) is not None})
        for chip in [*chips, None]:
            mine = [int(x) for x in locs if ctx_chip[int(x)] == chip]
            if not mine:
                continue
            for x in mine:
                accel_group[x] = len(defs.location_groups)
            name = f"SPEs (rank {r})" if chip is None else f"SPEs (rank {r}, chip {chip})"
            defs.location_groups.append(LocationGroup(
                name, GroupType.ACCELERATOR,
                node_sys[k] if chip is None else chip_sys[k, chip], creating_group=r))
    for r, kind, idx in dec.locations.tolist():
        if kind == LocKind.PPE_THREAD:
            defs.locations.append(Location(f"PPE thread {idx} (rank {r})",
                                           LocationType.CPU_THREAD, r))
        elif kind == LocKind.MAIN_MEMORY:
            defs.locations.append(Location(f"Main memory (rank {r})", LocationType.CPU_THREAD,
                                           r))
            defs.location_properties.append(LocationProperty(len(defs.locations) - 1,
                                                             PROP_PSEUDO, "main memory"))
        else:
            defs.locations.append(Location(f"SPE ctx {idx} (rank {r})",
                                           LocationType.ACCELERATOR_STREAM,
                                           accel_group[len(defs.locations)]))
    # worst sync bound per SPE location: its widest synchronized interval (every segment
    # bounded: ``interval_bounds``, as the summary counts them)
    doms = dec.domains
    ib = interval_bounds(doms, result.lower, result.upper)
    iv_loc = doms["loc"][ib.heads]
    for loc in np.unique(doms["loc"][doms["loc"] >= 0]).tolist():
        w = ib.width[iv_loc == loc]
        w = w[np.isfinite(w)]
        # a number (OTF2 DOUBLE): ticks, or +inf when no interval is bounded on both sides
        value = round(float(w.max()), 1) if w.size else float("inf")
        defs.location_properties.append(LocationProperty(int(loc), PROP_SYNC_BOUND, value))
    if sync_intervals is None:
        sync_intervals = sync_intervals_property(dec, result)
    for loc, intervals_text in sorted(sync_intervals.items()):
        defs.location_properties.append(LocationProperty(loc, PROP_SYNC_INTERVALS,
                                                         intervals_text))
    # regions: manifest regions, programs, Cell regions
    region_ref: dict[int, int] = {}
    for reg in man.regions:
        region_ref[reg.id] = len(defs.regions)
        if reg.kind == RegionKind.mpi:
            low = reg.name.lower()
            role = next((r for key, r in _MPI_ROLES if key in low), RegionRole.POINT2POINT)
            defs.regions.append(Region(reg.name, role, Paradigm.MPI))
        elif reg.kind == RegionKind.spe_runtime:
            defs.regions.append(Region(reg.name, RegionRole.WRAPPER, Paradigm.CELL))
        elif reg.kind == RegionKind.user:
            defs.regions.append(Region(reg.name, RegionRole.USER, Paradigm.USER))
        else:
            defs.regions.append(Region(reg.name, RegionRole.FUNCTION, Paradigm.USER))
    program_ref: dict[int, int] = {}
    names = {r.name for r in defs.regions}
    for prog in man.programs:
        program_ref[prog.id] = len(defs.regions)
        name = prog.name if prog.name not in names else f"{prog.name} (SPE program)"
        defs.regions.append(Region(name, RegionRole.FUNCTION, Paradigm.CELL))
    cell_ref: dict[str, int | None] = {}
    declared = {(r.name, str(r.core)) for r in man.regions}
    for name, role in _CELL_REGIONS.items():
        if (name, _CELL_CORE.get(name)) in declared:
            # the tracer's ENTER/LEAVE of the manifest's region of that name already mark
            # the call on that core: its records give no second, nested region
            cell_ref[name] = None
            continue
        cell_ref[name] = len(defs.regions)
        defs.regions.append(Region(name if name not in names else f"{name} (cell2otf2)",
                                   role, Paradigm.CELL))
    # a metric only for a counter some written record samples (no metric without a value);
    # the counters a PPE thread samples first: a reader that takes the first metric class
    # as the CPU threads' metrics (as Score-P archives allow it to) finds them there
    if counters_used is None:
        counters_used = counters_written(dec, result.usable)
    metric_ref = {}
    used_ids = {use.counter for use in counters_used}
    written = [c for c in man.counters if c.id in used_ids]
    for counter in sorted(written, key=lambda c: c.core != Core.ppe):
        metric_ref[counter.id] = len(defs.metrics)
        defs.metrics.append(Metric(counter.name, counter.unit))
    record_locations = len(defs.locations)
    # a PPE thread's counter samples go to a METRIC location of its own, after every location
    # with records, defined by one MetricInstance per PPE counter whose recorder is the thread
    # (Score-P's asynchronous metrics): a reader of CPU threads finds no Metric event there
    # that is not followed by an event at its own time
    ppe_counter = {c.id for c in written if c.core == Core.ppe}
    sampled: dict[int, set[int]] = {}  # PPE thread -> its PPE counters' metric refs
    for use in counters_used:
        if use.ppe_thread >= 0 and use.counter in ppe_counter:
            sampled.setdefault(use.ppe_thread, set()).add(metric_ref[use.counter])
    for thread, metrics in sorted(sampled.items()):
        holder = len(defs.locations)
        recorder = defs.locations[thread]
        defs.locations.append(Location(f"{recorder.name} counters", LocationType.METRIC,
                                       recorder.group))
        defs.metric_instances.extend(MetricInstance(m, thread, holder) for m in sorted(metrics))
    comm_ref = {}
    for comm in man.communicators:
        comm_ref[comm.id] = len(defs.communicators)
        defs.communicators.append(Communicator(comm.name, tuple(comm.ranks), Paradigm.MPI))
    all_locs = tuple(range(record_locations))
    mbox_comm = len(defs.communicators)
    defs.communicators.append(Communicator("Cell mailboxes", all_locs, Paradigm.CELL))
    dma_comm = len(defs.communicators)
    defs.communicators.append(Communicator("DMA", all_locs, Paradigm.CELL))
    defs.rma_windows.append(RmaWindow("DMA", dma_comm))
    lookups = dict(region=region_ref, program=program_ref, cell=cell_ref, metric=metric_ref,
                   comm=comm_ref, mbox_comm=mbox_comm, dma_comm=dma_comm, window=0)
    return defs, lookups


def sync_intervals_property(dec: Decoded, result: SyncResult,
                            bounds: tuple | None = None) -> dict[int, str]:
    """SPE location -> its ``cell2otf2::sync_intervals`` value (docs/archive.md section 6).
    ``bounds``: ``loops.time_bounds`` of ``dec`` and ``result.usable``, when the caller has
    it."""
    doms = dec.domains
    rec = dec.records
    if bounds is None:
        usable = result.usable if result.usable is not None else np.ones(rec.size, bool)
        bounds = time_bounds(rec, usable, doms.size)
    first, last = bounds[0], bounds[1]
    none = np.iinfo(np.int64).max
    width = result.upper - result.lower
    iv = np.flatnonzero((doms["kind"] == DomainKind.SPE_INTERVAL) & (doms["loc"] >= 0))
    # one entry per (location, interval): the segments after undecidable wraps are merged;
    # grouped by one sort, each group's first and last time and widest bound by one
    # reduction each (the strings are made per interval: the value has one part each)
    loc, interval = doms["loc"][iv].astype(np.int64), doms["interval"][iv].astype(np.int64)
    order = np.lexsort((iv, interval, loc))
    iv, loc, interval = iv[order], loc[order], interval[order]
    if not iv.size:
        return {}
    head = np.ones(iv.size, dtype=bool)
    head[1:] = (loc[1:] != loc[:-1]) | (interval[1:] != interval[:-1])
    at = np.flatnonzero(head)
    t0 = np.minimum.reduceat(np.asarray(first)[iv], at).tolist()
    t1 = np.maximum.reduceat(np.asarray(last)[iv], at).tolist()
    w = np.asarray(width, dtype=np.float64)[iv]
    # the widest segment, unbounded unless every segment is bounded (``interval_bounds``)
    w_max = np.maximum.reduceat(np.where(np.isfinite(w), w, np.inf), at).tolist()
    out: dict[int, list[str]] = {}
    for g_loc, a, z, m in zip(loc[at].tolist(), t0, t1, w_max, strict=True):
        out.setdefault(g_loc, []).append(
            (f"{a}:{z}:" if a != none else "-:-:")
            + (f"{m:.1f}" if m != np.inf else "unbounded"))
    return {g_loc: ";".join(parts) for g_loc, parts in out.items()}


def counters_written(dec: Decoded, usable: np.ndarray | None) -> frozenset[CounterUse]:
    """The counters that some usable COUNTER record (PPE or SPE) of ``dec`` names, with the
    PPE threads that sampled them: the counters whose metric the archive writes and the PPE
    threads that get a METRIC location (``usable`` None: every record)."""
    rec = dec.records
    by_code, code_start = dec.code_index()
    out: set[CounterUse] = set()
    for code in (P.COUNTER, fmt.SpeCode.COUNTER):
        at = by_code[code_start[code]:code_start[code + 1]]
        if usable is not None:
            at = at[usable[at]]
        counters, which = np.unique(rec["a"][at].astype(np.int64), return_inverse=True)
        if code != P.COUNTER:  # an SPE's samples: no PPE thread
            out.update(CounterUse(int(c), -1) for c in counters.tolist())
            continue
        # the distinct (counter, thread) pairs by one key per record: np.unique(axis=0) on
        # the two columns sorts rows as a structured view, 1 s for 3 M samples
        threads, thread_of = np.unique(rec["loc"][at], return_inverse=True)
        key = np.unique(which.ravel().astype(np.int64) * threads.size + thread_of.ravel())
        out.update(CounterUse(int(c), int(x)) for c, x in zip(
            counters[key // threads.size].tolist(), threads[key % threads.size].tolist(),
            strict=True))
    return frozenset(out)


def first_spus(dec: Decoded) -> dict[int, int]:
    """SPE location -> the physical SPU of its first CTX_SWITCH record in slot order (a STOP
    names the SPU of the run it ends, the context's first run; a START whose STOP was lost,
    the SPU of the run it begins). Contexts without CTX_SWITCH are left out: no record says
    where they ran."""
    rec = dec.records
    by_code, code_start = dec.code_index()  # ascending within a code
    sw = by_code[code_start[P.CTX_SWITCH]:code_start[P.CTX_SWITCH + 1]].astype(np.int64)
    if not sw.size:
        return {}
    rank = dec.locations["rank"][rec["loc"][sw]]
    key = np.lexsort((rec["slot"][sw], rec["a"][sw], rank))
    sw, rank = sw[key], rank[key]
    ctx = rec["a"][sw].astype(np.int64)
    first = np.ones(sw.size, dtype=bool)
    first[1:] = (rank[1:] != rank[:-1]) | (ctx[1:] != ctx[:-1])
    out = {}
    for r, c, spu in zip(rank[first].tolist(), ctx[first].tolist(),
                         (rec["c"][sw[first]] >> np.uint64(32)).tolist(), strict=True):
        loc = dec.loc_of(int(r), int(c))
        if loc >= 0:
            out[int(loc)] = int(spu)
    return out
