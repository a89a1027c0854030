"""Shared fixtures: the bundled sample runs by scenario name (``sample("fft-16spe")``) and
simulated runs made once per test session (``simulated("four-nodes")`` for a named scenario,
or ``simulated(workload="fft", seed=3, spes=2)`` for any options of ``simulate_run``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from paths import SAMPLES

#: simulated scenarios several test modules use: name -> simulate_run options
SCENARIOS: dict[str, dict] = {
    "four-nodes": dict(workload="hybrid", seed=11, ranks=8, nodes=4, spes=2, phases=3,
                       chunks=4),
    "damaged-hybrid": dict(workload="hybrid", seed=5, ranks=4, nodes=2, spes=2, phases=4,
                           chunks=4, damage=["gap", "unmatched-mpi", "undefined-id",
                                             "backwards-timebase", "no-exit",
                                             "unknown-code"]),
    "damaged-three-nodes": dict(workload="hybrid", seed=5, ranks=6, nodes=3, spes=2, phases=4,
                                chunks=4, damage=["gap", "unmatched-mpi", "undefined-id",
                                                  "backwards-timebase", "no-exit",
                                                  "unknown-code"]),
    "switches-hybrid": dict(workload="hybrid", seed=3, ranks=4, nodes=2, spes=4, spus=2,
                            phases=3, chunks=6, slice_ms=0.05, decrementer_restore="restored",
                            heartbeats=False),
}


@pytest.fixture
def sample() -> Callable[[str], Path]:
    """The path of a bundled sample run by its scenario name; fails for an unknown name."""

    def path(name: str) -> Path:
        p = SAMPLES / name
        assert (p / "run.json").is_file(), f"no sample run {name!r} in {SAMPLES}"
        return p

    return path


@pytest.fixture(scope="session")
def simulated(tmp_path_factory) -> Callable[..., Path]:
    """A simulated run directory, made once per session for the same options: by scenario
    name (``SCENARIOS``) or by ``simulate_run``'s options. Tests must not modify it."""
    from cell_otf2.sim.run import simulate_run

    base = tmp_path_factory.mktemp("simulated")
    made: dict[str, Path] = {}

    def get(name: str | None = None, **options) -> Path:
        if name is not None:
            assert name in SCENARIOS, f"no simulated scenario {name!r}"
            options = SCENARIOS[name]
        key = hashlib.sha1(json.dumps(options, sort_keys=True).encode()).hexdigest()[:12]
        if key not in made:
            run = base / (name or key)
            simulate_run(run, **options)
            made[key] = run
        return made[key]

    return get
