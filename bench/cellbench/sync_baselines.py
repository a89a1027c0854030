"""Baselines for the clock-synchronization benchmark, beside the real solver (``solver.py``).

Same input convention as ``solver.solve``: ``x[dst[k]] - x[src[k]] <= weight[k]``.

- ``paper_solve``: Biberstein, Harel, Heilper (2008) as published: Floyd-Warshall all pairs
  (numpy, O(n^3) time and O(n^2) memory: small n only), and when the FW diagonal shows a
  negative cycle the paper's repeated relaxation: add d/2 to every weight, d the magnitude of
  the most negative diagonal entry, and run FW again, until the diagonal is non-negative.
  FW stops at the first pivot that makes the diagonal negative: run to the end, it composes
  negative cycles and d grows like 2**n (1e84 ticks on 300 domains), which no reading of
  the paper intends; stopped there, d is the total of one closed walk of simple paths.
  This over-relaxes compared with ``solver.solve`` (d is a cycle's total, not its mean).
  Offsets with alpha = 1/2 and the same one-sided/unbounded rules as ``solver.solve``,
  computed from the matrix.
- ``lamport_offsets``: Lamport-style bumping: from initial offsets, raise offsets minimally
  until every constraint holds; the least fixpoint x >= initial of
  x[src] >= x[dst] - weight, i.e. x[v] = max over u of (initial[u] - dist(v -> u)), computed
  with Dijkstra on reduced weights instead of a Bellman-Ford sweep (same fixpoint, faster).

Nothing here checks that constraints are sound; indexes and weights are validated as in
``solver.py``.
"""

from __future__ import annotations

import math

import numpy as np

from cell_otf2.model import SyncSolution
from cell_otf2.sync.solver import BOTH, LOWER, NONE, UPPER, as_edges, reduced_graph

#: the paper's relaxation stops when the most negative diagonal entry is above -this
_PAPER_TOL = 1e-9
_PAPER_MAX_ROUNDS = 200


def floyd_warshall(n: int, src, dst, weight, stop_at_negative: bool = False) -> np.ndarray:
    """All-pairs shortest distances (numpy-vectorized FW); D[i, i] < 0 on negative cycles.

    With negative cycles the full run composes them and the diagonal grows like 2**n (walks,
    not cycles); ``stop_at_negative`` ends the run after the first pivot that makes a diagonal
    entry negative, when each negative entry is one closed walk of simple paths.
    """
    src, dst, weight = as_edges(n, src, dst, weight)
    D = np.full((n, n), np.inf)
    np.minimum.at(D, (src, dst), weight)
    idx = np.arange(n)
    D[idx, idx] = np.minimum(D[idx, idx], 0.0)
    for k in range(n):
        np.minimum(D, D[:, k, None] + D[None, k, :], out=D)
        if stop_at_negative and D[idx, idx].min() < 0:
            break
    return D


def _offsets_from_matrix(
    D: np.ndarray, reference: int, alpha: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """offset, lower, upper, bounded from an all-pairs matrix (rules of sync.solve)."""
    n = D.shape[0]
    upper = D[reference].copy()
    lower = -D[:, reference]
    upper[reference] = lower[reference] = 0.0
    has_up, has_lo = np.isfinite(upper), np.isfinite(lower)
    both = has_up & has_lo
    offset = np.full(n, np.nan)
    offset[both] = alpha * upper[both] + (1.0 - alpha) * lower[both]
    up_only = has_up & ~has_lo
    if up_only.any():
        placed = np.flatnonzero(both)
        offset[up_only] = (offset[placed][:, None] + D[np.ix_(placed, up_only)]).min(axis=0)
    lo_only = has_lo & ~has_up
    if lo_only.any():
        placed = np.flatnonzero(both | up_only)
        offset[lo_only] = (offset[placed][None, :] - D[np.ix_(lo_only, placed)]).max(axis=1)
    bounded = np.full(n, NONE, dtype="<U5")
    bounded[both] = BOTH
    bounded[up_only] = UPPER
    bounded[lo_only] = LOWER
    return offset, lower, upper, bounded


def paper_solve(n: int, src, dst, weight, reference: int) -> tuple[SyncSolution, np.ndarray]:
    """The published algorithm; returns the solution and the final FW matrix D.

    ``relaxation`` is the sum of the d/2 bumps; D is for the weights loosened by it.
    """
    if not 0 <= reference < n:
        raise ValueError(f"reference {reference} not in [0, {n})")
    src, dst, weight = as_edges(n, src, dst, weight)
    relaxation = 0.0
    for _ in range(_PAPER_MAX_ROUNDS):
        D = floyd_warshall(n, src, dst, weight + relaxation, stop_at_negative=True)
        most_negative = float(np.diag(D).min())
        if most_negative >= -_PAPER_TOL:
            break
        relaxation += -most_negative / 2.0
    else:
        raise RuntimeError("paper relaxation did not converge")
    offset, lower, upper, bounded = _offsets_from_matrix(D, reference, 0.5)
    sol = SyncSolution(
        offset=offset,
        lower=lower,
        upper=upper,
        bounded=bounded,
        relaxation=relaxation,
        reference=int(reference),
        alpha=0.5,
        n_constraints=int(src.size),
        n_edges=int(np.unique(src * n + dst).size),
    )
    return sol, D


def lamport_offsets(
    n: int, src, dst, weight, initial, *, reference: int = 0, relaxation: float = 0.0
) -> np.ndarray:
    """Raise offsets from ``initial`` minimally until x[dst] - x[src] <= weight + relaxation.

    The least fixpoint may raise the reference too (Lamport bumps whichever clock is behind);
    the result is then shifted so the reference keeps its initial offset, which is the same
    correction expressed relative to the reference. Domains that no constraint touches keep
    their initial offset. Raises ValueError when the loosened system is infeasible (no
    fixpoint exists: bumping would never end).
    """
    src, dst, weight = as_edges(n, src, dst, weight)
    initial = np.asarray(initial, dtype=np.float64)
    if initial.shape != (n,) or not np.isfinite(initial).all():
        raise ValueError("initial must be n finite offsets")
    if not 0 <= reference < n:
        raise ValueError(f"reference {reference} not in [0, {n})")
    graph, potential = reduced_graph(n, src, dst, weight, anchor=reference)
    need = potential.relaxation
    if relaxation < need - 1e-9 * max(1.0, abs(need)):
        raise ValueError(
            f"constraints infeasible with relaxation {relaxation}: need {need} (negative cycles)"
        )
    graph = graph.loosened(max(0.0, relaxation - need))
    seeds = np.arange(n)
    x = -graph.multi_source(seeds, -initial, reverse=True)
    x = np.maximum(x, initial)  # guard rounding: never below the start
    shift = x[reference] - initial[reference]
    return x - shift if math.isfinite(shift) else x
