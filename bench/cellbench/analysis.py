"""The stages up to the record times (read, decode, match, order, synchronize) on a whole
run at once, in memory, returning every intermediate array: what the tests and benchmarks
evaluate against the simulator's truth. Not a conversion: it writes nothing, spills nothing
and runs in one process; ``cell_otf2.run.conversion.convert`` is the product's path."""

from __future__ import annotations

import time
from pathlib import Path

from cell_otf2.damage import DamageLog
from cell_otf2.decode.decoder import decode
from cell_otf2.decode.match import match
from cell_otf2.input.dumps import Dumps, Progress, read_summaries
from cell_otf2.input.manifest import load_manifest
from cell_otf2.model import OrderOptions, Pipeline
from cell_otf2.sync.nodefit.fit import fitted_node_maps
from cell_otf2.sync.order import build_constraints
from cell_otf2.sync.synchronize import apply_times, synchronize, written_order_violations


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
                         node_maps=fitted_node_maps(dec, matches, damage=damage))
    apply_times(dec, result, damage)
    result.order_violations = written_order_violations(dec, matches, result.usable)
    t4, c4 = time.perf_counter(), time.process_time()
    timings.update(read=t1 - t0, decode=t2 - t1, order=t3 - t2, sync=t4 - t3)
    cpu_timings.update(read=c1 - c0, decode=c2 - c1, order=c3 - c2, sync=c4 - c3)
    return Pipeline(dec, matches, cons, result, damage)
