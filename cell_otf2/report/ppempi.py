"""ppe_mpi.png: where the PPE threads spend their time, and what MPI costs, from every event.
Left: a bar per PPE thread (per rank beyond ``style.MAX_LABELLED`` threads), its time from its
first to its last event split by the innermost region (exclusive time): the regions with the
most PPE time overall get their own color, MPI calls are summed as "MPI" unless they are among
them, the rest is "other regions", and the time outside any region is "outside regions". Right:
every MPI region over all ranks, its total inclusive time, with its calls and the mean and
longest call. Exact (``load.Exact``), never sampled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from . import style, units
from .bars import hbars
from .exact import exact_of
from .load import Loaded, LocClass

TOP_REGIONS = 7
MPI_SHADES = ("#9467bd", "#c5b0d5", "#5e3c99", "#b2abd2", "#7b4fa3", "#d4c4e8")


def breakdown(loaded: Loaded) -> dict:
    """PPE threads (row order), the column labels and (threads, columns) ticks."""
    ex = exact_of(loaded)
    order = style.row_order(loaded)
    ppe = order[loaded.loc_class[order] == LocClass.PPE]
    n_reg = len(loaded.region_names)
    excl = ex.exclusive[ppe][:, :n_reg]
    mpi = np.array([p == "MPI" for p in loaded.region_paradigms], bool)
    total = excl.sum(axis=0)
    top = [int(r) for r in np.argsort(-total, kind="stable")[:TOP_REGIONS] if total[r] > 0]
    rest_mpi = mpi.copy()
    rest_mpi[top] = False
    rest = ~mpi & ~np.isin(np.arange(n_reg), top)
    cols = [excl[:, r] for r in top]
    labels = [loaded.region_names[r] for r in top]
    colors = list(style.region_colors(loaded, top).values())
    shades = iter(MPI_SHADES)
    colors = [next(shades, c) if mpi[r] else c for r, c in zip(top, colors, strict=True)]
    if rest_mpi.any() and excl[:, rest_mpi].sum() > 0:
        cols.append(excl[:, rest_mpi].sum(axis=1))
        labels.append("MPI (other calls)")
        colors.append(style.MPI)
    if rest.any() and excl[:, rest].sum() > 0:
        cols.append(excl[:, rest].sum(axis=1))
        labels.append("other regions")
        colors.append(style.OTHER_REGIONS)
    span = np.where(ex.last[ppe] >= 0, ex.last[ppe] - ex.first[ppe], 0).astype(np.float64)
    inside = excl.sum(axis=1)
    cols.append(np.maximum(span - inside, 0))
    labels.append("outside regions")
    colors.append("#ffffff")
    return {"ppe": ppe, "ticks": np.column_stack(cols) if cols else np.zeros((ppe.size, 0)),
            "labels": labels, "colors": colors, "span": span}


def mpi_regions(loaded: Loaded) -> list[dict]:
    """Every MPI region with a completed call: name, calls, total, mean and longest (ticks),
    most total time first."""
    ex = exact_of(loaded)
    out = []
    for r, paradigm in enumerate(loaded.region_paradigms):
        calls = int(ex.visits[:, r].sum())
        if paradigm != "MPI" or calls == 0:
            continue
        total = float(ex.inclusive[:, r].sum())
        out.append({"region": loaded.region_names[r], "calls": calls, "total": total,
                    "mean": total / calls, "longest": float(ex.longest[:, r].max())})
    return sorted(out, key=lambda d: -d["total"])


def draw(loaded: Loaded, path: Path) -> tuple[int, int] | str:
    """Write the figure; returns (rows drawn = PPE bars, events drawn = MPI calls)."""
    b = breakdown(loaded)
    if b["ppe"].size == 0:
        return "the archive has no PPE thread"
    hz = loaded.timer_resolution
    ticks, ppe = b["ticks"], b["ppe"]
    names = [loaded.loc_names[r] for r in ppe]
    if ppe.size > style.MAX_LABELLED:  # one bar per rank
        ranks = [style.process_of(loaded.loc_group[r]) for r in ppe]
        keys = list(dict.fromkeys(ranks))
        idx = np.array([keys.index(k) for k in ranks])
        summed = np.zeros((len(keys), ticks.shape[1]))
        np.add.at(summed, idx, ticks)
        ticks, names = summed, [f"rank {k}" for k in keys]
    share = ticks / np.maximum(ticks.sum(axis=1, keepdims=True), 1)
    fig = Figure(figsize=style.FIGSIZE, dpi=style.DPI)
    ax = fig.add_axes((0.14, 0.1, 0.38, 0.74))
    y = np.arange(len(names))
    left = np.zeros(len(names))
    for j, (label, color) in enumerate(zip(b["labels"], b["colors"], strict=True)):
        overall = ticks[:, j].sum() / max(ticks.sum(), 1)
        hbars(ax, y, share[:, j] * 100, left=left * 100, color=color, height=0.8,
              edgecolor="#999999" if color == "#ffffff" else color, lw=0.4,
              label=f"{label} ({units.percent(overall)})")
        left += share[:, j]
    style.row_labels(ax, y, names, style.label_size(len(names)))
    ax.set_ylim(max(len(names), 1) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the thread's time, first to last event [%]")
    ax.set_title("PPE threads: time by innermost region (exact)", fontsize=10, pad=70)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=7,
              frameon=False)
    right = fig.add_axes((0.66, 0.1, 0.31, 0.74))
    regions = mpi_regions(loaded)
    calls = sum(r["calls"] for r in regions)
    if regions:
        yy = np.arange(len(regions))
        total = np.array([r["total"] for r in regions]) / hz
        unit, scale = style.time_unit(float(total.max()))
        hbars(right, yy, total * scale, color=style.MPI, height=0.7)
        for i, r in enumerate(regions):
            right.text(total[i] * scale, i, f"  {units.count(r['calls'])} calls, mean "
                       f"{units.seconds(r['mean'] / hz)}, max {units.seconds(r['longest'] / hz)}",
                       va="center", fontsize=7)
        style.row_labels(right, yy, [r["region"] for r in regions], 8)
        right.set_ylim(len(regions) - 0.5, -0.5)
        right.set_xlim(0, float(total.max()) * scale * 1.9)
        right.set_xlabel(f"total time in the call over all ranks [{unit}]")
        mpi_total = float(total.sum())
        span = float(b["span"].sum()) / hz
        right.set_title(f"MPI: {units.count(calls)} calls, {units.seconds(mpi_total)} "
                        f"({units.percent(mpi_total / span if span else 0)} of the PPE "
                        "threads' time)", fontsize=10)
    else:
        right.axis("off")
        right.text(0.5, 0.5, "no MPI call in the archive", ha="center", va="center")
    style.save(fig, path)
    return len(names), calls
