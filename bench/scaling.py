"""Parallel conversion: the same run converted serially and with ``mpiexec -n P``.

Simulates one hybrid run (default 16 processes on 8 nodes, 8 SPE contexts each, 130 phases of
32 chunks: about 4.1 M records in 140 MB of dumps) unless ``--run`` names one, then converts it
``--repeat`` times each way in rounds of one serial and one parallel conversion, back to
back (the order of the ways rotating from round to round), and prints for each way: the
wall time of the whole command (interpreter start-up and mpiexec included; median and all
runs), the converter's own wall time from its summary, the peak resident memory (``VmHWM``)
of every process; then the speedup, each parallel process's peak against its share of the
serial peak plus 100 MB, and whether the two archives are identical (global definitions and
every event file byte for byte; the anchor file differs only in its random trace
identifier).

Each round also runs P serial conversions of the same run side by side (independent
processes, each to an archive of its own) and takes the time until the last ends: what P
cores give P independent conversions is the machine's ceiling for P processes,
P x serial / side-by-side (2.0 on two free cores with their own memory bandwidth), and the
parallel conversion is judged against it: the median over rounds of its speedup / the
ceiling, against the 0.85 the issue asks for.

The speedup is the median over rounds of serial time / parallel time within a round: the
speed of a shared virtual machine drifts by 10-30% from minute to minute, and the two
conversions of one round see the same drift, the medians of all serial and all parallel runs
need not. The ratio of
the medians is printed too.

    .venv/bin/python bench/scaling.py [--procs 2] [--repeat 3] [--ranks 16] [--nodes 8]
        [--spes 8] [--phases 130] [--chunks 32] [--seed 1] [--run DIR] [--keep DIR]
        [--own-sessions] [--others-niced]

It runs ``mpiexec --oversubscribe --bind-to none`` (plus --allow-run-as-root as root): Open
MPI's default binds process k to core k, which on a machine shared with other work keeps a
process on a busy core. Time on a shared machine is what the other work leaves: read the load
averages it prints. Linux with autogroup scheduling shares the CPU between sessions, not
processes: while other sessions keep the cores busy, the P processes of one mpiexec share one
session's slice and cannot be faster than one process. ``--own-sessions`` starts every
converter process (serial ones too) with ``setsid`` in a session of its own, as a machine
without autogroup or with dedicated cores (a cluster allocation) would run them; the CPU
seconds per process show the split of the work either way. ``--others-niced`` (root) runs
every other session at autogroup nice 19 while converting (``OthersNiced``), so that work
of other users costs the measurement almost nothing; with both options the speedup is what
two free cores give.

Before and after the rounds it times a memory-bound probe (sorting 128 MB) in P processes at
once against one alone: on a VM whose memory system is shared with other guests, two busy
cores are each slower than one by an amount that drifts, and the speedup drifts with it.

It prints numbers; it asserts nothing.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the converter of this checkout, as the children get it

#: runs the CLI and reports this process's rank and peak memory on stderr at exit
_WRAPPER = """
import os, resource, sys
from cell_otf2.cli import main
try:
    main(sys.argv[1:])
finally:
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0"))
    use = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child forked from a large
    # parent (this script after simulating) would report the parent's size
    hwm = next(int(line.split()[1]) for line in open("/proc/self/status")
               if line.startswith("VmHWM"))
    sys.stderr.write(f"@rss {rank} {hwm} {use.ru_utime + use.ru_stime:.2f}\\n")
"""


#: environment variable that marks the converter processes this script started (Open MPI's
#: launcher may start them outside this script's process tree)
_MARK = "CELL2OTF2_SCALING_BENCH"


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{_MARK: str(os.getpid())})
    env.pop("CELL2OTF2_SERIAL", None)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def _mpiexec(procs: int) -> list[str]:
    exe = shutil.which("mpiexec")
    if exe is None:
        sys.exit("mpiexec not found (Debian: apt-get install openmpi-bin)")
    # no binding: Open MPI pins process k to core k, where other work may hold it
    cmd = [exe, "-n", str(procs), "--oversubscribe", "--bind-to", "none", "-x", "PYTHONPATH"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def _command(run: Path, anchor: Path, own_sessions: bool) -> list[str]:
    """One serial conversion of ``run`` into ``anchor`` through ``_WRAPPER`` (with ``setsid``
    in a session of its own)."""
    args = [sys.executable, "-c", _WRAPPER, str(run), "-o", str(anchor), "--force"]
    return ["setsid", *args] if own_sessions else args


def convert(run: Path, anchor: Path, procs: int, own_sessions: bool = False) -> dict:
    """One conversion; wall time of the command, converter wall time, peak RSS and CPU
    seconds per process."""
    args = _command(run, anchor, own_sessions)
    cmd = args if procs == 1 else _mpiexec(procs) + args
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    wall = time.perf_counter() - t0
    if res.returncode not in (0, 1):
        sys.exit(f"conversion failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    found = re.findall(r"@rss (\d+) (\d+) ([\d.]+)", res.stderr)
    rss = {int(r): int(kb) / 1024 for r, kb, _ in found}
    cpu = {int(r): float(c) for r, _, c in found}
    inner = re.search(r"wall time ([\d.]+)s(.*)", res.stdout)
    return {"wall": wall, "inner": float(inner[1]) if inner else float("nan"),
            "stages": inner[2].strip() if inner else "", "rss_mb": [rss[k] for k in sorted(rss)],
            "cpu_s": [cpu[k] for k in sorted(cpu)]}


def side_by_side(run: Path, work: Path, procs: int, own_sessions: bool = False) -> float:
    """Wall seconds from starting ``procs`` independent serial conversions of ``run`` at
    once (each to its own archive under ``work``) until the last one ends."""
    cmds = [_command(run, work / f"side{k}" / "a.otf2", own_sessions) for k in range(procs)]
    t0 = time.perf_counter()
    children = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True, env=_env()) for c in cmds]
    outs = [c.communicate()[1] for c in children]
    wall = time.perf_counter() - t0
    for c, err in zip(children, outs, strict=True):
        if c.returncode not in (0, 1):
            sys.exit(f"side-by-side conversion failed ({c.returncode}):\n{err}")
    return wall


class OthersNiced:
    """While active, every session without a process of this script's tree or a converter
    process it started (``_MARK``) runs at autogroup nice 19 (Linux autogroup scheduling
    shares the CPU between sessions by their autogroup nice; writing /proc/PID/autogroup
    needs root to go back down). A thread re-applies it every 0.3 s to sessions started
    meanwhile; the old values are put back at the end. It deprioritizes other work on a
    shared machine so that the timings show what the cores can do, not what other sessions
    leave."""

    def __init__(self) -> None:
        self.saved: dict[str, tuple[int, int]] = {}  # autogroup name -> (a pid, old nice)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> OthersNiced:
        self._apply()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        for pid, nice in self.saved.values():
            try:
                Path(f"/proc/{pid}/autogroup").write_text(str(nice))
            except OSError:
                pass  # that session has ended

    def _loop(self) -> None:
        while not self.stop.wait(0.3):
            self._apply()

    def _apply(self) -> None:
        me = os.getpid()
        parent: dict[int, int] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                    parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
        mine = set()
        for pid in parent:  # this script's descendants
            q, chain = pid, []
            while q > 1 and q not in mine and q != me:
                chain.append(q)
                q = parent.get(q, 0)
            if q == me or q in mine:
                mine.update(chain)
        q = me
        while q > 1:  # and ancestors
            mine.add(q)
            q = parent.get(q, 0)
        mark = f"{_MARK}={me}".encode()
        groups: dict[str, tuple[int, int]] = {}  # autogroup -> (a pid, nice)
        keep = set()  # autogroups holding one of ours: never niced
        for pid in parent:
            try:
                name, _, nice = Path(f"/proc/{pid}/autogroup").read_text().split()
                ours = pid in mine or mark in Path(f"/proc/{pid}/environ").read_bytes().split(
                    b"\0")
            except (OSError, ValueError):
                continue
            groups.setdefault(name, (pid, int(nice)))
            if ours:
                keep.add(name)
        for name, (pid, nice) in groups.items():
            if name in keep:
                continue
            self.saved.setdefault(name, (pid, nice))
            if nice != 19:
                try:
                    Path(f"/proc/{pid}/autogroup").write_text("19")
                except OSError:
                    continue


def _autogroup() -> bool:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


#: a memory-bound probe: sorts of 16 M random doubles (128 MB), seconds for three
_PROBE = """
import time, numpy as np
a = np.random.default_rng(0).random(1 << 24)
t = time.perf_counter()
for _ in range(3):
    np.sort(a)
print(time.perf_counter() - t)
"""


def contention(procs: int) -> float:
    """How much slower a memory-bound probe runs in each of ``procs`` processes at once than
    in one alone (1.0: not at all): what this machine's shared memory system costs the
    parallel conversion beyond the work it splits, measured now."""
    def run(n: int) -> list[float]:
        children = [subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE,
                                     text=True) for _ in range(n)]
        return [float(c.communicate()[0]) for c in children]

    alone, together = [], []
    for _ in range(3):  # medians of three, alternating
        alone += run(1)
        together += run(procs)
    return statistics.median(together) / statistics.median(alone)


def identical(a: Path, b: Path) -> tuple[bool, str]:
    """Global definitions and every event/local definition file equal, byte for byte."""
    da, db = a.with_suffix(""), b.with_suffix("")
    if not filecmp.cmp(a.with_suffix(".def"), b.with_suffix(".def"), shallow=False):
        return False, "global definitions differ"
    files = sorted(p.name for p in da.iterdir())
    if files != sorted(p.name for p in db.iterdir()):
        return False, "different event files"
    _, mismatch, errors = filecmp.cmpfiles(da, db, files, shallow=False)
    if mismatch or errors:
        return False, f"{len(mismatch) + len(errors)} of {len(files)} files differ"
    return True, f"definitions and {len(files)} event/local definition files byte-identical"


def _dump_bytes(run: Path) -> int:
    """The run's dumps on disk, the size the converter decides grouping by."""
    from cell_otf2.input.manifest import load_manifest

    man = load_manifest(run)
    return sum(man.dump_path(p.rank).stat().st_size for p in man.processes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--spes", type=int, default=8)
    ap.add_argument("--phases", type=int, default=130)
    ap.add_argument("--chunks", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--run", type=Path, help="convert this run instead of simulating one")
    ap.add_argument("--keep", type=Path, help="keep the run and the archives here")
    ap.add_argument("--own-sessions", action="store_true",
                    help="start every converter process in a session of its own (setsid)")
    ap.add_argument("--others-niced", action="store_true",
                    help="while converting, run every other session of the machine at "
                    "autogroup nice 19 (root; restored at the end)")
    a = ap.parse_args()
    if a.others_niced and (os.geteuid() != 0 or not _autogroup()):
        sys.exit("--others-niced needs root and autogroup scheduling")

    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="cell2otf2-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run = a.run
        if run is None:
            from cell_otf2.sim.run import simulate_run

            run = work / "run"
            if run.exists():
                shutil.rmtree(run)
            s = simulate_run(run, "hybrid", a.seed, ranks=a.ranks, nodes=a.nodes,
                             spes=a.spes, phases=a.phases, chunks=a.chunks)
            print(f"run: hybrid seed {a.seed}, {s.ranks} process dumps on {s.nodes} nodes, "
                  f"{s.records} records, {s.bytes_written / 1e6:.1f} MB of dumps")
        else:
            print(f"run: {run}")
        from cellbench.bytecode import compile_package

        compile_package(ROOT)  # as an install does: the timed commands do not compile it
        print(f"machine: {os.cpu_count()} cores, load average before "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        serial, parallel, side = [], [], []
        with OthersNiced() if a.others_niced else nullcontext():
            before = contention(a.procs)
            for i in range(a.repeat):
                ways = ["serial", "parallel", "side"]
                ways = ways[i % 3:] + ways[:i % 3]  # each way first in every third round
                for name in ways:
                    if name == "side":
                        side.append(side_by_side(run, work, a.procs, a.own_sessions))
                    else:
                        rows, procs = (serial, 1) if name == "serial" else (parallel, a.procs)
                        rows.append(convert(run, work / name / "a.otf2", procs,
                                            a.own_sessions))
                speedup = serial[-1]["wall"] / parallel[-1]["wall"]
                ceiling = a.procs * serial[-1]["wall"] / side[-1]
                print(f"  round {i + 1}: serial {serial[-1]['wall']:.2f} s, "
                      f"{a.procs} processes {parallel[-1]['wall']:.2f} s, {a.procs} serial "
                      f"side by side {side[-1]:.2f} s ({ways[0]} first; speedup "
                      f"{speedup:.2f}, ceiling {ceiling:.2f}, share {speedup / ceiling:.2f})",
                      flush=True)
            after = contention(a.procs)
        print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"memory-bound probe ({a.procs} at once against one alone): {before:.2f} x as "
              f"long before the rounds, {after:.2f} x after (1.00: the cores do not slow each "
              "other down; this VM's shared memory system makes it drift)")
        for name, rows in (("serial", serial), (f"mpiexec -n {a.procs}", parallel)):
            walls = [r["wall"] for r in rows]
            inner = statistics.median(r["inner"] for r in rows)
            print(f"{name:>14}: {statistics.median(walls):7.2f} s median of "
                  f"{', '.join(f'{w:.2f}' for w in walls)} (converter {inner:.2f} s median; "
                  f"last run {rows[-1]['stages']})")
            peaks = [max(r["rss_mb"][k] for r in rows) for k in range(len(rows[0]["rss_mb"]))]
            print(f"{'':>14}  peak RSS per process: "
                  + ", ".join(f"{p:.0f} MB" for p in peaks)
                  + "; CPU seconds per process (last run): "
                  + ", ".join(f"{c:.1f}" for c in rows[-1]["cpu_s"]))
        t_s = statistics.median(r["wall"] for r in serial)
        t_p = statistics.median(r["wall"] for r in parallel)
        c_s = statistics.median(r["inner"] for r in serial)
        c_p = statistics.median(r["inner"] for r in parallel)
        cpu_s = statistics.median(r["cpu_s"][0] for r in serial)
        cpu_p = statistics.median(max(r["cpu_s"]) for r in parallel)
        paired = statistics.median(s["wall"] / p["wall"] for s, p in zip(serial, parallel,
                                                                         strict=True))
        paired_c = statistics.median(s["inner"] / p["inner"] for s, p in zip(serial, parallel,
                                                                             strict=True))
        print(f"speedup: {paired:.2f} with {a.procs} processes, median of the rounds' ratios "
              f"(converter alone: {paired_c:.2f}); ratio of the medians {t_s / t_p:.2f} "
              f"(converter alone {c_s / c_p:.2f}); CPU seconds, serial over the busiest "
              f"process: {cpu_s / cpu_p:.2f}")
        ceilings = [a.procs * s["wall"] / t for s, t in zip(serial, side, strict=True)]
        shares = [s["wall"] / p["wall"] / c for s, p, c in zip(serial, parallel, ceilings,
                                                                strict=True)]
        share = statistics.median(shares)
        print(f"ceiling: {a.procs} serial conversions side by side take "
              f"{statistics.median(side):.2f} s (median of {', '.join(f'{t:.2f}' for t in side)})"
              f": {statistics.median(ceilings):.2f} x one conversion's throughput (median of the "
              f"rounds); the parallel conversion reaches {share:.2f} of it (median of the "
              f"rounds' speedup / ceiling, {min(shares):.2f}-{max(shares):.2f}): "
              f"{'met' if share >= 0.85 else 'MISSED'} (target 0.85)")
        if _autogroup() and not a.own_sessions and max(os.getloadavg()) > os.cpu_count():
            print("note: the kernel shares the CPU between sessions (autogroup) and the "
                  "machine is busy: the processes of one mpiexec get one session's share; "
                  "--own-sessions gives each its own")
        serial_peak = max(r["rss_mb"][0] for r in serial)
        worst = max(max(r["rss_mb"]) for r in parallel)
        from cell_otf2.run.node_groups import IN_MEMORY_BYTES

        if _dump_bytes(run) > IN_MEMORY_BYTES:
            # converted group by group: every process holds one group (at least a node) at a
            # time, as the serial conversion does
            budget, rule = serial_peak * 1.1, "grouped run: serial + 10%"
        else:
            budget, rule = serial_peak / a.procs + 100, f"serial / {a.procs} + 100"
        print(f"memory: serial peak {serial_peak:.0f} MB; largest parallel process {worst:.0f} "
              f"MB, budget {budget:.0f} MB ({rule}): "
              f"{'within' if worst <= budget else 'OVER'}")
        same, why = identical(work / "serial" / "a.otf2", work / "parallel" / "a.otf2")
        print(f"archives identical: {'yes' if same else 'NO'} ({why})")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
