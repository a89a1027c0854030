"""node_clocks.png: each node's clock offset against time (from ``--sync-report``), its bound,
and the MPI messages between nodes that pin it, one panel per node other than the reference
(rank 0's node); how the line and the message marks are drawn: docs/design.md. Without the
report the line is the archive's own map (zero) and only the messages are drawn."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from . import style, units
from .exact import mpi_messages
from .load import Loaded

MAX_PANELS = 16


def _node_name(name: str) -> str:
    return "node 0" if name == "0" else name


def offset_curve(node: dict | None, t: np.ndarray) -> np.ndarray:
    """The node's offset (archive ticks minus node timebase) at archive times ``t``, from its
    report entry: ``segments`` (pieces from their ``first_timebase``) or one offset and rate;
    zeros without an entry."""
    t = np.asarray(t, np.float64)
    if not node:
        return np.zeros_like(t)
    pieces = node.get("segments") or [{"first_timebase": -math.inf,
                                       "offset_ticks": node.get("offset_ticks", 0.0),
                                       "rate": node.get("rate", 1.0)}]
    pieces = sorted(pieces, key=lambda p: p["first_timebase"])
    off = np.array([float(p["offset_ticks"]) for p in pieces])
    rate = np.array([float(p["rate"]) for p in pieces])
    first = np.array([float(p["first_timebase"]) for p in pieces])
    starts = np.where(np.isfinite(first), off + rate * first, -np.inf)  # in archive time
    k = np.clip(np.searchsorted(starts, t, side="right") - 1, 0, len(pieces) - 1)
    timebase = (t - off[k]) / rate[k]
    return t - timebase


def constraints(loaded: Loaded) -> dict[str, dict[str, np.ndarray]]:
    """Per node name: the MPI messages into it ("in") and out of it ("out") from another
    node, as arrays of (time at the node, slack in ticks, src loc, dst loc, other node is
    the reference)."""
    msg = mpi_messages(loaded)
    node = np.array(loaded.loc_node or [""] * loaded.n_locs, dtype=object)
    ref = node[0] if node.size else ""
    src_node, dst_node = node[msg["src"]], node[msg["dst"]]
    cross = src_node != dst_node
    msg, src_node, dst_node = msg[cross], src_node[cross], dst_node[cross]
    slack = (msg["t_recv"] - msg["t_send"]).astype(np.float64)
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in dict.fromkeys(loaded.node_names or node.tolist()):
        into, outof = dst_node == name, src_node == name
        out[name] = {
            "in": np.column_stack([msg["t_recv"][into], slack[into], msg["src"][into],
                                   msg["dst"][into], src_node[into] == ref]),
            "out": np.column_stack([msg["t_send"][outof], slack[outof], msg["src"][outof],
                                    msg["dst"][outof], dst_node[outof] == ref]),
        }
    return out


def draw(loaded: Loaded, report: dict | None, path: Path) -> tuple[int, int] | str:
    """Write the figure; returns (panels drawn = nodes, events drawn = messages placed), or
    why there is nothing to draw (a run on one node)."""
    hz = loaded.timer_resolution
    per = constraints(loaded)
    ref = loaded.loc_node[0] if loaded.loc_node else ""
    entries = {_node_name(str(n.get("node"))): n for n in (report or {}).get("nodes", [])}
    names = [n for n in per if n != ref]  # system tree order
    widest = sorted(names, key=lambda n: -float(entries.get(n, {}).get("bound_ticks") or 0))
    shown = [n for n in names if n in widest[:MAX_PANELS]]  # the widest bounds, in order
    fig = Figure(figsize=style.FIGSIZE, dpi=style.DPI)
    span = loaded.trace_length / hz
    unit, scale = style.time_unit(span)
    head = ("Node clocks: each node's offset to the reference clock"
            f" ({ref or 'rank 0'}) over time, its bound and the MPI messages that pin it")
    if not shown:
        return (f"the run has one node ({ref or 'unknown'}): its clock is the reference, "
                "there is no node clock to synchronize")
    cols = int(math.ceil(math.sqrt(len(shown))))
    rows = int(math.ceil(len(shown) / cols))
    axes = fig.subplots(rows, cols, squeeze=False)
    t0 = loaded.global_offset
    grid = t0 + np.linspace(0, loaded.trace_length, 400)
    placed = 0
    for i, name in enumerate(shown):
        ax = axes[i // cols][i % cols]
        entry = entries.get(name)
        base = offset_curve(entry, np.array([t0], float))[0]

        def y_of(t, entry=entry, base=base):
            return (offset_curve(entry, t) - base) / hz * 1e6  # µs

        x = loaded.seconds(grid) * scale
        line = y_of(grid)
        bound = entry.get("bound_ticks") if entry else None
        ax.plot(x, line, color="#1f77b4", lw=1.5, label="offset (report's map)" if entry
                else "archive's map")
        if bound is not None:
            b = float(bound) / hz * 1e6
            ax.fill_between(x, line - b, line + b, color="#1f77b4", alpha=0.15, lw=0,
                            label=f"bound ± {units.ticks(float(bound), hz)}")
        c = per.get(name, {"in": np.zeros((0, 5)), "out": np.zeros((0, 5))})
        tight = []
        for side, marker, sign in (("in", "^", -1), ("out", "v", 1)):
            m = c[side]
            if not m.size:
                continue
            t, slack = m[:, 0].astype(float), m[:, 1].astype(float)
            y = y_of(t) + sign * slack / hz * 1e6
            withref = m[:, 4].astype(bool)
            for sel, face in ((withref, "#d62728"), (~withref, "none")):
                if sel.any():
                    ax.scatter(loaded.seconds(t[sel]) * scale, y[sel], marker=marker, s=18,
                               facecolors=face, edgecolors="#d62728", lw=0.7, zorder=3)
            placed += int(m.shape[0])
            j = int(np.argmin(slack))
            tight.append((loaded.seconds(t[j]) * scale, y[j], slack[j], int(m[j, 2]),
                          int(m[j, 3]), side))
        for tx, ty, slack, src, dst, side in tight:
            ax.annotate(f"{'into' if side == 'in' else 'out of'} the node: "
                        f"{_rank(loaded, src)} → {_rank(loaded, dst)}, slack "
                        f"{units.ticks(slack, hz)}", (tx, ty),
                        xytext=(0, -22 if side == "in" else 14), textcoords="offset points",
                        fontsize=7, ha="center", color="#7f0000",
                        arrowprops={"arrowstyle": "-", "color": "#7f0000", "lw": 0.6})
        # the scale: the line and band, and the tightest messages, with room around them
        reach = max([float(bound or 0) / hz * 1e6] + [s / hz * 1e6 for *_, s, _a, _b, _c
                                                       in tight] + [1e-3])
        ax.set_ylim(line.min() - 2.5 * reach, line.max() + 2.5 * reach)
        ax.set_xlim(0, span * scale)
        method = entry.get("method", "") if entry else "no sync report"
        rate = (f", rate {(float(entry.get('rate', 1)) - 1) * 1e6:+.1f} ppm"
                if entry else "")
        pieces = f", {len(entry['segments'])} pieces" if entry and entry.get("segments") else ""
        n_msg = int(c["in"].shape[0] + c["out"].shape[0])
        ax.set_title(f"{name} ({method}{rate}{pieces}), {n_msg} messages", fontsize=9)
        ax.set_ylabel("offset change [µs]", fontsize=8)
        ax.tick_params(labelsize=7)
        if i == 0:
            ax.legend(fontsize=7, loc="upper left", frameon=False)
        ax.set_xlabel(f"time since the trace start [{unit}]", fontsize=8)
    for j in range(len(shown), rows * cols):
        axes[j // cols][j % cols].axis("off")
    extra = f"; {len(names) - len(shown)} more nodes not drawn" if len(names) > len(shown) else ""
    fig.suptitle(f"{head}\n▲ a message into the node (the offset lies above), ▼ out of it "
                 "(below); filled: with the reference node, hollow: with another node "
                 f"(relative){extra}", fontsize=10)
    fig.subplots_adjust(left=0.06, right=0.98, top=0.88, bottom=0.07, hspace=0.45,
                        wspace=0.22)
    style.save(fig, path)
    return len(shown), placed


def _rank(loaded: Loaded, loc: int) -> str:
    return f"rank {style.process_of(loaded.loc_group[loc])}"
