"""index.html: the figures and a summary table computed from the archive (every number from
``load.Loaded``: counts over all events, never the sample, definitions and location
properties), plus the headline numbers of the synchronization report when given. The page is
static, with relative links to the PNGs beside it; nothing is fetched."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from . import contexts, damagelist, units
from .derive import sync_intervals
from .load import PROP_SYNC_BOUND, Loaded, LocClass
from .style import process_of, sample_note

CAPTIONS = {
    "timeline.png": "Timeline: a row per PPE thread, main-memory pseudo-location and SPE "
                    "context (a row per rank and kind of location beyond 96 locations); bars "
                    "show the innermost region, lines DMA transfers and mailbox / MPI "
                    "messages.",
    "dma_bandwidth.png": "DMA bandwidth per SPE context over time, its mean over the "
                         "context's running time against the 25.6 GB/s peak, and all "
                         "contexts together against the memory peak of the chips (every "
                         "DMA command of the archive).",
    "dma_histograms.png": "DMA command sizes and latencies from issue to completion (every "
                          "command of the archive).",
    "waits.png": "Share of each SPE context's running time spent computing, waiting on tag "
                 "groups, on mailboxes or signals, and switched out (every event of the "
                 "archive).",
    "ppe_mpi.png": "PPE threads' time by innermost region, and the time of every MPI call "
                   "over all ranks (every event of the archive).",
    "node_clocks.png": "Each node's clock offset to the reference clock over time, with its "
                       "bound (from the synchronization report) and the MPI messages between "
                       "nodes that limit it: the two tightest pin the map.",
    "sync_bounds.png": "Synchronization bound of every live interval of every SPE context "
                       "(from the archive's location properties).",
}


def _fmt_ticks(value: float, hz: int) -> str:
    return units.ticks(value, hz)


def archive_summary(loaded: Loaded) -> list[tuple[str, str]]:
    hz = loaded.timer_resolution
    cls = loaded.loc_class
    rows = [
        ("archive", str(loaded.path)),
        ("written by", loaded.creator or "unknown"),
        ("timer resolution", f"{hz:,} Hz"),
        ("time span", _fmt_ticks(loaded.trace_length, hz)),
        ("processes", str(len({process_of(g) for g in loaded.loc_group}))),
        ("locations", f"{loaded.n_locs} ({int((cls == LocClass.PPE).sum())} PPE threads, "
                      f"{int((cls == LocClass.SPE).sum())} SPE contexts, "
                      f"{int((cls == LocClass.MEMORY).sum())} main-memory pseudo-locations)"),
        ("events", f"{loaded.total_events:,}"),
    ]
    rows += [(f"events: {k}", f"{v:,}") for k, v in loaded.counts.items() if v]
    s = loaded.sends_by_class
    rows += [
        ("mailbox and signal messages", f"{s.get('MAILBOX', 0):,}"),
        ("MPI messages", f"{s.get('MPI', 0):,}"),
        ("DMA transfers as messages", f"{s.get('DMA', 0):,}"),
        ("RMA operations (DMA)", f"{loaded.counts['RmaGet'] + loaded.counts['RmaPut']:,} "
                                 f"({loaded.counts['RmaGet']:,} get, "
                                 f"{loaded.counts['RmaPut']:,} put, "
                                 f"{loaded.counts['RmaOpCompleteBlocking']:,} completed)"),
    ]
    per = sync_intervals(loaded)
    widths = np.concatenate([v[:, 2] for v in per.values()]) if per else np.zeros(0)
    fin = widths[np.isfinite(widths)]
    if per:  # an interval cut at unresolved wraps is unbounded, as the summary counts it
        rows.append(("live intervals", f"{widths.size:,} ({fin.size:,} synchronized)"))
    if fin.size:
        rows.append(("worst bound", _fmt_ticks(float(fin.max()), hz)))
        rows.append(("mean bound", _fmt_ticks(float(fin.mean()), hz)))
    elif not per:
        worst = [w for w in (_bound(p.get(PROP_SYNC_BOUND)) for p in loaded.props.values())
                 if w is not None]
        if worst:
            rows.append(("worst bound", _fmt_ticks(max(worst), hz)))
    rows.append(("timeline drawn from", sample_note(loaded)))
    return rows


def sync_summary(report: dict) -> list[tuple[str, str]]:
    """Headline numbers of a sync report (docs/sync-report.md)."""
    hz = report.get("timebase_hz") or 1
    rows = []
    ref = report.get("reference", {})
    rows.append(("reference clock", f"rank {ref.get('rank')} on node {ref.get('node')}"))
    rows.append(("relaxation", _fmt_ticks(float(report.get("relaxation_ticks", 0.0)), hz)))
    iv = report.get("intervals", [])
    # synchronized as the summary counts them: every segment bounded (``synchronized``; a
    # report without the key: the bounds given)
    bounded = [x["upper_ticks"] - x["lower_ticks"] for x in iv
               if x.get("upper_ticks") is not None and x.get("lower_ticks") is not None
               and x.get("synchronized", True)]
    rows.append(("intervals synchronized", f"{len(bounded)} of {len(iv)}"))
    rows += [("not synchronized", str(line)) for line in report.get("not_synchronized") or []]
    if bounded:
        rows.append(("worst bound (report)", _fmt_ticks(max(bounded), hz)))
        rows.append(("mean bound (report)", _fmt_ticks(sum(bounded) / len(bounded), hz)))
    for node in report.get("nodes", []):
        bound = node.get("bound_ticks")
        ppm = (float(node.get("rate", 1)) - 1) * 1e6
        rows.append((f"node {node.get('node')}",
                     f"{node.get('method', '')}: offset "
                     f"{_fmt_ticks(float(node.get('offset_ticks', 0)), hz)}, rate "
                     f"{ppm:+.3f} ppm, bound "
                     + (_fmt_ticks(float(bound), hz) if bound is not None else "none")))
    for pair in report.get("pairs") or []:  # the publication's table figures, when written
        cells = [(k.removesuffix("_ticks").replace("_", " "), pair.get(k))
                 for k in ("max_all_ticks", "max_spe_ticks", "mean_spe_ppe_ticks",
                           "mean_spe_spe_ticks")]
        rows.append((f"pairs {pair.get('node')}", ", ".join(
            f"{k} {_fmt_ticks(float(v), hz)}" for k, v in cells if v is not None) or "none"))
    rows.append(("order violations", str(report.get("order_violations"))))
    lost = report.get("lost", {})
    rows.append(("lost", ", ".join(f"{k} {v}" for k, v in lost.items()) or "none"))
    return rows


def _table(rows: list[tuple[str, str]]) -> str:
    body = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                     for k, v in rows)
    return f"<table>\n{body}\n</table>"


def _grid(head: list[str], body: list[list[str]]) -> str:
    """A table with a header row."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    rows = "\n".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                     for r in body)
    return f"<table class='grid'>\n<tr>{th}</tr>\n{rows}\n</table>"


def _damage(loaded: Loaded, report: dict | None) -> list[str]:
    found = damagelist.rows(loaded, report)
    parts = ["<h2>Damage</h2>"]
    if found:
        parts.append(_grid(["what", "how many", "from"],
                           [[w, units.count(n), src] for w, n, src in found]))
    else:
        parts.append("<p>Nothing lost or left unplaced that the report can see.</p>")
    parts.append(f"<p>{html.escape(damagelist.availability(report))}</p>")
    return parts


def _contexts(loaded: Loaded, ctx_rows: list[dict], csv_name: str) -> list[str]:
    if not ctx_rows:
        return []
    head, body, note = contexts.table(ctx_rows, loaded.timer_resolution)
    parts = ["<h2>SPE contexts</h2>",
             "<p>Exact, over every event. Shares are of the context's running time (START to "
             "EXIT); bandwidth is bytes into and out of its local store over that time, of "
             "peak against 25.6 GB/s. Also as "
             f"<a href='{html.escape(csv_name)}'>{html.escape(csv_name)}</a>"
             + (f"; {html.escape(note)}" if note else ".") + "</p>",
             _grid(head, body)]
    head, body, _ = contexts.wait_table(ctx_rows)
    parts += ["<h2>Mailbox and signal waits</h2>",
              "<p>Completed waits of each SPE context in spu_read_in_mbox, "
              "spu_write_out_mbox and spu_write_out_intr_mbox (mailbox) and spu_read_signal "
              "(signal): how many, the mean and the longest.</p>", _grid(head, body)]
    return parts


def write_index(path: Path, loaded: Loaded, figures: list[Path],
                report: dict | None = None, report_name: str = "",
                skipped: dict[str, str] | None = None,
                ctx_rows: list[dict] | None = None, csv_name: str = "contexts.csv"
                ) -> None:
    parts = [
        "<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>cell2otf2 report: {html.escape(loaded.path.name)}</title>",
        "<style>body{font-family:sans-serif;max-width:1700px;margin:1em auto;padding:0 1em}"
        "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:2px 8px;"
        "text-align:left}th{background:#f4f4f4}img{max-width:100%;border:1px solid #ddd}"
        ".note{color:#a00}table.grid td{text-align:right}table.grid td:first-child{text-align:left}"
        "</style></head><body>",
        f"<h1>cell2otf2 report: {html.escape(loaded.path.name)}</h1>",
    ]
    if loaded.sampled:
        parts.append(f"<p class='note'>The timeline is drawn from a sample: "
                     f"{html.escape(sample_note(loaded))}. Every other figure, the tables "
                     "and the counts are over "
                     "all events.</p>")
    parts += ["<h2>Archive</h2>", _table(archive_summary(loaded))]
    if report is not None:
        parts += [f"<h2>Synchronization report ({html.escape(report_name)})</h2>",
                  _table(sync_summary(report))]
    parts += _damage(loaded, report)
    parts += _contexts(loaded, ctx_rows or [], csv_name)
    for fig in figures:
        name = fig.name
        parts += [f"<h2>{html.escape(name)}</h2>",
                  f"<p>{html.escape(CAPTIONS.get(name, ''))}</p>",
                  f"<a href='{html.escape(name)}'><img src='{html.escape(name)}' "
                  f"alt='{html.escape(CAPTIONS.get(name, name))}'></a>"]
    for name, why in (skipped or {}).items():
        parts += [f"<h2>{html.escape(name)}</h2>", f"<p>Not drawn: {html.escape(why)}.</p>"]
    parts.append("</body></html>")
    path.write_text("\n".join(parts) + "\n")


def _bound(value) -> float | None:
    """A ``cell2otf2::sync_bound_ticks`` value (a DOUBLE; a string such as "7.0" or
    "unbounded" in archives of earlier versions) as a finite number of ticks, None when
    unbounded or absent."""
    try:
        w = float(value)
    except (TypeError, ValueError):
        return None
    return w if np.isfinite(w) else None
