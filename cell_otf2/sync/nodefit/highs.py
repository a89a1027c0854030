"""A linear program that grows by rows between solves (``GrowingLp``: minimize ``cost @ x``
subject to ``A x <= b`` and column bounds), for the node fit's row generation: the first solve
by HiGHS's interior point method with crossover, as scipy's ``linprog(method="highs-ipm")``
does it; later solves, after rows are added, by the dual simplex from the last basis, which
the added rows leave dual feasible (tens of pivots instead of a new interior-point solve),
unless more than a few hundred rows were added: then afresh, as the first.
The model is kept in the HiGHS library's own object, through the bindings that scipy ships
(``scipy.optimize._highspy``, scipy 1.15 and later); where they are missing, or not as
this module knows them, every solve is ``linprog`` over all rows from scratch, with the same
optimum. It builds no rows (``program.py`` does)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .compressed import Compressed, vstack
from .scipy_parts import HIGHS, compiled


def _bindings() -> Any:
    """HiGHS's own bindings as scipy bundles them (its ``linprog`` calls the same library),
    None before scipy 1.15. Loaded on first use from scipy's folder without running
    ``scipy.optimize``'s package set-up, which imports every optimizer (0.16 s here against
    0.006 s for the bindings alone); the usual import where that fails
    (``scipy_parts.compiled``)."""
    try:
        return compiled(HIGHS)
    except ImportError:
        return None


#: rows added since the last solve beyond which the next solve starts afresh (the interior
#: point method) instead of running the dual simplex on from the last basis: each added row
#: the last solution breaks costs the simplex pivots over the whole program, and a solve
#: afresh costs about what three or four warm solves of a few rows do. Measured: a 20-node
#: one-way ring exchanging every 5 s for 10 minutes (14 k rows x 3.4 k columns) took 3.0 s
#: warm to add 1,650 rows and 1.0 s to add 470, against 0.35-0.4 s afresh; a 16-node ring
#: exchanging every 0.5 s (5.4 k rows) 0.08 s warm to add 117, against 0.18 s afresh
_FRESH_ROWS = 400


class LpFailed(RuntimeError):
    """HiGHS found no optimal solution (its status in the message)."""


class GrowingLp:
    """Minimize ``cost @ x`` with ``bounds`` (n x 2, +-inf for none) over the rows added so
    far (``add_rows``), each ``row @ x <= rhs``; ``solve`` returns x."""

    def __init__(self, cost: np.ndarray, bounds: np.ndarray, warm: bool = True) -> None:
        self.cost = np.asarray(cost, dtype=np.float64)
        self.bounds = np.asarray(bounds, dtype=np.float64)
        self.n_rows = 0
        self.warm = warm and _bindings() is not None
        self._blocks: list[Compressed] = []  # every row so far, in blocks (csr)
        self._rhs: list[np.ndarray] = []
        self._in_model = 0  # blocks HiGHS holds
        self._highs: Any = None  # the HiGHS object (its bindings ship no types)
        #: solves the library began afresh (the first, and each after more than
        #: ``_FRESH_ROWS`` rows were added)
        self.fresh_solves = 0

    def add_rows(self, rows: Any, rhs: np.ndarray) -> None:
        """Rows ``rows @ x <= rhs`` (``rows`` with the program's columns: a ``Compressed``
        or a scipy sparse matrix)."""
        if not isinstance(rows, Compressed):
            rows = rows.tocsr()
            rows.sum_duplicates()
            rows = Compressed("csr", rows.shape, rows.indptr, rows.indices,
                              np.asarray(rows.data, dtype=np.float64))
        self._blocks.append(rows.converted("csr"))
        self._rhs.append(np.asarray(rhs, dtype=np.float64))
        self.n_rows += self._blocks[-1].shape[0]

    def solve(self) -> np.ndarray:
        """The optimum over every row added so far; ``LpFailed`` where HiGHS finds none."""
        if self.warm:
            try:
                return self._warm_solve()
            except (AttributeError, TypeError, ValueError):
                # bindings not as this code knows them (a private module of scipy may
                # change): this program goes on from scratch
                self.warm, self._highs = False, None
        return self._from_scratch()

    def _warm_solve(self) -> np.ndarray:
        h = _bindings()
        held = sum(b.shape[0] for b in self._blocks[:self._in_model])
        if self._highs is None or self.n_rows - held > _FRESH_ROWS:
            self._highs = self._first_model(h)
            self.fresh_solves += 1
        else:
            for rows, rhs in zip(self._blocks[self._in_model:], self._rhs[self._in_model:],
                                 strict=True):
                if not rhs.size:
                    continue
                self._highs.addRows(rows.shape[0], np.full(rhs.size, -h.kHighsInf), rhs,
                                    rows.nnz, rows.indptr[:-1].astype(np.int32),
                                    rows.indices.astype(np.int32), rows.data)
            self._highs.setOptionValue("solver", "simplex")
        self._in_model = len(self._blocks)
        self._highs.run()
        status = self._highs.getModelStatus()
        if status != h.HighsModelStatus.kOptimal:
            raise LpFailed(f"node fit: HiGHS found no solution "
                           f"({self._highs.modelStatusToString(status)})")
        return np.asarray(self._highs.getSolution().col_value, dtype=np.float64)

    def _first_model(self, h: Any) -> Any:
        rows = vstack(self._blocks).converted("csc")
        rhs = np.concatenate(self._rhs)
        lp = h.HighsLp()
        lp.num_col_, lp.num_row_ = self.cost.size, rhs.size
        lp.col_cost_ = self.cost
        lp.col_lower_ = np.where(np.isfinite(self.bounds[:, 0]), self.bounds[:, 0],
                                 -h.kHighsInf)
        lp.col_upper_ = np.where(np.isfinite(self.bounds[:, 1]), self.bounds[:, 1],
                                 h.kHighsInf)
        lp.row_lower_ = np.full(rhs.size, -h.kHighsInf)
        lp.row_upper_ = rhs
        lp.a_matrix_.format_ = h.MatrixFormat.kColwise
        lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = self.cost.size, rhs.size
        lp.a_matrix_.start_ = rows.indptr
        lp.a_matrix_.index_ = rows.indices
        lp.a_matrix_.value_ = rows.data
        highs = h._Highs()
        for key, value in (("output_flag", False), ("log_to_console", False),
                           ("solver", "ipm"), ("run_crossover", "on"),
                           ("simplex_strategy", 1)):  # 1: the dual simplex
            highs.setOptionValue(key, value)
        if highs.passModel(lp) == h.HighsStatus.kError:
            raise LpFailed("node fit: HiGHS refused the program")
        return highs

    def _from_scratch(self) -> np.ndarray:
        # imported here, as ``program.py`` did: a conversion that never fits saves the import
        from scipy.optimize import linprog
        from scipy.sparse import csr_matrix

        rows = vstack(self._blocks)
        res = linprog(self.cost, A_ub=csr_matrix((rows.data, rows.indices, rows.indptr),
                                                  shape=rows.shape),
                      b_ub=np.concatenate(self._rhs), bounds=self.bounds, method="highs-ipm")
        if res.x is None or res.status != 0:
            raise LpFailed(f"node fit: HiGHS found no solution ({res.message})")
        return np.asarray(res.x, dtype=np.float64)
