"""Ground truth of a simulated run, what really happened, beside the CBT 1 files: ``truth.npz``
holds the arrays, ``truth.json`` the small things (options, node maps at the run's midpoint,
damage); readers of the run ignore both (docs/format.md 1: other files). ``save_truth`` writes
and ``load_truth`` reads them; their conventions (reference ticks, slot times, intervals, DMA,
messages) are in docs/simulator.md. This module does not simulate anything and does not check
the run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

INTERVAL_DTYPE = np.dtype(
    [("rank", "<i4"), ("ctx", "<i4"), ("interval", "<i4"), ("node", "<i4"),
     ("offset_ticks", "<f8"), ("readings", "<i8")]
)
DMA_DTYPE = np.dtype([("rank", "<i4"), ("slot", "<i8"), ("issue", "<f8"), ("done", "<f8")])
MESSAGE_DTYPE = np.dtype(
    [("send_rank", "<i4"), ("send_slot", "<i8"), ("recv_rank", "<i4"), ("recv_slot", "<i8"),
     ("t_send", "<f8"), ("t_arrive", "<f8")]
)
TRUTH_NPZ = "truth.npz"
TRUTH_JSON = "truth.json"
COMPRESS_BELOW = 3_000_000  # array elements; larger truths are stored uncompressed


@dataclass
class NodeTruth:
    name: str
    offset: float  # reference = offset + rate * node_timebase, at the run's midpoint
    rate: float
    ref_knots: np.ndarray  # the exact piecewise-linear map
    node_knots: np.ndarray


@dataclass
class Truth:
    options: dict
    timebase_hz: int
    slot_time: dict[int, np.ndarray]
    slot_reserve: dict[int, np.ndarray]
    slot_interval: dict[int, np.ndarray]  # interval number of each decrementer reading, else -1
    damaged_slots: dict[int, np.ndarray]  # slot indices damage touched (as written)
    intervals: np.ndarray
    dma: np.ndarray
    messages: np.ndarray
    nodes: dict[str, NodeTruth]
    node_names: list[str]
    damage: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    def node_to_reference(self, node: str, timebase: np.ndarray | float) -> np.ndarray:
        """Reference time at which ``node``'s timebase read ``timebase`` (the exact map)."""
        n = self.nodes[node]
        return _piecewise(timebase, n.node_knots, n.ref_knots)

    def reference_to_node(self, node: str, t_ref: np.ndarray | float) -> np.ndarray:
        """``node``'s timebase (real-valued) at reference time ``t_ref``."""
        n = self.nodes[node]
        return _piecewise(t_ref, n.ref_knots, n.node_knots)


def _piecewise(x: np.ndarray | float, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """Linear between the knots and beyond them (the knots span the run with a wide margin)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.interp(x, xp, fp)
    lo, hi = x < xp[0], x > xp[-1]
    y = np.where(lo, fp[0] + (x - xp[0]) * (fp[1] - fp[0]) / (xp[1] - xp[0]), y)
    return np.where(hi, fp[-1] + (x - xp[-1]) * (fp[-1] - fp[-2]) / (xp[-1] - xp[-2]), y)


def save_truth(run_dir: Path, truth: Truth) -> None:
    """Write truth.npz and truth.json into ``run_dir``."""
    arrays: dict[str, np.ndarray] = {
        "intervals": truth.intervals, "dma": truth.dma, "messages": truth.messages,
    }
    for rank in truth.slot_time:
        arrays[f"slot_time_{rank}"] = truth.slot_time[rank]
        arrays[f"slot_reserve_{rank}"] = truth.slot_reserve[rank]
        arrays[f"slot_interval_{rank}"] = truth.slot_interval[rank]
        arrays[f"damaged_slots_{rank}"] = truth.damaged_slots.get(rank, np.zeros(0, np.int64))
    for i, name in enumerate(truth.node_names):
        arrays[f"node_ref_knots_{i}"] = truth.nodes[name].ref_knots
        arrays[f"node_node_knots_{i}"] = truth.nodes[name].node_knots
    n_values = sum(a.size for a in arrays.values())
    save = np.savez_compressed if n_values < COMPRESS_BELOW else np.savez  # zlib is slow
    # numpy's stub lets ``**arrays`` reach the ``allow_pickle`` flag; no key here is named so
    save(Path(run_dir) / TRUTH_NPZ, **arrays)  # type: ignore[arg-type]
    meta = {
        "options": truth.options,
        "timebase_hz": truth.timebase_hz,
        "ranks": sorted(truth.slot_time),
        "nodes": [{"name": n, "offset_ticks": truth.nodes[n].offset, "rate": truth.nodes[n].rate}
                  for n in truth.node_names],
        "damage": truth.damage,
        "summary": truth.summary,
    }
    (Path(run_dir) / TRUTH_JSON).write_text(json.dumps(meta, indent=1) + "\n")


def load_truth(run_dir: str | Path) -> Truth:
    """Read the ground truth the simulator wrote beside ``run_dir/run.json``."""
    run_dir = Path(run_dir)
    meta = json.loads((run_dir / TRUTH_JSON).read_text())
    with np.load(run_dir / TRUTH_NPZ) as z:
        ranks = meta["ranks"]
        names = [n["name"] for n in meta["nodes"]]
        nodes = {
            n["name"]: NodeTruth(n["name"], n["offset_ticks"], n["rate"],
                                 z[f"node_ref_knots_{i}"], z[f"node_node_knots_{i}"])
            for i, n in enumerate(meta["nodes"])
        }
        return Truth(
            options=meta["options"],
            timebase_hz=meta["timebase_hz"],
            slot_time={r: z[f"slot_time_{r}"] for r in ranks},
            slot_reserve={r: z[f"slot_reserve_{r}"] for r in ranks},
            slot_interval={r: z[f"slot_interval_{r}"] for r in ranks},
            damaged_slots={r: z[f"damaged_slots_{r}"] for r in ranks},
            intervals=z["intervals"],
            dma=z["dma"],
            messages=z["messages"],
            nodes=nodes,
            node_names=names,
            damage=meta["damage"],
            summary=meta.get("summary", {}),
        )
