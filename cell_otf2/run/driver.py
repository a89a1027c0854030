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
from typing import Any

import numpy as np

from ..damage import DamageLog
from ..decode.decoder import decode
from ..decode.match import match
from ..emit.definitions import build_definitions
from ..emit.events import EmitStats, emit
from ..input.dumps import Dumps, read_summaries
from ..input.manifest import load_manifest
from ..model import Constraints, Decoded, DmaStyle, Ev, Matches
from ..sync.order import build_constraints
from ..sync.synchronize import apply_times, synchronize, written_order_violations
from .node_groups import GROUP_BYTES, IN_MEMORY_BYTES, node_groups
from .spill import GroupState, Spill
from .summary import build_summary
from .whole_run import (
    STAGES,
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
# the conversion
# --------------------------------------------------------------------------------------------


@dataclass
class _Group:
    """One group of nodes and what the conversion keeps of it from phase to phase."""

    index: int
    ranks: list[int]
    logs: dict[str, DamageLog] = field(default_factory=lambda: {s: DamageLog() for s in STAGES})
    records: int = 0  # decoded records
    mpi: tuple | None = None  # its MPI records (A -> B)
    good: np.ndarray | None = None  # usable flags of its MPI records (C -> D)
    rma: np.ndarray | None = None  # its RMA transfers per rank (C -> E)
    span: tuple[int, int] | None = None
    info: dict = field(default_factory=dict)  # ``whole_run.whole_run``'s per-part values


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


def _split(values: list, sizes: list[int]) -> list[list]:
    """``values`` (one per group of every process, process by process) cut into each
    process's list."""
    out, at = [], 0
    for n in sizes:
        out.append(values[at:at + n])
        at += n
    return out


def run_phases(team, run_dir: Path, tmp: Path, name: str, clock: StageClock, spill: Spill,
                   dma_style: DmaStyle, alpha: float, order_options, progress,
                   group_bytes: int | None, *, report_pairs: bool = True):
    """The phases over this process's groups of nodes (its share under ``team_mpi``):

    A. read every dump once (summaries, the location layout); per group decode its dumps
       (reading each again) and match all but MPI, keeping its MPI records;
    B. on the root: pair every MPI record of the run and fit the node clocks;
    C. per group, backwards (the last decoded is still in memory): order constraints,
       synchronize, give records their times;
    D. on the root: which MPI records have both ends usable, RMA ids, the definitions;
    E. per group, forwards: emit its events in pieces into ``team.write`` (the sink);
       then the summary.

    Returns (summary, whole-run ``Pipeline``) on the root, (None, None) elsewhere.
    ``group_bytes``: ``node_groups``' limit (None: ``GROUP_BYTES`` / processes when the
    dumps total more than ``IN_MEMORY_BYTES``, else one group). ``report_pairs``: compute
    the sync report's pair figures (``synchronize.pair_table``; only a report needs them)."""
    first_logs = {s: DamageLog() for s in STAGES}  # what this process finds at once

    # A. read, layout; per group decode and match all but MPI
    def plan():
        with clock.stage("read"):
            return load_manifest(run_dir)

    man = team.run("read", plan)
    sizes = team.from_root(lambda: dump_bytes(man))
    my_ranks = team.my_ranks(man, sizes)

    def read():
        with clock.stage("read"):
            return read_summaries(man, first_logs["read"], progress, my_ranks)

    summaries = team.run("read", read)
    total = sum(sizes)
    if group_bytes is None:
        group_bytes = (max(1, GROUP_BYTES // team.size) if total > IN_MEMORY_BYTES
                       else max(1, total))
    groups = [_Group(i, ranks) for i, ranks in
              enumerate(node_groups(man, sizes, group_bytes, my_ranks) or [[]])]
    with clock.stage("decode"):
        layout = team.layout(man, summaries, first_logs["layout"])
    by_rank = dict(zip(my_ranks, summaries, strict=True))
    del summaries
    made: dict[str, Any] = {}

    def decode_groups() -> None:
        for g in groups:
            spill.evict()
            with clock.stage("decode"):
                mine = [by_rank[r] for r in g.ranks]
                dumps = Dumps(man, mine, g.ranks)
                dec = decode(man, dumps, g.logs["decode"], layout=layout, release=True,
                             summaries=mine, allocate=(spill.record_table(g.index)
                                                       if len(groups) > 1 else None))
                matches = match(dec, g.logs["match"], mpi=False)
                g.mpi = mpi_subset(dec)
                g.records = int(dec.records.size)
            clock.add("read", dumps.seconds, dumps.cpu_seconds)  # the second reading
            clock.add("decode", -dumps.seconds, -dumps.cpu_seconds)
            if "skeleton" not in made:
                made["node_domains"] = dec.domains[: dec.n_nodes].copy()
                made["skeleton"] = Decoded(
                    man, layout.dump_names, layout.spe_buffer_records, layout.locations,
                    layout.contexts, dec.records[:0].copy(), dec.anchors[:0].copy(),
                    made["node_domains"], dec.links[:0].copy(), dec.n_nodes)
            spill.put(g.index, GroupState(dec, matches))
            del dec, matches, dumps
            if progress:
                progress("decode", (g.index + 1) / len(groups))

    team.run("decode", decode_groups)
    by_rank.clear()
    n_groups = team.allgather(len(groups))  # per process

    # B. MPI over every group of every process, node clock fit (process 0)
    mpi_parts = team.gather([g.mpi for g in groups])
    for g in groups:
        g.mpi = None
    if progress:
        progress("sync", 0.0)

    def fit():
        with clock.stage("mpi"):
            flat = [m for part in mpi_parts for m in part]
            node_maps, pairs, state = match_mpi(man, layout, made["node_domains"], flat,
                                                 first_logs["mpi"])
            return node_maps, _split(pairs, n_groups), state

    fitted = team.on_root("mpi", fit)  # None but on the root
    mpi_parts = None
    node_maps = team.bcast(fitted and fitted[0])
    pairs = team.scatter(fitted and fitted[1])
    mpi_state = fitted and fitted[2]
    fitted = None

    # C. per group (backwards: the last decoded is still in memory): order, sync, times
    def sync_groups() -> None:
        for g in reversed(groups):
            state = spill.get(g.index)
            dec, matches = state.dec, state.matches
            with clock.stage("order"):
                matches.pairs = np.concatenate([matches.pairs, pairs[g.index]])
                cons = build_constraints(dec, matches, order_options)
            with clock.stage("sync"):
                result = synchronize(dec, cons, alpha=alpha, damage=g.logs["sync"],
                                     node_maps=node_maps)
                apply_times(dec, result, g.logs["sync"])
                result.order_violations = written_order_violations(dec, matches,
                                                                   result.usable)
                result.solutions = []
                g.good, g.span, g.info = share_after_sync(dec, matches, cons, result,
                                                            pairs=report_pairs)
                result.constraints = None  # the report's pairs are in g.info
                cons = drop_analysis(dec, matches, cons)
                g.rma = rma_transfers(dec, matches, result.usable)
            spill.put(g.index, GroupState(dec, matches, result, timed=True))
            del state, dec, matches, result, cons
            if progress:
                progress("sync", (len(groups) - g.index) / len(groups))

    team.run("sync", sync_groups)

    # D. MPI pairs usable at both ends, RMA ids, the whole run's definitions (process 0)
    goods = team.gather([g.good for g in groups])

    def pair_up():
        with clock.stage("emit"):
            paired, made["mpi_reversed"] = paired_mpi(mpi_state,
                                                     [x for part in goods for x in part])
            return _split(paired, n_groups)

    paired = team.scatter(team.on_root("emit", pair_up))
    goods = None
    every = team.allreduce(np.sum([g.rma for g in groups], axis=0))
    spans = [s for part in team.allgather([g.span for g in groups]) for s in part
             if s is not None]
    first = min(s[0] for s in spans) if spans else 0
    last = max(s[1] for s in spans) if spans else 0
    # the counters written anywhere in the run: every group numbers the metrics alike
    counters_used = frozenset().union(*(c for part in team.allgather(
        [g.info["counters_used"] for g in groups]) for c in part))
    infos = team.gather(_infos(groups, first_logs))

    def definitions():
        with clock.stage("emit"):
            flat = [i for part in infos for i in part]
            whole = whole_run(man, layout, made["skeleton"], flat, node_maps,
                              made["mpi_reversed"])
            intervals = {loc: v for i in flat for loc, v in i["sync_intervals"].items()}
            spus = {loc: v for i in flat for loc, v in i["first_spu"].items()}
            return whole, build_definitions(whole.decoded, whole.sync, first, last,
                                            intervals, spus, counters_used)[0]

    whole, defs = team.on_root("emit", definitions) or (None, None)
    defs = team.bcast(defs)  # the writer checks every process's events against them
    infos = None

    # E. per group (forwards: the first is in memory): emit and write its locations
    estats = EmitStats()
    # progress: events written of the groups' events, each group weighted by its records
    at = {"events": 0, "size": 1, "records": 0, "weight": 0}
    all_records = max(1, sum(g.records for g in groups))

    def on_write(done: int) -> None:
        if progress:
            part = min(1.0, (done - at["events"]) / max(1, at["size"]))
            progress("write", min(1.0, (at["records"] + part * at["weight"]) / all_records))

    def event_groups():
        for g in groups:
            t0, c0 = time.perf_counter(), time.process_time()
            s0, sc0 = spill.seconds, spill.cpu_seconds
            state = spill.get(g.index)
            dec = state.dec
            mpi_paired = np.zeros(dec.records.size, dtype=bool)
            mpi_paired[paired[g.index]] = True
            offset = (rma_id_offset(g.rma, every) if dma_style == DmaStyle.RMA else None)
            _, events, stats = emit(dec, state.matches, state.result, g.logs["emit"],
                                    dma_style, mpi_paired=mpi_paired,
                                    chunk_events=CHUNK_EVENTS, rma_id_offset=offset,
                                    sync_intervals=g.info["sync_intervals"],
                                    span=g.span or (0, 0), counters_used=counters_used)
            del mpi_paired
            events.reuse_buffer = True  # the writer is done with each piece before the next
            dec._cache.clear()  # the record groupings emit used
            locs = np.flatnonzero(np.isin(layout.locations["rank"], g.ranks))
            # this runs inside the writer's call: emit's and the spill's time, not writing
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            clock.add("write", -wall, -cpu)
            clock.add("emit", wall - (spill.seconds - s0), cpu - (spill.cpu_seconds - sc0))
            at["size"], at["weight"] = int(events.size), g.records
            yield locs, events
            at["events"] += int(events.size)
            at["records"] += g.records
            # building the pieces (while the writer took them) is emit's work
            clock.add("emit", events.seconds, events.cpu_seconds)
            clock.add("write", -events.seconds, -events.cpu_seconds)
            estats.add(stats)
            del state, dec, events, stats
            spill.drop(g.index)

    with clock.stage("write"):
        written = team.write(defs, event_groups(), tmp, name, on_write)
    if spill.written:
        clock.add("spill", spill.seconds, spill.cpu_seconds)

    # the summary and the report (process 0)
    parts = team.gather((_infos(groups, first_logs), estats, dict(clock.wall), dict(clock.cpu),
                         team.handed))
    if parts is None:  # not the root
        return None, None
    flat = [i for part in parts for i in part[0]]
    whole.damage = merge_damage(layout, flat)
    total_stats = EmitStats()
    for _, st, *_rest in parts:
        total_stats.add(st)
    total_stats.by_type = {k: total_stats.by_type[k]
                           for k in sorted(total_stats.by_type, key=Ev.__getitem__)}
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for _, _, w, c, _ in parts:  # per stage, the slowest process
        for k, v in w.items():
            wall[k] = max(wall.get(k, v), v)
        for k, v in c.items():
            cpu[k] = max(cpu.get(k, v), v)
    n_events = int(np.asarray(written.events_per_location).sum())
    summary = build_summary(whole, "", "", n_events, total_stats, wall)
    summary.locations = len(defs.locations)  # the archive's: its METRIC locations too
    summary.messages_matched = (sum(i["messages"] for i in flat)
                                + int(mpi_state.messages.size))
    summary.stage_cpu_seconds = cpu
    summary.locations_handed_over = sum(p[4][0] for p in parts)
    summary.events_handed_over = sum(p[4][1] for p in parts)
    return summary, whole


#: damage stages run once for the whole run, not per group
_ONCE = ("read", "layout", "mpi")


def _infos(groups: list[_Group], first_logs: dict[str, DamageLog]) -> list[dict]:
    """Each group's values as ``whole_run.whole_run`` and ``merge_damage`` take them; what
    the whole run found at once (reading, layout, MPI pairing) counts as the first group's."""
    out = []
    for g in groups:
        logs = {s: (first_logs[s] if g.index == 0 and s in _ONCE else log)
                for s, log in g.logs.items()}
        out.append({**g.info, "damage": {s: log.entries() for s, log in logs.items()}})
    return out
