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

import numpy as np

from ..damage import Damage, DamageLog
from ..decode.match import match
from ..emit.definitions import counters_written, first_spus, sync_intervals_property
from ..input import format as fmt
from ..input.manifest import Manifest
from ..model import (
    ANCHOR_DTYPE,
    CONTEXT_DTYPE,
    DMA_DTYPE,
    LINK_DTYPE,
    MSG_DTYPE,
    PAIR_DTYPE,
    Constraints,
    Decoded,
    Matches,
    Pipeline,
    RunLayout,
    SyncResult,
)
from ..native.record_loops import time_bounds
from ..sync.synchronize import pair_table, reversed_pairs

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


class MpiState:
    """Process 0's view of every MPI record (serial record order) between steps 4 and 5."""

    def __init__(self, owner: np.ndarray, local: np.ndarray, order: np.ndarray,
                 messages: np.ndarray, n_proc: int) -> None:
        self.owner = owner  # per MPI record (serial order): converter process
        self.local = local  # its record index there
        self.order = order  # serial order -> position in the gathered concatenation
        self.messages = messages  # MSG_DTYPE over serial-order indexes
        self.n_proc = n_proc


def _mpi_index(dec: Decoded) -> np.ndarray:
    """Indexes of ``dec``'s MPI records (the records MPI matching reads), ascending."""
    by_code, start = dec.code_index()  # built by ``match`` already
    parts = [by_code[start[c]:start[c + 1]] for c in MPI_CODES.tolist()]
    return np.sort(np.concatenate(parts)).astype(np.int64)


def mpi_subset(dec: Decoded) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sel = _mpi_index(dec)
    epoch = (dec.loss_epoch[sel] if dec.loss_epoch is not None
             else np.zeros(sel.size, np.int32))
    return dec.records[sel], epoch, sel


def match_mpi(man: Manifest, layout: RunLayout, node_domains: np.ndarray,
               parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], damage: DamageLog):
    """Process 0: pair every MPI record and fit the node clocks, as the serial pipeline does
    on the whole trace (records in (location, slot) order, so pairs and points come out in
    the serial order). Returns the node maps, the per-process within-node pairs (local record
    indexes) and the state step 5 needs."""
    from ..sync.nodefit.fit import fitted_node_maps

    recs = np.concatenate([p[0] for p in parts])
    epoch = np.concatenate([p[1] for p in parts])
    local = np.concatenate([p[2] for p in parts])
    owner = np.repeat(np.arange(len(parts)), [p[0].size for p in parts])
    order = np.lexsort((recs["slot"], recs["loc"]))
    mini = Decoded(
        manifest=man, dump_names=layout.dump_names,
        spe_buffer_records=layout.spe_buffer_records, locations=layout.locations,
        contexts=np.zeros(0, CONTEXT_DTYPE), records=recs[order],
        anchors=np.zeros(0, ANCHOR_DTYPE), domains=node_domains,
        links=np.zeros(0, LINK_DTYPE), n_nodes=len(man.nodes), loss_epoch=epoch[order],
    )
    found = match(mini, damage)
    node_maps = fitted_node_maps(mini, found, damage=damage)
    own, loc = owner[order], local[order]
    pairs = []
    for q in range(len(parts)):
        p = found.pairs[own[found.pairs["before"]] == q]
        mine = np.zeros(p.size, PAIR_DTYPE)
        mine["before"], mine["after"] = loc[p["before"]], loc[p["after"]]
        pairs.append(mine)
    return node_maps, pairs, MpiState(own, loc, order, found.messages, len(parts))


def share_after_sync(dec: Decoded, matches: Matches, cons: Constraints, result: SyncResult,
                     pairs: bool = True) -> tuple[np.ndarray, tuple[int, int] | None, dict]:
    """What a share of the run (a converter process's nodes, or a group of ``driver.py``)
    hands on once its records have their times: whether each of its MPI records is written
    and its time (``MPI_WRITTEN_DTYPE``, ``_mpi_index`` order, for ``paired_mpi``), its time
    span (None: no usable record), and its
    interval bounds, counts, ``cell2otf2::sync_intervals`` values and, with ``pairs``, the
    report's pair figures (``whole_run``), the SPU of each context's first run that a
    record names (``emit.definitions.first_spus``) and the counters its written records
    sample (``emit.definitions.counters_written``)."""
    code = dec.records["code"]
    sel = _mpi_index(dec)
    good = np.zeros(sel.size, MPI_WRITTEN_DTYPE)
    good["usable"] = result.usable[sel] & (code[sel] != 0)
    good["time"] = dec.records["time"][sel]
    bounds = time_bounds(dec.records, result.usable, dec.domains.size)
    span = bounds[2]
    iv = slice(dec.n_nodes, None)
    info = {
        "domains": dec.domains[iv], "offset": result.offset[iv], "lower": result.lower[iv],
        "upper": result.upper[iv], "bounded": result.bounded[iv],
        "relaxation": result.relaxation, "violations": result.order_violations,
        "clamped": result.clamped, "records": dec.records_total, "slots_lost": dec.slots_lost,
        "blocks_missing": dec.blocks_missing, "messages": int(matches.messages.size),
        "counts": cons.counts, "assumed": cons.assumed,
        "sync_intervals": sync_intervals_property(dec, result, bounds),
        "pairs": pair_table(dec, result) if pairs else [],
        "node_relaxation": result.node_relaxation,
        "first_spu": first_spus(dec),
        "counters_used": counters_written(dec, result.usable),
    }
    return good, span, info


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


def whole_run(man: Manifest, layout: RunLayout, dec: Decoded, gathered: list[dict],
               node_maps: list, mpi_reversed: int = 0):
    """Process 0: the whole run's domains, bounds, counts and damage as one ``Pipeline`` for
    ``emit.definitions.build_definitions``, ``summary.build_summary`` and
    ``summary.sync_report`` (no records); ``mpi_reversed``: MPI messages written reversed
    (``paired_mpi``), added to the groups' reversed pairs."""
    nn = dec.n_nodes
    doms = np.concatenate([dec.domains[:nn]] + [g["domains"] for g in gathered])
    order = np.concatenate([np.arange(nn), nn + np.argsort(doms["rank"][nn:], kind="stable")])

    def cat(key: str, node_value) -> np.ndarray:
        parts = [np.full(nn, node_value, dtype=gathered[0][key].dtype)]
        return np.concatenate(parts + [g[key] for g in gathered])[order]

    sync = SyncResult(
        offset=cat("offset", 0.0), lower=cat("lower", 0.0), upper=cat("upper", 0.0),
        bounded=cat("bounded", "both"),
        relaxation=max(g["relaxation"] for g in gathered), node_maps=node_maps,
        order_violations=sum(g["violations"] for g in gathered) + mpi_reversed,
        clamped=sum(g["clamped"] for g in gathered),
        node_relaxation=np.max([g["node_relaxation"] for g in gathered], axis=0),
        pairs=sorted((p for g in gathered for p in g["pairs"]),
                     key=lambda p: [n.name for n in man.nodes].index(p["node"])),
    )
    decoded = Decoded(
        manifest=man, dump_names=layout.dump_names,
        spe_buffer_records=layout.spe_buffer_records, locations=layout.locations,
        contexts=layout.contexts, records=dec.records[:0], anchors=dec.anchors[:0],
        domains=doms[order], links=dec.links[:0], n_nodes=nn,
        slots_lost=sum(g["slots_lost"] for g in gathered),
        blocks_missing=sum(g["blocks_missing"] for g in gathered),
        records_total=sum(g["records"] for g in gathered),
    )
    counts: dict[str, int] = {}
    assumed: dict[str, float | str] = {}
    for g in gathered:
        for k, v in g["counts"].items():
            counts[k] = counts.get(k, 0) + v
        assumed.update(g["assumed"])
    empty = np.zeros(0, dtype=np.int64)
    cons = Constraints(empty, empty, np.zeros(0), counts, assumed)
    matches = Matches(np.zeros(0, MSG_DTYPE), np.zeros(0, DMA_DTYPE),
                      np.zeros(0, PAIR_DTYPE), np.zeros(0, PAIR_DTYPE))
    return Pipeline(decoded, matches, cons, sync, merge_damage(layout, gathered))


def merge_damage(layout: RunLayout, gathered: list[dict]) -> DamageLog:
    """One log as the serial pipeline fills it: stage by stage; within a stage by the rank
    of the file, or as added when one process found all of it (MPI pairing, process 0)."""
    rank_of = {name: r for r, name in enumerate(layout.dump_names)}
    log = DamageLog()
    for stage in STAGES:
        entries: list[tuple[int, int, int, Damage]] = []
        for q, g in enumerate(gathered):
            for i, d in enumerate(g["damage"][stage]):
                entries.append((rank_of.get(d.file, -1), q, i, d))
        if len({e[1] for e in entries}) > 1:
            entries.sort(key=lambda e: e[:3])
        for *_, d in entries:
            log.add_damage(d)
    return log
