"""The conversion pipeline: run directory -> OTF2 archive, with its summary and sync report.

read (manifest, dumps) -> decode -> match -> order -> sync -> apply times -> emit -> write,
each stage timed; contained damage collected in one ``DamageLog``. Output is written through
``output.ArchiveTarget`` so nothing half-written is ever left at the output path.
``convert`` is also the Python API (``cell_otf2.convert``). ``analyze`` runs the stages up to
the record times on the whole run at once (for tests, benchmarks, ``check``); ``convert``
runs them group of nodes by group of nodes (``stream.py``, or ``parallel.py`` under an MPI
launch), which gives the same archive with memory bounded by the largest group.

It prints nothing: progress goes through the ``progress`` callback, the summary is returned.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .damage import DamageLog
from .decode import Decoded, decode, summarize
from .emit import DmaStyle
from .errors import FormatError
from .manifest import load_manifest
from .match import Matches, match
from .model import DomainKind
from .nodefit import fitted_node_maps
from .order import Constraints, OrderOptions, build_constraints
from .output import ArchiveTarget, RunInputs
from .reader import read_dump
from .timing import SyncResult, apply_times, pair_table, synchronize

Progress = Callable[[str, float], None]  # (stage, fraction done of that stage)

#: events per piece of the event table handed to the writer (bounds emit's memory)
CHUNK_EVENTS = 1 << 16


@dataclass
class Summary:
    """What one conversion did (the command line's summary)."""

    run_dir: str
    archive: str
    processes: int = 0
    locations: int = 0
    records_in: int = 0
    events_written: int = 0
    messages_matched: int = 0
    dma_transfers: int = 0
    dma_completed: int = 0
    intervals: int = 0
    intervals_bounded: int = 0
    bound_worst_ticks: float = 0.0
    bound_mean_ticks: float = 0.0
    bound_worst_us: float = 0.0
    bound_mean_us: float = 0.0
    relaxation_ticks: float = 0.0
    order_violations: int = 0
    heartbeats: int = 0
    lost_slots: int = 0
    lost_blocks: int = 0
    damage: list[str] = field(default_factory=list)
    events_by_type: dict[str, int] = field(default_factory=dict)  # Ev name -> events written
    stage_seconds: dict[str, float] = field(default_factory=dict)
    stage_cpu_seconds: dict[str, float] = field(default_factory=dict)  # CPU time per stage
    wall_seconds: float = 0.0
    converter_processes: int = 1  # MPI processes that converted (``parallel.py``)
    #: locations (and their events) a converter process handed to a less busy one while
    #: writing (``write_share.py``)
    locations_handed_over: int = 0
    events_handed_over: int = 0
    rank: int = 0  # the converter process this copy was returned to; only rank 0 prints
    #: every node but the reference's that hosts a process: name, method (``NodeMap``),
    #: bound_ticks and bound_us (None: unknown)
    nodes: list[dict] = field(default_factory=list)
    #: nodes placed only by the manifest's start readings (NTP-accurate at best): unusable
    #: input unless ``accept_unsynchronized_nodes``
    unsynchronized_nodes: list[str] = field(default_factory=list)
    accept_unsynchronized_nodes: bool = False

    @property
    def lossy(self) -> bool:
        return bool(self.damage) or bool(self.unsynchronized_nodes
                                         and not self.accept_unsynchronized_nodes)

    def to_dict(self) -> dict:
        """Every field (JSON-ready) plus ``lossy``; ``damage`` holds the summary's lines."""
        from dataclasses import asdict

        out = asdict(self)
        out["lossy"] = self.lossy
        return out

    def lines(self) -> list[str]:
        out = [
            f"cell2otf2: {self.run_dir} -> {self.archive}",
            f"  {plural(self.processes, 'process')}, {plural(self.locations, 'location')}, "
            f"{plural(self.records_in, 'record')} read, "
            f"{plural(self.events_written, 'event')} written",
            f"  {plural(self.messages_matched, 'message')} matched (mailbox, signal, MPI), "
            f"{plural(self.dma_transfers, 'DMA transfer')} ({self.dma_completed} completed at "
            "a tag wait)",
            f"  clock intervals synchronized {self.intervals_bounded} of {self.intervals}; "
            f"relaxation {self.relaxation_ticks:.2f} ticks; "
            f"{plural(self.order_violations, 'order violation')}",
            f"  bound worst {self.bound_worst_ticks:.1f} ticks ({self.bound_worst_us:.3f} us), "
            f"mean {self.bound_mean_ticks:.1f} ticks ({self.bound_mean_us:.3f} us)",
        ]
        accepted = " (accepted)" if self.accept_unsynchronized_nodes else ""
        out.extend(_node_line(n) + (accepted if n["method"] == "start-times" else "")
                   for n in self.nodes)
        unusable = list(self.damage)
        if self.unsynchronized_nodes and not accepted:
            names = self.unsynchronized_nodes
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3
                                            else "")
            unusable.append(f"unsynchronized_node: {shown} by start readings only\n"
                            "      (exit 1; --accept-unsynchronized-nodes accepts them)")
        if unusable:
            out.append(f"  lost or unusable input ({plural(len(unusable), 'kind')}):")
            out.extend(f"    {part}" if i == 0 else part for line in unusable
                       for i, part in enumerate(line.split("\n")))
        else:
            out.append("  lost or unusable records: none")
        out = out[:1] + [wrapped for line in out[1:] for wrapped in _fit(line)]  # [0]: paths
        if self.converter_processes > 1:
            handed = (f"; {self.locations_handed_over} locations ({self.events_handed_over} "
                      "events) handed to a less busy process while writing"
                      if self.locations_handed_over else "")
            out.append(f"  on {self.converter_processes} converter processes{handed}")
        stages = ", ".join(f"{k} {v:.2f}" for k, v in self.stage_seconds.items())
        out.append(f"  wall time {self.wall_seconds:.2f}s ({stages} s)")  # one line: parsed
        return out


#: the summary's lines are wrapped to this many columns
SUMMARY_COLUMNS = 100


def plural(n: int, noun: str) -> str:
    """``1 process``, ``2 processes``, ``1 DMA transfer``, ``0 order violations``."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun}es" if noun.endswith(("s", "x", "ch", "sh")) else f"{n} {noun}s"


def _fit(line: str) -> list[str]:
    """``line`` wrapped at SUMMARY_COLUMNS, continuation lines indented under its text (a
    path longer than the width stays whole on its own line)."""
    if len(line) <= SUMMARY_COLUMNS:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, SUMMARY_COLUMNS, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False) or [line]


#: how a node's clock was placed, in the summary's words (``NodeMap.method``)
_NODE_METHODS = {"fit": "fitted to MPI messages", "constant": "constant offset from MPI",
                 "linear": "linear interpolation of MPI", "start-times": "start readings only"}


def _node_line(n: dict) -> str:
    """One summary line for a non-reference node (at most 100 columns for names of 24)."""
    how = _NODE_METHODS.get(n["method"], n["method"])
    if n["method"] == "start-times":
        return f"  node {n['name']}: {how}, NOT synchronized (NTP-accurate at best)"
    if n["bound_ticks"] is None:
        return f"  node {n['name']}: {how}, bound unknown"
    return (f"  node {n['name']}: {how}, bound {n['bound_ticks']:.1f} ticks "
            f"({n['bound_us']:.3f} us)")


@dataclass
class Pipeline:
    """Everything the stages produced, for tests, benchmarks and the report."""

    decoded: Decoded
    matches: Matches
    constraints: Constraints
    sync: SyncResult
    damage: DamageLog


def analyze(run_dir: Path, alpha: float = 0.5, order_options: OrderOptions | None = None,
            progress: Progress | None = None, timings: dict | None = None,
            cpu_timings: dict | None = None) -> Pipeline:
    """Read, decode, match and synchronize a run (everything but writing).

    ``timings`` / ``cpu_timings`` receive wall / CPU seconds per stage."""
    timings = {} if timings is None else timings
    cpu_timings = {} if cpu_timings is None else cpu_timings
    c0 = time.process_time()
    damage = DamageLog()
    t0 = time.perf_counter()
    man = load_manifest(Path(run_dir))
    summaries = read_summaries(man, damage, progress)
    dumps = _Dumps(man, summaries)
    t1, c1 = time.perf_counter(), time.process_time()
    dec = decode(man, dumps, damage, release=True, summaries=summaries)
    matches = match(dec, damage)
    t2, c2 = time.perf_counter(), time.process_time()
    # reading the dumps again inside decode is reading
    t1, c1 = t1 + dumps.seconds, c1 + dumps.cpu_seconds
    cons = build_constraints(dec, matches, order_options)
    t3, c3 = time.perf_counter(), time.process_time()
    if progress:
        progress("sync", 0.0)
    result = synchronize(dec, cons, alpha=alpha, damage=damage,
                         node_maps=fitted_node_maps(dec, matches))
    apply_times(dec, result, damage)
    t4, c4 = time.perf_counter(), time.process_time()
    timings.update(read=t1 - t0, decode=t2 - t1, order=t3 - t2, sync=t4 - t3)
    cpu_timings.update(read=c1 - c0, decode=c2 - c1, order=c3 - c2, sync=c4 - c3)
    return Pipeline(dec, matches, cons, result, damage)


def read_summaries(man, damage: DamageLog, progress: Progress | None = None,
                   ranks: list[int] | None = None) -> list:
    """Every dump (or those of ``ranks``, ascending) read once, in rank order (a refusal comes
    before any decoding), only its ``decode.summarize`` kept and its reader damage added to
    ``damage``; decoding reads the dumps again one at a time (``_Dumps``)."""
    ranks = [p.rank for p in man.processes] if ranks is None else ranks
    summaries = []
    for i, rank in enumerate(ranks):
        dump = read_dump(man.dump_path(rank), man, rank)
        damage.extend(dump.damage)
        summaries.append(summarize(dump))
        del dump
        if progress:
            progress("read", (i + 1) / len(ranks))
    return summaries


class _Dumps:
    """The run's dumps in rank order (or those of ``ranks``, ascending), each read when
    indexed and not kept (``decode`` takes them one at a time: only one dump and the record
    table are in memory at once, at the price of framing every dump twice). ``summaries``:
    one per dump of the sequence. A dump whose second reading differs from its summary (it
    changed while being converted) is refused. ``seconds`` / ``cpu_seconds``: time spent
    reading."""

    def __init__(self, man, summaries: list, ranks: list[int] | None = None) -> None:
        self.man = man
        self.summaries = summaries
        self.ranks = [p.rank for p in man.processes] if ranks is None else list(ranks)
        self.seconds = self.cpu_seconds = 0.0

    def __len__(self) -> int:
        return len(self.ranks)

    def __getitem__(self, i: int):
        t0, c0 = time.perf_counter(), time.process_time()
        rank = self.ranks[i]
        dump = read_dump(self.man.dump_path(rank), self.man, rank)
        if not self.summaries[i].matches(dump):
            raise FormatError(dump.path, "the dump changed while it was being converted "
                              "(its records differ between two readings)")
        self.seconds += time.perf_counter() - t0
        self.cpu_seconds += time.process_time() - c0
        return dump


def interval_widths(domains: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Per live interval (docs/sync-report.md), the widest bound of the domains it was solved
    as (its segments, split where a step may hide wraps; inf if any is unbounded), in domain
    order."""
    spe = np.flatnonzero(domains["kind"] == DomainKind.SPE_INTERVAL)
    if not spe.size:
        return np.zeros(0)
    first = domains["segment"][spe] == 0
    w = np.where(np.isnan(width[spe]), np.inf, width[spe])
    return np.maximum.reduceat(w, np.flatnonzero(first)) if first[0] else np.full(1, np.inf)


#: damage kinds counted in records (the others count slots, blocks, messages or runs)
RECORD_KINDS = frozenset({
    "block_overrun", "block_broken", "spe_outside_block", "undefined_id",
    "backwards_timebase", "unusable_time", "unresolved_wrap"})


def map_segments(m) -> list[dict]:
    """A node map's pieces as the report lists them (docs/sync-report.md), ascending: piece k maps a
    raw node timebase x with ``first_timebase[k] <= x < first_timebase[k + 1]`` (the first
    piece also below, the last also above) as ``offset_ticks + rate * x``. ``first_timebase``
    is the smallest integer the archive mapped with that piece (``PiecewiseMap.to_reference``
    takes piece k from knot k on); a straight map is one piece from 0."""
    kn = getattr(m, "knots_node", None)
    if kn is None or np.asarray(kn).size < 2:
        return [{"first_timebase": 0, "offset_ticks": float(m.offset), "rate": float(m.rate)}]
    kn = np.asarray(kn, dtype=np.float64)
    kr = np.asarray(m.knots_ref, dtype=np.float64)
    rate = np.diff(kr) / np.diff(kn)
    offset = kr[:-1] - rate * kn[:-1]
    first = np.ceil(kn[:-1]).astype(np.int64)
    return [{"first_timebase": int(f), "offset_ticks": float(o), "rate": float(r)}
            for f, o, r in zip(first.tolist(), offset.tolist(), rate.tolist(), strict=True)]


def sync_report(pipe: Pipeline) -> dict:
    """The synchronization report (docs/sync-report.md)."""
    dec, res = pipe.decoded, pipe.sync
    man = dec.manifest

    def num(x: float) -> float | None:
        return float(x) if np.isfinite(x) else None

    nodes = []
    for i, node in enumerate(man.nodes):
        m = res.node_maps[i]
        nodes.append({"node": node.name, "offset_ticks": m.offset, "rate": m.rate,
                      "bound_ticks": m.bound, "method": m.method,
                      "synchronized": m.method not in ("start-times", "unused"),
                      "segments": map_segments(m)})
    intervals = []
    d = dec.domains
    for k in np.flatnonzero(d["kind"] == DomainKind.SPE_INTERVAL).tolist():
        row = d[k]
        if row["segment"] > 0:  # after a wrap the readings cannot place: counted, not listed
            intervals[-1]["readings"] += int(row["readings"])
            intervals[-1]["segments"] += 1
            continue
        intervals.append({
            "rank": int(row["rank"]), "ctx": int(row["ctx"]), "interval": int(row["interval"]),
            "readings": int(row["readings"]), "offset_ticks": num(res.offset[k]),
            "lower_ticks": num(res.lower[k]), "upper_ticks": num(res.upper[k]),
            "segments": 1,
        })
    return {
        "reference": {"rank": 0, "node": man.processes[0].node},
        "timebase_hz": man.timebase_hz,
        "relaxation_ticks": res.relaxation,
        "nodes": nodes,
        "unsynchronized_nodes": [n["node"] for n in nodes if n["method"] == "start-times"],
        "intervals": intervals,
        "order_violations": res.order_violations,
        "lost": {"slots": dec.slots_lost, "blocks": dec.blocks_missing,
                 "records": int(sum(e.count for e in pipe.damage.entries()
                                    if e.kind in RECORD_KINDS))},
        "pairs": [{k: num(v) if isinstance(v, float) else v for k, v in p.items()}
                  for p in (res.pairs if res.pairs is not None else pair_table(dec, res))],
        "assumed": pipe.constraints.assumed,
        "constraints": pipe.constraints.counts,
    }


def convert(run_dir: str | Path, archive: str | Path, *, force: bool = False,
            dma_style: DmaStyle | str = DmaStyle.RMA, alpha: float = 0.5,
            report: str | Path | None = None, order_options: OrderOptions | None = None,
            progress: Progress | None = None,
            accept_unsynchronized_nodes: bool = False) -> Summary:
    """Convert one run directory into an OTF2 archive; returns the summary.

    A node placed only by the manifest's start readings makes the summary ``lossy`` (exit 1)
    unless ``accept_unsynchronized_nodes``.

    On any failure or interruption the output path is left as it was: ``ArchiveTarget``
    removes its staging directory, and the directories ``prepare`` created are removed again.

    Started by an MPI launcher with more than one process (``mpiexec -n P``, ``srun``), every
    process converts its share of the run (``parallel.convert_parallel``) into the same
    archive; without one nothing here touches MPI.
    """
    from .parallel import launched_world
    from .stream import convert_streamed

    world = launched_world()
    if world is not None:
        from .parallel import convert_parallel

        summary = convert_parallel(world, run_dir, archive, force=force, dma_style=dma_style,
                                   alpha=alpha, report=report, order_options=order_options,
                                   progress=progress)
        summary.accept_unsynchronized_nodes = accept_unsynchronized_nodes
        return summary
    wall0 = time.perf_counter()
    target = ArchiveTarget(archive, report)
    target.prepare(force, RunInputs.of(run_dir))  # may create missing output directories
    try:
        summary = convert_streamed(run_dir, target, str(archive), wall0, DmaStyle(dma_style),
                                   alpha, report, order_options, progress)
        summary.accept_unsynchronized_nodes = accept_unsynchronized_nodes
        return summary
    except BaseException:
        target.remove_made()
        raise


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


def _summary(pipe: Pipeline, run_dir: str, archive: str, n_events: int, estats,
             timings: dict[str, float]) -> Summary:
    dec, res = pipe.decoded, pipe.sync
    hz = dec.manifest.timebase_hz
    w = res.upper - res.lower
    width = interval_widths(dec.domains, w)  # inf: some segment of the interval unbounded
    # the bounds stated: per live interval, its widest bounded segment
    part = interval_widths(dec.domains, np.where(np.isfinite(w), w, -np.inf))
    finite = part[np.isfinite(part)]
    s = Summary(run_dir=run_dir, archive=archive)
    s.processes = dec.manifest.n_ranks
    s.locations = int(dec.locations.size)
    s.records_in = int(dec.records_total)
    s.events_written = int(n_events)
    s.messages_matched = int(pipe.matches.messages.size)
    s.dma_transfers, s.dma_completed = estats.dma, estats.dma_completed
    s.intervals = int(width.size)
    s.intervals_bounded = int(np.isfinite(width).sum())
    if finite.size:
        s.bound_worst_ticks = float(finite.max())
        s.bound_mean_ticks = float(finite.mean())
        s.bound_worst_us = s.bound_worst_ticks / hz * 1e6
        s.bound_mean_us = s.bound_mean_ticks / hz * 1e6
    s.relaxation_ticks = res.relaxation
    s.order_violations = res.order_violations
    s.heartbeats = estats.heartbeats
    s.events_by_type = dict(estats.by_type)
    s.lost_slots = dec.slots_lost
    s.lost_blocks = dec.blocks_missing
    s.damage = pipe.damage.summary_lines()
    s.stage_seconds = dict(timings)
    s.nodes = node_placements(dec, res)
    s.unsynchronized_nodes = [n["name"] for n in s.nodes if n["method"] == "start-times"]
    return s


def node_placements(dec: Decoded, res: SyncResult) -> list[dict]:
    """Every node but the reference's that hosts a process: how its clock was placed."""
    man = dec.manifest
    hz = man.timebase_hz
    out = []
    for i, node in enumerate(man.nodes):
        m = res.node_maps[i]
        if m.method in ("reference", "unused"):
            continue
        b = None if m.bound is None or not np.isfinite(m.bound) else float(m.bound)
        out.append({"name": node.name, "method": m.method, "bound_ticks": b,
                    "bound_us": None if b is None else b / hz * 1e6})
    return out
