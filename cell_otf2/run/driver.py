"""The conversion's phases, run by every process of a team over its groups of nodes: read
the dumps and decode each group, pair MPI and fit the node clocks, synchronize each group,
build the whole run's definitions, then emit and hand each group's events to the team's sink
(the OTF2 writer, or ``check``'s sink that writes nothing), and build the summary and the
sync report's content. The team (``team_serial.SerialTeam`` or ``team_mpi.MpiTeam``) decides
which steps run on the root and how values are gathered and shared; ``spill.Spill`` holds
the groups not being worked on. It does not choose the team, stage or commit the output
(``conversion.py``), or know how any stage works inside."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..damage import DamageLog
from ..decode.decoder import decode
from ..decode.match import match
from ..emit.definitions import build_definitions
from ..emit.events import EmitStats, emit
from ..emit.table import EventChunks
from ..input.dumps import Dumps, Progress, read_summaries
from ..input.manifest import Manifest, load_manifest
from ..model import (
    ArchiveDefs,
    Constraints,
    CounterUse,
    Decoded,
    DmaStyle,
    Ev,
    Matches,
    NodeMap,
    RunLayout,
    SynchronizedRun,
)
from ..sync.order import build_constraints
from ..sync.synchronize import apply_times, synchronize, written_order_violations
from .node_groups import GROUP_BYTES, IN_MEMORY_BYTES, node_groups
from .options import ConvertOptions
from .spill import GroupState, Spill
from .summary import Summary, build_summary
from .team import EventGroup, Team, Written
from .whole_run import (
    STAGES,
    GroupShare,
    MpiRecords,
    MpiState,
    NodeFit,
    dump_bytes,
    match_mpi,
    merge_damage,
    mpi_subset,
    paired_mpi,
    rma_id_offset,
    rma_transfers,
    share_after_sync,
    whole_run,
)

T = TypeVar("T")

#: events per piece of the event table handed to the writer (bounds emit's memory)
CHUNK_EVENTS = 1 << 16


def drop_analysis(dec: Decoded, matches: Matches, cons: Constraints) -> Constraints:
    """Free what only analysis needed (the slot-order anchors, the loss epochs, the
    happened-before pairs, the constraint arrays) before the event table is built: empties
    ``dec``'s anchors and loss epochs and ``matches``' pairs in place; returns the
    constraints without their arrays (counts and assumed slacks kept, for the summary and
    the report)."""
    empty = np.zeros(0, dtype=np.int64)
    dec.anchors = dec.anchors[:0].copy()
    dec.loss_epoch = None
    matches.pairs = matches.pairs[:0].copy()
    matches.node_pairs = matches.node_pairs[:0].copy()
    return Constraints(empty, empty, np.zeros(0), cons.counts, cons.assumed)


# --------------------------------------------------------------------------------------------
# what the phases hand each other
# --------------------------------------------------------------------------------------------


@dataclass
class Group:
    """One group of nodes and what the conversion keeps of it from phase to phase."""

    index: int
    ranks: list[int]
    logs: dict[str, DamageLog] = field(default_factory=lambda: {s: DamageLog() for s in STAGES})
    records: int = 0  # decoded records
    mpi: MpiRecords | None = None  # its MPI records (decode -> node clock fit)
    mpi_written: np.ndarray | None = None  # its MPI records written (sync -> pairing)
    rma: np.ndarray | None = None  # its RMA transfers per rank (sync -> definitions)
    rma_offset: np.ndarray | None = None  # its ranks' first RMA ids, less its own (-> emit)
    span: tuple[int, int] | None = None  # its written time span (sync -> definitions)
    share: GroupShare | None = None  # what it hands the whole run (sync -> summary)
    paired: np.ndarray | None = None  # its MPI records paired at both ends (-> emit)


@dataclass
class Phases:
    """What every phase of one process works with: the team, the options, the clocks and
    the spill, and what the whole run found at once (reading, layout, MPI pairing)."""

    team: Team
    options: ConvertOptions
    clock: StageClock
    spill: Spill
    progress: Progress | None
    first_logs: dict[str, DamageLog] = field(
        default_factory=lambda: {s: DamageLog() for s in STAGES})

    def tell(self, stage: str, fraction: float) -> None:
        """Report progress, when there is a display."""
        if self.progress:
            self.progress(stage, fraction)


@dataclass
class Plan:
    """The run as read once (phase A): its manifest and layout, and this process's groups."""

    man: Manifest
    layout: RunLayout
    groups: list[Group]
    #: rank -> its dump's ``decode.summarize`` (``read_summaries`` returns them untyped),
    #: until its group is decoded
    summaries: dict[int, Any]


@dataclass
class Skeleton:
    """The first decoded group's empty tables (phase A): what the whole run's ``Decoded``
    is built from, the node domains the node clock fit needs, and how many groups each
    process has (to cut the root's per-group lists into each process's)."""

    decoded: Decoded
    node_domains: np.ndarray
    groups_per_process: list[int]


@dataclass
class ClockFit:
    """What phase B hands every process: the node maps, its groups' within-node MPI pairs
    (one array per group) and, on the root only, the state the MPI pairing needs."""

    node_maps: list[NodeMap]
    pairs: list[np.ndarray]
    state: MpiState | None


@dataclass
class Definitions:
    """The whole run's definitions (phase D; on every process) and, on the root, the whole
    run for the summary and the report."""

    defs: ArchiveDefs
    whole: SynchronizedRun | None
    #: the manifest counters some written record of the run samples: every group numbers
    #: the metrics alike
    counters_used: frozenset[CounterUse]


@dataclass
class RootResult:
    """What the root returns: the summary and the whole run (for the sync report)."""

    summary: Summary
    whole: SynchronizedRun


class StageClock:
    """Wall and CPU seconds per stage; ``on_stage(name, 0.0)`` as each stage is entered (the
    progress display names the stage running now)."""

    def __init__(self, on_stage: Callable[[str, float], None] | None = None) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.on_stage = on_stage

    def add(self, stage: str, wall: float, cpu: float) -> None:
        self.wall[stage] = self.wall.get(stage, 0.0) + wall
        self.cpu[stage] = self.cpu.get(stage, 0.0) + cpu

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self.on_stage is not None:
            self.on_stage(name, 0.0)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0, time.process_time() - c0)


def run_phases(team: Team, run_dir: Path, tmp: Path, name: str, clock: StageClock,
               spill: Spill, options: ConvertOptions, progress: Progress | None = None,
               group_bytes: int | None = None, *, report_pairs: bool = True
               ) -> RootResult | None:
    """The phases over this process's groups of nodes (its share under ``team_mpi``):

    A. read every dump once (summaries, the location layout); per group decode its dumps
       (reading each again) and match all but MPI, keeping its MPI records;
    B. on the root: pair every MPI record of the run and fit the node clocks;
    C. per group, backwards (the last decoded is still in memory): order constraints,
       synchronize, give records their times;
    D. on the root: which MPI records have both ends usable, RMA ids, the definitions;
    E. per group, forwards: emit its events in pieces into ``team.write`` (the sink);
       then the summary.

    Returns the summary and the whole run on the root, None elsewhere. ``group_bytes``:
    ``node_groups``' limit (None: ``GROUP_BYTES`` / processes when the dumps total more than
    ``IN_MEMORY_BYTES``, else one group). ``report_pairs``: compute the sync report's pair
    figures (``synchronize.pair_table``; only a report needs them)."""
    ph = Phases(team, options, clock, spill, progress)
    plan = read_run(ph, run_dir, group_bytes)  # A
    skeleton = decode_groups(ph, plan)
    fit = fit_node_clocks(ph, plan, skeleton)  # B
    synchronize_groups(ph, plan, fit, report_pairs)  # C
    mpi_reversed = pair_mpi(ph, plan, fit, skeleton)  # D
    made = whole_run_definitions(ph, plan, skeleton, fit, mpi_reversed)
    estats, written = write_groups(ph, plan, made, tmp, name)  # E
    return summarize(ph, plan, made, fit, estats, written)


def read_run(ph: Phases, run_dir: Path, group_bytes: int | None) -> Plan:
    """Phase A's reading: the manifest, every dump of this process read once (its
    summary), the groups of nodes and the whole run's layout."""
    team, clock = ph.team, ph.clock

    def plan() -> Manifest:
        with clock.stage("read"):
            return load_manifest(run_dir)

    man = team.run("read", plan)
    sizes = team.from_root(lambda: dump_bytes(man))
    my_ranks = team.my_ranks(man, sizes)

    def read() -> list:
        with clock.stage("read"):
            return read_summaries(man, ph.first_logs["read"], ph.progress, my_ranks)

    summaries = team.run("read", read)
    total = sum(sizes)
    if group_bytes is None:
        group_bytes = (max(1, GROUP_BYTES // team.size) if total > IN_MEMORY_BYTES
                       else max(1, total))
    groups = [Group(i, ranks) for i, ranks in
              enumerate(node_groups(man, sizes, group_bytes, my_ranks) or [[]])]
    with clock.stage("decode"):
        layout = team.layout(man, summaries, ph.first_logs["layout"])
    return Plan(man, layout, groups, dict(zip(my_ranks, summaries, strict=True)))


def decode_groups(ph: Phases, plan: Plan) -> Skeleton:
    """Phase A's decoding: per group, decode its dumps and match all but MPI, keeping its
    MPI records; each group's tables go to the spill."""
    clock, spill, groups = ph.clock, ph.spill, plan.groups
    found: list[Skeleton] = []

    def decode_all() -> None:
        for g in groups:
            spill.evict()
            with clock.stage("decode"):
                mine = [plan.summaries[r] for r in g.ranks]
                dumps = Dumps(plan.man, mine, g.ranks)
                # ``decode`` declares list[Dump]; it reads any sequence of dumps, as Dumps is
                dec = decode(plan.man, dumps,  # type: ignore[arg-type]
                             g.logs["decode"], layout=plan.layout,
                             release=True, summaries=mine,
                             allocate=(spill.record_table(g.index) if len(groups) > 1
                                       else None))
                matches = match(dec, g.logs["match"], mpi=False)
                g.mpi = mpi_subset(dec)
                g.records = int(dec.records.size)
            clock.add("read", dumps.seconds, dumps.cpu_seconds)  # the second reading
            clock.add("decode", -dumps.seconds, -dumps.cpu_seconds)
            if not found:
                found.append(empty_skeleton(plan, dec))
            spill.put(g.index, GroupState(dec, matches))
            del dec, matches, dumps
            ph.tell("decode", (g.index + 1) / len(groups))

    ph.team.run("decode", decode_all)
    plan.summaries.clear()
    skeleton = found[0]
    skeleton.groups_per_process = ph.team.allgather(len(groups))
    return skeleton


def empty_skeleton(plan: Plan, dec: Decoded) -> Skeleton:
    """The whole run's ``Decoded`` without records, from the first group decoded."""
    layout = plan.layout
    node_domains = dec.domains[: dec.n_nodes].copy()
    decoded = Decoded(
        plan.man, layout.dump_names, layout.spe_buffer_records, layout.locations,
        layout.contexts, dec.records[:0].copy(), dec.anchors[:0].copy(), node_domains,
        dec.links[:0].copy(), dec.n_nodes)
    return Skeleton(decoded, node_domains, [])


def fit_node_clocks(ph: Phases, plan: Plan, skeleton: Skeleton) -> ClockFit:
    """Phase B: on the root, pair the MPI records of every group of every process and fit
    the node clocks; every process gets the node maps and its groups' MPI pairs."""
    team = ph.team
    mpi_parts = team.gather([g.mpi for g in plan.groups])
    for g in plan.groups:
        g.mpi = None
    ph.tell("sync", 0.0)

    def fit() -> tuple[NodeFit, list[list[np.ndarray]]]:
        with ph.clock.stage("mpi"):
            flat = [m for part in mpi_parts or [] for m in part if m is not None]
            found = match_mpi(plan.man, plan.layout, skeleton.node_domains, flat,
                              ph.first_logs["mpi"])
            return found, _split(found.pairs, skeleton.groups_per_process)

    fitted = team.on_root("mpi", fit)  # None but on the root
    mpi_parts = None  # the root holds every MPI record until here
    node_maps = team.bcast(fitted[0].node_maps if fitted else None)
    pairs = team.scatter(fitted[1] if fitted else None)
    return ClockFit(node_maps or [], pairs, fitted[0].state if fitted else None)


def synchronize_groups(ph: Phases, plan: Plan, fit: ClockFit, report_pairs: bool) -> None:
    """Phase C: per group, backwards (the last decoded is still in memory), build the order
    constraints, synchronize and give records their times; what the later phases need is
    kept on the ``Group``, the analysis-only tables are dropped."""
    clock, spill, groups = ph.clock, ph.spill, plan.groups
    alpha, order_options = ph.options.alpha, ph.options.order

    def sync_all() -> None:
        for g in reversed(groups):
            state = spill.get(g.index)
            dec, matches = state.dec, state.matches
            with clock.stage("order"):
                matches.pairs = np.concatenate([matches.pairs, fit.pairs[g.index]])
                cons = build_constraints(dec, matches, order_options)
            with clock.stage("sync"):
                result = synchronize(dec, cons, alpha=alpha, damage=g.logs["sync"],
                                     node_maps=fit.node_maps)
                apply_times(dec, result, g.logs["sync"])
                assert result.usable is not None  # ``apply_times`` set it
                result.order_violations = written_order_violations(dec, matches,
                                                                   result.usable)
                result.solutions = []
                written, g.share = share_after_sync(dec, matches, cons, result,
                                                    pairs=report_pairs)
                g.mpi_written, g.span = written.mpi_written, written.span
                result.constraints = None  # the report's pairs are in g.share
                cons = drop_analysis(dec, matches, cons)
                g.rma = rma_transfers(dec, matches, result.usable)
            spill.put(g.index, GroupState(dec, matches, result, timed=True))
            del state, dec, matches, result, cons
            ph.tell("sync", (len(groups) - g.index) / len(groups))

    ph.team.run("sync", sync_all)


def pair_mpi(ph: Phases, plan: Plan, fit: ClockFit, skeleton: Skeleton) -> int:
    """Phase D's MPI: on the root, which MPI records have both ends written; each group
    gets its own (``Group.paired``). Returns, on the root, the MPI messages written with the
    receive before the send (0 elsewhere)."""
    team = ph.team
    written = team.gather([g.mpi_written for g in plan.groups])
    reversed_count: list[int] = [0]

    def pair_up() -> list[list[np.ndarray]]:
        with ph.clock.stage("emit"):
            assert fit.state is not None and written is not None  # the root's
            paired, reversed_count[0] = paired_mpi(
                fit.state, [x for part in written for x in part if x is not None])
            return _split(paired, skeleton.groups_per_process)

    mine = team.scatter(team.on_root("emit", pair_up))
    for g, paired in zip(plan.groups, mine, strict=True):
        g.paired = paired
        g.mpi_written = None
    return reversed_count[0]


def whole_run_definitions(ph: Phases, plan: Plan, skeleton: Skeleton, fit: ClockFit,
                          mpi_reversed: int) -> Definitions:
    """Phase D's definitions: every process's RMA transfers and time spans, and on the root
    the whole run and its definitions, which every process gets (the writer checks each
    process's events against them)."""
    team = ph.team
    mine = [g.rma for g in plan.groups if g.rma is not None]  # every group's, synchronized
    every_rma = team.allreduce(np.sum(mine, axis=0))
    for g, rma in zip(plan.groups, mine, strict=True):
        g.rma_offset, g.rma = rma_id_offset(rma, every_rma), None
    spans = [s for part in team.allgather([g.span for g in plan.groups]) for s in part
             if s is not None]
    first = min(s[0] for s in spans) if spans else 0
    last = max(s[1] for s in spans) if spans else 0
    # the counters written anywhere in the run: every group numbers the metrics alike
    counters_used = frozenset[CounterUse]().union(*(c for part in team.allgather(
        [g.share.counters_used for g in plan.groups if g.share is not None]) for c in part))
    shares = team.gather(group_shares(plan.groups, ph.first_logs))

    def definitions() -> Definitions:
        with ph.clock.stage("emit"):
            flat = [i for part in shares or [] for i in part]
            whole = whole_run(plan.man, plan.layout, skeleton.decoded, flat, fit.node_maps,
                              mpi_reversed)
            intervals = {loc: v for i in flat for loc, v in i.sync_intervals.items()}
            spus = {loc: v for i in flat for loc, v in i.first_spu.items()}
            defs = build_definitions(whole.decoded, whole.sync, first, last, intervals,
                                     spus, counters_used)[0]
            return Definitions(defs, whole, counters_used)

    made = team.on_root("emit", definitions)
    defs = team.bcast(made.defs if made else None)
    assert defs is not None  # the root's, broadcast
    return Definitions(defs, made.whole if made else None, counters_used)


class WriteProgress:
    """The ``write`` stage's progress: events written of the groups' events, each group
    weighted by its records."""

    def __init__(self, progress: Progress | None, all_records: int) -> None:
        self.progress = progress
        self.all_records = max(1, all_records)
        self.events_before = 0  # events of the groups written before this one
        self.records_before = 0  # records of those groups
        self.size = 1  # events of the group being written
        self.weight = 0  # its records

    def on_write(self, done: int) -> None:
        if self.progress:
            part = min(1.0, (done - self.events_before) / max(1, self.size))
            self.progress("write", min(1.0, (self.records_before + part * self.weight)
                                       / self.all_records))

    def start(self, events: int, records: int) -> None:
        self.size, self.weight = events, records

    def done(self, events: int, records: int) -> None:
        self.events_before += events
        self.records_before += records


def write_groups(ph: Phases, plan: Plan, made: Definitions, tmp: Path, name: str
                 ) -> tuple[EmitStats, Written]:
    """Phase E: per group, forwards (the first is in memory), emit its events in pieces into
    the team's sink; returns this process's emit counts and what the sink wrote."""
    estats = EmitStats()
    shown = WriteProgress(ph.progress, sum(g.records for g in plan.groups))
    with ph.clock.stage("write"):
        written = ph.team.write(made.defs, emitted_groups(ph, plan, made.counters_used,
                                                          estats, shown), tmp, name,
                                shown.on_write)
    if ph.spill.written:
        ph.clock.add("spill", ph.spill.seconds, ph.spill.cpu_seconds)
    return estats, written


def emitted_groups(ph: Phases, plan: Plan, counters_used: frozenset[CounterUse],
                   estats: EmitStats, shown: WriteProgress) -> Iterator[EventGroup]:
    """Each group's locations and events, emitted as the writer asks for them (its time
    counted as emit's and the spill's, not the writer's); adds each group's counts to
    ``estats`` and drops the group once written."""
    clock, spill = ph.clock, ph.spill
    dma_style = ph.options.dma_style
    for g in plan.groups:
        t0, c0 = time.perf_counter(), time.process_time()
        s0, sc0 = spill.seconds, spill.cpu_seconds
        state = spill.get(g.index)
        dec = state.dec
        assert state.result is not None and g.share is not None  # synchronized
        mpi_paired = np.zeros(dec.records.size, dtype=bool)
        mpi_paired[g.paired] = True
        offset = g.rma_offset if dma_style == DmaStyle.RMA else None
        _, events, stats = emit(dec, state.matches, state.result, g.logs["emit"],
                                dma_style, mpi_paired=mpi_paired,
                                chunk_events=CHUNK_EVENTS, rma_id_offset=offset,
                                sync_intervals=g.share.sync_intervals,
                                span=g.span or (0, 0), counters_used=counters_used)
        del mpi_paired
        assert isinstance(events, EventChunks)  # asked for in pieces (``chunk_events``)
        events.reuse_buffer = True  # the writer is done with each piece before the next
        dec._cache.clear()  # the record groupings emit used
        locs = np.flatnonzero(np.isin(plan.layout.locations["rank"], g.ranks))
        # this runs inside the writer's call: emit's and the spill's time, not writing
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        clock.add("write", -wall, -cpu)
        clock.add("emit", wall - (spill.seconds - s0), cpu - (spill.cpu_seconds - sc0))
        shown.start(int(events.size), g.records)
        yield locs, events
        shown.done(int(events.size), g.records)
        # building the pieces (while the writer took them) is emit's work
        clock.add("emit", events.seconds, events.cpu_seconds)
        clock.add("write", -events.seconds, -events.cpu_seconds)
        estats.add(stats)
        del state, dec, events, stats
        spill.drop(g.index)


@dataclass
class ProcessTotals:
    """What each process sends the root for the summary."""

    shares: list[GroupShare]
    estats: EmitStats
    wall: dict[str, float]
    cpu: dict[str, float]
    handed: tuple[int, int]


def summarize(ph: Phases, plan: Plan, made: Definitions, fit: ClockFit,
              estats: EmitStats, written: Written) -> RootResult | None:
    """The summary and the whole run's damage, on the root, from every process's totals."""
    whole, defs = made.whole, made.defs
    parts = ph.team.gather(ProcessTotals(group_shares(plan.groups, ph.first_logs), estats,
                                         dict(ph.clock.wall), dict(ph.clock.cpu),
                                         ph.team.handed))
    if parts is None:  # not the root
        return None
    assert whole is not None and fit.state is not None  # the root's
    flat = [i for part in parts for i in part.shares]
    whole.damage = merge_damage(plan.layout, flat)
    total_stats = EmitStats()
    for part in parts:
        total_stats.add(part.estats)
    total_stats.by_type = {k: total_stats.by_type[k]
                           for k in sorted(total_stats.by_type, key=Ev.__getitem__)}
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for part in parts:  # per stage, the slowest process
        for k, v in part.wall.items():
            wall[k] = max(wall.get(k, v), v)
        for k, v in part.cpu.items():
            cpu[k] = max(cpu.get(k, v), v)
    n_events = int(np.asarray(written.events_per_location).sum())
    messages = sum(i.messages for i in flat) + int(fit.state.messages.size)
    summary = build_summary(whole, "", "", n_events, len(defs.locations), total_stats, wall,
                            messages)
    summary.stage_cpu_seconds = cpu
    summary.locations_handed_over = sum(p.handed[0] for p in parts)
    summary.events_handed_over = sum(p.handed[1] for p in parts)
    return RootResult(summary, whole)


def _split(values: list[T], sizes: list[int]) -> list[list[T]]:
    """``values`` (one per group of every process, process by process) cut into each
    process's list."""
    out, at = [], 0
    for n in sizes:
        out.append(values[at:at + n])
        at += n
    return out


#: damage stages run once for the whole run, not per group
_ONCE = ("read", "layout", "mpi")


def group_shares(groups: list[Group], first_logs: dict[str, DamageLog]) -> list[GroupShare]:
    """Each group's ``GroupShare`` with its damage, as ``whole_run`` and ``merge_damage``
    take them; what the whole run found at once (reading, layout, MPI pairing) counts as the
    first group's."""
    out = []
    for g in groups:
        assert g.share is not None  # synchronized
        logs = {s: (first_logs[s] if g.index == 0 and s in _ONCE else log)
                for s, log in g.logs.items()}
        out.append(g.share.with_damage({s: log.entries() for s, log in logs.items()}))
    return out
