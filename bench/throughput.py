"""Conversion throughput, peak memory, and the writer against the OTF2 library's own rate.

One command::

    .venv/bin/python bench/throughput.py [--records N] [--ranks R --nodes K] [--reuse DIR]
                                         [--conversions C] [--repeat R] [--keep]
    .venv/bin/python bench/throughput.py --family [--quick] [--conversions C]

Simulates (once, cached under ``bench/out/throughput/``) a hybrid run of at least N records
(4 MPI processes on 2 nodes; ``--ranks 1 --nodes 1`` makes a one-process run; ``--reuse DIR``
takes any run directory instead) and measures, each in a fresh child process:
the conversion end to end, C times (seconds and records/s per stage, wall and CPU, of the
median one, the spread of all, the peak RSS against the input's size on disk and against the
largest node's dumps, the synchronization share); then,
on the conversion's own events (captured once from a second conversion into a file), the
writer (``write_archive`` on the whole table, input checks and definitions included) through
its compiled loop (``cell_otf2/native/_evtwrite.c``), through the same loop without the malloc
tuning, and through the old ctypes path, and the OTF2 library's own rate for the same events
from ``bench/otf2_rate.c``, compiled with gcc into a temporary folder and run on the library
the bindings load, with and without the same malloc tuning; R rounds interleaved (``--repeat
0``: none, the conversions only), medians printed, and the writer's share of the library's
rate. Wall-clock figures on a shared machine vary; CPU seconds are printed beside them.
``--family`` instead converts a family of run shapes by the command as a user runs it
(``bench/family.py`` says which, and what it prints). It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the converter of this checkout, as the children get it
OUT = Path(__file__).resolve().parent / "out" / "throughput"
#: the simulated run's shape: 4 ranks on 2 nodes, 8 SPE contexts each
SHAPE = dict(workload="hybrid", ranks=4, nodes=2, spes=8, chunks=256)
SEED = 7


def _records_per_phase(shape: dict) -> tuple[int, int]:
    """(records of the set-up, records per phase) of ``shape``, from two tiny simulations."""
    from cell_otf2.sim.run import simulate_run

    counts = []
    with tempfile.TemporaryDirectory(prefix="tp-calib-") as tmp:
        for phases in (1, 2):
            s = simulate_run(Path(tmp) / str(phases), shape["workload"], SEED, phases=phases,
                             **{k: v for k, v in shape.items() if k != "workload"})
            counts.append(s.records)
    per_phase = counts[1] - counts[0]
    return counts[0] - per_phase, per_phase


def simulated_run(records: int, shape: dict = SHAPE) -> Path:
    """The cached run of at least ``records`` records of ``shape``, simulated when missing."""
    setup, per_phase = _records_per_phase(shape)
    phases = max(1, math.ceil((records - setup) / per_phase))
    name = (f"{shape['workload']}-r{shape['ranks']}n{shape['nodes']}s{shape['spes']}"
            f"c{shape['chunks']}-p{phases}-seed{SEED}")
    run = OUT / name
    stamp = run / "simulated.json"
    if stamp.exists():
        print(f"reusing {run}")
        return run
    from cell_otf2.sim.run import simulate_run

    if run.exists():
        shutil.rmtree(run)
    print(f"simulating {name} ({phases} phases, about {setup + phases * per_phase:,} records)"
          " ...", flush=True)
    t0 = time.perf_counter()
    s = simulate_run(run, shape["workload"], SEED, phases=phases,
                     **{k: v for k, v in shape.items() if k != "workload"})
    print(f"  {s.records:,} records, {s.bytes_written / 1e6:.0f} MB in "
          f"{time.perf_counter() - t0:.0f} s")
    stamp.write_text(json.dumps({"records": s.records, "bytes": s.bytes_written}) + "\n")
    return run


def input_bytes(run: Path) -> int:
    from cell_otf2.input.manifest import load_manifest

    man = load_manifest(run)
    return (run / "run.json").stat().st_size + sum(
        man.dump_path(p.rank).stat().st_size for p in man.processes)


def largest_node_bytes(run: Path) -> int:
    """The dumps of the node whose dumps are largest (the serial converter holds one group of
    whole nodes at a time, ``cell_otf2/run/driver.py``)."""
    from cell_otf2.input.manifest import load_manifest

    man = load_manifest(run)
    per_node = [0] * len(man.nodes)
    for p in man.processes:
        per_node[man.node_of_rank(p.rank)] += man.dump_path(p.rank).stat().st_size
    return max(per_node)


# --------------------------------------------------------------------------------------------
# child processes
# --------------------------------------------------------------------------------------------


def _maxrss_bytes() -> int:
    """This process's peak resident set since its exec: VmHWM of /proc/self/status. Not
    ``getrusage``'s ru_maxrss: Linux carries the forking parent's resident set into it
    across fork and exec, so a child of a bench that had just simulated the run in-process
    reported the simulator's 1.6 GB instead of the conversion's 1.0 GB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def child_convert(run: str, archive: str) -> dict:
    from cell_otf2.run.conversion import convert

    c0 = time.process_time()
    t0 = time.perf_counter()
    s = convert(run, archive, force=True)
    wall = time.perf_counter() - t0
    return {"wall": wall, "cpu": time.process_time() - c0, "stages": s.stage_seconds,
            "stages_cpu": s.stage_cpu_seconds,
            "records": s.records_in, "events": s.events_written, "maxrss": _maxrss_bytes(),
            "converter": str(Path(sys.modules["cell_otf2"].__file__).resolve().parents[1]),
            "by_type": getattr(s, "events_by_type", None), "damage": s.damage}


def child_idle() -> dict:
    import cell_otf2.run.conversion  # noqa: F401  the modules a conversion loads
    import cell_otf2.writer.archive  # noqa: F401

    return {"maxrss": _maxrss_bytes()}


def child_capture(run: str, archive: str, events_file: str, defs_file: str) -> dict:
    """Convert ``run`` once more, saving every event table piece the writer receives (sorted
    by location afterwards: node groups may come in any order) and the definitions."""
    import numpy as np

    from cell_otf2.model import EVENT_DTYPE, Ev
    from cell_otf2.run.conversion import convert
    from cell_otf2.writer.events import EventStream

    original = EventStream.write
    seen: dict = {}
    with open(events_file, "wb") as out:
        def write(self, events, checked=False):
            seen["defs"] = self.defs
            out.write(np.ascontiguousarray(events).tobytes())
            return original(self, events, checked)

        EventStream.write = write
        convert(run, archive, force=True)
    events = np.fromfile(events_file, dtype=EVENT_DTYPE)
    events = events[np.argsort(events["loc"], kind="stable")]
    events.tofile(events_file)
    Path(defs_file).write_bytes(pickle.dumps(seen["defs"]))
    per_type = np.bincount(events["type"], minlength=len(Ev) + 1)
    mix = {e.name: int(per_type[e]) for e in Ev if per_type[e]}
    return {"events": int(events.size), "locations": len(seen["defs"].locations), "mix": mix}


def child_writer(events_file: str, defs_file: str, mode: str) -> dict:
    """``write_archive`` of the captured table: mode "c" (compiled loop), "c-plain-malloc"
    (the same without the command line's malloc tuning) or "python" (the ctypes path)."""
    import numpy as np

    from cell_otf2 import native
    from cell_otf2.model import EVENT_DTYPE
    from cell_otf2.process_setup import tune_malloc
    from cell_otf2.writer import capi
    from cell_otf2.writer.archive import write_archive
    from cell_otf2.writer.checks import check_events

    if mode == "python":
        os.environ[native.OFF_VARIABLE] = "1"  # this child process: the ctypes path
    if mode != "c-plain-malloc":  # as the cell2otf2 command tunes its process
        tune_malloc()
    defs = pickle.loads(Path(defs_file).read_bytes())
    events = np.fromfile(events_file, dtype=EVENT_DTYPE)
    with tempfile.TemporaryDirectory(prefix="tp-writer-", dir=OUT) as tmp:
        c0 = time.process_time()
        t0 = time.perf_counter()
        write_archive(defs, events, Path(tmp), "w")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        c0 = time.process_time()
        check_events(defs, events)
        check_cpu = time.process_time() - c0
    compiled = capi.use_compiled(capi.c_api())
    return {"events": int(events.size), "wall": wall, "cpu": cpu, "check_cpu": check_cpu,
            "compiled": compiled}


def build_library_rate(tmp: Path) -> Path:
    """bench/otf2_rate.c compiled with gcc into ``tmp``."""
    exe = tmp / "otf2_rate"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(Path(__file__).parent / "otf2_rate.c"),
                    "-ldl"], check=True)
    return exe


def library_rate(exe: Path, events_file: str, n_locations: int, use_mallopt: bool) -> dict:
    """The library's own rate for the captured table (bench/otf2_rate.c)."""
    import _otf2

    from cell_otf2 import model
    from cell_otf2.writer import otf2_internals

    fields = model.EVENT_DTYPE.fields
    layout = [model.EVENT_DTYPE.itemsize] + [fields[k][1] for k in (
        "loc", "type", "ref", "time", "p1", "p2", "p3", "p4", "p5", "p6")]
    constants = [_otf2.FILEMODE_WRITE.value, _otf2.SUBSTRATE_POSIX.value,
                 _otf2.COMPRESSION_NONE.value, _otf2.FLUSH.value, _otf2.TYPE_UINT64.value,
                 model.ATTR_DMA_TAG, model.ATTR_MFC_OPCODE, model.ATTR_LIST_ELEMENTS,
                 model.ATTR_EA, model.ATTR_LS_ADDRESS, model.ATTR_PHYSICAL_SPU]
    with tempfile.TemporaryDirectory(prefix="tp-library-", dir=OUT) as tmp:
        proc = subprocess.run(
            [str(exe), otf2_internals.library_path(), events_file, tmp, str(n_locations),
             str(int(use_mallopt)), *map(str, layout), *map(str, constants)],
            capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"otf2_rate failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child(*args: str) -> dict:
    # the converter of this checkout (an editable install of another one would win otherwise)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"child {args[0]} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=float, default=10e6,
                    help="at least this many input records (default 10 million)")
    ap.add_argument("--ranks", type=int, default=SHAPE["ranks"],
                    help=f"MPI processes of the simulated run (default {SHAPE['ranks']})")
    ap.add_argument("--nodes", type=int, default=SHAPE["nodes"],
                    help=f"nodes of the simulated run (default {SHAPE['nodes']})")
    ap.add_argument("--reuse", type=Path, default=None, help="convert this run directory")
    ap.add_argument("--keep", action="store_true", help="keep the converted archive")
    ap.add_argument("--conversions", type=int, default=1,
                    help="conversions timed, each in a fresh child (default 1; this VM's "
                    "decode varies by up to 0.8 s from run to run: 5 shows the spread)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of the writer and library measurements (default 3; 0: "
                    "the conversions only)")
    ap.add_argument("--family", action="store_true",
                    help="convert a family of run shapes instead (bench/family.py: run length, "
                    "nodes, contexts, MPI rate, context switches, the foreign runs), each "
                    "--conversions times, and print rates, memory, stages and their growth")
    ap.add_argument("--quick", action="store_true",
                    help="with --family: fewer and smaller shapes (a few minutes)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.repeat < 0 or args.conversions < 1:
        ap.error("--repeat must be 0 or more and --conversions 1 or more")
    if args.quick and not args.family:
        ap.error("--quick goes with --family")
    if not args.child:  # as an install does: the timed commands do not compile the package
        from cellbench.bytecode import compile_package

        compile_package(ROOT)
    if args.family:
        import family  # bench/family.py, beside this file

        family.main(args.quick, args.conversions)
        return
    if args.child:
        kind, *rest = args.child
        if kind == "convert":
            out = child_convert(*rest)
        elif kind == "idle":
            out = child_idle()
        elif kind == "capture":
            out = child_capture(*rest)
        else:
            out = child_writer(*rest)
        print(json.dumps(out))
        return

    OUT.mkdir(parents=True, exist_ok=True)
    shape = {**SHAPE, "ranks": args.ranks, "nodes": args.nodes}
    run = args.reuse if args.reuse is not None else simulated_run(int(args.records), shape)
    size = input_bytes(run)
    archive_dir = Path(tempfile.mkdtemp(prefix="tp-archive-", dir=OUT))
    archive = archive_dir / "throughput.otf2"
    try:
        idle = _child("idle")
        convs = [_child("convert", str(run), str(archive)) for _ in range(args.conversions)]
    finally:
        if not args.keep:
            shutil.rmtree(archive_dir, ignore_errors=True)
    # the stage table of the median conversion (by wall time); the spread of all of them
    convs.sort(key=lambda c: c["wall"])
    conv = convs[(len(convs) - 1) // 2]
    n, n_ev, wall = conv["records"], conv["events"], conv["wall"]
    stages = conv["stages"]
    print(f"run {run}: {n:,} records, {size / 1e6:.1f} MB on disk; {n_ev:,} events written; "
          f"converter of {conv['converter']}")
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
    if len(convs) > 1:
        walls = [c["wall"] for c in convs]
        cpus = sorted(c["cpu"] for c in convs)
        print(f"{len(convs)} conversions (the table is the median one): wall {walls[0]:.2f} .. "
              f"{walls[-1]:.2f} s = {rate(walls[-1]):.2f} .. {rate(walls[0]):.2f} M records/s; "
              f"CPU {cpus[0]:.2f} .. {cpus[-1]:.2f} s")
    rss = max(c["maxrss"] for c in convs)
    print(f"peak RSS {rss / 1e6:.0f} MB (a child importing the same modules: "
          f"{idle['maxrss'] / 1e6:.0f} MB); input {size / 1e6:.0f} MB; "
          f"peak RSS / input size = {rss / size:.2f}")
    node = largest_node_bytes(run)
    print(f"largest node's dumps {node / 1e6:.0f} MB; peak RSS / largest node's input = "
          f"{rss / node:.2f}")
    sync_share = stages.get("sync", 0.0) / wall
    print(f"synchronization share of the total: {sync_share:.1%} (CPU: "
          f"{cpu_stages.get('sync', 0.0) / cpu:.1%})")
    if conv["damage"]:
        print("damage:", *conv["damage"], sep="\n  ")
    if args.keep:
        print(f"archive kept: {archive}")
    if args.repeat > 0:
        writer_section(run, args.repeat, wall, cpu_stages.get("write"))


def writer_section(run: Path, repeat: int, conversion_wall: float,
                   write_stage_cpu: float | None = None) -> None:
    """The writer (compiled, compiled without the malloc tuning, ctypes) and the library's own
    rate (bench/otf2_rate.c) on the conversion's events, ``repeat`` interleaved rounds."""
    with tempfile.TemporaryDirectory(prefix="tp-capture-", dir=OUT) as tmp_name:
        tmp = Path(tmp_name)
        events_file, defs_file = str(tmp / "events.bin"), str(tmp / "defs.pickle")
        cap = _child("capture", str(run), str(tmp / "capture.otf2"), events_file, defs_file)
        shutil.rmtree(tmp / "capture", ignore_errors=True)
        exe = build_library_rate(tmp)
        rounds: dict[str, list[dict]] = {}
        for _ in range(repeat):
            for mode in ("c", "python", "c-plain-malloc"):
                rounds.setdefault(mode, []).append(_child("writer", events_file, defs_file,
                                                          mode))
            for use_mallopt in (False, True):
                rounds.setdefault(f"library{'-mallopt' if use_mallopt else ''}", []).append(
                    library_rate(exe, events_file, cap["locations"], use_mallopt))
    n_ev = cap["events"]
    if not rounds["c"][0]["compiled"]:
        print("NOTE: cell_otf2.native._evtwrite does not run (not built, or CELL2OTF2_NO_NATIVE "
              "set): the compiled rows are the ctypes path")

    def median(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in rounds[mode])

    print(f"\nwriter on the run's {n_ev:,} events ({cap['locations']} locations), medians of "
          f"{repeat} interleaved rounds:")
    print("mix: " + ", ".join(f"{k} {v / n_ev:.2%}" for k, v in cap["mix"].items()))
    print(f"{'':<48} {'M events/s':>10} {'per CPU s':>10} {'seconds':>8} {'CPU s':>7}")
    rows = [
        ("library's own rate (bench/otf2_rate.c)", "library"),
        ("library's own rate, malloc tuned", "library-mallopt"),
        ("writer, compiled loop (write_archive)", "c"),
        ("writer, compiled loop, malloc not tuned", "c-plain-malloc"),
        ("writer, ctypes path (the old loop)", "python"),
    ]
    for label, mode in rows:
        w, c = median(mode, "wall"), median(mode, "cpu")
        print(f"{label:<48} {n_ev / w / 1e6:10.2f} {n_ev / c / 1e6:10.2f} {w:8.2f} {c:7.2f}")
    lib_w, lib_c = median("library", "wall"), median("library", "cpu")
    for mode in ("c", "c-plain-malloc", "python"):
        print(f"writer share of the library's rate, {mode}: wall {lib_w / median(mode, 'wall'):.2f}"
              f", CPU {lib_c / median(mode, 'cpu'):.2f}")
    print(f"compiled / ctypes: wall {median('python', 'wall') / median('c', 'wall'):.1f}x, CPU "
          f"{median('python', 'cpu') / median('c', 'cpu'):.1f}x; the writer's input checks "
          f"(check_events) take {median('c', 'check_cpu'):.2f} CPU s of the compiled "
          f"{median('c', 'cpu'):.2f}")
    if write_stage_cpu:
        print(f"the conversion's own write stage (events in pieces) against the library's "
              f"rate: CPU {lib_c:.2f} / {write_stage_cpu:.2f} = {lib_c / write_stage_cpu:.2f}")
    print(f"conversion end to end against the library's own rate for its events: "
          f"{lib_w:.2f} / {conversion_wall:.2f} = {lib_w / conversion_wall:.2f}")


if __name__ == "__main__":
    main()
