"""``cell2otf2 simulate OUT_DIR``: write a synthetic CBT 1 run with its ground truth. A thin
typer command: parses options, refuses an OUT_DIR that is not empty unless it is a previous
simulated run and ``--force`` is given, calls ``sim.run.simulate_run`` into a hidden staging
folder beside OUT_DIR and moves the finished run into place (a failure leaves nothing), and
prints a short summary. No simulation logic here."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
import tempfile
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from ..cli_common import choice, choices, complete
from ..errors import EXIT_OUTPUT, EXIT_USAGE


class WorkloadName(StrEnum):
    fft = "fft"
    matmul = "matmul"
    blackscholes = "blackscholes"
    julia = "julia"
    hybrid = "hybrid"
    cluster = "cluster"


class Topology(StrEnum):
    ring = "ring"
    chain = "chain"


class RestoreMode(StrEnum):
    compensated = "compensated"
    restored = "restored"


class ByteOrder(StrEnum):
    B = "B"
    L = "L"


#: what an option left unset takes (shown in the help as its default)
WORKLOADS_OWN = "the workload's"


class DamageKind(StrEnum):
    truncate = "truncate"
    gap = "gap"
    block_overrun = "block-overrun"
    unknown_code = "unknown-code"
    undefined_id = "undefined-id"
    no_exit = "no-exit"
    no_run_end = "no-run-end"
    unmatched_mailbox = "unmatched-mailbox"
    unmatched_mpi = "unmatched-mpi"
    backwards_timebase = "backwards-timebase"
    late_block_header = "late-block-header"
    overcounted_blocks = "overcounted-blocks"


def simulate_command(
    out_dir: Annotated[Path, typer.Argument(metavar="OUT_DIR", help="Run directory to write.")],
    workload: Annotated[str, typer.Option(
        callback=choice(WorkloadName), autocompletion=complete(WorkloadName),
        metavar="|".join(WorkloadName),
        help="Benchmark shape.")] = WorkloadName.fft.value,
    seed: Annotated[int, typer.Option(help="Random seed; same seed, same bytes.")] = 1,
    spes: Annotated[int | None, typer.Option(
        min=1, help="SPE contexts per rank.", show_default=WORKLOADS_OWN)] = None,
    ranks: Annotated[int | None, typer.Option(
        min=1, help="MPI processes.", show_default=WORKLOADS_OWN)] = None,
    nodes: Annotated[int | None, typer.Option(
        min=1, help="Nodes (one timebase each).", show_default=WORKLOADS_OWN)] = None,
    phases: Annotated[int | None, typer.Option(
        min=1, help="Barrier phases.", show_default=WORKLOADS_OWN)] = None,
    duration_s: Annotated[float | None, typer.Option(
        "--duration-s", help="Approximate run length; picks the number of phases.",
        show_default=WORKLOADS_OWN)] = None,
    chunks: Annotated[int | None, typer.Option(
        min=1, help="Loop iterations per phase per SPE.",
        show_default=WORKLOADS_OWN)] = None,
    timebase_hz: Annotated[int, typer.Option(min=1, help="Nominal timebase frequency.")
                           ] = 14_318_000,
    spus: Annotated[int | None, typer.Option(
        help="Physical SPUs per node; fewer than contexts forces context switches.",
        show_default=WORKLOADS_OWN)] = None,
    slice_ms: Annotated[float, typer.Option(
        help="SPU time slice in ms; a waiting context preempts after it (<= 0: never).")] = 100.0,
    decrementer_restore: Annotated[str, typer.Option(
        callback=choice(RestoreMode), autocompletion=complete(RestoreMode),
        metavar="compensated|restored",
        help="How the kernel restores a decrementer.")] = RestoreMode.compensated.value,
    decr_writes: Annotated[bool, typer.Option(
        "--decr-writes/--no-decr-writes", help="SPE programs rewrite their decrementer.")] = False,
    heartbeats: Annotated[bool, typer.Option(
        "--heartbeats/--no-heartbeats", help="HEARTBEAT records against wrap ambiguity.")] = True,
    heartbeat_ticks: Annotated[int, typer.Option(
        help="A step of this many ticks gets heartbeats (docs/format.md 6.8: 2147483648 = 2^31, "
             "only when needed).")] = 1 << 30,
    poll_s: Annotated[float, typer.Option(
        "--poll-s", help="A monitoring PPE thread samples a counter this often (0: none).")
    ] = 0.0,
    compute_s: Annotated[float | None, typer.Option(
        "--compute-s", help="Mean seconds of one SPE compute step (default: the workload's; "
        "hybrid with --chunks 1: MPI exchanges this far apart).")
    ] = None,
    exchange_s: Annotated[float | None, typer.Option(
        "--exchange-s", help="cluster: seconds between halo exchanges, filled by the SPE "
        "compute of one iteration (default 2).")] = None,
    topology: Annotated[str, typer.Option(
        callback=choice(Topology), autocompletion=complete(Topology), metavar="ring|chain",
        help="cluster: ring (periodic halo and shift, collectives) or chain (messages only "
             "between neighbouring nodes, no collectives).")] = Topology.ring.value,
    halo_bytes: Annotated[int, typer.Option(
        min=1, help="cluster: bytes of each halo message.")] = 8192,
    shift_bytes: Annotated[int, typer.Option(
        min=1, help="cluster: bytes of each message of the one-way shift.")] = 4096,
    imbalance: Annotated[float, typer.Option(
        help="cluster: ranks compute at speeds within +-this share, plus as much jitter "
             "per iteration.")] = 0.01,
    spe_buffer_records: Annotated[int, typer.Option(
        help="Records per SPE Local Store buffer (1 = flush every record).")] = 16,
    spe_buffers: Annotated[int, typer.Option(help="1 or 2 (double buffering).")] = 2,
    byte_order: Annotated[str, typer.Option(
        callback=choice(ByteOrder), autocompletion=complete(ByteOrder), metavar="B|L",
        help="B (big-endian) or L.")] = ByteOrder.B.value,
    max_ppm: Annotated[float, typer.Option(help="Largest node drift, ppm (<= 100).")] = 50.0,
    drift_segments: Annotated[int | None, typer.Option(
        help="Node rates change at this many even knots over the run (1: linear drift; "
             "default: 4, margins at rates of their own).")] = None,
    wander_us: Annotated[float, typer.Option(
        help="Oscillator wander: a sine of this amplitude on each node's offset.")] = 0.0,
    wander_period_s: Annotated[float, typer.Option(
        help="Period of the wander (+-20 % per node).")] = 240.0,
    damage: Annotated[list[str] | None, typer.Option(
        metavar="KIND", callback=choices(DamageKind), autocompletion=complete(DamageKind),
        help="Damage to inject (repeatable): " + ", ".join(DamageKind)
        + "; see docs/damage.md.", show_default="none")] = None,
    force: Annotated[bool, typer.Option(
        "-f", "--force", help="Replace a previous simulated run in OUT_DIR (nothing else).")
    ] = False,
    quiet: Annotated[bool, typer.Option(
        "-q", "--quiet", help="Print nothing (no size, no progress line, no summary).")
    ] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the summary as one JSON object (the fields of SimSummary).")
    ] = False,
) -> None:
    """Write a synthetic CBT 1 run with its ground truth."""
    from .run import simulate_run

    replace = _check_out_dir(out_dir, force)
    line = _Progress(enabled=not quiet)

    def announce(records: int, size: int) -> None:
        """Before the first dump is written: on stdout (on a terminal's stderr with --json,
        whose stdout is the JSON alone)."""
        if quiet or (as_json and not line.enabled):
            return
        line.clear()
        typer.echo(f"cell2otf2 simulate: writing {_size(size)} of dumps ({records:,} "
                   f"records) into {out_dir}", err=as_json)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp's 0700 would otherwise stay with the run
    except OSError as exc:
        from ..run.output import cannot_create

        _fail_output(cannot_create(out_dir.parent, exc) if out_dir.parent.is_dir()
                     else f"{out_dir}: cannot create the run directory: {_why(exc)}")
    try:
        summary = simulate_run(
            staging, workload, seed, spes=spes, ranks=ranks, nodes=nodes, phases=phases,
            duration_s=duration_s, chunks=chunks, timebase_hz=timebase_hz, spus=spus,
            slice_ms=slice_ms, decrementer_restore=decrementer_restore,
            decr_writes=decr_writes,
            heartbeats=heartbeats, heartbeat_ticks=heartbeat_ticks, poll_s=poll_s,
            compute_s=compute_s, spe_buffer_records=spe_buffer_records,
            spe_buffers=spe_buffers, byte_order=byte_order, max_ppm=max_ppm,
            drift_segments=drift_segments, wander_us=wander_us,
            wander_period_s=wander_period_s,
            damage=list(damage or []),
            exchange_s=exchange_s, topology=topology, halo_bytes=halo_bytes,
            shift_bytes=shift_bytes, imbalance=imbalance, progress=line, announce=announce,
        )
        _move_into_place(staging, out_dir, replace)
    except ValueError as exc:
        typer.echo(f"cell2otf2: error: {exc}", err=True)
        raise SystemExit(EXIT_USAGE) from None
    except OSError as exc:
        _fail_output(f"{out_dir}: cannot write the run: {_why(exc)}; nothing was written")
    finally:
        line.clear()
        shutil.rmtree(staging, ignore_errors=True)
    from ..run.summary import plural

    if quiet:
        return
    if as_json:
        import json
        from dataclasses import asdict

        typer.echo(json.dumps({"run_dir": str(out_dir), "workload": workload, "seed": seed,
                               **{k: v for k, v in asdict(summary).items() if k != "out_dir"}},
                              indent=1))
        return
    typer.echo(
        f"simulated {workload} (seed {seed}) into {out_dir}: "
        f"{plural(summary.records, 'record')} in {plural(summary.slots, 'slot')}, "
        f"{plural(summary.contexts, 'SPE context')}, {plural(summary.ranks, 'rank')} on "
        f"{plural(summary.nodes, 'node')}, {plural(summary.context_switches, 'context switch')} "
        f"({plural(summary.preemptions, 'preemption')}), "
        f"{plural(summary.bytes_written, 'byte')} of dumps"
    )


def _size(n: int) -> str:
    """``1.1 MB``, ``755 MB``, ``2.3 GB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.{1 if n < 10 * scale else 0}f} {unit}"
    return f"{n} bytes"


class _Progress:
    """``progress(stage, fraction)`` of ``simulate_run``: one self-overwriting line on stderr
    when it is a terminal, nothing otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.shown = ""
        self.last = 0.0

    def __call__(self, stage: str, fraction: float) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.2 and fraction < 1.0):
            return
        word = "simulating" if stage == "simulate" else "writing"
        text = f"cell2otf2 simulate: {word} {100 * fraction:3.0f}%"
        sys.stderr.write("\r" + text.ljust(len(self.shown)))
        sys.stderr.flush()
        self.shown, self.last = text, now

    def clear(self) -> None:
        if self.enabled and self.shown:
            sys.stderr.write("\r" + " " * len(self.shown) + "\r")
            sys.stderr.flush()
            self.shown = ""


#: what ``simulate`` writes into a run directory, and all it writes
_SIMULATED_FILE = re.compile(r"run\.json|truth\.json|truth\.npz|rank\d+\.cbt")


def _check_out_dir(out_dir: Path, force: bool) -> bool:
    """Whether an existing ``out_dir`` is to be replaced; exits 4 when it must not be:
    anything but an empty directory without ``--force``, and anything but a previous simulated
    run (only the files ``simulate`` writes) even with it."""
    if not os.path.lexists(out_dir):
        return False
    if out_dir.is_symlink() or not out_dir.is_dir():
        _fail_output(f"{out_dir}: exists and is not a directory; not replaced")
    try:
        names = os.listdir(out_dir)
    except OSError as exc:
        _fail_output(f"{out_dir}: cannot be examined: {_why(exc)}")
    if not names:
        return True
    foreign = [n for n in names if not (_SIMULATED_FILE.fullmatch(n)
                                         and (out_dir / n).is_file()
                                         and not (out_dir / n).is_symlink())]
    if foreign:
        _fail_output(f"{out_dir}: holds {foreign[0]!r}, which simulate does not write; a "
                     "folder that is not a previous simulated run is never replaced, not even "
                     "with --force: choose another OUT_DIR")
    if not force:
        _fail_output(f"{out_dir}: holds a previous simulated run; use --force to replace it")
    return True


def _move_into_place(staging: Path, out_dir: Path, replace: bool) -> None:
    """The finished run takes ``out_dir``'s place (the previous run is removed only then)."""
    if replace:
        aside = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.rename(out_dir, aside / "run")
        try:
            os.rename(staging, out_dir)
        except OSError:
            os.rename(aside / "run", out_dir)
            raise
        finally:
            shutil.rmtree(aside, ignore_errors=True)
    else:
        os.rename(staging, out_dir)


def _why(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    return exc.strerror or str(exc)


def _fail_output(message: str) -> NoReturn:
    typer.echo(f"cell2otf2: error: {message}", err=True)
    raise SystemExit(EXIT_OUTPUT)
