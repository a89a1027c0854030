"""Apply synchronization: solve each node's constraints and give every record its reference time.

Per node, the node's timebase domain is the reference (tau, offset 0) for the SPE intervals of
that node (``sync.solve`` with alpha, default 1/2). Each node's timebase then maps to the
reference node's (the node hosting rank 0, CONTRACT.md 2) as ``offset + rate * timebase``: the
reference node is the identity; other nodes use the fit of ``nodefit.py`` when it is available,
otherwise the start-time baseline from the manifest (wall clocks read with each process's start
timebase; NTP-accurate only, said in the report).

Records get ``time`` = round(node map(offset[domain] + local)) in integer reference ticks. A
record without a usable clock (backwards PPE timebase) takes its predecessor's time on its
location; records of an interval nothing bounds are counted as unusable and flagged
(``usable`` False). Per location time never decreases: a record that would be earlier than
its predecessor is held at the predecessor's time and counted as an order violation.

It does not build constraints and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .damage import DamageKind, DamageLog
from .decode import Decoded
from .model import DomainKind
from .order import Constraints
from .sync import SyncSolution, solve


@dataclass
class NodeMap:
    offset: float  # reference = offset + rate * node timebase
    rate: float
    bound: float | None  # largest uncertainty in reference ticks, None if unknown
    method: str  # "reference", "start-times", "fit"


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


def start_time_maps(dec: Decoded) -> list[NodeMap]:
    """Node maps from the manifest's start readings (timebase and wall clock per process)."""
    man = dec.manifest
    hz = man.timebase_hz
    p0 = man.processes[0]
    maps: list[NodeMap | None] = [None] * len(man.nodes)
    ref_node = man.node_of_rank(0)
    maps[ref_node] = NodeMap(0.0, 1.0, 0.0, "reference")
    for p in man.processes:
        n = man.node_of_rank(p.rank)
        if maps[n] is not None:
            continue
        ref_ticks = p0.start_timebase + (p.start_realtime_ns - p0.start_realtime_ns) * hz / 1e9
        maps[n] = NodeMap(float(ref_ticks - p.start_timebase), 1.0, None, "start-times")
    for i, m in enumerate(maps):
        if m is None:  # a node without processes: nothing on it is ever mapped
            maps[i] = NodeMap(0.0, 1.0, None, "unused")
    return maps  # type: ignore[return-value]


def synchronize(dec: Decoded, cons: Constraints, alpha: float = 0.5,
                node_maps: list[NodeMap] | None = None) -> SyncResult:
    """Solve every node's SPE intervals against that node's timebase."""
    doms = dec.domains
    n = doms.size
    offset = np.zeros(n)
    lower = np.zeros(n)
    upper = np.zeros(n)
    bounded = np.full(n, "both", dtype="<U5")
    relaxation = 0.0
    solutions = []
    node_of_dom = doms["node"]
    for node in range(dec.n_nodes):
        members = np.flatnonzero(node_of_dom == node)
        if members.size <= 1:
            continue
        local_index = np.full(n, -1, dtype=np.int64)
        local_index[members] = np.arange(members.size)
        s, d = local_index[cons.src], local_index[cons.dst]
        keep = (s >= 0) & (d >= 0)
        ref = int(local_index[node])
        sol = solve(members.size, s[keep], d[keep], cons.weight[keep], ref, alpha)
        offset[members], lower[members], upper[members] = sol.offset, sol.lower, sol.upper
        bounded[members] = sol.bounded
        relaxation = max(relaxation, sol.relaxation)
        solutions.append(sol)
    is_node = doms["kind"] == DomainKind.NODE
    offset[is_node] = lower[is_node] = upper[is_node] = 0.0
    bounded[is_node] = "both"
    return SyncResult(offset, lower, upper, bounded, relaxation,
                      node_maps or start_time_maps(dec), solutions)


def apply_times(dec: Decoded, result: SyncResult, damage: DamageLog) -> None:
    """Fill ``dec.records['time']`` (reference ticks) and ``result.usable``."""
    rec = dec.records
    dom = rec["domain"]
    has = dom >= 0
    node_t = np.full(rec.size, np.nan)
    node_t[has] = result.offset[dom[has]] + rec["local"][has]
    node_of_dom = dec.domains["node"]
    node = np.where(has, node_of_dom[np.maximum(dom, 0)], -1)
    ref_t = np.full(rec.size, np.nan)
    for i, m in enumerate(result.node_maps):
        sel = node == i
        ref_t[sel] = m.offset + m.rate * node_t[sel]
    unbounded = has & np.isnan(ref_t)
    if unbounded.any():
        first = int(np.flatnonzero(unbounded)[0])
        rank = int(dec.locations["rank"][rec["loc"][first]])
        damage.add(DamageKind.unusable_time, dec.dump_names[rank], int(rec["slot"][first]),
                   int(unbounded.sum()), "records of a live interval that no order "
                   "constraint bounds: no offset is made up, the records are not written")
    usable = ~unbounded
    t = np.where(np.isnan(ref_t), -(2**62), np.rint(np.nan_to_num(ref_t, nan=0.0)))
    t = t.astype(np.int64)
    # per location: records without a clock take the predecessor's time; never decrease
    loc = rec["loc"]
    starts = np.flatnonzero(np.concatenate([[True], loc[1:] != loc[:-1]])) if rec.size else []
    ends = np.append(starts[1:], rec.size) if rec.size else []
    clamped = violations = 0
    for s, e in zip(starts, ends, strict=True):
        seg = t[s:e]
        ok = usable[s:e]
        run = np.maximum.accumulate(np.where(ok, seg, -(2**62)))
        violations += int((ok & has[s:e] & (seg < run)).sum())
        clamped += int((ok & ~has[s:e]).sum())
        seg[:] = np.where(ok, run, seg)
    rec["time"] = t
    result.usable = usable
    result.order_violations = violations
    result.clamped = clamped
