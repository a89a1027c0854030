"""The conversion node group by node group (serial, and each process of a parallel one): peak
memory follows the largest group of nodes, not the whole run.

``convert.convert`` converts here when no MPI launch is found (``convert_streamed``), and so
does every process of a parallel conversion over its share of the nodes (``parallel.py``):
``convert_groups`` asks its collectives of a team, ``Alone`` here, ``parallel.Team`` under
MPI, where "every group" below means every group of every process:

A. read every dump once (summaries, the run's location layout); then per group: decode its
   dumps (reading each again, one at a time), match all but MPI, keep its MPI records;
B. pair every MPI record of the run and fit the node clocks (``whole_run.match_mpi``);
C. per group: order constraints (with its within-node MPI pairs), synchronize its nodes, give
   its records their times; keep its interval bounds, span, counts and the usable flags of its
   MPI records;
D. which MPI records have both ends usable (``whole_run.paired_mpi``), RMA id offsets, the whole
   run's definitions (``emit.build_definitions``; counts come from the writer);
E. per group: emit its events in pieces and write its locations' event files into the one
   archive (``writer.events.EventGroups``); then the global definitions, summary and report.

Only one group's decoded state (records, anchors, matches, sync arrays) is in memory at a
time; the others wait in files (``Spill``) in a directory inside the output's staging
directory, which is removed with it on success, error and Ctrl-C (a SIGKILL leaves the
staging directory behind, as ``output.py`` says). The record table, most of a group's state,
is a shared mapping of its file from decoding on, so setting a group aside writes only the
smaller arrays (``np.save``); it needs disk space of about 2.5 times the dumps. Re-decoding a
group instead would cost about as much as its first decoding (reading included), for each of
phases C and E.

Groups (``node_groups``): nodes in order, consecutive nodes merged while their dumps total at
most ``GROUP_BYTES`` (``GROUP_BYTES`` / P per process of a parallel conversion of P); a run of
at most ``IN_MEMORY_BYTES`` of dumps is one group (each process's share one group in
parallel: converted in memory, no spill space needed); a run that fits in one group never
touches the disk. Phase C
runs the groups backwards and E forwards, so the group used last stays in memory: G groups
cost G - 1 spills written and read back twice.

The archive is the in-memory conversion's (``convert.analyze``, then emit and write), byte
for byte, and so are the summary's numbers and the report; its damage lines too, except that
kinds first found in the same stage in different groups may be listed in another order (as
in ``parallel.py``).
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from .damage import DamageLog
from .decode import Decoded, RunLayout, build_locations, decode
from .dumps import Dumps, read_summaries
from .emit.definitions import build_definitions
from .emit.events import EmitStats, emit
from .errors import OutputError
from .manifest import Manifest, load_manifest
from .match import Matches, match
from .model import RECORD_DTYPE, DmaStyle, Ev
from .order import Constraints, build_constraints
from .output import ArchiveTarget
from .summary import build_summary, sync_report
from .timing import SyncResult, apply_times, synchronize
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


#: nodes are grouped while their dumps total at most this many bytes (a larger node is a
#: group of its own); a group's decoded state takes about 2.5 times its dumps' size
GROUP_BYTES = 64 << 20
#: a run whose dumps total at most this many bytes is converted as one group, never spilled:
#: it needs no spill space on disk (about 2.5 x the input otherwise) and saves the spill's
#: few percent of time; its peak memory is then about 4.5 x its dumps (2.3 GB at this size)
IN_MEMORY_BYTES = 512 << 20


def node_groups(man: Manifest, dump_bytes: list[int], limit: int = GROUP_BYTES,
                ranks: list[int] | None = None) -> list[list[int]]:
    """Ranks (ascending) of each group: whole nodes in node order, consecutive nodes merged
    while their dumps total at most ``limit`` bytes. Nodes without ranks are in no group.
    ``ranks``: only these ranks (whole nodes: a converter process's share) are grouped."""
    keep = None if ranks is None else set(ranks)
    ranks_of: list[list[int]] = [[] for _ in man.nodes]
    for p in man.processes:
        if keep is None or p.rank in keep:
            ranks_of[man.node_of_rank(p.rank)].append(p.rank)
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for ranks in ranks_of:
        if not ranks:
            continue
        weight = sum(dump_bytes[r] for r in ranks)
        if current and size + weight > limit:
            groups.append(sorted(current))
            current, size = [], 0
        current += ranks
        size += weight
    if current:
        groups.append(sorted(current))
    return groups


# --------------------------------------------------------------------------------------------
# one group's state, in memory or spilled
# --------------------------------------------------------------------------------------------


@dataclass
class _State:
    """What a group holds between phases."""

    dec: Decoded
    matches: Matches
    result: SyncResult | None = None
    timed: bool = False  # ``dec.records['time']`` is filled


_ARRAYS = {
    "dec": ("records", "anchors", "domains", "links", "loss_epoch", "loss_cut"),
    "matches": ("messages", "dma", "pairs", "node_pairs"),
    "result": ("offset", "lower", "upper", "bounded", "usable"),
}
#: arrays no phase changes once made: a copy on disk stays valid after loading (the records'
#: times excepted, which are saved apart once set)
_STABLE = frozenset({"records", "domains", "links", "loss_cut", "messages", "dma"})


class Spill:
    """Each group's ``_State``: in memory for the group being worked on (``get``/``put``),
    in ``.npy`` files under ``directory`` for the others (made on first use; ``close``
    removes it). Whatever is not an array (counts, the manifest, the layout shared by every
    group) stays in memory. ``seconds`` / ``cpu_seconds``: time spent writing and reading.

    A group's record table, most of its state, can be a shared mapping of a file from the
    start (``record_table``, given to ``decode``): spilling it then copies nothing, its pages
    simply leave the process (they stay in the page cache, or go to disk under memory
    pressure), and loading it maps the file again. Copying it out instead costs a second page
    for every page of the table (on the project's VM, fresh pages are the expensive part).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hot: tuple[int, _State] | None = None
        self.valid: dict[int, set[str]] = {}  # per group: files that hold the current arrays
        self.rest: dict[int, dict] = {}  # per spilled group: everything but the arrays
        self.mapped: dict[int, int] = {}  # per group with a mapped record table: its rows
        self.seconds = self.cpu_seconds = 0.0
        self.written = 0  # bytes

    def record_table(self, g: int) -> Callable[[int], np.ndarray]:
        """``decode``'s ``allocate`` for group ``g``: the record table as a shared mapping of
        the file ``records.bin`` in its spill directory (zeroed: a fresh sparse file)."""

        def allocate(n: int) -> np.ndarray:
            if n == 0:
                return np.zeros(0, RECORD_DTYPE)
            path = self._dir(g) / "records.bin"
            with self._failing(path):
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "w+b") as f:
                    try:  # blocks reserved now: a full disk is an error here, not a SIGBUS
                        os.posix_fallocate(f.fileno(), 0, n * RECORD_DTYPE.itemsize)
                    except OSError as exc:
                        if exc.errno == errno.ENOSPC:
                            raise
                        return np.zeros(n, RECORD_DTYPE)  # no fallocate here: not mapped
            self.mapped[g] = n
            self.valid.setdefault(g, set())
            return self._map(g)

        return allocate

    @contextmanager
    def _failing(self, path: Path) -> Iterator[None]:
        """An ``OSError`` of the spill as the ``OutputError`` it is."""
        try:
            yield
        except OSError as exc:
            raise OutputError(
                f"{path}: cannot set a group of nodes aside while converting: "
                f"{exc.strerror or exc} (the conversion needs free space of about 2.5 times "
                "the run's dumps next to the output)") from exc

    def _map(self, g: int) -> np.ndarray:
        n = self.mapped[g]
        path = self._dir(g) / "records.bin"
        with self._failing(path), open(path, "r+b") as f:
            mapping = mmap.mmap(f.fileno(), n * RECORD_DTYPE.itemsize)
        return np.frombuffer(mapping, RECORD_DTYPE, n)  # unmapped with its last view

    def put(self, g: int, state: _State) -> None:
        """``state`` is group ``g``'s now (the one in memory)."""
        if self.hot is not None and self.hot[0] != g:
            raise RuntimeError("one group in memory at a time: evict the other first")
        self.hot = (g, state)

    def evict(self) -> None:
        """Spill the group in memory, if any."""
        if self.hot is not None:
            g, state = self.hot
            self.hot = None
            with self._timed():
                self._save(g, state)

    def get(self, g: int) -> _State:
        """Group ``g``'s state, loaded after spilling the one in memory if that is another."""
        if self.hot is not None and self.hot[0] == g:
            return self.hot[1]
        self.evict()
        with self._timed():
            state = self._load(g)
        self.hot = (g, state)
        return state

    def drop(self, g: int) -> None:
        """Group ``g`` is done: forget it, in memory and on disk."""
        if self.hot is not None and self.hot[0] == g:
            self.hot = None
        self.rest.pop(g, None)
        if self.valid.pop(g, None) is not None:
            shutil.rmtree(self._dir(g), ignore_errors=True)

    def close(self) -> None:
        self.hot = None
        shutil.rmtree(self.directory, ignore_errors=True)

    # ----------------------------------------------------------------------------------------

    @contextmanager
    def _timed(self) -> Iterator[None]:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - t0
            self.cpu_seconds += time.process_time() - c0

    def _dir(self, g: int) -> Path:
        return self.directory / f"group{g}"

    def _save(self, g: int, state: _State) -> None:
        where = self._dir(g)
        with self._failing(where):
            where.mkdir(parents=True, exist_ok=True)
        valid = self.valid.setdefault(g, set())
        rest: dict = {"timed": state.timed, "none": set()}
        for part, names in _ARRAYS.items():
            obj = getattr(state, part)
            if obj is None:
                rest[part] = None
                continue
            rest[part] = {f.name: getattr(obj, f.name) for f in fields(obj)
                          if f.name not in names and f.name != "_cache"}
            for name in names:
                value = getattr(obj, name)
                if value is None:
                    rest["none"].add(name)
                elif name == "records" and g in self.mapped:
                    continue  # the file's pages: nothing to write
                elif not (name in valid and name in _STABLE):
                    self._write(where, name, value)
                    valid.add(name)
        if state.timed and g not in self.mapped:
            self._write(where, "time", state.dec.records["time"])
            valid.add("time")
        self.rest[g] = rest

    def _write(self, where: Path, name: str, value: np.ndarray) -> None:
        with self._failing(where / f"{name}.npy"):
            np.save(where / f"{name}.npy", value, allow_pickle=False)
        self.written += int(value.nbytes)

    def _load(self, g: int) -> _State:
        with self._failing(self._dir(g)):
            return self._read(g)

    def _read(self, g: int) -> _State:
        where = self._dir(g)
        rest = self.rest.pop(g)

        def build(part: str, cls):
            if rest[part] is None:
                return None
            arrays = {name: None if name in rest["none"]
                      else self._map(g) if name == "records" and g in self.mapped
                      else np.load(where / f"{name}.npy") for name in _ARRAYS[part]}
            return cls(**rest[part], **arrays)

        dec = build("dec", Decoded)
        if rest["timed"] and g not in self.mapped:
            dec.records["time"] = np.load(where / "time.npy")
        return _State(dec, build("matches", Matches), build("result", SyncResult),
                      rest["timed"])


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


class Alone:
    """The one process of a serial conversion, as ``convert_groups`` asks a team of converter
    processes (``parallel.Team`` under MPI): every collective is the identity."""

    rank, size = 0, 1
    handed = (0, 0)  # nothing is handed to another process

    def run(self, _step: str, fn: Callable[[], Any]) -> Any:
        return fn()

    def gather(self, value: Any) -> list:
        return [value]

    allgather = gather

    def bcast(self, value: Any) -> Any:
        return value

    def scatter(self, values: list) -> Any:
        return values[0]

    def allreduce(self, value: Any) -> Any:
        return value

    def my_ranks(self, man: Manifest, dump_bytes: list[int]) -> list[int]:
        return [p.rank for p in man.processes]

    def layout(self, man: Manifest, summaries: list, damage: DamageLog) -> RunLayout:
        locations, contexts, _ = build_locations(man, summaries, damage)
        return RunLayout(locations, contexts, [d.name for d in summaries],
                         [d.spe_buffer_records for d in summaries])

    def write(self, defs, own: Iterator, tmp: Path, name: str, on_write):
        from .writer.archive import write_archive  # the only importer of otf2
        from .writer.events import EventGroups

        return write_archive(defs, EventGroups(own), tmp, name, progress=on_write)


def convert_streamed(run_dir, target: ArchiveTarget, archive: str, wall0: float,
                     dma_style: DmaStyle, alpha: float, report, order_options, progress,
                     group_bytes: int | None = None):
    """``convert.convert``'s serial conversion (the output target prepared); returns the
    summary. ``group_bytes``: ``node_groups``' limit (None: ``GROUP_BYTES`` when the dumps
    total more than ``IN_MEMORY_BYTES``, else the whole run as one group)."""
    clock = StageClock(progress)
    with target.staged() as tmp:
        spill = Spill(Path(tmp) / ".spill")
        try:
            summary, whole = convert_groups(Alone(), Path(run_dir), Path(tmp), target.name,
                                            clock, spill, DmaStyle(dma_style), alpha,
                                            order_options, progress, group_bytes,
                                            pairs=report is not None)
        finally:
            spill.close()
        if report is not None:  # moved into place with the archive
            target.stage_report(json.dumps(sync_report(whole), indent=1) + "\n")
    summary.run_dir, summary.archive = str(run_dir), archive
    summary.wall_seconds = time.perf_counter() - wall0
    return summary


def _split(values: list, sizes: list[int]) -> list[list]:
    """``values`` (one per group of every process, process by process) cut into each
    process's list."""
    out, at = [], 0
    for n in sizes:
        out.append(values[at:at + n])
        at += n
    return out


def convert_groups(team, run_dir: Path, tmp: Path, name: str, clock: StageClock, spill: Spill,
                   dma_style: DmaStyle, alpha: float, order_options, progress,
                   group_bytes: int | None, *, pairs: bool = True):
    """Phases A-E over this process's groups of nodes; the collectives go through ``team``
    (``Alone``, or ``parallel.Team``: each process then holds the nodes ``parallel.partition``
    gives it). Returns (summary, whole-run ``Pipeline``) on process 0, (None, None) on the
    others. ``group_bytes``: as ``convert_streamed``'s (None: groups of ``GROUP_BYTES`` /
    processes when the run's dumps total more than ``IN_MEMORY_BYTES``, else one group).
    ``pairs``: compute the report's pair figures (``timing.pair_table``; only for a report)."""
    root = team.rank == 0
    first_logs = {s: DamageLog() for s in STAGES}  # what this process finds at once

    # A. read, layout; per group decode and match all but MPI
    def plan():
        with clock.stage("read"):
            return load_manifest(run_dir)

    man = team.run("read", plan)
    sizes = team.bcast(dump_bytes(man) if root else None)
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
            spill.put(g.index, _State(dec, matches))
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

    fitted = team.run("mpi", fit if root else lambda: None)
    mpi_parts = None
    node_maps = team.bcast(fitted[0] if root else None)
    pairs = team.scatter(fitted[1] if root else None)
    mpi_state = fitted[2] if root else None
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
                result.solutions = []
                g.good, g.span, g.info = share_after_sync(dec, matches, cons, result, pairs)
                result.constraints = None  # the report's pairs are in g.info
                cons = drop_analysis(dec, matches, cons)
                g.rma = rma_transfers(dec, matches, result.usable)
            spill.put(g.index, _State(dec, matches, result, timed=True))
            del state, dec, matches, result, cons
            if progress:
                progress("sync", (len(groups) - g.index) / len(groups))

    team.run("sync", sync_groups)

    # D. MPI pairs usable at both ends, RMA ids, the whole run's definitions (process 0)
    goods = team.gather([g.good for g in groups])

    def pair_up():
        with clock.stage("emit"):
            return _split(paired_mpi(mpi_state, [x for part in goods for x in part]), n_groups)

    paired = team.scatter(team.run("emit", pair_up if root else lambda: None))
    goods = None
    every = team.allreduce(np.sum([g.rma for g in groups], axis=0))
    spans = [s for part in team.allgather([g.span for g in groups]) for s in part
             if s is not None]
    first = min(s[0] for s in spans) if spans else 0
    last = max(s[1] for s in spans) if spans else 0
    infos = team.gather(_infos(groups, first_logs))

    def definitions():
        with clock.stage("emit"):
            flat = [i for part in infos for i in part]
            whole = whole_run(man, layout, made["skeleton"], flat, node_maps)
            intervals = {loc: v for i in flat for loc, v in i["sync_intervals"].items()}
            spus = {loc: v for i in flat for loc, v in i["first_spu"].items()}
            return whole, build_definitions(whole.decoded, whole.sync, first, last,
                                            intervals, spus)[0]

    whole, defs = team.run("emit", definitions if root else lambda: (None, None))
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
                                    sync_intervals=g.info["sync_intervals"])
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
    if not root:
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
