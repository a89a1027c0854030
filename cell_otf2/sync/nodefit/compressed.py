"""Sparse matrices in compressed rows or columns (``Compressed``) for the node fit's least
squares and linear programs, with the few operations the fit uses (building from triplets,
transposing, products with matrices and vectors, sums, choosing rows, stacking) and the
two SuperLU solves (``spsolve``, ``solve_diagonal``). Every operation calls the compiled
kernel that ``scipy.sparse`` calls for it, on the same arrays in the same order, so the
floats are scipy's own (``tests/test_compressed.py`` compares them bit for bit), without
importing ``scipy.sparse`` (``scipy_parts.py`` loads the kernels). Only float64 data;
what the fit does not use is not here. It knows nothing of clocks."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from .scipy_parts import SPARSE_KERNELS, SUPERLU, compiled

_INT32_MAX = np.iinfo(np.int32).max


def _kernels() -> ModuleType:
    return compiled(SPARSE_KERNELS)


def _index_dtype(*sizes: int) -> np.dtype[Any]:
    """int32 where every index and count fits, as scipy chooses, else int64."""
    return np.dtype(np.int32 if max(sizes, default=0) <= _INT32_MAX else np.int64)


@dataclass
class Compressed:
    """A matrix in compressed rows (``fmt`` "csr") or columns ("csc"): ``indptr`` over the
    major dimension (rows of csr, columns of csc), ``indices`` along the minor one, ``data``
    float64; entries may be unsorted or repeated within a major slice until
    ``sum_duplicates``, as in scipy."""

    fmt: str
    shape: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def T(self) -> Compressed:  # noqa: N802 - the usual name of a transpose
        """The transpose: the same arrays read the other way (scipy's ``.T``)."""
        return Compressed("csc" if self.fmt == "csr" else "csr", self.shape[::-1],
                          self.indptr, self.indices, self.data)

    def _major_minor(self) -> tuple[int, int]:
        return self.shape if self.fmt == "csr" else (self.shape[1], self.shape[0])

    def canonical(self) -> bool:
        """Sorted within every major slice and no entry repeated."""
        return bool(_kernels().csr_has_canonical_format(len(self.indptr) - 1, self.indptr,
                                                        self.indices))

    def sum_duplicates(self) -> None:
        """Sort each major slice and add repeated entries together, in place (scipy's
        ``sum_duplicates``: a canonical matrix is left alone)."""
        if self.canonical():
            return
        k = _kernels()
        m, n = self._major_minor()
        if not k.csr_has_sorted_indices(len(self.indptr) - 1, self.indptr, self.indices):
            k.csr_sort_indices(len(self.indptr) - 1, self.indptr, self.indices, self.data)
        k.csr_sum_duplicates(m, n, self.indptr, self.indices, self.data)
        self.indices = self.indices[:self.nnz].copy()
        self.data = self.data[:self.nnz].copy()

    def converted(self, fmt: str) -> Compressed:
        """This matrix in ``fmt`` (itself where it is in it already; scipy's ``asformat``)."""
        if fmt == self.fmt:
            return self
        if fmt not in ("csr", "csc"):
            raise ValueError(f"no sparse format {fmt!r}")
        m, n = self._major_minor()
        it = _index_dtype(self.nnz, m, n)
        indptr = np.empty(n + 1, dtype=it)
        indices = np.empty(self.nnz, dtype=it)
        data = np.empty(self.nnz, dtype=np.float64)
        _kernels().csr_tocsc(m, n, self.indptr.astype(it, copy=False),
                             self.indices.astype(it, copy=False), self.data,
                             indptr, indices, data)
        return Compressed(fmt, self.shape, indptr, indices, data)

    def __mul__(self, scale: float) -> Compressed:
        return Compressed(self.fmt, self.shape, self.indptr, self.indices.copy(),
                          self.data * scale)

    __rmul__ = __mul__

    def __add__(self, other: Compressed) -> Compressed:
        """The sum, in this matrix's format (scipy's ``_binopt`` with ``csr_plus_csr``:
        sums that are exactly zero are not stored)."""
        if other.shape != self.shape:
            raise ValueError(f"inconsistent shapes {self.shape} and {other.shape}")
        other = other.converted(self.fmt)
        nnz_max = self.nnz + other.nnz
        m, n = self._major_minor()
        it = _index_dtype(nnz_max, m, n)
        indptr = np.empty(self.indptr.shape, dtype=it)
        indices = np.empty(nnz_max, dtype=it)
        data = np.empty(nnz_max, dtype=np.float64)
        _kernels().csr_plus_csr(m, n, self.indptr.astype(it, copy=False),
                                self.indices.astype(it, copy=False), self.data,
                                other.indptr.astype(it, copy=False),
                                other.indices.astype(it, copy=False), other.data,
                                indptr, indices, data)
        nnz = int(indptr[-1])
        return Compressed(self.fmt, self.shape, indptr, indices[:nnz].copy(),
                          data[:nnz].copy())

    def __matmul__(self, other: Any) -> Any:
        if isinstance(other, Compressed):
            return self._times_matrix(other)
        return self._times_vector(np.asarray(other))

    def _times_vector(self, x: np.ndarray) -> np.ndarray:
        if x.ndim != 1 or x.shape[0] != self.shape[1]:
            raise ValueError(f"dimension mismatch: {self.shape} @ {x.shape}")
        result = np.zeros(self.shape[0], dtype=np.float64)
        kernel = _kernels().csr_matvec if self.fmt == "csr" else _kernels().csc_matvec
        kernel(self.shape[0], self.shape[1], self.indptr, self.indices, self.data,
               np.asarray(x, dtype=np.float64), result)
        return result

    def _times_matrix(self, other: Compressed) -> Compressed:
        """The product in this matrix's format (scipy's ``_matmul_sparse``: the other
        converted to this format, then ``csr_matmat`` on rows, or on columns of both)."""
        if other.shape[0] != self.shape[1]:
            raise ValueError(f"dimension mismatch: {self.shape} @ {other.shape}")
        new_shape = (self.shape[0], other.shape[1])
        other = other.converted(self.fmt)
        m, n = new_shape if self.fmt == "csr" else new_shape[::-1]
        s, o = (self, other) if self.fmt == "csr" else (other, self)
        it = _index_dtype(s.nnz, o.nnz, *self.shape, *other.shape)
        k = _kernels()
        sp, si = s.indptr.astype(it, copy=False), s.indices.astype(it, copy=False)
        op, oi = o.indptr.astype(it, copy=False), o.indices.astype(it, copy=False)
        nnz = int(k.csr_matmat_maxnnz(m, n, sp, si, op, oi))
        if nnz == 0:
            return zeros(new_shape, self.fmt)
        wide = _index_dtype(nnz, s.nnz, o.nnz, *self.shape, *other.shape)
        if wide != it:
            sp, si, op, oi = (a.astype(wide) for a in (sp, si, op, oi))
        indptr = np.empty(m + 1, dtype=wide)
        indices = np.empty(nnz, dtype=wide)
        data = np.empty(nnz, dtype=np.float64)
        k.csr_matmat(m, n, sp, si, s.data, op, oi, o.data, indptr, indices, data)
        return Compressed(self.fmt, new_shape, indptr, indices, data)

    def rows(self, mask: np.ndarray) -> Compressed:
        """The rows where the boolean ``mask`` holds, in order (a csr matrix; scipy's
        ``m[mask]``: each row's entries copied as they are)."""
        if self.fmt != "csr":
            raise ValueError("rows are chosen from compressed rows only")
        take = np.flatnonzero(mask)
        lengths = self.indptr[take + 1] - self.indptr[take]
        indptr = np.zeros(take.size + 1, dtype=self.indptr.dtype)
        np.cumsum(lengths, out=indptr[1:])
        starts = np.repeat(self.indptr[take] - indptr[:-1], lengths)
        at = starts + np.arange(int(indptr[-1]), dtype=starts.dtype)
        return Compressed("csr", (take.size, self.shape[1]), indptr, self.indices[at],
                          self.data[at])


def zeros(shape: tuple[int, int], fmt: str = "csr") -> Compressed:
    """An empty matrix (no entries stored)."""
    major = shape[0] if fmt == "csr" else shape[1]
    it = _index_dtype(*shape)
    return Compressed(fmt, (int(shape[0]), int(shape[1])), np.zeros(major + 1, dtype=it),
                      np.zeros(0, dtype=it), np.zeros(0, dtype=np.float64))


def from_triplets(values: np.ndarray, row: np.ndarray, col: np.ndarray,
                  shape: tuple[int, int], fmt: str = "csr") -> Compressed:
    """``values`` at (``row``, ``col``), repeated positions added together (scipy's
    ``csr_matrix((values, (row, col)), shape)``, or csc)."""
    shape = (int(shape[0]), int(shape[1]))
    values = np.asarray(values, dtype=np.float64)
    major, minor = (row, col) if fmt == "csr" else (col, row)
    m, n = shape if fmt == "csr" else shape[::-1]
    if values.size and (min(int(np.min(row)), int(np.min(col))) < 0
                        or int(np.max(row)) >= shape[0] or int(np.max(col)) >= shape[1]):
        raise IndexError(f"an entry outside the {shape[0]} x {shape[1]} matrix")
    it = _index_dtype(values.size, n)
    indptr = np.empty(m + 1, dtype=it)
    indices = np.empty(values.size, dtype=it)
    data = np.empty(values.size, dtype=np.float64)
    _kernels().coo_tocsr(m, n, values.size, np.asarray(major, dtype=it),
                         np.asarray(minor, dtype=it), values, indptr, indices, data)
    out = Compressed(fmt, shape, indptr, indices, data)
    out.sum_duplicates()
    return out


def identity(n: int, scale: float = 1.0, fmt: str = "csc") -> Compressed:
    """``scale`` times the n x n identity."""
    it = _index_dtype(n + 1)
    return Compressed(fmt, (n, n), np.arange(n + 1, dtype=it), np.arange(n, dtype=it),
                      np.full(n, 1.0) * scale)


def vstack(blocks: list[Compressed]) -> Compressed:
    """Compressed-row blocks of one width, one under the other (csr)."""
    width = blocks[0].shape[1]
    if any(b.fmt != "csr" or b.shape[1] != width for b in blocks):
        raise ValueError("vstack: compressed rows of one width only")
    nnz = sum(b.nnz for b in blocks)
    height = sum(b.shape[0] for b in blocks)
    it = _index_dtype(nnz, height, width)
    offsets = np.cumsum([0] + [b.nnz for b in blocks[:-1]])
    indptr = np.concatenate([np.zeros(1, dtype=it)] + [
        (b.indptr[1:] + off).astype(it) for b, off in zip(blocks, offsets, strict=True)])
    return Compressed("csr", (height, width), indptr,
                      np.concatenate([b.indices.astype(it) for b in blocks]),
                      np.concatenate([b.data for b in blocks]))


def _superlu_input(a: Compressed) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if a.shape[0] != a.shape[1]:
        raise ValueError(f"matrix must be square (has shape {a.shape})")
    a.sum_duplicates()
    return (a.data, a.indices.astype(np.intc, copy=False),
            a.indptr.astype(np.intc, copy=False))


def spsolve(a: Compressed, b: np.ndarray) -> np.ndarray:
    """``scipy.sparse.linalg.spsolve(a, b)`` for a vector ``b`` (SuperLU with its default
    column order, no UMFPACK): the same solution; NaN everywhere where ``a`` is exactly
    singular."""
    data, indices, indptr = _superlu_input(a)
    b = np.asarray(b, dtype=np.float64)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"matrix - rhs dimension mismatch ({a.shape} - {b.shape[0]})")
    x, info = compiled(SUPERLU).gssv(a.shape[1], a.nnz, data, indices, indptr, b,
                                     1 if a.fmt == "csc" else 0,
                                     options={"ColPerm": None})
    if info != 0:
        x.fill(np.nan)
    return x.ravel()


def solve_diagonal(a: Compressed, b: np.ndarray, fill_reducing: bool = False) -> np.ndarray:
    """``splu(a, permc_spec=ORDER, diag_pivot_thresh=0.0, options={"SymmetricMode":
    True}).solve(b)`` for a csc matrix with the diagonal as pivots (``estimate.py`` says
    why): ORDER "NATURAL", the unknowns' own order, or with ``fill_reducing``
    "MMD_AT_PLUS_A", SuperLU's minimum degree order of ``a + a'``. RuntimeError where a
    pivot is exactly zero."""
    if a.fmt != "csc":
        a = a.converted("csc")
    data, indices, indptr = _superlu_input(a)
    options = {"DiagPivotThresh": 0.0,
               "ColPerm": "MMD_AT_PLUS_A" if fill_reducing else "NATURAL", "PanelSize": None,
               "Relax": None, "SymmetricMode": True}
    lu = compiled(SUPERLU).gstrf(a.shape[1], a.nnz, data, indices, indptr,
                                 csc_construct_func=_factor_part, ilu=False, options=options)
    return np.atleast_1d(lu.solve(np.asarray(b, dtype=np.float64)))


def _factor_part(arrays: tuple, shape: tuple[int, int]) -> Compressed:
    """A factor's L or U as SuperLU hands it over (data, indices, indptr)."""
    data, indices, indptr = arrays
    return Compressed("csc", (int(shape[0]), int(shape[1])), np.asarray(indptr),
                      np.asarray(indices), np.asarray(data, dtype=np.float64))
