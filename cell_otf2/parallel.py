"""Parallel conversion under ``mpiexec -n P`` (or ``srun``): each process converts whole nodes.

``convert.convert`` hands a conversion here when ``launched_world`` finds an MPI launch of more
than one process (on one host with Open MPI it first picks shared-memory messaging,
``_single_host_transport``). Process 0 stages the output (``output.ArchiveTarget``); then
every converter process ("process" below; "rank" is an MPI rank of the traced run) runs the
serial conversion's phases on its share, group of nodes by group (``stream.convert_groups``
with a ``Team``), which meet here:

- plan: from the dump sizes process 0 broadcasts, every process computes the same
  assignment of whole nodes to processes, heaviest first onto the least loaded process
  (``partition``), so each node's SPE synchronization runs on one process exactly as in a
  serial conversion; the run's location layout is assembled from every process's location
  rows (allgather, ``_layout_part``), so location refs are the serial conversion's;
- MPI: every process's MPI records (a small subset, ``_mpi_subset``) are gathered to
  process 0, which pairs them with ``match`` on an MPI-only trace in the serial record order,
  fits the node clocks from the cross-node pairs (``_match_mpi``) and sends each process its
  within-node MPI pairs; the node maps are broadcast; after synchronization the usable flags
  of the MPI records go to process 0, which tells each process which of its MPI records
  belong to a message whose both ends are usable (``_paired``);
- RMA matching ids are shifted to the serial numbering (``rma_id_offset``); process 0 builds
  the definitions from the gathered interval bounds (``_whole_run``), the summary and the
  report;
- write: every process writes its locations' event files into the staging directory through
  OTF2's collective callbacks (``otf2_mpi``), then asks the busier processes for locations
  they have not begun (``write_share``); process 0 writes the definitions and the anchor
  file and moves the archive into place.

The archive equals the serial conversion's: same definitions, events per location and
timestamps (``tests/test_parallel.py`` compares them event by event). The summary's numbers
are the serial ones; its damage lines too, except that kinds first found in the same stage
may be listed in another order.

Errors: every step ends in an agreement (``_Steps.run``): a ``CellOtf2Error`` on any process is
raised on every process (the lowest failing process's message; the others are ``secondary``
and print nothing), so all exit with one status; anything else, a bug, aborts the MPI job
(``comm.Abort``) rather than leave a process waiting in a collective.

It imports mpi4py only when launched under MPI with more than one process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import format as fmt
from .damage import Damage, DamageLog
from .decode import LINK_DTYPE, Decoded, RunLayout, _build_locations
from .emit import DmaStyle, first_spus, sync_intervals_property
from .errors import EXIT_INPUT, EXIT_USAGE, CellOtf2Error, UsageError
from .manifest import Manifest
from .match import DMA_DTYPE, MSG_DTYPE, PAIR_DTYPE, Matches, match
from .model import ANCHOR_DTYPE, CONTEXT_DTYPE, LOCATION_DTYPE, LocKind
from .order import Constraints, OrderOptions
from .output import ArchiveTarget, RunInputs
from .timing import SyncResult

P = fmt.PpeCode
Progress = Callable[[str, float], None]

#: the records MPI matching reads (``match._mpi``)
MPI_CODES = np.array([P.MPI_SEND, P.MPI_ISEND, P.MPI_RECV, P.MPI_IRECV, P.MPI_COLL_BEGIN,
                      P.MPI_COLL_END], dtype=np.uint16)

#: damage stages in the order the serial pipeline finds damage
_STAGES = ("read", "layout", "decode", "match", "mpi", "sync", "emit")

#: environment variables in which MPI launchers give the number of processes
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
#: set (to anything but "" or "0") to convert serially even under an MPI launcher
SERIAL_VAR = "CELL2OTF2_SERIAL"


# --------------------------------------------------------------------------------------------
# launch detection
# --------------------------------------------------------------------------------------------


def launched_size(env: dict[str, str] | os._Environ = os.environ) -> int | None:
    """Processes of the MPI launch this process belongs to, by the launcher's environment
    (Open MPI, MPICH/Hydra, Slurm with PMI2: a number; PMIx without a size: -1); None when no
    MPI launcher started it."""
    for var in _SIZE_VARS:
        value = env.get(var, "")
        if value.isdigit():
            return int(value)
    if "PMIX_RANK" in env:
        return -1
    return None


def launched_world() -> Any | None:
    """The communicator to convert with, or None for the serial path (no MPI launch, one
    process, or ``CELL2OTF2_SERIAL`` set). Imports mpi4py only under a launch of several."""
    if os.environ.get(SERIAL_VAR, "") not in ("", "0"):
        return None
    size = launched_size()
    if size is None or size == 1:
        return None
    _single_host_transport(os.environ)
    try:
        from mpi4py import MPI
    except ImportError as exc:
        what = f"one of {size} MPI processes" if size > 0 else "an MPI process"
        raise UsageError(f"started as {what}, but mpi4py is not installed: install the "
                         "extra (pip install 'cell2otf2[mpi]') to convert in parallel, or run "
                         f"without mpiexec (or with {SERIAL_VAR}=1)") from exc
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None


def _single_host_transport(env: dict[str, str] | os._Environ) -> None:
    """Open MPI on one host: choose its shared-memory messaging (``pml ob1``) unless the user
    chose a messaging layer. Its default start-up first tries the network fabrics' layer
    (``pml cm`` over PSM, PSM2, OFI), which costs 0.2 s per process on a machine without them
    and can only lose to shared memory when every process is on one host. Set when Open MPI
    reports every process local (``OMPI_COMM_WORLD_LOCAL_SIZE`` = ``OMPI_COMM_WORLD_SIZE``)
    and ``OMPI_MCA_pml`` is unset (``mpiexec --mca pml X`` sets it); a value from an MCA
    parameter file is overridden. Other launchers: nothing."""
    size = env.get("OMPI_COMM_WORLD_SIZE")
    if size and env.get("OMPI_COMM_WORLD_LOCAL_SIZE") == size and "OMPI_MCA_pml" not in env:
        env["OMPI_MCA_pml"] = "ob1"


# --------------------------------------------------------------------------------------------
# agreement
# --------------------------------------------------------------------------------------------


class AgreedError(CellOtf2Error):
    """Another converter process failed; raised on every process but that one."""

    secondary = True

    def __init__(self, message: str, exit_status: int) -> None:
        super().__init__(message)
        self.exit_status = exit_status


class _Steps:
    """Runs each step on every process and agrees on its outcome."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        failure = None
        value = raised = None
        try:
            value = fn()
        except CellOtf2Error as exc:
            failure = (exc.exit_status, str(exc))
            raised = exc
        except Exception as exc:  # noqa: BLE001 - a bug: nobody may wait for this process
            self.abort(name, exc)
        _wait_quietly(self.comm)
        failures = self.comm.allgather(failure)
        first = next((r for r, f in enumerate(failures) if f is not None), None)
        if first is None:
            return value
        if first == self.rank and raised is not None:
            raise raised
        status, message = failures[first]
        raise AgreedError(message, status)

    def abort(self, step: str, exc: BaseException) -> None:
        sys.stderr.write(f"cell2otf2: error: internal error on converter process {self.rank} "
                         f"({step}): {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        self.comm.Abort(EXIT_INPUT)


def _wait_quietly(comm: Any) -> None:
    """Wait for every process without spinning: Open MPI busy-polls in blocking collectives,
    so a process that finished its part would burn a core the others need (process 0's node
    fit, an unbalanced step, other work on the machine). A non-blocking barrier tested with
    growing sleeps (at most 5 ms) costs a few milliseconds per step instead."""
    poll_quietly(comm.Ibarrier().Test)


def poll_quietly(done: Callable[[], bool], meanwhile: Callable[[], None] | None = None) -> None:
    """Until ``done()``: call ``meanwhile`` (if any), then sleep, 0.2 ms at first, doubling up
    to 5 ms (MPI's own blocking calls would spin a core instead)."""
    pause = 0.0002
    while not done():
        if meanwhile is not None:
            meanwhile()
        time.sleep(pause)
        pause = min(2 * pause, 0.005)


# --------------------------------------------------------------------------------------------
# plan and layout
# --------------------------------------------------------------------------------------------


def partition(man: Manifest, dump_bytes: list[int], n_proc: int) -> np.ndarray:
    """Converter process of each node: whole nodes, the heaviest (sum of its dumps' bytes)
    first onto the least loaded process (ties: the lower process)."""
    weight = np.zeros(len(man.nodes), dtype=np.int64)
    for p in man.processes:
        weight[man.node_of_rank(p.rank)] += dump_bytes[p.rank] + 1
    owner = np.zeros(len(man.nodes), dtype=np.int64)
    load = np.zeros(n_proc, dtype=np.int64)
    for node in np.argsort(-weight, kind="stable").tolist():
        q = int(np.argmin(load))
        owner[node] = q
        load[q] += weight[node]
    return owner


def _dump_bytes(man: Manifest) -> list[int]:
    sizes = []
    for p in man.processes:
        try:
            sizes.append(os.path.getsize(man.dump_path(p.rank)))
        except OSError:
            sizes.append(0)  # reading it fails later, with the reader's message
    return sizes


def _layout_part(man: Manifest, summaries: list, damage: DamageLog) -> dict:
    """This process's location rows (its ranks, in rank order) and contexts, with context
    locations counted from the start of each rank's rows, from the ``decode.summarize`` of
    each of its dumps."""
    locations, contexts, _ = _build_locations(man, summaries, damage)
    n = man.n_ranks
    rows = locations[n:]
    ranks = [d.rank for d in summaries]
    per_rank = []
    for r in ranks:
        idx = np.flatnonzero(rows["rank"] == r)
        ctx = contexts[contexts["rank"] == r].copy()
        ctx["loc"] -= n + int(idx[0])
        per_rank.append((r, rows[idx], ctx))
    return {"ranks": per_rank, "names": {d.rank: d.name for d in summaries},
            "buffers": {d.rank: d.spe_buffer_records for d in summaries}}


def _assemble_layout(man: Manifest, parts: list[dict]) -> RunLayout:
    """The whole run's layout as ``decode._build_locations`` numbers it from every dump."""
    n = man.n_ranks
    by_rank = {r: (rows, ctx) for part in parts for r, rows, ctx in part["ranks"]}
    names = {r: v for part in parts for r, v in part["names"].items()}
    buffers = {r: v for part in parts for r, v in part["buffers"].items()}
    main = np.zeros(n, LOCATION_DTYPE)
    main["rank"] = np.arange(n)
    main["kind"] = LocKind.PPE_THREAD
    rows_all, ctx_all = [main], []
    base = n
    for r in range(n):
        rows, ctx = by_rank[r]
        ctx = ctx.copy()
        ctx["loc"] += base
        rows_all.append(rows)
        ctx_all.append(ctx)
        base += rows.size
    return RunLayout(
        locations=np.concatenate(rows_all),
        contexts=np.concatenate(ctx_all) if ctx_all else np.zeros(0, CONTEXT_DTYPE),
        dump_names=[names[r] for r in range(n)],
        spe_buffer_records=[buffers[r] for r in range(n)],
    )


# --------------------------------------------------------------------------------------------
# MPI across processes
# --------------------------------------------------------------------------------------------


class _MpiState:
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
    return np.flatnonzero(np.isin(dec.records["code"], MPI_CODES))


def _mpi_subset(dec: Decoded) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sel = _mpi_index(dec)
    epoch = (dec.loss_epoch[sel] if dec.loss_epoch is not None
             else np.zeros(sel.size, np.int32))
    return dec.records[sel], epoch, sel


def _match_mpi(man: Manifest, layout: RunLayout, node_domains: np.ndarray,
               parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], damage: DamageLog):
    """Process 0: pair every MPI record and fit the node clocks, as the serial pipeline does
    on the whole trace (records in (location, slot) order, so pairs and points come out in
    the serial order). Returns the node maps, the per-process within-node pairs (local record
    indexes) and the state step 5 needs."""
    from .nodefit import fitted_node_maps

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
    node_maps = fitted_node_maps(mini, found)
    own, loc = owner[order], local[order]
    pairs = []
    for q in range(len(parts)):
        p = found.pairs[own[found.pairs["before"]] == q]
        mine = np.zeros(p.size, PAIR_DTYPE)
        mine["before"], mine["after"] = loc[p["before"]], loc[p["after"]]
        pairs.append(mine)
    return node_maps, pairs, _MpiState(own, loc, order, found.messages, len(parts))


def share_after_sync(dec: Decoded, matches: Matches, cons: Constraints,
                     result: SyncResult) -> tuple[np.ndarray, tuple[int, int] | None, dict]:
    """What a share of the run (a converter process's nodes, or a group of ``stream.py``)
    hands on once its records have their times: the usable flags of its MPI records
    (``_mpi_index`` order, for ``_paired``), its time span (None: no usable record), and its
    interval bounds, counts and ``cell2otf2::sync_intervals`` values (``_whole_run``), and
    the SPU of each context's first run that a record names (``emit.first_spus``)."""
    code = dec.records["code"]
    sel = _mpi_index(dec)
    good = result.usable[sel] & (code[sel] != 0)
    t = dec.records["time"][result.usable & (code != 0)]
    span = (int(t.min()), int(t.max())) if t.size else None
    iv = slice(dec.n_nodes, None)
    info = {
        "domains": dec.domains[iv], "offset": result.offset[iv], "lower": result.lower[iv],
        "upper": result.upper[iv], "bounded": result.bounded[iv],
        "relaxation": result.relaxation, "violations": result.order_violations,
        "clamped": result.clamped, "records": dec.records_total, "slots_lost": dec.slots_lost,
        "blocks_missing": dec.blocks_missing, "messages": int(matches.messages.size),
        "counts": cons.counts, "assumed": cons.assumed,
        "sync_intervals": sync_intervals_property(dec, result),
        "first_spu": first_spus(dec),
    }
    return good, span, info


def _paired(state: _MpiState, good_parts: list[np.ndarray]) -> list[np.ndarray]:
    """Process 0: per process, its MPI records whose message has both ends usable."""
    good = np.concatenate(good_parts)[state.order]
    m = state.messages
    both = good[m["send"]] & good[m["recv"]]
    flag = np.zeros(good.size, dtype=bool)
    flag[m["send"][both]] = flag[m["recv"][both]] = True
    return [state.local[flag & (state.owner == q)] for q in range(state.n_proc)]


def rma_transfers(dec: Decoded, matches: Matches, usable: np.ndarray) -> np.ndarray:
    """Per rank of the run, the DMA transfers of ``dec`` whose issue is written (``emit``
    gives each one RMA matching id)."""
    issue = matches.dma["issue"]
    issue = issue[usable[issue] & (dec.records["code"][issue] != 0)]
    rank_of = dec.locations["rank"].astype(np.int64)[dec.records["loc"][issue]]
    return np.bincount(rank_of, minlength=dec.manifest.n_ranks)


def rma_id_offset(mine: np.ndarray, every: np.ndarray) -> np.ndarray:
    """RMA matching ids count DMA transfers over the whole run in rank order: per rank, the
    transfers of lower ranks held elsewhere (``every`` - ``mine``, both ``rma_transfers``),
    which ``emit(..., rma_id_offset=)`` adds to that rank's ids."""
    return ((np.cumsum(every) - every) - (np.cumsum(mine) - mine)).astype(np.uint64)


# --------------------------------------------------------------------------------------------
# the conversion
# --------------------------------------------------------------------------------------------


class Team:
    """The converter processes of ``comm`` as ``stream.convert_groups`` asks them (the serial
    conversion's is ``stream.Alone``): collectives of mpi4py, every step agreed on
    (``_Steps``), the nodes of this process (``partition``), the layout assembled from every
    process's part, and the write through OTF2's collective callbacks with locations handed
    from busy processes to idle ones (``write_share``)."""

    def __init__(self, steps: _Steps) -> None:
        self.steps = steps
        self.comm = steps.comm
        self.rank, self.size = steps.rank, steps.comm.Get_size()
        self.handed = (0, 0)  # locations, events this process handed over while writing

    def run(self, step: str, fn: Callable[[], Any]) -> Any:
        return self.steps.run(step, fn)

    def gather(self, value: Any) -> list | None:
        return self.comm.gather(value, root=0)

    def allgather(self, value: Any) -> list:
        return self.comm.allgather(value)

    def bcast(self, value: Any) -> Any:
        return self.comm.bcast(value, root=0)

    def scatter(self, values: list | None) -> Any:
        return self.comm.scatter(values, root=0)

    def allreduce(self, value: Any) -> Any:
        return self.comm.allreduce(value)

    def my_ranks(self, man: Manifest, dump_bytes: list[int]) -> list[int]:
        owner = partition(man, dump_bytes, self.size)
        return [p.rank for p in man.processes if owner[man.node_of_rank(p.rank)] == self.rank]

    def layout(self, man: Manifest, summaries: list, damage: DamageLog) -> RunLayout:
        part = self.run("decode", lambda: _layout_part(man, summaries, damage))
        return _assemble_layout(man, self.allgather(part))

    def write(self, defs, own, tmp: Path, name: str, on_write):
        from .otf2_mpi import MpiCollectives
        from .otf2_writer import EventGroups, write_archive
        from .write_share import WriteShare

        dup, share_comm = self.comm.Dup(), self.comm.Dup()
        try:
            share = WriteShare(share_comm, own)
            collectives = MpiCollectives(dup)
            written = self.run("write", lambda: write_archive(
                defs, EventGroups(share.groups()), tmp, name, on_write,
                collectives=collectives))
            self.handed = (share.given_locations, share.given_events)
            return written
        finally:
            share_comm.Free()
            dup.Free()


def convert_parallel(comm: Any, run_dir: str | Path, archive: str | Path, *, force: bool = False,
                     dma_style: DmaStyle | str = DmaStyle.RMA, alpha: float = 0.5,
                     report: str | Path | None = None,
                     order_options: OrderOptions | None = None,
                     progress: Progress | None = None, group_bytes: int | None = None):
    """``convert.convert`` on every process of ``comm``; returns the run's summary on each
    (with ``rank`` set to the process's rank). ``group_bytes``: ``stream.convert_groups``'."""
    wall0 = time.perf_counter()
    steps = _Steps(comm)
    root = steps.rank == 0
    target = steps.run("output", lambda: ArchiveTarget(archive, report))
    try:
        steps.run("output",
                  lambda: target.prepare(force, RunInputs.of(run_dir)) if root else None)
        summary = _convert(steps, Path(run_dir), target, str(archive), DmaStyle(dma_style),
                           alpha, report, order_options, progress if root else None, wall0,
                           group_bytes)
    except KeyboardInterrupt:
        target.remove_made()
        sys.stderr.write("cell2otf2: error: interrupted\n")
        comm.Abort(EXIT_USAGE)
        raise
    except BaseException:
        target.remove_made()
        raise
    summary.rank = steps.rank
    return summary


def _convert(steps: _Steps, run_dir: Path, target: ArchiveTarget, archive: str,
             dma_style: DmaStyle, alpha: float, report, order_options, progress, wall0: float,
             group_bytes: int | None):
    """Process 0 stages the output; every process converts its nodes group by group into it
    (``stream.convert_groups``; spilled groups under ``.spill/process<rank>`` inside the
    staging directory); process 0 commits the archive and writes the report."""
    from .convert import sync_report
    from .stream import _Clock, _Spill, convert_groups

    comm, root = steps.comm, steps.rank == 0
    staging = target.staged() if root else None
    tmp = steps.run("output", lambda: str(staging.__enter__()) if root else None)
    entered = root
    try:
        tmp = Path(comm.bcast(tmp, root=0))
        spill = _Spill(tmp / ".spill" / f"process{steps.rank}")
        try:
            summary, whole = convert_groups(Team(steps), run_dir, tmp, target.name, _Clock(),
                                            spill, dma_style, alpha, order_options, progress,
                                            group_bytes)
        finally:
            spill.close()
        if root and report is not None:  # moved into place with the archive
            target.stage_report(json.dumps(sync_report(whole), indent=1) + "\n")
        entered = False
        steps.run("write", lambda: staging.__exit__(None, None, None) if root else None)
    except BaseException as exc:
        if isinstance(exc, CellOtf2Error):  # every process is here (agreed): none still
            _wait_quietly(comm)  # removes its spill files when process 0 removes the staging
        if entered:
            staging.__exit__(*sys.exc_info())
        raise

    def finish():
        summary.run_dir, summary.archive = str(run_dir), archive
        summary.converter_processes = comm.Get_size()
        summary.wall_seconds = time.perf_counter() - wall0
        return summary

    summary = steps.run("report", finish if root else lambda: None)
    return comm.bcast(summary, root=0)



def _whole_run(man: Manifest, layout: RunLayout, dec: Decoded, gathered: list[dict],
               node_maps: list):
    """Process 0: the whole run's domains, bounds, counts and damage as one ``Pipeline`` for
    ``emit.build_definitions``, ``convert._summary`` and ``convert.sync_report`` (no
    records)."""
    from .convert import Pipeline

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
        order_violations=sum(g["violations"] for g in gathered),
        clamped=sum(g["clamped"] for g in gathered),
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
    assumed: dict[str, float] = {}
    for g in gathered:
        for k, v in g["counts"].items():
            counts[k] = counts.get(k, 0) + v
        assumed.update(g["assumed"])
    empty = np.zeros(0, dtype=np.int64)
    cons = Constraints(empty, empty, np.zeros(0), counts, assumed)
    matches = Matches(np.zeros(0, MSG_DTYPE), np.zeros(0, DMA_DTYPE),
                      np.zeros(0, PAIR_DTYPE), np.zeros(0, PAIR_DTYPE))
    return Pipeline(decoded, matches, cons, sync, _merge_damage(layout, gathered))


def _merge_damage(layout: RunLayout, gathered: list[dict]) -> DamageLog:
    """One log as the serial pipeline fills it: stage by stage; within a stage by the rank
    of the file, or as added when one process found all of it (MPI pairing, process 0)."""
    rank_of = {name: r for r, name in enumerate(layout.dump_names)}
    log = DamageLog()
    for stage in _STAGES:
        entries: list[tuple[int, int, int, Damage]] = []
        for q, g in enumerate(gathered):
            for i, d in enumerate(g["damage"][stage]):
                entries.append((rank_of.get(d.file, -1), q, i, d))
        if len({e[1] for e in entries}) > 1:
            entries.sort(key=lambda e: e[:3])
        for *_, d in entries:
            log.add_damage(d)
    return log
