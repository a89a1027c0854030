"""The x axis of the time figures: sample windows side by side, each in proportion to its duration
with the skipped time squeezed into narrow gaps, and pixel rasters on it (``coverage``: the
time each state covers per column; ``dominant``: the state covering most of a column). No
matplotlib here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TimeAxis:
    windows: np.ndarray  # (n, 2) ticks
    x0: np.ndarray  # first column of each window
    x1: np.ndarray  # end column of each window
    columns: int
    edges: np.ndarray  # columns + 1 times (ticks) of the column edges, non-decreasing

    @property
    def sampled(self) -> bool:
        return len(self.windows) > 1

    def to_x(self, t: np.ndarray) -> np.ndarray:
        """Ticks -> column coordinate (float)."""
        xp = np.column_stack([self.windows[:, 0], self.windows[:, 1]]).ravel().astype(float)
        fp = np.column_stack([self.x0, self.x1]).ravel().astype(float)
        return np.interp(np.asarray(t, dtype=float), xp, fp)


def make_axis(windows: np.ndarray, columns: int = 1200, gap: int | None = None) -> TimeAxis:
    """Columns for each window and the gaps between them."""
    windows = np.asarray(windows, np.int64).reshape(-1, 2)
    n = len(windows)
    if gap is None:
        gap = max(3, columns // 100) if n > 1 else 0
    usable = max(n, columns - gap * (n - 1))
    dur = np.maximum(windows[:, 1] - windows[:, 0], 0).astype(float)
    share = dur / dur.sum() if dur.sum() > 0 else np.full(n, 1.0 / n)
    width = np.maximum(1, np.floor(share * usable)).astype(np.int64)
    width[np.argmax(width)] += max(0, usable - int(width.sum()))
    x0 = np.zeros(n, np.int64)
    x0[1:] = np.cumsum(width + gap)[:-1]
    x1 = x0 + width
    edges = [np.linspace(windows[k, 0], windows[k, 1], width[k] + 1) for k in range(n)]
    # gap columns span the skipped time (nothing is drawn there: no segment covers it)
    parts = [edges[0]]
    for k in range(1, n):
        parts.append(np.linspace(windows[k - 1, 1], windows[k, 0], gap + 1)[1:])
        parts.append(edges[k][1:])
    return TimeAxis(windows, x0, x1, int(x1[-1]), np.concatenate(parts))


def coverage(edges: np.ndarray, t0: np.ndarray, t1: np.ndarray, state: np.ndarray,
             n_states: int) -> np.ndarray:
    """(n_states, columns) time each state covers in each column, for one location's
    non-overlapping segments [t0, t1)."""
    cols = edges.size - 1
    out = np.zeros((n_states, cols))
    for s in np.unique(state).tolist():
        m = state == s
        a, b = t0[m].astype(float), t1[m].astype(float)
        order = np.argsort(a, kind="stable")
        a, b = a[order], b[order]
        dur = b - a
        cum_before = np.concatenate([[0.0], np.cumsum(dur)[:-1]])
        xp = np.column_stack([a, b]).ravel()
        fp = np.column_stack([cum_before, cum_before + dur]).ravel()
        c = np.interp(edges.astype(float), xp, fp, left=0.0, right=float(dur.sum()))
        out[s] = np.diff(c)
    return out


def dominant(cov: np.ndarray) -> np.ndarray:
    """Per column the state covering most of it; -1 where nothing covers it."""
    best = np.argmax(cov, axis=0)
    best[cov.max(axis=0) <= 0] = -1
    return best
