"""Shared fixtures: the bundled sample runs by scenario name (``sample("fft-16spe")``) and
simulated runs made once per test session (``simulated("four-nodes")`` for a named scenario,
or ``simulated(workload="fft", seed=3, spes=2)`` for any options of ``simulate_run``), and
the two ways of the compiled helpers and their numpy twins: ``native_ways`` (a loop that runs
its body both ways), ``native_way`` (the test runs once each way) and the marker
``native("name")`` (skipped where that helper does not run)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from paths import SAMPLES

from cell_otf2 import native

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


@pytest.fixture(scope="session")
def native_ways() -> Callable[[pytest.MonkeyPatch], Iterator[str]]:
    """Run a body both ways and compare: ``for way in native_ways(monkeypatch): ...`` runs it
    first as the environment has the compiled helpers ("native": each where it is built and
    ``CELL2OTF2_NO_NATIVE`` is not set), then with the numpy twins forced ("numpy"); the
    environment is as before after the loop (and at the test's end, through ``monkeypatch``,
    which may be a module's own for hypothesis tests). Where the helpers are off or not built
    both ways run numpy, and their results must agree all the same."""

    def ways(mp: pytest.MonkeyPatch) -> Iterator[str]:
        outer = os.environ.get(native.OFF_VARIABLE)
        for way in ("native", "numpy"):
            _set_switch(mp, outer if way == "native" else "1")
            yield way
        _set_switch(mp, outer)

    return ways


@pytest.fixture(params=["native", "numpy"])
def native_way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs twice, with the compiled helpers as the environment has them ("native",
    skipped where the switch is off or none is built) and with the numpy twins forced
    ("numpy")."""
    if request.param == "numpy":
        monkeypatch.setenv(native.OFF_VARIABLE, "1")
    elif all(native.helper(name) is None for name in native.HELPERS):
        pytest.skip(f"no compiled helper runs ({native.OFF_VARIABLE} set, or none is built)")
    return request.param


def _set_switch(mp: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        mp.delenv(native.OFF_VARIABLE, raising=False)
    else:
        mp.setenv(native.OFF_VARIABLE, value)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.native("evtwrite")``: the test needs that compiled helper and is skipped
    where ``native.helper`` does not give it (not built, or ``CELL2OTF2_NO_NATIVE`` set)."""
    for mark in item.iter_markers("native"):
        for name in mark.args:
            if native.helper(name) is None:
                pytest.skip(f"cell_otf2.native._{name} does not run (not built, or "
                            f"{native.OFF_VARIABLE} set)")
