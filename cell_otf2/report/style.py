"""Shared figure conventions: size, colors per region (what a Cell user looks for: tag-group waits
red, mailbox and signal waits orange, off SPU dark gray, MPI purple), row order, time-axis
labels, per-rank labels beyond ``MAX_LABELLED`` rows (``label_rows``) and how a figure is
written (``save``). No matplotlib import at module level (``save`` imports the Agg canvas)."""

from __future__ import annotations

import re

import numpy as np

from .axis import TimeAxis
from .derive import MBOX_WAIT_NAMES, OFF_SPU_NAMES, TAG_WAIT_NAMES, base_name
from .load import Loaded, LocClass

FIGSIZE = (16, 9)  # inches at DPI -> 1600 x 900 pixels
DPI = 100
#: zlib level of the PNGs: 3 writes them a third faster than the default 6, a few % larger
PNG_LEVEL = 3

TAG_WAIT = "#d62728"
MBOX_WAIT = "#ff7f0e"
SIGNAL_WAIT = "#ffbb78"
PPE_MBOX = "#fdae6b"
OFF_SPU = "#3b3b3b"
CONTEXT_RUN = "#aec7e8"
MPI = "#9467bd"
OTHER_REGIONS = "#c7c7c7"
QUALITATIVE = ["#2ca02c", "#8c6d31", "#8c564b", "#17becf", "#bcbd22", "#e377c2", "#98df8a",
               "#c49c94", "#9edae5", "#dbdb8d", "#f7b6d2", "#7f7f7f", "#637939", "#393b79"]
PPE_MBOX_NAMES = {"spe_in_mbox_write", "spe_out_mbox_read", "spe_out_intr_mbox_read",
                  "spe_signal_write"}
LINE_COLORS = {0: "#1f77b4", 1: "#000000", 2: MPI}  # LineClass DMA, MAILBOX, MPI
LINE_LABELS = {0: "DMA transfer", 1: "mailbox / signal message", 2: "MPI message"}


def region_colors(loaded: Loaded, order: list[int]) -> dict[int, str]:
    """Region ref -> color for the regions in ``order`` (most time first)."""
    colors: dict[int, str] = {}
    free = iter(QUALITATIVE)
    for r in order:
        name = base_name(loaded.region_names[r])
        if name in TAG_WAIT_NAMES:
            colors[r] = TAG_WAIT
        elif name == "spu_read_signal":
            colors[r] = SIGNAL_WAIT
        elif name in MBOX_WAIT_NAMES:
            colors[r] = MBOX_WAIT
        elif name in PPE_MBOX_NAMES:
            colors[r] = PPE_MBOX
        elif name in OFF_SPU_NAMES:
            colors[r] = OFF_SPU
        elif name == "spe_context_run":
            colors[r] = CONTEXT_RUN
        elif loaded.region_paradigms[r] == "MPI":
            colors[r] = MPI
        else:
            colors[r] = next(free, OTHER_REGIONS)
    return colors


def row_order(loaded: Loaded) -> np.ndarray:
    """Location refs top to bottom: per location group in definition order, PPE threads,
    then main memory, then SPE contexts (an SPE's accelerator group follows its process)."""
    rank = {LocClass.PPE: 0, LocClass.MEMORY: 1, LocClass.OTHER: 2, LocClass.SPE: 3}
    group_of: dict[str, int] = {}
    for name in loaded.loc_group:
        group_of.setdefault(process_of(name), len(group_of))
    key = [(group_of[process_of(g)], rank[LocClass(c)], i)
           for i, (g, c) in enumerate(zip(loaded.loc_group, loaded.loc_class.tolist(),
                                          strict=True))]
    return np.array([k[2] for k in sorted(key)], np.int64)


def process_of(group_name: str) -> str:
    """'SPEs (rank 3)', 'SPEs (rank 3, chip 1)', 'MPI rank 3' and 'MPI Rank 3' -> '3';
    anything else as it is."""
    m = _RANK.search(group_name)
    return m.group(1) if m else group_name


_RANK = re.compile(r"\brank (\d+)\b", re.IGNORECASE)
#: beyond this many rows a figure labels its rows per rank instead of per location
MAX_LABELLED = 48


def label_rows(ax, loaded: Loaded, rows: np.ndarray) -> np.ndarray:
    """Y labels for ``rows`` (location refs, top to bottom): one per location up to
    ``MAX_LABELLED``, beyond that one per rank at the middle of its rows ("rank 3: 17") with
    a line between ranks; the y limits fit the rows. Returns the labels' y positions."""
    n = len(rows)
    ax.set_ylim(max(n, 1) - 0.5, -0.5)
    if n <= MAX_LABELLED:
        y = np.arange(n)
        row_labels(ax, y, [loaded.loc_names[r] for r in rows], label_size(n))
        return y
    ranks = [process_of(loaded.loc_group[r]) for r in rows]
    starts = [i for i in range(n) if i == 0 or ranks[i] != ranks[i - 1]]
    ends = starts[1:] + [n]
    y = np.array([(a + b - 1) / 2 for a, b in zip(starts, ends, strict=True)])
    row_labels(ax, y, [f"rank {ranks[a]}: {b - a}" if ranks[a].isdigit() else
                       f"{ranks[a]}: {b - a}" for a, b in zip(starts, ends, strict=True)],
               label_size(len(starts)))
    for a in starts[1:]:
        ax.axhline(a - 0.5, color="#888888", lw=0.5, zorder=5)
    return y


def row_labels(ax, y, labels: list[str], fontsize: float) -> None:
    """Y tick marks and labels at data ``y`` on the left of ``ax``, drawn as matplotlib draws
    y ticks (marks ``ytick.major.size`` long, labels ``ytick.major.pad`` further) but as one
    line of markers and a text per label: matplotlib's ticks are five artists each, made and
    laid out one by one, which the report's figures with dozens of rows paid for."""
    from matplotlib import rcParams
    from matplotlib.transforms import ScaledTranslation

    ax.set_yticks([])
    row_marks(ax, y)
    shift = (rcParams["ytick.major.size"] + rcParams["ytick.major.pad"]) / 72
    at = ax.get_yaxis_transform() + ScaledTranslation(-shift, 0, ax.figure.dpi_scale_trans)
    for v, text in zip(np.asarray(y, float).tolist(), labels, strict=True):
        ax.text(0, v, text, transform=at, ha="right", va="center_baseline", fontsize=fontsize,
                color=rcParams["ytick.labelcolor"] if rcParams["ytick.labelcolor"] != "inherit"
                else rcParams["ytick.color"])


def row_marks(ax, y) -> None:
    """Y tick marks (no labels) at data ``y`` on the left spine of ``ax`` (``row_labels``)."""
    from matplotlib import rcParams
    from matplotlib.markers import TICKLEFT

    y = np.asarray(y, float)
    ax.plot(np.zeros(y.size), y, transform=ax.get_yaxis_transform(), linestyle="none",
            marker=TICKLEFT, markersize=rcParams["ytick.major.size"],
            markeredgewidth=rcParams["ytick.major.width"], color=rcParams["ytick.color"],
            clip_on=False, scalex=False, scaley=False)


def label_size(rows: int) -> float:
    return float(np.clip(560 / max(rows, 1), 3.5, 9))


def time_unit(seconds: float) -> tuple[str, float]:
    if seconds >= 2:
        return "s", 1.0
    if seconds >= 2e-3:
        return "ms", 1e3
    return "us", 1e6


def set_time_ticks(ax, loaded: Loaded, axis: TimeAxis) -> None:
    """Ticks in time since the archive's start: linear for one window, each window's start
    for a sample (its gaps shaded by the caller)."""
    span = loaded.trace_length / loaded.timer_resolution
    unit, scale = time_unit(span)
    if not axis.sampled:
        t0, t1 = axis.windows[0]
        lo, hi = loaded.seconds(t0) * scale, loaded.seconds(t1) * scale
        ticks = _nice_ticks(float(lo), float(hi), 10)
        ax.set_xticks([float(axis.to_x(np.array([loaded.global_offset + v / scale *
                                                  loaded.timer_resolution]))[0])
                       for v in ticks])
        ax.set_xticklabels([f"{v:g}" for v in ticks])
        ax.set_xlabel(f"time since the trace start [{unit}]")
    else:
        ax.set_xticks(axis.x0.astype(float))
        ax.set_xticklabels([f"{loaded.seconds(t) * scale:.4g}" for t in axis.windows[:, 0]],
                           rotation=45, ha="right", fontsize=8)
        ax.set_xlabel(f"time since the trace start [{unit}] at the start of each sampled "
                      "window (gray bars: skipped time)")


def _nice_ticks(lo: float, hi: float, n: int) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** np.floor(np.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    first = np.ceil(lo / step) * step
    return [float(v) for v in np.arange(first, hi + step * 1e-9, step)]


def shade_gaps(ax, axis: TimeAxis) -> None:
    for k in range(1, len(axis.x0)):
        ax.axvspan(axis.x1[k - 1], axis.x0[k], color="#bbbbbb", alpha=0.8, lw=0, zorder=3)


def sample_note(loaded: Loaded) -> str:
    """One honest sentence about what was drawn."""
    n = loaded.events.size
    if not loaded.sampled:
        return f"all {loaded.total_events:,} events of the archive"
    w = len(loaded.window_bounds)
    return (f"SAMPLE: {n:,} of {loaded.total_events:,} events, {w} windows of "
            f"~{n // w:,} consecutive events evenly spread over the run")


def save(fig, path) -> None:
    """Write ``fig`` (drawn at its own dpi) as an RGB PNG: what ``fig.savefig(path)`` draws,
    without the alpha channel every pixel of which is opaque, at ``PNG_LEVEL``."""
    from matplotlib import __version__
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image, PngImagePlugin

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", f"Matplotlib version{__version__}, https://matplotlib.org/")
    Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBA",
                     0, 1).convert("RGB").save(path, format="png", compress_level=PNG_LEVEL,
                                               pnginfo=info)
