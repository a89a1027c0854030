"""timeline.png: the master-timeline overview, a row per location (or per rank and kind of location
beyond ``MAX_ROWS``) rasterized to the figure's columns with the region covering most of each
column (``axis.dominant``), and DMA transfers and mailbox / MPI messages as lines (at most
``MAX_LINES`` per kind); details: docs/design.md. The drawing cost does not grow with the number
of events."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from . import style
from .axis import TimeAxis, coverage, dominant
from .derive import message_lines, rma_lines
from .load import Loaded, LocClass

MAX_LEGEND_REGIONS = 16
MAX_LINES = 1500  # per line class
MAX_ROWS = 96  # beyond this many locations, a row per rank and kind of location


def draw(loaded: Loaded, seg: np.ndarray, axis: TimeAxis, path: Path) -> tuple[int, int]:
    """Write the figure; returns (rows drawn, events drawn)."""
    row_of, labels = rows_of(loaded)
    n_rows = len(labels)
    # colors: regions by time drawn, the tail merged into "other regions"
    dur = np.bincount(seg["region"], weights=(seg["t1"] - seg["t0"]).astype(float),
                      minlength=len(loaded.region_names))
    by_time = [int(r) for r in np.argsort(-dur, kind="stable") if dur[r] > 0]
    shown = by_time[:MAX_LEGEND_REGIONS]
    colors = style.region_colors(loaded, shown)
    palette = [colors[r] for r in shown]
    index = np.full(len(loaded.region_names), len(shown), np.int64)  # tail -> "other"
    index[shown] = np.arange(len(shown))
    if len(by_time) > len(shown):
        palette.append(style.OTHER_REGIONS)
    n_states = len(palette)
    cov = np.zeros((n_rows, n_states, axis.columns))
    starts = np.searchsorted(seg["loc"], np.arange(loaded.n_locs + 1))
    for loc in range(loaded.n_locs):  # one pass per location, numpy within it
        s = seg[starts[loc]: starts[loc + 1]]
        if s.size:
            cov[row_of[loc]] += coverage(axis.edges, s["t0"], s["t1"], index[s["region"]],
                                         n_states)
    image = np.full((n_rows, axis.columns), np.nan)
    for r in range(n_rows):
        best = dominant(cov[r])
        image[r] = np.where(best >= 0, best, np.nan)
    fig = Figure(figsize=style.FIGSIZE, dpi=style.DPI)
    ax = fig.add_axes((0.15, 0.12, 0.64, 0.80))
    cmap = ListedColormap(palette or ["#ffffff"]).with_extremes(bad="#ffffff")
    ax.imshow(np.ma.masked_invalid(image), aspect="auto", interpolation="nearest", cmap=cmap,
              vmin=-0.5, vmax=max(n_states, 1) - 0.5,
              extent=(0, axis.columns, n_rows - 0.5, -0.5))
    lines = np.concatenate([message_lines(loaded), rma_lines(loaded)])
    handles = []
    for cls in (0, 1, 2):  # DMA under the messages
        ln = lines[lines["cls"] == cls]
        if ln.size == 0:
            continue
        total = ln.size
        if total > MAX_LINES:  # past about one line per pixel column they only hide the bars
            ln = np.sort(ln, order="t0")[np.linspace(0, total - 1, MAX_LINES).astype(np.int64)]
        x0, x1 = axis.to_x(ln["t0"]), axis.to_x(ln["t1"])
        y0, y1 = row_of[ln["src"]], row_of[ln["dst"]]
        if n_rows < loaded.n_locs:  # grouped rows: a line within one row says nothing
            keep = y0 != y1
            x0, x1, y0, y1 = x0[keep], x1[keep], y0[keep], y1[keep]
        segs = np.stack([np.column_stack([x0, y0]), np.column_stack([x1, y1])], axis=1)
        # many lines fade so that the region colors under them stay readable
        alpha = float(np.clip((5 if cls == 0 else 6) / np.sqrt(ln.size), 0.08, 0.8))
        width = 0.3 if cls == 0 else 0.5
        # matplotlib takes an (N, 2, 2) array of segments (its stub asks for a sequence)
        ax.add_collection(LineCollection(segs,  # type: ignore[arg-type]
                                         colors=style.LINE_COLORS[cls], linewidths=width,
                                         alpha=alpha, zorder=4))
        drawn = f"{total:,}" if total == ln.size else f"{ln.size:,} of {total:,} drawn"
        handles.append(Patch(color=style.LINE_COLORS[cls], label="\n".join(
            textwrap.wrap(f"{style.LINE_LABELS[cls]} ({drawn})", 34))))
    style.shade_gaps(ax, axis)
    ax.set_xlim(0, axis.columns)
    ax.set_ylim(n_rows - 0.5, -0.5)
    style.row_labels(ax, np.arange(n_rows), labels, style.label_size(n_rows))
    style.set_time_ticks(ax, loaded, axis)
    order = style.row_order(loaded)
    first_of_row = np.full(n_rows, -1, np.int64)
    first_of_row[row_of[order[::-1]]] = order[::-1]
    for y in np.flatnonzero(np.diff(loaded.loc_class[first_of_row]) != 0):
        ax.axhline(y + 0.5, color="#888888", lw=0.6, zorder=5)
    what = ("innermost region per location" if n_rows == loaded.n_locs else
            f"{loaded.n_locs} locations grouped per rank and kind, each column showing the "
            "region most of the group is in")
    ax.set_title(f"Timeline of {loaded.path.name}: {what}\n"
                 f"{style.sample_note(loaded)}", fontsize=11)
    legend = []  # one entry per color: the regions that share it, most time first
    for color in dict.fromkeys(colors[r] for r in shown):
        names = [loaded.region_names[r] for r in shown if colors[r] == color]
        label = ", ".join(names[:4]) + (f" +{len(names) - 4} more" if len(names) > 4 else "")
        label = "\n".join(textwrap.wrap(label, 34))
        legend.append(Patch(color=color, label=label))
    if len(by_time) > len(shown):
        legend.append(Patch(color=style.OTHER_REGIONS,
                            label=f"{len(by_time) - len(shown)} other regions"))
    ax.legend(handles=legend + handles, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, frameon=False, title="regions (most time first) and lines",
              title_fontsize=9)
    style.save(fig, path)
    return n_rows, int(loaded.events.size)


def rows_of(loaded: Loaded) -> tuple[np.ndarray, list[str]]:
    """Row per location ref and the row labels: a row per location up to ``MAX_ROWS``,
    beyond that a row per rank and kind of location (PPE threads, main memory, SPE contexts)."""
    order = style.row_order(loaded)
    row_of = np.empty(loaded.n_locs, np.int64)
    if loaded.n_locs <= MAX_ROWS:
        row_of[order] = np.arange(order.size)
        return row_of, [loaded.loc_names[r] for r in order]
    kinds = {LocClass.PPE: "PPE threads", LocClass.MEMORY: "main memory",
             LocClass.SPE: "SPE contexts", LocClass.OTHER: "other"}
    keys: dict[tuple[str, int], int] = {}
    for r in order.tolist():
        key = (style.process_of(loaded.loc_group[r]), int(loaded.loc_class[r]))
        row_of[r] = keys.setdefault(key, len(keys))
    size = np.bincount(row_of, minlength=len(keys))
    labels = [f"rank {rank}: {kinds[LocClass(c)]}" + (f" ({size[i]})" if size[i] > 1 else "")
              for i, (rank, c) in enumerate(keys)]
    return row_of, labels
