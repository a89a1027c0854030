"""run.json of a simulated run (docs/format.md section 2). Builds the dict; does not write files.

``communicators`` defaults to MPI_COMM_WORLD alone; the MPI part passes its own list (world
plus one communicator per node with two or more ranks).
"""

from __future__ import annotations

from .workloads import COUNTERS, PROGRAM_ID, REGIONS

CELL_CHIPS = 2
SPES_PER_CHIP = 8
NODE_NAMES = [f"qs20-{chr(ord('a') + i)}" for i in range(26)]


def node_name(i: int) -> str:
    return NODE_NAMES[i] if i < len(NODE_NAMES) else f"qs20-n{i}"


def build_manifest(
    application: str,
    timebase_hz: int,
    decrementer_restore: str,
    n_nodes: int,
    processes: list[dict],
    program_name: str,
    communicators: list[dict] | None = None,
) -> dict:
    """The manifest dict; ``processes`` rows already carry rank, node, path, pid, starts."""
    return {
        "format": "cbt",
        "version": 1,
        "application": application,
        "timebase_hz": int(timebase_hz),
        "decrementer_restore": decrementer_restore,
        "nodes": [{"name": node_name(i), "cell_chips": CELL_CHIPS, "spes_per_chip": SPES_PER_CHIP}
                  for i in range(n_nodes)],
        "processes": processes,
        "regions": REGIONS,
        "programs": [{"id": PROGRAM_ID, "name": program_name}],
        "counters": COUNTERS,
        "communicators": communicators or [{"id": 0, "name": "MPI_COMM_WORLD",
                                            "ranks": [p["rank"] for p in processes]}],
    }
