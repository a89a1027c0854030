"""The damage list: what was lost or could not be placed, from what the report can see. Three
sources, each named on its row: the ``--sync-report`` (``lost`` slots, blocks and records,
order violations, relaxation, intervals and nodes nothing bounds), the archive's location
properties (contexts without a bounded interval, intervals none of whose records was written)
and its events (regions still open at a location's last event, Leaves of a region that was not
open). ``availability`` says what cannot be listed: the archive does not record which input was
lost, the conversion's summary does.
"""

from __future__ import annotations

from .derive import sync_intervals
from .load import PROP_SYNC_BOUND, Loaded

SHOWN_NAMES = 3  # locations named per row


def _names(loaded: Loaded, locs) -> str:
    names = [loaded.loc_names[i] for i in locs]
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    return ", ".join(names[:SHOWN_NAMES]) + more


def rows(loaded: Loaded, report: dict | None) -> list[tuple[str, int, str]]:
    """(what, how many, source and where) for every kind of damage found; empty when none."""
    out = []
    if report is not None:
        lost = report.get("lost") or {}
        for key, what in (("slots", "trace slots lost in GAPs"),
                          ("blocks", "SPE blocks missing (seq skips)"),
                          ("records", "other lost or unusable records (unmatched messages, "
                                      "undefined ids, records without a usable time, ...)")):
            if lost.get(key):
                out.append((what, int(lost[key]), "sync report: lost." + key))
        if report.get("order_violations"):
            out.append(("records held at their predecessor's time (order violations)",
                        int(report["order_violations"]), "sync report"))
        iv = report.get("intervals", [])
        open_iv = [x for x in iv if x.get("lower_ticks") is None or x.get("upper_ticks") is None
                   or not x.get("synchronized", True)]
        if open_iv:
            why = "; ".join(str(w) for w in report.get("not_synchronized") or [])
            out.append(("live intervals not synchronized (not bounded on both sides)",
                        len(open_iv), "sync report: intervals" + (f" ({why})" if why else "")))
        unplaced = [n.get("node") for n in report.get("nodes", [])
                    if n.get("bound_ticks") is None and n.get("method") != "unused"]
        if unplaced:
            out.append(("nodes whose clock no message bounds (placed by start times)",
                        len(unplaced), "sync report: " + ", ".join(map(str, unplaced))))
    unbounded = [loc for loc, p in sorted(loaded.props.items())
                 if p.get(PROP_SYNC_BOUND) == "unbounded"]
    if unbounded:
        out.append(("SPE contexts without a bounded interval", len(unbounded),
                    "archive properties: " + _names(loaded, unbounded)))
    per = sync_intervals(loaded)
    unwritten = [loc for loc, v in per.items() if v.size and (v[:, 0] != v[:, 0]).any()]
    if unwritten:
        n = int(sum(int((per[loc][:, 0] != per[loc][:, 0]).sum()) for loc in unwritten))
        out.append(("live intervals none of whose records was written", n,
                    "archive properties: " + _names(loaded, unwritten)))
    ex = loaded.exact
    if ex is not None:
        for arr, what in ((ex.unclosed, "regions still open at their location's last event"),
                          (ex.stray_leaves, "Leaves of a region that was not open")):
            locs = [int(i) for i in arr.nonzero()[0]]
            if locs:
                out.append((what, int(arr.sum()), "archive events: " + _names(loaded, locs)))
    return out


def availability(report: dict | None) -> str:
    text = ("The archive does not record which input records were lost; the conversion's "
            "summary (exit status 1) lists every kind of damage with its first file and slot.")
    if report is None:
        text += (" Without --sync-report only what the archive itself shows is listed (no "
                 "lost slots, blocks or records, no order violations).")
    return text
