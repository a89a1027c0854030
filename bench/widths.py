"""The default bounds' widths against the published algorithm's over a family of runs.

One command::

    .venv/bin/python bench/widths.py [--seeds 1,2,3] [--quick]

Simulates (cached under ``bench/out/widths/``) fft-, matmul-, blackscholes- and julia-like runs
on a QS20 blade (14.318 MHz timebase, 16 SPEs) and a PS3 (79.8 MHz, 6 SPEs), with every SPE
record flushed on its own ("1/block") and 16 records per Local Store buffer, for each seed; and
measures on each: the mean width (upper - lower) of the live intervals' offsets in our default
mode (slot order exact, least uniform relaxation), in our solver on the paper's constraints
(slot order only), and in the published algorithm (Floyd-Warshall, repeated d/2 relaxation);
the relaxation of each; coverage (share of true offsets inside the bounds); and how far the
truth lies outside the bounds at most (ticks). It prints one row per run, then per machine
and overall: the geometric mean and the largest ratio of our mean width to the paper's, and
the largest miss. It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cellbench import baselines as bt  # noqa: E402
from cellbench import evaluate as ev  # noqa: E402
from cellbench.analysis import analyze  # noqa: E402

from cell_otf2.sim.run import simulate_run  # noqa: E402
from cell_otf2.sim.truth import load_truth  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "widths"
WORKLOADS = ("fft", "matmul", "blackscholes", "julia")
MACHINES = {"QS20 14.318 MHz": (14_318_000, 16), "PS3 79.8 MHz": (79_800_000, 6)}


def miss_ticks(est, true_off: np.ndarray, mask: np.ndarray) -> float:
    """How far the truth lies outside [lower, upper] at most (0: always inside)."""
    lo, up, t = est.lower[mask], est.upper[mask], true_off[mask]
    return float(np.maximum(np.maximum(lo - t, t - up), 0.0).max()) if t.size else 0.0


def measure(run: Path) -> dict:
    pipe = analyze(run)
    dec, truth = pipe.decoded, load_truth(run)
    true_off = ev.true_offsets(dec, truth)
    true_times = ev.true_record_times(dec, truth)
    mask = ev.interval_mask(dec)
    out = {}
    for name, est in (("ours", bt.ours(pipe)), ("paper", bt.paper(dec, pipe.matches)),
                      ("same constraints", bt.ours(analyze(run, order_options=bt.PAPER_ORDER)))):
        r = ev.evaluate(pipe, truth, est, true_off, true_times)
        out[name] = {"width": r["width"]["mean"], "relaxation": r["relaxation"],
                     "coverage": r["coverage"], "miss": miss_ticks(est, true_off, mask)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--quick", action="store_true", help="one seed, two workloads")
    args = ap.parse_args()
    seeds = [1] if args.quick else [int(s) for s in args.seeds.split(",")]
    workloads = WORKLOADS[:2] if args.quick else WORKLOADS
    t0 = time.perf_counter()
    rows = []
    print("| machine | run | seed | mean width ours / same constraints / paper (ticks) | "
          "ratio ours / paper | relaxation ours / paper | coverage ours / paper | "
          "truth outside the bounds, ticks, ours / paper |")
    print("|---|---|---|---|---|---|---|---|")
    for (machine, (hz, spes)), buf, wl, seed in itertools.product(
            MACHINES.items(), (1, 16), workloads, seeds):
        run = OUT / f"{wl}-{hz}-{buf}-{seed}"
        if not (run / ".complete").exists():
            simulate_run(run, wl, seed, spes=spes, timebase_hz=hz, spe_buffer_records=buf)
            (run / ".complete").write_text("")
        m = measure(run)
        o, s, p = m["ours"], m["same constraints"], m["paper"]
        ratio = o["width"] / p["width"]
        rows.append((machine, ratio, o["miss"], p["miss"]))
        label = f"{wl} {'1/block' if buf == 1 else 'buffered'}"
        print(f"| {machine} | {label} | {seed} | {o['width']:.2f} / {s['width']:.2f} / "
              f"{p['width']:.2f} | {ratio:.2f} | {o['relaxation']:.2f} / "
              f"{p['relaxation']:.2f} | {o['coverage']:.2f} / {p['coverage']:.2f} | "
              f"{o['miss']:.1f} / {p['miss']:.1f} |", flush=True)
    print()
    for machine in [*MACHINES, "all"]:
        sel = [r for r in rows if machine in ("all", r[0])]
        ratios = [r[1] for r in sel]
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"- {machine}: {len(sel)} runs; mean width ours / paper geo-mean {geo:.2f}x, "
              f"largest {max(ratios):.2f}x; truth at most {max(r[2] for r in sel):.1f} ticks "
              f"outside our bounds ({max(r[3] for r in sel):.1f} outside the paper's)")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
