"""The conversion, as the command line and the Python API start it: ``convert`` checks the
output paths against the run (``output.py``), then converts node group by node group
(``stream.py``, or ``parallel.py`` under an MPI launch) and returns the ``summary.Summary``;
``analyze`` runs the stages up to the record times on the whole run at once (for ``check``,
tests and benchmarks). It prints nothing (progress goes through the ``progress`` callback)
and holds no stage's logic: reading, decoding, synchronizing and writing live in their own
modules.
"""

from __future__ import annotations

import time
from pathlib import Path

from .damage import DamageLog
from .decode import decode
from .dumps import Dumps, Progress, read_summaries
from .manifest import load_manifest
from .match import match
from .model import DmaStyle
from .nodefit.fit import fitted_node_maps
from .order import OrderOptions, build_constraints
from .output import ArchiveTarget, RunInputs
from .summary import Pipeline, Summary
from .timing import apply_times, synchronize


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
    dumps = Dumps(man, summaries)
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


