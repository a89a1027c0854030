"""What a conversion tells its user: the ``Summary`` printed at the end (built from the
synchronized run, a ``model.SynchronizedRun``, by ``build_summary``) and the synchronization
report (``sync_report``, the JSON of docs/sync-report.md). It reads the stages' results; it
runs no stage, reads no file and writes nothing.
"""

from __future__ import annotations

import shlex
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..model import Decoded, DomainKind, Pipeline, SynchronizedRun, SyncResult
from ..sync.interval_bounds import interval_bounds, why_lines
from ..sync.synchronize import pair_table

if TYPE_CHECKING:
    from ..emit.events import EmitStats


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
    intervals_bounded: int = 0  # synchronized: every segment bounded on both sides
    #: why the other intervals are not synchronized, one line per reason
    #: (``interval_bounds.why_lines``: cut at unresolved wraps, bounded on one side, ...)
    intervals_not_synchronized: list[str] = field(default_factory=list)
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
    converter_processes: int = 1  # MPI processes that converted (``team_mpi.py``)
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

    def unusable(self) -> list[str]:
        """The lost or unusable input, one entry per kind (``damage``, then the nodes placed
        only by their start readings unless accepted): what ``check`` lists too."""
        unusable = list(self.damage)
        if self.unsynchronized_nodes and not self.accept_unsynchronized_nodes:
            names = self.unsynchronized_nodes
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3
                                            else "")
            unusable.append(f"unsynchronized_node: {shown} by start readings only\n"
                            "      (exit 1; --accept-unsynchronized-nodes accepts them)")
        return unusable

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
            f"mean {self.bound_mean_ticks:.1f} ticks ({self.bound_mean_us:.3f} us)"
            if self.intervals_bounded or not self.intervals
            else "  bound worst -, mean - (no interval synchronized)",
        ]
        if self.intervals_not_synchronized:
            n_open = self.intervals - self.intervals_bounded
            out.append(f"  not synchronized ({plural(n_open, 'interval')}):")
            out.extend(f"    {line}" for line in self.intervals_not_synchronized)
        accepted = " (accepted)" if self.accept_unsynchronized_nodes else ""
        out.extend(_node_line(n) + (accepted if n["method"] == "start-times" else "")
                   for n in self.nodes)
        unusable = self.unusable()
        if unusable:
            out.append(f"  lost or unusable input ({plural(len(unusable), 'kind')}):")
            out.extend(f"    {part}" if i == 0 else part for line in unusable
                       for i, part in enumerate(line.split("\n")))
            out.append(f"  (`cell2otf2 check {shlex.quote(self.run_dir)}` names the tracer "
                       "bugs behind it, where the dumps show one)")
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


def build_summary(run: SynchronizedRun, run_dir: str, archive: str, n_events: int,
                  n_locations: int, estats: EmitStats, timings: dict[str, float],
                  messages_matched: int) -> Summary:
    """The summary of a synchronized run of which ``n_events`` events on ``n_locations``
    locations (the archive's definitions, its METRIC locations too) were written."""
    dec, res = run.decoded, run.sync
    hz = dec.manifest.timebase_hz
    # per live interval, its widest segment: inf unless every segment is bounded
    ib = interval_bounds(dec.domains, res.lower, res.upper)
    finite = ib.width[np.isfinite(ib.width)]
    s = Summary(run_dir=run_dir, archive=archive)
    s.processes = dec.manifest.n_ranks
    s.locations = int(n_locations)
    s.records_in = int(dec.records_total)
    s.events_written = int(n_events)
    s.messages_matched = messages_matched
    s.dma_transfers, s.dma_completed = estats.dma, estats.dma_completed
    s.intervals = int(ib.width.size)
    s.intervals_bounded = int(ib.synchronized.sum())
    s.intervals_not_synchronized = why_lines(ib)
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
    s.damage = run.damage.summary_lines()
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
    "backwards_timebase", "unusable_time", "unresolved_wrap", "contradicting_order"})


def map_segments(m) -> list[dict]:
    """A node map's pieces as the report lists them (docs/sync-report.md), ascending: piece k maps a
    raw node timebase x with ``first_timebase[k] <= x < first_timebase[k + 1]`` (the first
    piece also below, the last also above) as ``offset_ticks + rate * x``, with its guaranteed
    ``bound_ticks`` where the fit states one. ``first_timebase`` is the smallest integer the
    archive mapped with that piece (``PiecewiseMap.to_reference`` takes piece k from knot k
    on); a straight map is one piece from 0."""
    kn = getattr(m, "knots_node", None)
    if kn is None or np.asarray(kn).size < 2:
        return [{"first_timebase": 0, "offset_ticks": float(m.offset), "rate": float(m.rate),
                 "bound_ticks": m.bound}]
    kn = np.asarray(kn, dtype=np.float64)
    kr = np.asarray(m.knots_ref, dtype=np.float64)
    rate = np.diff(kr) / np.diff(kn)
    offset = kr[:-1] - rate * kn[:-1]
    first = np.ceil(kn[:-1]).astype(np.int64)
    pb = getattr(m, "piece_bounds", None)
    bounds = (pb.tolist() if pb is not None and len(pb) == first.size
              else [m.bound] * first.size)
    return [{"first_timebase": int(f), "offset_ticks": float(o), "rate": float(r),
             "bound_ticks": None if b is None or not np.isfinite(b) else float(b)}
            for f, o, r, b in zip(first.tolist(), offset.tolist(), rate.tolist(), bounds,
                                  strict=True)]


#: what a fitted node's estimate assumes (the report's ``assumed.node_latency``)
NODE_LATENCY = ("messages of the same kind (communicator and size) between two nodes take the "
                "same least time both ways (between two nodes whose messages of a kind came "
                "late one way in every exchange: the least time the kind takes between the "
                "other nodes); the bounds assume only that every message is received after it "
                "was sent and that node rates stay within the rate limit")


def _assumed(run: SynchronizedRun) -> dict:
    out = dict(run.assumed)
    if any(m.method == "fit" for m in run.sync.node_maps):
        out["node_latency"] = NODE_LATENCY
    return out


def sync_report(run: SynchronizedRun | Pipeline) -> dict:
    """The synchronization report (docs/sync-report.md) of a synchronized run (or of all a
    one-process analysis produced)."""
    if isinstance(run, Pipeline):
        run = run.synchronized()
    dec, res = run.decoded, run.sync
    man = dec.manifest

    def num(x: float) -> float | None:
        return float(x) if np.isfinite(x) else None

    nodes = []
    for i, node in enumerate(man.nodes):
        m = res.node_maps[i]
        nodes.append({"node": node.name, "offset_ticks": m.offset, "rate": m.rate,
                      "bound_ticks": m.bound, "estimate_error_ticks": m.estimate_error,
                      "method": m.method,
                      "synchronized": m.method not in ("start-times", "unused"),
                      "segments": map_segments(m)})
    intervals: list[dict] = []
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
    ib = interval_bounds(d, res.lower, res.upper)
    for entry, sync, wraps in zip(intervals, ib.synchronized.tolist(), ib.unresolved.tolist(),
                                  strict=True):
        entry["synchronized"] = sync
        entry["unresolved_wraps"] = wraps
    return {
        "reference": {"rank": 0, "node": man.processes[0].node},
        "timebase_hz": man.timebase_hz,
        "relaxation_ticks": res.relaxation,
        "nodes": nodes,
        "unsynchronized_nodes": [n["node"] for n in nodes if n["method"] == "start-times"],
        "intervals": intervals,
        "not_synchronized": why_lines(ib),
        "order_violations": res.order_violations,
        "lost": {"slots": dec.slots_lost, "blocks": dec.blocks_missing,
                 "records": int(sum(e.count for e in run.damage.entries()
                                    if e.kind in RECORD_KINDS))},
        "pairs": [{k: num(v) if isinstance(v, float) else v for k, v in p.items()}
                  for p in (res.pairs if res.pairs is not None else pair_table(dec, res))],
        "assumed": _assumed(run),
        "constraints": run.constraint_counts,
    }
