"""The conversion over a family of run shapes (``bench/throughput.py --family [--quick]``):
simulated hybrid runs swept one dimension at a time from one base shape (run length 10 s to
20 min, 1 to 32 nodes, 1 to 16 SPE contexts per process, MPI exchanges every 10 ms to 10 s,
run length again with context switches, and 4 to 20 nodes exchanging every 5 s for 10
minutes with 15 us of wander: the fallback centring's programs on sparse exchanges), plus the
two foreign runs in
``../shared/foreign-runs/``; each converted by the command as a user starts it
(``python -m cell_otf2 RUN -o OUT --force``, timed from start to exit, peak RSS from the
kernel's accounting of the child), with the converter of this checkout. It prints, slowest
shape first, records/s, peak RSS against the input, every stage's wall seconds (the summary's
own, plus the commit and what lies outside the conversion: interpreter, imports, exit), each
beside the throughput targets, then the growth exponent of every stage per dimension: how its
time grows when the dimension doubles (1 = linear), from the largest shapes of the sweep.
Runs are simulated once and kept under ``bench/out/family/``. It measures and prints; it
asserts nothing, and it imports no numpy itself (its own resident set stays out of the
children's)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "out" / "family"
FOREIGN = ROOT.parent / "shared" / "foreign-runs"
#: the base shape every sweep starts from: 2 nodes, 2 ranks each, 4 SPE contexts a rank,
#: MPI every 0.5 s, 2 minutes
BASE = dict(nodes=2, ranks_per_node=2, spes=4, mpi_s=0.5, duration_s=120.0, switches=False,
            wander_us=0.0)
#: the throughput targets, printed beside the figures (never asserted)
RATE_TARGET = 2.0e6  # records/s of a shape of at least 1 M records
SMALL_FIXED, SMALL_PER_M = 0.4, 0.5  # seconds of a shape under 1 M records: 0.4 + 0.5 per M
EXPONENT_TARGET = 1.1
RSS_FIXED, RSS_PER_INPUT = 100e6, 2.0
COMMIT_SHARE = 0.05
#: a stage below this many seconds at the larger shapes gets no exponent (noise)
EXPONENT_FLOOR = 0.05

#: (dimension, its variable's name, its values, full or quick) per sweep
SWEEPS = {
    "duration": ("run length s", [10, 20, 40, 80, 160, 320, 640, 1200], [60, 120, 240, 480]),
    "nodes": ("nodes", [1, 2, 4, 8, 16, 32], [1, 2, 4, 8]),
    "contexts": ("contexts per process", [1, 2, 4, 8, 16], [2, 4, 8, 16]),
    "mpi": ("MPI exchanges per s", [0.1, 1, 10, 100], [2, 8, 32]),
    "switches": ("run length s, context switches", [30, 60, 120, 240, 480], [60, 120, 240]),
    "sparse": ("nodes, MPI every 5 s", [4, 8, 16, 20], [4, 8]),
}
#: the sparse sweep's shape besides its nodes: one SPE context a rank, 10 minutes, 15 us of
#: wander over 2 minutes (a 20-node run of this shape took 58 s to convert, 57 of them the
#: node fit, before 2026-11-29's row generation by the most broken row per column)
SPARSE = dict(spes=1, mpi_s=5.0, duration_s=600.0, wander_us=15.0)
#: the MPI sweep runs this long (10 ms exchanges make many records per second)
MPI_SWEEP_S = {True: 30.0, False: 60.0}
#: the foreign runs (FOREIGN/README.md), converted as they are
FOREIGN_RUNS = ("hybrid-wander-a", "hybrid-linear-b")

_WALL_LINE = re.compile(r"wall time ([\d.]+)s \((.*) s\)")
_RECORDS = re.compile(r"(\d+) records read")

#: run in the child: times the commit (``ArchiveTarget._commit``: the sync and the moves)
#: into a side file, then runs the command line as ``python -m cell_otf2`` does
_HOOK = """
import runpy, sys, time
from cell_otf2.run import output
side, *args = sys.argv[1:]
commit = output.ArchiveTarget._commit
def timed(self, *a, **k):
    t0 = time.perf_counter()
    try:
        return commit(self, *a, **k)
    finally:
        with open(side, "w") as f:
            f.write(repr(time.perf_counter() - t0))
output.ArchiveTarget._commit = timed
sys.argv = ["cell2otf2", *args]
runpy.run_module("cell_otf2", run_name="__main__", alter_sys=True)
"""


@dataclass
class Shape:
    """One run of the family: a simulated shape (``params``) or a given run (``run``)."""

    name: str
    params: dict = field(default_factory=dict)
    run: Path | None = None
    sweeps: dict[str, float] = field(default_factory=dict)  # dimension -> its value here

    def simulate_args(self) -> list[str]:
        p = self.params
        args = ["--workload", "hybrid", "--nodes", str(p["nodes"]),
                "--ranks", str(p["nodes"] * p["ranks_per_node"]), "--spes", str(p["spes"]),
                "--duration-s", str(p["duration_s"]), "--chunks", "1",
                "--compute-s", str(p["mpi_s"]), "--seed", "7"]
        if p["switches"]:  # half as many SPUs as contexts on a node: contexts take turns
            args += ["--spus", str(max(1, p["spes"] * p["ranks_per_node"] // 2))]
        if p["wander_us"]:
            args += ["--wander-us", str(p["wander_us"])]
        return args


def _name(p: dict) -> str:
    return (f"n{p['nodes']}r{p['ranks_per_node']}s{p['spes']}-mpi{p['mpi_s']:g}"
            f"-{p['duration_s']:g}s{'-sw' if p['switches'] else ''}"
            f"{'-w' + format(p['wander_us'], 'g') if p['wander_us'] else ''}")


def family(quick: bool) -> list[Shape]:
    """Every shape of the family (each simulated shape once, with the sweeps it belongs
    to), then the foreign runs."""
    shapes: dict[str, Shape] = {}
    for dim, (_, full, short) in SWEEPS.items():
        for value in (short if quick else full):
            p = dict(BASE)
            if dim == "duration":
                p["duration_s"] = float(value)
            elif dim == "nodes":
                p["nodes"] = value
            elif dim == "contexts":
                p["spes"] = value
            elif dim == "mpi":
                p["mpi_s"], p["duration_s"] = 1.0 / value, MPI_SWEEP_S[quick]
            elif dim == "sparse":
                p.update(SPARSE, nodes=value)
            else:
                p["duration_s"], p["switches"] = float(value), True
            name = _name(p)
            shapes.setdefault(name, Shape(name, p)).sweeps[dim] = float(value)
    out = list(shapes.values())
    out += [Shape(f"foreign {r}", run=FOREIGN / r) for r in FOREIGN_RUNS
            if (FOREIGN / r / "run.json").exists()]
    return out


def _env() -> dict:
    # the converter of this checkout (an editable install of another one would win otherwise)
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


def simulated(shape: Shape) -> Path:
    """The shape's run directory, simulated (in a child) when not there yet."""
    if shape.run is not None:
        return shape.run
    run = OUT / shape.name
    stamp = run / "family.json"
    if not stamp.exists():
        if run.exists():
            shutil.rmtree(run)
        print(f"  simulating {shape.name} ...", end="", flush=True, file=sys.stderr)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "cell_otf2", "simulate", str(run),
                               *shape.simulate_args()], capture_output=True, text=True,
                              env=_env())
        if proc.returncode != 0:
            sys.exit(f"simulating {shape.name} failed:\n{proc.stderr}")
        print(f" {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        stamp.write_text(json.dumps({"args": shape.simulate_args()}) + "\n")
    return run


def input_bytes(run: Path) -> int:
    """run.json and the dumps it names: what the conversion reads."""
    manifest = run / "run.json"
    procs = json.loads(manifest.read_text())["processes"]
    return manifest.stat().st_size + sum((run / p["path"]).stat().st_size for p in procs)


def _run_with_rusage(cmd: list[str]) -> tuple[int, str, str, float, int]:
    """Run ``cmd``; its exit status, output, wall seconds and peak RSS in bytes."""
    out_f = tempfile.TemporaryFile(mode="w+")
    err_f = tempfile.TemporaryFile(mode="w+")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=_env())
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out_f.seek(0)
    err_f.seek(0)
    return proc.returncode, out_f.read(), err_f.read(), wall, usage.ru_maxrss * 1024


def convert_shape(run: Path, work: Path) -> dict:
    """One conversion by the command into an empty folder (as a first conversion: no
    previous archive to remove), timed from its start to its exit; its peak RSS from
    ``wait4`` (this process imports no numpy, so the child starts smaller than it peaks);
    its stages from its summary, the commit from the hook."""
    side = work / "commit.txt"
    side.unlink(missing_ok=True)
    shutil.rmtree(work / "a", ignore_errors=True)
    for entry in (work / "a.otf2", work / "a.def"):
        entry.unlink(missing_ok=True)
    cmd = [sys.executable, "-c", _HOOK, str(side), str(run), "-o", str(work / "a.otf2"),
           "--force"]
    code, out, err, wall, rss = _run_with_rusage(cmd)
    if code not in (0, 1):
        sys.exit(f"converting {run} failed ({code}):\n{err}")
    line = _WALL_LINE.search(out)
    records = _RECORDS.search(out)
    if line is None or records is None:
        sys.exit(f"converting {run}: no summary to read:\n{out}")
    stages = {k: float(v) for k, v in
              (part.rsplit(" ", 1) for part in line.group(2).split(", "))}
    stages["commit"] = float(side.read_text()) if side.exists() else 0.0
    stages["outside"] = max(0.0, wall - float(line.group(1)))  # interpreter, imports, exit
    return {"wall": wall, "records": int(records.group(1)), "stages": stages, "rss": rss}


def _median_run(results: list[dict]) -> dict:
    """The median conversion by wall time, with the median of each stage over all."""
    results = sorted(results, key=lambda r: r["wall"])
    mid = dict(results[(len(results) - 1) // 2])
    keys = {k for r in results for k in r["stages"]}
    mid["stages"] = {k: statistics.median(r["stages"].get(k, 0.0) for r in results)
                     for k in keys}
    mid["rss"] = max(r["rss"] for r in results)
    return mid


def measure(shapes: list[Shape], repeat: int) -> list[dict]:
    """Every shape converted ``repeat`` times, round by round (alternating the shapes)."""
    runs = [simulated(s) for s in shapes]
    # the simulated runs on disk now, so that the first conversion's commit (one syncfs of
    # the file system) does not write them back
    os.sync()
    rows: list[list[dict]] = [[] for _ in shapes]
    with tempfile.TemporaryDirectory(prefix="family-", dir=OUT) as tmp:
        work = Path(tmp)
        for rnd in range(repeat):
            for i, (shape, run) in enumerate(zip(shapes, runs, strict=True)):
                print(f"  round {rnd + 1}/{repeat}: {shape.name}", file=sys.stderr, flush=True)
                rows[i].append(convert_shape(run, work))
    out = []
    for shape, run, results in zip(shapes, runs, rows, strict=True):
        r = _median_run(results)
        r.update(shape=shape, input=input_bytes(run))
        out.append(r)
    return out


# --------------------------------------------------------------------------------------------
# what is printed
# --------------------------------------------------------------------------------------------

#: stages in the order the summary line gives them, then the two this bench adds
STAGE_ORDER = ("read", "decode", "mpi", "order", "sync", "emit", "write", "spill", "commit",
               "outside")


def _targets(r: dict) -> list[str]:
    """The throughput targets this shape misses (an empty list: all met)."""
    n, wall = r["records"], r["wall"]
    missed = []
    if n >= 1e6 and n / wall < RATE_TARGET:
        missed.append(f"rate<{RATE_TARGET / 1e6:.1f}M/s")
    if n < 1e6 and wall > SMALL_FIXED + SMALL_PER_M * n / 1e6:
        missed.append(f"wall>{SMALL_FIXED + SMALL_PER_M * n / 1e6:.2f}s")
    if r["rss"] > RSS_FIXED + RSS_PER_INPUT * r["input"]:
        missed.append("rss")
    if r["stages"].get("commit", 0.0) > COMMIT_SHARE * wall:
        missed.append("commit")
    return missed


def print_shapes(results: list[dict]) -> None:
    stages = [s for s in STAGE_ORDER if any(s in r["stages"] for r in results)]
    print(f"\nper shape, slowest (records/s) first; wall = the command from start to exit; "
          f"targets: >= 1 M records: >= {RATE_TARGET / 1e6:.1f} M records/s; under: <= "
          f"{SMALL_FIXED} s + {SMALL_PER_M} s per M records; peak RSS <= "
          f"{RSS_FIXED / 1e6:.0f} MB + {RSS_PER_INPUT:.1f} x input; commit <= "
          f"{COMMIT_SHARE:.0%} of wall")
    head = (f"{'shape':<30} {'records':>9} {'wall s':>7} {'M rec/s':>7} {'RSS MB':>6} "
            f"{'/input':>6} " + " ".join(f"{s[:7]:>7}" for s in stages) + "  targets")
    print(head)
    for r in sorted(results, key=lambda r: r["records"] / r["wall"]):
        missed = _targets(r)
        cells = " ".join(f"{r['stages'].get(s, 0.0):7.2f}" for s in stages)
        print(f"{r['shape'].name:<30} {r['records']:>9,} {r['wall']:7.2f} "
              f"{r['records'] / r['wall'] / 1e6:7.2f} {r['rss'] / 1e6:6.0f} "
              f"{r['rss'] / r['input']:6.2f} {cells}  "
              f"{'met' if not missed else 'MISSED ' + ', '.join(missed)}")


def exponent(points: list[tuple[float, float]]) -> float | None:
    """Growth exponent of time over the dimension: the least-squares slope of log time over
    log value through the largest three points (time grows 2^e when the value doubles); None
    when a time there is below ``EXPONENT_FLOOR``."""
    pts = sorted(points)[-3:]
    if len(pts) < 2 or any(t < EXPONENT_FLOOR for _, t in pts):
        return None
    xs = [math.log(x) for x, _ in pts]
    ys = [math.log(t) for _, t in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else None


def print_exponents(results: list[dict]) -> None:
    stages = [s for s in (*STAGE_ORDER, "wall") if s != "outside"]
    print(f"\ngrowth exponent per stage and dimension (time grows 2^e when the dimension "
          f"doubles; from the largest three shapes of each sweep; '-': under "
          f"{EXPONENT_FLOOR} s there; target: none above {EXPONENT_TARGET})")
    print(f"{'dimension':<34} " + " ".join(f"{s[:7]:>7}" for s in stages) + "  target")
    for dim, (label, _, _) in SWEEPS.items():
        pts = [(r["shape"].sweeps[dim], r) for r in results if dim in r["shape"].sweeps]
        if len(pts) < 2:
            continue
        cells, worst = [], None
        for s in stages:
            e = exponent([(x, r["wall"] if s == "wall" else r["stages"].get(s, 0.0))
                          for x, r in pts])
            cells.append(f"{e:7.2f}" if e is not None else f"{'-':>7}")
            if e is not None and s != "wall":
                worst = e if worst is None else max(worst, e)
        verdict = ("met" if worst is None or worst <= EXPONENT_TARGET
                   else f"MISSED ({worst:.2f})")
        span = f"{min(x for x, _ in pts):g}-{max(x for x, _ in pts):g}"
        print(f"{label + ' ' + span:<34} " + " ".join(cells) + f"  {verdict}")


def main(quick: bool, repeat: int) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    shapes = family(quick)
    t0 = time.perf_counter()
    results = measure(shapes, repeat)
    print(f"family of {len(results)} shapes ({'quick' if quick else 'full'}; median of "
          f"{repeat} conversion{'s' if repeat > 1 else ''} each), converter of {ROOT}, "
          f"{time.perf_counter() - t0:.0f} s")
    print_shapes(results)
    print_exponents(results)
