"""dma_bandwidth.png: DMA bandwidth per SPE context, over time (left) and on average (right).

Every kept DMA issue counts its bytes at its issue time, into the local store of the
destination SPE ("in": gets, and puts from another SPE) and out of the source SPE's local
store ("out": puts, and gets by another SPE); main memory is not a row. The left panel bins
in + out per column of the time axis (bytes per second of the column); the right one divides
each SPE's bytes by its running time (time with a region open), both within the sampled
windows when the archive was sampled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from . import style
from .axis import make_axis
from .derive import Cat, category_time, dma_transfers, spe_locations
from .load import Loaded

COLUMNS = 200


def _rate_unit(value: float) -> tuple[str, float]:
    for unit, scale in (("GB/s", 1e-9), ("MB/s", 1e-6), ("kB/s", 1e-3)):
        if value * scale >= 1:
            return unit, scale
    return "B/s", 1.0


def draw(loaded: Loaded, seg: np.ndarray, path: Path) -> tuple[int, int]:
    """Write the figure; returns (rows drawn = SPE locations, events drawn = kept DMA issues
    with an SPE at one end)."""
    is_spe = set(spe_locations(loaded).tolist())
    spes = np.array([r for r in style.row_order(loaded).tolist() if r in is_spe], np.int64)
    row_of = np.full(loaded.n_locs, -1, np.int64)
    row_of[spes] = np.arange(spes.size)
    tr = dma_transfers(loaded)
    axis = make_axis(loaded.window_bounds, columns=COLUMNS)
    col = np.clip(np.floor(axis.to_x(tr["time"])).astype(np.int64), 0, axis.columns - 1)
    nbytes = tr["bytes"].astype(float)
    grid = np.zeros((spes.size, axis.columns))
    into = np.zeros(spes.size)
    out = np.zeros(spes.size)
    drawn = np.zeros(tr.size, bool)  # transfers with an SPE at one end at least
    for end, total in (("dst", into), ("src", out)):
        r = row_of[np.clip(tr[end], 0, None)]
        ok = (tr[end] >= 0) & (r >= 0)
        np.add.at(grid, (r[ok], col[ok]), nbytes[ok])
        np.add.at(total, r[ok], nbytes[ok])
        drawn |= ok
    seconds = np.diff(axis.edges) / loaded.timer_resolution
    in_gap = np.ones(axis.columns, bool)
    for a, b in zip(axis.x0.tolist(), axis.x1.tolist(), strict=True):
        in_gap[a:b] = False
    rate = np.divide(grid, seconds[None, :], out=np.zeros_like(grid), where=seconds > 0)
    rate[:, in_gap] = np.nan
    running = (category_time(loaded, seg)[spes][:, [Cat.COMPUTE, Cat.TAG_WAIT, Cat.MBOX_WAIT,
                                                     Cat.OFF_SPU]].sum(axis=1)
               / loaded.timer_resolution) if spes.size else np.zeros(0)
    mean_in = np.divide(into, running, out=np.zeros(spes.size), where=running > 0)
    mean_out = np.divide(out, running, out=np.zeros(spes.size), where=running > 0)

    fig = Figure(figsize=style.FIGSIZE, dpi=style.DPI)
    ax = fig.add_axes((0.14, 0.12, 0.52, 0.78))
    bars = fig.add_axes((0.74, 0.12, 0.22, 0.78), sharey=ax)
    peak = float(np.nanmax(rate)) if np.isfinite(rate).any() else 0.0
    unit, scale = _rate_unit(peak)
    cmap = colormaps["viridis"].with_extremes(bad="#dddddd")
    im = ax.imshow(rate * scale, aspect="auto", interpolation="nearest", cmap=cmap,
                   vmin=0, vmax=max(peak * scale, 1e-12),
                   extent=(0, axis.columns, max(spes.size, 1) - 0.5, -0.5))
    cb = fig.colorbar(im, ax=ax, pad=0.01, fraction=0.04)
    cb.set_label(f"DMA in + out [{unit}] per column")
    ax.set_xlim(0, axis.columns)
    ax.set_yticks(np.arange(spes.size))
    ax.set_yticklabels([loaded.loc_names[r] for r in spes],
                       fontsize=style.label_size(spes.size))
    style.set_time_ticks(ax, loaded, axis)
    ax.set_title(f"DMA bandwidth per SPE over time ({int(drawn.sum()):,} transfers)\n"
                 f"{style.sample_note(loaded)}", fontsize=10)
    bunit, bscale = _rate_unit(float(max(mean_in.max(initial=0), mean_out.max(initial=0))))
    y = np.arange(spes.size)
    bars.barh(y - 0.2, mean_in * bscale, height=0.4, color="#1f77b4",
              label="into the local store (get)")
    bars.barh(y + 0.2, mean_out * bscale, height=0.4, color="#ff7f0e",
              label="out of the local store (put)")
    bars.set_xlabel(f"mean over the running time [{bunit}]")
    bars.tick_params(axis="y", labelleft=False)
    bars.set_ylim(max(spes.size, 1) - 0.5, -0.5)
    bars.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=1, fontsize=8,
                frameon=False)
    bars.set_title("average DMA bandwidth per SPE", fontsize=10, pad=36)
    fig.savefig(path, dpi=style.DPI)
    return int(spes.size), int(drawn.sum())
