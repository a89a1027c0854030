"""The team of every process of an MPI launch (``mpiexec -n P``, ``srun``), as
``driver.run_phases`` and ``conversion.convert`` ask a team (``team_serial.SerialTeam`` is the
other); the only module that imports mpi4py, and only with more than one process. It splits
whole nodes between processes (``partition``), agrees on every step, stages and commits the
output on the root and writes events through OTF2's collective callbacks (``otf2_mpi``,
``write_share``); it converts nothing itself (docs/performance.md)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..damage import DamageLog
from ..decode.decoder import build_locations
from ..errors import EXIT_SOFTWARE, EXIT_USAGE, CellOtf2Error, UsageError
from ..input.dumps import Progress
from ..input.manifest import Manifest
from ..model import CONTEXT_DTYPE, LOCATION_DTYPE, ArchiveDefs, LocKind, RunLayout
from ..writer.share import poll_quietly
from .output import SPILL_FOLDER, ArchiveTarget, RunInputs
from .summary import Summary
from .team import EventGroup, Written

T = TypeVar("T")

_log = logging.getLogger(__name__)

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
    try:
        from mpi4py import MPI
    except ImportError as exc:
        what = f"one of {size} MPI processes" if size > 0 else "an MPI process"
        raise UsageError(f"started as {what}, but mpi4py is not installed: install the "
                         "extra (pip install 'cell2otf2[mpi]') to convert in parallel, or run "
                         f"without mpiexec (or with {SERIAL_VAR}=1)") from exc
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None


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
        """A bug on this process: say so (with the traceback when debugging) and end every
        process of the launch with the internal error's status."""
        _log.error("internal error on converter process %d (%s): %s: %s", self.rank, step,
                   type(exc).__name__, exc, exc_info=exc if _log.isEnabledFor(logging.DEBUG)
                   else None)
        self.comm.Abort(EXIT_SOFTWARE)


def _wait_quietly(comm: Any) -> None:
    """Wait for every process without spinning: Open MPI busy-polls in blocking collectives,
    so a process that finished its part would burn a core the others need (process 0's node
    fit, an unbalanced step, other work on the machine). A non-blocking barrier tested with
    growing sleeps (at most 5 ms) costs a few milliseconds per step instead."""
    poll_quietly(comm.Ibarrier().Test)


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


def _layout_part(man: Manifest, summaries: list, damage: DamageLog) -> dict:
    """This process's location rows (its ranks, in rank order) and contexts, with context
    locations counted from the start of each rank's rows, from the ``decode.summarize`` of
    each of its dumps."""
    locations, contexts, _ = build_locations(man, summaries, damage)
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
    """The whole run's layout as ``decode.build_locations`` numbers it from every dump."""
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


# --------------------------------------------------------------------------------------------
# the conversion
# --------------------------------------------------------------------------------------------


class MpiTeam:
    """The converter processes of ``comm``: collectives of mpi4py, every step agreed on
    (``_Steps``), the nodes of this process (``partition``), the layout assembled from every
    process's part, the root staging the output, and the collective write."""

    def __init__(self, comm: Any) -> None:
        steps = _Steps(comm)
        self.steps = steps
        self.comm = comm
        self.rank, self.size = steps.rank, steps.comm.Get_size()
        self.handed = (0, 0)  # locations, events this process handed over while writing

    def run(self, step: str, fn: Callable[[], T]) -> T:
        return self.steps.run(step, fn)

    def on_root(self, step: str, fn: Callable[[], T]) -> T | None:
        """``fn()`` on the root, None on the other processes (an agreed step)."""
        return self.steps.run(step, fn if self.rank == 0 else lambda: None)

    def from_root(self, fn: Callable[[], T]) -> T:
        """The root's ``fn()`` on every process."""
        return self.comm.bcast(fn() if self.rank == 0 else None, root=0)

    def gather(self, value: T) -> list[T] | None:
        return self.comm.gather(value, root=0)

    def allgather(self, value: T) -> list[T]:
        return self.comm.allgather(value)

    def bcast(self, value: T) -> T:
        return self.comm.bcast(value, root=0)

    def scatter(self, values: list[T] | None) -> T:
        return self.comm.scatter(values, root=0)

    def allreduce(self, value: T) -> T:
        return self.comm.allreduce(value)

    def my_ranks(self, man: Manifest, dump_bytes: list[int]) -> list[int]:
        owner = partition(man, dump_bytes, self.size)
        return [p.rank for p in man.processes if owner[man.node_of_rank(p.rank)] == self.rank]

    def layout(self, man: Manifest, summaries: list, damage: DamageLog) -> RunLayout:
        part = self.run("decode", lambda: _layout_part(man, summaries, damage))
        return _assemble_layout(man, self.allgather(part))

    def write(self, defs: ArchiveDefs, own: Iterator[EventGroup], tmp: Path, name: str,
              on_write: Callable[[int], None]) -> Written:
        from ..writer.archive import write_archive
        from ..writer.events import EventGroups
        from ..writer.mpi_callbacks import MpiCollectives
        from ..writer.share import WriteShare

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

    # the output ------------------------------------------------------------------------------

    def local_progress(self, progress: Progress | None) -> Progress | None:
        """The progress display is the root's."""
        return progress if self.rank == 0 else None

    def open_output(self, archive: str | Path, report: str | Path | None, force: bool,
                    run_dir: str | Path) -> ArchiveTarget:
        """The output target on every process, checked and prepared by the root."""
        target = self.run("output", lambda: ArchiveTarget(archive, report, run_dir))
        try:
            self.run("output", lambda: target.prepare(force, RunInputs.of(run_dir))
                     if self.rank == 0 else None)
        except BaseException as exc:
            self.failed(target, exc)
            raise
        return target

    @contextmanager
    def staged(self, target: ArchiveTarget) -> Iterator[Path]:
        """The root's staging directory on every process; committed by the root when the
        block ends normally on every process."""
        staging = target.staged() if self.rank == 0 else None
        tmp = self.run("output", lambda: None if staging is None else str(staging.__enter__()))
        entered = staging is not None
        try:
            yield Path(self.comm.bcast(tmp, root=0))
            entered = False
            self.run("write", lambda: None if staging is None
                     else staging.__exit__(None, None, None))
        except BaseException as exc:
            if isinstance(exc, CellOtf2Error):  # every process is here (agreed): none still
                _wait_quietly(self.comm)  # removes its spill files when the root removes it
            if entered and staging is not None:
                staging.__exit__(*sys.exc_info())
            raise

    def spill_directory(self, tmp: Path) -> Path:
        return tmp / SPILL_FOLDER / f"process{self.rank}"

    def failed(self, target: ArchiveTarget, exc: BaseException) -> None:
        """After any failure: the folders the root made go again; an interruption stops
        every process (a process waiting in a collective would never return)."""
        target.remove_made()
        if isinstance(exc, KeyboardInterrupt):
            _log.error("interrupted")
            self.comm.Abort(EXIT_USAGE)

    def finish(self, summary: Summary | None) -> Summary:
        """The root's summary on every process, with this process's rank."""
        if summary is not None:  # the root's
            summary.converter_processes = self.size
        mine: Summary = self.comm.bcast(summary, root=0)
        mine.rank = self.rank
        return mine
