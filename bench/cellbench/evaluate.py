"""Accuracy of a clock-synchronization method against the simulator's ground truth.

Input: a decoded trace (``summary.Pipeline``), the run's ``sim.truth.Truth`` and one method's
offsets per clock domain (``baselines.Estimate``, node-timebase ticks: true node time =
offset + local). Metrics, each a small function on arrays so tests can check it by hand:

- ``true_offsets``: per domain, the true offset, from the true times of its readings (SPE
  records and block headers): floor(true node timebase) - local, the median over readings
  (the truth's ``offset_ticks`` convention; it also covers wrap segments the truth does not
  list). NaN for a domain without readings; 0 for node domains.
- ``error_stats``: RMS, 99th percentile and max of |error| over the finite entries.
- ``coverage``: share of domains whose true offset lies inside [lower, upper] (1e-6 tick
  tolerance for float rounding), over domains with both bounds finite.
- ``width_stats``: mean and max of upper - lower over domains with both bounds finite.
- ``record_times``: the times the archive would get with these offsets: ``synchronize.apply_times``
  on a copy (same rounding, node maps, never-decreasing clamp per location); ``held`` counts
  records the clamp had to hold back (an order violation within a location).
- ``record_errors``: time of each SPE record with a clock vs ``truth.slot_time`` (reference
  ticks).
- ``order_violations``: pairs whose written times are reversed: matched messages (send after
  receive), DMA issue after its completing tag wait, CTX_RUN_BEGIN after START, EXIT after
  CTX_RUN_END; plus ``held``.
- ``table1``: the paper's Table 1 columns (``solver.error_table``'s) from
  ``solver.pair_width_stats``
  over the node domain and the non-empty SPE intervals of one node (an evenly spaced subset
  when there are more than ``max_domains``).

Only SPE-interval domains with readings count in the per-interval metrics. It does not
simulate, convert or print anything.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from cell_otf2.damage import DamageLog
from cell_otf2.input import format as fmt
from cell_otf2.model import (
    Constraints,
    Decoded,
    DomainKind,
    LocKind,
    Matches,
    NodeMap,
    Pipeline,
    SyncResult,
)
from cell_otf2.sim.truth import Truth
from cell_otf2.sync.solver import pair_width_stats
from cell_otf2.sync.synchronize import apply_times

from .baselines import Estimate

COVER_TOL = 1e-6  # ticks: float rounding of bounds, not a loosening


def error_stats(err: np.ndarray) -> dict[str, float]:
    """RMS, p99 and max of |err| over finite entries; ``n`` is how many; NaN when none."""
    e = np.abs(np.asarray(err, dtype=np.float64))
    e = e[np.isfinite(e)]
    if not e.size:
        return {"rms": math.nan, "p99": math.nan, "max": math.nan, "n": 0}
    return {"rms": float(np.sqrt(np.mean(e * e))), "p99": float(np.percentile(e, 99)),
            "max": float(e.max()), "n": int(e.size)}


def coverage(true: np.ndarray, lower: np.ndarray, upper: np.ndarray,
             mask: np.ndarray | None = None, tol: float = COVER_TOL) -> float:
    """Share of domains (in ``mask``, with finite bounds and truth) whose truth is inside."""
    true, lower, upper = (np.asarray(a, dtype=np.float64) for a in (true, lower, upper))
    sel = np.isfinite(true) & np.isfinite(lower) & np.isfinite(upper)
    if mask is not None:
        sel &= np.asarray(mask, dtype=bool)
    if not sel.any():
        return math.nan
    inside = (true[sel] >= lower[sel] - tol) & (true[sel] <= upper[sel] + tol)
    return float(inside.mean())


def width_stats(lower: np.ndarray, upper: np.ndarray,
                mask: np.ndarray | None = None) -> dict[str, float]:
    """Mean and max of upper - lower over domains (in ``mask``) with both bounds finite;
    ``bounded`` counts them, ``unbounded`` counts the others in ``mask``."""
    w = np.asarray(upper, dtype=np.float64) - np.asarray(lower, dtype=np.float64)
    sel = np.ones(w.size, bool) if mask is None else np.asarray(mask, dtype=bool)
    fin = sel & np.isfinite(w)
    if not fin.any():
        return {"mean": math.nan, "max": math.nan, "bounded": 0, "unbounded": int(sel.sum())}
    return {"mean": float(w[fin].mean()), "max": float(w[fin].max()), "bounded": int(fin.sum()),
            "unbounded": int((sel & ~fin).sum())}


def true_offsets(dec: Decoded, truth: Truth) -> np.ndarray:
    """Per domain: its true offset in node-timebase ticks (see the module docstring)."""
    doms = dec.domains
    n = doms.size
    parts_dom, parts_off = [], []
    names = dec.manifest.nodes
    rec_rank = dec.locations["rank"][dec.records["loc"]]
    for rank_of, table in ((rec_rank, dec.records), (dec.anchors["rank"], dec.anchors)):
        dom = table["domain"]
        sel = dom >= dec.n_nodes
        for r in np.unique(rank_of[sel]).tolist():
            if r not in truth.slot_time:
                continue
            s = sel & (rank_of == r)
            slots = table["slot"][s]
            times = truth.slot_time[r]
            ok = slots < times.size
            t_ref = np.full(slots.size, np.nan)
            t_ref[ok] = times[slots[ok]]
            node = int(doms["node"][dom[s][0]])
            tb = truth.reference_to_node(names[node].name, t_ref)
            parts_dom.append(dom[s])
            parts_off.append(np.floor(tb) - table["local"][s])
    out = np.full(n, np.nan)
    out[doms["kind"] == DomainKind.NODE] = 0.0
    if parts_dom:
        dom = np.concatenate(parts_dom)
        off = np.concatenate(parts_off)
        ok = np.isfinite(off)
        dom, off = dom[ok], off[ok]
        order = np.lexsort((off, dom))
        dom, off = dom[order], off[order]
        starts = np.flatnonzero(np.r_[True, dom[1:] != dom[:-1]])
        ends = np.r_[starts[1:], dom.size]
        out[dom[starts]] = off[(starts + ends - 1) // 2]  # the (lower) median per domain
    return out


def interval_mask(dec: Decoded) -> np.ndarray:
    """SPE-interval domains with at least one reading."""
    d = dec.domains
    return (d["kind"] == DomainKind.SPE_INTERVAL) & (d["readings"] > 0)


def record_times(dec: Decoded, offset: np.ndarray, node_maps: list[NodeMap]
                 ) -> tuple[np.ndarray, np.ndarray, int]:
    """(time per record, usable per record, held): what the archive gets with ``offset``."""
    copy = dataclasses.replace(dec, records=dec.records.copy())
    n = offset.size
    nan = np.full(n, np.nan)
    res = SyncResult(np.asarray(offset, dtype=np.float64), nan, nan,
                     np.full(n, "none", dtype="<U5"), 0.0, node_maps)
    apply_times(copy, res, DamageLog())
    return copy.records["time"], res.usable, int(res.order_violations)


def true_record_times(dec: Decoded, truth: Truth) -> np.ndarray:
    """Per record: its true time (reference ticks) from ``truth.slot_time``, NaN if unknown."""
    rec = dec.records
    rank = dec.locations["rank"][rec["loc"]]
    out = np.full(rec.size, np.nan)
    for r, times in truth.slot_time.items():
        sel = (rank == r) & (rec["slot"] < times.size)
        out[sel] = times[rec["slot"][sel]]
    return out


def record_errors(dec: Decoded, times: np.ndarray, usable: np.ndarray,
                  true_times: np.ndarray) -> dict[str, float]:
    """Error stats of SPE records that have a clock and are written."""
    dom = dec.records["domain"]
    sel = (dom >= dec.n_nodes) & usable
    return error_stats(times[sel].astype(np.float64) - true_times[sel])


def _reversed(times: np.ndarray, usable: np.ndarray, before: np.ndarray,
              after: np.ndarray) -> int:
    ok = usable[before] & usable[after]
    return int((times[before][ok] > times[after][ok]).sum())


def order_violations(records: np.ndarray, loc_kind: np.ndarray, matches: Matches,
                     times: np.ndarray, usable: np.ndarray, held: int = 0) -> dict[str, int]:
    """Reversed pairs in the written times (see the module docstring); ``total`` sums all.

    ``loc_kind`` is the LocKind of each record's location.
    """
    code = records["code"]
    out = {"messages": _reversed(times, usable, matches.messages["send"],
                                 matches.messages["recv"])}
    dma = matches.dma[matches.dma["complete"] >= 0]
    out["dma"] = _reversed(times, usable, dma["issue"], dma["complete"])
    b, a = matches.pairs["before"], matches.pairs["after"]
    ppe_b, spe_b = loc_kind[b] == LocKind.PPE_THREAD, loc_kind[b] == LocKind.SPE_CONTEXT
    ppe_a, spe_a = loc_kind[a] == LocKind.PPE_THREAD, loc_kind[a] == LocKind.SPE_CONTEXT
    run = ppe_b & spe_a & (code[b] == fmt.PpeCode.CTX_RUN_BEGIN) & (code[a] == fmt.SpeCode.START)
    out["run_begin"] = _reversed(times, usable, b[run], a[run])
    end = spe_b & ppe_a & (code[b] == fmt.SpeCode.EXIT) & (code[a] == fmt.PpeCode.CTX_RUN_END)
    out["run_end"] = _reversed(times, usable, b[end], a[end])
    out["held"] = int(held)
    out["total"] = sum(out.values())
    return out


def table1_subset(dec: Decoded, node: int, max_domains: int = 400) -> np.ndarray:
    """The node domain then up to ``max_domains - 1`` non-empty intervals of ``node``."""
    iv = np.flatnonzero(interval_mask(dec) & (dec.domains["node"] == node))
    k = max_domains - 1
    if iv.size > k:
        iv = iv[np.linspace(0, iv.size - 1, k).round().astype(np.int64)]
    return np.r_[node, iv].astype(np.int64)


def table1(dec: Decoded, cons: Constraints, relaxation: float, node: int,
           subset: np.ndarray) -> dict[str, float]:
    """Table 1 columns of ``cons`` (loosened by ``relaxation``) over ``subset`` of ``node``
    (its node domain first), with the report's code (``solver.pair_width_stats``); the error
    of a pair here is half the width (``solver.error_table``'s keys and meaning)."""
    members = np.flatnonzero(dec.domains["node"] == node)
    index = np.full(dec.domains.size, -1, dtype=np.int64)
    index[members] = np.arange(members.size)
    s, d = index[cons.src], index[cons.dst]
    keep = (s >= 0) & (d >= 0)
    is_spe = dec.domains["kind"][subset] == DomainKind.SPE_INTERVAL
    st = pair_width_stats(members.size, s[keep], d[keep], cons.weight[keep], relaxation,
                          index[subset], is_spe, int(index[subset[0]]))
    return {"max_error_all": st["max_all"] / 2, "max_error_spe": st["max_spe"] / 2,
            "mean_error_spe_ppe": st["mean_spe_ppe"] / 2,
            "mean_error_spe_spe": st["mean_spe_spe"] / 2}


def evaluate(pipe: Pipeline, truth: Truth, est: Estimate,
             true_off: np.ndarray | None = None,
             true_times: np.ndarray | None = None) -> dict:
    """Every metric of one method on one run (pass ``true_off``/``true_times`` to reuse)."""
    dec = pipe.decoded
    if true_off is None:
        true_off = true_offsets(dec, truth)
    if true_times is None:
        true_times = true_record_times(dec, truth)
    mask = interval_mask(dec)
    out: dict = {"method": est.name, "relaxation": est.relaxation, "seconds": est.seconds,
                 "skipped": est.skipped}
    err = (est.offset - true_off)[mask]
    out["offset_error"] = error_stats(err)
    out["placed"] = int(np.isfinite(est.offset[mask]).sum())
    out["intervals"] = int(mask.sum())
    if est.lower is not None and est.upper is not None:
        out["coverage"] = coverage(true_off, est.lower, est.upper, mask)
        out["width"] = width_stats(est.lower, est.upper, mask)
    times, usable, held = record_times(dec, est.offset, pipe.sync.node_maps)
    out["record_error"] = record_errors(dec, times, usable, true_times)
    loc_kind = dec.locations["kind"][dec.records["loc"]]
    out["order"] = order_violations(dec.records, loc_kind, pipe.matches, times, usable, held)
    return out
