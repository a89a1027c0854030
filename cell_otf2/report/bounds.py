"""sync_bounds.png: the synchronization bound of every live interval, from the archive's own
location properties (``cell2otf2::sync_intervals``, ``cell2otf2::sync_bound_ticks``): a row per
SPE context with its intervals as bars colored by width, and the worst and mean width per
context (docs/design.md). Drawn from definitions only, so never sampled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from . import style, units
from .bars import hbars
from .derive import sync_intervals
from .load import PROP_SYNC_BOUND, Loaded, LocClass


def draw(loaded: Loaded, path: Path) -> tuple[int, int]:
    """Write the figure; returns (rows drawn = SPE locations with a bound property, events
    drawn = intervals placed on the time axis)."""
    per = sync_intervals(loaded)
    rows = [r for r in style.row_order(loaded).tolist()
            if loaded.loc_class[r] == LocClass.SPE
            and (r in per or PROP_SYNC_BOUND in loaded.props.get(r, {}))]
    hz = loaded.timer_resolution
    span = loaded.trace_length / hz
    unit, scale = style.time_unit(span)
    min_width = span * scale / 1500  # an interval of one record stays visible
    verts, widths, hatched = [], [], []
    worst = np.full(len(rows), np.nan)
    mean = np.full(len(rows), np.nan)
    placed = unplaced = unbounded = 0
    all_w = []
    for y, loc in enumerate(rows):
        iv = per.get(loc, np.zeros((0, 3)))
        prop = loaded.props.get(loc, {}).get(PROP_SYNC_BOUND)
        fin = iv[np.isfinite(iv[:, 2]), 2]
        if fin.size:
            worst[y], mean[y] = fin.max(), fin.mean()
            all_w.append(fin)
        elif prop not in (None, "unbounded") and np.isfinite(_float(prop)):
            try:
                worst[y] = float(prop)
            except ValueError:
                pass
        unbounded += int(np.isinf(iv[:, 2]).sum())
        has_t = np.isfinite(iv[:, 0])
        unplaced += int((~has_t).sum())
        for a, b, width in iv[has_t].tolist():
            x0 = float(loaded.seconds(a)) * scale
            x1 = max(float(loaded.seconds(b)) * scale, x0 + min_width)
            quad = [(x0, y - 0.4), (x1, y - 0.4), (x1, y + 0.4), (x0, y + 0.4)]
            if np.isinf(width):
                hatched.append(quad)
            else:
                verts.append(quad)
                widths.append(width)
            placed += 1
    fig = Figure(figsize=style.FIGSIZE, dpi=style.DPI)
    ax = fig.add_axes((0.14, 0.12, 0.52, 0.76))
    bars = fig.add_axes((0.76, 0.12, 0.21, 0.76), sharey=ax)
    wmax = max(widths, default=1.0)
    norm = Normalize(vmin=0, vmax=wmax if wmax > 0 else 1.0)
    coll = PolyCollection(verts, array=np.asarray(widths, float), cmap="plasma", norm=norm,
                          edgecolors="white", linewidths=0.3)
    ax.add_collection(coll)
    if hatched:
        ax.add_collection(PolyCollection(hatched, facecolors="none", edgecolors="#d62728",
                                         hatch="xxx", linewidths=0.5))
    cb = fig.colorbar(coll, ax=ax, pad=0.01, fraction=0.04)
    cb.set_label(f"bound width [ticks]  (1 tick = {units.seconds(1 / hz)})")
    ax.set_xlim(0, span * scale)
    style.row_marks(bars, style.label_rows(ax, loaded, np.asarray(rows, np.int64)))
    ax.set_xlabel(f"time since the trace start [{unit}]")
    flat = np.concatenate(all_w) if all_w else np.zeros(0)
    head = (f"worst {units.ticks(float(flat.max()), hz)}, "
            f"mean {units.ticks(float(flat.mean()), hz)}"
            if flat.size else "no bounded interval")
    extra = []
    if unbounded:
        extra.append(f"{unbounded} not synchronized (hatched red)")
    if unplaced:
        extra.append(f"{unplaced} without a written record (not drawn)")
    ax.set_title(f"Synchronization bound of every live interval ({placed} drawn)\n{head}"
                 + ("; " + ", ".join(extra) if extra else ""), fontsize=10)
    row_y = np.arange(len(rows))
    hbars(bars, row_y, np.nan_to_num(worst), height=0.7, color="#7f7f7f", label="worst")
    hbars(bars, row_y, np.nan_to_num(mean), height=0.35, color="#e377c2", label="mean")
    bars.set_xlabel("bound width [ticks]")
    top = bars.secondary_xaxis("top", functions=(lambda v: np.asarray(v) / hz * 1e6,
                                                 lambda v: np.asarray(v) * hz / 1e6))
    top.set_xlabel("[µs]")
    bars.tick_params(axis="y", labelleft=False)
    bars.legend(loc="lower center", bbox_to_anchor=(0.5, 1.07), ncol=2, fontsize=8,
                frameon=False)
    style.save(fig, path)
    return len(rows), placed


def _float(value) -> float:
    """A property value as a number (nan when it is none)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
