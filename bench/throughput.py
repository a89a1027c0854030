"""Conversion throughput and peak memory, measured against the OTF2 write ceiling (issue 7).

One command::

    .venv/bin/python bench/throughput.py [--records N] [--reuse DIR] [--keep]

1. Simulates a hybrid run (MPI + SPEs) of at least N input records (default 10 million) once
   and caches it under ``bench/out/throughput/`` (reruns reuse it; ``--reuse DIR`` takes any
   run directory instead).
2. Converts it in a child process (so neither the simulator's memory nor this script's counts)
   and prints seconds and records/s per stage, end to end, and the child's peak RSS
   (``ru_maxrss`` of the child, read by the child itself at the end; the RSS of a child that
   only imports the same modules is printed beside it), the input's size on disk (dumps +
   run.json) and their ratio, the same against the largest node's dumps (the serial
   converter holds one group of whole nodes at a time), and the synchronization share of
   the total.
3. Measures, in a fresh child process in the same run, the write ceiling: the rate at which
   this machine pushes the same number of events through the same OTF2 C entry points from
   Python with nothing else to do (``otf2_writer.write_ceiling``: Enter/Leave pairs, one
   location, the writer's own calling technique), and prints
   ``ratio = ceiling_seconds(N_events) / conversion_seconds``, i.e. the conversion's
   end-to-end speed as a fraction of the ceiling (1.0 = as fast as writing alone).
   A second ceiling writes the conversion's own event mix (same count per event type,
   attributes included, dummy arguments) and gives a second ratio.

Wall-clock figures on a shared machine vary; CPU seconds of the conversion child are printed
beside them (more wall than CPU means other processes had the cores). It measures; it asserts
nothing. ``--keep`` keeps the converted archive (under bench/out/throughput/).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out" / "throughput"
#: the simulated run's shape: 4 ranks on 2 nodes, 8 SPE contexts each
SHAPE = dict(workload="hybrid", ranks=4, nodes=2, spes=8, chunks=256)
SEED = 7


def _records_per_phase() -> tuple[int, int]:
    """(records of the set-up, records per phase) of SHAPE, from two tiny simulations."""
    from cell_otf2.simulate import simulate_run

    counts = []
    with tempfile.TemporaryDirectory(prefix="tp-calib-") as tmp:
        for phases in (1, 2):
            s = simulate_run(Path(tmp) / str(phases), SHAPE["workload"], SEED, phases=phases,
                             **{k: v for k, v in SHAPE.items() if k != "workload"})
            counts.append(s.records)
    per_phase = counts[1] - counts[0]
    return counts[0] - per_phase, per_phase


def simulated_run(records: int) -> Path:
    """The cached run of at least ``records`` records, simulated when missing."""
    setup, per_phase = _records_per_phase()
    phases = max(1, math.ceil((records - setup) / per_phase))
    name = (f"{SHAPE['workload']}-r{SHAPE['ranks']}n{SHAPE['nodes']}s{SHAPE['spes']}"
            f"c{SHAPE['chunks']}-p{phases}-seed{SEED}")
    run = OUT / name
    stamp = run / "simulated.json"
    if stamp.exists():
        print(f"reusing {run}")
        return run
    from cell_otf2.simulate import simulate_run

    if run.exists():
        shutil.rmtree(run)
    print(f"simulating {name} ({phases} phases, about {setup + phases * per_phase:,} records)"
          " ...", flush=True)
    t0 = time.perf_counter()
    s = simulate_run(run, SHAPE["workload"], SEED, phases=phases,
                     **{k: v for k, v in SHAPE.items() if k != "workload"})
    print(f"  {s.records:,} records, {s.bytes_written / 1e6:.0f} MB in "
          f"{time.perf_counter() - t0:.0f} s")
    stamp.write_text(json.dumps({"records": s.records, "bytes": s.bytes_written}) + "\n")
    return run


def input_bytes(run: Path) -> int:
    from cell_otf2.manifest import load_manifest

    man = load_manifest(run)
    return (run / "run.json").stat().st_size + sum(
        man.dump_path(p.rank).stat().st_size for p in man.processes)


def largest_node_bytes(run: Path) -> int:
    """The dumps of the node whose dumps are largest (the serial converter holds one group of
    whole nodes at a time, ``cell_otf2/stream.py``)."""
    from cell_otf2.manifest import load_manifest

    man = load_manifest(run)
    per_node = [0] * len(man.nodes)
    for p in man.processes:
        per_node[man.node_of_rank(p.rank)] += man.dump_path(p.rank).stat().st_size
    return max(per_node)


# --------------------------------------------------------------------------------------------
# child processes
# --------------------------------------------------------------------------------------------


def _maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def child_convert(run: str, archive: str) -> dict:
    from cell_otf2.convert import convert

    c0 = time.process_time()
    t0 = time.perf_counter()
    s = convert(run, archive, force=True)
    wall = time.perf_counter() - t0
    return {"wall": wall, "cpu": time.process_time() - c0, "stages": s.stage_seconds,
            "stages_cpu": s.stage_cpu_seconds,
            "records": s.records_in, "events": s.events_written, "maxrss": _maxrss_bytes(),
            "by_type": getattr(s, "events_by_type", None), "damage": s.damage}


def child_idle() -> dict:
    import cell_otf2.convert  # noqa: F401  the modules a conversion loads
    import cell_otf2.otf2_writer  # noqa: F401

    return {"maxrss": _maxrss_bytes()}


def child_ceiling(n_events: int, mix: dict | None) -> dict:
    from cell_otf2.otf2_writer import LAST_CEILING_CPU_SECONDS, write_ceiling, write_mix_ceiling

    with tempfile.TemporaryDirectory(prefix="tp-ceiling-", dir=OUT) as tmp:
        rate = write_ceiling(n_events, Path(tmp))
        cpu = LAST_CEILING_CPU_SECONDS[0]
        mix_rate = write_mix_ceiling(mix, Path(tmp)) if mix else None
        mix_cpu = LAST_CEILING_CPU_SECONDS[0]
    return {"rate": rate, "cpu": cpu, "mix_rate": mix_rate, "mix_cpu": mix_cpu}


def _child(*args: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        sys.exit(f"child {args[0]} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=float, default=10e6,
                    help="at least this many input records (default 10 million)")
    ap.add_argument("--reuse", type=Path, default=None, help="convert this run directory")
    ap.add_argument("--keep", action="store_true", help="keep the converted archive")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "convert":
            out = child_convert(*rest)
        elif kind == "idle":
            out = child_idle()
        else:
            out = child_ceiling(int(rest[0]), json.loads(rest[1]) if len(rest) > 1 else None)
        print(json.dumps(out))
        return

    OUT.mkdir(parents=True, exist_ok=True)
    run = args.reuse if args.reuse is not None else simulated_run(int(args.records))
    size = input_bytes(run)
    archive_dir = Path(tempfile.mkdtemp(prefix="tp-archive-", dir=OUT))
    archive = archive_dir / "throughput.otf2"
    try:
        idle = _child("idle")
        conv = _child("convert", str(run), str(archive))
        ceil = _child("ceiling", str(conv["events"]), json.dumps(conv["by_type"] or {}))
    finally:
        if not args.keep:
            shutil.rmtree(archive_dir, ignore_errors=True)
    n, n_ev, wall = conv["records"], conv["events"], conv["wall"]
    stages = conv["stages"]
    print(f"run {run}: {n:,} records, {size / 1e6:.1f} MB on disk; {n_ev:,} events written")
    cpu_stages = conv.get("stages_cpu") or {}
    cpu = conv["cpu"]

    def rate(seconds: float) -> float:
        return n / seconds / 1e6 if seconds else float("inf")

    print(f"{'stage':<8} {'seconds':>8} {'M records/s':>12} {'share':>6}   "
          f"{'CPU s':>7} {'M rec/CPU s':>12}")
    for k, v in stages.items():
        c = cpu_stages.get(k, float("nan"))
        print(f"{k:<8} {v:8.2f} {rate(v):12.2f} {v / wall:6.1%}   {c:7.2f} {rate(c):12.2f}")
    print(f"{'total':<8} {wall:8.2f} {rate(wall):12.2f} {1:6.0%}   {cpu:7.2f} {rate(cpu):12.2f}")
    rss = conv["maxrss"]
    print(f"peak RSS {rss / 1e6:.0f} MB (a child importing the same modules: "
          f"{idle['maxrss'] / 1e6:.0f} MB); input {size / 1e6:.0f} MB; "
          f"peak RSS / input size = {rss / size:.2f}")
    node = largest_node_bytes(run)
    print(f"largest node's dumps {node / 1e6:.0f} MB; peak RSS / largest node's input = "
          f"{rss / node:.2f}")
    sync_share = stages.get("sync", 0.0) / wall
    print(f"synchronization share of the total: {sync_share:.1%} (CPU: "
          f"{cpu_stages.get('sync', 0.0) / cpu:.1%})")
    ceiling_s = n_ev / ceil["rate"]
    print(f"write ceiling: {ceil['rate'] / 1e6:.2f} M events/s (Enter/Leave, same C entry "
          f"points, nothing else to do): {n_ev:,} events in {ceiling_s:.2f} s")
    print(f"ratio ceiling_seconds({n_ev:,} events) / conversion_seconds = "
          f"{ceiling_s:.2f} / {wall:.2f} = {ceiling_s / wall:.2f}")
    if ceil.get("mix_rate"):
        mix_s = n_ev / ceil["mix_rate"]
        print(f"write ceiling for the conversion's own event mix: "
              f"{ceil['mix_rate'] / 1e6:.2f} M events/s; ratio {mix_s:.2f} / {wall:.2f} = "
              f"{mix_s / wall:.2f}")
    print(f"the same ratios in CPU seconds (less sensitive to a shared machine): "
          f"{ceil['cpu']:.2f} / {cpu:.2f} = {ceil['cpu'] / cpu:.2f}"
          + (f"; own mix {ceil['mix_cpu']:.2f} / {cpu:.2f} = {ceil['mix_cpu'] / cpu:.2f}"
             if ceil.get("mix_rate") else ""))
    if conv["damage"]:
        print("damage:", *conv["damage"], sep="\n  ")
    if args.keep:
        print(f"archive kept: {archive}")


if __name__ == "__main__":
    main()
