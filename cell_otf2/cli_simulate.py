"""``cell2otf2 simulate OUT_DIR``: write a synthetic CBT 1 run with its ground truth.

A thin typer command: parses options, refuses a non-empty OUT_DIR unless ``--force``, calls
``cell_otf2.simulate.simulate_run`` and prints a short summary. No simulation logic here.
"""

from __future__ import annotations

import shutil
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from .errors import EXIT_OUTPUT, EXIT_USAGE


class WorkloadName(StrEnum):
    fft = "fft"
    matmul = "matmul"
    blackscholes = "blackscholes"
    julia = "julia"
    hybrid = "hybrid"


class RestoreMode(StrEnum):
    compensated = "compensated"
    restored = "restored"


class ByteOrder(StrEnum):
    B = "B"
    L = "L"


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


def simulate_command(
    out_dir: Annotated[Path, typer.Argument(help="Run directory to write.")],
    workload: Annotated[WorkloadName, typer.Option(help="Benchmark shape.")] = WorkloadName.fft,
    seed: Annotated[int, typer.Option(help="Random seed; same seed, same bytes.")] = 1,
    spes: Annotated[int | None, typer.Option(help="SPE contexts per rank.")] = None,
    ranks: Annotated[int | None, typer.Option(help="MPI processes.")] = None,
    nodes: Annotated[int | None, typer.Option(help="Nodes (one timebase each).")] = None,
    phases: Annotated[int | None, typer.Option(help="Barrier phases.")] = None,
    duration_s: Annotated[float | None, typer.Option(
        "--duration-s", help="Approximate run length; picks the number of phases.")] = None,
    chunks: Annotated[int | None, typer.Option(help="Loop iterations per phase per SPE.")] = None,
    timebase_hz: Annotated[int, typer.Option(help="Nominal timebase frequency.")] = 14_318_000,
    spus: Annotated[int | None, typer.Option(
        help="Physical SPUs per node; fewer than contexts forces context switches.")] = None,
    slice_ms: Annotated[float, typer.Option(
        help="SPU time slice in ms; a waiting context preempts after it (<= 0: never).")] = 100.0,
    decrementer_restore: Annotated[RestoreMode, typer.Option(
        help="How the kernel restores a decrementer.")] = RestoreMode.compensated,
    decr_writes: Annotated[bool, typer.Option(
        "--decr-writes/--no-decr-writes", help="SPE programs rewrite their decrementer.")] = False,
    heartbeats: Annotated[bool, typer.Option(
        "--heartbeats/--no-heartbeats", help="HEARTBEAT records against wrap ambiguity.")] = True,
    spe_buffer_records: Annotated[int, typer.Option(
        help="Records per SPE Local Store buffer (1 = flush every record).")] = 16,
    spe_buffers: Annotated[int, typer.Option(help="1 or 2 (double buffering).")] = 2,
    byte_order: Annotated[ByteOrder, typer.Option(help="B (big-endian) or L.")] = ByteOrder.B,
    max_ppm: Annotated[float, typer.Option(help="Largest node drift, ppm (<= 100).")] = 50.0,
    drift_segments: Annotated[int | None, typer.Option(
        help="Node rates change at this many even knots over the run (1: linear drift; "
             "default: 4, margins at rates of their own).")] = None,
    wander_us: Annotated[float, typer.Option(
        help="Oscillator wander: a sine of this amplitude on each node's offset.")] = 0.0,
    wander_period_s: Annotated[float, typer.Option(
        help="Period of the wander (+-20 % per node).")] = 240.0,
    compute_us: Annotated[float | None, typer.Option(
        help="SPE compute per chunk, us (hybrid with --chunks 1: MPI exchanges this far "
             "apart).")] = None,
    damage: Annotated[list[DamageKind] | None, typer.Option(
        help="Damage of FORMAT 3.7 to inject (repeatable).")] = None,
    force: Annotated[bool, typer.Option(help="Replace a non-empty OUT_DIR.")] = False,
) -> None:
    """Write a synthetic CBT 1 run with its ground truth."""
    from .simulate import simulate_run

    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        if not force:
            typer.echo(f"cell2otf2: error: {out_dir} exists and is not empty (use --force)",
                       err=True)
            raise SystemExit(EXIT_OUTPUT)
        if out_dir.is_dir():
            shutil.rmtree(out_dir)
        else:
            out_dir.unlink()
    try:
        summary = simulate_run(
            out_dir, workload.value, seed, spes=spes, ranks=ranks, nodes=nodes, phases=phases,
            duration_s=duration_s, chunks=chunks, timebase_hz=timebase_hz, spus=spus,
            slice_ms=slice_ms, decrementer_restore=decrementer_restore.value,
            decr_writes=decr_writes,
            heartbeats=heartbeats, spe_buffer_records=spe_buffer_records,
            spe_buffers=spe_buffers, byte_order=byte_order.value, max_ppm=max_ppm,
            drift_segments=drift_segments, wander_us=wander_us,
            wander_period_s=wander_period_s, compute_us=compute_us,
            damage=[d.value for d in (damage or [])],
        )
    except ValueError as exc:
        typer.echo(f"cell2otf2: error: {exc}", err=True)
        raise SystemExit(EXIT_USAGE) from None
    typer.echo(
        f"simulated {workload.value} (seed {seed}) into {out_dir}: {summary.records} records in "
        f"{summary.slots} slots, {summary.contexts} SPE contexts, {summary.ranks} ranks on "
        f"{summary.nodes} node(s), {summary.context_switches} context switches "
        f"({summary.preemptions} preemptions), "
        f"{summary.bytes_written} bytes of dumps"
    )
