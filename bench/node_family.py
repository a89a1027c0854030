"""Node clocks on cluster runs: a sweep of the simulator's ``cluster`` family plus the foreign
runs, each converted by this checkout's ``cell2otf2`` and judged from the archive read back
(``cellbench.nodetruth``).

Regimes (``REGIMES``; ``--quick`` runs the short variants, 10 s to 2 min):
- linear: drift up to 50 ppm, no wander, exchanges every 2-5 s, 10-20 min, 2-16 nodes, ring
  and chain, ranks 1 % or 15 % uneven, the one-way shift faster or slower than the halo; with
  the foreign run ``hybrid-linear-b``;
- linear-drawn: 24 shapes of the linear regime drawn at random (``_linear_drawn``: 2-16 nodes,
  ring or chain, MPI every 2-5 s over 5-20 minutes, 1 % or 15 % uneven, a 4 or 16 KiB
  shift), against the linear targets: the five hand-picked shapes above met them where most
  drawn ones did not;
- wander: a sine of 5-15 us over 1-5 min on top, exchanges every 2 s; with ``hybrid-wander-a``;
- wander-drawn: 24 shapes of the wander regime drawn at random (``_wander_drawn``: 2-16
  nodes, ring or chain, 10-20 minutes, 1 % or 15 % uneven, a 4 or 16 KiB shift), against
  the wander targets;
- wander-short: 24 more drawn the same way but over 3-7 minutes (``_wander_drawn(53, 24,
  short=True)``), a few wander periods, against the same targets;
- dense: exchanges every 0.2 s with 15 us of wander;
- steps: the drift changing abruptly at 2-10 even knots (by up to 15 ppm), exchanges every
  0.2-7 s, rings and chains;
- steps-large: the drift in 2-4 pieces of up to +-80 ppm (steps of up to 24 ppm), MPI every
  3-10 s over 10-20 minutes, rings of 6-12 nodes and chains of 8 and 16, ranks 15-20 % uneven
  (no targets but the order, bound and rate checks);
- sparse: few exchanges (1-2 minutes every 1-3 s, or 0.3 s every 30 ms), chains of 4-8 nodes
  and rings of 8-16, where some link comes late one way in most or every exchange: six
  shapes, seeds 101-106 each (two seeds of three shapes with ``--quick``), against the wander
  regime's targets;
- short: runs of 10 ms to under a second;
- random: 60 shapes drawn from the whole family by two seeded sweeps (``_drawn``), to meet
  the runs the regimes above do not make;
- slow: MPI every 5-10 s over 5-20 minutes with 0-20 us of wander (the family's slowest
  exchanges; no targets but the order, bound and rate checks), 2-8 nodes, 1 % or 15 % uneven,
  and 24 shapes drawn at random of 4-12 nodes over 3-10 minutes (``_slow_drawn``);
- busy: MPI every 5-10 s over 5-20 minutes, 10-20 us of wander, ranks 15 % uneven, chains of
  3-4 nodes and a ring of 4, seeds 1-7 and 61 each: where every exchange has a receive
  recorded seconds late, one way or the other, and pairs take turns at it (no targets but
  the order, bound and rate checks);
- mid: runs of 2-40 s (exchanges every 0.05-1 s, 15 us wander), 8-node chains and rings,
  seeds 201-202: between the two (no targets but the order, bound and rate checks);
- few: 30 runs of 4-12 exchanges drawn at random (``_few``): 2-12 nodes, MPI every
  0.01-5 s, where a direction late in every exchange has the fewest windows to be told by
  (no targets but the order, bound and rate checks);
- few-more: 60 more such runs (two more sweeps), which no change to the fit was tuned on
  (the same checks);
- few-steps: few exchanges (4-12, every 1-5 s) whose clocks change rate between them: six
  exchanges 5 s apart on chains of 4 and 10 nodes, drift in 2 or 4 pieces, seeds 1-4, and 20
  shapes drawn at random (``_few_steps``; the same checks);
- many: more nodes than the rest, rings of 32 and 64 nodes and a chain of 24 over 5
  minutes, MPI every 1-2 s, 10 us of wander (the same checks; the node fit's seconds show
  how it grows with the nodes).

Every run: ``cell2otf2 RUN -o X.otf2 --report X.json`` (``sys.executable -m cell_otf2`` with
this checkout on PYTHONPATH; without ``-q``: its summary, printed alone when stdout is not a
terminal, gives the stage times, and the "mpi" stage holds the node fit), then the evaluator.
Per regime it prints the worst case of each number against the node clock targets: no reversed
pair read back and the summary's count equal to the archive's, the bound containing the truth
at every event, RMS / max error (linear <= 0.2 / 0.5 us; wander <= 0.5 / 3 us, <= 2 us away
from the first and last 20 s; dense <= 0.15 / 1 us; sparse <= 0.5 / 3 us), no node rate at the
node fit's limit (``max_ppm``), and for short runs finite bounds. It prints numbers and
PASS/FAIL; it asserts nothing.

    python bench/node_family.py [--quick] [--regimes linear,short] [--keep DIR]
        [--foreign DIR] [--no-foreign]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the converter and simulator of this checkout
sys.path.insert(0, str(ROOT / "bench"))

from cellbench.nodetruth import evaluate  # noqa: E402

from cell_otf2.sync.nodefit.points import FitOptions  # noqa: E402

FOREIGN = ROOT.parent / "shared" / "foreign-runs"
RATE_LIMIT_PPM = FitOptions().max_ppm  # the node fit's rate limit (the maps' and the bounds')


@dataclass(frozen=True)
class Case:
    name: str
    options: dict  # simulate_run options (workload cluster); empty for a foreign run
    seed: int = 1
    foreign: str = ""  # a foreign run's folder name


@dataclass(frozen=True)
class Targets:
    rms_us: float | None = None
    max_us: float | None = None
    max_away_us: float | None = None
    short: bool = False  # bounds finite


@dataclass
class Regime:
    what: str
    targets: Targets
    cases: list[Case] = field(default_factory=list)
    quick: list[Case] = field(default_factory=list)


#: the busy regime's shapes: (label, nodes, topology, exchange s, duration s, wander us,
#: wander period s)
_BUSY = [("3 nodes chain, 10 s, 5 min, 20 us / 2 min", 3, "chain", 10.0, 300.0, 20.0, 120.0),
         ("4 nodes chain, 5 s, 5 min, 15 us / 150 s", 4, "chain", 5.0, 300.0, 15.0, 150.0),
         ("4 nodes ring, 10 s, 8 min, 10 us / 200 s", 4, "ring", 10.0, 480.0, 10.0, 200.0),
         ("3 nodes chain, 10 s, 20 min, 20 us / 2 min", 3, "chain", 10.0, 1200.0, 20.0, 120.0)]


def _c(name: str, seed: int, nodes: int, exchange_s: float, duration_s: float,
       wander_us: float = 0.0, period_s: float = 240.0, topology: str = "ring",
       spes: int = 2, imbalance: float = 0.01, shift_bytes: int = 4096,
       steps: int = 1, max_ppm: float = 50.0) -> Case:
    """A cluster run of 2 ranks per node, drift up to ``max_ppm`` (``steps``: the drift
    changes at that many even knots, by up to 30 % of ``max_ppm``: 15 ppm by default)."""
    return Case(name, dict(nodes=nodes, ranks=2 * nodes, spes=spes, exchange_s=exchange_s,
                           duration_s=duration_s, wander_us=wander_us,
                           wander_period_s=period_s, topology=topology, max_ppm=max_ppm,
                           imbalance=imbalance, shift_bytes=shift_bytes,
                           drift_segments=steps), seed)


def _drawn(sweep: int, count: int) -> list[Case]:
    """``count`` shapes drawn from the family at random (``random.Random(sweep)``): 2-16
    nodes, ring or chain, 0.5 s to 5 min, MPI every 0.01-5 s (5 to 3000 exchanges), wander
    0-20 us over 1-5 min, 1 % or 15 % uneven ranks."""
    rng = random.Random(sweep)
    out = []
    for i in range(count):
        nodes = rng.choice([2, 3, 4, 6, 8, 12, 16])
        topo = rng.choice(["ring", "chain"])
        dur = rng.choice([0.5, 2.0, 10.0, 30.0, 60.0, 120.0, 300.0])
        ex = rng.choice([0.02, 0.1, 0.5, 1.0, 2.0, 5.0])
        if dur / ex < 5 or dur / ex > 3000:
            ex = dur / rng.choice([10, 50, 200])
        out.append(_drawn_case(rng, f"{sweep}/{i:02d}: {nodes} nodes {topo}, {dur:g} s, "
                               f"every {ex:.3g} s", nodes, topo, ex, dur))
    return out


def _drawn_case(rng: random.Random, name: str, nodes: int, topology: str, exchange_s: float,
                duration_s: float) -> Case:
    """A drawn shape's case, its wander, ranks and seed drawn too."""
    wander = rng.choice([0.0, 5.0, 10.0, 20.0])
    period = rng.choice([60.0, 120.0, 300.0])
    imbalance = rng.choice([0.01, 0.15])
    seed = rng.randrange(300, 10000)
    name += f", {wander:g} us / {period:g} s, {imbalance:.0%} uneven, seed {seed}"
    return _c(name, seed, nodes, exchange_s, duration_s, wander, period, topology=topology,
              spes=1 if nodes > 8 else 2, imbalance=imbalance)


def _linear_drawn(sweep: int, count: int) -> list[Case]:
    """``count`` shapes of the linear regime drawn at random (``random.Random(sweep)``): 2-16
    nodes, ring or chain, MPI every 2-5 s over 5-20 minutes (10 minutes at most beyond 8
    nodes), drift up to 50 ppm and no wander, 1 % or 15 % uneven ranks, the one-way shift
    of 4 or 16 KiB: the linear targets over more than one run per shape."""
    rng = random.Random(sweep)
    out = []
    for i in range(count):
        nodes = rng.choice([2, 3, 4, 6, 8, 12, 16])
        topo = rng.choice(["ring", "chain"])
        ex = rng.choice([2.0, 3.0, 4.0, 5.0])
        dur = rng.choice([300.0, 600.0] if nodes > 8 else [300.0, 600.0, 900.0, 1200.0])
        imbalance = rng.choice([0.01, 0.15])
        shift = rng.choice([4096, 16384])
        seed = rng.randrange(300, 10000)
        out.append(_c(f"{sweep}/{i:02d}: {nodes} nodes {topo}, every {ex:g} s, {dur:g} s, "
                      f"{imbalance:.0%} uneven, {shift // 1024} KiB shift, seed {seed}", seed,
                      nodes, ex, dur, topology=topo, spes=1 if nodes > 8 else 2,
                      imbalance=imbalance, shift_bytes=shift))
    return out


def _wander_drawn(sweep: int, count: int, short: bool = False) -> list[Case]:
    """``count`` shapes of the wander regime drawn at random (``random.Random(sweep)``): 2-16
    nodes, ring or chain, MPI every 2 s over 10-20 minutes (10 minutes beyond 8 nodes; with
    ``short``, 3-7 minutes), 5-15 us of wander over 1-5 minutes on drift up to 50 ppm, 1 %
    or 15 % uneven ranks, the one-way shift of 4 or 16 KiB: the wander targets over more
    than one run per shape."""
    rng = random.Random(sweep)
    out = []
    for i in range(count):
        nodes = rng.choice([2, 3, 4, 6, 8, 12, 16])
        topo = rng.choice(["ring", "chain"])
        dur = rng.choice([180.0, 240.0, 300.0, 420.0] if short else
                         [600.0] if nodes > 8 else [600.0, 900.0, 1200.0])
        wander = rng.choice([5.0, 10.0, 15.0])
        period = rng.choice([60.0, 120.0, 180.0, 300.0])
        imbalance = rng.choice([0.01, 0.15])
        shift = rng.choice([4096, 16384])
        seed = rng.randrange(300, 10000)
        out.append(_c(f"{sweep}/{i:02d}: {nodes} nodes {topo}, {dur:g} s, {wander:g} us / "
                      f"{period:g} s, {imbalance:.0%} uneven, {shift // 1024} KiB shift, "
                      f"seed {seed}", seed, nodes, 2.0, dur, wander, period, topology=topo,
                      spes=1 if nodes > 8 else 2, imbalance=imbalance, shift_bytes=shift))
    return out


def _few(sweep: int, count: int) -> list[Case]:
    """``count`` runs of few exchanges drawn at random (``random.Random(sweep)``): 4-12
    exchanges every 0.01-5 s (40 ms to 60 s), 2-12 nodes, ring or chain, wander 0-20 us,
    1 % or 15 % uneven ranks: where a late direction has the fewest windows to be told by."""
    rng = random.Random(sweep)
    out = []
    for i in range(count):
        nodes = rng.choice([2, 3, 4, 6, 8, 12])
        topo = rng.choice(["ring", "chain"])
        n_ex = rng.choice([4, 5, 6, 7, 8, 10, 12])
        ex = rng.choice([0.01, 0.1, 1.0, 2.0, 5.0])
        out.append(_drawn_case(rng, f"{sweep}/{i:02d}: {nodes} nodes {topo}, {n_ex} exchanges "
                               f"every {ex:g} s", nodes, topo, ex, n_ex * ex))
    return out


def _few_steps(sweep: int, count: int) -> list[Case]:
    """``count`` runs of few exchanges whose clocks change rate, drawn at random
    (``random.Random(sweep)``): 4-12 exchanges every 1-5 s, the drift changing at 2-4 even
    knots, 2-10 nodes, ring or chain, 1 % or 15 % uneven ranks, no wander."""
    rng = random.Random(sweep)
    out = []
    for i in range(count):
        nodes = rng.choice([2, 3, 4, 6, 8, 10])
        topo = rng.choice(["ring", "chain"])
        n_ex = rng.choice([4, 5, 6, 8, 10, 12])
        ex = rng.choice([1.0, 2.0, 5.0])
        steps = rng.choice([2, 3, 4])
        imbalance = rng.choice([0.01, 0.15])
        seed = rng.randrange(300, 10000)
        out.append(_c(f"{sweep}/{i:02d}: {nodes} nodes {topo}, {n_ex} exchanges every {ex:g} "
                      f"s, {steps} drift pieces, {imbalance:.0%} uneven, seed {seed}", seed,
                      nodes, ex, n_ex * ex, topology=topo, spes=2, imbalance=imbalance,
                      steps=steps))
    return out


def _slow_drawn(sweep: int, count: int) -> list[Case]:
    """``count`` slow shapes drawn at random (``random.Random(sweep)``): 4-12 nodes, ring or
    chain, MPI every 5 or 10 s over 3-10 minutes (18-120 exchanges), wander 0-20 us over
    1-5 min, 1 % or 15 % uneven ranks: where a few late exchanges can cut a chain."""
    rng = random.Random(sweep)
    out = []
    for i in range(count):
        nodes = rng.choice([4, 6, 8, 12])
        topo = rng.choice(["ring", "chain"])
        ex = rng.choice([5.0, 10.0])
        dur = rng.choice([180.0, 300.0, 400.0, 600.0])
        out.append(_drawn_case(rng, f"{sweep}/{i:02d}: {nodes} nodes {topo}, every {ex:g} s, "
                               f"{dur:g} s", nodes, topo, ex, dur))
    return out


#: the mid regime's durations (s) and exchange intervals (s): between the short runs and the
#: minutes-long ones, where the lateness margin of long runs is too wide
_MID = [(2.0, 0.05), (5.0, 0.1), (9.0, 0.2), (15.0, 0.2), (25.0, 0.5), (40.0, 1.0)]

#: the sparse regime's shapes: label, nodes, exchange every (s), duration (s), wander (us),
#: topology, SPE contexts per rank
_SPARSE = [
    ("8 nodes chain, 3 s, 1 min", 8, 3.0, 60.0, 0.0, "chain", 2),
    ("8 nodes chain, 1 s, 1 min, 10 us wander", 8, 1.0, 60.0, 10.0, "chain", 2),
    ("8 nodes, 2 s, 2 min, 10 us wander", 8, 2.0, 120.0, 10.0, "ring", 2),
    ("4 nodes chain, 2 s, 2 min", 4, 2.0, 120.0, 0.0, "chain", 2),
    ("8 nodes chain, 0.3 s, every 30 ms", 8, 0.03, 0.3, 0.0, "chain", 2),
    ("16 nodes, 0.3 s, every 30 ms", 16, 0.03, 0.3, 0.0, "ring", 1),
]

REGIMES: dict[str, Regime] = {
    "linear": Regime(
        "linear drift, exchanges every 2-5 s", Targets(0.2, 0.5),
        cases=[_c("4 nodes, 2 s, 10 min", 1, 4, 2.0, 600.0),
               _c("4 nodes, 5 s, 20 min", 2, 4, 5.0, 1200.0),
               _c("2 nodes, 3 s, 10 min, 15 % imbalance", 3, 2, 3.0, 600.0, imbalance=0.15),
               _c("8 nodes chain, 2 s, 10 min", 4, 8, 2.0, 600.0, topology="chain"),
               _c("16 nodes, 4 s, 5 min, 16 KiB shift", 5, 16, 4.0, 300.0, spes=1,
                  shift_bytes=16384),
               Case("foreign hybrid-linear-b", {}, foreign="hybrid-linear-b")],
        quick=[_c("4 nodes, 2 s, 1 min", 1, 4, 2.0, 60.0),
               _c("8 nodes chain, 3 s, 1 min", 4, 8, 3.0, 60.0, topology="chain"),
               Case("foreign hybrid-linear-b", {}, foreign="hybrid-linear-b")]),
    "linear-drawn": Regime(
        "linear drift, exchanges every 2-5 s, 24 shapes drawn at random (2-16 nodes, 5-20 "
        "min)", Targets(0.2, 0.5),
        cases=_linear_drawn(51, 24), quick=_linear_drawn(51, 6)),
    "wander": Regime(
        "wander 5-15 us, exchanges every 2 s", Targets(0.5, 3.0, 2.0),
        cases=[_c("4 nodes, 15 us / 4 min, 10 min, 15 % imbalance", 11, 4, 2.0, 600.0, 15.0,
                  240.0, imbalance=0.15),
               _c("4 nodes, 5 us / 1 min, 10 min", 12, 4, 2.0, 600.0, 5.0, 60.0),
               _c("2 nodes, 10 us / 3 min, 20 min", 13, 2, 2.0, 1200.0, 10.0, 180.0),
               _c("8 nodes chain, 10 us / 2 min, 10 min", 14, 8, 2.0, 600.0, 10.0, 120.0,
                  topology="chain"),
               _c("16 nodes, 15 us / 5 min, 10 min, 16 KiB shift", 15, 16, 2.0, 600.0, 15.0,
                  300.0, spes=1, shift_bytes=16384),
               Case("foreign hybrid-wander-a", {}, foreign="hybrid-wander-a")],
        quick=[_c("4 nodes, 15 us / 1 min, 2 min, 15 % imbalance", 11, 4, 2.0, 120.0, 15.0,
                  60.0, imbalance=0.15),
               _c("8 nodes chain, 10 us / 1 min, 1 min", 14, 8, 2.0, 60.0, 10.0, 60.0,
                  topology="chain"),
               Case("foreign hybrid-wander-a", {}, foreign="hybrid-wander-a")]),
    "wander-drawn": Regime(
        "wander 5-15 us, exchanges every 2 s, 24 shapes drawn at random (2-16 nodes, 10-20 "
        "min)", Targets(0.5, 3.0, 2.0),
        cases=_wander_drawn(52, 24), quick=_wander_drawn(52, 6)),
    "wander-short": Regime(
        "wander 5-15 us, exchanges every 2 s, 24 shapes drawn at random (2-16 nodes, 3-7 "
        "min)", Targets(0.5, 3.0, 2.0),
        cases=_wander_drawn(53, 24, short=True), quick=_wander_drawn(53, 6, short=True)),
    "dense": Regime(
        "exchanges every 0.2 s, 15 us wander", Targets(0.15, 1.0),
        cases=[_c("4 nodes, 15 us / 2 min, 5 min", 21, 4, 0.2, 300.0, 15.0, 120.0),
               _c("2 nodes, 15 us / 1 min, 10 min", 22, 2, 0.2, 600.0, 15.0, 60.0),
               _c("8 nodes chain, 15 us / 4 min, 2 min", 23, 8, 0.2, 120.0, 15.0, 240.0,
                  topology="chain"),
               _c("16 nodes, 15 us / 2 min, 1 min, 16 KiB shift", 24, 16, 0.2, 60.0, 15.0,
                  120.0, spes=1, shift_bytes=16384)],
        quick=[_c("4 nodes, 15 us / 1 min, 1 min", 21, 4, 0.2, 60.0, 15.0, 60.0),
               _c("16 nodes, 15 us / 1 min, 20 s", 24, 16, 0.2, 20.0, 15.0, 60.0, spes=1)]),
    "steps": Regime(
        "drift stepping by up to 15 ppm at 2-10 knots, exchanges every 0.05-7 s",
        Targets(1.5, 25.0),
        cases=[_c("3 nodes, 2 steps, 0.5 s, 2 min", 41, 3, 0.5, 120.0, steps=2),
               _c("6 nodes chain, 4 steps, 0.5 s, 15 min", 23, 6, 0.5, 900.0,
                  topology="chain", steps=4),
               _c("4 nodes, 4 steps, 2 s, 10 min", 2, 4, 2.0, 600.0, steps=4),
               _c("4 nodes, 4 steps, 2 s, 10 min, 12 us wander", 8, 4, 2.0, 600.0, 12.0,
                  steps=4),
               _c("4 nodes, 4 steps, 0.2 s, 5 min, 10 us wander", 6, 4, 0.2, 300.0, 10.0,
                  steps=4),
               _c("2 nodes, 10 steps, 1 s, 10 min", 11, 2, 1.0, 600.0, steps=10),
               _c("3 nodes, 3 steps, 5 s, 15 min", 4, 3, 5.0, 900.0, steps=3),
               _c("4 nodes chain, 8 steps, 2 s, 10 min", 3, 4, 2.0, 600.0, topology="chain",
                  steps=8),
               _c("8 nodes chain, 6 steps, 1 s, 5 min, 5 us wander", 7, 8, 1.0, 300.0, 5.0,
                  topology="chain", steps=6),
               _c("4 nodes chain, 5 steps, 7 s, 15 min", 5, 4, 7.0, 900.0, topology="chain",
                  steps=5)],
        quick=[_c("3 nodes, 2 steps, 0.5 s, 2 min", 41, 3, 0.5, 120.0, steps=2),
               _c("4 nodes, 4 steps, 0.2 s, 2 min", 6, 4, 0.2, 120.0, steps=4)]),
    "steps-large": Regime(
        "drift in 2-4 pieces of up to +-80 ppm (steps of up to 24 ppm), MPI every 3-10 s "
        "over 10-20 minutes, rings of 6-12 nodes and chains of 8 and 16, 15-20 % uneven ranks",
        Targets(),
        cases=[_c("12 nodes ring, 3 pieces, 7 s, 20 min, 20 % uneven", 4242, 12, 7.0, 1200.0,
                  imbalance=0.2, steps=3, max_ppm=80.0),
               _c("12 nodes ring, 3 pieces, 7 s, 20 min, 20 % uneven, 18 us / 100 s", 4242,
                  12, 7.0, 1200.0, 18.0, 100.0, imbalance=0.2, steps=3, max_ppm=80.0),
               _c("8 nodes ring, 3 pieces, 7 s, 20 min, 20 % uneven", 4243, 8, 7.0, 1200.0,
                  imbalance=0.2, steps=3, max_ppm=80.0),
               _c("8 nodes chain, 4 pieces, 5 s, 15 min, 15 % uneven", 4244, 8, 5.0, 900.0,
                  topology="chain", imbalance=0.15, steps=4, max_ppm=80.0),
               _c("12 nodes ring, 3 pieces, 3 s, 10 min, 15 % uneven, 18 us / 100 s", 4245,
                  12, 3.0, 600.0, 18.0, 100.0, imbalance=0.15, steps=3, max_ppm=80.0),
               _c("6 nodes ring, 2 pieces, 10 s, 20 min, 20 % uneven", 4246, 6, 10.0, 1200.0,
                  imbalance=0.2, steps=2, max_ppm=80.0),
               _c("12 nodes ring, 3 pieces, 7 s, 10 min, 20 % uneven", 4242, 12, 7.0, 600.0,
                  imbalance=0.2, steps=3, max_ppm=80.0),
               _c("16 nodes chain, 4 pieces, 10 s, 15 min, 15 % uneven, 20 us / 150 s", 777,
                  16, 10.0, 900.0, 20.0, 150.0, topology="chain", spes=1, imbalance=0.15,
                  steps=4, max_ppm=80.0)],
        quick=[_c("12 nodes ring, 3 pieces, 7 s, 5 min, 20 % uneven", 4242, 12, 7.0, 300.0,
                  imbalance=0.2, steps=3, max_ppm=80.0)]),
    "sparse": Regime(
        "1-2 minutes, few exchanges, links late one way (seeds 101-106 of each shape)",
        Targets(0.5, 3.0),
        cases=[_c(f"{label}, seed {seed}", seed, nodes, ex, dur, wander, 60.0, topology=topo,
                  spes=spes)
               for label, nodes, ex, dur, wander, topo, spes in _SPARSE
               for seed in range(101, 107)],
        quick=[_c(f"{label}, seed {seed}", seed, nodes, ex, dur, wander, 60.0, topology=topo,
                  spes=spes)
               for label, nodes, ex, dur, wander, topo, spes in _SPARSE[:3]
               for seed in (104, 106)]),
    "short": Regime(
        "runs shorter than a second", Targets(short=True),
        cases=[_c("4 nodes, 0.5 s, every 20 ms", 31, 4, 0.02, 0.5),
               _c("2 nodes, 0.1 s, every 10 ms", 32, 2, 0.01, 0.1),
               _c("2 nodes, 10 ms, one exchange", 33, 2, 0.01, 0.01),
               _c("8 nodes chain, 0.8 s, every 50 ms, 10 us wander", 34, 8, 0.05, 0.8, 10.0,
                  60.0, topology="chain"),
               _c("16 nodes, 0.3 s, every 30 ms", 35, 16, 0.03, 0.3, spes=1)],
        quick=[_c("4 nodes, 0.5 s, every 20 ms", 31, 4, 0.02, 0.5),
               _c("2 nodes, 10 ms, one exchange", 33, 2, 0.01, 0.01),
               _c("8 nodes chain, 0.3 s, every 30 ms", 34, 8, 0.03, 0.3, topology="chain")]),
    "random": Regime(
        "shapes drawn at random from the family (two sweeps of 30)", Targets(),
        cases=_drawn(7, 30) + _drawn(11, 30), quick=_drawn(7, 10)),
    "few": Regime(
        "4-12 exchanges, shapes drawn at random (one sweep of 30)", Targets(),
        cases=_few(41, 30), quick=_few(41, 10)),
    "few-more": Regime(
        "4-12 exchanges, two more sweeps of 30 drawn at random (not those the fit was "
        "tuned on)", Targets(),
        cases=_few(42, 30) + _few(43, 30), quick=_few(42, 10)),
    "few-steps": Regime(
        "4-12 exchanges whose clocks change rate: six exchanges 5 s apart on chains of 4 and "
        "10 nodes (seeds 1-4, drift in 2 or 4 pieces) and 20 shapes drawn at random",
        Targets(),
        cases=[_c(f"{nodes} nodes chain, 6 exchanges every 5 s, {steps} drift pieces, seed "
                  f"{seed}", seed, nodes, 5.0, 30.0, topology="chain", steps=steps)
               for nodes in (4, 10) for steps in (2, 4) for seed in (1, 2, 3, 4)]
        + _few_steps(44, 20),
        quick=[_c(f"4 nodes chain, 6 exchanges every 5 s, 2 drift pieces, seed {seed}", seed,
                  4, 5.0, 30.0, topology="chain", steps=2) for seed in (1, 2)]
        + _few_steps(44, 4)),
    "slow": Regime(
        "MPI every 5-10 s, 5-20 minutes, wander 0-20 us over 2-5 min", Targets(),
        cases=[_c("3 nodes chain, 10 s, 20 min, 20 us / 5 min, 15 % imbalance", 61, 3, 10.0,
                  1200.0, 20.0, 300.0, topology="chain", imbalance=0.15),
               _c("3 nodes chain, 10 s, 20 min, 20 us / 5 min", 61, 3, 10.0, 1200.0, 20.0,
                  300.0, topology="chain"),
               _c("2 nodes, 10 s, 20 min, 10 us / 3 min", 62, 2, 10.0, 1200.0, 10.0, 180.0),
               _c("4 nodes, 5 s, 15 min, 15 us / 2 min, 15 % imbalance", 63, 4, 5.0, 900.0,
                  15.0, 120.0, imbalance=0.15),
               _c("8 nodes chain, 10 s, 10 min, 20 us / 4 min", 64, 8, 10.0, 600.0, 20.0,
                  240.0, topology="chain"),
               _c("4 nodes, 10 s, 20 min, linear", 65, 4, 10.0, 1200.0),
               # shorter 8-node chains: 30-40 exchanges, most directions late in half of them
               *[_c(f"8 nodes chain, 10 s, {dur:g} s, 20 us / 4 min, seed {seed}", seed, 8, 10.0,
                    dur, 20.0, 240.0, topology="chain")
                 for seed, dur in ((64, 300.0), (65, 300.0), (64, 400.0))],
               *_slow_drawn(2026, 24)],
        quick=[_c("3 nodes chain, 10 s, 5 min, 20 us / 2 min, 15 % imbalance", 61, 3, 10.0,
                  300.0, 20.0, 120.0, topology="chain", imbalance=0.15),
               _c("4 nodes, 10 s, 5 min, linear", 65, 4, 10.0, 300.0)]),
    "busy": Regime(
        "MPI every 5-10 s, 5-20 minutes, 15 % uneven ranks (seeds 1-7, 61)", Targets(),
        cases=[_c(f"{label}, seed {seed}", seed, nodes, ex, dur, wander, period,
                  topology=topo, imbalance=0.15)
               for label, nodes, topo, ex, dur, wander, period in _BUSY
               for seed in (1, 2, 3, 4, 5, 6, 7, 61)],
        quick=[_c(f"{label}, seed {seed}", seed, nodes, ex, dur, wander, period,
                  topology=topo, imbalance=0.15)
               for label, nodes, topo, ex, dur, wander, period in _BUSY[:1]
               for seed in (2, 6, 61)]),
    "mid": Regime(
        "runs of 2-40 s, 15 us wander (seeds 201-202 of each shape)", Targets(),
        cases=[_c(f"8 nodes {topo}, {dur:g} s, every {ex:g} s, seed {seed}", seed, 8, ex, dur,
                  15.0, 60.0, topology=topo)
               for dur, ex in _MID for topo in ("chain", "ring") for seed in (201, 202)],
        quick=[_c(f"8 nodes {topo}, {dur:g} s, every {ex:g} s, seed 201", 201, 8, ex, dur,
                  15.0, 60.0, topology=topo)
               for dur, ex in _MID[::2] for topo in ("chain", "ring")]),
    "many": Regime(
        "more nodes than the other regimes: rings of 32 and 64 nodes and a chain of 24, "
        "5 minutes, MPI every 1-2 s, 10 us wander", Targets(),
        cases=[_c("32 nodes ring, 2 s, 5 min, 10 us wander", 3, 32, 2.0, 300.0, 10.0,
                  spes=1),
               _c("64 nodes ring, 1 s, 5 min, 10 us wander", 3, 64, 1.0, 300.0, 10.0,
                  spes=1),
               _c("24 nodes chain, 2 s, 5 min, 10 us wander", 5, 24, 2.0, 300.0, 10.0,
                  topology="chain", spes=1)],
        quick=[_c("32 nodes ring, 2 s, 5 min, 10 us wander", 3, 32, 2.0, 300.0, 10.0,
                  spes=1)]),
}

_STAGES = re.compile(r"wall time ([\d.]+)s \((.*) s\)")


def convert(run: Path, out: Path) -> tuple[Path, Path, dict[str, float], int]:
    """This checkout's cell2otf2 on ``run``: (archive, report, stage seconds, exit status)."""
    out.mkdir(parents=True, exist_ok=True)
    anchor, report = out / "trace.otf2", out / "sync.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run([sys.executable, "-m", "cell_otf2", str(run), "-o", str(anchor),
                           "--report", str(report), "--force"], capture_output=True, text=True,
                          env=env)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"cell2otf2 {run} exited {proc.returncode}: {proc.stderr[-2000:]}")
    stages: dict[str, float] = {}
    m = _STAGES.search(proc.stdout)
    if m:
        stages["wall"] = float(m.group(1))
        for part in m.group(2).split(","):
            name, _, secs = part.strip().rpartition(" ")
            stages[name] = float(secs)
    return anchor, report, stages, proc.returncode


def fit_seconds(stages: dict[str, float]) -> float:
    """The node fit's seconds as the summary exposes them: a stage named after the fit if
    there is one, else the "mpi" stage (MPI matching and the node fit)."""
    for name, secs in stages.items():
        if "fit" in name:
            return secs
    return stages.get("mpi", math.nan)


def measure(case: Case, work: Path, foreign: Path) -> dict:
    from cell_otf2.sim.run import simulate_run

    slug = re.sub(r"[^a-z0-9]+", "-", case.name.lower()).strip("-")
    if case.foreign:
        run = foreign / case.foreign
    else:
        run = work / f"{slug}-seed{case.seed}"
        if not (run / "run.json").exists():
            simulate_run(run, "cluster", case.seed, **case.options)
    t0 = time.perf_counter()
    anchor, report, stages, status = convert(run, work / "archives" / slug)
    res = evaluate(run, anchor, report)
    res.update(case=case.name, fit_s=fit_seconds(stages), stages=stages, exit_status=status,
               convert_s=time.perf_counter() - t0,
               max_rate_ppm=max((abs(n["rate_ppm"]) for n in res["nodes"]), default=0.0))
    print(f"  {case.name}: {res['seconds']:.1f} s, {res['events']} events; RMS "
          f"{res['rms_us']:.3f} / max {res['max_us']:.3f} us (away {res['max_away_us']:.3f}); "
          f"{res['outside_bound']} outside the bound; reversed {res['reversed_mpi']} MPI "
          f"{res['reversed_mailbox']} mailbox {res['reversed_dma']} DMA, summary "
          f"{res['order_violations']}; {res['mpi_under_1_tick']} MPI < 1 tick; max |rate| "
          f"{res['max_rate_ppm']:.1f} ppm; mpi+fit {res['fit_s']:.2f} s", flush=True)
    if res["reversed_mpi_by_nodes"]:
        print("    reversed MPI by nodes: " + ", ".join(
            f"{k} {v}" for k, v in res["reversed_mpi_by_nodes"].items()), flush=True)
    return res


def _worst(rows: list[dict], key: str) -> tuple[float, str]:
    vals = [(r[key], r["case"]) for r in rows if not (isinstance(r[key], float)
                                                      and math.isnan(r[key]))]
    return max(vals) if vals else (math.nan, "-")


def regime_report(name: str, regime: Regime, rows: list[dict]) -> list[str]:
    """The worst case of each number over the regime's runs, against its targets."""
    t = regime.targets
    out = [f"{name}: {regime.what} ({len(rows)} runs)"]

    def line(ok: bool, text: str) -> None:
        out.append(f"  {'PASS' if ok else 'FAIL'}: {text}")

    rev, rev_case = _worst(rows, "reversed_total")
    line(rev == 0, f"reversed pairs read back: worst {rev:g} ({rev_case}); MPI "
                   f"{_worst(rows, 'reversed_mpi')[0]:g}, mailbox "
                   f"{_worst(rows, 'reversed_mailbox')[0]:g}, DMA "
                   f"{_worst(rows, 'reversed_dma')[0]:g}")
    off = [r for r in rows if not r["counts_agree"]]
    line(not off, "summary count == archive count" + (": " + "; ".join(
        f"{r['case']}: summary {r['order_violations']}, archive {r['reversed_total']}"
        for r in off) if off else " in every run"))
    outside, o_case = _worst(rows, "outside_bound")
    line(outside == 0, f"bound contains the truth at every event: worst {outside:g} events "
                       f"outside ({o_case}); "
                       f"{sum(r['outside_bound'] for r in rows)} in all")
    rms, rms_case = _worst(rows, "rms_us")
    mx, mx_case = _worst(rows, "max_us")
    mxa, mxa_case = _worst(rows, "max_away_us")
    if t.rms_us is not None:
        line(rms <= t.rms_us, f"RMS {rms:.3f} us <= {t.rms_us} ({rms_case})")
        line(mx <= t.max_us, f"max {mx:.3f} us <= {t.max_us} ({mx_case})")
        if t.max_away_us is not None:
            line(mxa <= t.max_away_us,
                 f"max away from the first/last 20 s {mxa:.3f} us <= {t.max_away_us} "
                 f"({mxa_case})")
        else:
            out.append(f"  info: max away from the first/last 20 s {mxa:.3f} us ({mxa_case})")
    else:
        out.append(f"  info: RMS {rms:.3f} us ({rms_case}), max {mx:.3f} us ({mx_case})")
    at_limit = [r["case"] for r in rows if r["max_rate_ppm"] >= RATE_LIMIT_PPM * (1 - 1e-6)]
    line(not at_limit, f"no node rate at the +-{RATE_LIMIT_PPM:g} ppm limit: worst "
                       f"{_worst(rows, 'max_rate_ppm')[0]:.1f} ppm"
                       + (f" ({', '.join(at_limit)})" if at_limit else ""))
    if t.short:
        infinite = [r["case"] for r in rows if not r["bounds_finite"]]
        line(not infinite, "bounds finite" + (f": not in {', '.join(infinite)}"
                                               if infinite else ""))
    fit, fit_case = _worst(rows, "fit_s")
    out.append(f"  info: MPI matching + node fit at most {fit:.2f} s ({fit_case}); MPI "
               f"messages under 1 tick at most {_worst(rows, 'mpi_under_1_tick')[0]:g}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the short variants (10 s - 2 min)")
    ap.add_argument("--regimes", default="", help="comma list of regime names (default all)")
    ap.add_argument("--keep", type=Path, help="keep runs and archives here (runs reused)")
    ap.add_argument("--foreign", type=Path, default=FOREIGN, help="the foreign runs' folder")
    ap.add_argument("--no-foreign", action="store_true", help="skip the foreign runs")
    args = ap.parse_args()
    want = [w for w in args.regimes.split(",") if w]
    work = args.keep or Path(tempfile.mkdtemp(prefix="node-family-"))
    work.mkdir(parents=True, exist_ok=True)
    report: list[str] = []
    t0 = time.perf_counter()
    try:
        for name, regime in REGIMES.items():
            if want and name not in want:
                continue
            cases = regime.quick if args.quick else regime.cases
            cases = [c for c in cases if not c.foreign or (
                not args.no_foreign and (args.foreign / c.foreign / "run.json").is_file())]
            print(f"{name}: {regime.what}", flush=True)
            rows = [measure(c, work, args.foreign) for c in cases]
            report += regime_report(name, regime, rows)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print("\n".join(report))
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
