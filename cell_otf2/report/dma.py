"""dma_bandwidth.png: DMA bandwidth per SPE context over time, all SPEs together, and each
context's mean and busiest column, against the 25.6 GB/s peak of one SPE's MFC and the chips'
memory peak, from every DMA command (``exact.transfers``, never sampled; how bytes are spread:
docs/design.md). Beyond ``style.MAX_LABELLED`` rows the rows are labelled per rank."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ..native import helper
from . import style, units
from .bars import hbars
from .derive import SHOWN_CATS, spe_locations
from .exact import Xfer, category_ticks, transfers
from .load import Loaded, LocClass

COLUMNS = 300
PEAK = 25.6e9  # bytes per second: one MFC (8 bytes per cycle at 3.2 GHz), and the XDR memory


def spread(t0: np.ndarray, t1: np.ndarray, nbytes: np.ndarray, edges: np.ndarray,
           compiled: bool | None = None) -> np.ndarray:
    """Bytes per column between ``edges`` when each command moves its bytes evenly over
    [t0, t1] (at least one tick wide); bytes outside the edges are left out."""
    t0 = np.asarray(t0, np.float64)
    return spread_rows(np.zeros(t0.size, np.int64), 1, t0, t1, nbytes, edges, compiled)[0]


def spread_rows(row: np.ndarray, n_rows: int, t0: np.ndarray, t1: np.ndarray,
                nbytes: np.ndarray, edges: np.ndarray, compiled: bool | None = None
                ) -> np.ndarray:
    """``spread`` for commands each on its ``row`` (-1: left out): (n_rows, columns) bytes.
    Each command adds its rate times its overlap to the columns it covers (first and last
    column partly, those between wholly, through a running sum along the row): no sort,
    O(commands). In one pass in C (``_evtread.spread``) where ``native.helper`` gives it,
    unless ``compiled`` is False."""
    edges = np.asarray(edges, np.float64)
    m = edges.size - 1
    out = np.zeros(n_rows * m)
    c_helper = helper("evtread") if compiled is not False else None
    if c_helper is not None and m >= 1:
        f8 = [np.ascontiguousarray(v, np.float64) for v in (t0, t1, nbytes)]
        c_helper.spread(np.ascontiguousarray(row, np.int64), *f8,
                        np.ascontiguousarray(edges), out, np.zeros(n_rows * (m + 1)))
        return out.reshape(n_rows, m)
    t0 = np.asarray(t0, np.float64)
    t1 = np.maximum(np.asarray(t1, np.float64), t0 + 1.0)
    r = np.asarray(nbytes, np.float64) / (t1 - t0)
    row = np.asarray(row, np.int64)
    keep = (t1 > edges[0]) & (t0 < edges[-1]) & (row >= 0)
    if m < 1 or not keep.any():
        return out.reshape(n_rows, max(m, 0))
    if not keep.all():
        t0, t1, r, row = t0[keep], t1[keep], r[keep], row[keep]
    a = np.clip(np.searchsorted(edges, t0, side="right") - 1, 0, m - 1)  # first column
    b = np.clip(np.searchsorted(edges, t1, side="left") - 1, 0, m - 1)  # last column
    lo = np.maximum(t0, edges[a])
    # the first column: all of a command within one column, else up to the column's end
    out += np.bincount(row * m + a, weights=r * (np.minimum(t1, edges[a + 1]) - lo),
                       minlength=n_rows * m)
    many = np.flatnonzero(b > a)  # the few commands over several columns
    if many.size:
        a, b, r, row = a[many], b[many], r[many], row[many]
        hi = np.minimum(t1[many], edges[b + 1])
        out += np.bincount(row * m + b, weights=r * (hi - edges[b]), minlength=n_rows * m)
        step = np.bincount(row * (m + 1) + a + 1, weights=r, minlength=n_rows * (m + 1))
        step -= np.bincount(row * (m + 1) + b, weights=r, minlength=n_rows * (m + 1))
        between = np.cumsum(step.reshape(n_rows, m + 1), axis=1)[:, :m] * np.diff(edges)
        out += np.maximum(between, 0).ravel()  # (a rounding residue below zero is none)
    return out.reshape(n_rows, m)


class PerSpe(TypedDict):
    """What ``per_spe`` gives: one row per SPE location of ``spes``, the columns' ``edges``,
    and the commands (``xfer``) with their start, end (float ticks since the global offset)
    and bytes."""

    spes: np.ndarray
    into: np.ndarray
    out: np.ndarray
    running: np.ndarray
    grid: np.ndarray
    edges: np.ndarray
    xfer: Xfer
    t0: np.ndarray
    t1: np.ndarray
    bytes: np.ndarray


def per_spe(loaded: Loaded) -> PerSpe:
    """Exact per SPE location (in ``style.row_order``): bytes into and out of its local
    store, its running time in seconds, and its per-column bytes over the run (``edges`` in
    ticks since the global offset)."""
    is_spe = set(spe_locations(loaded).tolist())
    spes = np.array([r for r in style.row_order(loaded).tolist() if r in is_spe], np.int64)
    row_of = np.full(loaded.n_locs + 1, -1, np.int64)  # the last entry: location -1
    row_of[spes] = np.arange(spes.size)
    x = transfers(loaded)
    edges = np.linspace(0, max(loaded.trace_length, 1), COLUMNS + 1)
    t0 = (x["t_issue"] - loaded.global_offset).astype(np.float64)
    t1 = np.where(x["t_done"] >= 0, x["t_done"] - loaded.global_offset, t0)
    nbytes = x["bytes"].astype(np.float64)
    grid = np.zeros((spes.size, COLUMNS))
    into, out = np.zeros(spes.size), np.zeros(spes.size)
    for end, total in (("dst", into), ("src", out)):
        r = row_of[x[end]]  # -1: not an SPE row, left out
        total += np.bincount(r + 1, weights=nbytes, minlength=spes.size + 1)[1:]
        grid += spread_rows(r, spes.size, t0, t1, nbytes, edges)
    running = (category_ticks(loaded)[spes][:, list(SHOWN_CATS)].sum(axis=1)
               / loaded.timer_resolution) if spes.size else np.zeros(0)
    return {"spes": spes, "into": into, "out": out, "running": running, "grid": grid,
            "edges": edges, "xfer": x, "t0": t0, "t1": t1, "bytes": nbytes}


def draw(loaded: Loaded, seg: np.ndarray, path: Path) -> tuple[int, int]:
    """Write the figure; returns (rows drawn = SPE locations, events drawn = DMA commands
    with an SPE at one end at least)."""
    d = per_spe(loaded)
    spes, x, edges = d["spes"], d["xfer"], d["edges"]
    hz = loaded.timer_resolution
    col_s = (edges[1] - edges[0]) / hz  # edges: ticks since the global offset
    rate = d["grid"] / col_s
    span = loaded.trace_length / hz
    unit, scale = style.time_unit(span)
    n = max(spes.size, 1)
    fig = Figure(figsize=style.FIGSIZE, dpi=style.DPI)
    ax = fig.add_axes((0.13, 0.36, 0.55, 0.54))
    agg = fig.add_axes((0.13, 0.07, 0.55, 0.2))
    bars = fig.add_axes((0.76, 0.36, 0.21, 0.54), sharey=ax)
    top = float(rate.max(initial=0)) or PEAK
    im = ax.imshow(rate / 1e9, aspect="auto", interpolation="nearest",
                   cmap=colormaps["viridis"], vmin=0, vmax=top / 1e9,
                   extent=(0, span * scale, n - 0.5, -0.5))
    cb = fig.colorbar(im, cax=fig.add_axes((0.69, 0.36, 0.012, 0.54)))
    cb.set_label(f"GB/s in + out (top: the busiest column, {units.percent(top / PEAK)} of "
                 "the 25.6 GB/s peak)", fontsize=8)
    style.row_marks(bars, style.label_rows(ax, loaded, spes))  # bars shares the y axis
    ax.tick_params(axis="x", labelbottom=False)
    is_row = np.zeros(loaded.n_locs + 1, bool)  # the last entry: location -1
    is_row[spes] = True
    with_spe = is_row[x["src"]] | is_row[x["dst"]]
    total = float(x["bytes"][with_spe].sum())
    ax.set_title(f"DMA bandwidth per SPE context ({units.count(int(with_spe.sum()))} commands,"
                 f" {units.nbytes(total)}; exact, every command of the archive)", fontsize=10)
    # aggregate over all SPEs, each command spread over issue..completion
    fine = loaded.global_offset + np.linspace(0, max(loaded.trace_length, 1), 4 * COLUMNS + 1)
    agg_rate = (spread_rows(np.where(with_spe, 0, -1), 1, d["t0"], d["t1"], d["bytes"],
                            fine - loaded.global_offset)[0] / ((fine[1] - fine[0]) / hz))
    tx = (fine[:-1] - loaded.global_offset) / hz * scale
    agg.fill_between(tx, agg_rate / 1e9, step="post", color="#1f77b4", alpha=0.6, lw=0)
    chips, nodes = chips_used(loaded)
    agg.axhline(chips * PEAK / 1e9, color="#d62728", lw=1, ls="--", label=peak_label(chips, nodes))
    mean = total / span if span > 0 else 0.0
    agg.axhline(mean / 1e9, color="#2ca02c", lw=1, label=f"run mean {units.rate(mean)}")
    agg.set_xlim(0, span * scale)
    agg.set_ylim(0, max(chips * PEAK, float(agg_rate.max(initial=0))) * 1.15 / 1e9)
    agg.set_ylabel("all SPEs [GB/s]", fontsize=8)
    agg.set_xlabel(f"time since the trace start [{unit}]")
    agg.set_title(f"aggregate DMA bandwidth of all SPE contexts (peak reached "
                  f"{units.rate(float(agg_rate.max(initial=0)))})", fontsize=9)
    agg.legend(fontsize=8, loc="upper right", frameon=False, ncol=2)
    # per SPE: mean over the running time and the busiest column, log scale up to the peak
    moved = d["into"] + d["out"]
    mean_spe = np.divide(moved, d["running"], out=np.zeros(spes.size), where=d["running"] > 0)
    busiest = rate.max(axis=1, initial=0) if spes.size else np.zeros(0)
    y = np.arange(spes.size)
    h = 0.8 if spes.size > style.MAX_LABELLED else 0.4
    handles = [hbars(bars, y - (0 if h == 0.8 else 0.2), np.maximum(busiest, 1) / 1e9,
                     height=h, color="#c7c7c7", label="busiest column"),
               hbars(bars, y + (0 if h == 0.8 else 0.2), np.maximum(mean_spe, 1) / 1e9,
                     height=h, color="#1f77b4", label="mean over its running time"),
               bars.axvline(PEAK / 1e9, color="#d62728", lw=1, ls="--",
                            label="peak 25.6 GB/s")]
    bars.set_xscale("log")
    lo = max(1e-4, float(np.min(mean_spe[mean_spe > 0], initial=PEAK)) / 1e9 / 3)
    bars.set_xlim(lo, PEAK / 1e9 * 1.5)
    bars.set_xlabel("GB/s (log)")
    bars.tick_params(axis="y", labelleft=False)
    bars.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=1,
                fontsize=8, frameon=False)
    share = float(mean_spe.mean()) / PEAK if spes.size else 0.0
    bars.set_title(f"per SPE: mean {units.percent(share)} of the peak", fontsize=9, pad=48)
    style.save(fig, path)
    return int(spes.size), int(with_spe.sum())


#: SPEs of one Cell chip
SPES_PER_CHIP = 8


def chips_used(loaded: Loaded) -> tuple[int, int]:
    """(Cell chips, nodes) the run's SPE contexts used: per node with SPE contexts, the chips
    the archive places contexts on (a context switch names the SPU), else as many chips as
    its contexts need at 8 SPEs each; at least one of each."""
    from collections import Counter

    spe = np.flatnonzero(loaded.loc_class == LocClass.SPE).tolist()
    per_node = Counter(loaded.loc_node[i] if i < len(loaded.loc_node) else "" for i in spe)
    known = Counter(loaded.chip_nodes)
    chips = sum(known[n] or -(-count // SPES_PER_CHIP) for n, count in per_node.items())
    return max(chips, 1), max(len(per_node), 1)


def peak_label(chips: int, nodes: int) -> str:
    """``memory peak, 4 chips on 4 nodes: 4 x 25.6 GB/s``."""
    where = (f"{chips} chip{'s' if chips > 1 else ''} on {nodes} node{'s' if nodes > 1 else ''}"
             if nodes > 1 else f"{chips} chip{'s' if chips > 1 else ''}")
    return f"memory peak, {where}: {chips} x 25.6 GB/s"
