"""The per-context table: one row per SPE context with its numbers over every event (running-time
shares, bytes, bandwidth, sync bound, mailbox and signal waits), written as ``contexts.csv``
with plain numbers and shown on the page with units (``table``), plus the mailbox and signal
wait table (``wait_table``); what each number means: docs/design.md."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from . import style, units
from .derive import Cat
from .exact import category_ticks, exact_of, transfers
from .load import PROP_SYNC_BOUND, Loaded, LocClass

PEAK = 25.6e9
SIGNAL_NAMES = {"spu_read_signal"}
MAILBOX_NAMES = {"spu_read_in_mbox", "spu_write_out_mbox", "spu_write_out_intr_mbox"}

COLUMNS = ("context", "rank", "node", "program", "events", "running_s", "busy_share",
           "dma_wait_share", "mailbox_wait_share", "off_spu_share", "bytes_in", "bytes_out",
           "bytes_moved", "bandwidth_bytes_per_s", "share_of_peak", "sync_bound_ticks",
           "mailbox_waits", "mailbox_wait_mean_s", "mailbox_wait_max_s", "signal_waits",
           "signal_wait_mean_s", "signal_wait_max_s")


def _waits(loaded: Loaded, locs: np.ndarray, names: set[str]) -> tuple[np.ndarray, ...]:
    """Per location: completed visits, mean and longest visit (s) of the regions ``names``."""
    ex, hz = exact_of(loaded), loaded.timer_resolution
    base = [n.removesuffix(" (cell2otf2)") for n in loaded.region_names]
    sel = np.array([b in names for b in base], bool)
    visits = ex.visits[locs][:, : sel.size][:, sel].sum(axis=1)
    total = ex.inclusive[locs][:, : sel.size][:, sel].sum(axis=1)
    longest = ex.longest[locs][:, : sel.size][:, sel].max(axis=1, initial=0)
    mean = np.divide(total, visits, out=np.zeros(locs.size), where=visits > 0)
    return visits, mean / hz, longest / hz


def rows(loaded: Loaded) -> list[dict]:
    """One dict per SPE context (``COLUMNS``), in ``style.row_order``."""
    order = style.row_order(loaded)
    spes = order[loaded.loc_class[order] == LocClass.SPE]
    if spes.size == 0:
        return []
    hz = loaded.timer_resolution
    cat = category_ticks(loaded)[spes]
    running = cat[:, [Cat.COMPUTE, Cat.TAG_WAIT, Cat.MBOX_WAIT, Cat.OFF_SPU]].sum(axis=1)
    share = np.divide(cat, running[:, None], out=np.zeros_like(cat),
                      where=running[:, None] > 0)
    x = transfers(loaded)
    nbytes = x["bytes"].astype(float)
    into, out = (np.bincount(x[end][x[end] >= 0], weights=nbytes[x[end] >= 0],
                             minlength=loaded.n_locs) for end in ("dst", "src"))
    outer = exact_of(loaded).outermost[spes][:, : len(loaded.region_names)]
    program = np.argmax(outer, axis=1)  # the region entered with nothing open: its program
    has_program = outer.max(axis=1, initial=0) > 0
    mb = _waits(loaded, spes, MAILBOX_NAMES)
    sg = _waits(loaded, spes, SIGNAL_NAMES)
    out_rows = []
    for i, loc in enumerate(spes.tolist()):
        seconds = running[i] / hz
        moved = into[loc] + out[loc]
        bw = moved / seconds if seconds > 0 else 0.0
        bound = loaded.props.get(loc, {}).get(PROP_SYNC_BOUND)
        try:
            bound_ticks = float(bound) if bound is not None else math.nan
        except ValueError:
            bound_ticks = math.inf  # "unbounded"
        out_rows.append({
            "context": loaded.loc_names[loc],
            "rank": style.process_of(loaded.loc_group[loc]),
            "node": loaded.loc_node[loc] if loaded.loc_node else "",
            "program": loaded.region_names[program[i]] if has_program[i] else "",
            "events": int(loaded.loc_events[loc]),
            "running_s": seconds,
            "busy_share": share[i, Cat.COMPUTE], "dma_wait_share": share[i, Cat.TAG_WAIT],
            "mailbox_wait_share": share[i, Cat.MBOX_WAIT],
            "off_spu_share": share[i, Cat.OFF_SPU],
            "bytes_in": int(into[loc]), "bytes_out": int(out[loc]), "bytes_moved": int(moved),
            "bandwidth_bytes_per_s": bw, "share_of_peak": bw / PEAK,
            "sync_bound_ticks": bound_ticks,
            "mailbox_waits": int(mb[0][i]), "mailbox_wait_mean_s": mb[1][i],
            "mailbox_wait_max_s": mb[2][i],
            "signal_waits": int(sg[0][i]), "signal_wait_mean_s": sg[1][i],
            "signal_wait_max_s": sg[2][i],
        })
    return out_rows


def write_csv(path: Path, table: list[dict]) -> None:
    """Every context, plain numbers (shares of 1, seconds, bytes, ticks; empty when none,
    ``inf`` for an unbounded sync bound)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for row in table:
            w.writerow([_plain(row[c]) for c in COLUMNS])


def _plain(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return "inf" if math.isinf(v) else f"{v:.6g}"
    return str(v)


def _group(table: list[dict]) -> list[dict]:
    """Per rank: sums of counts, bytes and running time, shares and bandwidth over the rank's
    running time, means of waits weighted by count, the longest wait and the worst bound."""
    out: dict[str, dict] = {}
    for r in table:
        g = out.setdefault(r["rank"], {"context": f"rank {r['rank']}", "contexts": 0,
                                       **{k: 0.0 for k in COLUMNS[4:]}, "rank": r["rank"],
                                       "node": r["node"], "program": set()})
        g["contexts"] += 1
        g["program"].add(r["program"])
        for k in ("events", "running_s", "bytes_in", "bytes_out", "bytes_moved",
                  "mailbox_waits", "signal_waits"):
            g[k] += r[k]
        for k in ("busy_share", "dma_wait_share", "mailbox_wait_share", "off_spu_share"):
            g[k] += r[k] * r["running_s"]
        for k in ("mailbox", "signal"):
            g[f"{k}_wait_mean_s"] += r[f"{k}_wait_mean_s"] * r[f"{k}_waits"]
            g[f"{k}_wait_max_s"] = max(g[f"{k}_wait_max_s"], r[f"{k}_wait_max_s"])
        g["sync_bound_ticks"] = max(g["sync_bound_ticks"], np.nan_to_num(r["sync_bound_ticks"]))
    for g in out.values():
        run = g["running_s"]
        for k in ("busy_share", "dma_wait_share", "mailbox_wait_share", "off_spu_share"):
            g[k] = g[k] / run if run else 0.0
        for k in ("mailbox", "signal"):
            n = g[f"{k}_waits"]
            g[f"{k}_wait_mean_s"] = g[f"{k}_wait_mean_s"] / n if n else 0.0
        g["bandwidth_bytes_per_s"] = g["bytes_moved"] / run if run else 0.0
        g["share_of_peak"] = g["bandwidth_bytes_per_s"] / PEAK  # per context while running
        g["program"] = ", ".join(sorted(p for p in g["program"] if p))
        g["context"] = f"rank {g['rank']} ({g['contexts']} contexts)"
    return list(out.values())


def _shown(table: list[dict]) -> tuple[list[dict], str]:
    if len(table) <= style.MAX_LABELLED:
        return table, ""
    return _group(table), (f"{len(table)} SPE contexts, shown per rank: running time summed "
                           "over the rank's contexts, bandwidth the rank's bytes over that "
                           "time (a context's mean while it runs); contexts.csv has every "
                           "context.")


def table(table_rows: list[dict], hz: int) -> tuple[list[str], list[list[str]], str]:
    """Header, formatted rows and a note for the page."""
    shown, note = _shown(table_rows)
    head = ["context", "rank", "program", "events", "running", "busy", "DMA wait",
            "mailbox wait", "off SPU", "bytes moved", "bandwidth", "of peak", "sync bound"]
    body = [[r["context"], str(r["rank"]), r["program"], units.count(r["events"]),
             units.seconds(r["running_s"]), units.percent(r["busy_share"]),
             units.percent(r["dma_wait_share"]), units.percent(r["mailbox_wait_share"]),
             units.percent(r["off_spu_share"]), units.nbytes(r["bytes_moved"]),
             units.rate(r["bandwidth_bytes_per_s"]), units.percent(r["share_of_peak"]),
             units.ticks(r["sync_bound_ticks"], hz)
             if not math.isnan(r["sync_bound_ticks"]) else "none"]
            for r in shown]
    return head, body, note


def wait_table(table_rows: list[dict]) -> tuple[list[str], list[list[str]], str]:
    """Mailbox and signal waits per context (or per rank): count, mean, longest."""
    shown, note = _shown(table_rows)
    head = ["context", "mailbox waits", "mean", "longest", "signal waits", "mean", "longest"]
    body = []
    for r in shown:
        line = [r["context"]]
        for k in ("mailbox", "signal"):
            n = int(r[f"{k}_waits"])
            line += [units.count(n), units.seconds(r[f"{k}_wait_mean_s"]) if n else "-",
                     units.seconds(r[f"{k}_wait_max_s"]) if n else "-"]
        body.append(line)
    return head, body, note
