"""Process-wide settings the ``cell2otf2`` command makes for its own process, and only the command
(``__main__`` and ``cli.main`` call them): numpy's OpenBLAS on one thread, numpy's optional
submodules loaded only when used, Open MPI's shared-memory messaging when every process of a
launch is on one host, and glibc's malloc thresholds. The library (``import cell_otf2``,
``cell_otf2.convert``) calls none of them: a program that converts through it keeps its
environment and its allocator as it set them, and may call these itself. Why each pays off is
in docs/performance.md. Nothing else here.
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import sys
from collections.abc import MutableMapping

_log = logging.getLogger(__name__)

#: numpy's submodules that numpy imports only when asked for and a conversion never uses;
#: scipy's array-API layer asks for each of them at import (it copies numpy's namespace).
#: ``numpy.random`` (scipy's own import uses it) and ``numpy.ma`` (``numpy.unique`` does)
#: would be loaded at once anyway
NUMPY_EXTRAS = ("f2py", "testing", "polynomial", "ctypeslib")

#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: blocks below this come from glibc's heap, not from a mapping of their own: the stages'
#: numpy temporaries (up to a few MB each) and OTF2's 1 MiB event chunks
HEAP_BLOCKS_BELOW = 32 << 20
#: free memory at the top of the heap kept instead of given back to the system
HEAP_KEPT = 64 << 20


def one_blas_thread(env: MutableMapping[str, str]) -> None:
    """OpenBLAS on one thread unless ``OPENBLAS_NUM_THREADS`` says otherwise: numpy's and
    scipy's OpenBLAS start a thread per core at import, whose spinning costs every command
    CPU time, and the converter makes no BLAS call that threads would speed up. Only takes
    effect before numpy is imported."""
    env.setdefault("OPENBLAS_NUM_THREADS", "1")


def defer_numpy_extras() -> int:
    """Make each of numpy's ``NUMPY_EXTRAS`` not yet imported a module that loads itself on
    first use (``importlib.util.LazyLoader``): scipy's array-API layer, imported with
    ``scipy.sparse``, looks each of them up when it copies numpy's namespace, and loading them
    costs about 0.09 s of every command (``numpy.f2py`` and ``numpy.testing`` 40 ms each)
    for modules the conversion never touches. Whoever uses one gets it whole, on first
    attribute access. Imports numpy; call it after ``one_blas_thread``. Returns how many were
    deferred (none that cannot be found, or that are loaded already)."""
    import numpy

    deferred = 0
    for name in NUMPY_EXTRAS:
        full = f"numpy.{name}"
        if full in sys.modules:
            continue
        spec = importlib.util.find_spec(full)
        if spec is None or spec.loader is None:
            continue
        loader = importlib.util.LazyLoader(spec.loader)
        spec.loader = loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        loader.exec_module(module)
        # as an import would: the parent's attribute, so numpy's own lazy lookup is not asked
        setattr(numpy, name, module)
        deferred += 1
    return deferred


def single_host_transport(env: MutableMapping[str, str]) -> None:
    """Open MPI on one host: choose its shared-memory messaging (``pml ob1``) unless the user
    chose a messaging layer. Its default start-up first tries the network fabrics' layer
    (``pml cm`` over PSM, PSM2, OFI), which costs a fraction of a second per process on a
    machine without them and can only lose to shared memory when every process is on one host.
    Set when Open MPI reports every process local (``OMPI_COMM_WORLD_LOCAL_SIZE`` =
    ``OMPI_COMM_WORLD_SIZE``) and ``OMPI_MCA_pml`` is unset (``mpiexec --mca pml X`` sets it);
    a value from an MCA parameter file is overridden. Other launchers: nothing. Only takes
    effect before MPI is initialized (mpi4py imported)."""
    size = env.get("OMPI_COMM_WORLD_SIZE")
    if size and env.get("OMPI_COMM_WORLD_LOCAL_SIZE") == size and "OMPI_MCA_pml" not in env:
        env["OMPI_MCA_pml"] = "ob1"
        _log.debug("every MPI process is on this host: Open MPI's ob1 messaging")


def tune_malloc() -> bool:
    """Tell glibc to serve blocks below ``HEAP_BLOCKS_BELOW`` from its heap and to keep up to
    ``HEAP_KEPT`` of free memory: the stages' temporaries, made and freed by every chunk,
    dump and context, and each location's OTF2 event chunks, freed when its writer closes,
    then reuse memory instead of faulting in fresh mappings. True if it was done; not glibc
    (no ``mallopt``): nothing, False."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        _log.debug("no mallopt (not glibc): malloc left as it is")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCKS_BELOW)
                and mallopt(_M_TRIM_THRESHOLD, HEAP_KEPT))
