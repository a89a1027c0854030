"""Per node, the span of node timebase its records cover (``node_extents``): what the node
clock fit states its guaranteed bound over, before its first message and after its last
included. It reads only the decoded records' domains and local times, and fits nothing."""

from __future__ import annotations

import numpy as np

from ..model import Decoded, DomainKind


def node_extents(dec: Decoded) -> np.ndarray:
    """Per node, the smallest and largest node timebase of its records with a node clock
    (NaN where none)."""
    rec = dec.records
    out = np.full((dec.n_nodes, 2), np.nan)
    if dec.n_nodes == 0:
        return out
    # the field copied out of the wide rows once; the node domains come first
    # (``Decoded.domains``), so the domain table is looked up only for their records
    dom = np.ascontiguousarray(rec["domain"])
    ok = (dom >= 0) & (dom < dec.n_nodes)
    first = dom[ok]
    clock = dec.domains["kind"][first] == DomainKind.NODE
    ok[ok] = clock
    if not ok.any():
        return out
    node = dec.domains["node"][first[clock]].astype(np.int64)
    x = rec["local"][ok].astype(np.float64)
    lo = np.full(dec.n_nodes, np.inf)
    hi = np.full(dec.n_nodes, -np.inf)
    np.minimum.at(lo, node, x)
    np.maximum.at(hi, node, x)
    seen = np.isfinite(lo)
    out[seen, 0], out[seen, 1] = lo[seen], hi[seen]
    return out


def widest(parts: list[np.ndarray], n_nodes: int) -> np.ndarray:
    """Per node, the span covering every part's (``node_extents`` of parts of a run)."""
    out = np.full((n_nodes, 2), np.nan)
    if parts:
        stack = np.stack(parts)
        with np.errstate(invalid="ignore"):
            seen = np.isfinite(stack[:, :, 0]).any(axis=0)
            out[seen, 0] = np.nanmin(stack[:, seen, 0], axis=0)
            out[seen, 1] = np.nanmax(stack[:, seen, 1], axis=0)
    return out
