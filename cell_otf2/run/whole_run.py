"""The steps of a conversion that see the whole run at once, between the groups of nodes that
are converted one by one (``driver.run_phases``, serially or on every process under MPI):
pairing every MPI record and fitting the node clocks (``match_mpi``), telling which MPI
records have both ends usable after synchronization (``paired_mpi``), RMA ids in the serial
numbering (``rma_id_offset``), and the whole run's decoded skeleton, bounds and damage for the
definitions, the summary and the report (``whole_run``). It runs no group's decoding or
synchronization and talks to no other process: the team that calls it gathers and scatters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import numpy as np

from ..damage import Damage, DamageLog
from ..decode.match import match
from ..decode.mpi_entry import receive_entry_ticks
from ..emit.definitions import counters_written, first_spus, sync_intervals_property
from ..input import format as fmt
from ..input.manifest import Manifest
from ..model import (
    ANCHOR_DTYPE,
    CONTEXT_DTYPE,
    LINK_DTYPE,
    PAIR_DTYPE,
    Constraints,
    CounterUse,
    Decoded,
    Matches,
    NodeMap,
    RunLayout,
    SynchronizedRun,
    SyncResult,
)
from ..native import whole_rows
from ..native.record_loops import time_bounds
from ..native.sync_loops import reversed_pairs
from ..sync.extents import node_extents, widest
from ..sync.synchronize import pair_table, start_time_maps

P = fmt.PpeCode


#: the records MPI matching reads (``match._mpi``)
MPI_CODES = np.array([P.MPI_SEND, P.MPI_ISEND, P.MPI_RECV, P.MPI_IRECV, P.MPI_COLL_BEGIN,
                      P.MPI_COLL_END], dtype=np.uint16)


#: what a share says of each of its MPI records: written at all, and at which time
MPI_WRITTEN_DTYPE = np.dtype([("usable", "?"), ("time", "<i8")])

#: damage stages in the order the serial pipeline finds damage
STAGES = ("read", "layout", "decode", "match", "mpi", "sync", "emit")


def dump_bytes(man: Manifest) -> list[int]:
    sizes = []
    for p in man.processes:
        try:
            sizes.append(os.path.getsize(man.dump_path(p.rank)))
        except OSError:
            sizes.append(0)  # reading it fails later, with the reader's message
    return sizes


@dataclass
class MpiState:
    """Process 0's view of every MPI record (serial record order) between the node clock fit
    (``match_mpi``) and the pairing of written records (``paired_mpi``)."""

    owner: np.ndarray  # per MPI record (serial order): converter process
    local: np.ndarray  # its record index there
    order: np.ndarray  # serial order -> position in the gathered concatenation
    messages: np.ndarray  # MSG_DTYPE over serial-order indexes
    n_proc: int


#: one group's MPI records as ``match_mpi`` takes them: the records, their loss epochs, their
#: indexes in the group's record table, per node the node timebase span of all the group's
#: records (``extents.node_extents``: the span the node fit's bound covers), and per record
#: the ticks from its MPI call's entry to a receive (``mpi_entry.receive_entry_ticks``, NaN
#: for the others: the subset holds no ENTER record)
MpiRecords = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class NodeFit:
    """What the node clock fit (``match_mpi``) hands on: the node maps, per group of every
    process its within-node MPI pairs (local record indexes), and the state ``paired_mpi``
    needs."""

    node_maps: list[NodeMap]
    pairs: list[np.ndarray]
    state: MpiState


@dataclass
class GroupShare:
    """What one group of nodes hands on once its records have their times (``share_after_sync``),
    for the whole run's definitions, summary and report (``whole_run``, ``merge_damage``): its
    SPE intervals' domains and bounds, counts, ``cell2otf2::sync_intervals`` values, the
    report's pair figures and the SPU of each context's first run. Arrays per SPE interval
    domain (``Decoded.domains`` past the nodes); no record of the group."""

    domains: np.ndarray  # DOMAIN_DTYPE rows of its SPE intervals
    offset: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    bounded: np.ndarray
    relaxation: float
    violations: int  # records written out of program order
    clamped: int
    records: int  # records in its dumps
    slots_lost: int
    blocks_missing: int
    messages: int  # messages matched within the group
    counts: dict[str, int]  # constraints per source
    assumed: dict[str, float | str]  # slacks assumed per source
    sync_intervals: dict[int, str]  # SPE location -> its ``cell2otf2::sync_intervals``
    pairs: list[dict]  # the report's pair figures (``pair_table``), empty unless asked
    node_relaxation: np.ndarray | None
    first_spu: dict[int, int]  # SPE location -> SPU of its context's first run
    counters_used: frozenset[CounterUse]  # (counter, PPE thread) its written records sample
    #: damage found per stage (``STAGES``), filled in when the summary gathers the groups
    damage: dict[str, list[Damage]] = field(default_factory=dict)

    def with_damage(self, damage: dict[str, list[Damage]]) -> GroupShare:
        return replace(self, damage=damage)


@dataclass
class WrittenSpan:
    """What a group's synchronization hands the later phases besides its ``GroupShare``."""

    mpi_written: np.ndarray  # MPI_WRITTEN_DTYPE per MPI record (``paired_mpi``)
    span: tuple[int, int] | None  # its written time span (None: no usable record)


def _mpi_index(dec: Decoded) -> np.ndarray:
    """Indexes of ``dec``'s MPI records (the records MPI matching reads), ascending."""
    by_code, start = dec.code_index()  # built by ``match`` already
    parts = [by_code[start[c]:start[c + 1]] for c in MPI_CODES.tolist()]
    return np.sort(np.concatenate(parts)).astype(np.int64)


def mpi_subset(dec: Decoded) -> MpiRecords:
    """``dec``'s MPI records, their loss epochs, their indexes in ``dec.records``, the span
    of node timebase of all its records per node and each receive's ticks after its MPI
    call's entry."""
    sel = _mpi_index(dec)
    epoch = (dec.loss_epoch[sel] if dec.loss_epoch is not None
             else np.zeros(sel.size, np.int32))
    # the span matters to the node fit only, which a run of one node does not have
    span = node_extents(dec) if dec.n_nodes > 1 else np.full((dec.n_nodes, 2), np.nan)
    entry = receive_entry_ticks(dec, sel)
    return whole_rows.take(dec.records, sel), epoch, sel, span, entry


def match_mpi(man: Manifest, layout: RunLayout, node_domains: np.ndarray,
               parts: list[MpiRecords], damage: DamageLog) -> NodeFit:
    """Process 0: pair every MPI record and fit the node clocks, as the serial pipeline does
    on the whole trace (records in (location, slot) order, so pairs and points come out in
    the serial order). ``parts``: per group of every process, its ``mpi_subset``. A run of
    one node imports no node fit (0.06 s of modules)."""
    recs = whole_rows.concatenate([p[0] for p in parts])
    epoch = np.concatenate([p[1] for p in parts])
    local = np.concatenate([p[2] for p in parts])
    entry = np.concatenate([p[4] for p in parts])
    owner = np.repeat(np.arange(len(parts)), [p[0].size for p in parts])
    order = np.lexsort((recs["slot"], recs["loc"]))
    mini = Decoded(
        manifest=man, dump_names=layout.dump_names,
        spe_buffer_records=layout.spe_buffer_records, locations=layout.locations,
        contexts=np.zeros(0, CONTEXT_DTYPE), records=whole_rows.take(recs, order),
        anchors=np.zeros(0, ANCHOR_DTYPE), domains=node_domains,
        links=np.zeros(0, LINK_DTYPE), n_nodes=len(man.nodes), loss_epoch=epoch[order],
    )
    found = match(mini, damage)
    if len(man.nodes) < 2:
        node_maps = start_time_maps(mini)
    else:
        from ..sync.nodefit.fit import fitted_node_maps

        # the bound is stated over every record of a node, not only over its MPI records
        node_maps = fitted_node_maps(mini, found, damage=damage,
                                     extents=widest([p[3] for p in parts], len(man.nodes)),
                                     entry_ticks=entry[order])
    own, loc = owner[order], local[order]
    pairs = []
    for q in range(len(parts)):
        p = found.pairs[own[found.pairs["before"]] == q]
        mine = np.zeros(p.size, PAIR_DTYPE)
        mine["before"], mine["after"] = loc[p["before"]], loc[p["after"]]
        pairs.append(mine)
    return NodeFit(node_maps, pairs, MpiState(own, loc, order, found.messages, len(parts)))


def share_after_sync(dec: Decoded, matches: Matches, cons: Constraints, result: SyncResult,
                     pairs: bool = True) -> tuple[WrittenSpan, GroupShare]:
    """What a share of the run (a group of nodes of ``driver.py``) hands on once its records
    have their times: whether each of its MPI records is written and its time (``_mpi_index``
    order, for ``paired_mpi``) and its time span, and its ``GroupShare`` (with ``pairs``, the
    report's pair figures; the counters its written records sample)."""
    code = dec.records["code"]
    sel = _mpi_index(dec)
    assert result.usable is not None  # ``apply_times`` has run
    good = np.zeros(sel.size, MPI_WRITTEN_DTYPE)
    good["usable"] = result.usable[sel] & (code[sel] != 0)
    good["time"] = dec.records["time"][sel]
    bounds = time_bounds(dec.records, result.usable, dec.domains.size)
    iv = slice(dec.n_nodes, None)
    share = GroupShare(
        domains=dec.domains[iv], offset=result.offset[iv], lower=result.lower[iv],
        upper=result.upper[iv], bounded=result.bounded[iv],
        relaxation=result.relaxation, violations=result.order_violations,
        clamped=result.clamped, records=dec.records_total, slots_lost=dec.slots_lost,
        blocks_missing=dec.blocks_missing, messages=int(matches.messages.size),
        counts=cons.counts, assumed=cons.assumed,
        sync_intervals=sync_intervals_property(dec, result, bounds),
        pairs=pair_table(dec, result) if pairs else [],
        node_relaxation=result.node_relaxation,
        first_spu=first_spus(dec),
        counters_used=counters_written(dec, result.usable),
    )
    return WrittenSpan(good, bounds[2]), share


def paired_mpi(state: MpiState, good_parts: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Process 0: per process, its MPI records whose message has both ends usable; and how
    many of those messages are written with the receive before the send."""
    written = np.concatenate(good_parts)[state.order]
    good = written["usable"]
    m = state.messages
    both = good[m["send"]] & good[m["recv"]]
    flag = np.zeros(good.size, dtype=bool)
    flag[m["send"][both]] = flag[m["recv"][both]] = True
    reversed_ = reversed_pairs(written["time"], good, m["send"], m["recv"])
    return [state.local[flag & (state.owner == q)] for q in range(state.n_proc)], reversed_


def rma_transfers(dec: Decoded, matches: Matches, usable: np.ndarray) -> np.ndarray:
    """Per rank of the run, the DMA transfers of ``dec`` whose issue is written (``emit``
    gives each one RMA matching id)."""
    issue = matches.dma["issue"]
    # written as emit's ``good`` says (usable, code not the 0 of a dropped record): a DMA
    # record's code is DMA, so ``usable`` alone, with no gather from the wide record rows;
    # the issuing location is the DMA row's own
    written = usable[issue]
    rank_of = dec.locations["rank"].astype(np.int64)[matches.dma["loc"][written]]
    return np.bincount(rank_of, minlength=dec.manifest.n_ranks)


def rma_id_offset(mine: np.ndarray, every: np.ndarray) -> np.ndarray:
    """RMA matching ids count DMA transfers over the whole run in rank order: per rank, the
    transfers of lower ranks held elsewhere (``every`` - ``mine``, both ``rma_transfers``),
    which ``emit(..., rma_id_offset=)`` adds to that rank's ids."""
    return ((np.cumsum(every) - every) - (np.cumsum(mine) - mine)).astype(np.uint64)


def whole_run(man: Manifest, layout: RunLayout, dec: Decoded, gathered: list[GroupShare],
              node_maps: list[NodeMap], mpi_reversed: int = 0) -> SynchronizedRun:
    """Process 0: the whole run's domains, bounds, counts and damage for
    ``emit.definitions.build_definitions``, ``summary.build_summary`` and
    ``summary.sync_report`` (no records); ``mpi_reversed``: MPI messages written reversed
    (``paired_mpi``), added to the groups' reversed pairs."""
    nn = dec.n_nodes
    doms = np.concatenate([dec.domains[:nn]] + [g.domains for g in gathered])
    order = np.concatenate([np.arange(nn), nn + np.argsort(doms["rank"][nn:], kind="stable")])

    def cat(per_group: list[np.ndarray], node_value: float | str) -> np.ndarray:
        parts = [np.full(nn, node_value, dtype=per_group[0].dtype)]
        return np.concatenate(parts + per_group)[order]

    sync = SyncResult(
        offset=cat([g.offset for g in gathered], 0.0),
        lower=cat([g.lower for g in gathered], 0.0),
        upper=cat([g.upper for g in gathered], 0.0),
        bounded=cat([g.bounded for g in gathered], "both"),
        relaxation=max(g.relaxation for g in gathered), node_maps=node_maps,
        order_violations=sum(g.violations for g in gathered) + mpi_reversed,
        clamped=sum(g.clamped for g in gathered),
        node_relaxation=np.max([g.node_relaxation for g in gathered
                                if g.node_relaxation is not None], axis=0),
        pairs=sorted((p for g in gathered for p in g.pairs),
                     key=lambda p: [n.name for n in man.nodes].index(p["node"])),
    )
    decoded = Decoded(
        manifest=man, dump_names=layout.dump_names,
        spe_buffer_records=layout.spe_buffer_records, locations=layout.locations,
        contexts=layout.contexts, records=dec.records[:0], anchors=dec.anchors[:0],
        domains=doms[order], links=dec.links[:0], n_nodes=nn,
        slots_lost=sum(g.slots_lost for g in gathered),
        blocks_missing=sum(g.blocks_missing for g in gathered),
        records_total=sum(g.records for g in gathered),
    )
    counts: dict[str, int] = {}
    assumed: dict[str, float | str] = {}
    for g in gathered:
        for k, v in g.counts.items():
            counts[k] = counts.get(k, 0) + v
        assumed.update(g.assumed)
    return SynchronizedRun(decoded, sync, counts, assumed, merge_damage(layout, gathered))


def merge_damage(layout: RunLayout, gathered: list[GroupShare]) -> DamageLog:
    """One log as the serial pipeline fills it: stage by stage; within a stage by the rank
    of the file, or as added when one process found all of it (MPI pairing, process 0)."""
    rank_of = {name: r for r, name in enumerate(layout.dump_names)}
    log = DamageLog()
    for stage in STAGES:
        entries: list[tuple[int, int, int, Damage]] = []
        for q, g in enumerate(gathered):
            for i, d in enumerate(g.damage[stage]):
                entries.append((rank_of.get(d.file, -1), q, i, d))
        if len({e[1] for e in entries}) > 1:
            entries.sort(key=lambda e: e[:3])
        for *_, d in entries:
            log.add_damage(d)
    return log
