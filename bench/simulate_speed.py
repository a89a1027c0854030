"""How fast the simulator writes records: one large ``fft`` run, timed, records/s printed.

Run as ``.venv/bin/python bench/simulate_speed.py [--records N] [--out DIR]``. The target is
10 million records in under a minute on the project machine. It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from cell_otf2.sim.run import simulate_run

SPES = 16
CHUNKS = 256
RECORDS_PER_PHASE = SPES * (7 * CHUNKS + 14) + 6 * SPES  # loop rows + mailbox/signal records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=float, default=10e6, help="approximate records to write")
    ap.add_argument("--out", type=Path, default=None, help="keep the run here")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    phases = max(1, round(args.records / RECORDS_PER_PHASE))
    out = args.out or Path(tempfile.mkdtemp(prefix="simbench-"))
    if out.exists():
        shutil.rmtree(out)
    t0, c0 = time.perf_counter(), time.process_time()
    summary = simulate_run(out, "fft", args.seed, spes=SPES, chunks=CHUNKS, phases=phases)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"fft: {SPES} SPEs x {phases} phases x {CHUNKS} chunks")
    print(f"{summary.records} records, {summary.slots} slots, "
          f"{summary.bytes_written / 1e6:.1f} MB of dumps in {wall:.1f} s "
          f"(CPU {cpu:.1f} s; more wall than CPU means other processes shared the cores)")
    print(f"{summary.records / wall / 1e6:.2f} M records/s "
          f"({'under' if wall < 60 else 'OVER'} a minute for this size)")
    if args.out is None:
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
