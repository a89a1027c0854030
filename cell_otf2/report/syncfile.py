"""The ``--sync-report`` JSON: read it, and refuse one that belongs to another run. A
synchronization report (docs/sync-report.md) describes one conversion. Before any event is
read, ``read_for`` compares what both files say about the run from the archive's definitions
alone: the timebase (the archive's timer resolution), the reference node (the node of rank 0's
main thread), the node names (the system tree), and where the archive has the
``cell2otf2::sync_intervals`` properties, the number of SPE contexts and of live intervals. Any
difference is a ``FormatError`` (exit 3) naming both files.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import FormatError
from .load import PROP_SYNC_INTERVALS


def _node_name(name: str) -> str:
    """As the archive writes a manifest node name (a node named "0" is "node 0")."""
    return "node 0" if name == "0" else name


def read(path: Path) -> dict:
    """The report as a dict; FormatError when unreadable or not a sync report."""
    try:
        report = json.loads(Path(path).read_text())
    except OSError as exc:
        raise FormatError(path, f"cannot read the sync report: {exc.strerror}") from None
    except ValueError as exc:
        raise FormatError(path, "not a cell2otf2 synchronization report "
                          f"(docs/sync-report.md): {exc}") from None
    missing = [k for k in ("timebase_hz", "reference", "nodes", "intervals")
               if not isinstance(report, dict) or k not in report]
    if missing:
        raise FormatError(path, "not a cell2otf2 synchronization report (docs/sync-report.md):"
                          f" no {', '.join(missing)}")
    return report


def archive_facts(anchor: Path) -> dict:
    """What the archive's definitions say about the run (no event is read)."""
    import otf2

    reader = otf2.reader.Reader(str(anchor))
    try:
        d = reader.definitions
        nodes = [n.name for n in d.system_tree_nodes if n.class_name == "node"]
        locs = list(d.locations)
        ref_node = ""
        if locs:
            n = locs[0].group.system_tree_parent
            while n is not None and n.class_name != "node":
                n = n.parent
            ref_node = n.name if n is not None else ""
        intervals = contexts = 0
        for prop in d.location_properties:
            if prop.name == PROP_SYNC_INTERVALS:
                contexts += 1
                text = str(prop.value)
                intervals += len(text.split(";")) if text else 0
        return {"timebase_hz": int(d.clock_properties.timer_resolution), "nodes": nodes,
                "reference_node": ref_node, "contexts": contexts, "intervals": intervals}
    finally:
        reader.close()


def mismatches(report: dict, facts: dict) -> list[str]:
    """What the report says differently from the archive, in words; empty when they agree."""
    out = []
    if report.get("timebase_hz") != facts["timebase_hz"]:
        out.append(f"timebase {report.get('timebase_hz')} Hz in the report, "
                   f"{facts['timebase_hz']} Hz in the archive")
    ref = _node_name(str((report.get("reference") or {}).get("node")))
    if facts["reference_node"] and ref != facts["reference_node"]:
        out.append(f"reference node '{ref}' in the report, '{facts['reference_node']}' in "
                   "the archive")
    names = [_node_name(str(n.get("node"))) for n in report.get("nodes", [])]
    if facts["nodes"] and names != facts["nodes"]:
        out.append(f"nodes {', '.join(names) or 'none'} in the report, "
                   f"{', '.join(facts['nodes'])} in the archive")
    if facts["contexts"]:
        iv = report.get("intervals", [])
        ctx = {(x.get("rank"), x.get("ctx")) for x in iv}
        if len(ctx) != facts["contexts"]:
            out.append(f"{len(ctx)} SPE contexts in the report, {facts['contexts']} in the "
                       "archive")
        if len(iv) != facts["intervals"]:
            out.append(f"{len(iv)} live intervals in the report, {facts['intervals']} in the "
                       "archive")
    return out


def read_for(path: Path, anchor: Path) -> dict:
    """The report at ``path`` if it belongs to the archive at ``anchor``, else FormatError."""
    report = read(path)
    try:
        facts = archive_facts(anchor)
    except Exception:  # unreadable archive: load_archive says why
        return report
    wrong = mismatches(report, facts)
    if wrong:
        raise FormatError(path, f"this synchronization report belongs to another run than "
                          f"the archive {anchor}: " + "; ".join(wrong))
    return report
