"""Whether each live interval of the SPE clocks is synchronized, and why not: the one reading
of the solved bounds that the summary, the synchronization report, the archive's
``cell2otf2::sync_intervals`` and ``cell2otf2::sync_bound_ticks`` properties and therefore
``cell2otf2 report`` all share. An interval is synchronized when every segment it was solved
as (``decode`` cuts an interval at decrementer steps that may hide a wrap) is bounded on both
sides; its width is then the widest of its segments, else infinite. Where it is not, the
reason is one of: cut at unresolved decrementer wraps (bounded before the first cut, on one
side only after it), bounded from below only, from above only, or by nothing at all. Reads the
domains and bounds only; runs no stage."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from ..model import DomainKind


class Why(IntEnum):
    """Why a live interval is not synchronized (SYNCHRONIZED: it is)."""

    SYNCHRONIZED = 0
    CUT = 1  # bounded up to a decrementer step whose wrap count stayed open, not after it
    LOWER_ONLY = 2
    UPPER_ONLY = 3
    NOTHING = 4


@dataclass
class IntervalBounds:
    """Per live interval (in domain order), from its segments' bounds."""

    heads: np.ndarray  # index of each interval's first segment in the domain table
    width: np.ndarray  # widest segment's upper - lower; inf unless every segment is bounded
    why: np.ndarray  # ``Why`` per interval
    unresolved: np.ndarray  # segments left unbounded after a cut (unresolved wraps)
    rank: np.ndarray
    ctx: np.ndarray

    @property
    def synchronized(self) -> np.ndarray:
        return self.why == Why.SYNCHRONIZED


def interval_bounds(domains: np.ndarray, lower: np.ndarray, upper: np.ndarray
                    ) -> IntervalBounds:
    """Every live interval's width and status from the bounds of its segments."""
    spe = np.flatnonzero(domains["kind"] == DomainKind.SPE_INTERVAL)
    lo = np.asarray(lower, dtype=np.float64)[spe]
    up = np.asarray(upper, dtype=np.float64)[spe]
    first = domains["segment"][spe] == 0
    if spe.size and not first[0]:  # segments without their head: one unbounded interval
        first = first.copy()
        first[0] = True
    at = np.flatnonzero(first)
    if not at.size:
        empty = np.zeros(0, dtype=np.int64)
        return IntervalBounds(empty, np.zeros(0), empty.astype(np.int8), empty, empty, empty)
    has_lo, has_up = np.isfinite(lo), np.isfinite(up)
    ok = has_lo & has_up
    width = np.maximum.reduceat(np.where(ok, up - lo, np.inf), at)
    open_segments = np.add.reduceat((~ok).astype(np.int64), at)
    why = np.full(at.size, Why.SYNCHRONIZED, dtype=np.int8)
    head_lo, head_up = has_lo[at], has_up[at]
    why[~(head_lo & head_up)] = Why.NOTHING
    why[head_lo & ~head_up] = Why.LOWER_ONLY
    why[~head_lo & head_up] = Why.UPPER_ONLY
    cut = head_lo & head_up & (open_segments > 0)
    why[cut] = Why.CUT
    heads = spe[at]
    return IntervalBounds(heads, width, why, np.where(cut, open_segments, 0),
                          domains["rank"][heads].astype(np.int64),
                          domains["ctx"][heads].astype(np.int64))


#: the reasons in the summary's words (the count of intervals goes in front)
_WHY_WORDS = {
    Why.CUT: "cut at {wraps} in {where}: bounded up to the first cut, on one side only after "
             "it",
    Why.LOWER_ONLY: "bounded from below only in {where}",
    Why.UPPER_ONLY: "bounded from above only in {where}",
    Why.NOTHING: "with nothing to bound them in {where} (their records are not written)",
}


def why_lines(b: IntervalBounds) -> list[str]:
    """One line per reason some intervals are not synchronized, e.g. "16 intervals cut at
    2176 unresolved decrementer wraps in rank 0, contexts 0-15: ..."."""
    out = []
    for why, words in _WHY_WORDS.items():
        sel = b.why == why
        n = int(sel.sum())
        if not n:
            continue
        text = words.format(
            wraps=_count(int(b.unresolved[sel].sum()), "unresolved decrementer wrap"),
            where=_where(b.rank[sel], b.ctx[sel]))
        if n == 1:
            text = text.replace("bound them", "bound it").replace("their records", "its records")
        out.append(f"{_count(n, 'interval')} {text}")
    return out


def _count(n: int, noun: str) -> str:
    """``1 interval``, ``16 intervals`` (the nouns here take an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _where(rank: np.ndarray, ctx: np.ndarray, shown: int = 3) -> str:
    """``rank 0, contexts 0-15; rank 1, context 3`` (at most ``shown`` ranks, then how many
    more)."""
    parts = []
    ranks = np.unique(rank)
    for r in ranks[:shown].tolist():
        c = np.unique(ctx[rank == r])
        parts.append(f"rank {r}, context{'s' if c.size > 1 else ''} {_ranges(c.tolist())}")
    more = ranks.size - shown
    return "; ".join(parts) + (f" and {more} more rank{'s' if more > 1 else ''}"
                               if more > 0 else "")


def _ranges(values: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``0-2, 5, 7-8``."""
    out: list[str] = []
    start: int | None = None  # the current run's first value
    prev = 0  # its last value so far
    for v in values:
        if start is not None and v != prev + 1:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = None
        if start is None:
            start = v
        prev = v
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(out)
