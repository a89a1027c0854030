"""Large zeroed arrays whose memory is mapped in one step (``zeros``): an anonymous mapping
made with ``MAP_POPULATE`` is faulted in and zeroed by the kernel at once, faster than the
page faults of first writes to ``np.zeros``' memory (docs/performance.md), and in ordinary
pages (numpy asks for transparent huge pages, whose faults may first compact memory: see
``zeros``). It decides nothing about what is allocated; small arrays and systems without
``MAP_POPULATE`` get ``np.zeros``."""

from __future__ import annotations

import mmap

import numpy as np

#: arrays below this many bytes come from ``np.zeros`` (glibc's heap serves them again)
POPULATE_FROM = 32 << 20

_FLAGS = (getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
          | getattr(mmap, "MAP_POPULATE", 0))
_POPULATE = bool(getattr(mmap, "MAP_POPULATE", 0) and getattr(mmap, "MAP_ANONYMOUS", 0))
_MADVISE_HUGEPAGE = getattr(getattr(np, "_core", None), "multiarray", None)


def zeros(n: int, dtype: np.dtype) -> np.ndarray:
    """``np.zeros(n, dtype)``, in memory mapped and zeroed at once when it is large (unmapped
    with the array's last view), else from ``np.zeros`` in ordinary pages. With the kernel's
    defrag mode "madvise" (Debian's default) a fault in a huge-page array may first compact
    memory, which makes the time of a large decode vary from run to run; 4 KiB pages do not
    (docs/performance.md)."""
    dtype = np.dtype(dtype)
    size = int(n) * dtype.itemsize
    if _POPULATE and size >= POPULATE_FROM:
        try:
            mapping = mmap.mmap(-1, size, flags=_FLAGS)
        except (OSError, ValueError):
            pass
        else:
            return np.frombuffer(mapping, dtype, int(n))
    switch = getattr(_MADVISE_HUGEPAGE, "_set_madvise_hugepage", None)
    if switch is None:
        return np.zeros(n, dtype)
    before = switch(False)
    try:
        return np.zeros(n, dtype)
    finally:
        switch(before)
