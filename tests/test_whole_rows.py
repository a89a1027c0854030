"""Whole-row copies (native/whole_rows.py) give numpy's own result byte for byte, dtype
included: gathers by index and by mask, scatters, joins, on the packed tables (records,
anchors), on a dtype with padding (field for field) and on plain arrays (those two through
numpy), on strided views too."""

from __future__ import annotations

import numpy as np
import pytest

from cell_otf2.model import ANCHOR_DTYPE, RECORD_DTYPE
from cell_otf2.native import whole_rows

PADDED = np.dtype({"names": ["a", "b"], "formats": ["<u1", "<i8"], "offsets": [0, 8],
                   "itemsize": 24})


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype and bytes; field by field where the dtype has padding (numpy leaves a new
    table's padding bytes as they come)."""
    if a.dtype != b.dtype:
        return False
    if a.dtype is PADDED or a.dtype == PADDED:
        return all(np.array_equal(a[name], b[name]) for name in PADDED.names)
    return a.tobytes() == b.tobytes()


def table(dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    raw = np.random.default_rng(seed).integers(0, 256, n * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype)


@pytest.mark.parametrize("dtype", [RECORD_DTYPE, ANCHOR_DTYPE, PADDED, np.dtype("<i8")])
@pytest.mark.parametrize("seed", range(4))
def test_same_bytes_as_numpy(dtype, seed):
    rng = np.random.default_rng(seed)
    t = table(dtype, 500, seed)
    for view in (t, t[::3], t[7:]):
        idx = rng.integers(0, view.size, 300)
        mask = rng.random(view.size) < 0.4
        assert same(whole_rows.take(view, idx), view[idx])
        assert same(whole_rows.take(view, mask), view[mask])
    dst_a, dst_b = table(dtype, 800, seed + 10), table(dtype, 800, seed + 10)
    idx = rng.permutation(800)[:500]
    dst_a[idx] = t
    whole_rows.put(dst_b, idx, t)
    assert same(dst_a, dst_b)
    parts = [t[:100], t[100:101], t[101:0], t[101:]]
    assert same(whole_rows.concatenate(parts), np.concatenate(parts))


def test_other_dtypes_go_through_numpy():
    dst = np.zeros(4, np.int64)
    whole_rows.put(dst, np.array([1, 3]), np.array([5, 6], dtype=np.int32))
    assert dst.tolist() == [0, 5, 0, 6]
    assert whole_rows.concatenate([np.zeros(1, "<i4"), np.ones(1, "<i8")]).dtype == np.int64
