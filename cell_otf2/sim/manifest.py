"""run.json of a simulated run (docs/format.md section 2): builds the dict, with ``communicators``
defaulting to MPI_COMM_WORLD alone (the MPI part passes world plus one communicator per node
with two or more ranks). It does not write files."""

from __future__ import annotations

from .workloads import COUNTERS, PROGRAM_ID, REGIONS

CELL_CHIPS = 2  # a QS20/QS21/QS22 blade: two Cell chips of 8 SPEs
SPES_PER_CHIP = 8
#: a PlayStation 3: its timebase runs at 79.8 MHz; one Cell chip, 6 SPEs usable under Linux
PS3_TIMEBASE_HZ = 79_800_000
PS3_CHIPS, PS3_SPES = 1, 6


def node_hardware(timebase_hz: int) -> tuple[int, int]:
    """(Cell chips, SPEs per chip) of a node whose timebase runs at ``timebase_hz``."""
    return (PS3_CHIPS, PS3_SPES) if int(timebase_hz) == PS3_TIMEBASE_HZ \
        else (CELL_CHIPS, SPES_PER_CHIP)
NODE_NAMES = [f"qs20-{chr(ord('a') + i)}" for i in range(26)]


def node_name(i: int, timebase_hz: int = 0) -> str:
    """Node ``i``'s name: qs20-a, qs20-b, ... (ps3-a, ... for a PS3 timebase)."""
    name = NODE_NAMES[i] if i < len(NODE_NAMES) else f"qs20-n{i}"
    return name.replace("qs20", "ps3") if int(timebase_hz) == PS3_TIMEBASE_HZ else name


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
        "nodes": [{"name": node_name(i, timebase_hz), "cell_chips": node_hardware(timebase_hz)[0],
                   "spes_per_chip": node_hardware(timebase_hz)[1]} for i in range(n_nodes)],
        "processes": processes,
        "regions": REGIONS,
        "programs": [{"id": PROGRAM_ID, "name": program_name}],
        "counters": COUNTERS,
        "communicators": communicators or [{"id": 0, "name": "MPI_COMM_WORLD",
                                            "ranks": [p["rank"] for p in processes]}],
    }
