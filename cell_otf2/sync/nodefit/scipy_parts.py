"""scipy's compiled modules that the node fit calls (the sparse kernels, SuperLU, LAPACK,
HiGHS), loaded from their files under their own module names without running the set-up
of the packages around them: ``scipy.sparse``, ``scipy.sparse.csgraph``, ``scipy.linalg``
and ``scipy.optimize`` import hundreds of Python modules (0.1-0.2 s of every conversion of
a cluster run) to reach a few milliseconds of compiled code. A module loaded here is the
one a later ``import`` of scipy finds, not a second copy; where a file is not where this
module looks (another scipy layout), the usual import. Also the banded solve of
``scipy.linalg.solveh_banded`` on that LAPACK, with its checks and results. It holds no
sparse matrix (``compressed.py`` does) and no linear program (``highs.py``)."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

import numpy as np

#: the compiled modules, by their full names
SPARSE_KERNELS = "scipy.sparse._sparsetools"
SUPERLU = "scipy.sparse.linalg._dsolve._superlu"
LAPACK = "scipy.linalg._flapack"
HIGHS = "scipy.optimize._highspy._core"

_LOADING = threading.Lock()  # the fit's linear programs start side by side


def scipy_folder() -> Path | None:
    """scipy's package folder, found without importing scipy (None: not installed)."""
    spec = importlib.util.find_spec("scipy")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def load_by_file(name: str) -> ModuleType | None:
    """The compiled module ``name`` (a full name under ``scipy.``) from its file, entered in
    ``sys.modules`` under that name; the module already there if one is; None where its
    file is not found."""
    with _LOADING:
        loaded = sys.modules.get(name)
        if loaded is not None:
            return loaded
        folder = scipy_folder()
        if folder is None:
            return None
        parts = name.split(".")[1:]
        where = folder.joinpath(*parts[:-1])
        found = [where / f"{parts[-1]}{suffix}"
                 for suffix in importlib.machinery.EXTENSION_SUFFIXES]
        found = [f for f in found if f.is_file()]
        if not found:
            return None
        loader = importlib.machinery.ExtensionFileLoader(name, str(found[0]))
        spec = importlib.util.spec_from_file_location(name, found[0], loader=loader)
        if spec is None:
            return None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return sys.modules.setdefault(name, module)


def compiled(name: str) -> ModuleType:
    """``load_by_file(name)``, or the usual import where that finds nothing or fails."""
    try:
        module = load_by_file(name)
    except (ImportError, OSError, AttributeError, TypeError, ValueError):
        module = None
    return module if module is not None else importlib.import_module(name)


def solveh_banded(ab: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``scipy.linalg.solveh_banded(ab, b)`` for a symmetric positive definite band of three
    or more rows in upper form (LAPACK's ``dpbsv``, as scipy calls it): the same solution;
    ``np.linalg.LinAlgError`` where a leading minor is not positive definite, ValueError
    for a value not finite (scipy's ``check_finite``) or shapes that do not fit."""
    a1 = np.asarray_chkfinite(ab)
    b1 = np.asarray_chkfinite(b)
    if a1.ndim != 2 or a1.shape[0] < 3 or a1.shape[-1] != b1.shape[0]:
        raise ValueError("shapes of ab and b are not compatible.")
    if b1.size == 0:
        return np.empty_like(b1, dtype=np.float64)
    pbsv = compiled(LAPACK).dpbsv
    _, x, info = pbsv(a1, b1, lower=0, overwrite_ab=0, overwrite_b=0)
    if info > 0:
        raise np.linalg.LinAlgError(f"{info}th leading minor not positive definite")
    if info < 0:
        raise ValueError(f"illegal value in {-info}th argument of internal pbsv")
    return x
