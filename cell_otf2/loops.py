"""The per-record loops of reading and decoding: ``gather_fields`` copies chosen fields of
chosen rows of one structured table into another, through the compiled helper
``cell_otf2/_decodeloops.c`` where it is built (setup.py, optional) and the tables allow it,
else through numpy, with the same result either way (``tests/test_decodeloops.py``)."""

from __future__ import annotations

import sys

import numpy as np

try:
    from . import _decodeloops
except ImportError:  # built without a C compiler: numpy does the same
    _decodeloops = None

#: False: always the numpy path (tests compare both)
COMPILED = _decodeloops is not None

_SPECS: dict = {}
_NATIVE = "<" if sys.byteorder == "little" else ">"


def _spec(dst_dtype: np.dtype, src_dtype: np.dtype, pairs: tuple) -> np.ndarray | None:
    """The field table of ``_decodeloops.gather`` for these dtypes, or None when a field is
    not an integer of 1, 2, 4 or 8 bytes (the numpy path then)."""
    key = (dst_dtype, src_dtype, pairs)
    if key in _SPECS:
        return _SPECS[key]
    rows = []
    for d, s in pairs:
        dt, doff = dst_dtype.fields[d][:2]
        st, soff = src_dtype.fields[s][:2]
        if (dt.kind not in "iu" or st.kind not in "iu" or dt.itemsize not in (1, 2, 4, 8)
                or st.itemsize not in (1, 2, 4, 8)
                or (dt.itemsize > 1 and dt.byteorder not in ("=", "|", _NATIVE))):
            rows = None
            break
        swap = st.itemsize > 1 and st.byteorder not in ("=", "|", _NATIVE)
        rows.append((soff, st.itemsize, doff, dt.itemsize, int(swap), int(st.kind == "i")))
    spec = None if rows is None else np.array(rows, dtype=np.int64).reshape(-1, 6)
    _SPECS[key] = spec
    return spec


def gather_fields(dst: np.ndarray, src: np.ndarray, idx: np.ndarray,
                  pairs: tuple[tuple[str, str], ...]) -> None:
    """``dst[d] = src[s][idx]`` for every (d, s) of ``pairs``; ``len(dst) == len(idx)``."""
    idx = np.asarray(idx)
    if len(dst) != idx.size:
        raise ValueError(f"gather_fields: {len(dst)} rows for {idx.size} indexes")
    spec = (_spec(dst.dtype, src.dtype, pairs)
            if COMPILED and dst.ndim == 1 and src.ndim == 1 and dst.flags.c_contiguous
            and src.flags.c_contiguous and dst.dtype.itemsize and src.dtype.itemsize else None)
    if spec is None:
        rows = np.take(src, idx)
        for d, s in pairs:
            dst[d] = rows[s]
        return
    if not idx.size:
        return
    _decodeloops.gather(dst.view(np.uint8), dst.dtype.itemsize,
                        src.view(np.uint8) if src.size else b"", src.dtype.itemsize,
                        np.ascontiguousarray(idx, dtype=np.int64), spec)
