"""How far an archive's times on other nodes are from the truth, read back from the archive.

Given a run directory, the OTF2 archive converted from it and the converter's sync report
(``--report``), ``evaluate`` takes every event on a PPE thread or SPE context location of a
node other than the reference's, inverts that node's map from the report (its ``segments``) to
get the node timebase x the event was placed from, and compares the event's archive time t with
the true reference time T_true(x) at which the node's clock read x: error = t - T_true(x),
reference ticks. The true clocks come from the run itself: the simulator's ``truth.npz``
(``sim.truth.load_truth(run).node_to_reference``), or a ``clocks.json`` that gives, per node,
node timebase = a + T + floor((T - T0) ppb / 1e9) + floor(amp sin(2 pi (T - T0) / period +
phase)), inverted here numerically. It reports RMS and max |error| (us) per node and overall,
also away from the run's first and last 20 s; how many events lie outside the report's
guaranteed bound (+1 tick of rounding); messages read back reversed (MPI, mailboxes and
signals, DMA issue against completion) and MPI messages under one tick, beside the report's
``order_violations``. It measures the node maps only (an SPE event's own interval offset is
taken as the converter placed it) and does not convert, simulate or fit anything.

    python bench/cellbench/nodetruth.py RUN ARCHIVE REPORT
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: bench/ on the path for ``cellbench``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cellbench.readback import ReadBack, read_archive  # noqa: E402

EDGE_S = 20.0  # "away from the edges": more than this far from the run's first and last event
MAILBOX_COMM = "Cell mailboxes"
DMA_COMM = "DMA"
_RANK = re.compile(r"\(rank (\d+)\)$")


# --------------------------------------------------------------------------------------------
# true clocks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForeignClock:
    """One node of a ``clocks.json``: its timebase at integer reference time T is
    a + T + floor((T - T0) ppb / 1e9) + floor(amp sin(2 pi (T - T0) / period + phase))."""

    a: int
    ppb: int
    amp: float
    period: float
    phase: float
    t0: int

    def timebase(self, t: np.ndarray) -> np.ndarray:
        """The node's integer timebase at integer reference times ``t`` (float64 arrays)."""
        dt = t - self.t0
        return (self.a + t + np.floor(dt * self.ppb / 1e9)
                + np.floor(self.amp * np.sin(2.0 * np.pi * dt / self.period + self.phase)))

    def _smooth(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The timebase without its floors, and its slope."""
        dt = t - self.t0
        arg = 2.0 * np.pi * dt / self.period + self.phase
        value = self.a + t + dt * self.ppb / 1e9 + self.amp * np.sin(arg)
        slope = 1.0 + self.ppb / 1e9 + self.amp * 2.0 * np.pi / self.period * np.cos(arg)
        return value, slope

    def first_reading(self, x: np.ndarray) -> np.ndarray:
        """The first integer reference time at which the timebase reads ``x`` or more
        (``x`` integer-valued float64): Newton on the smooth clock, then a few exact steps."""
        t = x - self.a
        for _ in range(4):
            value, slope = self._smooth(t)
            t = t - (value - x) / slope
        t = np.floor(t) - 3.0  # the floors move the step by at most two ticks
        for _ in range(8):
            t = np.where(self.timebase(t) < x, t + 1.0, t)
        return t

    def to_reference(self, x: np.ndarray) -> np.ndarray:
        """Reference time at which the clock read ``x`` (real-valued: between the first
        readings of floor(x) and floor(x) + 1, linearly)."""
        x = np.asarray(x, dtype=np.float64)
        lo = np.floor(x)
        t_lo = self.first_reading(lo)
        t_hi = self.first_reading(lo + 1.0)
        return t_lo + (x - lo) * (t_hi - t_lo)


@dataclass
class TrueClocks:
    """The true map of every node: ``to_reference[name](node_timebase) -> reference ticks``."""

    source: str  # "simulated" or "clocks.json"
    timebase_hz: int
    to_reference: dict[str, Callable[[np.ndarray], np.ndarray]]


def load_foreign_clocks(path: str | Path) -> TrueClocks:
    """The node clocks of a ``clocks.json``."""
    d = json.loads(Path(path).read_text())
    t0 = int(d["T0"])
    maps = {}
    for n in d["nodes"]:
        amp, period, phase = (float(v) for v in n.get("wander", (0.0, 1.0, 0.0)))
        clock = ForeignClock(int(n["a"]), int(n["ppb"]), amp, period, phase, t0)
        maps[n["name"]] = clock.to_reference
    return TrueClocks("clocks.json", int(d["timebase_hz"]), maps)


def true_clocks(run_dir: str | Path) -> TrueClocks:
    """The run's true node clocks: its ``clocks.json`` if it has one, else the simulator's
    truth."""
    run_dir = Path(run_dir)
    if (run_dir / "clocks.json").is_file():
        return load_foreign_clocks(run_dir / "clocks.json")
    from cell_otf2.sim.truth import load_truth

    truth = load_truth(run_dir)
    maps = {n: (lambda x, n=n: truth.node_to_reference(n, x)) for n in truth.node_names}
    return TrueClocks("simulated", int(truth.timebase_hz), maps)


# --------------------------------------------------------------------------------------------
# the report's maps
# --------------------------------------------------------------------------------------------


@dataclass
class ReportMap:
    """One node's map as the report gives it: pieces ``reference = offset + rate * x`` from
    ``first`` (raw node timebase) to the next piece's ``first``; the first piece also applies
    before, the last after. ``bound`` per piece (the node's where a piece has none)."""

    node: str
    first: np.ndarray
    offset: np.ndarray
    rate: np.ndarray
    bound: np.ndarray
    node_bound: float
    node_rate: float

    @classmethod
    def from_report(cls, entry: dict) -> ReportMap:
        node_bound = _finite_or_inf(entry.get("bound_ticks"))
        segs = entry.get("segments") or [{"first_timebase": 0,
                                          "offset_ticks": entry["offset_ticks"],
                                          "rate": entry["rate"]}]
        segs = sorted(segs, key=lambda s: s["first_timebase"])
        return cls(
            node=entry["node"],
            first=np.array([float(s["first_timebase"]) for s in segs]),
            offset=np.array([float(s["offset_ticks"]) for s in segs]),
            rate=np.array([float(s["rate"]) for s in segs]),
            bound=np.array([_finite_or_inf(s.get("bound_ticks", node_bound)) for s in segs]),
            node_bound=node_bound, node_rate=float(entry.get("rate", segs[0]["rate"])))

    def segment(self, x: np.ndarray) -> np.ndarray:
        """Index of the piece that applies at node timebase ``x``."""
        return np.clip(np.searchsorted(self.first, x, side="right") - 1, 0, len(self.first) - 1)

    def to_reference(self, x: np.ndarray) -> np.ndarray:
        j = self.segment(x)
        return self.offset[j] + self.rate[j] * x

    def to_node(self, t: np.ndarray) -> np.ndarray:
        """The node timebase the map sends to reference time ``t``: inverted piece by piece
        (the piece whose own range holds the result; the nearest where pieces overlap or
        leave a gap)."""
        t = np.asarray(t, dtype=np.float64)
        if len(self.first) == 1:
            return (t - self.offset[0]) / self.rate[0]
        start_ref = self.offset + self.rate * self.first  # where each piece begins
        j = np.clip(np.searchsorted(start_ref, t, side="right") - 1, 0, len(self.first) - 1)
        x = (t - self.offset[j]) / self.rate[j]
        for _ in range(2):  # a piece that overlaps its neighbour: settle on the owning piece
            own = self.segment(x)
            moved = own != j
            if not moved.any():
                break
            j = np.where(moved, own, j)
            x = (t - self.offset[j]) / self.rate[j]
        return x


def _finite_or_inf(v: object) -> float:
    if v is None:
        return math.inf
    f = float(v)  # type: ignore[arg-type]
    return f if math.isfinite(f) else math.inf


# --------------------------------------------------------------------------------------------
# the evaluation
# --------------------------------------------------------------------------------------------


def _stats_us(err: np.ndarray, hz: float) -> tuple[float, float]:
    if not err.size:
        return math.nan, math.nan
    us = err / hz * 1e6
    return float(np.sqrt(np.mean(us ** 2))), float(np.abs(us).max())


def reversed_pairs(back: ReadBack, node_of_loc: np.ndarray, node_names: list[str]) -> dict:
    """Matched pairs read back whose receive (completion) is earlier than the send (issue):
    MPI messages on the manifest's communicators, mailbox and signal messages on "Cell
    mailboxes", DMA (RMA issue against its completion, or messages on the "DMA"
    communicator); MPI messages with less than one tick between send and receive; reversed
    MPI messages per (sender node, receiver node)."""
    comm = np.array(back.comms, dtype=object)[back.msg_comm] if back.msg_comm.size \
        else np.zeros(0, dtype=object)
    is_mbox = comm == MAILBOX_COMM
    is_dma_msg = comm == DMA_COMM
    is_mpi = ~(is_mbox | is_dma_msg)
    rev = back.msg_recv < back.msg_send
    has = back.rma_complete >= 0
    rma_rev = has & (back.rma_complete < back.rma_issue)
    pairs: dict[str, int] = {}
    for i in np.flatnonzero(rev & is_mpi).tolist():
        a = node_of_loc[back.msg_sender[i]]
        b = node_of_loc[back.msg_receiver[i]]
        key = f"{node_names[a] if a >= 0 else '?'}->{node_names[b] if b >= 0 else '?'}"
        pairs[key] = pairs.get(key, 0) + 1
    out = {
        "mpi_messages": int(is_mpi.sum()),
        "mailbox_messages": int(is_mbox.sum()),
        "dma_transfers": int(back.rma_issue.size + is_dma_msg.sum()),
        "reversed_mpi": int((rev & is_mpi).sum()),
        "reversed_mailbox": int((rev & is_mbox).sum()),
        "reversed_dma": int(rma_rev.sum() + (rev & is_dma_msg).sum()),
        "mpi_under_1_tick": int(((back.msg_recv - back.msg_send < 1) & is_mpi).sum()),
        "reversed_mpi_by_nodes": dict(sorted(pairs.items())),
        "unmatched": {"sends": back.unmatched_sends, "receives": back.unmatched_recvs,
                      "dma_without_completion": int((~has).sum()),
                      "completions_without_dma": back.unmatched_completions},
    }
    out["reversed_total"] = out["reversed_mpi"] + out["reversed_mailbox"] + out["reversed_dma"]
    return out


def evaluate(run_dir: str | Path, archive: str | Path, report: str | Path | dict,
             detail: bool = False, back: ReadBack | None = None) -> dict:
    """The numbers of the module docstring for one converted run. ``report``: the report's
    path or its parsed JSON; ``back``: the archive already read (``read_archive``), e.g.
    edited by a test. ``detail`` adds per event (non-reference nodes) the location name, the
    archive time, the node timebase x and the error in ticks, under ``"events"``."""
    run_dir = Path(run_dir)
    rep = report if isinstance(report, dict) else json.loads(Path(report).read_text())
    hz = float(rep["timebase_hz"])
    ref = rep["reference"]["node"]
    clocks = true_clocks(run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    node_names = [n["name"] for n in manifest["nodes"]]
    node_of_rank = {p["rank"]: node_names.index(p["node"]) for p in manifest["processes"]}
    if back is None:
        back = read_archive(archive)
    # locations: PPE threads and SPE contexts by the rank in their name
    node_of_loc = np.full(len(back.names), -1, np.int64)
    measured = np.zeros(len(back.names), bool)
    for i, name in enumerate(back.names):
        m = _RANK.search(name)
        if m and int(m.group(1)) in node_of_rank:
            node_of_loc[i] = node_of_rank[int(m.group(1))]
            measured[i] = name.startswith(("PPE thread", "SPE ctx"))
    t_first = float(back.time.min()) if back.time.size else math.nan
    t_last = float(back.time.max()) if back.time.size else math.nan
    edge = EDGE_S * hz
    maps = {e["node"]: ReportMap.from_report(e) for e in rep["nodes"]}
    ev_node = node_of_loc[back.loc]
    ev_measured = measured[back.loc]
    rows, all_err, all_away = [], [], []
    outside_total = 0
    events_out: dict[str, list] = {"loc": [], "time": [], "x": [], "error_ticks": []}
    for ni, name in enumerate(node_names):
        if name == ref or name not in maps:
            continue
        sel = np.flatnonzero(ev_measured & (ev_node == ni))
        m = maps[name]
        t = back.time[sel].astype(np.float64)
        x = m.to_node(t)
        err = t - clocks.to_reference[name](x)
        away = (t >= t_first + edge) & (t <= t_last - edge)
        bound = m.bound[m.segment(x)]
        outside = int((np.abs(err) > bound + 1.0).sum())
        rms, mx = _stats_us(err, hz)
        rms_a, mx_a = _stats_us(err[away], hz)
        rows.append({
            "node": name, "events": int(sel.size), "rms_us": rms, "max_us": mx,
            "rms_away_us": rms_a, "max_away_us": mx_a, "mean_us": float(err.mean() / hz * 1e6)
            if err.size else math.nan,
            "bound_ticks": m.node_bound, "bound_us": m.node_bound / hz * 1e6,
            "outside_bound": outside,
            "worst_excess_ticks": float((np.abs(err) - bound).max()) if err.size else math.nan,
            "rate": m.node_rate, "rate_ppm": (m.node_rate - 1.0) * 1e6,
            "segments": int(m.first.size),
        })
        outside_total += outside
        all_err.append(err)
        all_away.append(err[away])
        if detail:
            events_out["loc"].append(np.array(back.names, dtype=object)[back.loc[sel]])
            events_out["time"].append(back.time[sel])
            events_out["x"].append(x)
            events_out["error_ticks"].append(err)
    err = np.concatenate(all_err) if all_err else np.zeros(0)
    err_away = np.concatenate(all_away) if all_away else np.zeros(0)
    rms, mx = _stats_us(err, hz)
    rms_a, mx_a = _stats_us(err_away, hz)
    pairs = reversed_pairs(back, node_of_loc, node_names)
    out = {
        "run": str(run_dir), "archive": str(archive), "truth": clocks.source,
        "timebase_hz": hz, "reference": ref,
        "seconds": (t_last - t_first) / hz if back.time.size else 0.0,
        "events": int(err.size), "rms_us": rms, "max_us": mx,
        "rms_away_us": rms_a, "max_away_us": mx_a, "away_events": int(err_away.size),
        "outside_bound": outside_total, "nodes": rows,
        **pairs,
        "order_violations": int(rep.get("order_violations", -1)),
        "bounds_finite": all(math.isfinite(r["bound_ticks"]) for r in rows),
    }
    out["counts_agree"] = out["order_violations"] == out["reversed_total"]
    if detail:
        out["events_detail"] = {k: np.concatenate(v) if v else np.zeros(0)
                                for k, v in events_out.items()}
    return out


def lines(res: dict) -> list[str]:
    """One line per node, then the totals."""
    out = []
    for r in res["nodes"]:
        out.append(
            f"{r['node']}: {r['events']} events, RMS {r['rms_us']:.3f} us, max "
            f"{r['max_us']:.3f} us (away from the edges {r['max_away_us']:.3f} us), bound "
            f"{r['bound_us']:.3f} us, {r['outside_bound']} outside, rate "
            f"{r['rate_ppm']:+.3f} ppm, {r['segments']} segment(s)")
    out.append(
        f"total ({res['truth']} truth, {res['seconds']:.1f} s): {res['events']} events, RMS "
        f"{res['rms_us']:.3f} us, max {res['max_us']:.3f} us, away from the edges RMS "
        f"{res['rms_away_us']:.3f} / max {res['max_away_us']:.3f} us; {res['outside_bound']} "
        f"outside the bound; reversed read back: {res['reversed_mpi']} MPI, "
        f"{res['reversed_mailbox']} mailbox, {res['reversed_dma']} DMA "
        f"({res['reversed_total']} in all, report says {res['order_violations']}); "
        f"{res['mpi_under_1_tick']} MPI messages under 1 tick")
    if res["reversed_mpi_by_nodes"]:
        out.append("reversed MPI messages by nodes: " + ", ".join(
            f"{k} {v}" for k, v in res["reversed_mpi_by_nodes"].items()))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="run directory (clocks.json or truth.npz beside it)")
    ap.add_argument("archive", type=Path, help="the archive's .otf2 anchor")
    ap.add_argument("report", type=Path, help="the converter's --report JSON")
    args = ap.parse_args(argv)
    print("\n".join(lines(evaluate(args.run, args.archive, args.report))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
