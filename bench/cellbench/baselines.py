"""Per-domain clock offsets from the baseline methods, on the same decoded trace as ours.

Every method returns an ``Estimate``: offsets per clock domain in node-timebase ticks (true
node time = offset + local, node domains 0, NaN where the method places nothing), and bounds
where the method has them. The methods (README, "Synchronization"):

- ``ours``: ``cellbench.analysis.analyze`` with its defaults (the pipeline's ``SyncResult``).
- ``anchored``: raw times. Each context's first reading is put at the timebase of its first
  CTX_RUN_BEGIN; later intervals continue by the link values in ``decoded.links`` (a DECR_WRITE:
  the written value is read at the write; a CTX_SWITCH: the START's restore value continues
  the STOP's saved value plus the ticks the kernel says were off, i.e. the raw decrementer is
  taken as one counter). An interval no such link reaches (an empty interval between, a wrap)
  continues the previous non-empty interval by the raw decrementer step modulo 2^32. A context
  without a CTX_RUN_BEGIN anchors its first interval at the last PPE reading before its first
  block in slot order.
- ``lamport``: ``sync_baselines.lamport_offsets`` from the anchored offsets on our constraints,
  loosened by our relaxation (the largest over nodes), per node.
- ``paper``: ``sync_baselines.paper_solve`` per node (Floyd-Warshall, repeated d/2 relaxation,
  alpha = 1/2, tau = the node's PPE timebase) on slot-order constraints only, without the
  read-delay loosening (``OrderOptions(sources={"slot_order"}, read_delay_ticks=0)``), as the
  paper had them. Floyd-Warshall is O(n^3): nodes with more than ``PAPER_MAX_DOMAINS`` domains
  are skipped (offsets NaN, ``skipped`` set).

Nothing here measures accuracy (``evaluate.py`` does) or writes anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from cell_otf2.decode.intervals import MOD
from cell_otf2.input import format as fmt
from cell_otf2.model import (
    Constraints,
    Decoded,
    DomainKind,
    LinkKind,
    LocKind,
    Matches,
    OrderOptions,
    Pipeline,
)
from cell_otf2.sync.order import build_constraints
from cell_otf2.sync.solver import error_table

from .sync_baselines import lamport_offsets, paper_solve

#: Floyd-Warshall on more domains than this per node is not attempted (time n^3, memory n^2)
PAPER_MAX_DOMAINS = 1500

#: the paper's constraint set: slot order only, readings taken at their reservation
PAPER_ORDER = OrderOptions(sources=frozenset({"slot_order"}), read_delay_ticks=0)


@dataclass
class Estimate:
    """One method's clock offsets per domain (node-timebase ticks) and bounds if it has any."""

    name: str
    offset: np.ndarray  # float64 per domain; NaN where nothing is placed
    lower: np.ndarray | None = None  # bounds of the offset (the method's own, relaxed system)
    upper: np.ndarray | None = None
    relaxation: float = 0.0  # ticks added to every constraint (largest over nodes)
    #: per node: the all-pairs matrix of the method's (relaxed) system over that node's
    #: domains, when the method computed one (the paper's Floyd-Warshall)
    matrices: dict[int, np.ndarray] = field(default_factory=dict)
    seconds: float = 0.0  # time the method took (not counting decode)
    skipped: str = ""  # why the method did not run, if it did not


def ours(pipe: Pipeline) -> Estimate:
    """The pipeline's own synchronization."""
    res = pipe.sync
    secs = sum(sum(s.timings.values()) for s in res.solutions)
    return Estimate("ours", res.offset.copy(), res.lower.copy(), res.upper.copy(),
                    float(res.relaxation), seconds=secs)


def _first_last_local(dec: Decoded) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per domain: smallest and largest local time of its readings, and its first anchor.

    Readings are SPE records and block headers (a header reads the clock after its records).
    """
    n = dec.domains.size
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    first_anchor = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    for dom, local in ((dec.records["domain"], dec.records["local"]),
                       (dec.anchors["domain"], dec.anchors["local"])):
        ok = dom >= 0
        np.minimum.at(lo, dom[ok], local[ok])
        np.maximum.at(hi, dom[ok], local[ok])
    a_dom = dec.anchors["domain"]
    ok = a_dom >= 0
    np.minimum.at(first_anchor, a_dom[ok], np.flatnonzero(ok))
    return lo, hi, first_anchor


def anchored(dec: Decoded) -> Estimate:
    """Raw decrementer times anchored at each context's CTX_RUN_BEGIN (see module doc)."""
    t0 = time.perf_counter()
    doms = dec.domains
    n = doms.size
    offset = np.full(n, np.nan)
    offset[doms["kind"] == DomainKind.NODE] = 0.0
    lo, hi, first_anchor = _first_last_local(dec)
    has = lo != np.iinfo(np.int64).max
    rec = dec.records
    loc_kind = dec.locations["kind"][rec["loc"]]
    loc_rank = dec.locations["rank"][rec["loc"]]
    is_begin = (loc_kind == LocKind.PPE_THREAD) & (rec["code"] == fmt.PpeCode.CTX_RUN_BEGIN) \
        & (rec["domain"] >= 0)
    begin_idx = np.flatnonzero(is_begin)
    begin_idx = begin_idx[np.argsort(rec["slot"][begin_idx], kind="stable")]
    begin_tb: dict[tuple[int, int], int] = {}
    for i in begin_idx.tolist()[::-1]:  # the first in slot order wins
        begin_tb[(int(loc_rank[i]), int(rec["a"][i]))] = int(rec["local"][i])
    # last node reading at or before each anchor, within its rank's slot order
    anc = dec.anchors
    is_node_reading = (anc["domain"] >= 0) & (anc["domain"] < dec.n_nodes)
    last_node = np.where(is_node_reading, np.arange(anc.size), -1)
    last_node = np.maximum.accumulate(last_node) if anc.size else last_node
    links = dec.links
    link_of_next = {int(v): i for i, v in enumerate(links["next"].tolist())}
    iv = np.flatnonzero(doms["kind"] == DomainKind.SPE_INTERVAL)
    # the intervals of one context are consecutive domains in interval order
    key = doms["rank"][iv].astype(np.int64) * (1 << 32) + doms["ctx"][iv]
    for ctx_doms in np.split(iv, np.flatnonzero(np.diff(key)) + 1):
        prev = -1  # last non-empty interval placed
        for d in ctx_doms.tolist():
            if not has[d]:
                continue
            li = link_of_next.get(d, -1)
            if prev >= 0 and li >= 0 and int(links["prev"][li]) == prev \
                    and links["kind"][li] in (LinkKind.SWITCH, LinkKind.WRITE):
                row = links[li]
                step = int(row["local_prev"]) - int(row["local_next"])
                if row["kind"] == LinkKind.SWITCH:
                    step += (int(row["value"]) - int(row["start_value"])) % MOD
                offset[d] = offset[prev] + step
            elif prev >= 0:
                raw_last = (-int(hi[prev])) % MOD
                raw_first = (-int(lo[d])) % MOD
                offset[d] = offset[prev] + int(hi[prev]) + (raw_last - raw_first) % MOD \
                    - int(lo[d])
            else:
                tb = begin_tb.get((int(doms["rank"][d]), int(doms["ctx"][d])))
                if tb is None:
                    j = int(last_node[first_anchor[d]])
                    if j < 0 or anc["rank"][j] != anc["rank"][first_anchor[d]]:
                        continue
                    tb = int(anc["local"][j])
                offset[d] = tb - int(lo[d])
            prev = d
    return Estimate("anchored", offset, seconds=time.perf_counter() - t0)


def lamport(dec: Decoded, cons: Constraints, initial: Estimate, relaxation: float) -> Estimate:
    """Lamport-style bumping from ``initial``'s offsets on ``cons``, per node."""
    t0 = time.perf_counter()
    doms = dec.domains
    out = np.full(doms.size, np.nan)
    out[doms["kind"] == DomainKind.NODE] = 0.0
    for node in range(dec.n_nodes):
        members = np.flatnonzero(doms["node"] == node)
        if members.size <= 1:
            continue
        index = np.full(doms.size, -1, dtype=np.int64)
        index[members] = np.arange(members.size)
        s, d = index[cons.src], index[cons.dst]
        keep = (s >= 0) & (d >= 0)
        start = initial.offset[members]
        placed = np.isfinite(start)
        # nothing anchored: start far below, so bumping alone places the domain
        low = np.nanmin(start) - 2.0**40 if placed.any() else -(2.0**40)
        x = lamport_offsets(members.size, s[keep], d[keep], cons.weight[keep],
                            np.where(placed, start, low), reference=int(index[node]),
                            relaxation=relaxation)
        x[x < low + 2.0**39] = np.nan  # still at the far start: nothing placed it
        out[members] = x
    return Estimate("lamport", out, relaxation=relaxation, seconds=time.perf_counter() - t0)


def paper(dec: Decoded, matches: Matches, max_domains: int = PAPER_MAX_DOMAINS) -> Estimate:
    """The published algorithm on slot-order constraints only (see module doc)."""
    t0 = time.perf_counter()
    doms = dec.domains
    n = doms.size
    offset = np.full(n, np.nan)
    lower = np.full(n, -np.inf)
    upper = np.full(n, np.inf)
    is_node = doms["kind"] == DomainKind.NODE
    offset[is_node] = lower[is_node] = upper[is_node] = 0.0
    cons = build_constraints(dec, matches, PAPER_ORDER)
    relaxation = 0.0
    matrices: dict[int, np.ndarray] = {}
    skipped = []
    for node in range(dec.n_nodes):
        members = np.flatnonzero(doms["node"] == node)
        if members.size <= 1:
            continue
        if members.size > max_domains:
            skipped.append(f"node {node}: {members.size} domains > {max_domains}")
            offset[members[1:]] = np.nan
            continue
        index = np.full(n, -1, dtype=np.int64)
        index[members] = np.arange(members.size)
        s, d = index[cons.src], index[cons.dst]
        keep = (s >= 0) & (d >= 0)
        sol, D = paper_solve(members.size, s[keep], d[keep], cons.weight[keep],
                             reference=int(index[node]))
        offset[members], lower[members], upper[members] = sol.offset, sol.lower, sol.upper
        relaxation = max(relaxation, sol.relaxation)
        matrices[node] = D
    return Estimate("paper", offset, lower, upper, relaxation, matrices,
                    seconds=time.perf_counter() - t0, skipped="; ".join(skipped))


def paper_table1(est: Estimate, dec: Decoded, node: int, subset: np.ndarray
                 ) -> dict[str, float] | None:
    """Table 1 columns from the paper's Floyd-Warshall matrix of ``node`` over ``subset``
    (domain indexes of that node, its node domain first)."""
    D = est.matrices.get(node)
    if D is None:
        return None
    members = np.flatnonzero(dec.domains["node"] == node)
    index = np.full(dec.domains.size, -1, dtype=np.int64)
    index[members] = np.arange(members.size)
    k = index[subset]
    sub = D[np.ix_(k, k)]
    is_spe = dec.domains["kind"][subset] == DomainKind.SPE_INTERVAL
    return error_table(sub, is_spe, 0)
