"""waits.png: the share of its running time (START to EXIT) each SPE context spends computing,
waiting on tag groups, waiting on mailboxes or signals, and switched out ("off SPU"), exact from
every event (``exact``) even when the timeline is sampled; beyond ``style.MAX_LABELLED``
contexts a bar is a rank (its contexts' times summed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from . import style, units
from .bars import hbars
from .derive import CAT_LABELS, SHOWN_CATS, Cat, spe_locations
from .exact import category_ticks
from .load import K, Loaded

SHOWN = SHOWN_CATS
COLORS = {Cat.COMPUTE: "#2ca02c", Cat.TAG_WAIT: style.TAG_WAIT, Cat.MBOX_WAIT: style.MBOX_WAIT,
          Cat.OFF_SPU: style.OFF_SPU}


def draw(loaded: Loaded, seg: np.ndarray, path: Path) -> tuple[int, int]:
    """Write the figure; returns (rows drawn = SPE locations, events drawn = the kept
    Enter/Leave events of SPE locations)."""
    is_spe = set(spe_locations(loaded).tolist())
    spes = np.array([r for r in style.row_order(loaded).tolist() if r in is_spe], np.int64)
    ticks = category_ticks(loaded)[spes] if spes.size else np.zeros((0, len(Cat)))
    names = [loaded.loc_names[r] for r in spes]
    if spes.size > style.MAX_LABELLED:  # a bar per rank: its contexts' time summed
        ranks = [style.process_of(loaded.loc_group[r]) for r in spes]
        keys = list(dict.fromkeys(ranks))
        summed = np.zeros((len(keys), ticks.shape[1]))
        np.add.at(summed, np.array([keys.index(k) for k in ranks]), ticks)
        ticks = summed
        names = [f"rank {k}: {ranks.count(k)} contexts" for k in keys]
    n = len(names)
    running = ticks[:, list(SHOWN)].sum(axis=1)
    share = np.divide(ticks[:, list(SHOWN)], running[:, None],
                      out=np.zeros((n, len(SHOWN))), where=running[:, None] > 0)
    fig = Figure(figsize=style.FIGSIZE, dpi=style.DPI)
    ax = fig.add_axes((0.16, 0.09, 0.76, 0.78))
    y = np.arange(n)
    left = np.zeros(n)
    for j, cat in enumerate(SHOWN):
        hbars(ax, y, share[:, j] * 100, left=left * 100, color=COLORS[cat], height=0.8,
              label=f"{CAT_LABELS[cat]} ({_mean(share[:, j], running):.1f}% overall)")
        for i in np.flatnonzero(share[:, j] >= 0.06):
            ax.text((left[i] + share[i, j] / 2) * 100, y[i], f"{share[i, j] * 100:.0f}%",
                    ha="center", va="center", fontsize=min(8, style.label_size(n)),
                    color="white" if cat in (Cat.TAG_WAIT, Cat.OFF_SPU, Cat.COMPUTE)
                    else "black")
        left += share[:, j]
    for row in range(n):
        ax.text(101, y[row], units.seconds(running[row] / loaded.timer_resolution),
                va="center", fontsize=min(8, style.label_size(n)))
    style.row_labels(ax, y, names, style.label_size(n))
    ax.set_ylim(max(n, 1) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the context's running time [%]  (right: running time"
                  + (", summed over the rank's contexts)" if n < spes.size else ")"))
    ax.set_title("Where each SPE context spends its running time (START to EXIT)\n"
                 f"exact, from all {loaded.total_events:,} events", fontsize=11, pad=28)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(SHOWN), fontsize=9,
              frameon=False)
    style.save(fig, path)
    e = loaded.events
    events = int((np.isin(e["loc"], spes) & np.isin(e["kind"], (K.ENTER, K.LEAVE))).sum())
    return n, events


def _mean(share: np.ndarray, running: np.ndarray) -> float:
    total = running.sum()
    return float((share * running).sum() / total * 100) if total > 0 else 0.0
