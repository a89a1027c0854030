"""dma_histograms.png: how large the DMA commands are and how long they take, from every command
of the archive. Left: commands per size, in power-of-two bins (the MFC moves 1, 2, 4, 8 bytes
or multiples of 16 up to 16 KiB), gets and puts stacked, with the share of the bytes each bin
moves. Right: latency from issue to completion (RmaGet/RmaPut to their RmaOpCompleteBlocking,
or a DMA message's send to its receive), in logarithmic bins of time, gets and puts stacked;
the median, the 95th percentile and the maximum are marked. A command never completed has no
latency and is counted in the title. Exact (``exact.transfers``), never sampled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.artist import Artist
from matplotlib.figure import Figure

from . import style, units
from .bars import vbars
from .exact import Xfer, transfers
from .load import Loaded, LocClass

GET, PUT = "#1f77b4", "#ff7f0e"


def _binary(n: int) -> str:
    """A power of two of bytes: '512 B', '16 KiB', '1 MiB'."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _size(n: float) -> str:
    whole = int(n)
    return _binary(whole) if whole == n and whole > 0 and whole & (whole - 1) == 0 \
        else units.nbytes(n)


def directions(loaded: Loaded, x: Xfer) -> np.ndarray:
    """True for a get (data into the issuing SPE's local store), False for a put."""
    return x["dst"] == x["issuer"]


def draw(loaded: Loaded, path: Path) -> tuple[int, int] | str:
    """Write the figure; returns (panels = 2, events drawn = DMA commands), or why not."""
    x = transfers(loaded)
    if x.size == 0:
        return "the archive has no DMA command"
    hz = loaded.timer_resolution
    get = directions(loaded, x)
    fig = Figure(figsize=style.FIGSIZE, dpi=style.DPI)
    size_ax = fig.add_axes((0.06, 0.1, 0.41, 0.76))
    lat_ax = fig.add_axes((0.56, 0.1, 0.41, 0.76))
    # sizes: bin k holds 2^k .. 2^(k+1) - 1 bytes
    nbytes = np.maximum(x["bytes"], 1)
    k = np.floor(np.log2(nbytes)).astype(np.int64)
    kmax = int(k.max())
    bins = np.arange(kmax + 1)
    for sel, color, label, bottom in ((get, GET, "get", None), (~get, PUT, "put", get)):
        counts = np.bincount(k[sel], minlength=kmax + 1)
        base = np.bincount(k[bottom], minlength=kmax + 1) if bottom is not None else 0
        vbars(size_ax, bins, counts, bottom=base, color=color, width=0.8,
              label=f"{label} ({units.count(int(sel.sum()))})")
    moved = np.bincount(k, weights=x["bytes"].astype(float), minlength=kmax + 1)
    total = np.bincount(k, minlength=kmax + 1)
    share = moved / max(float(moved.sum()), 1.0)
    for b in np.flatnonzero(total).tolist():
        size_ax.text(b, total[b], f"{units.percent(share[b])}\nof bytes", ha="center",
                     va="bottom", fontsize=7)
    size_ax.set_xticks(bins)
    size_ax.set_xticklabels([_binary(2 ** b) for b in bins.tolist()], rotation=45, ha="right",
                            fontsize=8)
    size_ax.set_ylim(0, total.max() * 1.18)
    size_ax.set_xlabel("command size (bin from the size shown to twice it)")
    size_ax.set_ylabel("DMA commands")
    med = float(np.median(x["bytes"]))
    size_ax.set_title(f"DMA command sizes: {units.count(x.size)} commands, "
                      f"{units.nbytes(float(x['bytes'].sum()))} moved, median "
                      f"{_size(med)}", fontsize=10)
    size_ax.legend(fontsize=8, frameon=False, loc="upper left")
    # latencies
    done = x["t_done"] >= 0
    lat = (x["t_done"] - x["t_issue"]).astype(np.float64) / hz
    lat_done = lat[done]
    if lat_done.size:
        lo = max(float(lat_done[lat_done > 0].min(initial=1.0 / hz)), 1.0 / hz)
        hi = max(float(lat_done.max()), lo * 10)
        edges = np.geomspace(lo / 1.5, hi * 1.5, 41)
        clipped = np.clip(lat_done, edges[0], edges[-1])
        g = get[done]
        cg, _ = np.histogram(clipped[g], edges)
        cp, _ = np.histogram(clipped[~g], edges)
        width = np.diff(edges)
        handles: list[Artist] = [
            vbars(lat_ax, edges[:-1], cg, width=width, align="edge", color=GET,
                  label=f"get ({units.count(int(g.sum()))})"),
            vbars(lat_ax, edges[:-1], cp, width=width, align="edge", bottom=cg, color=PUT,
                  label=f"put ({units.count(int((~g).sum()))})")]
        lat_ax.set_xscale("log")
        marks = (("median", np.median(lat_done), "#2ca02c"),
                 ("95th percentile", np.percentile(lat_done, 95), "#9467bd"),
                 ("max", lat_done.max(), "#d62728"))
        for name, v, color in marks:
            handles.append(lat_ax.axvline(v, color=color, ls="--", lw=1,
                                          label=f"{name} {units.seconds(float(v))}"))
        ticks = [t for t in (1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10)
                 if edges[0] <= t <= edges[-1]]
        lat_ax.set_xticks(ticks)
        lat_ax.set_xticklabels([units.seconds(t) for t in ticks])
        lat_ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper left")
    never = int((~done).sum())
    lat_ax.set_xlabel("latency: issue to completion (log scale)")
    lat_ax.set_ylabel("DMA commands")
    lat_ax.set_title("DMA latency (RmaGet/RmaPut to RmaOpCompleteBlocking)"
                     + (f"; {units.count(never)} never completed" if never else
                        "; every command completed"), fontsize=10)
    n_spe = int((loaded.loc_class == LocClass.SPE).sum())
    fig.suptitle(f"DMA commands of {n_spe} SPE contexts (exact: every command of the "
                 "archive)", fontsize=11)
    style.save(fig, path)
    return 2, int(x.size)
